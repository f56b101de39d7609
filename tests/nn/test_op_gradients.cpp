// Finite-difference checks of the ops that have a backward pass, one op at a
// time on the reference backend in double: Eltwise (add with ReLU, affine),
// ChannelPad, GlobalAvgPool, SoftmaxCrossEntropy (d/dlogits) and
// SyncBatchNorm over one replica. For an op y = f(x) and a random cotangent
// g, the analytic dx must equal the central difference of <g, f(x)>.
#include <catch2/catch.hpp>

#include <cifarnet/backend/reference.hpp>
#include <cifarnet/core/rng.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

using namespace cifarnet;

namespace {

using Vec = std::vector<double>;
using Dev = Device<backend::Reference>;

Vec random(Rng& rng, std::size_t n, double lo = -1.0, double hi = 1.0) {
  Vec v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// Checks dx (the analytic gradient of <g, f(x)>) against central
/// differences of f at every element of x.
void check(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& g, const Vec& dx, double eps = 1e-6) {
  REQUIRE(dx.size() == x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = dot(g, f(x));
    x[i] = keep - eps;
    const double down = dot(g, f(x));
    x[i] = keep;
    const double fd = (up - down) / (2 * eps);
    INFO("element " << i << ": analytic " << dx[i] << ", finite differences " << fd);
    CHECK(std::abs(dx[i] - fd) <= 1e-6 + 1e-5 * std::abs(fd));
  }
}

struct OneReplica : CrossReplicaSum {
  void sum(double*, std::size_t) override {}
};

}  // namespace

TEST_CASE("Eltwise add (with ReLU) and affine match finite differences", "[nn][grad][ops][eltwise]") {
  Dev dev;
  ops::Eltwise<backend::Reference, double> op;
  Rng rng(31);
  const std::size_t n = 40;
  const Vec a = random(rng, n), b = random(rng, n), g = random(rng, n);
  for (bool relu : {false, true}) {
    INFO("relu " << relu);
    Vec y(n), da(n);
    op.add(dev, n, a.data(), b.data(), y.data(), relu);
    // d<g, relu(a + b)>/da = g where a + b > 0 (the ReLU's mask, through the output).
    ops::Relu<backend::Reference, double> mask;
    if (relu)
      mask.backward(dev, n, y.data(), g.data(), da.data());
    else
      da = g;
    check(
        [&](const Vec& v) {
          Vec out(n);
          op.add(dev, n, v.data(), b.data(), out.data(), relu);
          return out;
        },
        a, g, da);
  }
  Vec dx(n);
  op.affine(dev, n, g.data(), 0.375, 0.0, dx.data());  // backward of x·a + b is g·a
  check(
      [&](const Vec& v) {
        Vec out(n);
        op.affine(dev, n, v.data(), 0.375, -1.0, out.data());
        return out;
      },
      a, g, dx);
}

TEST_CASE("ChannelPad and GlobalAvgPool match finite differences", "[nn][grad][ops]") {
  Dev dev;
  Rng rng(32);
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO(to_string(fmt));
    const ChannelGeom geo{fmt, 2, 3, 2, 3};
    const Vec x = random(rng, geo.size());
    {
      ops::ChannelPad<backend::Reference, double> op;
      const std::size_t padded = geo.n * (2 + geo.c + 1) * geo.h * geo.w;
      const Vec g = random(rng, padded);
      Vec dx(geo.size());
      op.backward(dev, geo, 2, 1, g.data(), dx.data());
      check(
          [&](const Vec& v) {
            Vec out(padded);
            op.forward(dev, geo, 2, 1, v.data(), out.data());
            return out;
          },
          x, g, dx);
    }
    {
      ops::GlobalAvgPool<backend::Reference, double> op;
      const Vec g = random(rng, geo.n * geo.c);
      Vec dx(geo.size());
      op.backward(dev, geo, g.data(), dx.data());
      check(
          [&](const Vec& v) {
            Vec out(geo.n * geo.c);
            op.forward(dev, geo, v.data(), out.data());
            return out;
          },
          x, g, dx);
    }
  }
}

TEST_CASE("SoftmaxCrossEntropy's d/dlogits matches finite differences of the mean loss",
          "[nn][grad][ops][loss]") {
  Dev dev;
  ops::SoftmaxCrossEntropy<backend::Reference, double> op;
  Rng rng(33);
  const std::size_t n = 4, k = 5;
  const Vec z = random(rng, n * k, -3.0, 3.0);
  const std::vector<std::int32_t> labels{0, 4, 2, 2};
  Vec dz(n * k);
  op.loss(dev, n, k, z.data(), labels.data(), dz.data());
  check([&](const Vec& v) { return Vec{op.loss(dev, n, k, v.data(), labels.data(), nullptr)}; }, z, Vec{1.0},
        dz);
}

TEST_CASE("SyncBatchNorm's backward over one replica matches finite differences", "[nn][grad][ops][bn]") {
  Dev dev;
  ops::SyncBatchNorm<backend::Reference, double> op;
  Rng rng(34);
  OneReplica one;
  const double eps = 1e-3;
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO(to_string(fmt));
    const ChannelGeom geo{fmt, 3, 2, 2, 3};
    const Vec x = random(rng, geo.size(), -1.0, 2.0), gamma = random(rng, geo.c, 0.5, 1.5),
              g = random(rng, geo.size());
    // y = γ (x − mean(x)) / √(var(x) + ε), the statistics from the same x.
    auto f = [&](const Vec& v) {
      Vec mean(geo.c), var(geo.c), out(geo.size());
      op.statistics(dev, geo, v.data(), one, mean.data(), var.data());
      for (std::size_t i = 0; i < out.size(); ++i) {
        const std::size_t c = fmt == DataFormat::NCHW ? (i / (geo.h * geo.w)) % geo.c : i % geo.c;
        out[i] = gamma[c] * (v[i] - mean[c]) / std::sqrt(var[c] + eps);
      }
      return out;
    };
    Vec mean(geo.c), var(geo.c), dx(geo.size()), dgamma(geo.c), dbeta(geo.c);
    op.statistics(dev, geo, x.data(), one, mean.data(), var.data());
    op.backward(dev, geo, eps, x.data(), g.data(), gamma.data(), mean.data(), var.data(), one, dx.data(),
                dgamma.data(), dbeta.data());
    check(f, x, g, dx);
  }
}
