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

/// Resources a backend needs at run time (engine, stream); one per model.
template <class B>
struct Device {
  // Backends without resources use this empty primary template.
};

}  // namespace cifarnet
