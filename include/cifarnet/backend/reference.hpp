// cifarnet/backend/reference.hpp — the reference backend: every op in plain
// C++ loops (matrix products through xtensor-blas), for any scalar type.
#pragma once

#include "cifarnet/backend/reference/arena.hpp"
#include "cifarnet/backend/reference/batch_norm.hpp"
#include "cifarnet/backend/reference/conv2d.hpp"
#include "cifarnet/backend/reference/dense.hpp"
#include "cifarnet/backend/reference/elementwise.hpp"
#include "cifarnet/backend/reference/gelu.hpp"
#include "cifarnet/backend/reference/gemm.hpp"
#include "cifarnet/backend/reference/lrn.hpp"
#include "cifarnet/backend/reference/pool2d.hpp"
#include "cifarnet/backend/reference/relu.hpp"
