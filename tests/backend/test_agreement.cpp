// Backend agreement: every op and every pass of each backend under test,
// on fresh random data, against the reference backend run in double on the
// same (float-rounded) inputs: ||out - ref|| / ||ref|| < 1e-5. Outputs start
// as NaN so a pass that leaves anything unwritten fails. Each pass is written
// once and run on both sides through OpPair::both.
#include <catch2/catch.hpp>

#include <cstdint>
#include <type_traits>

#include <cifarnet/backend/reference.hpp>

#include "agreement.hpp"

// The backend checked by this executable: oneDNN (test_backend), or CUDA
// (test_backend_cuda, built with -DCIFARNET_TEST_CUDA when CMake finds the
// CUDA toolkit and cuDNN; every case is skipped when no GPU is present).
#ifdef CIFARNET_TEST_CUDA
#include <cifarnet/backend/cuda.hpp>
#define CIFARNET_BACKENDS_UNDER_TEST cifarnet::backend::Cuda
#else
#include <cifarnet/backend/onednn.hpp>
#define CIFARNET_BACKENDS_UNDER_TEST cifarnet::backend::OneDnn
#endif

using namespace cifarnet;
using namespace cifarnet::test;

namespace {
// Whether backend B can run here; says why not (ctest reports the case as
// skipped on "SKIPPED:", tests/backend/CMakeLists.txt).
template <class B>
bool runnable() {
  return true;
}
#ifdef CIFARNET_TEST_CUDA
template <>
bool runnable<backend::Cuda>() {
  if (backend::cuda::device_count() > 0) return true;
  WARN("SKIPPED: the CUDA backend needs a GPU (" << backend::cuda::no_device_reason() << ")");
  return false;
}
#endif

// Batch-norm input: channel ch is off[ch] + scale[ch]·U(-1, 1).
std::vector<float> channel_input(Rng& rng, const ChannelGeom& g, const std::vector<float>& off,
                                 const std::vector<float>& scale) {
  std::vector<float> xv(g.size());
  const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
  for (std::size_t n = 0; n < g.n; ++n)
    for (std::size_t ch = 0; ch < g.c; ++ch)
      for (std::size_t yy = 0; yy < g.h; ++yy)
        for (std::size_t xx = 0; xx < g.w; ++xx)
          xv[L(n, ch, yy, xx)] = off[ch] + scale[ch] * float(rng.uniform(-1.0, 1.0));
  return xv;
}
}  // namespace

#define SKIP_UNLESS_RUNNABLE() \
  if (!runnable<TestType>()) return

#define EXPECT_AGREES(out)           \
  do {                               \
    INFO(#out " vs the reference");  \
    CHECK((out).err() < kTolerance); \
  } while (0)

namespace {
// BatchNorm's backward on both sides with the batch statistics the backend's
// forward returned (rounded to float for both), against the reference.
template <class Pair>
void expect_bn_backward_agrees(Pair& t, const ChannelGeom& g, double eps, const Both& x, const Both& dy,
                               const Both& gamma, const Both& mean, const Both& var) {
  const std::size_t nx = g.size(), c = g.c;
  const Both batch_mean = Both::input({mean.d.begin(), mean.d.end()}),
             batch_var = Both::input({var.d.begin(), var.d.end()});
  Both dx = Both::output(nx), dgamma = Both::output(c), dbeta = Both::output(c);
  t.both([&](auto& dev, auto& op, auto side) {
    op.backward(dev, g, eps, side(x), side(dy), side(gamma), side(batch_mean), side(batch_var), side(dx),
                side(dgamma), side(dbeta));
  });
  EXPECT_AGREES(dx);
  EXPECT_AGREES(dgamma);
  EXPECT_AGREES(dbeta);
}
}  // namespace

TEMPLATE_TEST_CASE("Conv2d forward and both backward passes agree with the reference in double",
                   "[backend][agreement][conv]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Conv2d, TestType> t;
  Rng rng = Rng::stream(2024, 1);
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
      EXPECT_AGREES(y);
      EXPECT_AGREES(dx);
      EXPECT_AGREES(dw);
      if (bias) EXPECT_AGREES(db);
    }
}

