// Learning-rate schedules: TF's values at and around boundaries (golden),
// the inclusive/exclusive boundary semantics, warm-up, type erasure and
// validation.
#include <catch2/catch.hpp>

#include <cifarnet/optim/schedules.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "optim_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::optim;
using optim_test::ulps;

namespace {
/// Our schedule (double) against TF's (float32 arithmetic). TF's own rounding
/// sets the tolerance: `max_ulps` of the value, or `abs_tol` absolute,
/// whichever is larger.
template <class S>
void check_schedule(const S& s, const std::string& key, std::int64_t max_ulps, double abs_tol = 0) {
  const auto& g = optim_test::golden()["schedules"][key];
  for (std::size_t i = 0; i < g["steps"].size(); ++i) {
    const auto step = g["steps"][i].get<std::int64_t>();
    const float tf = float(g["lr"][i].get<double>());
    const double ours = s(step);
    INFO(key << " step " << step << ": ours " << ours << ", TF " << tf);
    CHECK((ulps(float(ours), tf) <= max_ulps || std::fabs(ours - double(tf)) <= abs_tol));
  }
}
}  // namespace

TEST_CASE("piecewise_constant matches tf.train.piecewise_constant, boundaries inclusive on the left",
          "[optim][schedules][golden]") {
  auto s = piecewise_constant({10, 20, 30}, {1.0, 0.1, 0.01, 0.002});
  check_schedule(s, "piecewise_constant", 0);
  // step <= b0 -> v0; b0 < step <= b1 -> v1; ...; step > b_last -> v_last
  CHECK(s(0) == 1.0);
  CHECK(s(10) == 1.0);
  CHECK(s(11) == 0.1);
  CHECK(s(20) == 0.1);
  CHECK(s(21) == 0.01);
  CHECK(s(30) == 0.01);
  CHECK(s(31) == 0.002);
  CHECK(s(1000000000000LL) == 0.002);
  // the ResNet recipe: lr * [1, 0.1, 0.01, 0.002] at epochs 82, 123, 300 (40000 / 128 steps per epoch)
  const std::int64_t per_epoch = 40000 / 128;
  auto resnet =
      piecewise_constant({82 * per_epoch, 123 * per_epoch, 300 * per_epoch}, {0.1, 0.01, 0.001, 0.0002});
  CHECK(resnet(82 * per_epoch) == 0.1);
  CHECK(resnet(82 * per_epoch + 1) == 0.01);
  // no boundaries: a constant
  CHECK(piecewise_constant({}, {0.5})(123) == 0.5);
}

TEST_CASE("exponential_decay matches tf.train.exponential_decay, smooth and staircase",
          "[optim][schedules][golden]") {
  // TF_SEMANTICS.md §4: lr 0.1 decayed x0.1 every 350 epochs, staircase (here 350 steps)
  // TF's float32 pow is off by a few ulps once the exponent is large (step 5000: 14.3)
  check_schedule(exponential_decay(0.1, 350, 0.1, false), "exponential_decay", 8);
  auto st = exponential_decay(0.1, 350, 0.1, true);
  check_schedule(st, "exponential_decay_staircase", 8);
  CHECK(st(0) == 0.1);
  CHECK(st(349) == 0.1);
  CHECK(st(350) == Approx(0.01).epsilon(1e-15));
  CHECK(st(699) == Approx(0.01).epsilon(1e-15));
  CHECK(st(700) == Approx(0.001).epsilon(1e-15));
  auto smooth = exponential_decay(0.1, 350, 0.1);
  CHECK(smooth(175) == Approx(0.1 * std::pow(0.1, 0.5)).epsilon(1e-15));
}

TEST_CASE("cosine_decay matches tf.train.cosine_decay and stays at alpha * lr after decay_steps",
          "[optim][schedules][golden]") {
  // near the end TF's float32 1 + cos(x) cancels: compare to within float
  // epsilon of the initial rate there
  const double eps = 1.1920929e-07;
  check_schedule(cosine_decay(0.1, 100), "cosine_decay", 1, eps * 0.1);
  check_schedule(cosine_decay(0.1, 100, 0.1), "cosine_decay_alpha", 1, eps * 0.1);
  auto c = cosine_decay(0.1, 100, 0.1);
  CHECK(c(0) == Approx(0.1));
  CHECK(c(50) == Approx(0.1 * (0.9 * 0.5 + 0.1)));
  CHECK(c(100) == Approx(0.01));
  CHECK(c(5000) == c(100));
}

TEST_CASE("polynomial_decay decays from lr to end_lr over decay_steps (power 1: linearly)",
          "[optim][schedules]") {
  auto lin = polynomial_decay(0.24, 100);  // the airbench recipe's lr * (1 - step / total)
  CHECK(lin(0) == 0.24);
  CHECK(lin(25) == Approx(0.18));
  CHECK(lin(99) == Approx(0.0024));
  CHECK(lin(100) == 0.0);
  CHECK(lin(1000) == 0.0);
  auto sq = polynomial_decay(1.0, 10, 0.1, 2.0);
  CHECK(sq(5) == Approx(0.9 * 0.25 + 0.1));
  CHECK(sq(10) == Approx(0.1));
  CHECK_THROWS_WITH(polynomial_decay(0.1, 0), Catch::Contains("'decay_steps'"));
  CHECK_THROWS_WITH(polynomial_decay(0.1, 10, -1.0), Catch::Contains("'end_learning_rate'"));
  CHECK_THROWS_WITH(polynomial_decay(0.1, 10, 0.0, 0.0), Catch::Contains("'power'"));
}

