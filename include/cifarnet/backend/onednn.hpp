// cifarnet/backend/onednn.hpp — the oneDNN CPU backend (float only): every op
// as a specialization ops::X<backend::OneDnn, float>, primitives built once
// per geometry and reused, activations in the network's plain nchw/nhwc
// layout. Include this header to use backend::OneDnn.
#pragma once

#include "cifarnet/backend/onednn/batch_norm.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/conv2d.hpp"
#include "cifarnet/backend/onednn/conv_epilogue.hpp"
#include "cifarnet/backend/onednn/dense.hpp"
#include "cifarnet/backend/onednn/elementwise.hpp"
#include "cifarnet/backend/onednn/gelu.hpp"
#include "cifarnet/backend/onednn/gemm.hpp"
#include "cifarnet/backend/onednn/lrn.hpp"
#include "cifarnet/backend/onednn/pool2d.hpp"
#include "cifarnet/backend/onednn/relu.hpp"

#if defined(CIFARNET_COMPILED_LIB) && !defined(CIFARNET_BUILDING_COMPILED_LIB)
// Compiled mode (core/compiled.hpp): these ops are instantiated once, in the
// library cifarnet_compiled; here they are declarations only.
#include "cifarnet/backend/onednn/compiled_ops.hpp"
namespace cifarnet {
#define CIFARNET_EXTERN_TEMPLATE(kind, ...) extern template kind __VA_ARGS__;
CIFARNET_ONEDNN_COMPILED_OPS(CIFARNET_EXTERN_TEMPLATE)
#undef CIFARNET_EXTERN_TEMPLATE
#define CIFARNET_EXTERN_MEMBER(...) extern template __VA_ARGS__;
CIFARNET_ONEDNN_COMPILED_MEMBERS(CIFARNET_EXTERN_MEMBER)
#undef CIFARNET_EXTERN_MEMBER
}  // namespace cifarnet
#endif
