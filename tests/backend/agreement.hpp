// tests/backend/agreement.hpp — helpers of the backend-agreement harness:
// random inputs (fresh per case, never all zero; distinct values where ties
// could route gradients differently), NaN-poisoned output buffers (so an op
// that leaves part of its output unwritten fails), the relative error
// ||out - ref|| / ||ref|| against the reference backend run in double, and
// the case lists (geometries) every backend is checked on.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <cifarnet/backend/tags.hpp>
#include <cifarnet/core/rng.hpp>
#include <cifarnet/ops/geometry.hpp>

namespace cifarnet {
namespace test {

/// Agreement tolerance on ||out - ref|| / ||ref||.
inline constexpr double kTolerance = 1e-5;

/// n floats uniform in [lo, hi).
inline std::vector<float> random_vec(Rng& rng, std::size_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.uniform(lo, hi));
  return v;
}

/// A random output gradient: uniform in [-0.5, 1), biased away from a zero
/// mean so that sums over the batch (db, dbeta) do not cancel down to
/// rounding noise, which would make their relative error meaningless.
inline std::vector<float> random_cotangent(Rng& rng, std::size_t n) { return random_vec(rng, n, -0.5, 1.0); }

/// n pairwise distinct floats in (-1, 1), in random order (max pooling: no
/// ties, so every backend routes the gradient to the same position).
inline std::vector<float> distinct_vec(Rng& rng, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float(-1.0 + 2.0 * (double(i) + 0.5) / double(n));
  for (std::size_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.uniform_int(i)]);
  return v;
}

