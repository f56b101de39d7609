// Mean squared error (loss/losses.hpp, tf.losses.mean_squared_error): the
// value against a hand computation, the gradient against central finite
// differences, and the shape errors.
#include <catch2/catch.hpp>

#include <cifarnet/core/rng.hpp>
#include <cifarnet/core/tensor.hpp>
#include <cifarnet/loss/losses.hpp>

#include <cmath>
#include <vector>

using namespace cifarnet;

namespace {
Tensor<double> column(const std::vector<double>& v) {
  Tensor<double> t(Tensor<double>::shape_type{v.size(), 1, 1, 1});
  std::copy(v.begin(), v.end(), t.data());
  return t;
}
}  // namespace

TEST_CASE("Mean squared error is the mean of the squared differences", "[nn][loss][mse]") {
  const Tensor<double> p = column({1.0, -2.0, 0.5, 3.0}), y = column({0.0, -1.0, 0.5, 1.0});
  Tensor<double> d;
  // (1 + 1 + 0 + 4) / 4
  CHECK(mean_squared_error(p, y, &d) == Approx(1.5).epsilon(1e-15));
  REQUIRE(d.shape() == p.shape());
  const std::vector<double> want = {0.5, -0.5, 0.0, 1.0};  // 2 (p - y) / 4
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(d.data()[i] == Approx(want[i]).epsilon(1e-15));
  CHECK(mean_squared_error(y, y) == 0.0);
}

TEST_CASE("Mean squared error's gradient matches finite differences", "[nn][grad][mse]") {
  Rng rng(11);
  std::vector<double> pv(12), yv(12);
  for (auto& v : pv) v = rng.uniform(-2.0, 2.0);
  for (auto& v : yv) v = rng.uniform(-2.0, 2.0);
  Tensor<double> p(Tensor<double>::shape_type{3, 4, 1, 1});
  std::copy(pv.begin(), pv.end(), p.data());
  const Tensor<double> y = column(yv);  // another shape, the same count
  Tensor<double> d;
  mean_squared_error(p, y, &d);
  const double h = 1e-5;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p.data()[i];
    p.data()[i] = keep + h;
    const double up = mean_squared_error(p, y);
    p.data()[i] = keep - h;
    const double down = mean_squared_error(p, y);
    p.data()[i] = keep;
    INFO("element " << i);
    CHECK(d.data()[i] == Approx((up - down) / (2 * h)).margin(1e-9));
  }
}

TEST_CASE("Mean squared error refuses mismatched or empty tensors", "[nn][loss][mse]") {
  const Tensor<double> p = column({1.0, 2.0, 3.0}), y = column({1.0, 2.0});
  CHECK_THROWS_WITH(mean_squared_error(p, y), Catch::Contains("3 predictions against 2 targets"));
  const Tensor<double> empty(Tensor<double>::shape_type{0, 1, 1, 1});
  CHECK_THROWS_AS(mean_squared_error(empty, empty), ShapeError);
}