TEMPLATE_TEST_CASE("Pool2d max and average, forward in both modes and backward, agree with the reference",
                   "[backend][agreement][pool]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Pool2d, TestType> t;
  Rng rng = Rng::stream(2024, 2);
  for (const ConvGeom& g : pool_cases())
    for (PoolKind kind : {PoolKind::Max, PoolKind::Avg}) {
      INFO(str(g) << (kind == PoolKind::Max ? " max" : " avg"));
      const std::size_t nx = g.in_shape().size(), ny = g.n * g.ic * g.oh * g.ow;
      // Distinct inputs: no ties, so the max's gradient has one place to go.
      const Both x = Both::input(kind == PoolKind::Max ? distinct_vec(rng, nx) : random_vec(rng, nx)),
                 dy = Both::input(random_cotangent(rng, ny));
      Both y_infer = Both::output(ny), y = Both::output(ny), dx = Both::output(nx);
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward(dev, g, kind, false, side(x), side(y_infer));
        op.forward(dev, g, kind, true, side(x), side(y));
        op.backward(dev, g, kind, side(x), side(y), side(dy), side(dx));
      });
      EXPECT_AGREES(y_infer);
      EXPECT_AGREES(y);
      EXPECT_AGREES(dx);
    }
}

TEMPLATE_TEST_CASE("Lrn forward in both modes and backward agree with the reference (TF's alpha)",
                   "[backend][agreement][lrn]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Lrn, TestType> t;
  Rng rng = Rng::stream(2024, 3);
  // {depth_radius, bias, alpha, beta}: the TF CIFAR-10 tutorial's values, and
  // stronger ones where the normalization changes the output a lot.
  const LrnParams params[] = {
      {4, 1.0, 0.001 / 9.0, 0.75}, {2, 1.0, 0.1, 0.75}, {1, 2.0, 0.5, 0.5}, {0, 1.0, 1.0, 1.0}};
  std::size_t i = 0;
  for (const ChannelGeom& g : channel_cases())
    for (std::size_t j = 0; j < 2; ++j, ++i) {
      const LrnParams& p = params[i % 4];
      INFO(str(g) << " depth_radius=" << p.depth_radius << " bias=" << p.bias << " alpha=" << p.alpha
                  << " beta=" << p.beta);
      const Both x = Both::input(random_vec(rng, g.size(), -2.0, 2.0)),
                 dy = Both::input(random_cotangent(rng, g.size()));
      Both y_infer = Both::output(g.size()), y = Both::output(g.size()), dx = Both::output(g.size());
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward(dev, g, p, false, side(x), side(y_infer));
        op.forward(dev, g, p, true, side(x), side(y));
        op.backward(dev, g, p, side(x), side(y), side(dy), side(dx));
      });
      EXPECT_AGREES(y_infer);
      EXPECT_AGREES(y);
      EXPECT_AGREES(dx);
    }
}

TEMPLATE_TEST_CASE(
    "BatchNorm training forward (with biased variance), inference and backward agree with the "
    "reference",
    "[backend][agreement][batchnorm]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::BatchNorm, TestType> t;
  Rng rng = Rng::stream(2024, 4);
  for (const ChannelGeom& g : channel_cases())
    for (double eps : {1e-3, 1e-5}) {
      INFO(str(g) << " eps=" << eps);
      const std::size_t nx = g.size(), c = g.c;
      // Per-channel offsets (of either sign but away from zero, so that even a
      // single channel's mean is not a cancelling sum) and scales.
      auto off = random_vec(rng, c, 0.5, 2.0);
      for (auto& o : off) o = rng.bernoulli() ? o : -o;
      const auto scale = random_vec(rng, c, 0.5, 3.0);
      std::vector<float> xv = channel_input(rng, g, off, scale);
      const Both x = Both::input(std::move(xv)), gamma = Both::input(random_vec(rng, c, 0.5, 1.5)),
                 beta = Both::input(random_vec(rng, c, -0.5, 0.5)),
                 dy = Both::input(random_cotangent(rng, nx)), moving_mean = Both::input(random_vec(rng, c)),
                 moving_var = Both::input(random_vec(rng, c, 0.2, 2.0));
      Both y = Both::output(nx), mean = Both::output(c), var = Both::output(c), y_infer = Both::output(nx);
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward_train(dev, g, eps, side(x), side(gamma), side(beta), side(y), side(mean), side(var));
        op.forward_infer(dev, g, eps, side(x), side(gamma), side(beta), side(moving_mean), side(moving_var),
                         side(y_infer));
      });
      EXPECT_AGREES(y);
      EXPECT_AGREES(mean);
      EXPECT_AGREES(var);
      EXPECT_AGREES(y_infer);

      // Backward with the batch statistics, rounded to float for both sides.
      expect_bn_backward_agrees(t, g, eps, x, dy, gamma, mean, var);
    }
}