/// A buffer full of NaN: outputs start like this so unwritten parts show.
inline std::vector<float> poisoned(std::size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// ||out - ref|| / ||ref|| (||out - ref|| when ref is zero); NaN if out has
/// a NaN, so a comparison with the tolerance fails.
inline double rel_err(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double e = 0, r = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = double(out[i]) - ref[i];
    e += d * d;
    r += ref[i] * ref[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

/// One test tensor on both sides: float for the backend under test, double
/// for the reference. Inputs hold the same values on both sides (the double
/// side is the float side widened); outputs start as NaN (float) and 0.
struct Both {
  std::vector<float> f;
  std::vector<double> d;

  static Both input(std::vector<float> v) {
    Both b;
    b.d.assign(v.begin(), v.end());
    b.f = std::move(v);
    return b;
  }
  static Both output(std::size_t n) { return {poisoned(n), std::vector<double>(n)}; }
  /// ||f - d|| / ||d||.
  double err() const { return rel_err(f, d); }
};

/// Picks a Both's float buffer (backend under test) ...
struct FloatSide {
  float* operator()(Both& b) const { return b.f.data(); }
  const float* operator()(const Both& b) const { return b.f.data(); }
};
/// ... or its double buffer (reference).
struct DoubleSide {
  double* operator()(Both& b) const { return b.d.data(); }
  const double* operator()(const Both& b) const { return b.d.data(); }
};

/// An op on the backend under test (float) and on the reference (double),
/// with their devices. both(f) runs f(device, op, side) on each, so a pass is
/// written once and the two calls cannot drift apart.
template <template <class, class> class Op, class B>
struct OpPair {
  Device<B> dev;
  Device<backend::Reference> rdev;
  Op<B, float> op;
  Op<backend::Reference, double> ref;

  template <class F>
  void both(F&& f) {
    f(dev, op, FloatSide{});
    f(rdev, ref, DoubleSide{});
  }
};

inline std::string str(const ConvGeom& g) {
  return std::string(to_string(g.fmt)) + " n=" + std::to_string(g.n) + " in=" + std::to_string(g.ic) + "x" +
         std::to_string(g.ih) + "x" + std::to_string(g.iw) + " out=" + std::to_string(g.oc) + "x" +
         std::to_string(g.oh) + "x" + std::to_string(g.ow) + " k=" + std::to_string(g.kh) + "x" +
         std::to_string(g.kw) + " s=" + std::to_string(g.sh) + "x" + std::to_string(g.sw) +
         " pad(t,l,b,r)=" + std::to_string(g.pt) + "," + std::to_string(g.pl) + "," + std::to_string(g.pb) +
         "," + std::to_string(g.pr);
}

inline std::string str(const ChannelGeom& g) { return std::string(to_string(g.fmt)) + " " + g.shape().str(); }

/// A geometry with explicit (possibly asymmetric) pads; output size from
/// (in + pads - k) / s + 1 (in >= k here).
inline ConvGeom padded_geom(DataFormat fmt, Shape in, std::size_t oc, std::size_t k, std::size_t s,
                            std::size_t pt, std::size_t pl, std::size_t pb, std::size_t pr) {
  ConvGeom g = ConvGeom::make(fmt, in, oc, k, s, Padding::Valid);
  g.pt = pt;
  g.pl = pl;
  g.pb = pb;
  g.pr = pr;
  g.oh = (in.h + pt + pb - k) / s + 1;
  g.ow = (in.w + pl + pr - k) / s + 1;
  return g;
}

inline const DataFormat kFormats[] = {DataFormat::NCHW, DataFormat::NHWC};
inline const std::size_t kBatches[] = {1, 3, 5};

/// Geometries over both formats, n = 1, 3, 5, strides 1 and 2 and the given
/// kernels and paddings; (in, out) channels and map sizes cycle through
/// short lists from case to case. Pooling keeps the input's channels.
inline std::vector<ConvGeom> spatial_cases(std::initializer_list<std::size_t> kernels,
                                           std::initializer_list<Padding> paddings, bool pooling) {
  const std::size_t chans[][2] = {{3, 4}, {8, 16}, {16, 5}, {1, 7}};
  const std::size_t maps[][2] = {{9, 9}, {8, 7}, {6, 9}, {7, 8}, {5, 5}};
  std::vector<ConvGeom> out;
  std::size_t i = 0;
  for (DataFormat fmt : kFormats)
    for (std::size_t n : kBatches)
      for (std::size_t k : kernels)
        for (std::size_t s : {1, 2})
          for (Padding p : paddings) {
            const auto *c = chans[i % 4], *m = maps[i % 5];
            ++i;
            out.push_back(ConvGeom::make(fmt, {n, c[0], m[0], m[1]}, pooling ? c[0] : c[1], k, s, p));
          }
  return out;
}

/// Convolution geometries: kernels 1, 3, 5, SAME (symmetric and asymmetric
/// pads), VALID and Explicit, plus hand-made asymmetric pads.
inline std::vector<ConvGeom> conv_cases() {
  auto out = spatial_cases({1, 3, 5}, {Padding::Same, Padding::Valid, Padding::Explicit}, false);
  for (DataFormat fmt : kFormats) {
    out.push_back(padded_geom(fmt, {3, 4, 7, 6}, 6, 3, 1, 2, 0, 0, 2));
    out.push_back(padded_geom(fmt, {2, 5, 9, 8}, 3, 5, 2, 1, 2, 3, 0));
    out.push_back(padded_geom(fmt, {1, 2, 6, 6}, 4, 3, 2, 0, 1, 1, 0));
  }
  return out;
}

/// Pooling geometries (oc = ic): kernels 1, 2, 3, SAME and VALID, plus
/// hand-made asymmetric pads.
inline std::vector<ConvGeom> pool_cases() {
  auto out = spatial_cases({1, 2, 3}, {Padding::Same, Padding::Valid}, true);
  for (DataFormat fmt : kFormats) {
    out.push_back(padded_geom(fmt, {3, 4, 7, 6}, 4, 3, 2, 2, 0, 0, 2));
    out.push_back(padded_geom(fmt, {2, 5, 9, 8}, 5, 3, 1, 0, 1, 2, 0));
    // Windows that do not overlap (oneDNN's own NHWC max-pool kernels):
    // airbench's 2/2 at a vector-wide channel count, 3/3 with rows and
    // columns outside every window, and stride above the window.
    out.push_back(ConvGeom::make(fmt, {3, 64, 8, 9}, 64, 2, 2, Padding::Valid));
    out.push_back(ConvGeom::make(fmt, {2, 7, 10, 11}, 7, 3, 3, Padding::Valid));
    out.push_back(ConvGeom::make(fmt, {2, 5, 9, 9}, 5, 2, 3, Padding::Valid));
  }
  return out;
}

/// Channel geometries (batch norm, LRN): both formats, n = 1, 3, 5, channels
/// 1 to 16, maps from 2x2 to 9x9 (never a single element per channel).
inline std::vector<ChannelGeom> channel_cases() {
  const std::size_t chans[] = {1, 5, 16, 3};
  const std::size_t maps[][2] = {{9, 9}, {2, 3}, {5, 7}, {4, 4}};
  std::vector<ChannelGeom> out;
  std::size_t i = 0;
  for (DataFormat fmt : kFormats)
    for (std::size_t n : kBatches)
      for (std::size_t j = 0; j < 4; ++j, ++i) {
        const auto* m = maps[(i + i / 4) % 4];
        out.push_back({fmt, n, chans[i % 4], m[0], m[1]});
      }
  return out;
}

}  // namespace test
}  // namespace cifarnet
