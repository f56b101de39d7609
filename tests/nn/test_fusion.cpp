// Fused layers against the unfused composition they replace: batch norm with
// its ReLU or GELU (BatchNorm2d<C, FusedRelu>, BatchNorm2d<C, FusedGelu>), convolution + batch norm as one
// layer folded for inference (ConvBatchNorm), the residual sum with its ReLU (Residual<..., FusedRelu>) and
// consecutive such blocks (the next one applies the ReLU's mask in its gradient's sum), the fused ResNet v1
// block and a whole fused ResNet. Both sides must have the same parameter names and give the same outputs,
// input and parameter gradients, and moving statistics: the fused network on the reference backend in double
// (rounding only) and on oneDNN in float, each against the unfused network on the reference backend in
// double. The reference's fused fallback (ReLU and its mask applied by the layer) is also checked against
// finite differences. The fused networks train through the training executor, which makes the hand-overs
// between layers (nn/train_executor.hpp); where a test says so, the unfused side runs on the layer tree
// (NetOptions::plan_training off: every layer on its own). The fused ResNet v1 block is compared in
// test_fusion_block.cpp, the whole fused ResNet in test_fusion_reference.cpp (with the finite differences)
// and test_fusion_resnet_onednn.cpp: files of their own, so that no test translation unit takes long to
// compile.
#include <cifarnet/backend/onednn.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "copy_parameters.hpp"
#include "nn/fusion_compare.hpp"

using namespace cifarnet;
using test::compare_all;
using test::copy_parameters;

TEST_CASE("Batch norm with a fused ReLU equals batch norm followed by ReLU", "[nn][fusion][bn]") {
  compare_all<Sequential<Conv2d<3, 5, 3>, BatchNorm2d<5, FusedRelu>>,
              Sequential<Conv2d<3, 5, 3>, BatchNorm2d<5>, ReLU>>({3, 6, 7}, 3, 1e-5);
  compare_all<Sequential<BatchNorm2d<0, FusedRelu>>, Sequential<BatchNorm2d<0>, ReLU>>({17, 4, 5}, 4, 1e-5);
}

TEST_CASE("Batch norm with a fused GELU equals batch norm followed by GELU", "[nn][fusion][bn][gelu]") {
  compare_all<Sequential<Conv2d<3, 5, 3>, BatchNorm2d<5, FusedGelu>>,
              Sequential<Conv2d<3, 5, 3>, BatchNorm2d<5>, GELU>>({3, 6, 7}, 3, 1e-5);
  compare_all<Sequential<BatchNorm2d<0, FusedGelu>>, Sequential<BatchNorm2d<0>, GELU>>({17, 4, 5}, 4, 1e-5);
  // airbench's widths (the NHWC kernels specialised for 64 and 256 channels)
  // at a batch where the sums run over thousands of values per channel.
  compare_all<Sequential<BatchNorm2d<64, FusedGelu>>, Sequential<BatchNorm2d<64>, GELU>>({64, 16, 16}, 16,
                                                                                         1e-5);
  compare_all<Sequential<BatchNorm2d<256, FusedGelu>>, Sequential<BatchNorm2d<256>, GELU>>({256, 8, 8}, 32,
                                                                                           1e-5);
}

TEST_CASE("Conv + batch norm (+ ReLU) as one layer equals the two layers, folded for inference",
          "[nn][fusion][conv_bn]") {
  compare_all<Sequential<ConvBatchNorm<3, 5, 3, 1, Padding::Same, FusedRelu>>,
              Sequential<Conv2d<3, 5, 3>, BatchNorm2d<5>, ReLU>>({3, 6, 7}, 3, 1e-5);
  compare_all<Sequential<ConvBatchNorm<4, 6, 3, 2, Padding::Explicit>>,
              Sequential<Conv2d<4, 6, 3, 2, Padding::Explicit>, BatchNorm2d<6>>>({4, 7, 8}, 2, 1e-5);
}

// ConvBatchNorm's float backward on oneDNN a range of images at a time
// (NetOptions::conv_bn_chunk_bytes): ranges of 2, 2 and 1 images (5 per
// batch), of 1 image, and of 2 at ResNet's NHWC width (the kernels
// specialised for 16 channels), then a residual block of two, each against
// the unfused layers in double.
TEST_CASE("Conv + batch norm run in ranges of images equals the two layers", "[nn][fusion][conv_bn]") {
  const auto ranges = [](std::size_t bytes) { return NetOptions().with_conv_bn_chunk_bytes(bytes); };
  // 5 channels of 6x7 floats per image: 840 bytes (the input's 3 fewer).
  compare_all<Sequential<ConvBatchNorm<3, 5, 3, 1, Padding::Same, FusedRelu>>,
              Sequential<Conv2d<3, 5, 3>, BatchNorm2d<5>, ReLU>>({3, 6, 7}, 5, 1e-5, ranges(1700));
  compare_all<Sequential<ConvBatchNorm<4, 6, 3, 2, Padding::Explicit>>,
              Sequential<Conv2d<4, 6, 3, 2, Padding::Explicit>, BatchNorm2d<6>>>({4, 7, 8}, 3, 1e-5,
                                                                                 ranges(1));
  compare_all<Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>>,
              Sequential<Conv2d<16, 16, 3>, BatchNorm2d<16>, ReLU>>({16, 4, 4}, 6, 1e-5, ranges(2048));
  using Body = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<16, 16, 3>>;
  using Flat = Sequential<Conv2d<16, 16, 3>, BatchNorm2d<16>, ReLU, Conv2d<16, 16, 3>, BatchNorm2d<16>>;
  compare_all<Residual<Body, Identity, FusedRelu>, Sequential<Residual<Flat>, ReLU>>({16, 4, 4}, 5, 1e-5,
                                                                                     ranges(2048));
}

