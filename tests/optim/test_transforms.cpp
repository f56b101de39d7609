// Gradient transforms: clip_by_norm / clip_by_global_norm against TF's
// golden values, gradient multipliers by name, glob and regex,
// variables_to_train, check_numerics, name patterns, and weight decay.
#include <catch2/catch.hpp>

#include <cifarnet/core/rng.hpp>
#include <cifarnet/optim/adam.hpp>
#include <cifarnet/optim/momentum.hpp>
#include <cifarnet/optim/select.hpp>
#include <cifarnet/optim/sgd.hpp>
#include <cifarnet/optim/state.hpp>
#include <cifarnet/optim/transforms.hpp>
#include <cifarnet/optim/weight_decay.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "optim_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::optim;
using optim_test::ulps;

namespace {
/// Golden arena with step 1's gradients (the clipping inputs of make_golden.py).
template <class T>
Parameters<T> clip_arena() {
  auto p = optim_test::golden_arena<T>();
  optim_test::golden_grads(p, 1);
  return p;
}

template <class T>
void check_close_to_tf(const T* got, const nlohmann::json& want, std::int64_t max_ulps) {
  const auto w = optim_test::as_vector<T>(want);
  for (std::size_t i = 0; i < w.size(); ++i) {
    INFO("element " << i << ": ours " << got[i] << ", TF " << w[i]);
    CHECK(ulps(got[i], w[i]) <= max_ulps);
  }
}

/// Four parameters named like a small network, with gradients 1..n.
Parameters<double> net() {
  Parameters<double> p;
  p.add({"conv0/weights", {2}});
  p.add({"conv0/biases", {1}});
  p.add({"bn/moving_mean", {1}, false});
  p.add({"fc8/weights", {3}});
  p.add({"fc8/biases", {1}});
  p.allocate();
  double k = 1;
  for (std::size_t i = 0; i < p.count(); ++i)
    if (p.info(i).trainable)
      for (std::size_t j = 0; j < p.info(i).size; ++j) p.grad(i)[j] = k++;
  return p;
}
}  // namespace

TEMPLATE_TEST_CASE("clip_by_norm clips each tensor as TF's clip_by_norm", "[optim][clip][golden]", float,
                   double) {
  using T = TestType;
  const auto& g = optim_test::golden()["clipping"][optim_test::dtype_name<T>()];
  for (double clip : {0.5, 2.0, 100.0}) {
    INFO("clip " << clip);
    auto p = clip_arena<T>();
    const std::vector<T> state = optim_test::copy_of(p.value(1), 2);
    clip_by_norm(p, clip);
    char key[64];
    std::snprintf(key, sizeof key, "clip_by_norm_%g", clip);
    // the norm is summed in double here, in float by TF: at most 1 ulp apart
    check_close_to_tf(p.grad(0), g[key][0], 1);
    check_close_to_tf(p.grad(2), g[key][1], 1);
    CHECK(optim_test::copy_of(p.value(1), 2) == state);
  }
}

TEMPLATE_TEST_CASE("clip_by_global_norm scales all gradients by clip / max(norm, clip) and returns the norm",
                   "[optim][clip][golden]", float, double) {
  using T = TestType;
  const auto& g = optim_test::golden()["clipping"][optim_test::dtype_name<T>()];
  {
    auto p = clip_arena<T>();
    CHECK(ulps(T(global_norm(p)), T(g["global_norm"].template get<double>())) <= 1);
  }
  for (double clip : {0.5, 2.0, 100.0}) {
    INFO("clip " << clip);
    auto p = clip_arena<T>();
    char key[64];
    std::snprintf(key, sizeof key, "clip_by_global_norm_%g", clip);
    const double norm = clip_by_global_norm(p, clip);
    CHECK(ulps(T(norm), T(g[key]["norm"].template get<double>())) <= 1);
    check_close_to_tf(p.grad(0), g[key]["grads"][0], 1);
    check_close_to_tf(p.grad(2), g[key]["grads"][1], 1);
  }
}

