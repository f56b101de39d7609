// bf16 convolutions on oneDNN (ConvPrecision::BF16): every geometry and pass
// against the reference in double, within bf16's rounding, and visibly not
// float where the CPU has bf16 kernels (float where it has none); the joint
// backward and the x kept from a training forward give the same bits as the
// separate passes; the im2col + matmul weight gradient of small images
// agrees with the reference; the bf16 hand-overs inside ConvBatchNorm (the
// convolution's output to the batch norm, the batch norm's dx back, a
// layer's bf16 copy of its output to the next convolution) give
// the bits of the float passes on the same rounded values, and the layer
// agrees with the separate layers to bf16 accuracy; the tutorial CNN and a ResNet in bf16 compute
// the float models' logits (and the CNN's gradients) to bf16 accuracy.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <cifarnet/backend/host/bf16.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference/conv2d.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>

#include "agreement.hpp"
#include "copy_parameters.hpp"
#include "instances/resnet.hpp"
#include "instances/cifar10_cnn.hpp"

using namespace cifarnet;
using namespace cifarnet::test;
using B = backend::OneDnn;

namespace {

// bf16 keeps 8 significant bits (unit roundoff 2^-9 ~ 2e-3); a convolution
// of rounded inputs lands within a few 1e-3 of the exact result.
constexpr double kBf16Tolerance = 1e-2;

// oneDNN 2.6 has bf16 convolutions on AVX-512; elsewhere every pass must
// run in float.
bool cpu_has_bf16_kernels() { return backend::onednn::cpu_has_bf16_convolutions(); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_err(a, std::vector<double>(b.begin(), b.end()));
}

// Whether a verdict of `rule` (a hand-over between two residual blocks,
// anchored at the earlier block's sum) fired with the node named `name` as
// its last node: the later block's side of it.
bool fires_into(const plan::Plan& p, const std::string& rule, const std::string& name) {
  for (const plan::Verdict& v : p.verdicts)
    if (v.rule == rule && v.fires && p.nodes[std::size_t(v.nodes.back())].name == name) return true;
  return false;
}

// Two training steps of models a and b on x (a random dy each): the same
// output, input gradient (when both compute one) and parameter gradients,
// bit for bit.
template <class MA, class MB>
void same_training_steps(MA& a, MB& b, const Tensor<float>& x, Rng& rng) {
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const Tensor<float> y = a.forward(x, Mode::Train);
    REQUIRE(y == b.forward(x, Mode::Train));
    Tensor<float> dy = y;
    for (auto& v : dy) v = float(rng.uniform(-1, 1));
    const Tensor<float> dxa = a.backward(dy), dxb = b.backward(dy);
    CHECK(dxa == dxb);
    const auto &g1 = a.parameters().grads(), &g2 = b.parameters().grads();
    REQUIRE(g1.size() == g2.size());
    CHECK(std::memcmp(g1.data(), g2.data(), std::size_t(g1.size()) * sizeof(float)) == 0);
  }
}

// Two training steps of models a and b on x (a random dy each) where b
// keeps float what a hands over in bf16: the same output, parameter and
// input gradients within bf16 accuracy of each other. Returns the
// parameter gradients' relative distance of each step.
template <class MA, class MB>
std::array<double, 2> bf16_close_training_steps(MA& a, MB& b, const Tensor<float>& x, Rng& rng) {
  std::array<double, 2> apart{};
  for (int step = 0; step < 2; ++step) {
    const Tensor<float> y = a.forward(x, Mode::Train);
    REQUIRE(y == b.forward(x, Mode::Train));
    Tensor<float> dy = y;
    for (auto& v : dy) v = float(rng.uniform(-1, 1));
    const Tensor<float> dxa = a.backward(dy), dxb = b.backward(dy);
    const auto &pa = a.parameters().grads(), &pb = b.parameters().grads();
    const std::vector<float> ga(pa.data(), pa.data() + pa.size()), gb(pb.data(), pb.data() + pb.size());
    const std::vector<float> va(dxa.begin(), dxa.end()), vb(dxb.begin(), dxb.end());
    const double eg = rel_diff(ga, gb), ex = rel_diff(va, vb);
    INFO("step " << step << ": parameter gradients " << eg << ", dx " << ex << " apart");
    CHECK(eg < kBf16Tolerance);
    CHECK(ex < kBf16Tolerance);
    apart[std::size_t(step)] = eg;
  }
  return apart;
}

}  // namespace

TEST_CASE("Conv2d in bf16 agrees with the reference within bf16 rounding on every geometry and pass",
          "[backend][onednn][conv][bf16]") {
  OpPair<ops::Conv2d, B> t;
  t.op.set_precision(ConvPrecision::BF16);
  Rng rng = Rng::stream(2025, 11);
  std::size_t cases = 0, lowp = 0;
  for (const ConvGeom& g : conv_cases())
    for (bool bias : {true, false}) {
      INFO(str(g) << (bias ? " with bias" : " without bias"));
      const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = g.kh * g.kw * g.ic * g.oc;
      const Both x = Both::input(random_vec(rng, nx)), w = Both::input(random_vec(rng, nw)),
                 b = Both::input(random_vec(rng, g.oc)), dy = Both::input(random_cotangent(rng, ny));
      Both y = Both::output(ny), dx = Both::output(nx), dw = Both::output(nw), db = Both::output(g.oc);
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward(dev, g, side(x), side(w), bias ? side(b) : nullptr, side(y));
        op.backward_data(dev, g, side(dy), side(w), side(dx));
        op.backward_weights(dev, g, side(x), side(dy), side(dw), bias ? side(db) : nullptr);
      });
      const bool active = t.op.uses_bf16(g);
      ++cases;
      lowp += active;
      INFO("bf16 kernels used: " << active);
      const double tol = active ? kBf16Tolerance : kTolerance;
      CHECK(y.err() < tol);
      CHECK(dx.err() < tol);
      CHECK(dw.err() < tol);
      if (bias) CHECK(db.err() < tol);
      // A bf16 path must really round: float would agree to about 1e-7.
      if (active) CHECK((y.err() > 1e-5 || dx.err() > 1e-5 || dw.err() > 1e-5));
    }
  INFO(lowp << " of " << cases << " cases ran bf16 kernels");
  if (cpu_has_bf16_kernels())
    CHECK(lowp > cases / 2);
  else
    CHECK(lowp == 0);
}

TEST_CASE("bf16 forward on a ResNet-sized geometry runs a bf16 kernel in every pass on AVX-512",
          "[backend][onednn][conv][bf16]") {
  Rng rng = Rng::stream(2025, 12);
  for (DataFormat fmt : kFormats)
    for (std::size_t s : {std::size_t(1), std::size_t(2)}) {
      const ConvGeom g =
          ConvGeom::make(fmt, {4, 16, 16, 16}, 32, 3, s, s == 1 ? Padding::Same : Padding::Explicit);
      INFO(str(g));
      OpPair<ops::Conv2d, B> t;
      t.op.set_precision(ConvPrecision::BF16);
      const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
      const Both x = Both::input(random_vec(rng, nx)), w = Both::input(random_vec(rng, nw)),
                 dy = Both::input(random_cotangent(rng, ny));
      Both y = Both::output(ny), dx = Both::output(nx), dw = Both::output(nw);
      t.both([&](auto& dev, auto& op, auto side) { op.forward(dev, g, side(x), side(w), nullptr, side(y)); });
      CHECK(t.op.uses_bf16(g) == cpu_has_bf16_kernels());
      t.both([&](auto& dev, auto& op, auto side) {
        op.backward_data(dev, g, side(dy), side(w), side(dx));
        op.backward_weights(dev, g, side(x), side(dy), side(dw), nullptr);
      });
      CHECK(y.err() < kBf16Tolerance);
      CHECK(dx.err() < kBf16Tolerance);
      CHECK(dw.err() < kBf16Tolerance);
    }
}