TEMPLATE_TEST_CASE(
    "BatchNorm at training sizes (m = n·h·w up to 131072 per channel), both formats, agrees "
    "with the reference",
    "[backend][agreement][batchnorm]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::BatchNorm, TestType> t;
  Rng rng = Rng::stream(2024, 12);
  // ResNet-20's first stage at batch 128, its last stage, and a dense-like
  // (n, c, 1, 1) batch. Each channel sits at an offset far from zero with a
  // small spread, so a variance taken as E[x²] - E[x]² in float would fail.
  const ChannelGeom cases[] = {{DataFormat::NHWC, 128, 16, 32, 32}, {DataFormat::NCHW, 128, 16, 32, 32},
                               {DataFormat::NHWC, 128, 64, 8, 8},   {DataFormat::NCHW, 128, 64, 8, 8},
                               {DataFormat::NHWC, 128, 10, 1, 1},   {DataFormat::NCHW, 128, 10, 1, 1}};
  for (const ChannelGeom& g : cases) {
    INFO(str(g));
    const std::size_t nx = g.size(), c = g.c;
    const auto off = random_vec(rng, c, 4.0, 8.0), scale = random_vec(rng, c, 0.05, 0.5);
    std::vector<float> xv = channel_input(rng, g, off, scale);
    const Both x = Both::input(std::move(xv)), gamma = Both::input(random_vec(rng, c, 0.5, 1.5)),
               beta = Both::input(random_vec(rng, c, -0.5, 0.5)), dy = Both::input(random_cotangent(rng, nx));
    Both y = Both::output(nx), mean = Both::output(c), var = Both::output(c);
    t.both([&](auto& dev, auto& op, auto side) {
      op.forward_train(dev, g, 1e-3, side(x), side(gamma), side(beta), side(y), side(mean), side(var));
    });
    EXPECT_AGREES(y);
    EXPECT_AGREES(mean);
    EXPECT_AGREES(var);
    expect_bn_backward_agrees(t, g, 1e-3, x, dy, gamma, mean, var);
  }
}

TEMPLATE_TEST_CASE("Relu forward and backward agree with the reference, in place too",
                   "[backend][agreement][relu]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Relu, TestType> t;
  Rng rng = Rng::stream(2024, 5);
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(4099)}) {
    INFO("n=" << n);
    const Both x = Both::input(random_vec(rng, n)), dy = Both::input(random_cotangent(rng, n));
    Both y = Both::output(n), dx = Both::output(n), y_in_place = x, dx_in_place = dy;
    t.both([&](auto& dev, auto& op, auto side) {
      op.forward(dev, n, side(x), side(y));
      op.forward(dev, n, side(y_in_place), side(y_in_place));
      op.backward(dev, n, side(y), side(dy), side(dx));
      op.backward(dev, n, side(y), side(dx_in_place), side(dx_in_place));
    });
    EXPECT_AGREES(y);
    EXPECT_AGREES(y_in_place);
    EXPECT_AGREES(dx);
    EXPECT_AGREES(dx_in_place);
  }
}

