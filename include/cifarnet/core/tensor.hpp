// cifarnet/core/tensor.hpp — tensors, shapes and data formats.
//
// Activations are xt::xtensor<T, 4> laid out in the network's data format:
// NCHW (channels_first) has shape (N, C, H, W), NHWC (channels_last) has shape
// (N, H, W, C). A Shape always holds the logical dimensions (n, c, h, w)
// whatever the format. Dense activations are 4-D too, with h = w = 1, so every
// layer takes and returns the same type. Data are row-major and contiguous.
// Elements are host memory unless a backend's TensorMemory is current when
// the tensor allocates (core/tensor_memory.hpp: a CUDA model's layers).
#pragma once

#include <xtensor/xstorage.hpp>
#include <xtensor/xtensor.hpp>

#include <array>
#include <cstddef>
#include <ostream>
#include <sstream>
#include <string>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor_memory.hpp"

namespace cifarnet {

/// Memory order of activations: channels_first or channels_last.
enum class DataFormat { NCHW, NHWC };

inline const char* to_string(DataFormat f) { return f == DataFormat::NCHW ? "NCHW" : "NHWC"; }

/// TF's name of a format: "channels_first" (NCHW) or "channels_last" (NHWC).
inline const char* layout_name(DataFormat f) {
  return f == DataFormat::NCHW ? "channels_first" : "channels_last";
}

/// Parses "channels_first"/"NCHW" and "channels_last"/"NHWC".
inline DataFormat parse_data_format(const std::string& s) {
  if (s == "channels_first" || s == "NCHW" || s == "nchw") return DataFormat::NCHW;
  if (s == "channels_last" || s == "NHWC" || s == "nhwc") return DataFormat::NHWC;
  throw ConfigError("unknown data format '" + s + "' (expected channels_first or channels_last)");
}

/// Logical 4-D shape: batch, channels, height, width.
struct Shape {
  std::size_t n = 0, c = 0, h = 0, w = 0;

  std::size_t size() const { return n * c * h * w; }
  std::size_t per_example() const { return c * h * w; }
  bool operator==(const Shape& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  /// The xtensor shape of this logical shape in format `f`.
  std::array<std::size_t, 4> dims(DataFormat f) const {
    return f == DataFormat::NCHW ? std::array<std::size_t, 4>{n, c, h, w}
                                 : std::array<std::size_t, 4>{n, h, w, c};
  }
  static Shape from_dims(const std::array<std::size_t, 4>& d, DataFormat f) {
    return f == DataFormat::NCHW ? Shape{d[0], d[1], d[2], d[3]} : Shape{d[0], d[3], d[1], d[2]};
  }

  std::string str() const {
    std::ostringstream os;
    os << "[n=" << n << ", c=" << c << ", h=" << h << ", w=" << w << "]";
    return os.str();
  }
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

/// The activation tensor type (its allocator: core/tensor_memory.hpp).
template <class T = float>
using Tensor = xt::xtensor<T, 4, xt::layout_type::row_major, TensorAllocator<T>>;

/// A flat buffer with the tensors' allocation (a layer's per-channel
/// statistics): device memory where the layer's tensors are. Resizing
/// leaves the elements uninitialised (xt::uvector).
template <class T = float>
using Buffer = xt::uvector<T, TensorAllocator<T>>;

/// Allocates a tensor of logical shape `s` in format `f` (contents unspecified).
template <class T = float>
Tensor<T> make_tensor(const Shape& s, DataFormat f) {
  return Tensor<T>(typename Tensor<T>::shape_type(s.dims(f)));
}

/// Logical shape of a tensor in format `f`.
template <class T>
Shape shape_of(const Tensor<T>& t, DataFormat f) {
  return Shape::from_dims({t.shape()[0], t.shape()[1], t.shape()[2], t.shape()[3]}, f);
}

/// Resizes `t` to logical shape `s` only if it differs (keeps the buffer
/// otherwise, so steady-state steps do not allocate).
template <class T>
void ensure_shape(Tensor<T>& t, const Shape& s, DataFormat f) {
  const auto d = s.dims(f);
  if (t.dimension() != 4 || t.shape()[0] != d[0] || t.shape()[1] != d[1] || t.shape()[2] != d[2] ||
      t.shape()[3] != d[3])
    t.resize(typename Tensor<T>::shape_type(d));
}

/// Index of element (n, c, h, w) in a contiguous buffer of shape `s`.
inline std::size_t offset(const Shape& s, DataFormat f, std::size_t n, std::size_t c, std::size_t h,
                          std::size_t w) {
  return f == DataFormat::NCHW ? ((n * s.c + c) * s.h + h) * s.w + w : ((n * s.h + h) * s.w + w) * s.c + c;
}

}  // namespace cifarnet
