// Exponential moving averages: TF's golden shadows with and without
// num_updates, the loss average (plain and zero-debiased), BN state
// coverage, the swap guard, copy_to, names and validation.
#include <catch2/catch.hpp>

#include <cifarnet/optim/ema.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "optim_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::optim;
using optim_test::ulps;

namespace {
template <class T>
void set_values(Parameters<T>& p, std::size_t id, const nlohmann::json& v) {
  const auto x = optim_test::as_vector<T>(v);
  std::copy(x.begin(), x.end(), p.value(id));
}

/// "w" (2, 3) trainable, "bn/moving_mean" (2) state, "b" (2) trainable.
template <class T>
Parameters<T> arena() {
  Parameters<T> p;
  p.add({"w", {2, 3}});
  p.add({"bn/moving_mean", {2}, false});
  p.add({"b", {2}});
  p.allocate();
  return p;
}
}  // namespace

TEMPLATE_TEST_CASE("ExponentialMovingAverage matches TF with a fixed decay and with num_updates",
                   "[optim][ema][golden]", float, double) {
  using T = TestType;
  for (const char* label : {"fixed", "num_updates"}) {
    const auto& g = optim_test::golden()["ema"][optim_test::dtype_name<T>()][label];
    INFO(label);
    Parameters<T> p;
    p.add({"w", {2, 3}});
    p.allocate();
    set_values(p, 0, g["values"][0]);
    ExponentialMovingAverage<T> ema(p, ExponentialMovingAverageOptions(g["decay"].template get<double>()));
    std::vector<std::string> names;
    ema.visit_state([&](const std::string& n, T*, const std::vector<std::size_t>&) { names.push_back(n); });
    CHECK(names == std::vector<std::string>{g["shadow_name"].template get<std::string>()});
    CHECK(optim_test::copy_of(ema.average("w"), 6) == optim_test::as_vector<T>(g["values"][0]));
    for (std::size_t k = 0; k < g["shadows"].size(); ++k) {
      set_values(p, 0, g["values"][k + 1]);
      if (g["num_updates"].is_null())
        ema.apply(p);
      else
        ema.apply(p, g["num_updates"][k].template get<std::int64_t>());
      const auto want = optim_test::as_vector<T>(g["shadows"][k]);
      for (std::size_t i = 0; i < 6; ++i) {
        INFO("update " << k << " element " << i << ": ours " << ema.average("w")[i] << ", TF " << want[i]);
        CHECK(ulps(ema.average("w")[i], want[i]) == 0);
      }
    }
  }
}

TEST_CASE("The EMA decay is min(decay, (1 + n) / (10 + n)) in float32, as TF computes it", "[optim][ema]") {
  Parameters<float> p;
  p.add({"w", {1}});
  p.allocate();
  ExponentialMovingAverage<float> ema(p, ExponentialMovingAverageOptions(0.9999));
  CHECK(ema.decay() == 0.9999f);
  CHECK(ema.decay(0) == 0.1f);
  CHECK(ema.decay(1) == 2.0f / 11.0f);
  CHECK(ema.decay(1000) == 1001.0f / 1010.0f);
  CHECK(ema.decay(100000000) == 0.9999f);
  CHECK_THROWS_AS(ema.decay(-1), ConfigError);
  // exact arithmetic: decay 0.75, shadow 0 -> value 1 -> shadow 0.25
  Parameters<double> q;
  q.add({"w", {1}});
  q.allocate();
  ExponentialMovingAverage<double> e2(q, ExponentialMovingAverageOptions(0.75));
  q.value(0)[0] = 1.0;
  e2.apply(q);
  CHECK(e2.average("w")[0] == 0.25);
  e2.apply(q);
  CHECK(e2.average("w")[0] == 0.4375);
}

TEMPLATE_TEST_CASE("ScalarMovingAverage averages the loss as TF averages a tensor: from zero",
                   "[optim][ema][golden]", float, double) {
  using T = TestType;
  const auto& ge = optim_test::golden()["ema"][optim_test::dtype_name<T>()];
  for (bool debias : {false, true}) {
    const auto& g = ge[debias ? "loss_avg_debiased" : "loss_avg"];
    ScalarMovingAverage<T> avg("total_loss",
                               ExponentialMovingAverageOptions(0.9).name("avg").zero_debias(debias));
    std::vector<std::string> names;
    avg.visit_state([&](const std::string& n, T*, const std::vector<std::size_t>& shape) {
      names.push_back(n);
      CHECK(shape.empty());
    });
    CHECK(names.front() == g["shadow_name"].template get<std::string>());
    CHECK(names.size() == (debias ? 3u : 1u));
    for (std::size_t k = 0; k < g["losses"].size(); ++k) {
      const T got = avg.apply(g["losses"][k].template get<double>());
      const T want = T(g["averages"][k].template get<double>());
      INFO("debias " << debias << " update " << k << ": ours " << got << ", TF " << want);
      // the debiased form uses pow(): at most 1 ulp from TF's
      CHECK(ulps(got, want) <= (debias ? 1 : 0));
      CHECK(avg.value() == got);
    }
  }
  // the tutorial's default: decay 0.9, name "avg"
  ScalarMovingAverage<T> tut("cross_entropy");
  CHECK(tut.apply(1.0) == T(1.0f - 0.9f));
  CHECK(state_dict(tut).count("cross_entropy/avg") == 1);
}

