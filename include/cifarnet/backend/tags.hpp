// cifarnet/backend/tags.hpp — backend tag types and the per-backend device
// resources a model owns.
//
// A backend is a type, chosen once per model (`Model<Net, backend::OneDnn>`).
// Each op is a small struct template `ops::X<Backend, T>` specialized per
// backend in backend/<name>/; the primary templates static_assert with a
// message naming the header to include. No macro changes a class layout.
#pragma once

namespace cifarnet {
namespace backend {

/// Plain C++ loops (and xtensor-blas for matrix products): the oracle every
/// other backend is checked against. Templated on the scalar by the model, so
/// gradient checks run in double.
struct Reference {
  static constexpr const char* name = "reference";
};

/// oneDNN CPU primitives (float). Include <cifarnet/backend/onednn.hpp>.
struct OneDnn {
  static constexpr const char* name = "onednn";
};

/// NVIDIA GPUs through cuDNN and cuBLAS (float). Include
/// <cifarnet/backend/cuda.hpp> and link cifarnet::cuda (built when CMake finds
/// the CUDA toolkit and cuDNN). Ops take device pointers, or host pointers
/// that they stage through device memory (backend/cuda/common.hpp).
struct Cuda {
  static constexpr const char* name = "cuda";
};

}  // namespace backend

/// What a backend offers beyond the ops every backend has, declared once per
/// backend (layers, containers and the trainer read these instead of probing
/// the op types). A trait set to true promises the matching op interface.
/// Where a backend has whole steps of its own, the layer's step is
/// specialized for it instead (oneDNN: layers/conv2d_onednn.hpp,
/// batch_norm_onednn.hpp, conv_bn_onednn.hpp), and no trait is asked:
///   conv_algorithms     ops::Conv2d has set_algorithm(ConvAlgorithm)
///   bf16_convolutions   ops::Conv2d has set_precision(ConvPrecision) and
///                       set_keep_input(bool)
///   bf16_gradients      ops::Conv2d has bf16_dy(dev, g, weights, data) and
///                       backward_bf16_dy(dev, g, x, w, dx, dw), and
///                       ops::BatchNorm has backward_bf16(...): a batch norm
///                       hands its input gradient to the bf16 convolution in
///                       front of it as bfloat16 (layers/conv_bn.hpp)
///   sum_mask_bits       ops::BatchNorm::forward_train_sum takes a trailing
///                       `std::uint16_t* relu_mask` (the sum's ReLU mask as
///                       bits, where its writes_sum_mask(g)) and ops::Eltwise
///                       has add_masked_bits(...) reading it: the next
///                       residual block's gradient sum reads 1 bit an element
///                       instead of the float output (nn/sequential.hpp)
///   pool_pad_in_place   ops::Pool2d has pads_in_place(g, kind), forward_padded
///                       and backward_padded: average pooling that writes its
///                       output into (and reads its gradient from) the
///                       channel-padded tensor of a ChannelPad after it, in
///                       place (nn/sequential.hpp pairs the two)
///   fused_relu          ops::Conv2d::forward and ops::BatchNorm's passes take a
///                       trailing `bool relu` (the ReLU as a post-op)
///   fused_gelu          ops::BatchNorm's passes take a trailing
///                       ops::BnActivation, Gelu included (the exact GELU in
///                       the same passes over memory)
///   concurrent_replicas replicas of one model (distributed::Towers, one device
///                       each) may run at the same time on threads of their
///                       own: true for CUDA (one GPU per replica); false on the
///                       CPU backends, where each replica already uses every
///                       core and oneDNN's library-managed scratchpad makes one
///                       cached primitive unsafe to run from two threads at once
///   versioned_weights   ops::Conv2d has set_weights_version(std::uint64_t): it
///                       keeps the weights in a layout of its own and reuses
///                       that copy while Parameters::version is unchanged
///   host_memory         the backend's device memory is host memory (its ops
///                       read and write host pointers; a Device's "device
///                       arena" is the host arena): true for the CPU backends,
///                       false for CUDA (docs/ARCHITECTURE.md, Storage)
template <class B>
struct backend_traits {
  static constexpr bool conv_algorithms = false;
  static constexpr bool bf16_convolutions = false;
  static constexpr bool bf16_gradients = false;
  static constexpr bool sum_mask_bits = false;
  static constexpr bool pool_pad_in_place = false;
  static constexpr bool fused_relu = false;
  static constexpr bool fused_gelu = false;
  static constexpr bool concurrent_replicas = false;
  static constexpr bool versioned_weights = false;
  static constexpr bool host_memory = true;
};

template <>
struct backend_traits<backend::OneDnn> {
  static constexpr bool conv_algorithms = true;
  static constexpr bool bf16_convolutions = true;
  static constexpr bool bf16_gradients = true;
  static constexpr bool sum_mask_bits = true;
  static constexpr bool pool_pad_in_place = true;
  static constexpr bool fused_relu = true;
  static constexpr bool fused_gelu = true;
  static constexpr bool concurrent_replicas = false;
  static constexpr bool versioned_weights = true;
  static constexpr bool host_memory = true;
};

template <>
struct backend_traits<backend::Cuda> {
  static constexpr bool conv_algorithms = false;
  static constexpr bool bf16_convolutions = false;
  static constexpr bool bf16_gradients = false;
  static constexpr bool sum_mask_bits = false;
  static constexpr bool pool_pad_in_place = false;
  static constexpr bool fused_relu = false;
  static constexpr bool fused_gelu = false;
  static constexpr bool concurrent_replicas = true;
  static constexpr bool versioned_weights = false;
  static constexpr bool host_memory = false;
};

/// Resources a backend needs at run time (engine, stream); one per model.
template <class B>
struct Device {
  // Backends without resources use this empty primary template.
};

}  // namespace cifarnet
