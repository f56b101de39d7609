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

/// Whether replicas of one model on backend B (distributed::Towers, one
/// device each) may run at the same time on threads of their own: true for
/// CUDA (one GPU per replica); false on the CPU backends, where each replica
/// already uses every core and oneDNN's library-managed scratchpad makes one
/// cached primitive unsafe to execute from two threads at once.
template <class B>
inline constexpr bool kConcurrentReplicas = false;
template <>
inline constexpr bool kConcurrentReplicas<Cuda> = true;

}  // namespace backend

/// Resources a backend needs at run time (engine, stream); one per model.
template <class B>
struct Device {
  // Backends without resources use this empty primary template.
};

}  // namespace cifarnet