TEMPLATE_TEST_CASE("Dense forward and both backward passes agree with the reference",
                   "[backend][agreement][dense]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Dense, TestType> t;
  Rng rng = Rng::stream(2024, 6);
  const std::size_t sizes[][2] = {{1, 9}, {7, 3}, {64, 10}, {16, 33}};
  for (std::size_t n : kBatches)
    for (const auto& io : sizes)
      for (bool bias : {true, false}) {
        const std::size_t in = io[0], out = io[1];
        INFO("n=" << n << " in=" << in << " out=" << out << (bias ? " with bias" : " without bias"));
        const Both x = Both::input(random_vec(rng, n * in)), w = Both::input(random_vec(rng, in * out)),
                   b = Both::input(random_vec(rng, out)), dy = Both::input(random_cotangent(rng, n * out));
        Both y = Both::output(n * out), dx = Both::output(n * in), dw = Both::output(in * out),
             db = Both::output(out);
        t.both([&](auto& dev, auto& op, auto side) {
          op.forward(dev, n, in, out, side(x), side(w), bias ? side(b) : nullptr, side(y));
          op.backward_data(dev, n, in, out, side(dy), side(w), side(dx));
          op.backward_weights(dev, n, in, out, side(x), side(dy), side(dw), bias ? side(db) : nullptr);
        });
        EXPECT_AGREES(y);
        EXPECT_AGREES(dx);
        EXPECT_AGREES(dw);
        if (bias) EXPECT_AGREES(db);
      }
}

TEMPLATE_TEST_CASE("Eltwise add (with and without ReLU, in place) and affine agree with the reference",
                   "[backend][agreement][eltwise]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Eltwise, TestType> t;
  Rng rng = Rng::stream(2024, 7);
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(4099)}) {
    INFO("n=" << n);
    const Both a = Both::input(random_vec(rng, n)), b = Both::input(random_vec(rng, n));
    Both sum = Both::output(n), sum_relu = Both::output(n), in_place = a, in_place_b = b,
         affine = Both::output(n), affine_in_place = b;
    t.both([&](auto& dev, auto& op, auto side) {
      using S = std::remove_pointer_t<decltype(side(sum))>;
      op.add(dev, n, side(a), side(b), side(sum), false);
      op.add(dev, n, side(a), side(b), side(sum_relu), true);
      op.add(dev, n, side(in_place), side(b), side(in_place), true);
      op.add(dev, n, side(a), side(in_place_b), side(in_place_b), false);
      op.affine(dev, n, side(a), S(1.0 / 128), S(-1), side(affine));
      op.affine(dev, n, side(affine_in_place), S(0.75), S(0), side(affine_in_place));
    });
    EXPECT_AGREES(sum);
    EXPECT_AGREES(sum_relu);
    EXPECT_AGREES(in_place);
    EXPECT_AGREES(in_place_b);
    EXPECT_AGREES(affine);
    EXPECT_AGREES(affine_in_place);
    std::size_t zeros = 0;
    for (float v : sum_relu.f) zeros += v == 0.0f;
    CHECK(zeros > 0);  // the ReLU did cut something
  }
}

TEMPLATE_TEST_CASE("Eltwise add_masked (a sum through a ReLU's mask, in place) agrees with the reference",
                   "[backend][agreement][eltwise]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Eltwise, TestType> t;
  Rng rng = Rng::stream(2024, 17);
  // One element, a SIMD tail, and more than two of the oneDNN loop's chunks.
  for (std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(40003)}) {
    INFO("n=" << n);
    std::vector<float> mv = random_vec(rng, n);  // a ReLU's output: zeros where it cut
    for (float& v : mv) v = v < 0.1f ? 0.0f : v;
    const Both a = Both::input(random_vec(rng, n)), b = Both::input(random_vec(rng, n)), m = Both::input(mv);
    Both out = Both::output(n), in_place_a = a, in_place_b = b;
    t.both([&](auto& dev, auto& op, auto side) {
      op.add_masked(dev, n, side(a), side(b), side(m), side(out));
      op.add_masked(dev, n, side(in_place_a), side(b), side(m), side(in_place_a));
      op.add_masked(dev, n, side(a), side(in_place_b), side(m), side(in_place_b));
    });
    EXPECT_AGREES(out);
    EXPECT_AGREES(in_place_a);
    EXPECT_AGREES(in_place_b);
    std::size_t cut = 0, kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (mv[i] > 0) {
        kept += out.f[i] == float(a.f[i] + b.f[i]);  // the float sum, bit for bit
      } else {
        CHECK(out.f[i] == 0.0f);
        ++cut;
      }
    }
    CHECK(kept + cut == n);
    if (n > 1) CHECK(cut > 0);
  }
}

