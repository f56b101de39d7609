// The in-memory epoch loader and its stages (data/in_memory.hpp) and
// test-time augmentation (data/tta.hpp): exact checks on small hand-made
// images.
#include <catch2/catch.hpp>

#include <cifarnet/data/in_memory.hpp>
#include <cifarnet/data/tta.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

using namespace cifarnet;
using namespace cifarnet::data;

namespace {
/// An h x w x c image whose pixel (y, x, ch) is base + 10·y + x + 100·ch.
Image ramp(std::size_t h, std::size_t w, std::size_t c, float base = 0) {
  Image img(h, w, c);
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t x = 0; x < w; ++x)
      for (std::size_t ch = 0; ch < c; ++ch)
        img.data[(y * w + x) * c + ch] = base + 10.0f * y + x + 100.0f * ch;
  return img;
}

InMemoryDataset ramps(std::size_t n, std::size_t h, std::size_t w, std::size_t c) {
  std::vector<Image> images;
  std::vector<std::int32_t> labels;
  for (std::size_t i = 0; i < n; ++i) {
    images.push_back(ramp(h, w, c, 1000.0f * i));
    labels.push_back(std::int32_t(i));
  }
  return InMemoryDataset(std::move(images), std::move(labels));
}

/// Image k of an NCHW batch, back in HWC.
Image batch_image(const Batch& b, std::size_t k, ImageGeometry g) {
  Image img(g.height, g.width, g.channels);
  const std::size_t hw = g.height * g.width;
  for (std::size_t p = 0; p < hw; ++p)
    for (std::size_t ch = 0; ch < g.channels; ++ch)
      img.data[p * g.channels + ch] = b.images.data()[(k * g.channels + ch) * hw + p];
  return img;
}
}  // namespace

TEST_CASE("reflect_index and translate_reflect follow PyTorch's reflect padding", "[data][in_memory]") {
  CHECK(reflect_index(-2, 4) == 2);
  CHECK(reflect_index(-1, 4) == 1);
  CHECK(reflect_index(0, 4) == 0);
  CHECK(reflect_index(3, 4) == 3);
  CHECK(reflect_index(4, 4) == 2);
  CHECK(reflect_index(5, 4) == 1);
  const Image in = ramp(3, 4, 1);  // rows 0 1 2 3 / 10 11 12 13 / 20 21 22 23
  Image out;
  translate_reflect(in, -1, 1, out);
  CHECK(out.data == std::vector<float>{11, 12, 13, 12, 1, 2, 3, 2, 11, 12, 13, 12});
  translate_reflect(in, 0, 0, out);
  CHECK(out.data == in.data);
  CHECK_THROWS_AS(translate_reflect(in, 3, 0, out), ConfigError);
}

TEST_CASE("AlternatingFlip flips each image in exactly one of two consecutive epochs", "[data][in_memory]") {
  const AlternatingFlip f{7};
  std::size_t first = 0;
  for (std::size_t i = 0; i < 2000; ++i) {
    CHECK(f.flipped(i, 0) != f.flipped(i, 1));
    CHECK(f.flipped(i, 0) == f.flipped(i, 2));
    CHECK(f.flipped(i, 3) == f.flipped(i, 1));
    first += f.flipped(i, 0);
  }
  CHECK(first > 900);  // about half start flipped
  CHECK(first < 1100);
  const AlternatingFlip g{8};
  bool differ = false;
  for (std::size_t i = 0; i < 64; ++i) differ = differ || f.flipped(i, 0) != g.flipped(i, 0);
  CHECK(differ);
  // As a stage: the mirror image, and no draw from the example's generator.
  Image img = ramp(2, 3, 2), scratch;
  Rng rng(1), untouched(1);
  std::size_t idx = 0;
  while (!f.flipped(idx, 0)) ++idx;  // an image flipped in epoch 0
  f(img, scratch, ExampleContext{idx, 0}, rng);
  CHECK(img.data == std::vector<float>{2, 102, 1, 101, 0, 100, 12, 112, 11, 111, 10, 110});
  CHECK(rng.uniform() == untouched.uniform());
}

