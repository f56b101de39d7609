// cifarnet/ops/geometry.hpp — plain geometry structs shared by every backend.
//
// Kernels take raw pointers plus one of these structs, so they compile once
// however many layer types use them (DESIGN.md principle 3). All sizes are
// logical (n, c, h, w); `fmt` says how activations are laid out. Convolution
// weights are HWIO (TensorFlow's order), dense weights are (in, out).
#pragma once

#include <cstddef>
#include <string>
#include <tuple>

#include "cifarnet/core/tensor.hpp"

namespace cifarnet {

/// Padding mode of convolutions and pooling.
enum class Padding {
  Same,      ///< TF SAME: out = ceil(in / stride), pad split with the extra on the bottom/right
  Valid,     ///< no padding: out = ceil((in - k + 1) / stride)
  Explicit,  ///< ResNet's fixed_padding for strided convs: (k-1)/2 before, the rest after, then VALID
};

/// Padding along one axis: (before, after, out size).
struct AxisPad {
  std::size_t before = 0, after = 0, out = 0;
};

/// TF's output size and padding for one spatial axis.
inline AxisPad axis_padding(std::size_t in, std::size_t k, std::size_t s, Padding p) {
  AxisPad r;
  switch (p) {
    case Padding::Same: {
      r.out = (in + s - 1) / s;
      const long need = long((r.out - 1) * s + k) - long(in);
      const std::size_t total = need > 0 ? std::size_t(need) : 0;
      r.before = total / 2;
      r.after = total - r.before;
      break;
    }
    case Padding::Valid:
      if (in < k) throw ShapeError("kernel larger than input with VALID padding");
      r.out = (in - k) / s + 1;
      break;
    case Padding::Explicit: {
      const std::size_t total = k - 1;
      r.before = total / 2;
      r.after = total - r.before;
      r.out = (in + total - k) / s + 1;
      break;
    }
  }
  return r;
}

/// Geometry of a 2-D convolution (and of pooling, which ignores ic/oc).
struct ConvGeom {
  DataFormat fmt = DataFormat::NCHW;
  std::size_t n = 0, ic = 0, ih = 0, iw = 0;
  std::size_t oc = 0, oh = 0, ow = 0;
  std::size_t kh = 1, kw = 1, sh = 1, sw = 1;
  std::size_t pt = 0, pl = 0, pb = 0, pr = 0;  ///< padding top, left, bottom, right

  Shape in_shape() const { return {n, ic, ih, iw}; }
  Shape out_shape() const { return {n, oc, oh, ow}; }
  auto key() const {
    return std::make_tuple(int(fmt), n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr);
  }
  bool operator==(const ConvGeom& o) const { return key() == o.key(); }
  bool operator!=(const ConvGeom& o) const { return !(*this == o); }

  /// Fills output size and padding from input size, kernel, stride and mode.
  static ConvGeom make(DataFormat fmt, const Shape& in, std::size_t oc, std::size_t k, std::size_t s,
                       Padding p) {
    ConvGeom g;
    g.fmt = fmt;
    g.n = in.n;
    g.ic = in.c;
    g.ih = in.h;
    g.iw = in.w;
    g.oc = oc;
    g.kh = g.kw = k;
    g.sh = g.sw = s;
    const AxisPad y = axis_padding(in.h, k, s, p), x = axis_padding(in.w, k, s, p);
    g.oh = y.out;
    g.ow = x.out;
    g.pt = y.before;
    g.pb = y.after;
    g.pl = x.before;
    g.pr = x.after;
    return g;
  }
};

/// Geometry of a per-channel normalization (batch norm) or elementwise op.
struct ChannelGeom {
  DataFormat fmt = DataFormat::NCHW;
  std::size_t n = 0, c = 0, h = 0, w = 0;
  Shape shape() const { return {n, c, h, w}; }
  std::size_t size() const { return n * c * h * w; }
  auto key() const { return std::make_tuple(int(fmt), n, c, h, w); }
  bool operator==(const ChannelGeom& o) const { return key() == o.key(); }
  bool operator!=(const ChannelGeom& o) const { return !(*this == o); }
  static ChannelGeom make(DataFormat fmt, const Shape& s) { return {fmt, s.n, s.c, s.h, s.w}; }
};

/// Pooling kinds. Average pooling excludes padding (TF SAME semantics).
enum class PoolKind { Max, Avg };

/// Local response normalization parameters in TensorFlow's form:
/// y = x / (bias + alpha * sum_{|j-c| <= radius} x_j^2)^beta.
struct LrnParams {
  std::size_t depth_radius = 5;
  double bias = 1.0, alpha = 1.0, beta = 0.5;
};

}  // namespace cifarnet