TEST_CASE("clip_by_global_norm on exact values: norm 5 clipped to 1", "[optim][clip]") {
  Parameters<double> p;
  p.add({"a", {1}});
  p.add({"b", {1}});
  p.allocate();
  p.grad(0)[0] = 3, p.grad(1)[0] = -4;
  ClipByGlobalNorm<double> c(p, ClipByGlobalNormOptions(1.0));
  CHECK(std::isnan(c.last_norm()));
  CHECK(c.apply(p) == 5.0);
  CHECK(c.last_norm() == 5.0);
  CHECK(p.grad(0)[0] == Approx(0.6).epsilon(1e-15));
  CHECK(p.grad(1)[0] == Approx(-0.8).epsilon(1e-15));
  // below the clip: scale = clip * (1 / clip), gradients kept
  p.grad(0)[0] = 0.25, p.grad(1)[0] = 0.5;
  CHECK(clip_by_global_norm(p, 4.0) == Approx(std::sqrt(0.3125)));
  CHECK(p.grad(0)[0] == 0.25);
  CHECK(p.grad(1)[0] == 0.5);
}

TEST_CASE("A NaN or Inf global norm makes every gradient NaN as in TF, padding stays zero", "[optim][clip]") {
  Parameters<float> p;
  p.add({"a", {3}});
  p.add({"b", {2}});
  p.allocate();
  p.grad(0)[1] = std::numeric_limits<float>::infinity();
  p.grad(1)[0] = 1.0f;
  const double norm = clip_by_global_norm(p, 5.0);
  CHECK(std::isinf(norm));
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::isnan(p.grad(0)[i]));
  for (std::size_t i = 0; i < 2; ++i) CHECK(std::isnan(p.grad(1)[i]));
  const auto all = p.grads();
  for (std::size_t i = 3; i < p.info(1).offset; ++i) CHECK(all[Eigen::Index(i)] == 0.0f);
  CHECK_THROWS_AS(check_numerics(p), NumericsError);
}

TEST_CASE("Gradient multipliers select parameters by exact name, glob and regex", "[optim][multipliers]") {
  SECTION("exact names, as TF-Slim's dict") {
    auto p = net();
    multiply_gradients(p, GradientMultipliersOptions({{"conv0/weights", 1.5}, {"fc8/weights", 3.0}}));
    CHECK(p.grad(0)[0] == 1.5);
    CHECK(p.grad(0)[1] == 3.0);
    CHECK(p.grad(1)[0] == 3.0);  // conv0/biases untouched
    CHECK(p.grad(3)[0] == 12.0);
    CHECK(p.grad(3)[2] == 18.0);
    CHECK(p.grad(4)[0] == 7.0);
  }
  SECTION("a glob; the first matching rule wins") {
    auto p = net();
    GradientMultipliers<double> m(p,
                                  GradientMultipliersOptions().set("fc8/weights", 0.5).set("*/weights", 2.0));
    CHECK(m.multiplier("fc8/weights") == 0.5);
    CHECK(m.multiplier("conv0/weights") == 2.0);
    CHECK(m.multiplier("fc8/biases") == 1.0);
    m.apply(p);
    CHECK(p.grad(0)[0] == 2.0);
    CHECK(p.grad(3)[0] == 2.0);
    CHECK(p.grad(4)[0] == 7.0);
  }
  SECTION("a regex") {
    auto p = net();
    multiply_gradients(p, GradientMultipliersOptions({{Pattern::regex(".*/biases"), 10.0}}));
    CHECK(p.grad(1)[0] == 30.0);
    CHECK(p.grad(4)[0] == 70.0);
    CHECK(p.grad(0)[0] == 1.0);
  }
  SECTION("bad rules are ConfigErrors naming them") {
    auto p = net();
    CHECK_THROWS_WITH(multiply_gradients(p, GradientMultipliersOptions()), Catch::Contains("is empty"));
    CHECK_THROWS_WITH(multiply_gradients(p, GradientMultipliersOptions({{"conv9/weights", 2.0}})),
                      Catch::Contains("'conv9/weights' matches no trainable parameter"));
    CHECK_THROWS_WITH(multiply_gradients(p, GradientMultipliersOptions({{"bn/moving_mean", 2.0}})),
                      Catch::Contains("'bn/moving_mean'"));
    CHECK_THROWS_WITH(multiply_gradients(p, GradientMultipliersOptions({{"fc8/*", std::nan("")}})),
                      Catch::Contains("gradient_multipliers['fc8/*']"));
    CHECK_THROWS_AS(Pattern::regex("(unclosed"), ConfigError);
  }
}

