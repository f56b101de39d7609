// vision/style_transfer.hpp: the seed's loop on a tiny VGG-shaped net — the
// initial noise mix, the loss falling over 20 Adam steps, checkpoints that
// carry the image, the Adam slots and the global step under TF's names, a
// resume from step 20 that continues bit for bit, and the seed's reporting
// schedule.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/vision/style_transfer.hpp>
#include <cifarnet/demo/images.hpp>

#include "io/io_test_util.hpp"
#include "instances/vgg19.hpp"

using namespace cifarnet;
using namespace cifarnet::vision;
using iotest::TempDir;

namespace {
StyleTransferOptions tiny_options(std::size_t h, std::size_t w) {
  StyleTransferOptions o;
  o.height = h;
  o.width = w;
  o.seed = 7;
  return o;
}
}  // namespace

TEST_CASE("The seed reports after iterations 1-5, 10, 20, then every 20", "[vision][style]") {
  std::vector<std::int64_t> at;
  for (std::int64_t i = 0; i < 300; ++i)
    if (seed_reports(i)) at.push_back(i + 1);
  std::vector<std::int64_t> want{1, 2, 3, 4, 5, 10, 20};
  for (std::int64_t s = 40; s <= 300; s += 20) want.push_back(s);
  CHECK(at == want);
}

TEST_CASE("The initial image mixes uniform(-20, 20) noise and the content image by the noise ratio",
          "[vision][style]") {
  using M = Model<Vgg19Features<32>, backend::Reference, double>;
  M net({3, 16, 20}, DataFormat::NHWC, vgg19_random_options(), 1, true);
  const cifarnet::Image content = builtin_content_image(16, 20), style = builtin_style_image(16, 20);
  StyleTransferOptions o = tiny_options(16, 20);
  o.noise_ratio = 0.0;
  StyleTransfer<M> pure(net, o, content, style);
  const cifarnet::Image x = pure.image();
  for (std::size_t i = 0; i < x.data.size(); ++i) CHECK(x.data[i] == Approx(content.data[i]).margin(1e-4));
  o.noise_ratio = 1.0;
  StyleTransfer<M> noise(net, o, content, style);
  const cifarnet::Image n = noise.image();
  double lo = 1e9, hi = -1e9;
  for (std::size_t i = 0; i < n.data.size(); ++i) {
    const double v = double(n.data[i]) - double(kVgg19MeanPixel[i % 3]);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  CHECK(lo >= -20.0);
  CHECK(hi <= 20.0);
  CHECK(hi - lo > 30.0);  // it is noise, spread over the range
  CHECK(noise.global_step() == 0);
  CHECK_THROWS_AS(StyleTransfer<M>(net, o, builtin_content_image(16, 21), style), ShapeError);
}

TEST_CASE("On a tiny VGG-shaped net (oneDNN) the total loss falls over 20 Adam steps", "[vision][style]") {
  using M = Model<Vgg19Features<32>, backend::OneDnn, float>;
  const std::size_t H = 40, W = 52;
  M net({3, H, W}, DataFormat::NHWC, vgg19_random_options(), 3, true);
  StyleTransfer<M> st(net, tiny_options(H, W), builtin_content_image(H, W), builtin_style_image(H, W));
  const double first = st.loss().total;
  std::vector<double> curve;
  for (int i = 0; i < 20; ++i) curve.push_back(st.step().total);
  const double last = st.loss().total;
  CHECK(curve.front() == Approx(first).epsilon(1e-5));  // step() reports the loss before its update
  CHECK(st.global_step() == 20);
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.5 * first);
  CHECK(curve[19] < curve[10]);
  CHECK(curve[10] < curve[0]);
}

TEST_CASE("A checkpoint at step 20 resumes and continues exactly as an uninterrupted run",
          "[vision][style]") {
  using M = Model<Vgg19Features<32>, backend::Reference, double>;
  const std::size_t H = 20, W = 24;
  const cifarnet::Image content = builtin_content_image(H, W), style = builtin_style_image(H, W);
  TempDir dir;

  M net_a({3, H, W}, DataFormat::NHWC, vgg19_random_options(), 5, true);
  StyleTransfer<M> straight(net_a, tiny_options(H, W), content, style);
  for (int i = 0; i < 25; ++i) straight.step();

  {
    M net_b({3, H, W}, DataFormat::NHWC, vgg19_random_options(), 5, true);
    StyleTransfer<M> first(net_b, tiny_options(H, W), content, style);
    io::CheckpointManager mgr(dir.path());
    for (int i = 0; i < 20; ++i) {
      first.step();
      if (first.global_step() % 10 == 0) first.save(mgr);
    }
    REQUIRE(mgr.checkpoints().size() == 2);
    const cifarnet::StateDict d = first.state();
    for (const char* name : {"input/Variable", "input/Variable/Adam", "input/Variable/Adam_1", "beta1_power",
                             "beta2_power", "global_step"})
      CHECK(d.contains(name));
    CHECK(io::global_step(d).value() == 20);
  }

  M net_c({3, H, W}, DataFormat::NHWC, vgg19_random_options(), 5, true);
  StyleTransfer<M> resumed(net_c, tiny_options(H, W), content, style);
  io::CheckpointManager mgr(dir.path());
  REQUIRE(resumed.restore_latest(mgr));
  CHECK(resumed.global_step() == 20);
  for (int i = 0; i < 5; ++i) resumed.step();
  CHECK(resumed.global_step() == 25);
  const cifarnet::Image a = straight.image(), b = resumed.image();
  CHECK(a.data == b.data);

  // A checkpoint of another image size is refused before anything changes.
  M small({3, H, W - 2}, DataFormat::NHWC, vgg19_random_options(), 5, true);
  StyleTransfer<M> other(small, tiny_options(H, W - 2), builtin_content_image(H, W - 2),
                         builtin_style_image(H, W - 2));
  const cifarnet::Image before = other.image();
  CHECK_THROWS_AS(other.restore_latest(mgr), ShapeError);
  CHECK(other.image().data == before.data);
  CHECK(other.global_step() == 0);
}