TEST_CASE("The bf16 weight gradient of 7x7 and 3x3 images as im2col + matmul agrees with the reference",
          "[backend][onednn][conv][bf16]") {
  // Used where oneDNN has an AMX matmul (elsewhere the conv kernel runs, and
  // the same check holds); four chunks of three images each, so the sum of
  // the chunks' products is checked too.
  const bool amx = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
  Rng rng = Rng::stream(2025, 14);
  for (std::size_t hw : {std::size_t(7), std::size_t(3)}) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {12, 128, hw, hw}, 128, 3, 1, Padding::Same);
    INFO(str(g));
    OpPair<ops::Conv2d, B> t;
    t.op.set_precision(ConvPrecision::BF16);
    t.op.set_own_weights(false);  // an own kernel would take these (test_amx_wgrad.cpp, test_bf16_wgrad.cpp)
    t.op.set_im2col_chunk_bytes(3 * hw * hw * 9 * 128 * 2);
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
    const Both x = Both::input(random_vec(rng, nx)), w = Both::input(random_vec(rng, nw)),
               dy = Both::input(random_cotangent(rng, ny));
    Both y = Both::output(ny), dx = Both::output(nx), dw = Both::output(nw);
    t.both([&](auto& dev, auto& op, auto side) {
      op.forward(dev, g, side(x), side(w), nullptr, side(y));
      op.backward_weights(dev, g, side(x), side(dy), side(dw), nullptr);
      op.backward_data(dev, g, side(dy), side(w), side(dx));
    });
    CHECK(t.op.uses_gemm_weights(g) == amx);
    CHECK(dw.err() < kBf16Tolerance);
    CHECK(dx.err() < kBf16Tolerance);
    if (cpu_has_bf16_kernels()) CHECK(dw.err() > 1e-5);  // rounded to bf16, not float
    // Both passes in one call: the same bits (each call overwrites dw).
    std::vector<float> dx2(nx), dw2(nw, 1.0f);
    t.op.backward(t.dev, g, x.f.data(), dy.f.data(), w.f.data(), dx2.data(), dw2.data(), nullptr);
    CHECK(same_bits(dw.f, dw2));
    CHECK(same_bits(dx.f, dx2));
  }
}

TEST_CASE("bf16 backward_data as a forward convolution of the flipped weights agrees with the primitive",
          "[backend][onednn][conv][bf16]") {
  // Both paths multiply the same bf16 dy and bf16 weights (the flip is a
  // permutation, rounded alike) and add in float: they differ by the order of
  // the float sums only, far below bf16's rounding; each stays within bf16
  // accuracy of the reference in double. The forward path runs exactly on
  // the stride-1 geometries with odd kernels and SAME padding (where the CPU
  // has bf16 kernels); the others (a 2x2 SAME with pads 0 / 1 among them,
  // which crashed oneDNN's brgconv) keep the primitive.
  Rng rng = Rng::stream(2025, 15);
  std::vector<ConvGeom> geoms;
  for (const ConvGeom& g : conv_cases())
    if (g.sh == 1 && g.sw == 1) geoms.push_back(g);
  for (DataFormat fmt : kFormats) {  // ResNet's 3x3 at a vector-wide channel count, a 2x2 SAME (pads 0 / 1)
    geoms.push_back(ConvGeom::make(fmt, {4, 16, 8, 8}, 32, 3, 1, Padding::Same));
    geoms.push_back(ConvGeom::make(fmt, {3, 16, 7, 6}, 16, 2, 1, Padding::Same));
  }
  std::size_t via = 0, eligible = 0, eligible_lp = 0;
  for (const ConvGeom& g : geoms) {
    INFO(str(g));
    const bool odd_same = g.kh % 2 == 1 && g.kw % 2 == 1 && 2 * g.pt + 1 == g.kh && 2 * g.pb + 1 == g.kh &&
                          2 * g.pl + 1 == g.kw && 2 * g.pr + 1 == g.kw;
    eligible += odd_same;
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = g.kh * g.kw * g.ic * g.oc;
    const Both w = Both::input(random_vec(rng, nw)), dy = Both::input(random_cotangent(rng, ny));
    Both dx = Both::output(nx);
    std::vector<float> dx_prim(nx);
    for (bool on : {true, false}) {
      OpPair<ops::Conv2d, B> t;
      t.op.set_precision(ConvPrecision::BF16);
      t.op.set_backward_data_via_forward(on);
      t.both([&](auto& dev, auto& op, auto side) { op.backward_data(dev, g, side(dy), side(w), side(dx)); });
      CHECK(dx.err() < kBf16Tolerance);
      if (on) {
        via += t.op.uses_backward_data_via_forward(g);
        eligible_lp += odd_same && t.op.uses_bf16(g);
        // Only where the pass runs in bf16 at all, and on those geometries.
        if (t.op.uses_backward_data_via_forward(g)) {
          CHECK(t.op.uses_bf16(g));
          CHECK(odd_same);
        }
      } else {
        CHECK_FALSE(t.op.uses_backward_data_via_forward(g));
        dx_prim = dx.f;
      }
    }
    // dx from the last `on` run is gone; run it again beside the primitive's.
    Device<B> dev;
    ops::Conv2d<B, float> op;
    op.set_precision(ConvPrecision::BF16);
    std::vector<float> dx_fwd(nx);
    op.backward_data(dev, g, dy.f.data(), w.f.data(), dx_fwd.data());
    CHECK(rel_diff(dx_fwd, dx_prim) < 1e-5);
  }
  INFO(via << " of " << geoms.size() << " geometries (" << eligible
           << " odd SAME ones) ran backward_data as a forward convolution");
  CHECK(eligible >= 4);
  CHECK(via <= eligible_lp);
  if (backend::onednn::cpu_has_amx_convolutions())  // brgconv forward kernels for all of them
    CHECK(via == eligible_lp);
  if (cpu_has_bf16_kernels())
    CHECK(via > 0);
  else
    CHECK(via == 0);
}

TEST_CASE("The bf16 weight gradient in the own kernels agrees with oneDNN's and with the reference",
          "[backend][onednn][conv][bf16]") {
  // Where the CPU has AMX the op runs NHWC weight gradients of stride 1 or 2
  // with input channels a multiple of 8 (24 and 8 here: the AMX kernel pads
  // them to 16s) and output channels of 16 in amx_wgrad.hpp's kernel, where
  // it has AVX512-BF16 but no AMX in bf16_wgrad.hpp's (their own tests:
  // test_amx_wgrad.cpp, test_bf16_wgrad.cpp); here through the op, from the
  // bf16 x a training forward keeps and the dy the op rounds, against the op
  // with the kernel off (oneDNN's kernel on the same bf16 values: float
  // order only; for the strided ones without AMX, oneDNN's float kernel:
  // only the reference applies). The strided ones: ResNet's 3x3 stride 2
  // (padding 1), on odd sizes too, and without padding.
  namespace on = backend::onednn;
  const bool amx = on::amx::amx_available();
  const bool dot = on::cpu_has_own_bf16_weights();
  Rng rng = Rng::stream(2025, 17);
  const ConvGeom geoms[] = {ConvGeom::make(DataFormat::NHWC, {4, 16, 8, 8}, 32, 3, 1, Padding::Same),
                            ConvGeom::make(DataFormat::NHWC, {3, 32, 7, 5}, 16, 3, 1, Padding::Valid),
                            ConvGeom::make(DataFormat::NHWC, {2, 16, 6, 6}, 16, 1, 1, Padding::Same),
                            ConvGeom::make(DataFormat::NCHW, {4, 16, 8, 8}, 32, 3, 1, Padding::Same),
                            ConvGeom::make(DataFormat::NHWC, {4, 16, 8, 8}, 32, 3, 2, Padding::Explicit),
                            ConvGeom::make(DataFormat::NHWC, {3, 16, 9, 7}, 32, 3, 2, Padding::Explicit),
                            ConvGeom::make(DataFormat::NHWC, {2, 32, 8, 9}, 16, 3, 2, Padding::Valid),
                            ConvGeom::make(DataFormat::NCHW, {4, 16, 8, 8}, 32, 3, 2, Padding::Explicit),
                            ConvGeom::make(DataFormat::NHWC, {3, 24, 9, 9}, 64, 3, 1, Padding::Same),
                            ConvGeom::make(DataFormat::NHWC, {2, 8, 6, 7}, 16, 3, 1, Padding::Same)};
  for (const ConvGeom& g : geoms) {
    INFO(str(g));
    const bool eligible = (amx || dot) && g.fmt == DataFormat::NHWC;
    const bool off_in_float = dot && g.sh > 1;
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = g.kh * g.kw * g.ic * g.oc;
    const Both x = Both::input(random_vec(rng, nx)), w = Both::input(random_vec(rng, nw)),
               dy = Both::input(random_cotangent(rng, ny));
    std::vector<float> dw_off;
    for (bool on : {false, true}) {
      OpPair<ops::Conv2d, B> t;
      t.op.set_precision(ConvPrecision::BF16);
      t.op.set_keep_input(true);
      t.op.set_own_weights(on);
      Both y = Both::output(ny), dw = Both::output(nw);
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward(dev, g, side(x), side(w), nullptr, side(y));
        op.backward_weights(dev, g, side(x), side(dy), side(dw), nullptr);
      });
      CHECK(t.op.uses_own_weights(g) == (on && eligible));
      CHECK(t.op.uses_amx_weights(g) == (on && eligible && amx));
      CHECK(dw.err() < kBf16Tolerance);
      if (!on)
        dw_off = dw.f;
      else if (eligible && !off_in_float)
        CHECK(rel_diff(dw.f, dw_off) < 1e-5);
      else if (eligible)
        CHECK(rel_diff(dw.f, dw_off) > 0);  // bf16 now, float before
      else
        CHECK(same_bits(dw.f, dw_off));
    }
  }
}