TEMPLATE_TEST_CASE("ChannelPad and GlobalAvgPool, forward and backward, agree with the reference",
                   "[backend][agreement][channel_pad][global_pool]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::ChannelPad, TestType> pad;
  OpPair<ops::GlobalAvgPool, TestType> pool;
  Rng rng = Rng::stream(2024, 8);
  const std::size_t pads[][2] = {{0, 3}, {2, 2}, {4, 0}, {1, 5}};
  std::size_t i = 0;
  for (const ChannelGeom& g : channel_cases()) {
    const std::size_t before = pads[i % 4][0], after = pads[i % 4][1], oc = before + g.c + after;
    ++i;
    INFO(str(g) << " pad " << before << "+" << after);
    const std::size_t padded = g.n * oc * g.h * g.w;
    const Both x = Both::input(random_vec(rng, g.size())), dpad = Both::input(random_cotangent(rng, padded)),
               dmean = Both::input(random_cotangent(rng, g.n * g.c));
    Both y = Both::output(padded), dx = Both::output(g.size()), mean = Both::output(g.n * g.c),
         dx_pool = Both::output(g.size());
    pad.both([&](auto& dev, auto& op, auto side) {
      op.forward(dev, g, before, after, side(x), side(y));
      op.backward(dev, g, before, after, side(dpad), side(dx));
    });
    pool.both([&](auto& dev, auto& op, auto side) {
      op.forward(dev, g, side(x), side(mean));
      op.backward(dev, g, side(dmean), side(dx_pool));
    });
    EXPECT_AGREES(y);
    EXPECT_AGREES(dx);
    EXPECT_AGREES(mean);
    EXPECT_AGREES(dx_pool);
  }
}

TEMPLATE_TEST_CASE("SoftmaxCrossEntropy's loss, gradient and predictions agree with the reference",
                   "[backend][agreement][loss]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::SoftmaxCrossEntropy, TestType> t;
  Rng rng = Rng::stream(2024, 9);
  const std::size_t sizes[][2] = {{1, 10}, {7, 3}, {128, 10}, {5, 1000}};
  for (const auto& nk : sizes) {
    const std::size_t n = nk[0], k = nk[1];
    INFO("n=" << n << " k=" << k);
    std::vector<std::int32_t> labels(n);
    for (auto& l : labels) l = std::int32_t(rng.uniform_int(k));
    auto zv = random_vec(rng, n * k, -8.0, 8.0);
    zv[0] = 60.0f;  // large logits stay finite (the log-sum-exp shift)
    const Both z = Both::input(std::move(zv));
    Both dz = Both::output(n * k), p = Both::output(n * k);
    double loss[2] = {0, 0};
    std::vector<std::int32_t> top[2] = {std::vector<std::int32_t>(n), std::vector<std::int32_t>(n)};
    std::vector<std::uint8_t> hits[2] = {std::vector<std::uint8_t>(n), std::vector<std::uint8_t>(n)};
    int s = 0;
    t.both([&](auto& dev, auto& op, auto side) {
      loss[s] = op.loss(dev, n, k, side(z), labels.data(), side(dz));
      op.softmax(dev, n, k, side(z), side(p));
      op.argmax(dev, n, k, side(z), top[s].data());
      op.in_top1(dev, n, k, side(z), labels.data(), hits[s].data());
      ++s;
    });
    CHECK(std::abs(loss[0] - loss[1]) <= kTolerance * std::abs(loss[1]));
    EXPECT_AGREES(dz);
    EXPECT_AGREES(p);
    CHECK(top[0] == top[1]);
    CHECK(hits[0] == hits[1]);
  }
  SECTION("a label outside [0, k) is a DataError naming the example") {
    const Both z = Both::input(random_vec(rng, 20));
    const std::vector<std::int32_t> bad{1, 10};
    CHECK_THROWS_WITH(t.op.loss(t.dev, 2, 10, z.f.data(), bad.data(), nullptr),
                      Catch::Contains("label 10 of example 1 is outside [0, 10)"));
  }
}