namespace {
// `o` with the own convolution kernels' rules off: oneDNN's kernels run
// every ConvBatchNorm, as on a CPU without AVX-512 or AVX2, or at a width
// the AVX-512 kernels' tiles do not divide. The tests of oneDNN's ranges,
// and of hand-overs whose bits the layer tree must give, use it: the own
// kernels' epilogue sums batch norm's backward in another order than the
// layer tree's pass (the AVX2 kernels take any width).
NetOptions onednn_kernels(NetOptions o = {}) {
  return o.with_rule_off("bn_dx_in_conv_prologue").with_rule_off("bn_stats_in_conv_epilogue");
}

// Two models of Net on oneDNN with the same parameters, one running its
// ConvBatchNorm backward on whole batches and one on ranges of 3 images (4
// KiB per image of a 16x8x8 float map: ranges of 3, 3, 3 and 1), both
// trained through the training executor (its hand-overs between layers),
// and a batch of 10 inputs drawn from `rng`.
// `in` and `options` for other maps and paths (the own kernels' test below:
// ranges of 3 images whatever the image size).
template <class Net>
struct WholeAndRanged {
  WholeAndRanged(DataFormat fmt, std::uint64_t seed, InputShape in = {16, 8, 8}, NetOptions options = {})
      : whole(in, fmt, NetOptions(options).with_conv_bn_chunk_bytes(0), 3, true),
        ranged(in, fmt, NetOptions(options).with_conv_bn_chunk_bytes(3 * 4 * in.c * in.h * in.w), 3, true),
        rng(seed),
        x(make_tensor<float>(whole.input_shape(10), fmt)) {
    copy_parameters(whole, ranged);
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform(-1.5, 1.5));
  }
  /// One training forward of x and backward of a drawn output gradient on
  /// both: the outputs (y) and the input gradients (dx), whole then ranged.
  struct Step {
    Tensor<float> yw, yr, dxw, dxr, g;  // g: the output gradient drawn
  };
  Step step() {
    Step s;
    s.yw = whole.forward(x, Mode::Train);
    s.yr = ranged.forward(x, Mode::Train);
    s.g = Tensor<float>(s.yw.shape());
    for (std::size_t i = 0; i < s.g.size(); ++i) s.g.data()[i] = float(rng.uniform(-0.5, 1.0));
    s.dxw = whole.backward(s.g);
    s.dxr = ranged.backward(s.g);
    return s;
  }
  Model<Net, backend::OneDnn, float> whole, ranged;
  Rng rng;
  Tensor<float> x;
};

// max |a - b| within tol times max |b| over n values.
void check_close(const float* a, const float* b, std::size_t n, double tol) {
  double e = 0, r = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e = std::max(e, std::abs(double(a[i]) - double(b[i])));
    r = std::max(r, std::abs(double(b[i])));
  }
  INFO("max difference " << e << " of max " << r);
  CHECK(e <= tol * r);
}
}  // namespace