TEST_CASE("bf16 backward_data of stride-2 3x3 convolutions by row phases agrees with the primitive",
          "[backend][onednn][conv][bf16]") {
  // Where the CPU has AMX the op runs the bf16 backward_data of NHWC 3x3
  // stride-2 convolutions with padding 1 before, even image sizes and 16 or
  // more input channels as two forward convolutions of dy, one per row phase
  // of dx (conv2d.hpp, State::phases_backward), chunk by chunk. Both paths
  // multiply the same bf16 dy and bf16 weights and add in float: they differ
  // by the order of the float sums only; each stays within bf16 accuracy of
  // the reference in double. The phase path's bits do not depend on the
  // thread count. Checked by breaking it once: phase 1 reading kernel column
  // 1 where it takes column 0 fails every eligible case here.
  const bool amx = backend::onednn::cpu_has_amx_convolutions();
  Rng rng = Rng::stream(2025, 19);
  struct Case {
    ConvGeom g;
    bool eligible;
  };
  const Case cases[] = {
      {ConvGeom::make(DataFormat::NHWC, {4, 32, 8, 8}, 64, 3, 2, Padding::Explicit), true},
      {ConvGeom::make(DataFormat::NHWC, {40, 32, 6, 10}, 16, 3, 2, Padding::Explicit),
       true},  // 2 chunks of 20
      {ConvGeom::make(DataFormat::NHWC, {128, 32, 16, 16}, 64, 3, 2, Padding::Explicit),
       true},                                                                                  // ResNet-20's
      {ConvGeom::make(DataFormat::NHWC, {3, 32, 7, 7}, 32, 3, 2, Padding::Explicit), false},   // odd size
      {ConvGeom::make(DataFormat::NHWC, {4, 16, 8, 8}, 32, 3, 2, Padding::Explicit), true},    // 16 channels
      {ConvGeom::make(DataFormat::NHWC, {4, 8, 8, 8}, 16, 3, 2, Padding::Explicit), false},    // 8 channels
      {ConvGeom::make(DataFormat::NHWC, {37, 32, 4, 4}, 32, 3, 2, Padding::Explicit), false},  // no chunk
      {ConvGeom::make(DataFormat::NHWC, {4, 32, 8, 8}, 32, 3, 2, Padding::Valid), false},      // no padding
      {ConvGeom::make(DataFormat::NCHW, {4, 32, 8, 8}, 32, 3, 2, Padding::Explicit), false}};
  std::size_t ran = 0;
  for (const Case& c : cases) {
    const ConvGeom& g = c.g;
    INFO(str(g));
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
    const Both w = Both::input(random_vec(rng, nw)), dy = Both::input(random_cotangent(rng, ny));
    std::vector<float> dx_on, dx_off;
    for (bool on : {true, false}) {
      OpPair<ops::Conv2d, B> t;
      t.op.set_precision(ConvPrecision::BF16);
      t.op.set_backward_data_via_forward(on);
      Both dx = Both::output(nx);
      t.both([&](auto& dev, auto& op, auto side) { op.backward_data(dev, g, side(dy), side(w), side(dx)); });
      CHECK(dx.err() < kBf16Tolerance);
      CHECK(t.op.uses_backward_data_via_forward(g) == (on && amx && c.eligible));
      ran += on && t.op.uses_backward_data_via_forward(g);
      (on ? dx_on : dx_off) = dx.f;
    }
    CHECK(rel_diff(dx_on, dx_off) < 1e-5);
    if (!amx || !c.eligible) continue;
    // The same bits with 1 and 2 threads, and from backward() with dw too.
    const int before = omp_get_max_threads();
    std::vector<float> by_threads[2];
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Device<B> dev;
      ops::Conv2d<B, float> op;
      op.set_precision(ConvPrecision::BF16);
      by_threads[threads - 1].assign(nx, -1.0f);
      op.backward_data(dev, g, dy.f.data(), w.f.data(), by_threads[threads - 1].data());
    }
    omp_set_num_threads(before);
    CHECK(same_bits(by_threads[0], dx_on));
    CHECK(same_bits(by_threads[1], dx_on));
  }
  if (amx) CHECK(ran == 4);
}

TEST_CASE("The flipped and phase weights of backward_data follow the weights' version",
          "[backend][onednn][conv][bf16]") {
  // With a version set the op reuses its flipped (stride 1) or phase
  // (stride 2, AMX) weights, reordered, while the buffer and version stay;
  // new values under a new version must be seen.
  Rng rng = Rng::stream(2025, 16);
  const ConvGeom stride1 = ConvGeom::make(DataFormat::NHWC, {2, 16, 6, 6}, 16, 3, 1, Padding::Same);
  const ConvGeom stride2 = ConvGeom::make(DataFormat::NHWC, {8, 32, 6, 6}, 32, 3, 2, Padding::Explicit);
  for (const ConvGeom& g : {stride1, stride2}) {
    INFO(str(g));
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
    std::vector<float> w = random_vec(rng, nw);
    const auto w2 = random_vec(rng, nw), dy = random_cotangent(rng, ny);
    auto fresh = [&](const std::vector<float>& wv) {
      Device<B> dev;
      ops::Conv2d<B, float> op;
      op.set_precision(ConvPrecision::BF16);
      std::vector<float> dx(nx);
      op.backward_data(dev, g, dy.data(), wv.data(), dx.data());
      return dx;
    };
    Device<B> dev;
    ops::Conv2d<B, float> op;
    op.set_precision(ConvPrecision::BF16);
    std::vector<float> dx(nx);
    op.set_weights_version(1);
    op.backward_data(dev, g, dy.data(), w.data(), dx.data());
    CHECK(same_bits(dx, fresh(w)));
    const std::size_t reorders = op.weight_reorders();
    op.backward_data(dev, g, dy.data(), w.data(), dx.data());
    CHECK(op.weight_reorders() == reorders);  // same buffer and version: the copies are reused
    w = w2;                                   // same buffer, new values ...
    op.set_weights_version(2);                // ... under a new version
    op.backward_data(dev, g, dy.data(), w.data(), dx.data());
    CHECK(same_bits(dx, fresh(w2)));
    if (g.sh == 2) CHECK(op.uses_backward_data_via_forward(g) == backend::onednn::cpu_has_amx_convolutions());
  }
}

TEST_CASE("store_bf16 rounds every length and offset as bf16_bits does (normal values, NaN, infinities)",
          "[backend][bf16]") {
  // The AVX512-BF16 path converts eight floats a load plus a masked tail;
  // every element of every length up to 41 at every start offset up to 7
  // must round like the integer rounding, ties to even included.
  Rng rng = Rng::stream(2025, 18);
  std::vector<float> v = random_vec(rng, 64);
  v[3] = 1.0f + 0x1p-8f;      // a tie: rounds to even (1.0)
  v[9] = 1.0f + 3 * 0x1p-8f;  // a tie: rounds up to even
  v[17] = std::numeric_limits<float>::infinity();
  v[20] = -std::numeric_limits<float>::infinity();
  v[26] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t off = 0; off < 8; ++off)
    for (std::size_t n = 1; n <= 41; ++n) {
      INFO("offset " << off << ", length " << n);
      std::vector<std::uint16_t> out(n + 2, 0xABCD);
      backend::host::store_bf16(v.data() + off, out.data() + 1, n);
      CHECK(out[0] == 0xABCD);
      CHECK(out[n + 1] == 0xABCD);  // nothing written past the end
      for (std::size_t i = 0; i < n; ++i) {
        const float f = v[off + i];
        if (std::isnan(f))
          CHECK(std::isnan(backend::host::bf16_to_float(out[i + 1])));
        else
          CHECK(out[i + 1] == backend::host::bf16_bits(f));
      }
    }
}

