// cifarnet/backend/onednn.hpp — the oneDNN CPU backend (float only): every op
// as a specialization ops::X<backend::OneDnn, float>, primitives built once
// per geometry and reused, activations in the network's plain nchw/nhwc
// layout. Include this header to use backend::OneDnn.
#pragma once

#include "cifarnet/backend/onednn/batch_norm.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/conv2d.hpp"
#include "cifarnet/backend/onednn/dense.hpp"
#include "cifarnet/backend/onednn/elementwise.hpp"
#include "cifarnet/backend/onednn/gelu.hpp"
#include "cifarnet/backend/onednn/gemm.hpp"
#include "cifarnet/backend/onednn/lrn.hpp"
#include "cifarnet/backend/onednn/pool2d.hpp"
#include "cifarnet/backend/onednn/relu.hpp"