// The same layer's backward in ranges and whole on oneDNN from the same
// parameters: dx and the batch norm's gradients as the whole batch has them
// (the same operations: the same bits), the weight gradient a sum of the
// ranges' (float: to a few ulps); and the ranges did run
// (ranged_backwards), not the whole batch.
TEST_CASE("ConvBatchNorm's backward in ranges of images gives the whole batch's gradients",
          "[nn][fusion][conv_bn]") {
  using Net = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>>;
  for (auto fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    INFO("format " << to_string(fmt));
    WholeAndRanged<Net> m(fmt, 5, {16, 8, 8}, onednn_kernels());
    auto &whole = m.whole, &ranged = m.ranged;
    const auto [yw, yr, dxw, dxr, g] = m.step();
    CHECK(std::memcmp(yr.data(), yw.data(), yw.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(dxr.data(), dxw.data(), dxw.size() * sizeof(float)) == 0);
    auto& A = whole.parameters();
    auto& R = ranged.parameters();
    for (std::size_t id = 0; id < A.count(); ++id) {
      const ParamInfo& info = A.info(id);
      INFO("parameter " << info.name);
      CHECK(std::memcmp(R.value(id), A.value(id), info.size * sizeof(float)) == 0);
      if (!info.trainable) continue;
      if (info.name.find("weights") != std::string::npos)
        check_close(R.grad(id), A.grad(id), info.size, 1e-5);
      else
        CHECK(std::memcmp(R.grad(id), A.grad(id), info.size * sizeof(float)) == 0);
    }
    CHECK(std::get<0>(whole.root().children()).ranged_backwards() == 0);
    CHECK(std::get<0>(ranged.root().children()).ranged_backwards() == 1);
  }
}

// A chain of residual blocks whose bodies start with a ConvBatchNorm: in
// ranges, each block's backward sum (with the previous block's ReLU mask:
// as bits in NHWC at 16 channels, from the input's values in NCHW; none for
// the first block, whose input is no block's output) is done by the body's
// first layer on each range of its dx (the training executor's
// residual_sum_in_conv_backward, plan::GradSum), the same element-wise
// operations as the executor's own sum pass over the whole batch: the same
// bits. Whole batches leave the sum to that pass.
TEST_CASE("A residual block's backward sum done in its first layer's ranges gives the whole batch's bits",
          "[nn][fusion][conv_bn][residual]") {
  using Body = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<16, 16, 3>>;
  using Block = Residual<Body, Identity, FusedRelu>;
  using Net = Sequential<Block, Block, Block>;
  for (auto fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    INFO("format " << to_string(fmt));
    WholeAndRanged<Net> m(fmt, 9, {16, 8, 8}, onednn_kernels());
    auto &whole = m.whole, &ranged = m.ranged;
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const auto [yw, yr, dxw, dxr, g] = m.step();
      REQUIRE(std::memcmp(yr.data(), yw.data(), yw.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(dxr.data(), dxw.data(), dxw.size() * sizeof(float)) == 0);
      auto& A = whole.parameters();
      auto& R = ranged.parameters();
      for (std::size_t id = 0; id < A.count(); ++id) {
        const ParamInfo& info = A.info(id);
        if (!info.trainable || info.name.find("weights") != std::string::npos) continue;
        INFO("parameter " << info.name);  // batch norm's: the same sums of the same dy
        CHECK(std::memcmp(R.grad(id), A.grad(id), info.size * sizeof(float)) == 0);
      }
    }
    // Where the plan has each hand-over, and what the last step carried out.
    const TrainExecutor<backend::OneDnn, float>* ew = whole.train_executor(10);
    const TrainExecutor<backend::OneDnn, float>* er = ranged.train_executor(10);
    REQUIRE(ew);
    REQUIRE(er);
    const plan::Plan& p = er->plan();
    INFO(plan::describe(p));
    CHECK(ew->plan().fired("residual_sum_in_conv_backward") == 0);
    CHECK(ew->carried("residual_sum_in_conv_backward") == 0);
    CHECK(p.fires("residual_sum_in_conv_backward", "block0/add"));
    CHECK(p.fires("residual_sum_in_conv_backward", "block1/add"));
    CHECK(p.fires("residual_sum_in_conv_backward", "block2/add"));
    CHECK(er->carried("residual_sum_in_conv_backward") == 3);
    // blocks 1 and 2 apply the mask of the block before them (block 0 none)
    CHECK(p.fired("residual_mask_in_sum") == 2);
    CHECK(p.fires("residual_mask_in_sum", "block0/add"));
    CHECK(p.fires("residual_mask_in_sum", "block1/add"));
    CHECK(er->carried("residual_mask_in_sum") == 2);
    CHECK(p.fires("relu_mask_bits", "block1/add") == (fmt == DataFormat::NHWC));
    CHECK(er->carried("relu_mask_bits") == (fmt == DataFormat::NHWC ? 2 : 0));
    // The layers' counters over both steps: each block's first layer did
    // its block's sum in ranges (none in whole batches), the second none.
    auto& w = whole.root().children();
    auto& r = ranged.root().children();
    CHECK(std::get<0>(std::get<0>(w).body().children()).range_sums() == 0);
    CHECK(std::get<0>(std::get<2>(w).body().children()).range_sums() == 0);
    CHECK(std::get<0>(std::get<0>(r).body().children()).range_sums() == 2);
    CHECK(std::get<0>(std::get<1>(r).body().children()).range_sums() == 2);
    CHECK(std::get<0>(std::get<2>(r).body().children()).range_sums() == 2);
    CHECK(std::get<1>(std::get<2>(r).body().children()).range_sums() == 0);
  }
}

// The same chain on 16x16 maps, whose stride-1 convolutions' backward runs
// in the oneDNN backend's own kernels with batch norm's input gradient in
// their prologue (NetOptions::direct_conv_bn, on a CPU with AVX-512): whole
// batches and ranges give the same dx bits (the same kernels on the same
// images), the weight gradients a sum of the ranges' and batch norm's a
// sum of the ranges' sums in double (to rounding), and the gradients are
// oneDNN's kernels' (direct_conv_bn off) to float rounding. The forward
// runs in the own forward kernel with batch norm's statistics taken in its
// epilogue: the outputs are oneDNN's path's to float rounding, and whole
// and ranged (which differ in the backward only) the same bits. The
// kernels' own accuracy against double sums: tests/backend/test_direct_conv.cpp.
TEST_CASE("ConvBatchNorm's backward in the own kernels gives oneDNN's gradients, whole or in ranges",
          "[nn][fusion][conv_bn][direct]") {
  using Body = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<16, 16, 3>>;
  using Block = Residual<Body, Identity, FusedRelu>;
  using Net = Sequential<Block, Block, Block>;
  const bool avx512 = backend::onednn::direct::cpu_supported();
  WholeAndRanged<Net> m(DataFormat::NHWC, 13, {16, 16, 16});
  Model<Net, backend::OneDnn, float> plain(
      {16, 16, 16}, DataFormat::NHWC,
      NetOptions().with_direct_conv_bn(false).with_conv_bn_chunk_bytes(3 * 4 * 16 * 16 * 16), 3, true);
  copy_parameters(m.whole, plain);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const auto [yw, yr, dxw, dxr, g] = m.step();
    const Tensor<float> yp = plain.forward(m.x, Mode::Train);
    check_close(yw.data(), yp.data(), yp.size(), 1e-5);
    REQUIRE(std::memcmp(yr.data(), yw.data(), yw.size() * sizeof(float)) == 0);
    const Tensor<float> dxp = plain.backward(g);
    check_close(dxr.data(), dxp.data(), dxp.size(), 1e-5);
    CHECK(std::memcmp(dxr.data(), dxw.data(), dxw.size() * sizeof(float)) == 0);
    auto& W = m.whole.parameters();
    auto& R = m.ranged.parameters();
    auto& P = plain.parameters();
    for (std::size_t id = 0; id < W.count(); ++id) {
      const ParamInfo& info = W.info(id);
      if (!info.trainable) continue;
      INFO("parameter " << info.name);
      check_close(R.grad(id), P.grad(id), info.size, 1e-5);
      // Batch norm's sums taken in the kernels' epilogue are added range by
      // range in double: its gradients to double rounding, not bit for bit.
      check_close(R.grad(id), W.grad(id), info.size,
                  info.name.find("weights") != std::string::npos ? 1e-5 : 1e-6);
    }
  }
  for (auto* model : {&m.whole, &m.ranged, &plain}) {
    auto& body = std::get<1>(model->root().children()).body().children();
    const std::size_t expect = model != &plain && avx512 ? 2 : 0;
    CHECK(std::get<0>(body).direct_backwards() == expect);
    CHECK(std::get<1>(body).direct_backwards() == expect);
    CHECK(std::get<0>(body).bn().statistics_given() == expect);  // two training forwards
    CHECK(std::get<1>(body).bn().statistics_given() == expect);
    // The first layer's output left unwritten, the second layer's kernels
    // computing it from the map (forward and weight gradient).
    CHECK(std::get<0>(body).deferred_outputs() == expect);
    CHECK(std::get<1>(body).normalised_inputs() == expect);
    CHECK(std::get<1>(body).deferred_outputs() == 0);  // the block's sum
    // That hand-over in the plan, in each block, carried out in the last step.
    const TrainExecutor<backend::OneDnn, float>* e = model->train_executor(10);
    REQUIRE(e);
    INFO(plan::describe(e->plan()));
    CHECK(e->plan().fires("bn_output_into_next_conv", "block1/bn1") == (expect > 0));
    CHECK(e->carried("bn_output_into_next_conv") == (expect > 0 ? 3 : 0));
  }
}

