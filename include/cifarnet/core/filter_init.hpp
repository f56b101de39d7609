// cifarnet/core/filter_init.hpp — convolution filters set from structure or
// from data rather than drawn at random (the airbench CIFAR-10 recipe's):
//
//  - dirac_init: the first min(In, Out) filters become identity kernels
//    (filter o is 1 at the kernel's centre (K/2, K/2) of input channel o and
//    0 elsewhere), like PyTorch's nn.init.dirac_ applied to w[:In]; the other
//    filters are left as they are.
//  - whitening_filters: the eigen-decomposition of the kh × kw patch
//    covariance of a set of images. Every kh × kw patch (stride 1, no
//    padding) is flattened in (channel, row, column) order; their uncentred
//    covariance C = Σ p·pᵀ / count is decomposed by Eigen's
//    SelfAdjointEigenSolver (eigenvalues ascending), each eigenvector v_i is
//    scaled by 1/√(λ_i + eps), and the filters are the d = c·kh·kw scaled
//    eigenvectors followed by their negatives (2·d output channels). A
//    convolution with them whitens the patches (unit variance along every
//    principal direction), and the pair ±v keeps both signs through a
//    following nonlinearity. An eigenvector's sign is arbitrary; here the
//    largest-magnitude component of each is made positive (the first such
//    on ties), so the result is reproducible across solvers.
// Filters are HWIO (kh, kw, in, out), cifarnet's layout. Sums are in double.
#pragma once

#include <Eigen/Dense>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"

namespace cifarnet {

/// Identity kernels in the first min(in, out) filters of an HWIO filter bank
/// (kh, kw, in, out); the remaining filters are not touched.
template <class T>
void dirac_init(T* w, std::size_t kh, std::size_t kw, std::size_t in, std::size_t out) {
  if (!w || kh == 0 || kw == 0 || in == 0 || out == 0)
    throw ShapeError("dirac_init: empty filter bank (" + std::to_string(kh) + "x" + std::to_string(kw) + "x" +
                     std::to_string(in) + "x" + std::to_string(out) + ")");
  const std::size_t m = in < out ? in : out;
  for (std::size_t r = 0; r < kh * kw * in; ++r)
    for (std::size_t o = 0; o < m; ++o) w[r * out + o] = T(0);
  for (std::size_t o = 0; o < m; ++o) w[(((kh / 2) * kw + kw / 2) * in + o) * out + o] = T(1);
}

/// The result of whitening_filters: HWIO filters (kh, kw, c, 2·c·kh·kw) and
/// the covariance's eigenvalues (ascending).
template <class T>
struct Whitening {
  std::vector<T> filters;
  std::vector<double> eigenvalues;
};

/// Whitening filters from `images`: a 4-D tensor (n, c, h, w) in format `fmt`
/// with h >= kh and w >= kw. eps > 0 keeps small eigenvalues from blowing
/// the scale up (the recipe: 5e-4 on normalised CIFAR-10 images).
template <class T>
Whitening<T> whitening_filters(const Tensor<T>& images, DataFormat fmt, std::size_t kh, std::size_t kw,
                               double eps = 5e-4) {
  if (images.dimension() != 4) throw ShapeError("whitening_filters: images must be a 4-D tensor");
  const Shape s = shape_of(images, fmt);
  if (s.n == 0 || s.c == 0 || kh == 0 || kw == 0 || s.h < kh || s.w < kw)
    throw ShapeError("whitening_filters: images " + s.str() + " hold no " + std::to_string(kh) + "x" +
                     std::to_string(kw) + " patch");
  if (!(eps > 0) || !std::isfinite(eps))
    throw ConfigError("whitening_filters: eps must be finite and > 0, got " + std::to_string(eps));
  const std::size_t c = s.c, d = c * kh * kw, ph = s.h - kh + 1, pw = s.w - kw + 1;
  const bool nchw = fmt == DataFormat::NCHW;
  auto at = [&](std::size_t n, std::size_t ch, std::size_t y, std::size_t x) {
    return double(
        images.data()[nchw ? ((n * c + ch) * s.h + y) * s.w + x : ((n * s.h + y) * s.w + x) * c + ch]);
  };
  Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(Eigen::Index(d), Eigen::Index(d));
  Eigen::MatrixXd patches(Eigen::Index(ph * pw), Eigen::Index(d));
  for (std::size_t n = 0; n < s.n; ++n) {
    for (std::size_t y = 0; y < ph; ++y)
      for (std::size_t x = 0; x < pw; ++x)
        for (std::size_t ch = 0; ch < c; ++ch)
          for (std::size_t i = 0; i < kh; ++i)
            for (std::size_t j = 0; j < kw; ++j)
              patches(Eigen::Index(y * pw + x), Eigen::Index((ch * kh + i) * kw + j)) =
                  at(n, ch, y + i, x + j);
    cov.selfadjointView<Eigen::Lower>().rankUpdate(patches.transpose());
  }
  cov = cov.selfadjointView<Eigen::Lower>();
  cov /= double(s.n * ph * pw);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(cov);
  if (solver.info() != Eigen::Success)
    throw Error("whitening_filters: the eigen-decomposition did not converge");
  Whitening<T> out;
  const std::size_t o = 2 * d;
  out.filters.assign(d * o, T(0));
  for (std::size_t e = 0; e < d; ++e) {
    const double lambda = solver.eigenvalues()(Eigen::Index(e));
    out.eigenvalues.push_back(lambda);
    Eigen::VectorXd v = solver.eigenvectors().col(Eigen::Index(e));
    Eigen::Index big = 0;
    for (Eigen::Index k = 1; k < v.size(); ++k)
      if (std::abs(v(k)) > std::abs(v(big))) big = k;
    if (v(big) < 0) v = -v;
    v /= std::sqrt(lambda + eps);
    // Patch component (ch, i, j) is input channel ch at kernel position (i, j).
    for (std::size_t ch = 0; ch < c; ++ch)
      for (std::size_t i = 0; i < kh; ++i)
        for (std::size_t j = 0; j < kw; ++j) {
          const double val = v(Eigen::Index((ch * kh + i) * kw + j));
          const std::size_t base = ((i * kw + j) * c + ch) * o;
          out.filters[base + e] = T(val);
          out.filters[base + d + e] = T(-val);
        }
  }
  return out;
}

}  // namespace cifarnet
