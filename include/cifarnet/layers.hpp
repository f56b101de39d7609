// cifarnet/layers.hpp — every layer type.
#pragma once

#include "cifarnet/layers/activation.hpp"
#include "cifarnet/layers/batch_norm.hpp"
#include "cifarnet/layers/conv2d.hpp"
#include "cifarnet/layers/conv_bn.hpp"
#include "cifarnet/layers/dense.hpp"
#include "cifarnet/layers/lrn.hpp"
#include "cifarnet/layers/options.hpp"
#include "cifarnet/layers/pool.hpp"
#include "cifarnet/layers/shape_ops.hpp"
#include "cifarnet/layers/tap.hpp"