TEST_CASE("Name patterns match whole names", "[optim][select]") {
  CHECK(Pattern("conv0/weights").kind() == Pattern::Kind::Exact);
  CHECK(Pattern("conv0/weights").matches("conv0/weights"));
  CHECK_FALSE(Pattern("conv0/weights").matches("conv0/weights/Momentum"));
  CHECK(Pattern("stage1/*").matches("stage1/block0/conv1/weights"));
  CHECK_FALSE(Pattern("stage1/*").matches("stage2/block0/conv1/weights"));
  CHECK(Pattern("*/weights").matches("stage1/block0/conv1/weights"));
  CHECK(Pattern("conv?/b*s").matches("conv3/biases"));
  CHECK_FALSE(Pattern("conv?/b*s").matches("conv10/biases"));
  CHECK(Pattern("*a*b*c").matches("xxaxxbxxbxc"));
  CHECK_FALSE(Pattern("*a*b*c").matches("xxaxxbxxbxcd"));
  CHECK(Pattern("**").matches(""));
  CHECK(Pattern::exact("a*").matches("a*"));
  CHECK_FALSE(Pattern::exact("a*").matches("ab"));
  CHECK(Pattern::regex("stage[12]/.*/weights").matches("stage2/b/c/weights"));
  CHECK_FALSE(Pattern::regex("stage[12]").matches("stage1/x"));  // whole-name match
}

TEST_CASE("variables_to_train leaves the other parameters, their values and slots alone", "[optim][select]") {
  auto p = net();
  for (std::size_t i = 0; i < p.count(); ++i)
    for (std::size_t j = 0; j < p.info(i).size; ++j) p.value(i)[j] = 100.0 + double(j);
  const auto before = net();
  auto sel = variables_to_train({"fc8/*"});
  Momentum<double> mom(p, MomentumOptions().momentum(0.5), sel);
  Adam<double> adam(p, AdamOptions(), sel);
  std::vector<std::string> names;
  mom.visit_state(
      [&](const std::string& n, double*, const std::vector<std::size_t>&) { names.push_back(n); });
  adam.visit_state(
      [&](const std::string& n, double*, const std::vector<std::size_t>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"fc8/weights/Momentum", "fc8/biases/Momentum", "fc8/weights/Adam",
                                          "fc8/weights/Adam_1", "fc8/biases/Adam", "fc8/biases/Adam_1",
                                          "beta1_power", "beta2_power"});
  CHECK(mom.accumulator("conv0/weights") == nullptr);
  CHECK(adam.first_moment("conv0/biases") == nullptr);
  mom.step(p, 0.5);
  adam.step(p, 0.5);
  CHECK(p.value(0)[0] == 100.0);  // conv0/weights
  CHECK(p.value(0)[1] == 101.0);
  CHECK(p.value(1)[0] == 100.0);  // conv0/biases
  CHECK(p.value(2)[0] == 100.0);  // bn state
  CHECK(p.value(3)[0] != 100.0);  // fc8/weights moved
  CHECK(p.value(4)[0] != 100.0);
  // gradients of untrained parameters are ignored, not used
  CHECK(*mom.accumulator("fc8/weights") == 4.0);
  // clipping over the selection sees only the trained gradients, as TF-Slim
  auto q = net();
  ClipByGlobalNorm<double> clip(q, ClipByGlobalNormOptions(1.0), sel);
  CHECK(clip.apply(q) == Approx(std::sqrt(16.0 + 25 + 36 + 49)));
  CHECK(q.grad(0)[0] == before.grad(0)[0]);
  // a pattern that matches nothing is a typo, not "train nothing"
  CHECK_THROWS_WITH(Momentum<double>(p, MomentumOptions(), variables_to_train({"fc9/*"})),
                    Catch::Contains("'fc9/*' matches no trainable parameter"));
  CHECK_THROWS_AS(Selection(std::vector<Pattern>{}), ConfigError);
}

