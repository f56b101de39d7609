// The airbench94 network (models/airbench.hpp): its size and parameter
// names, its output, and the recipe's initial weights and its training loop's
// untimed warm-up (recipes/airbench.hpp).
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/models/airbench.hpp>
#include <cifarnet/recipes/airbench.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace cifarnet;

namespace {
using Net = Model<Airbench94, backend::OneDnn>;

Tensor<float> random_images(std::size_t n, DataFormat fmt, std::uint64_t seed) {
  Tensor<float> x = make_tensor<float>({n, 3, 32, 32}, fmt);
  Rng rng(seed);
  for (auto& v : x) v = float(rng.normal());
  return x;
}
}  // namespace

TEST_CASE("Airbench94 has the original's 1,972,792 parameters, named by block", "[nn][airbench]") {
  Net net({3, 32, 32}, DataFormat::NHWC, airbench_options(), 1);
  const auto& P = net.parameters();
  // whiten 2·2·3·24 + 24; convolutions 3·3·(24·64 + 64·64 + 64·256 + 3·256·256);
  // BN gamma and beta 2·(2·64 + 4·256); head 256·10 (torch's numel sum).
  CHECK(P.num_trainable() == 1972792);
  CHECK(P.info(P.id("whiten/weights")).shape == std::vector<std::size_t>{2, 2, 3, 24});
  CHECK(P.info(P.id("whiten/biases")).size == 24);
  CHECK(P.info(P.id("head/weights")).shape == std::vector<std::size_t>{256, 10});
  std::size_t filters = 0, shifts = 0;
  for (const auto& info : P.infos()) {
    if (!info.trainable) continue;
    const std::string& n = info.name;
    if (n.rfind("block", 0) == 0 && n.size() > 8 && n.compare(n.size() - 8, 8, "/weights") == 0) ++filters;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, "/beta") == 0) ++shifts;
  }
  CHECK(filters == 6);  // what the recipe's Muon selects ("block*/weights")
  CHECK(shifts == 6);   // BN shifts ("*/beta")
  CHECK(net.output_shape(4) == Shape{4, 10, 1, 1});
  const Tensor<float> z = net.forward(random_images(2, DataFormat::NHWC, 3), Mode::Infer);
  for (float v : z) CHECK(std::isfinite(v));
}

TEST_CASE("airbench_init: U(1/sqrt(fan_in)) weights, Dirac filters, a unit-std head, whitening filters",
          "[nn][airbench][init]") {
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO(to_string(fmt));
    Net net({3, 32, 32}, fmt, airbench_options(), 1);
    const Tensor<float> images = random_images(64, fmt, 5);
    recipes::airbench_init(net, images, 7);
    const auto& P = net.parameters();
    // block2's first convolution (64 -> 256): filters 0..63 identities,
    // the others within 1/sqrt(3·3·64).
    std::size_t id = P.infos().size();
    for (std::size_t i = 0; i < P.infos().size(); ++i)
      if (P.info(i).trainable && P.info(i).name.rfind("block2/", 0) == 0 && P.info(i).shape.size() == 4) {
        id = i;
        break;
      }
    REQUIRE(id < P.infos().size());
    REQUIRE(P.info(id).shape == std::vector<std::size_t>{3, 3, 64, 256});
    const float* w = P.value(id);
    const double bound = 1.0 / std::sqrt(3.0 * 3.0 * 64.0);
    bool dirac = true, bounded = true;
    for (std::size_t y = 0; y < 3; ++y)
      for (std::size_t x = 0; x < 3; ++x)
        for (std::size_t i = 0; i < 64; ++i)
          for (std::size_t o = 0; o < 256; ++o) {
            const float v = w[((y * 3 + x) * 64 + i) * 256 + o];
            if (o < 64)
              dirac = dirac && v == (y == 1 && x == 1 && i == o ? 1.0f : 0.0f);
            else
              bounded = bounded && std::abs(v) <= bound;
          }
    CHECK(dirac);
    CHECK(bounded);
    // The head: unit sample standard deviation.
    const auto& head = P.info(P.id("head/weights"));
    const float* h = P.value(P.id("head/weights"));
    double mean = 0, sq = 0;
    for (std::size_t i = 0; i < head.size; ++i) mean += h[i];
    mean /= double(head.size);
    for (std::size_t i = 0; i < head.size; ++i) sq += (h[i] - mean) * (h[i] - mean);
    CHECK(std::sqrt(sq / double(head.size - 1)) == Approx(1.0).epsilon(1e-5));
    // The whitening filters: whitening_filters of the same images.
    const Whitening<float> wh = whitening_filters(images, fmt, 2, 2, 5e-4);
    const float* ww = P.value(P.id("whiten/weights"));
    REQUIRE(wh.filters.size() == 2 * 2 * 3 * 24);
    std::size_t same = 0;
    for (std::size_t i = 0; i < wh.filters.size(); ++i) same += ww[i] == wh.filters[i];
    CHECK(same == wh.filters.size());
    // BN: scale 1, shift 0.
    for (const auto& info : P.infos())
      if (info.trainable && info.name.size() > 6 && info.name.compare(info.name.size() - 6, 6, "/gamma") == 0)
        CHECK(P.value(P.id(info.name))[0] == 1.0f);
  }
}

TEST_CASE("train_airbench: the untimed warm-up leaves the run as it was, bit for bit", "[nn][airbench]") {
  // Batch 16 over 48 images: 3 steps an epoch, the fewest that show the
  // bias's last step and the steps after it (this case ran 73 s under ASan
  // at batch 32 over 96 images).
  const data::InMemoryDataset train = recipes::airbench_dataset(data::synthetic_cifar(48, 1));
  const data::InMemoryDataset test = recipes::airbench_dataset(data::synthetic_cifar(24, 2));
  recipes::AirbenchOptions o;
  o.batch_size = 16;
  o.epochs = 2;
  o.whiten_bias_epochs = 1;  // the bias trains 3 steps, then gets no gradient
  o.tta_level = 0;
  o.whitening_images = 16;
  o.seed = 4;
  o.warmup_steps = 0;
  const auto cold = recipes::train_airbench<backend::OneDnn>(train, test, o);
  o.warmup_steps = 2;
  const auto warm = recipes::train_airbench<backend::OneDnn>(train, test, o);
  CHECK(cold.warmup_seconds == 0);
  CHECK(warm.warmup_seconds > 0);
  REQUIRE(cold.epochs.size() == 2);
  REQUIRE(warm.epochs.size() == 2);
  CHECK(cold.steps == 6);
  for (std::size_t e = 0; e < 2; ++e) {  // bit for bit: the same weights, statistics and batches
    CHECK(warm.epochs[e].train_loss == cold.epochs[e].train_loss);
    CHECK(warm.epochs[e].val_acc == cold.epochs[e].val_acc);
  }
  CHECK(std::isfinite(cold.epochs[1].train_loss));
  o.warmup_steps = -1;
  CHECK_THROWS_AS(recipes::train_airbench<backend::OneDnn>(train, test, o), ConfigError);
}