TEST_CASE("The joint backward and the x kept by a training forward give the separate passes' bits",
          "[backend][onednn][conv][bf16]") {
  Rng rng = Rng::stream(2025, 13);
  for (ConvPrecision p : {ConvPrecision::F32, ConvPrecision::BF16}) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {3, 8, 9, 9}, 16, 3, 2, Padding::Explicit);
    INFO(to_string(p));
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
    const auto x = random_vec(rng, nx), w = random_vec(rng, nw), b = random_vec(rng, g.oc),
               dy = random_cotangent(rng, ny);
    auto run = [&](bool keep, bool joint) {
      Device<B> dev;
      ops::Conv2d<B, float> op;
      op.set_precision(p);
      op.set_keep_input(keep);
      std::vector<float> y(ny), dx(nx), dw(nw), db(g.oc);
      op.forward(dev, g, x.data(), w.data(), b.data(), y.data());
      if (joint) {
        op.backward(dev, g, x.data(), dy.data(), w.data(), dx.data(), dw.data(), db.data());
      } else {
        op.backward_weights(dev, g, x.data(), dy.data(), dw.data(), db.data());
        op.backward_data(dev, g, dy.data(), w.data(), dx.data());
      }
      y.insert(y.end(), dx.begin(), dx.end());
      y.insert(y.end(), dw.begin(), dw.end());
      y.insert(y.end(), db.begin(), db.end());
      return y;
    };
    const auto base = run(false, false);
    CHECK(same_bits(run(true, false), base));
    CHECK(same_bits(run(false, true), base));
    CHECK(same_bits(run(true, true), base));
  }
}

TEST_CASE("A kept bf16 copy of x is not used for another buffer or after an inference forward",
          "[backend][onednn][conv][bf16]") {
  Rng rng = Rng::stream(2025, 14);
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {2, 8, 7, 7}, 8, 3, 1, Padding::Same);
  const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
  const auto x1 = random_vec(rng, nx), x2 = random_vec(rng, nx), w = random_vec(rng, nw),
             dy = random_cotangent(rng, ny);
  Device<B> dev;
  auto dw_of = [&](ops::Conv2d<B, float>& op, const std::vector<float>& x) {
    std::vector<float> dw(nw);
    op.backward_weights(dev, g, x.data(), dy.data(), dw.data(), nullptr);
    return dw;
  };
  ops::Conv2d<B, float> fresh;
  fresh.set_precision(ConvPrecision::BF16);
  const auto want2 = dw_of(fresh, x2);
  ops::Conv2d<B, float> op;
  op.set_precision(ConvPrecision::BF16);
  std::vector<float> y(ny);
  op.set_keep_input(true);
  op.forward(dev, g, x1.data(), w.data(), nullptr, y.data());
  CHECK(same_bits(dw_of(op, x2), want2));  // another buffer: converted afresh
  std::vector<float> x = x1;
  op.forward(dev, g, x.data(), w.data(), nullptr, y.data());
  op.set_keep_input(false);
  x = x2;  // same buffer, new values, seen by an inference forward
  op.forward(dev, g, x.data(), w.data(), nullptr, y.data());
  CHECK(same_bits(dw_of(op, x), want2));
}

// Whole models: the tutorial CNN (no batch norm) gets its gradients to a few
// percent. A ResNet's gradients are not compared: at initialization they are
// ill-conditioned in float already (scaling the input by 1.001, which batch
// norm undoes to 5e-5 in the logits, moves them by 1-12 % per tensor), so
// bf16's rounding moves them by tens of percent there; its logits are
// compared, and its training is checked end to end by the bf16 recipe of
// docs/RESULTS.md.
template <class Net>
void compare_models(InputShape in, const NetOptions& opts, std::size_t n, double logit_tol, double grad_tol) {
  for (DataFormat fmt : kFormats) {
    INFO(to_string(fmt));
    Model<Net, B> f32(in, fmt, opts, 5);
    Model<Net, B> bf16(in, fmt, NetOptions(opts).with_conv_precision(ConvPrecision::BF16), 5);
    Rng rng(3);
    Tensor<float> x = make_tensor<float>({n, in.c, in.h, in.w}, fmt);
    for (auto& v : x) v = float(rng.normal());
    std::vector<std::int32_t> labels(n);
    for (auto& l : labels) l = std::int32_t(rng.uniform_int(10));
    auto run = [&](Model<Net, B>& net, std::vector<float>& logits) {
      const Tensor<float> y = net.forward(x, Mode::Train);
      logits.assign(y.begin(), y.end());
      Tensor<float> dy;
      softmax_cross_entropy(y, labels, &dy);
      net.backward(dy);
      const auto& gr = net.parameters().grads();
      return std::vector<float>(gr.data(), gr.data() + gr.size());
    };
    std::vector<float> lf, lb;
    const auto gf = run(f32, lf), gb = run(bf16, lb);
    const double el = rel_diff(lb, lf), eg = rel_diff(gb, gf);
    INFO("logits " << el << ", gradients " << eg);
    CHECK(el < logit_tol);
    if (grad_tol > 0) CHECK(eg < grad_tol);
    if (cpu_has_bf16_kernels()) CHECK(el > 1e-6);  // the bf16 model does round
    // Inference (a ResNet folds batch norm into the bf16 convolution).
    const Tensor<float> yf = f32.forward(x, Mode::Infer);
    const Tensor<float> yb = bf16.forward(x, Mode::Infer);
    CHECK(rel_diff(std::vector<float>(yb.begin(), yb.end()), std::vector<float>(yf.begin(), yf.end())) <
          logit_tol);
  }
}

TEST_CASE(
    "Models with bf16 convolutions compute the float model's logits (and CNN gradients) to bf16 accuracy",
    "[backend][onednn][bf16][model]") {
  SECTION("tutorial CNN") { compare_models<Cifar10Cnn>({3, 24, 24}, NetOptions(), 4, 2e-2, 1e-1); }
  SECTION("ResNet-8") { compare_models<ResNetCifar<>>({3, 16, 16}, resnet_options(8), 4, 3e-2, 0); }
}

namespace {
std::vector<std::uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<std::uint16_t> b(v.size());
  backend::host::store_bf16(v.data(), b.data(), v.size());
  return b;
}
std::vector<float> widen(const std::vector<std::uint16_t>& b) {
  std::vector<float> v(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) v[i] = backend::host::bf16_to_float(b[i]);
  return v;
}
}  // namespace

// Batch norm with its GELU writes the bf16 copy of y in the same pass as
// store_bf16 of y, and y and the statistics as without the copy, in both
// layouts, every NHWC channel-count specialisation and the generic loop.
TEST_CASE("Batch norm with the GELU writes its bf16 copy as store_bf16 of y",
          "[backend][onednn][bf16][bn][gelu]") {
  Rng rng(29);
  for (DataFormat fmt : kFormats)
    for (std::size_t c : {std::size_t(16), std::size_t(64), std::size_t(256), std::size_t(5)}) {
      const ChannelGeom g = ChannelGeom::make(fmt, Shape{3, c, 5, 6});
      INFO(str(g));
      const std::size_t n = g.size();
      std::vector<float> x(n), gamma(c), beta(c);
      for (auto& v : x) v = float(rng.uniform(-2, 3));
      for (std::size_t i = 0; i < c; ++i) {
        gamma[i] = float(rng.uniform(0.5, 1.5));
        beta[i] = float(rng.uniform(-0.5, 0.5));
      }
      Device<B> dev;
      ops::BatchNorm<B, float> a, b;
      std::vector<float> ya(n), yb(n), ma(c), va(c), mb(c), vb(c);
      std::vector<std::uint16_t> copy(n, 0xFFFF);
      a.forward_train(dev, g, 1e-5, x.data(), gamma.data(), beta.data(), ya.data(), ma.data(), va.data(),
                      ops::BnActivation::Gelu);
      b.forward_train(dev, g, 1e-5, x.data(), gamma.data(), beta.data(), yb.data(), mb.data(), vb.data(),
                      ops::BnActivation::Gelu, copy.data());
      CHECK(same_bits(ya, yb));
      CHECK(same_bits(ma, mb));
      CHECK(same_bits(va, vb));
      CHECK(copy == to_bits(yb));
    }
}

