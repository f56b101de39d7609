// Backend agreement: every op and every pass of each backend under test,
// on fresh random data, against the reference backend run in double on the
// same (float-rounded) inputs: ||out - ref|| / ||ref|| < 1e-5. Outputs start
// as NaN so a pass that leaves anything unwritten fails. Each pass is written
// once and run on both sides through OpPair::both.
#include <catch2/catch.hpp>

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
}  // namespace

#define SKIP_UNLESS_RUNNABLE() \
  if (!runnable<TestType>()) return

#define EXPECT_AGREES(out)           \
  do {                               \
    INFO(#out " vs the reference");  \
    CHECK((out).err() < kTolerance); \
  } while (0)

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
      std::vector<float> xv(nx);
      {
        auto off = random_vec(rng, c, 0.5, 2.0);
        for (auto& o : off) o = rng.bernoulli() ? o : -o;
        const auto scale = random_vec(rng, c, 0.5, 3.0);
        const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
        for (std::size_t n = 0; n < g.n; ++n)
          for (std::size_t ch = 0; ch < c; ++ch)
            for (std::size_t yy = 0; yy < g.h; ++yy)
              for (std::size_t xx = 0; xx < g.w; ++xx)
                xv[L(n, ch, yy, xx)] = off[ch] + scale[ch] * float(rng.uniform(-1.0, 1.0));
      }
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