TEST_CASE("check_numerics names the first parameter with a NaN or Inf gradient", "[optim][numerics]") {
  auto p = net();
  CHECK_NOTHROW(check_numerics(p));
  p.grad(4)[0] = std::numeric_limits<double>::infinity();
  p.grad(3)[2] = std::nan("");
  try {
    check_numerics(p);
    FAIL("no NumericsError");
  } catch (const NumericsError& e) {
    CHECK_THAT(e.what(), Catch::Contains("'fc8/weights' is NaN at element 2 of 3"));
  }
  p.grad(3)[2] = 1.0;
  CHECK_THROWS_WITH(check_numerics(p), Catch::Contains("'fc8/biases' is +Inf at element 0"));
  // a stage over a selection checks only the selected gradients
  CheckNumerics<double> only_conv(p, {}, variables_to_train({"conv0/*"}));
  CHECK_NOTHROW(only_conv.apply(p));
  CHECK_THROWS_AS(CheckNumerics<double>(p).apply(p), NumericsError);
  // the loss
  CHECK_NOTHROW(check_numerics(2.3));
  CHECK_THROWS_WITH(check_numerics(std::nan("")), Catch::Contains("loss is NaN"));
  CHECK_THROWS_WITH(check_numerics(-std::numeric_limits<double>::infinity(), "total_loss"),
                    Catch::Contains("total_loss is -Inf"));
}

TEST_CASE("Clip options are validated up front, naming the option", "[optim][options]") {
  auto p = net();
  CHECK_THROWS_WITH(ClipByNorm<double>(p, ClipByNormOptions(0.0)),
                    Catch::Contains("ClipByNormOptions: option 'clip_norm'"));
  CHECK_THROWS_WITH(ClipByGlobalNorm<double>(p, ClipByGlobalNormOptions(-1.0)),
                    Catch::Contains("ClipByGlobalNormOptions: option 'clip_norm'"));
  CHECK_THROWS_AS(clip_by_global_norm(p, std::numeric_limits<double>::infinity()), ConfigError);
  CHECK(ClipByGlobalNormOptions(1.0).clip_norm(2.5).clip_norm() == 2.5);
}

namespace {
/// A small arena with random values and gradients (a BN state between).
template <class T>
Parameters<T> decay_arena() {
  Parameters<T> p;
  p.add({"conv0/weights", {3, 3, 2, 5}});
  p.add({"bn/moving_mean", {3}, false});
  p.add({"fc8/weights", {45, 7}});
  p.add({"fc8/biases", {7}});
  p.allocate();
  Rng rng(11);
  for (std::size_t i = 0; i < p.count(); ++i)
    for (std::size_t j = 0; j < p.info(i).size; ++j) {
      p.value(i)[j] = T(rng.normal() * 0.5);
      if (p.info(i).trainable) p.grad(i)[j] = T(rng.normal() * 1e-2);
    }
  return p;
}

/// TF's l2_loss weight decay by scalar loops, every product rounded on its
/// own (volatile: no fused multiply-add whatever the compiler flags):
/// g := g + T(wd) * v, and T(wd * sum over parameters of (sum v^2) / 2).
template <class T>
double decay_by_hand(Parameters<T>& p, double wd, const std::vector<std::string>& decayed) {
  double total = 0;
  for (const auto& name : decayed) {
    const std::size_t id = p.id(name);
    const T* v = p.value(id);
    T* g = p.grad(id);
    double s = 0;
    for (std::size_t i = 0; i < p.info(id).size; ++i) {
      volatile double sq = double(v[i]) * double(v[i]);
      s += sq;
      volatile T prod = T(wd) * v[i];
      g[i] = g[i] + prod;
    }
    total += s / 2;
  }
  return double(T(wd * total));
}
}  // namespace