namespace {
// Net on oneDNN twice from the same parameters: the own kernels on, trained
// through the training executor (its hand-overs between layers), and off
// (direct_conv_bn(false): oneDNN's kernels), run by the layer tree (every
// layer on its own: every sum in a pass of its own); ConvBatchNorm's
// backward in ranges of 4 images of the largest map (`in`, 16 channels on),
// a batch of 6 inputs of shape `in`; two training steps, the outputs, the
// input and parameter gradients and the moving statistics equal to float
// rounding. Returns the model with the kernels for its counters.
template <class Net>
std::unique_ptr<Model<Net, backend::OneDnn, float>> direct_against_plain(InputShape in, std::uint64_t seed) {
  const NetOptions o = NetOptions().with_conv_bn_chunk_bytes(4 * 4 * 16 * in.h * in.w);
  auto direct = std::make_unique<Model<Net, backend::OneDnn, float>>(in, DataFormat::NHWC, o, 3, true);
  Model<Net, backend::OneDnn, float> plain(
      in, DataFormat::NHWC, NetOptions(o).with_direct_conv_bn(false).with_plan_training(false), 3, true);
  copy_parameters(*direct, plain);
  Rng rng(seed);
  Tensor<float> x = make_tensor<float>(direct->input_shape(6), DataFormat::NHWC);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform(-1.5, 1.5));
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const Tensor<float> yd = direct->forward(x, Mode::Train);
    const Tensor<float> yp = plain.forward(x, Mode::Train);
    check_close(yd.data(), yp.data(), yp.size(), 1e-5);
    Tensor<float> g(yd.shape());
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = float(rng.uniform(-0.5, 1.0));
    const Tensor<float> dxd = direct->backward(g), dxp = plain.backward(g);
    check_close(dxd.data(), dxp.data(), dxp.size(), 1e-5);
    auto& D = direct->parameters();
    auto& P = plain.parameters();
    for (std::size_t id = 0; id < D.count(); ++id) {
      const ParamInfo& info = D.info(id);
      INFO("parameter " << info.name);
      if (info.trainable)
        check_close(D.grad(id), P.grad(id), info.size, 1e-5);
      else  // moving mean and variance: the statistics the convolution took
        check_close(D.value(id), P.value(id), info.size, 1e-6);
    }
  }
  return direct;
}
}  // namespace

