// What the CUDA model tests share (test_cuda_model.cpp,
// test_cuda_training.cpp): a relative L2 distance and the GPU check that
// reports a skip.
#pragma once

#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>

#include <cmath>

namespace cuda_test {

template <class A, class B>
double rel(const A& out, const B& ref) {
  double e = 0, r = 0;
  for (Eigen::Index i = 0; i < Eigen::Index(ref.size()); ++i) {
    const double d = double(out[i]) - double(ref[i]);
    e += d * d;
    r += double(ref[i]) * double(ref[i]);
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

inline bool have_gpu() {
  if (cifarnet::backend::cuda::device_count() > 0) return true;
  WARN("SKIPPED: the CUDA backend needs a GPU (" << cifarnet::backend::cuda::no_device_reason() << ")");
  return false;
}

}  // namespace cuda_test
