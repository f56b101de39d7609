// cifarnet/backend/host/channel_pad.hpp — zero channels before and after the
// input's (the ResNet v1 shortcut when the filter count grows), as host
// copies shared by the CPU backends: one OpenMP task per example, memcpy-
// sized runs (a whole NCHW example block, or one pixel's channels in NHWC).
// oneDNN has no padding primitive; a concat with a zero tensor would read a
// zero buffer for nothing.
#pragma once

#include <algorithm>
#include <cstddef>

#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::backend::host {

template <class T>
struct ChannelPadOp {
  /// y (before + g.c + after channels) = [0…, x, 0…].
  template <class Dev>
  void forward(Dev&, const ChannelGeom& g, std::size_t before, std::size_t after, const T* x, T* y) {
    const std::size_t hw = g.h * g.w, C = g.c, OC = before + C + after;
    const long n = long(g.n);
#pragma omp parallel for schedule(static)
    for (long e = 0; e < n; ++e) {
      const T* in = x + std::size_t(e) * C * hw;
      T* out = y + std::size_t(e) * OC * hw;
      if (g.fmt == DataFormat::NCHW) {
        std::fill(out, out + before * hw, T(0));
        std::copy(in, in + C * hw, out + before * hw);
        std::fill(out + (before + C) * hw, out + OC * hw, T(0));
      } else {
        for (std::size_t i = 0; i < hw; ++i) {
          T* o = out + i * OC;
          std::fill(o, o + before, T(0));
          std::copy(in + i * C, in + (i + 1) * C, o + before);
          std::fill(o + before + C, o + OC, T(0));
        }
      }
    }
  }
  /// y's padding channels (the first `before` and last `after` of each
  /// pixel or example) set to 0, the others untouched: the output an
  /// average pool writes its channels into in place (ops::Pool2d's
  /// forward_padded; g: the input's geometry).
  template <class Dev>
  void zero_pads(Dev&, const ChannelGeom& g, std::size_t before, std::size_t after, T* y) {
    const std::size_t hw = g.h * g.w, C = g.c, OC = before + C + after;
    const long n = long(g.n);
#pragma omp parallel for schedule(static)
    for (long e = 0; e < n; ++e) {
      T* out = y + std::size_t(e) * OC * hw;
      if (g.fmt == DataFormat::NCHW) {
        std::fill(out, out + before * hw, T(0));
        std::fill(out + (before + C) * hw, out + OC * hw, T(0));
      } else {
        for (std::size_t i = 0; i < hw; ++i) {
          T* o = out + i * OC;
          std::fill(o, o + before, T(0));
          std::fill(o + before + C, o + OC, T(0));
        }
      }
    }
  }
  /// dx = the input's channels of dy.
  template <class Dev>
  void backward(Dev&, const ChannelGeom& g, std::size_t before, std::size_t after, const T* dy, T* dx) {
    const std::size_t hw = g.h * g.w, C = g.c, OC = before + C + after;
    const long n = long(g.n);
#pragma omp parallel for schedule(static)
    for (long e = 0; e < n; ++e) {
      const T* gy = dy + std::size_t(e) * OC * hw;
      T* out = dx + std::size_t(e) * C * hw;
      if (g.fmt == DataFormat::NCHW)
        std::copy(gy + before * hw, gy + (before + C) * hw, out);
      else
        for (std::size_t i = 0; i < hw; ++i)
          std::copy(gy + i * OC + before, gy + i * OC + before + C, out + i * C);
    }
  }
};

}  // namespace cifarnet::backend::host