// The own kernels' epilogue (ops::Conv2d::BnEpilogue): a residual block's
// gradient sum on each image of dx, and the backward sums of the batch norm
// whose output (or a residual sum of it) the convolution read, which that
// batch norm then takes as given (BnSumsOffer) instead of a pass of its
// own. Against oneDNN's kernels, which do every sum in a pass of its own:
// (1) a stem whose convolution the kernels do not run (3 channels in),
// whose output both branches of the first block read: its sums are taken
// after the block's sum, with no mask (the stem's own ReLU is in its batch
// norm); (2) inside and between blocks: a body's second layer takes the
// first's sums; the next block's first layer does the block's sum through
// the previous block's mask and takes that block's last batch norm's sums;
// (3) a block's output read by a plain ConvBatchNorm, which does no block
// sum: the sums must go through the block's ReLU mask, which that layer
// does not apply, so it must not take them (it does not: else the
// gradients would differ); (4) a block's output read by a downsampling
// block, whose first convolution (stride 2) runs in oneDNN's kernels in
// ranges: that layer does the block's sum over each range, forming the
// shortcut's gradient (pool and pad) from the block's output gradient on
// the fly (the executor's pooled_shortcut_gradient), then takes the sums
// (range_bn_sums). On a CPU without AVX-512 or AVX2 every layer runs in oneDNN's
// kernels and takes the sums range by range (the epilogue counters 0).
TEST_CASE("Batch norm's backward sums taken in the next convolution's epilogue give oneDNN's gradients",
          "[nn][fusion][conv_bn][direct]") {
  using Body = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<16, 16, 3>>;
  using Block = Residual<Body, Identity, FusedRelu>;
  using Stem = ConvBatchNorm<3, 16, 3, 1, Padding::Same, FusedRelu>;
  const std::size_t on = backend::onednn::direct::cpu_supported() ? 2 : 0;  // two steps
  {
    INFO("a stem, then two blocks");
    auto m = direct_against_plain<Sequential<Stem, Block, Block>>({3, 16, 16}, 21);
    auto& c = m->root().children();
    auto& b0 = std::get<1>(c).body().children();
    auto& b1 = std::get<2>(c).body().children();
    CHECK(std::get<0>(c).sums_given() == 2);  // by block 0's first layer, after its sum
    CHECK(std::get<0>(b0).epilogue_residual_sums() == on);
    CHECK(std::get<0>(b0).epilogue_bn_sums() == on);
    CHECK(std::get<0>(b0).range_bn_sums() == 2 - on);
    CHECK(std::get<0>(b0).sums_given() == 2);  // by its second layer
    CHECK(std::get<1>(b0).epilogue_bn_sums() == on);
    CHECK(std::get<1>(b0).sums_given() == 2);  // by block 1's first layer, through block 0's mask
    CHECK(std::get<0>(b1).epilogue_residual_sums() == on);
    CHECK(std::get<0>(b1).epilogue_bn_sums() == on);
    CHECK(std::get<0>(b1).range_bn_sums() == 2 - on);
    CHECK(std::get<1>(b1).sums_given() == 0);            // the model's output
    CHECK(std::get<0>(c).bn().statistics_given() == 0);  // 3 channels in: not the own kernels
    CHECK(std::get<0>(b1).bn().statistics_given() == on);
    CHECK(std::get<0>(c).deferred_outputs() == 0);  // the next layer is a block
    CHECK(std::get<0>(b0).deferred_outputs() == on);
    CHECK(std::get<1>(b0).normalised_inputs() == on);
  }
  {
    INFO("a block, then a ConvBatchNorm");
    auto m = direct_against_plain<Sequential<Block, ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>>>(
        {16, 16, 16}, 22);
    auto& c = m->root().children();
    CHECK(std::get<1>(c).direct_backwards() == on);
    CHECK(std::get<1>(c).epilogue_bn_sums() == 0);
    CHECK(std::get<1>(c).range_bn_sums() == 0);
    CHECK(std::get<1>(std::get<0>(c).body().children()).sums_given() == 0);
    CHECK(std::get<0>(std::get<0>(c).body().children()).sums_given() == 2);
  }
  {
    INFO("a block, then a downsampling block");
    using Down = Residual<
        Sequential<ConvBatchNorm<16, 32, 3, 2, Padding::Explicit, FusedRelu>, ConvBatchNorm<32, 32, 3>>,
        PoolPadShortcut<16, 32, 2>, FusedRelu>;
    auto m = direct_against_plain<Sequential<Block, Down>>({16, 16, 16}, 23);
    auto& c = m->root().children();
    auto& first = std::get<0>(std::get<1>(c).body().children());
    CHECK(first.direct_backwards() == 0);  // stride 2
    CHECK(first.range_sums() == 2);        // the block's sum in its ranges
    CHECK(first.range_bn_sums() == 2);     // then the previous block's last batch norm's sums
    CHECK(std::get<1>(std::get<0>(c).body().children()).sums_given() == 2);
    // the shortcut's gradient formed in that sum (in the last step)
    const TrainExecutor<backend::OneDnn, float>* e = m->train_executor(6);
    REQUIRE(e);
    INFO(plan::describe(e->plan()));
    CHECK(e->plan().fires("pooled_shortcut_gradient", "block1/add"));
    CHECK(e->carried("pooled_shortcut_gradient") == 1);
  }
}

TEST_CASE("A residual sum with a fused ReLU equals the sum followed by ReLU", "[nn][fusion][residual]") {
  using Body = Sequential<Conv2d<4, 4, 3>, BatchNorm2d<4>>;
  compare_all<Residual<Body, Identity, FusedRelu>, Sequential<Residual<Body>, ReLU>>({4, 5, 6}, 2, 1e-5);
}