TEST_CASE("The EMA covers BN state by default and can leave it out", "[optim][ema]") {
  auto p = arena<double>();
  p.value(1)[0] = 4.0;  // bn/moving_mean
  ExponentialMovingAverage<double> with(p, ExponentialMovingAverageOptions(0.5));
  ExponentialMovingAverage<double> without(p, ExponentialMovingAverageOptions(0.5).include_state(false));
  std::vector<std::string> a, b;
  with.visit_state([&](const std::string& n, double*, const std::vector<std::size_t>&) { a.push_back(n); });
  without.visit_state(
      [&](const std::string& n, double*, const std::vector<std::size_t>&) { b.push_back(n); });
  CHECK(a == std::vector<std::string>{"w/ExponentialMovingAverage", "b/ExponentialMovingAverage",
                                      "bn/moving_mean/ExponentialMovingAverage"});
  CHECK(b == std::vector<std::string>{"w/ExponentialMovingAverage", "b/ExponentialMovingAverage"});
  p.value(1)[0] = 8.0;
  with.apply(p);
  without.apply(p);
  CHECK(with.average("bn/moving_mean")[0] == 6.0);
  CHECK(without.average("bn/moving_mean") == nullptr);
  // a selection of trainable variables, as TF's apply(var_list)
  ExponentialMovingAverage<double> only_b(p, ExponentialMovingAverageOptions(0.5).include_state(false),
                                          variables_to_train({"b"}));
  CHECK(only_b.average("w") == nullptr);
  CHECK(only_b.average("b") != nullptr);
}

TEST_CASE("swap_in puts the averages in the arena and the guard restores the trained values exactly",
          "[optim][ema]") {
  auto p = arena<float>();
  for (std::size_t i = 0; i < 6; ++i) p.value(0)[i] = 0.1f * float(i);
  p.value(1)[0] = 3.0f, p.value(2)[1] = -7.0f;
  ExponentialMovingAverage<float> ema(p, ExponentialMovingAverageOptions(0.9));
  for (int k = 0; k < 5; ++k) {
    for (std::size_t i = 0; i < 6; ++i) p.value(0)[i] += 0.37f;
    p.value(1)[0] += 1.0f;
    p.value(2)[1] *= 0.5f;
    ema.apply(p, k + 1);
  }
  const std::vector<float> values(p.values().data(), p.values().data() + p.values().size());
  const std::vector<float> state(p.state().data(), p.state().data() + p.state().size());
  const std::vector<float> avg_w = optim_test::copy_of(ema.average("w"), 6);
  const float avg_bn = ema.average("bn/moving_mean")[0];
  {
    auto guard = ema.swap_in(p);
    CHECK(ema.swapped());
    CHECK(optim_test::copy_of(p.value(0), 6) == avg_w);
    CHECK(p.value(1)[0] == avg_bn);
    CHECK_THROWS_WITH(ema.apply(p), Catch::Contains("swapped in"));
    CHECK_THROWS_WITH(ema.swap_in(p), Catch::Contains("already swapped in"));
    CHECK_THROWS_AS(ema.copy_to(p), Error);
    auto moved = std::move(guard);  // the guard can be moved out of a helper
    CHECK(ema.swapped());
  }
  CHECK_FALSE(ema.swapped());
  CHECK(optim_test::same_bits(p.values().data(), values.data(), values.size()));
  CHECK(optim_test::same_bits(p.state().data(), state.data(), state.size()));
  CHECK(optim_test::copy_of(ema.average("w"), 6) == avg_w);
  {
    auto guard = ema.swap_in(p);
    guard.restore();  // early
    CHECK_FALSE(ema.swapped());
    CHECK(optim_test::same_bits(p.values().data(), values.data(), values.size()));
  }
  CHECK(optim_test::same_bits(p.values().data(), values.data(), values.size()));
  // copy_to writes the averages for good (exporting averaged weights)
  ema.copy_to(p);
  CHECK(optim_test::copy_of(p.value(0), 6) == avg_w);
  CHECK(p.value(1)[0] == avg_bn);
}

TEST_CASE("EMA options are validated up front, naming the option", "[optim][ema][options]") {
  auto p = arena<float>();
  CHECK_THROWS_WITH(ExponentialMovingAverage<float>(p, ExponentialMovingAverageOptions(1.5)),
                    Catch::Contains("option 'decay'"));
  CHECK_THROWS_WITH(ExponentialMovingAverage<float>(p, ExponentialMovingAverageOptions(std::nan(""))),
                    Catch::Contains("option 'decay'"));
  CHECK_THROWS_WITH(ExponentialMovingAverage<float>(p, ExponentialMovingAverageOptions(0.9).name("")),
                    Catch::Contains("option 'name'"));
  CHECK_THROWS_WITH(
      ExponentialMovingAverage<float>(p, ExponentialMovingAverageOptions(0.9).zero_debias(true)),
      Catch::Contains("option 'zero_debias'"));
  CHECK_THROWS_AS(ScalarMovingAverage<float>(""), ConfigError);
  ExponentialMovingAverage<float> ema(p, ExponentialMovingAverageOptions(0.9));
  CHECK_THROWS_AS(ema.apply(p, -3), ConfigError);
  Parameters<float> other;
  other.add({"x", {100}});
  other.allocate();
  CHECK_THROWS_AS(ema.apply(other), ShapeError);
}
