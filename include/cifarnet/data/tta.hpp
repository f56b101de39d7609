// cifarnet/data/tta.hpp — test-time augmentation: logits averaged over
// mirrored and shifted views of each image (the airbench recipe's
// evaluation), for any forward function on a batch.
//
//   level 0: f(x)
//   level 1: ½·f(x) + ½·f(flip(x))                       (flip: left-right mirror)
//   level 2: ½·L1(x) + ½·(½·L1(t₋(x)) + ½·L1(t₊(x)))     (L1: the level-1 logits)
// where t₋(x)(y, x) = x(reflect(y − 1), reflect(x − 1)) and
// t₊(x)(y, x) = x(reflect(y + 1), reflect(x + 1)) (the image reflect-padded
// by one pixel and cropped at its top-left, resp. bottom-right corner).
// Level 2 runs the network on six views. Batches are 4-D tensors (n, c, h, w)
// in either DataFormat; the forward returns (n, k, 1, 1) logits (a Model's
// forward in evaluation mode: `[&](const Tensor<float>& x) -> const
// Tensor<float>& { return model.forward(x, Mode::Infer); }`).
#pragma once

#include <cstddef>
#include <string>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/data/in_memory.hpp"

namespace cifarnet {
namespace data {

/// out = the batch mirrored left-right (out must not alias x).
inline void flip_batch(const Tensor<float>& x, DataFormat fmt, Tensor<float>& out) {
  const Shape s = shape_of(x, fmt);
  if (out.shape() != x.shape()) out = Tensor<float>(x.shape());
  for (std::size_t n = 0; n < s.n; ++n)
    for (std::size_t c = 0; c < s.c; ++c)
      for (std::size_t y = 0; y < s.h; ++y)
        for (std::size_t w = 0; w < s.w; ++w) {
          const std::size_t src = fmt == DataFormat::NCHW ? ((n * s.c + c) * s.h + y) * s.w + (s.w - 1 - w)
                                                          : ((n * s.h + y) * s.w + (s.w - 1 - w)) * s.c + c;
          const std::size_t dst = fmt == DataFormat::NCHW ? ((n * s.c + c) * s.h + y) * s.w + w
                                                          : ((n * s.h + y) * s.w + w) * s.c + c;
          out.data()[dst] = x.data()[src];
        }
}

/// out(y, x) = x(reflect(y + dy), reflect(x + dx)) for every image of the
/// batch (translate_reflect on a batch; out must not alias x).
inline void translate_batch(const Tensor<float>& x, DataFormat fmt, std::ptrdiff_t dy, std::ptrdiff_t dx,
                            Tensor<float>& out) {
  const Shape s = shape_of(x, fmt);
  if (static_cast<std::size_t>(dy < 0 ? -dy : dy) >= s.h ||
      static_cast<std::size_t>(dx < 0 ? -dx : dx) >= s.w)
    throw ConfigError(cifarnet::detail::concat("translate_batch: shift (", dy, ", ", dx,
                                               ") needs larger images than ", s.str()));
  if (out.shape() != x.shape()) out = Tensor<float>(x.shape());
  for (std::size_t n = 0; n < s.n; ++n)
    for (std::size_t c = 0; c < s.c; ++c)
      for (std::size_t y = 0; y < s.h; ++y) {
        const std::size_t sy = reflect_index(static_cast<std::ptrdiff_t>(y) + dy, s.h);
        for (std::size_t w = 0; w < s.w; ++w) {
          const std::size_t sx = reflect_index(static_cast<std::ptrdiff_t>(w) + dx, s.w);
          const bool nchw = fmt == DataFormat::NCHW;
          const std::size_t src =
              nchw ? ((n * s.c + c) * s.h + sy) * s.w + sx : ((n * s.h + sy) * s.w + sx) * s.c + c;
          const std::size_t dst =
              nchw ? ((n * s.c + c) * s.h + y) * s.w + w : ((n * s.h + y) * s.w + w) * s.c + c;
          out.data()[dst] = x.data()[src];
        }
      }
}

/// Logits of `x` under test-time augmentation `level` (0, 1 or 2; see the
/// top of this file), as a fresh (n, k, 1, 1) tensor. ConfigError for
/// another level, ShapeError when the forward's logits do not have one row
/// per image.
template <class Forward>
Tensor<float> tta_logits(Forward&& forward, const Tensor<float>& x, DataFormat fmt, int level) {
  if (level < 0 || level > 2)
    throw ConfigError("tta_logits: level must be 0, 1 or 2, got " + std::to_string(level));
  const std::size_t n = x.shape()[0];
  auto run = [&](const Tensor<float>& v) {
    Tensor<float> z = forward(v);
    if (z.dimension() != 4 || z.shape()[0] != n)
      throw ShapeError(cifarnet::detail::concat("tta_logits: the forward returned ", z.shape()[0],
                                                " rows for ", n, " images"));
    return z;
  };
  // acc += w·z, element by element
  auto add = [](Tensor<float>& acc, const Tensor<float>& z, float w) {
    for (std::size_t i = 0; i < acc.size(); ++i) acc.data()[i] += w * z.data()[i];
  };
  Tensor<float> view;
  auto mirrored = [&](const Tensor<float>& v) {
    Tensor<float> z = run(v);
    for (std::size_t i = 0; i < z.size(); ++i) z.data()[i] *= 0.5f;
    flip_batch(v, fmt, view);
    add(z, run(view), 0.5f);
    return z;
  };
  if (level == 0) return run(x);
  Tensor<float> z = mirrored(x);
  if (level == 1) return z;
  for (std::size_t i = 0; i < z.size(); ++i) z.data()[i] *= 0.5f;
  Tensor<float> shifted;
  translate_batch(x, fmt, -1, -1, shifted);
  add(z, mirrored(shifted), 0.25f);
  translate_batch(x, fmt, 1, 1, shifted);
  add(z, mirrored(shifted), 0.25f);
  return z;
}

}  // namespace data
}  // namespace cifarnet