TEMPLATE_TEST_CASE("WeightDecay adds T(wd) * v to the gradients and reports wd * sum(v^2) / 2 exactly",
                   "[optim][weight_decay]", float, double) {
  using T = TestType;
  auto got = decay_arena<T>(), want = decay_arena<T>();
  const std::vector<std::string> all{"conv0/weights", "fc8/weights", "fc8/biases"};
  const double wd = 2e-4;
  WeightDecay<T> stage(got, WeightDecayOptions(wd));
  CHECK(stage.decayed() == all);
  CHECK(stage.loss() == 0.0);
  for (int k = 0; k < 3; ++k) {  // the gradients accumulate: each apply adds once more
    const double loss = stage.apply(got);
    CHECK(loss == decay_by_hand(want, wd, all));
    CHECK(stage.loss() == loss);
    CHECK(optim_test::same_bits(got.grads().data(), want.grads().data(), std::size_t(got.grads().size())));
  }
  CHECK(optim_test::same_bits(got.values().data(), want.values().data(), std::size_t(got.values().size())));
  // the free function decays every trainable parameter once
  CHECK(weight_decay(got, wd) == decay_by_hand(want, wd, all));
  CHECK(optim_test::same_bits(got.grads().data(), want.grads().data(), std::size_t(got.grads().size())));
  // a known value: 0.5 * (2^2 + 1) / 2
  Parameters<T> one;
  one.add({"w", {2}});
  one.allocate();
  one.value(0)[0] = T(2);
  one.value(0)[1] = T(-1);
  CHECK(weight_decay(one, 0.5) == 1.25);
  CHECK(one.grad(0)[0] == T(1));
  CHECK(one.grad(0)[1] == T(-0.5));
}

TEST_CASE("WeightDecay decays the selected parameters only, and a pattern matching nothing is an error",
          "[optim][weight_decay][select]") {
  auto got = decay_arena<float>(), want = decay_arena<float>();
  // as the tutorial CNN: every variable trained, only the weights decayed
  WeightDecay<float> weights(got, WeightDecayOptions(0.004).decay(Selection({"*/weights"})));
  CHECK(weights.decayed() == std::vector<std::string>{"conv0/weights", "fc8/weights"});
  CHECK(weights.decays("fc8/weights"));
  CHECK_FALSE(weights.decays("fc8/biases"));
  CHECK(weights.apply(got) == decay_by_hand(want, 0.004, {"conv0/weights", "fc8/weights"}));
  CHECK(optim_test::same_bits(got.grads().data(), want.grads().data(), std::size_t(got.grads().size())));
  // only trained parameters are decayed (the stage's variables_to_train)
  WeightDecay<float> fc(got, WeightDecayOptions(0.1), variables_to_train({"fc8/*"}));
  CHECK(fc.decayed() == std::vector<std::string>{"fc8/weights", "fc8/biases"});
  // a decay pattern matching no trained parameter: a typo, named
  CHECK_THROWS_WITH(WeightDecay<float>(got, WeightDecayOptions(0.1).decay(Selection({"local3/weights"}))),
                    Catch::Contains("decay pattern 'local3/weights' matches no trained parameter"));
  CHECK_THROWS_WITH(WeightDecay<float>(got, WeightDecayOptions(0.1).decay(Selection({"conv0/*"})),
                                       variables_to_train({"fc8/*"})),
                    Catch::Contains("'conv0/*' matches no trained parameter"));
  CHECK_THROWS_AS(WeightDecay<float>(got, WeightDecayOptions(0.1).decay(Selection({"bn/moving_mean"}))),
                  ConfigError);
}

TEST_CASE("WeightDecay options are validated up front, naming the option, and wd = 0 does nothing",
          "[optim][weight_decay][options]") {
  auto p = decay_arena<double>();
  for (double bad : {-1e-4, std::nan(""), std::numeric_limits<double>::infinity()})
    CHECK_THROWS_WITH(WeightDecay<double>(p, WeightDecayOptions(bad)),
                      Catch::Contains("WeightDecayOptions: option 'weight_decay' must be finite and >= 0"));
  CHECK_THROWS_AS(weight_decay(p, -1.0), ConfigError);
  CHECK(WeightDecayOptions(1.0).weight_decay(3e-4).weight_decay() == 3e-4);
  CHECK(WeightDecayOptions(1.0).decayed().is_all());
  const auto before = optim_test::copy_of(p.grads().data(), std::size_t(p.grads().size()));
  CHECK(weight_decay(p, 0.0) == 0.0);
  CHECK(optim_test::same_bits(p.grads().data(), before.data(), before.size()));
}
