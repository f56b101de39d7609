// cifarnet/backend/onednn/compiled_ops.hpp — the oneDNN backend's ops that
// the compiled mode builds once (core/compiled.hpp): the list, as an X-macro,
// that backend/onednn.hpp declares `extern template` with
// CIFARNET_COMPILED_LIB defined and that the library `cifarnet_compiled`
// (src/onednn_ops.cpp) instantiates. A class here must be a template
// specialization whose member functions are defined in its class with
// CIFARNET_OUTLINE. Member templates are covered only at the instances
// CIFARNET_ONEDNN_COMPILED_MEMBERS lists; any other instance, and every op
// of a translation unit that includes an op's header without
// backend/onednn.hpp, is compiled where it is used (correct, not faster).
#pragma once

#include <cstddef>
#include <cstdint>

#define CIFARNET_ONEDNN_COMPILED_OPS(X)                                                                \
  X(struct, ops::Conv2d<backend::OneDnn, float>)                                                       \
  X(struct, ops::ConvEpilogue<backend::OneDnn, float>)                                                 \
  X(struct, ops::BatchNorm<backend::OneDnn, float>)                                                    \
  X(struct, ops::Pool2d<backend::OneDnn, float>)                                                       \
  X(struct, ops::Lrn<backend::OneDnn, float>)                                                          \
  X(struct, ops::Relu<backend::OneDnn, float>)                                                         \
  X(struct, ops::Gelu<backend::OneDnn, float>)                                                         \
  X(struct, ops::Dense<backend::OneDnn, float>)                                                        \
  X(struct, ops::Gemm<backend::OneDnn, float>)                                                         \
  X(struct, ops::Eltwise<backend::OneDnn, float>)                                                      \
  X(struct, ops::GlobalAvgPool<backend::OneDnn, float>)                                                \
  X(class, backend::onednn::EltwiseUnary<dnnl::algorithm::eltwise_relu_use_dst_for_bwd, DNNL_ARG_DST>) \
  X(class, backend::onednn::EltwiseUnary<dnnl::algorithm::eltwise_gelu_erf, DNNL_ARG_SRC>)             \
  X(struct, backend::host::ArenaOp<float>)                                                             \
  X(class, ops::BackendArenaKernels<backend::OneDnn, float>)

// The public member templates of those ops, at the scalars the layers call
// them with (float, or bfloat16 bits as std::uint16_t).
#define CIFARNET_ONEDNN_COMPILED_MEMBERS(X)                                                                  \
  X(void ops::BatchNorm<backend::OneDnn, float>::forward_train_sum<float, float>(                            \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const float*, const float*, const float*,        \
      const float*, bool, float*, float*, float*, std::uint16_t*, std::uint16_t*))                           \
  X(void ops::BatchNorm<backend::OneDnn, float>::backward_bf16<float, float>(                                \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const float*, const float*, const float*,        \
      const float*, const float*, std::uint16_t*, float*, float*, bool))                                     \
  X(void ops::BatchNorm<backend::OneDnn, float>::forward_train_sum<float, std::uint16_t>(                    \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const float*, const float*, const float*,        \
      const std::uint16_t*, bool, float*, float*, float*, std::uint16_t*, std::uint16_t*))                   \
  X(void ops::BatchNorm<backend::OneDnn, float>::backward_bf16<float, std::uint16_t>(                        \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const float*, const std::uint16_t*,              \
      const float*, const float*, const float*, std::uint16_t*, float*, float*, bool))                       \
  X(void ops::BatchNorm<backend::OneDnn, float>::forward_train_sum<std::uint16_t, float>(                    \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const std::uint16_t*, const float*,              \
      const float*, const float*, bool, float*, float*, float*, std::uint16_t*, std::uint16_t*))             \
  X(void ops::BatchNorm<backend::OneDnn, float>::backward_bf16<std::uint16_t, float>(                        \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const std::uint16_t*, const float*,              \
      const float*, const float*, const float*, std::uint16_t*, float*, float*, bool))                       \
  X(void ops::BatchNorm<backend::OneDnn, float>::forward_train_sum<std::uint16_t, std::uint16_t>(            \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const std::uint16_t*, const float*,              \
      const float*, const std::uint16_t*, bool, float*, float*, float*, std::uint16_t*, std::uint16_t*))     \
  X(void ops::BatchNorm<backend::OneDnn, float>::backward_bf16<std::uint16_t, std::uint16_t>(                \
      Device<backend::OneDnn>&, const ChannelGeom&, double, const std::uint16_t*, const std::uint16_t*,      \
      const float*, const float*, const float*, std::uint16_t*, float*, float*, bool))                       \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<float, float, float>(                         \
      Device<backend::OneDnn>&, std::size_t, const float*, const float*, const std::uint16_t*, float*))      \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<float, float, std::uint16_t>(                 \
      Device<backend::OneDnn>&, std::size_t, const float*, const float*, const std::uint16_t*,               \
      std::uint16_t*))                                                                                       \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<float, std::uint16_t, float>(                 \
      Device<backend::OneDnn>&, std::size_t, const float*, const std::uint16_t*, const std::uint16_t*,       \
      float*))                                                                                               \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<float, std::uint16_t, std::uint16_t>(         \
      Device<backend::OneDnn>&, std::size_t, const float*, const std::uint16_t*, const std::uint16_t*,       \
      std::uint16_t*))                                                                                       \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<std::uint16_t, float, float>(                 \
      Device<backend::OneDnn>&, std::size_t, const std::uint16_t*, const float*, const std::uint16_t*,       \
      float*))                                                                                               \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<std::uint16_t, float, std::uint16_t>(         \
      Device<backend::OneDnn>&, std::size_t, const std::uint16_t*, const float*, const std::uint16_t*,       \
      std::uint16_t*))                                                                                       \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<std::uint16_t, std::uint16_t, float>(         \
      Device<backend::OneDnn>&, std::size_t, const std::uint16_t*, const std::uint16_t*,                     \
      const std::uint16_t*, float*))                                                                         \
  X(void ops::Eltwise<backend::OneDnn, float>::add_masked_bits<std::uint16_t, std::uint16_t, std::uint16_t>( \
      Device<backend::OneDnn>&, std::size_t, const std::uint16_t*, const std::uint16_t*,                     \
      const std::uint16_t*, std::uint16_t*))                                                                 \
  X(void ops::Pool2d<backend::OneDnn, float>::forward_padded<float>(                                         \
      Device<backend::OneDnn>&, const ConvGeom&, const float*, float*, std::size_t))                         \
  X(void ops::Pool2d<backend::OneDnn, float>::forward_padded<std::uint16_t>(                                 \
      Device<backend::OneDnn>&, const ConvGeom&, const std::uint16_t*, float*, std::size_t))
