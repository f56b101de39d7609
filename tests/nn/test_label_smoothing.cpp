// Label-smoothed softmax cross-entropy (loss/label_smoothing.hpp): loss and
// d/dlogits against PyTorch's F.cross_entropy(label_smoothing=s,
// reduction=sum|mean) in float64 (tests/fixtures/recipe/
// label_smoothing.safetensors, scripts/recipe_goldens/), the gradient
// against central finite differences, and the errors.
#include <catch2/catch.hpp>

#include <cifarnet/core/tensor.hpp>
#include <cifarnet/loss/label_smoothing.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "recipe_golden.hpp"

using namespace cifarnet;

namespace {
Tensor<double> logits_of(const std::vector<double>& v, std::size_t n, std::size_t k) {
  Tensor<double> t(Tensor<double>::shape_type{n, k, 1, 1});
  std::copy(v.begin(), v.end(), t.data());
  return t;
}
}  // namespace

TEST_CASE("Label-smoothed cross-entropy matches PyTorch's, sum and mean", "[nn][loss][label_smoothing]") {
  const io::StateDict g = test::recipe_golden("label_smoothing.safetensors");
  const auto& zs = g.at("logits");
  const std::size_t n = zs.shape[0], k = zs.shape[1];
  const Tensor<double> z = logits_of(zs.to_floating<double>(), n, k);
  const std::vector<std::int32_t> labels = g.at("labels").values<std::int32_t>();
  for (double s : {0.0, 0.2, 1.0})
    for (Reduction r : {Reduction::Sum, Reduction::Mean}) {
      std::string name = (s == 0.0 ? "s0" : s == 1.0 ? "s1" : "s0.2");
      name += r == Reduction::Sum ? "_sum" : "_mean";
      INFO(name);
      Tensor<double> dz;
      const double loss = softmax_cross_entropy(z, labels, CrossEntropyOptions{s, r}, &dz);
      const double want = test::golden_values(g, name + "/loss")[0];
      CHECK(loss == Approx(want).epsilon(1e-13));
      const std::vector<double> got(dz.data(), dz.data() + dz.size());
      CHECK(test::scaled_max_error(got, test::golden_values(g, name + "/dlogits")) <= 1e-13);
    }
  // s = 0 with the mean is the plain loss.
  Tensor<double> d0, d1;
  CHECK(softmax_cross_entropy(z, labels, CrossEntropyOptions{}, &d0) ==
        Approx(softmax_cross_entropy(z, labels, &d1)).epsilon(1e-15));
}

TEST_CASE("Label-smoothed cross-entropy's gradient matches finite differences",
          "[nn][grad][label_smoothing]") {
  Rng rng(5);
  const std::size_t n = 4, k = 7;
  std::vector<double> v(n * k);
  for (auto& x : v) x = rng.uniform(-3.0, 3.0);
  Tensor<double> z = logits_of(v, n, k);
  const std::vector<std::int32_t> labels = {0, 6, 3, 3};
  for (Reduction r : {Reduction::Sum, Reduction::Mean}) {
    const CrossEntropyOptions o{0.2, r};
    Tensor<double> dz;
    softmax_cross_entropy(z, labels, o, &dz);
    for (std::size_t i = 0; i < z.size(); ++i) {
      const double keep = z.data()[i], eps = 1e-6;
      z.data()[i] = keep + eps;
      const double up = softmax_cross_entropy(z, labels, o);
      z.data()[i] = keep - eps;
      const double down = softmax_cross_entropy(z, labels, o);
      z.data()[i] = keep;
      const double fd = (up - down) / (2 * eps);
      INFO("element " << i << ": analytic " << dz.data()[i] << ", finite differences " << fd);
      CHECK(std::abs(dz.data()[i] - fd) <= 1e-8 + 1e-6 * std::abs(fd));
    }
  }
}

TEST_CASE("Label-smoothed cross-entropy rejects a bad smoothing and bad labels",
          "[nn][loss][label_smoothing]") {
  Tensor<float> z(Tensor<float>::shape_type{2, 3, 1, 1});
  z.fill(0.0f);
  CHECK_THROWS_AS(softmax_cross_entropy(z, {0, 1}, CrossEntropyOptions{1.5, Reduction::Sum}), ConfigError);
  CHECK_THROWS_AS(softmax_cross_entropy(z, {0, 1}, CrossEntropyOptions{-0.1, Reduction::Sum}), ConfigError);
  CHECK_THROWS_WITH(softmax_cross_entropy(z, {0, 3}, CrossEntropyOptions{0.2, Reduction::Sum}),
                    Catch::Contains("label 3 of example 1"));
  CHECK_THROWS_AS(softmax_cross_entropy(z, {0}, CrossEntropyOptions{0.2, Reduction::Sum}), ShapeError);
}