TEST_CASE("EpochLoader serves each epoch once in a seeded permutation, dropping the last partial batch",
          "[data][in_memory]") {
  const InMemoryDataset set = ramps(10, 2, 3, 2);
  {
    EpochLoaderOptions o;
    o.batch_size = 4;
    o.shuffle = false;
    EpochLoader<> in_order(set, o);
    CHECK(in_order.batches_per_epoch() == 2);
    Batch b;
    REQUIRE(in_order.next(b));
    CHECK(b.labels == std::vector<std::int32_t>{0, 1, 2, 3});
    CHECK(batch_image(b, 2, set.geometry()).data == set.image(2).data);  // NCHW, exact
    REQUIRE(in_order.next(b));
    CHECK(b.labels == std::vector<std::int32_t>{4, 5, 6, 7});
    CHECK_FALSE(in_order.next(b));  // 8, 9 dropped
  }
  EpochLoaderOptions o;
  o.batch_size = 4;
  o.drop_last = false;
  o.seed = 3;
  EpochLoader<> loader(set, o);
  auto epoch_labels = [&](std::uint64_t e) {
    loader.start_epoch(e);
    std::vector<std::int32_t> all;
    Batch b;
    while (loader.next(b)) all.insert(all.end(), b.labels.begin(), b.labels.end());
    return all;
  };
  const auto e0 = epoch_labels(0), e1 = epoch_labels(1);
  CHECK(e0.size() == 10);
  CHECK(std::set<std::int32_t>(e0.begin(), e0.end()).size() == 10);
  CHECK(std::set<std::int32_t>(e1.begin(), e1.end()).size() == 10);
  CHECK(e0 != e1);
  CHECK(epoch_labels(0) == e0);  // reproducible, in any order
  o.batch_size = 11;
  o.drop_last = true;
  CHECK_THROWS_AS(EpochLoader<>(set, o), ConfigError);
}

TEST_CASE("EpochLoader's stages: alternating flip and reflect translation, exactly", "[data][in_memory]") {
  const InMemoryDataset set = ramps(40, 4, 5, 1);
  EpochLoaderOptions o;
  o.batch_size = 40;
  o.seed = 11;
  const AlternatingFlip flip{11};
  EpochLoader<AlternatingFlip, RandomTranslate<2>> loader(set, o, {flip, RandomTranslate<2>{}});
  std::set<std::pair<int, int>> seen;
  for (std::uint64_t e : {0, 1}) {
    loader.start_epoch(e);
    Batch b;
    REQUIRE(loader.next(b));
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::size_t idx = std::size_t(b.labels[k]);
      Image src = set.image(idx);
      if (flip.flipped(idx, e)) flip_left_right(src);
      const Image got = batch_image(b, k, set.geometry());
      int matches = 0;
      for (int dy = -2; dy <= 2; ++dy)
        for (int dx = -2; dx <= 2; ++dx) {
          Image want;
          translate_reflect(src, dy, dx, want);
          if (want.data == got.data) {
            ++matches;
            seen.insert({dy, dx});
          }
        }
      INFO("epoch " << e << " image " << idx);
      CHECK(matches == 1);  // the ramp's shifts are all distinct
    }
  }
  CHECK(seen.size() > 15);  // the 25 shifts are all drawn (80 draws)
  CHECK_THROWS_AS(EpochLoader<RandomTranslate<4>>(set, o), ConfigError);
}