// Batch norm reading x as bfloat16 bits computes what it computes from the
// float values those bits hold (statistics, y, the ReLU's mask, dgamma,
// dbeta, dx), and writing dx as bf16 gives store_bf16 of the float dx: every
// channel-count specialisation (16, 32, 64) and the generic loop of NHWC
// bit for bit. NCHW sums each plane in an OpenMP SIMD reduction whose lane
// count the compiler picks per element type, so there the sums may be added
// in another order: equal to float rounding.
TEST_CASE("Batch norm on bf16 x and with bf16 dx gives the float passes' bits on the same values",
          "[backend][onednn][bf16][bn]") {
  Rng rng(23);
  for (DataFormat fmt : kFormats)
    for (std::size_t c : {std::size_t(16), std::size_t(32), std::size_t(64), std::size_t(5)})
      for (bool relu : {false, true}) {
        const ChannelGeom g = ChannelGeom::make(fmt, Shape{6, c, 5, 7});
        INFO(str(g) << (relu ? " relu" : ""));
        const std::size_t n = g.size();
        std::vector<float> xf(n), dy(n), gamma(c), beta(c);
        for (auto& v : xf) v = float(rng.uniform(-2, 3));
        for (auto& v : dy) v = float(rng.uniform(-1, 1));
        for (std::size_t i = 0; i < c; ++i) {
          gamma[i] = float(rng.uniform(0.5, 1.5));
          beta[i] = float(rng.uniform(-0.5, 0.5));
        }
        const bool exact = fmt == DataFormat::NHWC;
        auto same = [&](const std::vector<float>& p, const std::vector<float>& q) {
          return exact ? same_bits(p, q) : rel_diff(p, q) < 1e-6;
        };
        const std::vector<std::uint16_t> xb = to_bits(xf);
        const std::vector<float> xw = widen(xb);  // the values the bits hold
        Device<B> dev;
        ops::BatchNorm<B, float> a, b;
        std::vector<float> ya(n), yb(n), ma(c), va(c), mb(c), vb(c);
        a.forward_train(dev, g, 1e-5, xw.data(), gamma.data(), beta.data(), ya.data(), ma.data(), va.data(),
                        relu);
        b.forward_train(dev, g, 1e-5, xb.data(), gamma.data(), beta.data(), yb.data(), mb.data(), vb.data(),
                        relu);
        CHECK(same(ya, yb));
        CHECK(same(ma, mb));
        CHECK(same(va, vb));
        std::vector<float> dxa(n), dxb(n), dga(c), dba(c), dgb(c), dbb(c);
        a.backward(dev, g, 1e-5, xw.data(), dy.data(), gamma.data(), ma.data(), va.data(), dxa.data(),
                   dga.data(), dba.data(), relu);
        b.backward(dev, g, 1e-5, xb.data(), dy.data(), gamma.data(), mb.data(), vb.data(), dxb.data(),
                   dgb.data(), dbb.data(), relu);
        CHECK(same(dxa, dxb));
        CHECK(same(dga, dgb));
        CHECK(same(dba, dbb));
        // dx as bf16, from float x and from bf16 x.
        std::vector<std::uint16_t> lpa(n), lpb(n);
        a.backward_bf16(dev, g, 1e-5, xw.data(), dy.data(), gamma.data(), ma.data(), va.data(), lpa.data(),
                        dga.data(), dba.data(), relu);
        b.backward_bf16(dev, g, 1e-5, xb.data(), dy.data(), gamma.data(), mb.data(), vb.data(), lpb.data(),
                        dgb.data(), dbb.data(), relu);
        CHECK(lpa == to_bits(dxa));
        if (exact)
          CHECK(lpb == lpa);
        else  // a float rounding apart before bf16's
          CHECK(rel_diff(widen(lpb), widen(lpa)) < 1e-3);
        CHECK(same(dga, dgb));
        // dy as bf16 bits too (a bf16 convolution's dx; NHWC at the
        // specialised channel counts only): the pass on the float values
        // the bits hold, bit for bit.
        const std::vector<std::uint16_t> dyb = to_bits(dy);
        const std::vector<float> dyw = widen(dyb);
        std::vector<std::uint16_t> lpc(n), lpd(n);
        std::vector<float> dgc(c), dbc(c), dgd(c), dbd(c);
        if (ops::BatchNorm<B, float>::writes_bf16_only(g)) {
          b.backward_bf16(dev, g, 1e-5, xb.data(), dyb.data(), gamma.data(), mb.data(), vb.data(), lpc.data(),
                          dgc.data(), dbc.data(), relu);
          b.backward_bf16(dev, g, 1e-5, xb.data(), dyw.data(), gamma.data(), mb.data(), vb.data(), lpd.data(),
                          dgd.data(), dbd.data(), relu);
          CHECK(lpc == lpd);
          CHECK(same_bits(dgc, dgd));
          CHECK(same_bits(dbc, dbd));
        } else {
          CHECK_THROWS_AS(b.backward_bf16(dev, g, 1e-5, xb.data(), dyb.data(), gamma.data(), mb.data(),
                                          vb.data(), lpc.data(), dgc.data(), dbc.data(), relu),
                          ConfigError);
        }
      }
}

// The convolution writing bf16 rounds its float sums once: the same bits as
// its float output rounded by store_bf16 (bf16 kernels only; elsewhere the
// pass is not offered).
TEST_CASE("A bf16 convolution's bf16 output is its float output rounded", "[backend][onednn][bf16][conv]") {
  Rng rng(29);
  for (DataFormat fmt : kFormats)
    for (std::size_t ic : {std::size_t(3), std::size_t(16), std::size_t(32)}) {
      const ConvGeom g = ConvGeom::make(fmt, Shape{8, ic, 16, 16}, 32, 3, ic == 32 ? 2 : 1,
                                        ic == 32 ? Padding::Explicit : Padding::Same);
      INFO(str(g));
      Device<B> dev;
      ops::Conv2d<B, float> op;
      op.set_precision(ConvPrecision::BF16);
      const std::vector<float> x = random_vec(rng, g.in_shape().size()),
                               w = random_vec(rng, g.kh * g.kw * ic * 32);
      std::vector<float> y(g.out_shape().size());
      op.forward(dev, g, x.data(), w.data(), nullptr, y.data());
      if (!op.has_bf16_dst(dev, g)) {
        CHECK_FALSE(cpu_has_bf16_kernels());
        continue;
      }
      std::vector<std::uint16_t> yb(y.size());
      op.forward_bf16_dst(dev, g, x.data(), w.data(), yb.data());
      CHECK(yb == to_bits(y));
    }
}

// The data gradient written as bf16 (Conv2d::writes_bf16_dx: the
// forward-as-backward kernel with a bf16 output; for ResNet's stride-2 3x3,
// the two phase convolutions with bf16 outputs or oneDNN's backward_data
// kernel writing bf16): the float dx of the same pass rounded once. Where
// the CPU has no such kernel nothing is offered.
TEST_CASE("A bf16 convolution's bf16 dx is its float dx rounded", "[backend][onednn][bf16][conv]") {
  Rng rng(37);
  std::size_t offered = 0, strided_offered = 0;
  for (DataFormat fmt : kFormats)
    for (std::size_t c : {std::size_t(16), std::size_t(32), std::size_t(64)})
      for (std::size_t stride : {std::size_t(1), std::size_t(2)}) {
        if (stride == 2 && c == 64) continue;  // ResNet's: 16 -> 32 and 32 -> 64
        const std::size_t oc = stride * c, hw = stride == 2 ? 16 : 8;
        const ConvGeom g = ConvGeom::make(fmt, Shape{8, c, hw, hw}, oc, 3, stride,
                                          stride == 2 ? Padding::Explicit : Padding::Same);
        INFO(str(g));
        Device<B> dev;
        ops::Conv2d<B, float> op;
        op.set_precision(ConvPrecision::BF16);
        const std::vector<float> x = random_vec(rng, g.in_shape().size()), w = random_vec(rng, 9 * c * oc),
                                 dy = random_cotangent(rng, g.out_shape().size());
        std::uint16_t* lp = op.bf16_dy(dev, g, false, true);
        if (!op.writes_bf16_dx(dev, g)) {
          CHECK((!cpu_has_bf16_kernels() || !lp || (stride == 1 && !op.uses_backward_data_via_forward(g)) ||
                 fmt == DataFormat::NCHW));
          continue;
        }
        ++offered;
        strided_offered += stride == 2;
        REQUIRE(lp != nullptr);
        const std::vector<std::uint16_t> dyb = to_bits(dy);
        std::vector<float> dx(g.in_shape().size());
        std::vector<std::uint16_t> dxb(dx.size(), 0xffff);
        std::copy(dyb.begin(), dyb.end(), lp);
        op.backward_bf16_dy(dev, g, x.data(), w.data(), dx.data(), nullptr);
        std::copy(dyb.begin(), dyb.end(), op.bf16_dy(dev, g, false, true));
        op.backward_bf16_dy(dev, g, x.data(), w.data(), dxb.data(), nullptr);
        CHECK(dxb == to_bits(dx));
      }
  if (backend::onednn::cpu_has_amx_convolutions()) {
    CHECK(offered > 0);
    CHECK(strided_offered > 0);
  }
}

