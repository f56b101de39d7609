// optim::ParamGroups (optim/groups.hpp): each group steps its own variables
// with its own schedule and length, in the order added; a group that runs
// out stops and turns its variables' gradients off; overlapping groups, a
// missing optimizer, a negative length and an unknown name are errors.
#include <catch2/catch.hpp>

#include <cifarnet/optim/optim.hpp>

#include <memory>

using namespace cifarnet;
using namespace cifarnet::optim;

namespace {
Parameters<float> arena() {
  Parameters<float> p;
  p.add({"a/weights", {2}});
  p.add({"a/moving_mean", {1}, false});
  p.add({"b/biases", {1}});
  p.add({"c/weights", {1}});
  p.allocate();
  return p;
}
}  // namespace

TEST_CASE("ParamGroups steps each group with its schedule until its length runs out", "[optim][groups]") {
  Parameters<float> p = arena();
  ParamGroups<float> groups(p);
  const auto a = variables_to_train({"a/*"}), b = variables_to_train({"b/biases"});
  groups.add("a", a, std::make_unique<GradientDescent<float>>(p, GradientDescentOptions(), a),
             polynomial_decay(1.0, 4));
  auto& bopt = groups.add("b", b, std::make_unique<GradientDescent<float>>(p, GradientDescentOptions(), b),
                          Schedule(0.5), {2});
  static_assert(std::is_same_v<decltype(bopt), GradientDescent<float>&>, "add returns the optimizer");
  CHECK(groups.size() == 2);
  CHECK(groups.ids("a") == std::vector<std::size_t>{0});
  CHECK(groups.learning_rate("a", 1) == 0.75);
  CHECK(groups.learning_rate("b", 1) == 0.5);
  CHECK(groups.learning_rate("b", 2) == 0.0);  // past its length
  for (std::int64_t s = 0; s < 4; ++s) {
    p.grad(0)[0] = 1.0f;
    p.grad(2)[0] = 1.0f;
    p.grad(3)[0] = 1.0f;
    groups.step(p, s);
    CHECK(p.requires_grad(2) == (s < 1));  // off after b's last step (step 1)
  }
  // a: lr 1, 0.75, 0.5, 0.25; b: 0.5 twice; c: in no group.
  CHECK(p.value(0)[0] == -2.5f);
  CHECK(p.value(0)[1] == 0.0f);  // its gradient stayed 0
  CHECK(p.value(2)[0] == -1.0f);
  CHECK(p.value(3)[0] == 0.0f);
  CHECK(p.requires_grad(0));
  CHECK(p.requires_grad(3));
  CHECK(p.first_requiring_grad() == 0);
}

TEST_CASE("ParamGroups keeps gradients on when asked, and refuses bad groups naming them",
          "[optim][groups]") {
  Parameters<float> p = arena();
  ParamGroups<float> groups(p);
  const auto b = variables_to_train({"b/biases"});
  GroupOptions keep;
  keep.steps = 1;
  keep.stop_gradients = false;
  groups.add("b", b, std::make_unique<GradientDescent<float>>(p, GradientDescentOptions(), b), Schedule(0.1),
             keep);
  groups.step(p, 0);
  groups.step(p, 1);
  CHECK(p.requires_grad(2));
  const auto ab = variables_to_train({"a/weights", "b/*"});
  CHECK_THROWS_WITH(
      groups.add("ab", ab, std::make_unique<GradientDescent<float>>(p, GradientDescentOptions(), ab),
                 Schedule(0.1)),
      Catch::Contains("'b/biases' is in group 'b' and in group 'ab'"));
  const auto c = variables_to_train({"c/weights"});
  CHECK_THROWS_WITH(groups.add("c", c, std::unique_ptr<GradientDescent<float>>(), Schedule(0.1)),
                    Catch::Contains("group 'c' has no optimizer"));
  GroupOptions negative;
  negative.steps = -3;
  CHECK_THROWS_WITH(
      groups.add("c", c, std::make_unique<GradientDescent<float>>(p, GradientDescentOptions(), c),
                 Schedule(0.1), negative),
      Catch::Contains("group 'c' has a negative length"));
  CHECK_THROWS_AS(
      groups.add("x", variables_to_train({"x/*"}),
                 std::make_unique<GradientDescent<float>>(p, GradientDescentOptions(), c), Schedule(0.1)),
      ConfigError);  // a pattern that matches nothing
  CHECK_THROWS_WITH(groups.learning_rate("nope", 0), Catch::Contains("no group named 'nope'"));
  CHECK(groups.size() == 1);
}