TEST_CASE("Consecutive residual blocks sum and mask the input gradient in one pass, as the unfused network",
          "[nn][fusion][residual]") {
  using Body = Sequential<Conv2d<4, 4, 3>, BatchNorm2d<4>>;
  using Block = Residual<Body, Identity, FusedRelu>;
  // Block 1 (and 2) apply the ReLU mask of the block before them in the sum of their input gradient
  // (Eltwise::add_masked), which then skips its own mask pass.
  compare_all<Sequential<Block, Block, Block>,
              Sequential<Residual<Body>, ReLU, Residual<Body>, ReLU, Residual<Body>, ReLU>>({4, 5, 6}, 2,
                                                                                            1e-5);
  compare_all<Sequential<Block, Repeat<Block, 1>>,
              Sequential<Residual<Body>, ReLU, Repeat<Sequential<Residual<Body>, ReLU>, 1>>>({4, 5, 6}, 2,
                                                                                             1e-5);

  // Which blocks do it (the training executor), and the same bits on oneDNN as a chain an Identity
  // breaks, run by the layer tree (every layer on its own: each block its own mask pass).
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    Model<Sequential<Block, Block>, backend::OneDnn> chained({4, 5, 6}, fmt, NetOptions(), 3);
    Model<Sequential<Block, Identity, Block>, backend::OneDnn> broken(
        {4, 5, 6}, fmt, NetOptions().with_plan_training(false), 3);
    copy_parameters(chained, broken, /*same_names=*/false);  // the Identity shifts the block numbers
    Rng rng(5);
    Tensor<float> x = make_tensor<float>({3, 4, 5, 6}, fmt);
    for (auto& v : x) v = float(rng.uniform(-1.5, 1.5));
    const Tensor<float> y = chained.forward(x, Mode::Train);
    CHECK(y == broken.forward(x, Mode::Train));
    Tensor<float> dy = y;
    for (auto& v : dy) v = float(rng.uniform(-0.5, 1.0));
    chained.backward(dy);
    broken.backward(dy);
    for (Eigen::Index i = 0; i < chained.parameters().grads().size(); ++i)
      REQUIRE(chained.parameters().grads()[i] == broken.parameters().grads()[i]);
    // Block 1 applied block 0's mask; block 0 (the model's input) none.
    const TrainExecutor<backend::OneDnn, float>* e = chained.train_executor(3);
    REQUIRE(e);
    INFO(plan::describe(e->plan()));
    CHECK(e->plan().fired("residual_mask_in_sum") == 1);
    CHECK(e->plan().fires("residual_mask_in_sum", "block0/add"));
    CHECK(e->carried("residual_mask_in_sum") == 1);
    // The rule looks through the Identity (the executors alias it), so the
    // pattern matches in the broken chain too; its plan, run by the layer
    // tree, says why it does not fire there.
    std::size_t matched = 0;
    const plan::Plan bp = broken.step_plan(Mode::Train, 3);
    CHECK(bp.fired("residual_mask_in_sum", &matched) == 0);
    CHECK(matched == 1);
    REQUIRE(bp.verdict("residual_mask_in_sum", "block0/add"));
    CHECK(bp.verdict("residual_mask_in_sum", "block0/add")->reason.find("the layer tree runs the step") !=
          std::string::npos);
    CHECK(broken.train_executor(3) == nullptr);
    chained.forward(x, Mode::Infer);  // inference: nothing to mask (no such rule in its plan)
    CHECK(chained.step_plan(Mode::Infer, 3).fired("residual_mask_in_sum", &matched) == 0);
    CHECK(matched == 0);
  }
}

namespace {
// A residual block whose body ends in batch norm (sum and ReLU in the
// normalising pass: the training executor's residual_sum_in_bn) against the
// same block with an Identity after that batch norm (which leaves the sum
// to a pass of its own), run by the layer tree (every layer on its own):
// same parameters and input, the same values (== on floats), gradients bit
// for bit, on oneDNN in float and with bf16 convolutions.
template <class Summed, class Separate>
void check_fused_sum(const NetOptions& opts) {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    Model<Summed, backend::OneDnn> summed({16, 6, 5}, fmt, opts, 3);
    Model<Separate, backend::OneDnn> separate({16, 6, 5}, fmt, NetOptions(opts).with_plan_training(false), 3);
    copy_parameters(summed, separate);
    {  // The Identity breaks the pattern (the plan says so, whoever runs it).
      const plan::Plan sp = separate.step_plan(Mode::Train, 4);
      INFO(plan::describe(sp));
      const plan::Verdict* apart = sp.verdict("residual_sum_in_bn", "block0/add");
      REQUIRE(apart);
      CHECK_FALSE(apart->fires);
      CHECK(apart->reason.find("identity") != std::string::npos);
    }
    Rng rng(7);
    Tensor<float> x = make_tensor<float>({4, 16, 6, 5}, fmt);
    for (auto& v : x) v = float(rng.uniform(-1.5, 1.5));
    for (int step = 0; step < 2; ++step) {
      const Tensor<float> y = summed.forward(x, Mode::Train);
      CHECK(y == separate.forward(x, Mode::Train));
      const TrainExecutor<backend::OneDnn, float>* e = summed.train_executor(4);
      REQUIRE(e);
      INFO(plan::describe(e->plan()));
      CHECK(e->plan().fires("residual_sum_in_bn", "block0/add"));
      CHECK(e->carried("residual_sum_in_bn") == 1);
      Tensor<float> dy = y;
      for (auto& v : dy) v = float(rng.uniform(-0.5, 1.0));
      summed.backward(dy);
      separate.backward(dy);
      const auto &g1 = summed.parameters().grads(), &g2 = separate.parameters().grads();
      REQUIRE(g1.size() == g2.size());
      for (Eigen::Index i = 0; i < g1.size(); ++i) REQUIRE(g1[i] == g2[i]);
    }
    summed.forward(x, Mode::Infer);  // inference: no such rule in its plan
    std::size_t matched = 1;
    CHECK(summed.step_plan(Mode::Infer, 4).fired("residual_sum_in_bn", &matched) == 0);
    CHECK(matched == 0);
  }
}
}  // namespace

