// GELU (exact erf form): known values, the op's backward against central
// finite differences (reference backend, double), the layer through the
// shared gradient check in both formats, and the oneDNN op against the
// reference in double (forward, backward, in place).
#include "nn/gradcheck.hpp"

#include <cifarnet/backend/onednn.hpp>

#include "backend/agreement.hpp"

#include <cmath>
#include <vector>

using namespace cifarnet;

TEST_CASE("Gelu forward matches the erf form's known values", "[nn][gelu]") {
  Device<backend::Reference> dev;
  ops::Gelu<backend::Reference, double> op;
  // x·Φ(x) with Φ the standard normal CDF (0.5·x·(1 + erf(x/√2)) in double, Python's math.erf).
  const std::vector<double> x = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0};
  const std::vector<double> expect = {-0.00404969409489031, -0.15865525393145707, -0.15426876936299344, 0.0,
                                      0.34573123063700656,  0.8413447460685429,   1.9544997361036416};
  std::vector<double> y(x.size());
  op.forward(dev, x.size(), x.data(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    CHECK(y[i] == Approx(expect[i]).margin(1e-15));
  }
}

TEST_CASE("Gelu backward matches finite differences", "[nn][grad][gelu]") {
  Device<backend::Reference> dev;
  ops::Gelu<backend::Reference, double> op;
  Rng rng(77);
  const std::size_t n = 64;
  std::vector<double> x(n), g(n), dx(n);
  for (auto& v : x) v = rng.uniform(-4.0, 4.0);
  for (auto& v : g) v = rng.uniform(-1.0, 1.0);
  op.backward(dev, n, x.data(), g.data(), dx.data());
  const double eps = 1e-6;
  for (std::size_t i = 0; i < n; ++i) {
    double up = 0, down = 0;
    const double xp = x[i] + eps, xm = x[i] - eps;
    op.forward(dev, 1, &xp, &up);
    op.forward(dev, 1, &xm, &down);
    const double fd = g[i] * (up - down) / (2 * eps);
    INFO("x = " << x[i] << ": analytic " << dx[i] << ", finite differences " << fd);
    CHECK(std::abs(dx[i] - fd) <= 1e-8 + 1e-6 * std::abs(fd));
  }
  // In place (dy == dx) gives the same gradient.
  std::vector<double> in_place = g;
  op.backward(dev, n, x.data(), in_place.data(), in_place.data());
  CHECK(in_place == dx);
}

TEST_CASE("The GELU layer matches finite differences in both formats", "[nn][grad][gelu]") {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    test::gradcheck<Sequential<GELU>>({3, 4, 4}, 2, fmt);
    test::gradcheck<Sequential<Conv2d<2, 3, 3>, GELU, Flatten, Dense<0, 4>>>({2, 5, 4}, 2, fmt);
  }
}

TEST_CASE("Gelu on oneDNN agrees with the reference in double, in place too", "[nn][gelu][onednn]") {
  using namespace cifarnet::test;
  OpPair<ops::Gelu, backend::OneDnn> t;
  Rng rng = Rng::stream(2024, 9);
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(4099)}) {
    INFO("n=" << n);
    const Both x = Both::input(random_vec(rng, n, -4.0, 4.0)), dy = Both::input(random_cotangent(rng, n));
    Both y = Both::output(n), dx = Both::output(n), y_in_place = x, dx_in_place = dy;
    t.both([&](auto& dev, auto& op, auto side) {
      op.forward(dev, n, side(x), side(y));
      op.forward(dev, n, side(y_in_place), side(y_in_place));
      op.backward(dev, n, side(x), side(dy), side(dx));
      op.backward(dev, n, side(x), side(dx_in_place), side(dx_in_place));
    });
    INFO("y " << y.err() << " y in place " << y_in_place.err() << " dx " << dx.err() << " dx in place "
              << dx_in_place.err());
    CHECK(y.err() < kTolerance);
    CHECK(y_in_place.err() < kTolerance);
    CHECK(dx.err() < kTolerance);
    CHECK(dx_in_place.err() < kTolerance);
  }
}
