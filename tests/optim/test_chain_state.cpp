// Chain (transforms then an optimizer, as one type) and saving/restoring
// optimizer and EMA state by name: a round trip through a name -> values map
// continues bit for bit.
#include <catch2/catch.hpp>

#include <cifarnet/optim/optim.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "optim_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::optim;

namespace {
/// A small "network": two conv-like tensors, a BN state buffer, a dense layer.
template <class T>
Parameters<T> model() {
  Parameters<T> p;
  p.add({"conv1/weights", {3, 3, 2, 4}});
  p.add({"conv1/biases", {4}});
  p.add({"bn1/moving_mean", {4}, false});
  p.add({"logits/weights", {4, 10}});
  p.add({"logits/biases", {10}});
  p.allocate();
  Rng rng(7);
  for (std::size_t i = 0; i < p.count(); ++i)
    for (std::size_t j = 0; j < p.info(i).size; ++j) p.value(i)[j] = T(rng.normal() * 0.1);
  return p;
}

/// Deterministic pseudo-gradients for step `s` that depend on the values (so
/// a wrong restore shows up later), with an occasional large one to clip.
template <class T>
void fake_backward(Parameters<T>& p, int s) {
  p.zero_grad();
  for (std::size_t i = 0; i < p.count(); ++i) {
    if (!p.info(i).trainable) continue;
    for (std::size_t j = 0; j < p.info(i).size; ++j)
      p.grad(i)[j] = T(std::sin(double(j + 1) * 0.37 + s) + 0.5 * double(p.value(i)[j]) +
                       (j == 0 && s % 3 == 0 ? 9 : 0));
  }
  // BN-like state update
  for (std::size_t j = 0; j < 4; ++j) p.value(2)[j] = T(0.9) * p.value(2)[j] + T(0.1) * T(s + j);
}

template <class T>
std::vector<T> all_values(const Parameters<T>& p) {
  std::vector<T> v(p.values().data(), p.values().data() + p.values().size());
  v.insert(v.end(), p.state().data(), p.state().data() + p.state().size());
  return v;
}

template <class T>
void copy_values(const Parameters<T>& from, Parameters<T>& to) {
  to.values() = from.values();
  to.state() = from.state();
}

using Recipe = Chain<CheckNumerics, GradientMultipliers, ClipByGlobalNorm, Momentum>;
}  // namespace

TEST_CASE("A Chain runs its transforms in order, then the optimizer", "[optim][chain]") {
  auto a = model<double>();
  auto b = model<double>();
  BasicChain<double, GradientMultipliers, ClipByGlobalNorm, ClipByNorm, Momentum> chain(
      a, GradientMultipliersOptions({{"logits/*", 2.0}}), ClipByGlobalNormOptions(3.0),
      ClipByNormOptions(1.0), MomentumOptions().momentum(0.9).nesterov(true));
  Momentum<double> mom(b, MomentumOptions().momentum(0.9).nesterov(true));
  for (int s = 0; s < 6; ++s) {
    fake_backward(a, s);
    fake_backward(b, s);
    chain.step(a, 0.05);
    multiply_gradients(b, GradientMultipliersOptions({{"logits/*", 2.0}}));
    const double norm = clip_by_global_norm(b, 3.0);
    CHECK(chain.get<ClipByGlobalNorm>().last_norm() == norm);
    clip_by_norm(b, 1.0);
    mom.step(b, 0.05);
    REQUIRE(optim_test::same_bits(a.values().data(), b.values().data(), std::size_t(a.values().size())));
  }
  CHECK(state_dict(chain) == state_dict(mom));
  CHECK(&chain.optimizer() == &chain.get<3>());
  CHECK(chain.get<Momentum>().options().nesterov());
}

TEST_CASE("Chain<WeightDecay, Momentum> equals weight decay then momentum, bit for bit",
          "[optim][chain][weight_decay]") {
  for (const double wd : {2e-4, 0.0}) {
    auto a = model<float>(), b = model<float>(), c = model<float>();
    Chain<WeightDecay, Momentum> chain(a, WeightDecayOptions(wd), MomentumOptions().momentum(0.9));
    Chain<WeightDecay, Momentum> phases(c, WeightDecayOptions(wd), MomentumOptions().momentum(0.9));
    Momentum<float> mom(b, MomentumOptions().momentum(0.9));
    for (int s = 0; s < 6; ++s) {
      fake_backward(a, s);
      fake_backward(b, s);
      fake_backward(c, s);
      chain.step(a, 0.05);
      const double loss = wd > 0 ? weight_decay(b, wd) : 0.0;
      mom.step(b, 0.05);
      // the Trainer's way: regularize (its term), then update
      CHECK(phases.regularize(c) == loss);
      CHECK(chain.get<WeightDecay>().loss() == loss);
      phases.update(c, 0.05);
      REQUIRE(optim_test::same_bits(a.values().data(), b.values().data(), std::size_t(a.values().size())));
      REQUIRE(optim_test::same_bits(c.values().data(), b.values().data(), std::size_t(c.values().size())));
    }
    CHECK(state_dict(chain) == state_dict(mom));  // no state of its own: checkpoints are unchanged
  }
  // a Chain without regularizers regularizes nothing
  auto p = model<float>();
  Chain<ClipByGlobalNorm, Momentum> plain(p, ClipByGlobalNormOptions(1.0), MomentumOptions());
  fake_backward(p, 0);
  const auto grads = optim_test::copy_of(p.grads().data(), std::size_t(p.grads().size()));
  CHECK(plain.regularize(p) == 0.0);
  CHECK(optim_test::same_bits(p.grads().data(), grads.data(), grads.size()));
}