TEST_CASE("A residual sum added by the body's last batch norm equals the block's own sum pass",
          "[nn][fusion][residual]") {
  using Conv = Conv2d<16, 16, 3>;
  SECTION("float, ReLU after the sum") {
    check_fused_sum<Residual<Sequential<Conv, BatchNorm2d<16>>, Identity, FusedRelu>,
                    Residual<Sequential<Conv, BatchNorm2d<16>, Identity>, Identity, FusedRelu>>(NetOptions());
  }
  SECTION("float, no ReLU") {
    check_fused_sum<Residual<Sequential<Conv, BatchNorm2d<16>>>,
                    Residual<Sequential<Conv, BatchNorm2d<16>, Identity>>>(NetOptions());
  }
  SECTION("ResNet's ConvBatchNorm, bf16 convolutions (batch norm reads the bf16 output)") {
    using CBN = ConvBatchNorm<16, 16, 3>;
    check_fused_sum<Residual<Sequential<CBN>, Identity, FusedRelu>,
                    Residual<Sequential<CBN, Identity>, Identity, FusedRelu>>(
        NetOptions().with_conv_precision(ConvPrecision::BF16));
  }
}

TEST_CASE("The next block's gradient sum reads the ReLU mask as the bits batch norm wrote with its sum",
          "[nn][fusion][residual]") {
  // ResNet's chain on oneDNN, trained through the training executor: each
  // block's last batch norm adds the shortcut and applies the ReLU in its
  // normalising pass and writes the mask y > 0 as bits (NHWC, 16 channels);
  // the next block's backward sum reads the bits instead of y. The same bits
  // as a chain Identity layers break, run by the layer tree (every layer on
  // its own: each block applies its own mask pass).
  using Block = Residual<Sequential<ConvBatchNorm<16, 16, 3>>, Identity, FusedRelu>;
  // (bf16 gradients and the bf16 residual stream off: with them the chain's
  // sums read the bodies' input gradients as bf16 and its blocks their
  // shortcuts as bf16, which the broken chain rounds differently;
  // tests/backend/test_bf16.cpp)
  // (fp32: oneDNN's kernels, onednn_kernels(): the own kernels' epilogue
  // sums batch norm's backward in another order than the layer tree.)
  for (const NetOptions& opts : {onednn_kernels(), NetOptions()
                                                       .with_conv_precision(ConvPrecision::BF16)
                                                       .with_bf16_gradients(false)
                                                       .with_bf16_residuals(false)}) {
    INFO("bf16 convolutions " << (opts.conv_precision == ConvPrecision::BF16));
    Model<Sequential<Block, Block, Block>, backend::OneDnn> chained({16, 6, 5}, DataFormat::NHWC, opts, 3,
                                                                    /*input_gradient=*/true);
    Model<Sequential<Block, Identity, Block, Identity, Block>, backend::OneDnn> broken(
        {16, 6, 5}, DataFormat::NHWC, NetOptions(opts).with_plan_training(false), 3, /*input_gradient=*/true);
    copy_parameters(chained, broken, /*same_names=*/false);
    Rng rng(11);
    Tensor<float> x = make_tensor<float>({4, 16, 6, 5}, DataFormat::NHWC);
    for (auto& v : x) v = float(rng.uniform(-1.5, 1.5));
    for (int step = 0; step < 2; ++step) {
      const Tensor<float> y = chained.forward(x, Mode::Train);
      CHECK(y == broken.forward(x, Mode::Train));
      // Blocks 1 and 2 read the bits of the block before them; block 0 (the
      // model's input) none.
      const TrainExecutor<backend::OneDnn, float>* e = chained.train_executor(4);
      REQUIRE(e);
      const plan::Plan& p = e->plan();
      INFO(plan::describe(p));
      CHECK(p.fired("relu_mask_bits") == 2);
      CHECK(p.fires("relu_mask_bits", "block0/add"));
      CHECK(p.fires("relu_mask_bits", "block1/add"));
      CHECK(e->carried("relu_mask_bits") == 2);
      // The rule looks through the Identity layers (the executors alias
      // them): the broken chain matches it too, and the layer tree that
      // runs it fires nothing.
      std::size_t matched = 0;
      CHECK(broken.step_plan(Mode::Train, 4).fired("residual_mask_in_sum", &matched) == 0);
      CHECK(matched == 2);
      CHECK(broken.train_executor(4) == nullptr);
      Tensor<float> dy = y;
      for (auto& v : dy) v = float(rng.uniform(-0.5, 1.0));
      const Tensor<float> dx1 = chained.backward(dy);
      const Tensor<float> dx2 = broken.backward(dy);
      const auto &g1 = chained.parameters().grads(), &g2 = broken.parameters().grads();
      REQUIRE(g1.size() == g2.size());
      for (Eigen::Index i = 0; i < g1.size(); ++i) REQUIRE(g1[i] == g2[i]);
      REQUIRE(dx1.size() == x.size());
      REQUIRE(dx1.size() == dx2.size());
      CHECK(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)) == 0);
      CHECK(chained.train_executor(4)->carried("residual_mask_in_sum") == 2);  // the bits read
    }
    chained.forward(x, Mode::Infer);  // inference: no bits (no such rule in its plan)
    std::size_t matched = 1;
    CHECK(chained.step_plan(Mode::Infer, 4).fired("relu_mask_bits", &matched) == 0);
    CHECK(matched == 0);
  }
}