TEST_CASE("linear_warmup ramps from init_lr to the inner schedule's value at warmup_steps",
          "[optim][schedules]") {
  auto w = linear_warmup(piecewise_constant({1000}, {0.4, 0.04}), 100, 0.0);
  CHECK(w(0) == 0.0);
  CHECK(w(25) == Approx(0.1));
  CHECK(w(50) == Approx(0.2));
  CHECK(w(99) == Approx(0.396));
  CHECK(w(100) == 0.4);  // from here on the inner schedule, unshifted
  CHECK(w(1000) == 0.4);
  CHECK(w(1001) == 0.04);
  auto w2 = linear_warmup(cosine_decay(1.0, 1000), 10, 0.5);
  CHECK(w2(0) == 0.5);
  CHECK(w2(5) == Approx(0.5 + 0.5 * (cosine_decay(1.0, 1000)(10) - 0.5)));
  CHECK(w2(10) == cosine_decay(1.0, 1000)(10));
}

TEST_CASE("Schedule stores any schedule or a constant", "[optim][schedules]") {
  Schedule a = 0.25;
  CHECK(a(0) == 0.25);
  CHECK(a.lr(99) == 0.25);
  Schedule b = piecewise_constant({5}, {1.0, 2.0});
  CHECK(b(5) == 1.0);
  CHECK(b(6) == 2.0);
  Schedule c = [](std::int64_t step) { return 1.0 / double(step + 1); };
  CHECK(c(3) == 0.25);
  std::vector<Schedule> many = {a, b, linear_warmup(b, 2)};
  CHECK(many[2](1) == Approx(0.5));
}

TEST_CASE("Schedules are validated up front, naming the option", "[optim][schedules][options]") {
  CHECK_THROWS_WITH(
      piecewise_constant({10, 20}, {1.0, 0.1}),
      Catch::Contains("'values' must have one more element than 'boundaries' (2 boundaries, 2 values)"));
  CHECK_THROWS_WITH(piecewise_constant({10, 10}, {1.0, 0.1, 0.01}),
                    Catch::Contains("'boundaries' must be strictly increasing"));
  CHECK_THROWS_WITH(piecewise_constant({20, 10}, {1.0, 0.1, 0.01}), Catch::Contains("boundaries[1] = 10"));
  CHECK_THROWS_WITH(piecewise_constant({10}, {1.0, -0.1}), Catch::Contains("'values[1]'"));
  CHECK_THROWS_WITH(exponential_decay(0.1, 0, 0.1), Catch::Contains("'decay_steps'"));
  CHECK_THROWS_WITH(exponential_decay(0.1, 10, 0.0), Catch::Contains("'decay_rate'"));
  CHECK_THROWS_WITH(exponential_decay(std::nan(""), 10, 0.5), Catch::Contains("'learning_rate'"));
  CHECK_THROWS_WITH(cosine_decay(0.1, 10, 1.5), Catch::Contains("'alpha'"));
  CHECK_THROWS_WITH(cosine_decay(0.1, -1), Catch::Contains("'decay_steps'"));
  CHECK_THROWS_WITH(linear_warmup(ConstantLr(0.1), 0), Catch::Contains("'warmup_steps'"));
  CHECK_THROWS_AS(ConstantLr(-1.0), ConfigError);
  CHECK_THROWS_WITH(piecewise_constant({10}, {1.0, 0.1})(-1),
                    Catch::Contains("global step must be >= 0, got -1"));
  CHECK_THROWS_AS(cosine_decay(0.1, 10)(-5), ConfigError);
}

TEST_CASE("make_schedule picks a schedule by name and says what it does", "[optim][schedules]") {
  ScheduleSpec spec;
  spec.learning_rate = 0.1;
  spec.train_steps = 1000;
  spec.steps_per_epoch = 2.0;  // epochs 82/123/300 = steps 164/246/600
  const NamedSchedule seed = make_schedule("seed", spec);
  CHECK(seed.description == "piecewise constant, boundaries 164/246/600 steps");
  CHECK(seed.schedule(164) == 0.1);
  CHECK(seed.schedule(165) == Approx(0.01));
  CHECK(seed.schedule(247) == Approx(0.001));
  CHECK(seed.schedule(601) == Approx(0.0002));
  // Sized in epochs: the boundaries at the seed's fractions of its 80k-step run.
  spec.scale_to_run = true;
  const NamedSchedule scaled = make_schedule("seed", spec);
  CHECK(scaled.description == "piecewise constant, boundaries 359/539/1316 steps");
  spec.scale_to_run = false;

  const NamedSchedule step = make_schedule("step", spec);
  CHECK(step.description == "x0.1 at 50% and 75% of the run");
  CHECK(step.schedule(500) == 0.1);
  CHECK(step.schedule(501) == Approx(0.01));
  CHECK(step.schedule(751) == Approx(0.001));

  const NamedSchedule cosine = make_schedule("cosine", spec);
  CHECK(cosine.description == "cosine decay to 0");
  CHECK(cosine.schedule(0) == Approx(0.1));
  CHECK(cosine.schedule(500) == Approx(0.05));
  CHECK(cosine.schedule(1000) == Approx(0.0).margin(1e-12));

  CHECK_THROWS_WITH(make_schedule("linear", spec),
                    Catch::Contains("learning-rate schedule 'linear': expected seed, step or cosine"));
}
