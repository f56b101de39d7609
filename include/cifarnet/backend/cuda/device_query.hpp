// cifarnet/backend/cuda/device_query.hpp — how many CUDA devices this
// process can use and, when none, why: the CUDA runtime's API alone, so code
// that only asks (recipes/devices.hpp: soft placement, a program's flags)
// does not parse cuDNN's and cuBLAS's headers. backend/cuda/common.hpp
// includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cifarnet/core/error.hpp"

namespace cifarnet::backend::cuda {

/// Number of usable CUDA devices; 0 when there is no GPU or no driver (never
/// throws: callers use it to skip or to give the seed's --num-gpus error).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

/// Why no device is usable, for skip messages and errors.
inline std::string no_device_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  if (e != cudaSuccess) return cifarnet::detail::concat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  return n == 0 ? std::string("no CUDA device present")
                : cifarnet::detail::concat(n, " CUDA device(s) present");
}

}  // namespace cifarnet::backend::cuda
