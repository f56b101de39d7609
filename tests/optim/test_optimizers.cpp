// GradientDescent, Momentum (and Nesterov), Adam: hand-computed updates,
// TensorFlow's golden values step by step, options validation, state
// handling and the one-tensor arena used to optimize an image.
#include <catch2/catch.hpp>

#include <cifarnet/optim/adam.hpp>
#include <cifarnet/optim/momentum.hpp>
#include <cifarnet/optim/sgd.hpp>
#include <cifarnet/optim/state.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "optim_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::optim;
using optim_test::ulps;

namespace {
/// One trainable scalar-vector "w" (n elements) and one state buffer "s".
template <class T>
Parameters<T> tiny(std::size_t n = 3) {
  Parameters<T> p;
  p.add({"w", {n}});
  p.add({"s", {2}, false});
  p.allocate();
  return p;
}
}  // namespace

TEMPLATE_TEST_CASE("GradientDescent applies var -= lr * grad", "[optim][sgd]", float, double) {
  using T = TestType;
  auto p = tiny<T>();
  p.value(0)[0] = T(1), p.value(0)[1] = T(-2), p.value(0)[2] = T(0.5);
  p.grad(0)[0] = T(0.5), p.grad(0)[1] = T(-4), p.grad(0)[2] = T(0);
  GradientDescent opt(p);
  opt.step(p, 0.25);
  CHECK(p.value(0)[0] == T(0.875));
  CHECK(p.value(0)[1] == T(-1));
  CHECK(p.value(0)[2] == T(0.5));
  opt.step(p, 0.0);
  CHECK(p.value(0)[0] == T(0.875));
  int calls = 0;
  opt.visit_state([&](const std::string&, T*, const std::vector<std::size_t>&) { ++calls; });
  CHECK(calls == 0);
}

TEMPLATE_TEST_CASE("Momentum accumulates accum = m*accum + g and applies var -= lr*accum",
                   "[optim][momentum]", float, double) {
  using T = TestType;
  auto p = tiny<T>(1);
  Momentum opt(p, MomentumOptions().momentum(0.5));
  p.grad(0)[0] = T(1);
  opt.step(p, 0.5);
  CHECK(*opt.accumulator("w") == T(1));
  CHECK(p.value(0)[0] == T(-0.5));
  opt.step(p, 0.5);
  CHECK(*opt.accumulator("w") == T(1.5));
  CHECK(p.value(0)[0] == T(-1.25));
  // a new learning rate applies to the whole accumulator, as in TF
  p.grad(0)[0] = T(0);
  opt.step(p, 1.0);
  CHECK(*opt.accumulator("w") == T(0.75));
  CHECK(p.value(0)[0] == T(-2));
}

TEMPLATE_TEST_CASE("Momentum with Nesterov applies var -= lr*(g + m*accum) after updating accum",
                   "[optim][momentum]", float, double) {
  using T = TestType;
  auto p = tiny<T>(1);
  Momentum opt(p, MomentumOptions().momentum(0.5).nesterov(true));
  p.grad(0)[0] = T(1);
  opt.step(p, 0.5);  // accum 1; var -= 0.5 + 0.25
  CHECK(*opt.accumulator("w") == T(1));
  CHECK(p.value(0)[0] == T(-0.75));
  opt.step(p, 0.5);  // accum 1.5; var -= 0.5 + 0.375
  CHECK(*opt.accumulator("w") == T(1.5));
  CHECK(p.value(0)[0] == T(-1.625));
}

TEMPLATE_TEST_CASE("Adam folds the bias correction into the step size as TF does", "[optim][adam]", float,
                   double) {
  using T = TestType;
  auto p = tiny<T>(1);
  Adam opt(p, AdamOptions().beta1(0.5).beta2(0.75).epsilon(1.0));
  CHECK(opt.beta1_power() == T(0.5));
  CHECK(opt.beta2_power() == T(0.75));
  p.grad(0)[0] = T(2);
  // alpha = 1 * sqrt(1 - 0.75) / (1 - 0.5) = 1; m = 1; v = 1; var -= 1 * 1 / (1 + 1)
  opt.step(p, 1.0);
  CHECK(*opt.first_moment("w") == T(1));
  CHECK(*opt.second_moment("w") == T(1));
  CHECK(p.value(0)[0] == T(-0.5));
  CHECK(opt.beta1_power() == T(0.25));
  CHECK(opt.beta2_power() == T(0.5625));
  // step 2, g = 2: m = 1.5, v = 1.75, alpha = sqrt(0.4375) / 0.75
  opt.step(p, 1.0);
  CHECK(*opt.first_moment("w") == T(1.5));
  CHECK(*opt.second_moment("w") == T(1.75));
  const long double alpha = std::sqrt(0.4375L) / 0.75L;
  const long double expect = -0.5L - alpha * 1.5L / (std::sqrt(1.75L) + 1.0L);
  CHECK(ulps(p.value(0)[0], T(expect)) <= 2);
  // with TF's defaults the first step moves each weight by about lr * sign(g)
  auto q = tiny<T>(3);
  Adam def(q);
  CHECK(def.options().beta1() == 0.9);
  CHECK(def.options().beta2() == 0.999);
  CHECK(def.options().epsilon() == 1e-8);
  q.grad(0)[0] = T(3), q.grad(0)[1] = T(-0.001), q.grad(0)[2] = T(0);
  def.step(q, 0.01);
  CHECK(q.value(0)[0] == Approx(-0.01).epsilon(1e-5));
  // epsilon is added to sqrt(v) = sqrt(1 - beta2) * |g| before correction ("epsilon hat")
  const double s = std::sqrt(0.001) * 0.001;
  CHECK(q.value(0)[1] == Approx(0.01 * s / (s + 1e-8)).epsilon(1e-5));
  CHECK(q.value(0)[2] == T(0));
}