namespace {
/// Synchronized BN's reducer for one replica: its sums are already global.
struct OneReplica : CrossReplicaSum {
  void sum(double*, std::size_t) override {}
};

/// BatchNorm2d<C, FusedGelu> under synchronized BN (the layer runs the GELU
/// itself, on bn(x) kept for its backward) against the same layer without it,
/// on backend B: outputs and parameter gradients.
template <class B>
void check_sync_gelu() {
  using Net =
      Sequential<Conv2d<3, 6, 3>, BatchNorm2d<6, FusedGelu>, Conv2d<6, 4, 3>, BatchNorm2d<4, FusedGelu>>;
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    Model<Net, B> plain({3, 7, 6}, fmt, NetOptions{}, 3), synced({3, 7, 6}, fmt, NetOptions{}, 3);
    OneReplica one;
    synced.set_cross_replica(&one);
    Rng rng(9);
    Tensor<float> x = make_tensor<float>({5, 3, 7, 6}, fmt), dy;
    for (auto& v : x) v = float(rng.uniform(-2, 2));
    const Tensor<float>& y1 = plain.forward(x);
    const Tensor<float>& y2 = synced.forward(x);
    REQUIRE(y1.size() == y2.size());
    dy = y1;
    for (auto& v : dy) v = float(rng.uniform(-1, 1));
    double dy_max = 0;
    for (std::size_t i = 0; i < y1.size(); ++i)
      dy_max = std::max(dy_max, std::abs(double(y1.data()[i]) - double(y2.data()[i])));
    CHECK(dy_max < 1e-5);
    plain.backward(dy);
    synced.backward(dy);
    const auto &g1 = plain.parameters().grads(), &g2 = synced.parameters().grads();
    double g_max = 0, g_scale = 0;
    for (Eigen::Index i = 0; i < g1.size(); ++i) {
      g_max = std::max(g_max, std::abs(double(g1[i]) - double(g2[i])));
      g_scale = std::max(g_scale, std::abs(double(g1[i])));
    }
    CHECK(g_scale > 0);
    CHECK(g_max < 1e-5 * std::max(1.0, g_scale));
  }
}
}  // namespace

TEST_CASE("Batch norm with a fused GELU under synchronized BN equals it without, on both CPU backends",
          "[nn][fusion][bn][gelu][sync_bn]") {
  check_sync_gelu<backend::Reference>();
  check_sync_gelu<backend::OneDnn>();
}

// ResNet's downsampling shortcut, an average pool then a ChannelPad in a
// Sequential: on oneDNN the pool writes its output into the pad's output
// in place (backend_traits<B>::pool_pad_in_place) and reads its gradient
// from the padded one; outputs and input gradients equal the reference
// backend's in float bit for bit (the same float operations: a window
// summed in row-major order, divided by its size; zeros and copies), over
// two steps and after a batch of another size (a new buffer, its padding
// zeroed again). The reference backend runs the two layers as they are.
TEST_CASE("An average pool writes into the channel pad after it in place, as the two layers",
          "[nn][fusion][pool]") {
  using Net = Sequential<AvgPool2d<2, 2>, ChannelPad<4, 4>>;
  const InputShape in{8, 6, 8};
  Model<Net, backend::OneDnn, float> fused(in, DataFormat::NHWC, NetOptions{}, 1, true);
  Model<Net, backend::Reference, float> plain(in, DataFormat::NHWC, NetOptions{}, 1, true);
  Rng rng(31);
  for (std::size_t n : {std::size_t(3), std::size_t(3), std::size_t(5)}) {
    INFO("batch " << n);
    Tensor<float> x = make_tensor<float>(fused.input_shape(n), DataFormat::NHWC);
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform(-1.5, 1.5));
    const Tensor<float> yf = fused.forward(x, Mode::Train), yp = plain.forward(x, Mode::Train);
    REQUIRE(yf.size() == yp.size());
    CHECK(std::memcmp(yf.data(), yp.data(), yp.size() * sizeof(float)) == 0);
    Tensor<float> g(yf.shape());
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = float(rng.uniform(-0.5, 1.0));
    const Tensor<float> dxf = fused.backward(g), dxp = plain.backward(g);
    REQUIRE(dxf.size() == dxp.size());
    CHECK(std::memcmp(dxf.data(), dxp.data(), dxp.size() * sizeof(float)) == 0);
    auto& c = fused.root().children();
    CHECK(std::get<1>(c).last_in_place());
    CHECK_FALSE(std::get<1>(plain.root().children()).last_in_place());
    const TrainExecutor<backend::OneDnn, float>* e = fused.train_executor(n);
    REQUIRE(e);
    CHECK(e->carried("pool_into_pad") == 1);
  }
  CHECK(std::get<0>(fused.root().children()).padded_outputs() == 3);
}