// ConvBatchNorm on bf16 convolutions: the convolution writes its output as
// bf16 for the batch norm, and the batch norm writes dx as bf16 into the
// buffer the convolution's backward reads (Conv2d::bf16_dy). The separate
// layers in bf16 round the same tensors except the convolution's output
// (float there): both against the float model, the fused layers must be
// within 2.5x the separate ones' error (measured: 1.1-2.1x; the extra
// rounding of y is what bf16 activations are). Gradients of a freshly
// initialised net with batch norm are ill-conditioned: bf16 moves them by
// several percent either way.
TEST_CASE("ConvBatchNorm's bf16 hand-overs are about as accurate as the separate bf16 layers",
          "[backend][onednn][bf16][conv_bn]") {
  using Fused = Sequential<ConvBatchNorm<3, 8, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<8, 16, 3>,
                           ConvBatchNorm<16, 16, 3, 2, Padding::Explicit, FusedRelu>>;
  using Unfused = Sequential<Conv2d<3, 8, 3>, BatchNorm2d<8, FusedRelu>, Conv2d<8, 16, 3>, BatchNorm2d<16>,
                             Conv2d<16, 16, 3, 2, Padding::Explicit>, BatchNorm2d<16, FusedRelu>>;
  const NetOptions bf16 = NetOptions().with_conv_precision(ConvPrecision::BF16);
  for (DataFormat fmt : kFormats) {
    INFO(to_string(fmt));
    Model<Fused, B> fused({3, 8, 8}, fmt, bf16, 5, /*input_gradient=*/true);
    Model<Unfused, B> unfused({3, 8, 8}, fmt, bf16, 5, /*input_gradient=*/true);
    Model<Unfused, B> f32({3, 8, 8}, fmt, NetOptions(), 5, /*input_gradient=*/true);
    copy_parameters(fused, unfused);
    copy_parameters(fused, f32);
    Rng rng(11);
    Tensor<float> x = make_tensor<float>({16, 3, 8, 8}, fmt);
    for (auto& v : x) v = float(rng.normal());
    for (int step = 0; step < 2; ++step) {  // the second step reuses every buffer
      Tensor<float> dy;
      // y, dx and the parameter gradients of one model, flattened.
      auto run = [&](auto& net) {
        const Tensor<float> y = net.forward(x, Mode::Train);
        if (dy.size() == 0) {
          dy = y;
          for (auto& v : dy) v = float(rng.uniform(-1, 1));
        }
        const Tensor<float> dx = net.backward(dy);
        const auto& gr = net.parameters().grads();
        return std::array<std::vector<float>, 3>{std::vector<float>(y.begin(), y.end()),
                                                 std::vector<float>(dx.begin(), dx.end()),
                                                 std::vector<float>(gr.data(), gr.data() + gr.size())};
      };
      const auto ref = run(f32), u = run(unfused), f = run(fused);
      for (int k = 0; k < 3; ++k) {
        const double ef = rel_diff(f[std::size_t(k)], ref[std::size_t(k)]),
                     eu = rel_diff(u[std::size_t(k)], ref[std::size_t(k)]);
        INFO("step " << step << ", "
                     << (k == 0   ? "y"
                         : k == 1 ? "dx"
                                  : "parameter gradients")
                     << " against float: fused " << ef << ", separate " << eu);
        CHECK(ef < 2.5 * eu + 1e-2);
        if (k == 0) CHECK(ef < 2e-2);
      }
    }
    auto& c = fused.root().children();
    // Every convolution writes bf16 where the CPU has bf16 kernels. The
    // 8 -> 16 one takes dx as bf16, the strided one too where its weight
    // gradient is bf16: where oneDNN runs bf16 on AMX, or in NHWC the own
    // AVX512-BF16 kernel; the 3-channel input convolution (and the strided
    // one elsewhere) compute their weight gradients in float.
    const std::size_t steps = cpu_has_bf16_kernels() ? 2 : 0;
    const bool amx = backend::onednn::cpu_has_amx_convolutions() ||
                     (fmt == DataFormat::NHWC && backend::onednn::cpu_has_own_bf16_weights());
    CHECK(std::get<0>(c).bf16_outputs() == steps);
    CHECK(std::get<1>(c).bf16_outputs() == steps);
    CHECK(std::get<2>(c).bf16_outputs() == steps);
    CHECK(std::get<0>(c).bf16_handoffs() == 0);
    CHECK(std::get<1>(c).bf16_handoffs() == steps);
    CHECK(std::get<2>(c).bf16_handoffs() == (amx ? steps : 0));
  }
}

TEST_CASE("A batch norm that writes only its bf16 copy for the next ConvBatchNorm gives the same bits",
          "[backend][onednn][bf16][copy]") {
  // In Sequential<ConvBatchNorm, ConvBatchNorm> the first batch norm skips
  // its float output when the second layer reads its input only through the
  // bf16 copy (NHWC at 16 channels here); an Identity between them breaks
  // the pair (no skip, no copy: the convolution rounds the float itself).
  // Outputs and gradients must be the same bits, over two steps.
  using Pair = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<16, 16, 3>>;
  using Broken =
      Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, Identity, ConvBatchNorm<16, 16, 3>>;
  // (float gradients between the pair: the bf16 one rounds, test below;
  // the output not written at all, bn_output_into_next_conv on AMX CPUs,
  // sums differently: tests/nn/test_rules.cpp)
  const NetOptions bf16 = NetOptions()
                              .with_conv_precision(ConvPrecision::BF16)
                              .with_bf16_gradients(false)
                              .with_rules_off({"bn_output_into_next_conv"});
  for (DataFormat fmt : kFormats) {
    INFO(to_string(fmt));
    Model<Pair, B> pair({16, 8, 8}, fmt, bf16, 5, /*input_gradient=*/true);
    Model<Broken, B> broken({16, 8, 8}, fmt, bf16, 5, /*input_gradient=*/true);
    copy_parameters(pair, broken, /*same_names=*/false);
    Rng rng(33);
    Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, fmt);
    for (auto& v : x) v = float(rng.normal());
    same_training_steps(pair, broken, x, rng);
    // Inference after training reads the float output again: it is written.
    CHECK(pair.forward(x, Mode::Infer) == broken.forward(x, Mode::Infer));
    const std::size_t steps = cpu_has_bf16_kernels() && fmt == DataFormat::NHWC ? 2 : 0;
    CHECK(std::get<0>(pair.root().children()).float_outputs_skipped() == steps);
    CHECK(std::get<0>(broken.root().children()).float_outputs_skipped() == 0);
  }
}

TEST_CASE("Two ConvBatchNorm hand the input gradient back as bf16, within bf16 accuracy of the float one",
          "[backend][onednn][bf16][copy]") {
  // In Sequential<ConvBatchNorm, ConvBatchNorm> the second layer's
  // convolution writes its dx as bf16 for the first layer's batch norm
  // (NHWC at 16 channels, where the data gradient runs as oneDNN's forward
  // kernel); NetOptions::bf16_gradients(false) keeps it float. The same
  // forward; gradients a bf16 rounding of dy apart.
  using Pair = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, ConvBatchNorm<16, 16, 3>>;
  const NetOptions lp = NetOptions().with_conv_precision(ConvPrecision::BF16);
  const NetOptions fp = NetOptions(lp).with_bf16_gradients(false);
  for (DataFormat fmt : kFormats) {
    INFO(to_string(fmt));
    Model<Pair, B> a({16, 8, 8}, fmt, lp, 5, /*input_gradient=*/true);
    Model<Pair, B> b({16, 8, 8}, fmt, fp, 5, /*input_gradient=*/true);
    copy_parameters(a, b);
    Rng rng(35);
    Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, fmt);
    for (auto& v : x) v = float(rng.normal());
    const std::array<double, 2> apart = bf16_close_training_steps(a, b, x, rng);
    if (std::get<1>(a.root().children()).bf16_dx_handoffs() > 0) {  // it did round
      CHECK(apart[0] > 0);
      CHECK(apart[1] > 0);
    }
    const std::size_t steps = cpu_has_bf16_kernels() && fmt == DataFormat::NHWC ? 2 : 0;
    const std::size_t done = std::get<1>(a.root().children()).bf16_dx_handoffs();
    if (backend::onednn::cpu_has_amx_convolutions()) CHECK(done == steps);
    CHECK(done <= steps);
    CHECK(std::get<1>(b.root().children()).bf16_dx_handoffs() == 0);
  }
}