TEST_CASE("A Chain's weight decay comes before its transforms and decays the chain's selection",
          "[optim][chain][weight_decay][select]") {
  auto a = model<double>(), b = model<double>();
  BasicChain<double, WeightDecay, ClipByGlobalNorm, Momentum> chain(
      a, variables_to_train({"logits/*"}), WeightDecayOptions(0.01).decay(Selection({"*/weights"})),
      ClipByGlobalNormOptions(1.0), MomentumOptions());
  CHECK(chain.get<WeightDecay>().decayed() == std::vector<std::string>{"logits/weights"});
  fake_backward(a, 3);
  fake_backward(b, 3);
  chain.step(a, 0.1);
  WeightDecay<double>(b, WeightDecayOptions(0.01).decay(Selection({"logits/weights"}))).apply(b);
  ClipByGlobalNorm<double>(b, ClipByGlobalNormOptions(1.0), variables_to_train({"logits/*"})).apply(b);
  Momentum<double>(b, MomentumOptions(), variables_to_train({"logits/*"})).step(b, 0.1);
  CHECK(optim_test::same_bits(a.values().data(), b.values().data(), std::size_t(a.values().size())));
  // a decay pattern outside the chain's selection matches no trained parameter
  CHECK_THROWS_WITH((BasicChain<double, WeightDecay, Momentum>(
                        a, variables_to_train({"logits/*"}),
                        WeightDecayOptions(0.01).decay(Selection({"conv1/weights"})), MomentumOptions())),
                    Catch::Contains("decay pattern 'conv1/weights' matches no trained parameter"));
}

TEST_CASE("A Chain over variables_to_train builds every stage over the selection", "[optim][chain][select]") {
  auto p = model<float>();
  const auto before = all_values(p);
  Chain<ClipByGlobalNorm, Adam> chain(p, variables_to_train({"logits/*"}), ClipByGlobalNormOptions(1.0),
                                      AdamOptions());
  fake_backward(p, 1);
  float logits_sq = 0;
  for (std::size_t j = 0; j < 40; ++j) logits_sq += p.grad(3)[j] * p.grad(3)[j];
  for (std::size_t j = 0; j < 10; ++j) logits_sq += p.grad(4)[j] * p.grad(4)[j];
  chain.step(p, 0.01);
  CHECK(chain.get<ClipByGlobalNorm>().last_norm() == Approx(std::sqrt(logits_sq)).epsilon(1e-6));
  for (std::size_t j = 0; j < 72; ++j) CHECK(p.value(0)[j] == before[p.info(0).offset + j]);  // conv1 frozen
  CHECK(p.value(3)[0] != before[p.info(3).offset]);
  std::vector<std::string> names;
  chain.visit_state(
      [&](const std::string& n, float*, const std::vector<std::size_t>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"logits/weights/Adam", "logits/weights/Adam_1",
                                          "logits/biases/Adam", "logits/biases/Adam_1", "beta1_power",
                                          "beta2_power"});
}

TEST_CASE("A Chain checks the learning rate before any transform runs", "[optim][chain]") {
  auto p = model<float>();
  Recipe chain(p, {}, GradientMultipliersOptions({{"conv1/weights", 0.5}}), ClipByGlobalNormOptions(5.0),
               MomentumOptions());
  fake_backward(p, 0);
  const std::vector<float> grads(p.grads().data(), p.grads().data() + p.grads().size());
  CHECK_THROWS_AS(chain.step(p, std::nan("")), ConfigError);
  CHECK(optim_test::same_bits(p.grads().data(), grads.data(), grads.size()));
  // and CheckNumerics, first in the recipe, stops a NaN before anything moves
  p.grad(3)[5] = std::nan("");
  const auto values = all_values(p);
  CHECK_THROWS_WITH(chain.step(p, 0.1), Catch::Contains("'logits/weights' is NaN at element 5"));
  CHECK(all_values(p) == values);
}