namespace {
/// Runs an optimizer over the golden arena and compares every step with TF.
template <class T, class Opt>
void check_against_tf(const std::string& name, Opt&& opt, Parameters<T>& p) {
  const auto& g = optim_test::golden()["optimizers"][name][optim_test::dtype_name<T>()];
  const auto& lrs = optim_test::golden()["inputs"]["lrs"];
  // TF's slot keys -> our slot-name suffixes
  const std::map<std::string, std::string> slot_suffix = {
      {"momentum", "/Momentum"}, {"m", "/Adam"}, {"v", "/Adam_1"}};
  const std::vector<T> state_before = optim_test::copy_of(p.value(1), 2);
  for (std::size_t s = 0; s < g["steps"].size(); ++s) {
    optim_test::golden_grads(p, s);
    opt.step(p, lrs[s].template get<double>());
    std::map<std::string, std::vector<T>> ours = state_dict(opt);
    ours["layer/weights"] = optim_test::copy_of(p.value(0), 6);
    ours["layer/biases"] = optim_test::copy_of(p.value(2), 2);
    for (const auto& [key, val] : g["steps"][s].items()) {
      std::string our_key = "layer/" + key;
      for (const auto& [tf_slot, suffix] : slot_suffix) {
        const std::string tail = "/" + tf_slot;
        if (key.size() > tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0)
          our_key = "layer/" + key.substr(0, key.size() - tail.size()) + suffix;
      }
      if (key == "beta1_power" || key == "beta2_power") our_key = key;
      INFO(name << " " << optim_test::dtype_name<T>() << " step " << s << " " << key << " as " << our_key);
      REQUIRE(ours.count(our_key) == 1);
      const auto want =
          val.is_array() ? optim_test::as_vector<T>(val) : std::vector<T>{T(val.template get<double>())};
      const auto& got = ours[our_key];
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": ours " << got[i] << ", TF " << want[i]);
        CHECK(ulps(got[i], want[i]) == 0);
      }
    }
  }
  // our state names are exactly TF's variable names (less the variables themselves)
  std::set<std::string> tf_names;
  for (const auto& n : g["variables"]) tf_names.insert(n.template get<std::string>());
  std::set<std::string> our_names = {"layer/weights", "layer/biases"};
  opt.visit_state([&](const std::string& n, T*, const std::vector<std::size_t>&) { our_names.insert(n); });
  if (name != "adam_custom") CHECK(our_names == tf_names);
  CHECK(optim_test::copy_of(p.value(1), 2) == state_before);  // non-trainable state untouched
}
}  // namespace

TEMPLATE_TEST_CASE("Optimizers match TensorFlow's golden updates step by step", "[optim][golden]", float,
                   double) {
  using T = TestType;
  // Bit-exact: same expressions, same rounding, no FMA contraction.
  SECTION("GradientDescent") {
    auto p = optim_test::golden_arena<T>();
    check_against_tf<T>("sgd", GradientDescent<T>(p), p);
  }
  SECTION("Momentum") {
    auto p = optim_test::golden_arena<T>();
    check_against_tf<T>("momentum", Momentum<T>(p, MomentumOptions().momentum(0.9)), p);
  }
  SECTION("Momentum with Nesterov") {
    auto p = optim_test::golden_arena<T>();
    check_against_tf<T>("nesterov", Momentum<T>(p, MomentumOptions().momentum(0.9).nesterov(true)), p);
  }
  SECTION("Adam with TF's defaults") {
    auto p = optim_test::golden_arena<T>();
    check_against_tf<T>("adam", Adam<T>(p), p);
  }
  SECTION("Adam with beta1 0.5, beta2 0.9, epsilon 1e-3") {
    auto p = optim_test::golden_arena<T>();
    check_against_tf<T>("adam_custom", Adam<T>(p, AdamOptions().beta1(0.5).beta2(0.9).epsilon(1e-3)), p);
  }
}