TEST_CASE("Residual blocks' sums read the bodies' input gradients as bf16, within bf16 accuracy of float",
          "[backend][onednn][bf16][residual]") {
  // ResNet's chain of blocks (NHWC, 16 channels): from the second block on,
  // the body's first convolution writes its dx as bf16 and the block's sum
  // (through the previous block's ReLU mask, as bits) reads it. Against the
  // same chain with NetOptions::bf16_gradients(false): the same forward,
  // gradients a bf16 rounding apart; the first block (input not a block's
  // output) keeps the float sum.
  using Block = resnet::BlockV1<16, 16, 1>;
  using Chain = Sequential<Block, Block, Block>;
  const NetOptions lp = NetOptions().with_conv_precision(ConvPrecision::BF16);
  const NetOptions fp = NetOptions(lp).with_bf16_gradients(false);
  Model<Chain, B> a({16, 8, 8}, DataFormat::NHWC, lp, 5, /*input_gradient=*/true);
  Model<Chain, B> b({16, 8, 8}, DataFormat::NHWC, fp, 5, /*input_gradient=*/true);
  copy_parameters(a, b);
  Rng rng(41);
  Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.normal());
  bf16_close_training_steps(a, b, x, rng);
  // The training executors' plans, and what their last step carried out.
  const TrainExecutor<B, float>* ea = a.train_executor(8);
  const TrainExecutor<B, float>* eb = b.train_executor(8);
  REQUIRE(ea);
  REQUIRE(eb);
  const plan::Plan& pa = ea->plan();
  INFO(plan::describe(pa));
  const std::size_t per_block = cpu_has_bf16_kernels() ? 1 : 0;  // in the last step
  CHECK_FALSE(pa.fires("bf16_branch_gradient", "block0/add"));
  if (backend::onednn::cpu_has_amx_convolutions()) {
    CHECK(pa.fires("bf16_branch_gradient", "block1/add") == (per_block > 0));
    CHECK(pa.fires("bf16_branch_gradient", "block2/add") == (per_block > 0));
    CHECK(ea->carried("bf16_branch_gradient") == 2 * per_block);
  }
  CHECK(eb->plan().fired("bf16_branch_gradient") == 0);
  CHECK(eb->carried("bf16_branch_gradient") == 0);
}

TEST_CASE("Residual blocks hand the residual path's gradient back as bf16 within bf16 accuracy of float",
          "[backend][onednn][bf16][residual]") {
  // From a block to the block before it (that block's output is this
  // block's input): this block's sum writes its input gradient as bf16 bits
  // into the earlier block's body's last batch norm's dy buffer, and the
  // earlier block's sum reads them as its shortcut's gradient (Identity),
  // where the earlier block's shortcut is an identity. A downsampling block
  // (average pool and channel pad) takes its gradient as float, and writes
  // the sum of two float gradients as bits for the block before it; the
  // first block (input not a block's output) sums with no mask. Against the
  // same chains with NetOptions::bf16_gradients(false): the same forward,
  // gradients a bf16 rounding apart.
  const NetOptions lp = NetOptions().with_conv_precision(ConvPrecision::BF16);
  const NetOptions fp = NetOptions(lp).with_bf16_gradients(false);
  const std::size_t per_pair = cpu_has_bf16_kernels() ? 1 : 0;  // in the last step
  const bool amx = backend::onednn::cpu_has_amx_convolutions();
  // The training executors' plans (a's described), and what their last step carried out.
  auto executors = [](auto& a, auto& b) {
    const TrainExecutor<B, float>* ea = a.train_executor(8);
    const TrainExecutor<B, float>* eb = b.train_executor(8);
    REQUIRE(ea);
    REQUIRE(eb);
    CHECK(eb->plan().fired("bf16_residual_gradient") == 0);
    CHECK(eb->carried("bf16_residual_gradient") == 0);
    return ea;
  };
  SECTION("three identity blocks") {
    using Block = resnet::BlockV1<16, 16, 1>;
    using Chain = Sequential<Block, Block, Block>;
    Model<Chain, B> a({16, 8, 8}, DataFormat::NHWC, lp, 5, /*input_gradient=*/true);
    Model<Chain, B> b({16, 8, 8}, DataFormat::NHWC, fp, 5, /*input_gradient=*/true);
    copy_parameters(a, b);
    Rng rng(43);
    Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, DataFormat::NHWC);
    for (auto& v : x) v = float(rng.normal());
    const std::array<double, 2> apart = bf16_close_training_steps(a, b, x, rng);
    const TrainExecutor<B, float>* ea = executors(a, b);
    const plan::Plan& pa = ea->plan();
    INFO(plan::describe(pa));
    if (amx) {
      // block 1's sum writes block 0's output gradient as bits, block 2's block 1's
      CHECK(pa.fires("bf16_residual_gradient", "block0/add") == (per_pair > 0));
      CHECK(pa.fires("bf16_residual_gradient", "block1/add") == (per_pair > 0));
      CHECK(ea->carried("bf16_residual_gradient") == 2 * per_pair);
      if (per_pair > 0) CHECK(apart[1] > 0);
    }
    CHECK_FALSE(fires_into(pa, "bf16_residual_gradient", "block0/add"));  // the model's input gradient: float
    CHECK_FALSE(pa.fires("bf16_residual_gradient", "block2/add"));  // the last block's comes from the model
  }
  SECTION("a downsampling block between two identity blocks") {
    using Chain =
        Sequential<resnet::BlockV1<16, 16, 1>, resnet::BlockV1<16, 32, 2>, resnet::BlockV1<32, 32, 1>>;
    Model<Chain, B> a({16, 8, 8}, DataFormat::NHWC, lp, 5, /*input_gradient=*/true);
    Model<Chain, B> b({16, 8, 8}, DataFormat::NHWC, fp, 5, /*input_gradient=*/true);
    copy_parameters(a, b);
    Rng rng(47);
    Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, DataFormat::NHWC);
    for (auto& v : x) v = float(rng.normal());
    bf16_close_training_steps(a, b, x, rng);
    const TrainExecutor<B, float>* ea = executors(a, b);
    const plan::Plan& pa = ea->plan();
    INFO(plan::describe(pa));
    if (amx) {  // the downsampling block's sum writes block 0's output gradient as bits
      CHECK(pa.fires("bf16_residual_gradient", "block0/add") == (per_pair > 0));
      CHECK(ea->carried("bf16_residual_gradient") == per_pair);
    }
    // the downsampling block (pool and pad) takes its gradient as float: block 2 writes no bits
    CHECK_FALSE(pa.fires("bf16_residual_gradient", "block1/add"));
    CHECK_FALSE(fires_into(pa, "bf16_residual_gradient", "block2/add"));
    CHECK_FALSE(fires_into(pa, "bf16_residual_gradient", "block0/add"));  // the model's input gradient: float
  }
}