TEST_CASE("Saving and restoring optimizer and EMA state by name continues bit for bit", "[optim][state]") {
  // Reference: 10 uninterrupted steps. Resumed: 4 steps, state saved to a map,
  // a fresh arena/optimizer/EMA restored from the maps, 6 more steps.
  auto run = [](auto& p, auto& opt, auto& ema, auto& avg, int from, int to) {
    for (int s = from; s < to; ++s) {
      fake_backward(p, s);
      opt.step(p, piecewise_constant({3, 7}, {0.1, 0.05, 0.01})(s));
      ema.apply(p, s + 1);
      avg.apply(0.5 + s);
    }
  };
  auto check_resume = [&](auto make_opt) {
    auto ref = model<float>();
    auto opt_ref = make_opt(ref);
    ExponentialMovingAverage<float> ema_ref(ref, ExponentialMovingAverageOptions(0.99));
    ScalarMovingAverage<float> avg_ref("total_loss");
    run(ref, opt_ref, ema_ref, avg_ref, 0, 10);

    auto a = model<float>();
    auto opt_a = make_opt(a);
    ExponentialMovingAverage<float> ema_a(a, ExponentialMovingAverageOptions(0.99));
    ScalarMovingAverage<float> avg_a("total_loss");
    run(a, opt_a, ema_a, avg_a, 0, 4);
    const auto saved_opt = state_dict(opt_a);
    const auto saved_ema = state_dict(ema_a);
    const auto saved_avg = state_dict(avg_a);

    auto b = model<float>();  // same layout, fresh object
    b.values().setZero();
    copy_values(a, b);
    auto opt_b = make_opt(b);
    ExponentialMovingAverage<float> ema_b(b, ExponentialMovingAverageOptions(0.99));
    ScalarMovingAverage<float> avg_b("total_loss");
    load_state_dict(opt_b, saved_opt);
    load_state_dict(ema_b, saved_ema);
    load_state_dict(avg_b, saved_avg);
    run(b, opt_b, ema_b, avg_b, 4, 10);

    CHECK(optim_test::same_bits(b.values().data(), ref.values().data(), std::size_t(ref.values().size())));
    CHECK(optim_test::same_bits(b.state().data(), ref.state().data(), std::size_t(ref.state().size())));
    CHECK(state_dict(opt_b) == state_dict(opt_ref));
    CHECK(state_dict(ema_b) == state_dict(ema_ref));
    CHECK(avg_b.value() == avg_ref.value());
    return saved_opt;
  };
  SECTION("Momentum") {
    const auto saved =
        check_resume([](auto& p) { return Momentum<float>(p, MomentumOptions().momentum(0.9)); });
    CHECK(saved.size() == 4);
    CHECK(saved.count("conv1/weights/Momentum") == 1);
    CHECK(saved.at("conv1/weights/Momentum").size() == 72);
  }
  SECTION("Adam") {
    const auto saved = check_resume([](auto& p) { return Adam<float>(p); });
    CHECK(saved.size() == 10);
    CHECK(saved.at("beta1_power") == std::vector<float>{0.9f * 0.9f * 0.9f * 0.9f * 0.9f});
  }
  SECTION("a Chain with clipping and Nesterov momentum") {
    check_resume([](auto& p) {
      return Chain<CheckNumerics, ClipByGlobalNorm, Momentum>(p, {}, ClipByGlobalNormOptions(2.0),
                                                              MomentumOptions().nesterov(true));
    });
  }
}

TEST_CASE("Loading state checks every name and size first and changes nothing on error", "[optim][state]") {
  auto p = model<double>();
  Adam<double> adam(p);
  fake_backward(p, 0);
  adam.step(p, 0.1);
  auto saved = state_dict(adam);
  const auto original = saved;
  saved["extra/ignored"] = {1.0, 2.0};
  CHECK_NOTHROW(load_state_dict(adam, saved));
  CHECK(state_dict(adam) == original);

  auto missing = original;
  missing.erase("logits/biases/Adam_1");
  for (auto& [k, v] : missing)
    for (auto& x : v) x = 42.0;
  CHECK_THROWS_WITH(load_state_dict(adam, missing), Catch::Contains("'logits/biases/Adam_1' is missing"));
  CHECK(state_dict(adam) == original);

  auto wrong = original;
  wrong["conv1/biases/Adam"].push_back(0.0);
  wrong["beta1_power"] = {7.0};
  CHECK_THROWS_WITH(load_state_dict(adam, wrong), Catch::Contains("'conv1/biases/Adam' has 4 elements"));
  CHECK_THROWS_AS(load_state_dict(adam, wrong), ShapeError);
  CHECK(state_dict(adam) == original);
}