TEST_CASE("Optimizer options are validated up front, naming the option", "[optim][options]") {
  auto p = tiny<float>();
  auto throws_naming = [](auto&& make, const std::string& what) {
    try {
      make();
      FAIL("no ConfigError for " << what);
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
  };
  throws_naming([&] { Momentum<float>(p, MomentumOptions().momentum(-0.1)); }, "'momentum'");
  throws_naming([&] { Momentum<float>(p, MomentumOptions().momentum(std::nan(""))); }, "'momentum'");
  throws_naming([&] { Momentum<float>(p, MomentumOptions().name("")); }, "'name'");
  throws_naming([&] { Adam<float>(p, AdamOptions().beta1(1.0)); }, "'beta1'");
  throws_naming([&] { Adam<float>(p, AdamOptions().beta2(-0.5)); }, "'beta2'");
  throws_naming([&] { Adam<float>(p, AdamOptions().epsilon(0.0)); }, "'epsilon'");
  throws_naming([&] { GradientDescent<float>(p, GradientDescentOptions().name("")); }, "'name'");
  Momentum<float> m(p);
  throws_naming([&] { m.step(p, std::nan("")); }, "learning rate");
  throws_naming([&] { m.step(p, -0.1); }, "learning rate");
  throws_naming([&] { m.step(p, std::numeric_limits<double>::infinity()); }, "learning rate");
  // defaults are TF's / the ResNet recipe's
  CHECK(MomentumOptions().momentum() == 0.9);
  CHECK_FALSE(MomentumOptions().nesterov());
}

TEST_CASE("An optimizer refuses an arena with another layout or one not allocated", "[optim][options]") {
  auto p = tiny<float>(3);
  auto other = tiny<float>(40);
  Momentum<float> m(p);
  CHECK_THROWS_AS(m.step(other, 0.1), ShapeError);
  // same counts and sizes, other names: still refused, naming the parameter
  Parameters<float> renamed;
  renamed.add({"v", {3}});
  renamed.add({"s", {2}, false});
  renamed.allocate();
  CHECK_THROWS_WITH(m.step(renamed, 0.1), Catch::Contains("is 'w' (3 elements), but step got 'v'"));
  Parameters<float> unallocated;
  unallocated.add({"w", {3}});
  CHECK_THROWS_AS(Adam<float>(unallocated), Error);
}

TEST_CASE("Slots exist only for trained parameters and are named as TF names them", "[optim][state]") {
  auto p = tiny<double>();
  Adam<double> adam(p, AdamOptions().name("Adam"));
  std::vector<std::string> names;
  adam.visit_state([&](const std::string& n, double*, const std::vector<std::size_t>& shape) {
    names.push_back(n);
    if (n == "w/Adam") CHECK(shape == std::vector<std::size_t>{3});
    if (n == "beta1_power") CHECK(shape.empty());
  });
  CHECK(names == std::vector<std::string>{"w/Adam", "w/Adam_1", "beta1_power", "beta2_power"});
  Momentum<double> mom(p, MomentumOptions().name("Mom"));
  names.clear();
  mom.visit_state(
      [&](const std::string& n, double*, const std::vector<std::size_t>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"w/Mom"});
  CHECK(mom.accumulator("s") == nullptr);  // state has no slot
}

TEST_CASE("A one-tensor arena lets Adam optimize an image in place", "[optim][adam]") {
  // The style-transfer use: the image is the only "parameter".
  Parameters<float> img;
  img.add({"image", {1, 25, 33, 3}});
  img.allocate();
  const std::size_t n = img.info(0).size;
  std::vector<float> target(n);
  for (std::size_t i = 0; i < n; ++i) target[i] = float(i % 97) - 48.0f;
  Adam<float> opt(img);
  for (int it = 0; it < 300; ++it) {
    float* x = img.value(0);
    float* g = img.grad(0);
    for (std::size_t i = 0; i < n; ++i) g[i] = 2 * (x[i] - target[i]);  // d/dx (x - t)^2
    opt.step(img, 2.0);                                                 // the seed's lr
  }
  double max_err = 0;
  for (std::size_t i = 0; i < n; ++i)
    max_err = std::max(max_err, double(std::fabs(img.value(0)[i] - target[i])));
  CHECK(max_err < 1.0);
  CHECK(opt.beta1_power() == Approx(std::pow(0.9, 301)).epsilon(1e-4));
}

TEST_CASE("Large arenas run the flat passes in parallel with the same result as serial",
          "[optim][momentum]") {
  // 200k elements exceed the parallel threshold; chunk results do not depend on threads.
  Parameters<float> a, b;
  for (auto* p : {&a, &b}) {
    p->add({"big", {200000}});
    p->add({"small", {5}});
    p->allocate();
    for (std::size_t i = 0; i < 200000; ++i) p->grad(0)[i] = float(i % 13) * 0.125f - 0.5f;
    for (std::size_t i = 0; i < 5; ++i) p->grad(1)[i] = float(i);
  }
  Momentum<float> ma(a), mb(b, MomentumOptions(), variables_to_train({"big", "small"}));
  ma.step(a, 0.5);
  mb.step(b, 0.5);
  CHECK(optim_test::same_bits(a.value(0), b.value(0), 200000));
  CHECK(optim_test::same_bits(a.value(1), b.value(1), 5));
  // spot-check the arithmetic: var = -lr * g after one step from zero
  CHECK(a.value(0)[3] == -0.5f * (3 * 0.125f - 0.5f));
}
