// Structured filter initialisers (core/filter_init.hpp): Dirac kernels by
// hand, and the whitening filters against a NumPy float64 computation made
// once (tests/fixtures/recipe/whitening.safetensors,
// scripts/recipe_goldens/), from NCHW and NHWC images.
#include <catch2/catch.hpp>

#include <cifarnet/core/filter_init.hpp>

#include <cmath>
#include <vector>

#include "recipe_golden.hpp"

using namespace cifarnet;

TEST_CASE("dirac_init makes the first min(in, out) filters identity kernels", "[nn][init][dirac]") {
  // 3x3 kernels, 2 inputs, 3 outputs: filters 0 and 1 are identities, filter 2 untouched.
  std::vector<float> w(3 * 3 * 2 * 3, 7.0f);
  dirac_init(w.data(), 3, 3, 2, 3);
  for (std::size_t y = 0; y < 3; ++y)
    for (std::size_t x = 0; x < 3; ++x)
      for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t o = 0; o < 3; ++o) {
          const float v = w[((y * 3 + x) * 2 + i) * 3 + o];
          INFO("y " << y << " x " << x << " in " << i << " out " << o);
          if (o == 2)
            CHECK(v == 7.0f);
          else
            CHECK(v == (y == 1 && x == 1 && i == o ? 1.0f : 0.0f));
        }
  // More inputs than outputs, even kernel: the centre is (K/2, K/2) = (1, 1), as PyTorch's dirac_.
  std::vector<double> v(2 * 2 * 3 * 2, -1.0);
  dirac_init(v.data(), 2, 2, 3, 2);
  for (std::size_t r = 0; r < 2 * 2 * 3; ++r)
    for (std::size_t o = 0; o < 2; ++o) {
      const std::size_t yx = r / 3, i = r % 3;
      CHECK(v[r * 2 + o] == (yx == 3 && i == o ? 1.0 : 0.0));
    }
  CHECK_THROWS_AS(dirac_init(v.data(), 0, 2, 3, 2), ShapeError);
}

TEST_CASE("whitening_filters matches NumPy's eigen-decomposition of the patch covariance",
          "[nn][init][whitening]") {
  const io::StateDict g = test::recipe_golden("whitening.safetensors");
  const auto& im = g.at("images");
  const std::size_t n = im.shape[0], c = im.shape[1], h = im.shape[2], w = im.shape[3];
  const std::vector<double> x = im.to_floating<double>();
  Tensor<double> nchw(Tensor<double>::shape_type{n, c, h, w}), nhwc(Tensor<double>::shape_type{n, h, w, c});
  std::copy(x.begin(), x.end(), nchw.data());
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t ch = 0; ch < c; ++ch)
      for (std::size_t y = 0; y < h; ++y)
        for (std::size_t xx = 0; xx < w; ++xx)
          nhwc.data()[((a * h + y) * w + xx) * c + ch] = x[((a * c + ch) * h + y) * w + xx];
  const auto want = test::oihw_to_hwio<double>(test::golden_values(g, "filters"), 2 * c * 4, c, 2, 2);
  const auto lambda = test::golden_values(g, "eigenvalues");
  for (auto [t, fmt] : {std::pair{&nchw, DataFormat::NCHW}, std::pair{&nhwc, DataFormat::NHWC}}) {
    INFO("format " << to_string(fmt));
    const Whitening<double> r = whitening_filters(*t, fmt, 2, 2, 5e-4);
    CHECK(test::scaled_max_error(r.eigenvalues, lambda) <= 1e-12);
    CHECK(test::scaled_max_error(r.filters, want) <= 1e-10);
  }
  CHECK_THROWS_AS(whitening_filters(nchw, DataFormat::NCHW, 6, 2), ShapeError);
  CHECK_THROWS_AS(whitening_filters(nchw, DataFormat::NCHW, 2, 2, 0.0), ConfigError);
}
