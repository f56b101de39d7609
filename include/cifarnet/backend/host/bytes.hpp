// cifarnet/backend/host/bytes.hpp — byte images to a float batch tensor on
// the host: ops::Eltwise::from_bytes of the reference and oneDNN backends
// (the CUDA backend's is the image_to_float kernel).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::backend::host {

/// `count` interleaved byte images (h, w, c) at src into the batch tensor
/// dst (count, c, h, w) in format `fmt`: each byte's value, exactly.
template <class T>
void bytes_to_float(std::size_t count, std::size_t c, std::size_t h, std::size_t w, DataFormat fmt,
                    const std::uint8_t* src, T* dst) {
  const std::size_t plane = h * w, per = plane * c;
#pragma omp parallel for schedule(static) if (count * per >= (std::size_t(1) << 18))
  for (std::int64_t i = 0; i < std::int64_t(count); ++i) {
    const std::uint8_t* p = src + std::size_t(i) * per;
    T* d = dst + std::size_t(i) * per;
    if (fmt == DataFormat::NHWC) {
      for (std::size_t q = 0; q < per; ++q) d[q] = T(p[q]);
    } else {
      for (std::size_t k = 0; k < c; ++k)
        for (std::size_t q = 0; q < plane; ++q) d[k * plane + q] = T(p[q * c + k]);
    }
  }
}

}  // namespace cifarnet::backend::host