TEST_CASE("Test-time augmentation averages mirrored and reflect-shifted views", "[data][tta]") {
  // One 1x3x3 image 1..9 and a forward with two logits: sum of w_p·x_p (w_p = p + 1) and sum of x_p².
  Tensor<float> x(Tensor<float>::shape_type{1, 1, 3, 3});
  for (std::size_t p = 0; p < 9; ++p) x.data()[p] = float(p + 1);
  auto f_of = [](const std::vector<float>& v) {
    double a = 0, b = 0;
    for (std::size_t p = 0; p < 9; ++p) {
      a += double(p + 1) * v[p];
      b += double(v[p]) * v[p];
    }
    return std::pair{a, b};
  };
  auto forward = [&](const Tensor<float>& v) {
    Tensor<float> z(Tensor<float>::shape_type{v.shape()[0], 2, 1, 1});
    const auto [a, b] = f_of(std::vector<float>(v.data(), v.data() + 9));
    z.data()[0] = float(a);
    z.data()[1] = float(b);
    return z;
  };
  const std::vector<float> id = {1, 2, 3, 4, 5, 6, 7, 8, 9}, flip = {3, 2, 1, 6, 5, 4, 9, 8, 7};
  const std::vector<float> up_left = {5, 4, 5, 2, 1, 2, 5, 4, 5}, down_right = {5, 6, 5, 8, 9, 8, 5, 6, 5};
  // both shifted views are their own mirror images
  auto mirror = [&](const std::vector<float>& a, const std::vector<float>& b) {
    const auto fa = f_of(a), fb = f_of(b);
    return std::pair{0.5 * fa.first + 0.5 * fb.first, 0.5 * fa.second + 0.5 * fb.second};
  };
  const auto l1 = mirror(id, flip), ul = mirror(up_left, up_left), dr = mirror(down_right, down_right);
  const Tensor<float> t0 = tta_logits(forward, x, DataFormat::NCHW, 0);
  CHECK(t0.data()[0] == Approx(f_of(id).first));
  const Tensor<float> t1 = tta_logits(forward, x, DataFormat::NCHW, 1);
  CHECK(t1.data()[0] == Approx(l1.first));
  CHECK(t1.data()[1] == Approx(l1.second));
  const Tensor<float> t2 = tta_logits(forward, x, DataFormat::NCHW, 2);
  CHECK(t2.data()[0] == Approx(0.5 * l1.first + 0.25 * ul.first + 0.25 * dr.first));
  CHECK(t2.data()[1] == Approx(0.5 * l1.second + 0.25 * ul.second + 0.25 * dr.second));
  CHECK_THROWS_AS(tta_logits(forward, x, DataFormat::NCHW, 3), ConfigError);
}

TEST_CASE("flip_batch and translate_batch agree in NCHW and NHWC", "[data][tta]") {
  Rng rng(4);
  const std::size_t n = 2, c = 3, h = 4, w = 5;
  Tensor<float> nchw(Tensor<float>::shape_type{n, c, h, w}), nhwc(Tensor<float>::shape_type{n, h, w, c});
  for (auto& v : nchw) v = float(rng.uniform());
  auto to_nhwc = [&](const Tensor<float>& a) {
    Tensor<float> b(Tensor<float>::shape_type{n, h, w, c});
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch)
        for (std::size_t y = 0; y < h; ++y)
          for (std::size_t x = 0; x < w; ++x)
            b.data()[((i * h + y) * w + x) * c + ch] = a.data()[((i * c + ch) * h + y) * w + x];
    return b;
  };
  nhwc = to_nhwc(nchw);
  Tensor<float> a, b;
  flip_batch(nchw, DataFormat::NCHW, a);
  flip_batch(nhwc, DataFormat::NHWC, b);
  CHECK(bool(to_nhwc(a) == b));
  translate_batch(nchw, DataFormat::NCHW, 1, -2, a);
  translate_batch(nhwc, DataFormat::NHWC, 1, -2, b);
  CHECK(bool(to_nhwc(a) == b));
  // Per image, translate_batch is translate_reflect.
  Image img(h, w, c), out;
  std::copy(nhwc.data(), nhwc.data() + h * w * c, img.data.begin());
  translate_reflect(img, 1, -2, out);
  CHECK(std::vector<float>(b.data(), b.data() + h * w * c) == out.data);
}