namespace {
/// A CrossReplicaSum over one replica: the sums are the values.
struct OneReplica : CrossReplicaSum {
  void sum(double*, std::size_t) override {}
};
}  // namespace

TEMPLATE_TEST_CASE("BnStats (moving statistics, conv+BN fold) and SyncBatchNorm agree with the reference",
                   "[backend][agreement][batchnorm]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::BnStats, TestType> stats;
  OpPair<ops::SyncBatchNorm, TestType> sync;
  Rng rng = Rng::stream(2024, 10);
  OneReplica one;
  for (const ChannelGeom& g : channel_cases()) {
    INFO(str(g));
    const std::size_t c = g.c, rows = 3 * 3 * 4;
    const Both mean = Both::input(random_vec(rng, c)), var = Both::input(random_vec(rng, c, 0.1, 2.0)),
               gamma = Both::input(random_vec(rng, c, 0.5, 1.5)), beta = Both::input(random_vec(rng, c)),
               w = Both::input(random_vec(rng, rows * c)),
               x = Both::input(random_vec(rng, g.size(), -2.0, 3.0)),
               dy = Both::input(random_cotangent(rng, g.size()));
    Both mm = Both::input(random_vec(rng, c)), mv = Both::input(random_vec(rng, c, 0.5, 1.5)),
         fw = Both::output(rows * c), fb = Both::output(c);
    stats.both([&](auto& dev, auto& op, auto side) {
      op.update_moving(dev, c, 0.997, 1.25, side(mean), side(var), side(mm), side(mv));
      op.fold(dev, rows, c, 1e-5, side(w), side(gamma), side(beta), side(mean), side(var), side(fw),
              side(fb));
    });
    EXPECT_AGREES(mm);
    EXPECT_AGREES(mv);
    EXPECT_AGREES(fw);
    EXPECT_AGREES(fb);

    Both smean = Both::output(c), svar = Both::output(c), dx = Both::output(g.size()),
         dgamma = Both::output(c), dbeta = Both::output(c);
    double count[2] = {0, 0};
    int s = 0;
    sync.both([&](auto& dev, auto& op, auto side) {
      count[s++] = op.statistics(dev, g, side(x), one, side(smean), side(svar));
    });
    CHECK(count[0] == double(g.n * g.h * g.w));
    CHECK(count[1] == count[0]);
    EXPECT_AGREES(smean);
    EXPECT_AGREES(svar);
    const Both batch_mean = Both::input({smean.d.begin(), smean.d.end()}),
               batch_var = Both::input({svar.d.begin(), svar.d.end()});
    sync.both([&](auto& dev, auto& op, auto side) {
      op.backward(dev, g, 1e-3, side(x), side(dy), side(gamma), side(batch_mean), side(batch_var), one,
                  side(dx), side(dgamma), side(dbeta));
    });
    EXPECT_AGREES(dx);
    EXPECT_AGREES(dgamma);
    EXPECT_AGREES(dbeta);
  }
}

TEMPLATE_TEST_CASE("Gemm agrees with the reference in every transpose combination, with and without beta",
                   "[backend][agreement][gemm]", CIFARNET_BACKENDS_UNDER_TEST) {
  SKIP_UNLESS_RUNNABLE();
  OpPair<ops::Gemm, TestType> t;
  Rng rng = Rng::stream(2024, 11);
  const std::size_t sizes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 64, 256}, {16, 33, 9}};
  for (const auto& s : sizes)
    for (int trans = 0; trans < 4; ++trans)
      for (double beta : {0.0, 0.5}) {
        const std::size_t m = s[0], n = s[1], k = s[2];
        const bool ta = trans & 1, tb = trans & 2;
        INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb << " beta=" << beta);
        const Both a = Both::input(random_vec(rng, m * k)), b = Both::input(random_vec(rng, k * n));
        Both c = beta == 0.0 ? Both::output(m * n) : Both::input(random_vec(rng, m * n));
        t.both([&](auto& dev, auto& op, auto side) {
          using S = std::remove_pointer_t<decltype(side(c))>;
          op.run(dev, ta, tb, m, n, k, S(0.75), side(a), side(b), S(beta), side(c));
        });
        EXPECT_AGREES(c);
      }
}