TEST_CASE("The residual stream kept in bf16 between blocks is as close to fp32 as the float stream",
          "[backend][onednn][bf16][residual]") {
  // Between two blocks whose later one has an identity shortcut, the
  // earlier block writes its output only as bf16 and mask bits, and the
  // later one sums its shortcut from those bf16 values (NHWC, bf16
  // convolutions; the training executor's bf16_residual_stream). Model a
  // does that, b keeps the stream float (NetOptions::bf16_residuals(false)),
  // f runs fp32 convolutions on the layer tree. At this
  // toy size (batch 8 of 8x8) bf16 convolutions alone put the gradients
  // about 10 % from f's (batch norm over 512 values, ReLU masks flipping),
  // so a is checked against b's distance to f: outputs, parameter and input
  // gradients, and inference afterwards (which reads float outputs again),
  // no more than 1.25 times as far; and a and b apart (the shortcut was
  // rounded). A downsampling block reads its input as bf16 too (its
  // average pool and its strided convolution), and writes its own output as
  // bf16 for an identity block after it.
  const NetOptions on = NetOptions().with_conv_precision(ConvPrecision::BF16);
  const NetOptions off = NetOptions(on).with_bf16_residuals(false);
  const std::size_t steps = cpu_has_bf16_kernels() ? 2 : 0;
  const bool bf16 = steps > 0;
  // The training executors' plans (a's described), and what their last step carried out.
  auto executors = [](auto& a, auto& b) {
    const TrainExecutor<B, float>* ea = a.train_executor(8);
    const TrainExecutor<B, float>* eb = b.train_executor(8);
    REQUIRE(ea);
    REQUIRE(eb);
    CHECK(eb->plan().fired("bf16_residual_stream") == 0);
    CHECK(eb->carried("bf16_residual_stream") == 0);
    return ea;
  };
  auto vec = [](const Tensor<float>& t) { return std::vector<float>(t.begin(), t.end()); };
  auto grads = [](auto& m) {
    const auto p = m.parameters().grads();
    return std::vector<float>(p.data(), p.data() + p.size());
  };
  auto no_farther = [](double a_f, double b_f) {
    INFO("bf16 stream " << a_f << ", float stream " << b_f << " from fp32");
    CHECK(a_f <= 1.25 * b_f + 1e-6);
  };
  auto run = [&](auto& a, auto& b, auto& f, std::uint64_t seed) {
    copy_parameters(a, b);
    copy_parameters(a, f);
    Rng rng(seed);
    Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, DataFormat::NHWC);
    for (auto& v : x) v = float(rng.normal());
    double apart = 0;
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const Tensor<float> ya = a.forward(x, Mode::Train), yb = b.forward(x, Mode::Train),
                          yf = f.forward(x, Mode::Train);
      apart = std::max(apart, rel_diff(vec(ya), vec(yb)));
      CHECK(rel_diff(vec(ya), vec(yb)) < kBf16Tolerance);
      no_farther(rel_diff(vec(ya), vec(yf)), rel_diff(vec(yb), vec(yf)));
      Tensor<float> dy = ya;
      for (auto& v : dy) v = float(rng.uniform(-1, 1));
      const Tensor<float> dxa = a.backward(dy), dxb = b.backward(dy), dxf = f.backward(dy);
      no_farther(rel_diff(grads(a), grads(f)), rel_diff(grads(b), grads(f)));
      no_farther(rel_diff(vec(dxa), vec(dxf)), rel_diff(vec(dxb), vec(dxf)));
    }
    const Tensor<float> ia = a.forward(x, Mode::Infer), ib = b.forward(x, Mode::Infer),
                        inf = f.forward(x, Mode::Infer);
    no_farther(rel_diff(vec(ia), vec(inf)), rel_diff(vec(ib), vec(inf)));
    return apart;
  };
  SECTION("three identity blocks") {
    using Block = resnet::BlockV1<16, 16, 1>;
    using Chain = Sequential<Block, Block, Block>;
    Model<Chain, B> a({16, 8, 8}, DataFormat::NHWC, on, 5, /*input_gradient=*/true);
    Model<Chain, B> b({16, 8, 8}, DataFormat::NHWC, off, 5, /*input_gradient=*/true);
    Model<Chain, B> f({16, 8, 8}, DataFormat::NHWC, NetOptions().with_plan_training(false), 5,
                      /*input_gradient=*/true);
    const double apart = run(a, b, f, 51);
    if (steps > 0) CHECK(apart > 0);
    const TrainExecutor<B, float>* ea = executors(a, b);
    const plan::Plan& pa = ea->plan();
    INFO(plan::describe(pa));
    // Blocks 0 and 1 write their output only as bf16 (and mask bits),
    // blocks 1 and 2 sum their shortcut from it; block 2 writes the model's
    // output, block 0 reads the model's input.
    CHECK(pa.fires("bf16_residual_stream", "block0/add") == bf16);
    CHECK(pa.fires("bf16_residual_stream", "block1/add") == bf16);
    CHECK_FALSE(pa.fires("bf16_residual_stream", "block2/add"));
    CHECK_FALSE(fires_into(pa, "bf16_residual_stream", "block0/add"));
    CHECK(fires_into(pa, "bf16_residual_stream", "block1/add") == bf16);
    CHECK(fires_into(pa, "bf16_residual_stream", "block2/add") == bf16);
    CHECK(ea->carried("bf16_residual_stream") == (bf16 ? 2 : 0));
  }
  SECTION("a downsampling block and a Repeat") {
    using Chain = Sequential<resnet::BlockV1<16, 16, 1>, resnet::BlockV1<16, 32, 2>,
                             RepeatN<resnet::BlockV1<32, 32, 1>, 2>>;
    Model<Chain, B> a({16, 8, 8}, DataFormat::NHWC, on, 5, /*input_gradient=*/true);
    Model<Chain, B> b({16, 8, 8}, DataFormat::NHWC, off, 5, /*input_gradient=*/true);
    Model<Chain, B> f({16, 8, 8}, DataFormat::NHWC, NetOptions().with_plan_training(false), 5,
                      /*input_gradient=*/true);
    run(a, b, f, 53);
    auto& ca = a.root().children();
    const TrainExecutor<B, float>* ea = executors(a, b);
    const plan::Plan& pa = ea->plan();
    INFO(plan::describe(pa));
    // The downsampling block's pool (and first convolution) read the first
    // block's output as bf16; its own sum adds the pool's float output. Its
    // strided convolution reads x only as bf16 where its weight gradient is
    // bf16 too, which a strided convolution has with AMX or the own
    // AVX512-BF16 weight gradient only (Conv2d's State::bf16_dw): elsewhere
    // the first block writes its float output.
    const bool ds =
        bf16 && (backend::onednn::cpu_has_amx_convolutions() || backend::onednn::cpu_has_own_bf16_weights());
    CHECK(pa.fires("bf16_residual_stream", "block0/add") == ds);
    CHECK(std::get<0>(std::get<1>(ca).shortcut().children()).bf16_inputs() == (ds ? steps : 0));  // the pool
    if (ds) CHECK(std::get<0>(std::get<1>(ca).body().children()).conv().bf16_inputs() == steps);
    // The downsampling block's output only as bf16, the Repeat's first
    // block summing its shortcut from it; that block's output the same for
    // the second; the second's is the model's output.
    CHECK(pa.fires("bf16_residual_stream", "block1/add") == bf16);
    CHECK(fires_into(pa, "bf16_residual_stream", "block2/add") == bf16);
    CHECK(pa.fires("bf16_residual_stream", "block2/add") == bf16);
    CHECK(fires_into(pa, "bf16_residual_stream", "block3/add") == bf16);
    CHECK_FALSE(pa.fires("bf16_residual_stream", "block3/add"));
    CHECK(ea->carried("bf16_residual_stream") == std::size_t(ds ? 1 : 0) + (bf16 ? 2 : 0));
  }
}

// A batch norm (or a residual block's sum) writes a bf16 copy of its output
// in the pass that writes it, which the training executor hands to the
// bf16 convolutions that read that output next (bf16_copy_to_readers):
// they use the copy instead of rounding it with a reorder, the same bits
// (host::store_bf16 and the reorder round alike on this CPU; see that test
// above). Two ResNet v1 blocks in a row against the same blocks with an
// Identity between them run by the layer tree (every layer on its own),
// which hands over no copy: every convolution there rounds x itself.
TEST_CASE("A convolution reading the bf16 copy its producer wrote gives the bits of rounding x itself",
          "[backend][onednn][bf16][copy]") {
  using Block = resnet::BlockV1<16, 16, 1>;
  // (float gradients: the chained blocks' sum would read the second body's
  // input gradient as bf16, the broken chain's does not; a float residual
  // stream: the chained second block would sum the first block's output
  // from its bf16 copy; tests above; a body's first batch norm's output not
  // written at all, bn_output_into_next_conv on AMX CPUs, sums differently:
  // tests/nn/test_rules.cpp)
  const NetOptions bf16 = NetOptions()
                              .with_conv_precision(ConvPrecision::BF16)
                              .with_bf16_gradients(false)
                              .with_bf16_residuals(false)
                              .with_rules_off({"bn_output_into_next_conv"});
  for (DataFormat fmt : kFormats) {
    INFO(to_string(fmt));
    Model<Sequential<Block, Block>, B> chained({16, 8, 8}, fmt, bf16, 5);
    Model<Sequential<Block, Identity, Block>, B> broken({16, 8, 8}, fmt,
                                                        NetOptions(bf16).with_plan_training(false), 5);
    copy_parameters(chained, broken, /*same_names=*/false);  // the Identity shifts the block numbers
    Rng rng(31);
    Tensor<float> x = make_tensor<float>({8, 16, 8, 8}, fmt);
    for (auto& v : x) v = float(rng.normal());
    same_training_steps(chained, broken, x, rng);
    // Which convolutions read a copy, per step: in the chained model each
    // block's second (its batch norm's copy) and the second block's first
    // one (the first block's sum wrote it); none in the broken one.
    const std::size_t steps = cpu_has_bf16_kernels() ? 2 : 0;
    auto conv_inputs = [](auto& block, auto k) {
      return std::get<decltype(k)::value>(block.body().children()).conv().bf16_inputs();
    };
    using First = std::integral_constant<std::size_t, 0>;
    using Second = std::integral_constant<std::size_t, 1>;
    auto& c = chained.root().children();
    auto& b = broken.root().children();
    CHECK(conv_inputs(std::get<0>(c), First{}) == 0);  // the model's input: no producer
    CHECK(conv_inputs(std::get<0>(c), Second{}) == steps);
    CHECK(conv_inputs(std::get<1>(c), First{}) == steps);
    CHECK(conv_inputs(std::get<1>(c), Second{}) == steps);
    CHECK(conv_inputs(std::get<0>(b), Second{}) == 0);
    CHECK(conv_inputs(std::get<2>(b), First{}) == 0);
    CHECK(conv_inputs(std::get<2>(b), Second{}) == 0);
    // The executor's hand-overs of the last step: those three copies.
    const TrainExecutor<B, float>* e = chained.train_executor(8);
    REQUIRE(e);
    INFO(plan::describe(e->plan()));
    CHECK(e->plan().fired("bf16_copy_to_readers") == (steps > 0 ? 3 : 0));
    CHECK(e->carried("bf16_copy_to_readers") == (steps > 0 ? 3 : 0));
    CHECK(broken.train_executor(8) == nullptr);
  }
}
