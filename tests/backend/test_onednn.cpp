// oneDNN backend specifics: primitives are built once per geometry and
// reused (repeated calls build nothing, a second batch size adds one cache
// entry, the cache stays bounded), LRN's own loops against double at training
// sizes, max pooling's backward finds or rebuilds
// its workspace, the workarounds for oneDNN 2.6 bugs hold on the geometries
// that crash it, Winograd convolutions agree with the reference and fall
// back to direct, reordered weights are reused only while unchanged, and
// errors come out as cifarnet exceptions naming the op.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include <cifarnet/backend/host/bf16.hpp>
#include <cifarnet/backend/host/mask_bits.hpp>
#include <cifarnet/backend/host/stream_store.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/onednn/bn_kernels.hpp>
#include <cifarnet/backend/onednn/winograd.hpp>
#include <cifarnet/backend/reference/conv2d.hpp>
#include <cifarnet/backend/reference/lrn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

#include "agreement.hpp"
#include "instances/resnet.hpp"

using namespace cifarnet;
using namespace cifarnet::test;
using B = backend::OneDnn;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The reference backend's weight and bias gradients of g in double.
std::pair<std::vector<double>, std::vector<double>> reference_grads(const ConvGeom& g,
                                                                    const std::vector<float>& x,
                                                                    const std::vector<float>& dy) {
  Device<backend::Reference> rdev;
  ops::Conv2d<backend::Reference, double> ref;
  std::vector<double> dw(g.kh * g.kw * g.ic * g.oc), db(g.oc);
  ref.backward_weights(rdev, g, widen(x).data(), widen(dy).data(), dw.data(), db.data());
  return {dw, db};
}

}  // namespace

TEST_CASE("Conv2d builds its primitives once per geometry and keeps full and partial batches side by side",
          "[backend][onednn][cache]") {
  Device<B> dev;
  ops::Conv2d<B, float> op;
  Rng rng = Rng::stream(7, 1);
  const ConvGeom full = ConvGeom::make(DataFormat::NCHW, {8, 3, 9, 9}, 16, 3, 1, Padding::Same);
  ConvGeom part = full;
  part.n = 3;  // the last partial batch
  auto run_all = [&](const ConvGeom& g) {
    const auto x = random_vec(rng, g.in_shape().size()), w = random_vec(rng, 9 * g.ic * g.oc),
               b = random_vec(rng, g.oc), dy = random_cotangent(rng, g.out_shape().size());
    auto y = poisoned(g.out_shape().size()), dx = poisoned(x.size()), dw = poisoned(w.size()),
         db = poisoned(g.oc);
    op.forward(dev, g, x.data(), w.data(), b.data(), y.data());
    op.backward_data(dev, g, dy.data(), w.data(), dx.data());
    op.backward_weights(dev, g, x.data(), dy.data(), dw.data(), db.data());
  };
  REQUIRE(op.cached_geometries() == 0);
  REQUIRE(op.primitive_builds() == 0);
  run_all(full);
  const std::size_t per_geometry = op.primitive_builds();
  CHECK(per_geometry >= 3);  // forward, backward_data, backward_weights (+ weight reorders)
  CHECK(op.cached_geometries() == 1);

  run_all(full);
  CHECK(op.primitive_builds() == per_geometry);  // nothing rebuilt
  CHECK(op.cached_geometries() == 1);

  run_all(part);
  CHECK(op.cached_geometries() == 2);
  CHECK(op.primitive_builds() == 2 * per_geometry);

  run_all(full);
  run_all(part);
  CHECK(op.cached_geometries() == 2);
  CHECK(op.primitive_builds() == 2 * per_geometry);
}

TEST_CASE("A repeated forward with cached primitives gives bit-identical results",
          "[backend][onednn][cache]") {
  Device<B> dev;
  ops::Conv2d<B, float> op;
  Rng rng = Rng::stream(7, 2);
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {3, 4, 8, 7}, 6, 3, 2, Padding::Same);
  const auto x = random_vec(rng, g.in_shape().size()), w = random_vec(rng, 9 * g.ic * g.oc);
  auto y1 = poisoned(g.out_shape().size()), y2 = poisoned(g.out_shape().size());
  op.forward(dev, g, x.data(), w.data(), nullptr, y1.data());
  const std::size_t builds = op.primitive_builds();
  op.forward(dev, g, x.data(), w.data(), nullptr, y2.data());
  CHECK(op.primitive_builds() == builds);
  CHECK(same_bits(y1, y2));
}

TEST_CASE("BatchNorm, Pool2d and Relu reuse their primitives across calls and batch sizes",
          "[backend][onednn][cache]") {
  Device<B> dev;
  Rng rng = Rng::stream(7, 3);
  const ChannelGeom cg{DataFormat::NHWC, 4, 5, 6, 6};
  ChannelGeom cg_part = cg;
  cg_part.n = 1;

  SECTION("BatchNorm") {
    ops::BatchNorm<B, float> op;
    auto run = [&](const ChannelGeom& g) {
      const auto x = random_vec(rng, g.size()), gamma = random_vec(rng, g.c), beta = random_vec(rng, g.c),
                 dy = random_cotangent(rng, g.size());
      auto y = poisoned(g.size()), mean = poisoned(g.c), var = poisoned(g.c), dx = poisoned(g.size()),
           dg = poisoned(g.c), db = poisoned(g.c);
      op.forward_train(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data());
      op.forward_infer(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), mean.data(), var.data(), y.data());
      op.backward(dev, g, 1e-3, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                  dg.data(), db.data());
    };
    run(cg);
    const std::size_t builds = op.primitive_builds();
    CHECK(builds == 1);  // inference; training forward and backward are own kernels (bn_kernels.hpp)
    run(cg);
    CHECK(op.primitive_builds() == builds);
    run(cg_part);
    run(cg);
    CHECK(op.cached_geometries() == 2);
    CHECK(op.primitive_builds() == 2 * builds);
  }
  SECTION("Pool2d") {
    ops::Pool2d<B, float> op;
    auto run = [&](std::size_t n) {
      const ConvGeom g = ConvGeom::make(DataFormat::NCHW, {n, 5, 9, 9}, 5, 3, 2, Padding::Same);
      const auto x = distinct_vec(rng, g.in_shape().size()),
                 dy = random_cotangent(rng, g.n * g.ic * g.oh * g.ow);
      auto y = poisoned(dy.size()), dx = poisoned(x.size());
      op.forward(dev, g, PoolKind::Max, false, x.data(), y.data());
      op.forward(dev, g, PoolKind::Max, true, x.data(), y.data());
      op.backward(dev, g, PoolKind::Max, x.data(), y.data(), dy.data(), dx.data());
    };
    run(4);
    const std::size_t builds = op.primitive_builds();
    CHECK(builds == 3);  // training forward, inference forward, backward
    run(4);
    CHECK(op.primitive_builds() == builds);
    run(1);
    run(4);
    CHECK(op.cached_geometries() == 2);
    CHECK(op.primitive_builds() == 2 * builds);
  }
  SECTION("Relu") {
    ops::Relu<B, float> op;
    auto run = [&](std::size_t n) {
      auto x = random_vec(rng, n), dy = random_cotangent(rng, n);
      op.forward(dev, n, x.data(), x.data());
      op.backward(dev, n, x.data(), dy.data(), dy.data());
    };
    run(100);
    CHECK(op.primitive_builds() == 2);
    run(100);
    CHECK(op.primitive_builds() == 2);
    run(30);
    CHECK(op.cached_geometries() == 2);
    CHECK(op.primitive_builds() == 4);
  }
}

TEST_CASE("The primitive cache stays bounded and evicted geometries still compute correctly",
          "[backend][onednn][cache]") {
  Device<B> dev;
  ops::Relu<B, float> op;
  Rng rng = Rng::stream(7, 4);
  for (int round = 0; round < 2; ++round)
    for (std::size_t n = 1; n <= 12; ++n) {
      const auto x = random_vec(rng, n);
      auto y = poisoned(n);
      op.forward(dev, n, x.data(), y.data());
      for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == (x[i] > 0 ? x[i] : 0.f));
    }
  CHECK(op.cached_geometries() == 8);  // the default capacity
}

TEST_CASE("A second device drops the primitives built for the first and still computes correctly",
          "[backend][onednn][cache]") {
  Device<B> dev1, dev2;
  ops::Relu<B, float> op;
  const std::vector<float> x{-1.f, 2.f, -3.f, 4.f};
  auto y = poisoned(4);
  op.forward(dev1, 4, x.data(), y.data());
  op.forward(dev2, 4, x.data(), y.data());
  CHECK(op.cached_geometries() == 1);
  CHECK(op.primitive_builds() == 2);
  CHECK(y == std::vector<float>{0.f, 2.f, 0.f, 4.f});
}

TEST_CASE(
    "Average pooling over windows that do not overlap runs the own NHWC loops, the reference's float sums",
    "[backend][onednn][pool]") {
  // onednn/avg_pool_kernels.hpp: no oneDNN primitive is built; y is each
  // window's row-major float sum divided by its size, dx is dy / size inside
  // a window and 0 in the rows and columns no window covers.
  Device<B> dev;
  Rng rng = Rng::stream(7, 6);
  const ConvGeom geoms[] = {ConvGeom::make(DataFormat::NHWC, {3, 16, 8, 9}, 16, 2, 2, Padding::Valid),
                            ConvGeom::make(DataFormat::NHWC, {2, 5, 7, 8}, 5, 3, 3, Padding::Valid),
                            ConvGeom::make(DataFormat::NHWC, {4, 64, 8, 8}, 64, 8, 8, Padding::Valid)};
  for (const ConvGeom& g : geoms) {
    INFO(str(g));
    REQUIRE(backend::onednn::avg_pool::handles(g));
    ops::Pool2d<B, float> op;
    const std::size_t ny = g.n * g.ic * g.oh * g.ow, C = g.ic;
    const auto x = random_vec(rng, g.in_shape().size()), dy = random_cotangent(rng, ny);
    auto y = poisoned(ny), dx = poisoned(x.size());
    op.forward(dev, g, PoolKind::Avg, true, x.data(), y.data());
    op.backward(dev, g, PoolKind::Avg, x.data(), y.data(), dy.data(), dx.data());
    CHECK(op.primitive_builds() == 0);
    const float count = float(g.kh * g.kw);
    std::vector<float> ey(ny), edx(x.size(), 0.f);
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t oy = 0; oy < g.oh; ++oy)
        for (std::size_t ox = 0; ox < g.ow; ++ox)
          for (std::size_t c = 0; c < C; ++c) {
            const std::size_t o = ((n * g.oh + oy) * g.ow + ox) * C + c;
            float sum = 0.f;
            for (std::size_t ky = 0; ky < g.kh; ++ky)
              for (std::size_t kx = 0; kx < g.kw; ++kx) {
                const std::size_t i = ((n * g.ih + oy * g.sh + ky) * g.iw + ox * g.sw + kx) * C + c;
                sum += x[i];
                edx[i] = dy[o] / count;
              }
            ey[o] = sum / count;
          }
    CHECK(same_bits(y, ey));
    CHECK(same_bits(dx, edx));
  }
}

TEST_CASE("The own pooling kernels give the scalar loops' bits at every channel count, in float and in bf16",
          "[backend][onednn][pool]") {
  // max_pool_kernels.hpp / avg_pool_kernels.hpp run their loops with the
  // channel count a constant (16 to 256; AVX-512 for bf16 max pooling)
  // or read from the geometry (any other): each against the scalar
  // semantics, including ties (the first maximum wins), NaN (never wins),
  // a window all NaN (-inf, argmax 0), and the bf16 forms (x, y and dx as
  // bits; forward's y_bits exact, backward_bf16's dx rounded as
  // host::bf16_bits rounds, which VCVTNEPS2BF16 matches off denormals).
  namespace mp = backend::onednn::max_pool;
  namespace ap = backend::onednn::avg_pool;
  namespace host = backend::host;
  Rng rng = Rng::stream(7, 9);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (std::size_t C : {5, 16, 32, 48, 64, 128, 256})
    for (std::size_t k : {2, 3}) {
      const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {2, C, 7, 8}, C, k, k, Padding::Valid);
      INFO(str(g));
      REQUIRE(mp::handles(g));
      const std::size_t ny = g.n * C * g.oh * g.ow;
      // x exact in bf16; ties, NaN and an all-NaN window planted
      std::vector<float> x = random_vec(rng, g.in_shape().size());
      for (float& v : x) v = host::round_to_bf16(v);
      for (std::size_t i = 0; i + C < x.size(); i += 7 * C + 3)
        x[i + C] = x[i];  // a tie with the pixel before
      for (std::size_t i = 11; i < x.size(); i += 97) x[i] = nan;
      for (std::size_t ky = 0; ky < k; ++ky)
        for (std::size_t kx = 0; kx < k; ++kx)
          x[(ky * g.iw + kx) * C] = nan;  // image 0, window (0, 0), channel 0
      std::vector<std::uint16_t> xb(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) xb[i] = host::bf16_bits(x[i]);
      const auto dy = random_cotangent(rng, ny);
      // the scalar semantics
      std::vector<float> ey(ny, -inf), edx(x.size(), 0.f), eavg(ny), eadx(x.size(), 0.f);
      std::vector<std::uint8_t> ea(ny, 0);
      const float count = float(k * k);
      for (std::size_t n = 0; n < g.n; ++n)
        for (std::size_t oy = 0; oy < g.oh; ++oy)
          for (std::size_t ox = 0; ox < g.ow; ++ox)
            for (std::size_t c = 0; c < C; ++c) {
              const std::size_t o = ((n * g.oh + oy) * g.ow + ox) * C + c;
              float sum = 0.f;
              for (std::size_t ky = 0; ky < k; ++ky)
                for (std::size_t kx = 0; kx < k; ++kx) {
                  const std::size_t i = ((n * g.ih + oy * k + ky) * g.iw + ox * k + kx) * C + c;
                  if (x[i] > ey[o]) ey[o] = x[i], ea[o] = std::uint8_t(ky * k + kx);
                  sum += x[i];
                  eadx[i] = dy[o] / count;
                }
              eavg[o] = sum / count;
              const std::size_t ky = ea[o] / k, kx = ea[o] % k;
              edx[((n * g.ih + oy * k + ky) * g.iw + ox * k + kx) * C + c] = dy[o];
            }
      CHECK(ey[0] == -inf);
      std::vector<std::uint16_t> eyb(ny), edxb(x.size());
      for (std::size_t i = 0; i < ny; ++i) eyb[i] = host::bf16_bits(ey[i]);
      for (std::size_t i = 0; i < x.size(); ++i) edxb[i] = host::bf16_bits(edx[i]);

      auto y = poisoned(ny), dx = poisoned(x.size());
      std::vector<std::uint8_t> a(ny, 0xee), ab(ny, 0xee);
      mp::forward(g, x.data(), y.data(), a.data());
      CHECK(same_bits(y, ey));
      CHECK(a == ea);
      mp::backward(g, a.data(), dy.data(), dx.data());
      CHECK(same_bits(dx, edx));
      auto yf = poisoned(ny);
      std::vector<std::uint16_t> yb(ny, 0xeeee), dxb(x.size(), 0xeeee);
      mp::forward(g, xb.data(), yf.data(), ab.data());  // bf16 x, float y
      CHECK(same_bits(yf, ey));
      CHECK(ab == ea);
      std::fill(ab.begin(), ab.end(), std::uint8_t(0xee));
      mp::forward(g, xb.data(), static_cast<float*>(nullptr), ab.data(), yb.data());  // bf16 y alone
      CHECK(yb == eyb);
      CHECK(ab == ea);
      mp::backward_bf16(g, ab.data(), dy.data(), dxb.data());
      CHECK(dxb == edxb);
      // average pooling: float and bf16 x (no NaN in these)
      std::vector<float> xa = random_vec(rng, x.size());
      for (float& v : xa) v = host::round_to_bf16(v);
      std::vector<std::uint16_t> xab(xa.size());
      for (std::size_t i = 0; i < xa.size(); ++i) xab[i] = host::bf16_bits(xa[i]);
      for (std::size_t n = 0; n < g.n; ++n)
        for (std::size_t oy = 0; oy < g.oh; ++oy)
          for (std::size_t ox = 0; ox < g.ow; ++ox)
            for (std::size_t c = 0; c < C; ++c) {
              float sum = 0.f;
              for (std::size_t ky = 0; ky < k; ++ky)
                for (std::size_t kx = 0; kx < k; ++kx)
                  sum += xa[((n * g.ih + oy * k + ky) * g.iw + ox * k + kx) * C + c];
              eavg[((n * g.oh + oy) * g.ow + ox) * C + c] = sum / count;
            }
      auto ya = poisoned(ny), yab = poisoned(ny), dxa = poisoned(x.size());
      ap::forward(g, xa.data(), ya.data());
      ap::forward(g, xab.data(), yab.data());
      ap::backward(g, dy.data(), dxa.data());
      CHECK(same_bits(ya, eavg));
      CHECK(same_bits(yab, eavg));
      CHECK(same_bits(dxa, eadx));
    }
}

TEST_CASE("Max pooling backward rebuilds its workspace when no training forward saw this x",
          "[backend][onednn][pool]") {
  Device<B> dev;
  Rng rng = Rng::stream(7, 5);
  // Overlapping windows (oneDNN's primitives and their workspace) and
  // windows that do not overlap (the own NHWC kernels and their argmax,
  // onednn/max_pool_kernels.hpp).
  const bool own = GENERATE(false, true);
  INFO((own ? "own kernels" : "oneDNN primitives"));
  const ConvGeom g = own ? ConvGeom::make(DataFormat::NHWC, {2, 16, 8, 9}, 16, 2, 2, Padding::Valid)
                         : ConvGeom::make(DataFormat::NHWC, {2, 3, 7, 7}, 3, 3, 2, Padding::Same);
  REQUIRE(backend::onednn::max_pool::handles(g) == own);
  const std::size_t ny = g.n * g.ic * g.oh * g.ow;
  const auto x1 = distinct_vec(rng, g.in_shape().size()), x2 = distinct_vec(rng, g.in_shape().size());
  const auto dy = random_cotangent(rng, ny);
  auto y1 = poisoned(ny), y2 = poisoned(ny);

  // The expected gradients: a training forward then backward on each input.
  ops::Pool2d<B, float> fresh;
  auto dx1 = poisoned(x1.size()), dx2 = poisoned(x2.size());
  fresh.forward(dev, g, PoolKind::Max, true, x1.data(), y1.data());
  fresh.backward(dev, g, PoolKind::Max, x1.data(), y1.data(), dy.data(), dx1.data());
  fresh.forward(dev, g, PoolKind::Max, true, x2.data(), y2.data());
  fresh.backward(dev, g, PoolKind::Max, x2.data(), y2.data(), dy.data(), dx2.data());
  REQUIRE_FALSE(same_bits(dx1, dx2));

  SECTION("backward without any forward") {
    ops::Pool2d<B, float> op;
    auto dx = poisoned(x1.size());
    op.backward(dev, g, PoolKind::Max, x1.data(), y1.data(), dy.data(), dx.data());
    CHECK(same_bits(dx, dx1));
  }
  SECTION("backward on another x than the last training forward") {
    ops::Pool2d<B, float> op;
    auto y = poisoned(ny), dx = poisoned(x1.size());
    op.forward(dev, g, PoolKind::Max, true, x2.data(), y.data());
    op.backward(dev, g, PoolKind::Max, x1.data(), y1.data(), dy.data(), dx.data());
    CHECK(same_bits(dx, dx1));
    op.backward(dev, g, PoolKind::Max, x2.data(), y2.data(), dy.data(), dx.data());
    CHECK(same_bits(dx, dx2));
  }
  SECTION("an inference forward in between leaves the training workspace alone") {
    ops::Pool2d<B, float> op;
    auto y = poisoned(ny), dx = poisoned(x1.size());
    op.forward(dev, g, PoolKind::Max, true, x1.data(), y.data());
    op.forward(dev, g, PoolKind::Max, false, x2.data(), y.data());
    const std::size_t builds = op.primitive_builds();
    op.backward(dev, g, PoolKind::Max, x1.data(), y1.data(), dy.data(), dx.data());
    CHECK(same_bits(dx, dx1));
    // only the backward primitive (none for the own kernels), no recomputation needed
    CHECK(op.primitive_builds() == builds + (own ? 0 : 1));
  }
}

TEST_CASE(
    "1x1 strided NHWC convolutions with few input channels train correctly (oneDNN issue 6035 geometry)",
    "[backend][onednn][conv]") {
  // oneDNN 2.6's jit_1x1 backward_weights overruns its buffer here (SIGSEGV
  // or heap corruption); conv2d.hpp steers around that implementation.
  Device<B> dev;
  ops::Conv2d<B, float> op;
  Rng rng = Rng::stream(7, 6);
  for (std::size_t ic : {3, 4}) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {4, ic, 64, 64}, 8, 1, 2, Padding::Same);
    INFO(str(g));
    const auto x = random_vec(rng, g.in_shape().size()), dy = random_cotangent(rng, g.out_shape().size());
    const auto [dwr, dbr] = reference_grads(g, x, dy);
    for (int step = 0; step < 3; ++step) {
      auto dw = poisoned(ic * 8), db = poisoned(8);
      op.backward_weights(dev, g, x.data(), dy.data(), dw.data(), db.data());
      CHECK(rel_err(dw, dwr) < kTolerance);
      CHECK(rel_err(db, dbr) < kTolerance);
    }
  }
}

TEST_CASE(
    "Conv2d's bias gradient alone agrees with the reference in double, the same bits on any thread count",
    "[backend][onednn][conv]") {
  // bias_gradient (frozen weights, a trained bias: airbench94's whitening)
  // against the reference's backward_weights in double, both layouts, at
  // airbench's whitening size (500 images of 31x31, 24 channels: long sums)
  // and odd toys; chunks of whole images summed in order, so 1 and 2
  // threads give the same bits.
  Device<B> dev;
  ops::Conv2d<B, float> op;
  Rng rng = Rng::stream(7, 11);
  struct Case {
    DataFormat f;
    Shape in;
    std::size_t oc, k;
    Padding pad;
  };
  const Case cases[] = {{DataFormat::NHWC, {500, 3, 32, 32}, 24, 2, Padding::Valid},
                        {DataFormat::NCHW, {500, 3, 32, 32}, 24, 2, Padding::Valid},
                        {DataFormat::NHWC, {3, 5, 7, 6}, 13, 3, Padding::Same},
                        {DataFormat::NCHW, {1, 2, 5, 9}, 3, 3, Padding::Same},
                        {DataFormat::NHWC, {17, 4, 3, 3}, 40, 1, Padding::Same}};
  for (const Case& c : cases) {
    const ConvGeom g = ConvGeom::make(c.f, c.in, c.oc, c.k, 1, c.pad);
    INFO(str(g));
    const auto x = random_vec(rng, g.in_shape().size()), dy = random_cotangent(rng, g.out_shape().size());
    const std::vector<double> dbr = reference_grads(g, x, dy).second;
    auto db = poisoned(g.oc), db1 = poisoned(g.oc);
    op.bias_gradient(dev, g, dy.data(), db.data());
    CHECK(rel_err(db, dbr) < kTolerance);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    op.bias_gradient(dev, g, dy.data(), db1.data());
    omp_set_num_threads(threads);
    CHECK(same_bits(db, db1));
  }
}

TEST_CASE("LRN's own loops agree with the reference in double at the tutorial's training sizes",
          "[backend][onednn][lrn]") {
  // The tutorial CNN's two LRNs see 64 channels at 12x12 (norm1 after pool1,
  // norm2 before pool2); batch 128 is its default, 32 the examples' tests'.
  // Every power path (0.75 the tutorial's, 0.5, 1, any other), windows wider
  // than the channels, radius 0, both layouts. Bound (as ||out - ref|| /
  // ||ref||): float's rounding of a (2r+1)-term sum and a few products.
  Device<B> dev;
  Device<backend::Reference> rdev;
  Rng rng = Rng::stream(7, 7);
  struct Case {
    ChannelGeom g;
    LrnParams p;
  };
  std::vector<Case> cases;
  for (DataFormat f : {DataFormat::NHWC, DataFormat::NCHW}) {
    cases.push_back({{f, 128, 64, 12, 12}, {4, 1.0, 0.001 / 9.0, 0.75}});
    cases.push_back({{f, 32, 64, 12, 12}, {2, 1.0, 0.1, 0.75}});
    cases.push_back({{f, 3, 16, 9, 7}, {1, 2.0, 0.5, 0.5}});
    cases.push_back({{f, 2, 5, 5, 3}, {4, 1.0, 0.3, 1.0}});  // window wider than the channels
    cases.push_back({{f, 2, 16, 5, 5}, {0, 1.5, 0.7, 0.8}});
  }
  for (const Case& k : cases) {
    const ChannelGeom& g = k.g;
    const LrnParams& p = k.p;
    INFO(to_string(g.fmt) << " " << g.n << "x" << g.c << "x" << g.h << "x" << g.w
                          << " depth_radius=" << p.depth_radius << " beta=" << p.beta);
    ops::Lrn<B, float> op;
    ops::Lrn<backend::Reference, double> ref;
    const auto x = random_vec(rng, g.size(), -3.0, 3.0), dy = random_cotangent(rng, g.size());
    std::vector<double> yr(g.size()), dxr(g.size());
    ref.forward(rdev, g, p, true, widen(x).data(), yr.data());
    ref.backward(rdev, g, p, widen(x).data(), yr.data(), widen(dy).data(), dxr.data());
    auto y = poisoned(g.size()), y_infer = poisoned(g.size()), dx = poisoned(g.size());
    op.forward(dev, g, p, true, x.data(), y.data());
    op.forward(dev, g, p, false, x.data(), y_infer.data());
    op.backward(dev, g, p, x.data(), y.data(), dy.data(), dx.data());
    CHECK(same_bits(y, y_infer));
    CHECK(rel_err(y, yr) < 2e-6);
    CHECK(rel_err(dx, dxr) < 2e-6);
    // In place (y over x, dx over dy): the same bits.
    auto inplace = x;
    op.forward(dev, g, p, true, inplace.data(), inplace.data());
    CHECK(same_bits(inplace, y));
    auto dinplace = dy;
    op.backward(dev, g, p, x.data(), y.data(), dinplace.data(), dinplace.data());
    CHECK(same_bits(dinplace, dx));
  }
}

TEST_CASE("LRN carries NaN from an input to its window's outputs", "[backend][onednn][lrn]") {
  Device<B> dev;
  ops::Lrn<B, float> op;
  for (DataFormat f : {DataFormat::NHWC, DataFormat::NCHW}) {
    const ChannelGeom g{f, 1, 8, 1, 1};
    std::vector<float> x(8, 0.5f), y(8), dy(8, 1.f), dx(8);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    op.forward(dev, g, {1, 1.0, 0.1, 0.75}, true, x.data(), y.data());
    op.backward(dev, g, {1, 1.0, 0.1, 0.75}, x.data(), y.data(), dy.data(), dx.data());
    for (std::size_t c = 0; c < 8; ++c) {
      INFO(to_string(f) << " channel " << c);
      const bool in_window = c >= 2 && c <= 4;
      CHECK(std::isnan(y[c]) == in_window);
      CHECK(std::isnan(dx[c]) == (c >= 1 && c <= 5));  // the backward's window of windows
    }
  }
}

TEST_CASE("oneDNN ops reject bad geometries and missing buffers with cifarnet errors",
          "[backend][onednn][errors]") {
  Device<B> dev;
  std::vector<float> buf(4096, 1.f);
  float* p = buf.data();

  SECTION("a convolution whose output size does not follow from its padding") {
    ops::Conv2d<B, float> op;
    ConvGeom g = ConvGeom::make(DataFormat::NCHW, {1, 2, 8, 8}, 3, 3, 1, Padding::Same);
    g.oh = 7;
    CHECK_THROWS_AS(op.forward(dev, g, p, p, nullptr, p), ShapeError);
    CHECK_THROWS_WITH(op.forward(dev, g, p, p, nullptr, p), Catch::Contains("Conv2d forward"));
  }
  SECTION("an empty batch") {
    ops::BatchNorm<B, float> op;
    CHECK_THROWS_AS(op.forward_train(dev, {DataFormat::NCHW, 0, 3, 4, 4}, 1e-3, p, p, p, p, p, p),
                    ShapeError);
    ops::Relu<B, float> relu;
    CHECK_THROWS_AS(relu.forward(dev, 0, p, p), ShapeError);
    ops::Dense<B, float> dense;
    CHECK_THROWS_AS(dense.forward(dev, 0, 3, 4, p, p, nullptr, p), ShapeError);
  }
  SECTION("a pooling window lying wholly in the padding") {
    ops::Pool2d<B, float> op;
    const ConvGeom g = padded_geom(DataFormat::NHWC, {1, 2, 4, 4}, 2, 2, 1, 2, 0, 0, 0);
    CHECK_THROWS_WITH(op.forward(dev, g, PoolKind::Avg, true, p, p), Catch::Contains("pads < kernel"));
  }
  SECTION("a null buffer") {
    ops::Conv2d<B, float> op;
    const ConvGeom g = ConvGeom::make(DataFormat::NCHW, {1, 2, 4, 4}, 3, 3, 1, Padding::Same);
    CHECK_THROWS_AS(op.backward_weights(dev, g, p, nullptr, p, nullptr), ConfigError);
    CHECK_THROWS_WITH(op.backward_weights(dev, g, p, nullptr, p, nullptr), Catch::Contains("'dy'"));
  }
  SECTION("LRN parameters outside TensorFlow's (bias > 0, alpha >= 0, beta >= 0)") {
    ops::Lrn<B, float> op;
    CHECK_THROWS_AS(op.forward(dev, {DataFormat::NCHW, 1, 3, 2, 2}, {2, 0.0, 1.0, 0.75}, true, p, p),
                    ConfigError);
  }
  SECTION("a oneDNN failure becomes a BackendError naming the op and the status") {
    auto fail = [] { throw dnnl::error(dnnl_unimplemented, "could not create a primitive"); };
    CHECK_THROWS_AS(backend::onednn::guarded("Conv2d forward", fail), BackendError);
    CHECK_THROWS_WITH(backend::onednn::guarded("Conv2d forward", fail),
                      Catch::Contains("Conv2d forward") && Catch::Contains("unimplemented"));
  }
}

TEST_CASE(
    "Conv2d with Winograd agrees with the reference in both formats and falls back to direct where "
    "oneDNN has none",
    "[backend][onednn][conv][winograd]") {
  Rng rng = Rng::stream(7, 21);
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC})
    for (std::size_t k : {std::size_t(3), std::size_t(1)}) {  // 1x1: no Winograd kernel, direct
      const ConvGeom g = ConvGeom::make(fmt, {2, 16, 13, 11}, 32, k, 1, Padding::Same);
      INFO(str(g));
      OpPair<ops::Conv2d, B> t;
      t.op.set_algorithm(ConvAlgorithm::Winograd);
      const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = k * k * g.ic * g.oc;
      const Both x = Both::input(random_vec(rng, nx)), w = Both::input(random_vec(rng, nw)),
                 b = Both::input(random_vec(rng, g.oc)), dy = Both::input(random_cotangent(rng, ny));
      Both y = Both::output(ny), dx = Both::output(nx), dw = Both::output(nw), db = Both::output(g.oc);
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward(dev, g, side(x), side(w), side(b), side(y));
        op.backward_data(dev, g, side(dy), side(w), side(dx));
        op.backward_weights(dev, g, side(x), side(dy), side(dw), side(db));
      });
      // oneDNN 2.6 has f32 Winograd kernels only for AVX-512 (avx512_core);
      // elsewhere the op must fall back to direct.
      const unsigned isa = unsigned(dnnl::get_effective_cpu_isa()),
                     core = unsigned(dnnl::cpu_isa::avx512_core);
      const bool wino_cpu = (isa & core) == core;  // the ISA values are feature bit sets
      // Where oneDNN has none, and on Zen 4 (AVX-512 in 256-bit halves), the
      // own kernels (backend/onednn/winograd.hpp) take NHWC 3x3 with channel
      // counts multiples of 16.
      const bool own = (!wino_cpu || backend::onednn::direct::avx512_in_halves()) && k == 3 &&
                       backend::onednn::winograd::supports(g);
      INFO("CPU with Winograd kernels: " << wino_cpu << ", the own kernels: " << own);
      CHECK(t.op.uses_winograd(g) == (k == 3 && (wino_cpu || own)));
      CHECK(t.op.uses_own_winograd(g) == own);
      CHECK(t.op.own_winograd_calls() == (own ? 2u : 0u));
      // Winograd's transforms round more than the direct sum: 1e-4 instead of 1e-5.
      CHECK(y.err() < 1e-4);
      CHECK(dx.err() < 1e-4);
      CHECK(dw.err() < kTolerance);  // backward_weights is always direct
      CHECK(db.err() < kTolerance);
    }
}

TEST_CASE("Conv2d reuses its reordered weights only while buffer and version are unchanged",
          "[backend][onednn][conv][cache]") {
  Rng rng = Rng::stream(7, 22);
  for (ConvAlgorithm alg : {ConvAlgorithm::Direct, ConvAlgorithm::Winograd}) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {1, 16, 9, 9}, 16, 3, 1, Padding::Same);
    OpPair<ops::Conv2d, B> t;
    t.op.set_algorithm(alg);
    const std::size_t nx = g.in_shape().size(), ny = g.out_shape().size(), nw = 9 * g.ic * g.oc;
    const Both x = Both::input(random_vec(rng, nx)), dy = Both::input(random_cotangent(rng, ny));
    Both w = Both::input(random_vec(rng, nw));
    std::uint64_t version = 1;
    std::size_t reorders = 0;
    for (int round = 0; round < 5; ++round) {
      INFO("algorithm " << int(alg) << ", round " << round);
      if (round == 2) {  // an in-place update of one weight, as an optimizer makes, with a new version
        w.f[5] += 0.5f;
        w.d[5] = double(w.f[5]);
        ++version;
      }
      // round 4: no version (0, unknown): every call reorders
      t.op.set_weights_version(round == 4 ? 0 : version);
      Both y = Both::output(ny), dx = Both::output(nx);
      t.both([&](auto& dev, auto& op, auto side) {
        op.forward(dev, g, side(x), side(w), nullptr, side(y));
        op.backward_data(dev, g, side(dy), side(w), side(dx));
      });
      CHECK(y.err() < 1e-4);
      CHECK(dx.err() < 1e-4);
      const std::size_t now = t.op.weight_reorders();
      // oneDNN's CPU convolutions want blocked weights (OIhw8i8o and the
      // like) on every x86 ISA, so forward and backward_data each reorder
      // (the own Winograd kernels, where oneDNN has none: each transforms).
      if (round == 0 || round == 2 || round == 4)
        CHECK(now == reorders + 2);
      else
        CHECK(now == reorders);  // same buffer, same version: the copies are reused
      reorders = now;
    }
  }
}

TEST_CASE("A write through Parameters between two forwards reaches the cached weights and the conv+BN fold",
          "[backend][onednn][conv][cache]") {
  using Net = Model<ResNetCifar<>, B>;
  Net net({3, 16, 16}, DataFormat::NHWC, resnet_options(8), 5);
  Rng rng = Rng::stream(7, 24);
  auto x = make_tensor<float>({2, 3, 16, 16}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.uniform(-1, 1));
  auto run = [&](Net& m, Mode mode) {
    const auto& y = m.forward(x, mode);
    return std::vector<float>(y.begin(), y.end());
  };
  // A model built now (empty caches) with `net`'s values computes what `net` must.
  auto fresh = [&](Mode mode) {
    Net m({3, 16, 16}, DataFormat::NHWC, resnet_options(8), 5);
    m.parameters().values() = std::as_const(net.parameters()).values();
    m.parameters().state() = std::as_const(net.parameters()).state();
    return run(m, mode);
  };
  auto& P = net.parameters();
  for (Mode mode : {Mode::Infer, Mode::Train}) {
    INFO("mode " << int(mode));
    const auto y1 = run(net, mode);
    CHECK(same_bits(run(net, mode), y1));
    // Every parameter: weights, BN scale and shift, moving statistics.
    for (std::size_t id = 0; id < P.count(); ++id) P.value(id)[0] += 0.25f;
    const auto y2 = run(net, mode);
    CHECK_FALSE(same_bits(y2, y1));
    CHECK(same_bits(y2, fresh(mode)));
    // A pointer kept from before a forward: the write is seen once touched.
    const std::size_t id = 0;  // the first convolution's weights
    REQUIRE(P.info(id).name.find("weights") != std::string::npos);
    float* kept = P.value(id);
    (void)run(net, mode);
    kept[1] -= 0.5f;
    P.touch(id);
    CHECK(same_bits(run(net, mode), fresh(mode)));
  }
}

TEST_CASE("Under ConvAlgorithm::Auto weights train with the direct algorithm at any batch size",
          "[backend][onednn][conv][algorithm]") {
  // A replica with a few images must compute the gradients a direct run
  // computes (distributed training compares shards with one big batch);
  // frozen weights and inference may still take Winograd at small batches.
  using Net = Model<ResNetCifar<>, B>;
  const auto opts = [](ConvAlgorithm a) { return resnet_options(8).with_conv_algorithm(a); };
  Net autom({3, 16, 16}, DataFormat::NHWC, opts(ConvAlgorithm::Auto), 5);
  Net direct({3, 16, 16}, DataFormat::NHWC, opts(ConvAlgorithm::Direct), 5);
  // Winograd asked for runs inside ConvBatchNorm's own kernels on AVX2 and
  // Zen 4 CPUs (from 32 channels; direct below), Auto's Winograd in the
  // layers' own passes: the model that shows Auto's choice has them off.
  Net wino({3, 16, 16}, DataFormat::NHWC, opts(ConvAlgorithm::Winograd).with_direct_conv_bn(false), 5);
  Rng rng = Rng::stream(7, 23);
  auto x = make_tensor<float>({2, 3, 16, 16}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.uniform(-1, 1));
  auto grads = [&](Net& net) {
    const auto& y = net.forward(x, Mode::Train);
    Tensor<float> dy = y;
    for (auto& v : dy) v = 0.01f;
    net.backward(dy);
    const auto& g = net.parameters().grads();
    return std::vector<float>(g.data(), g.data() + g.size());
  };
  CHECK(same_bits(grads(autom), grads(direct)));
  // Frozen weights: Auto keeps Winograd's choice for this batch of 2.
  autom.set_weight_gradients(false);
  wino.set_weight_gradients(false);
  const auto ya = autom.forward(x, Mode::Train);
  const auto yw = wino.forward(x, Mode::Train);
  CHECK(same_bits(std::vector<float>(ya.begin(), ya.end()), std::vector<float>(yw.begin(), yw.end())));
}

TEST_CASE("BatchNorm's fused ReLU backward needs the training forward of the same geometry",
          "[backend][onednn][batchnorm]") {
  Device<B> dev;
  Rng rng = Rng::stream(7, 9);
  ops::BatchNorm<B, float> op;
  const ChannelGeom g{DataFormat::NHWC, 2, 3, 4, 4};
  ChannelGeom other = g;
  other.n = 1;
  const auto x = random_vec(rng, g.size()), gamma = random_vec(rng, g.c), beta = random_vec(rng, g.c),
             dy = random_cotangent(rng, g.size());
  auto y = poisoned(g.size()), mean = poisoned(g.c), var = poisoned(g.c), dx = poisoned(g.size()),
       dg = poisoned(g.c), db = poisoned(g.c);
  auto backward = [&](const ChannelGeom& geom) {
    op.backward(dev, geom, 1e-3, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                dg.data(), db.data(), true);
  };
  CHECK_THROWS_WITH(backward(g), Catch::Contains("fused ReLU backward without a training forward"));
  op.forward_train(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                   true);
  CHECK_THROWS_AS(backward(other), ConfigError);
  CHECK_NOTHROW(backward(g));
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(y[i] >= 0.f);              // the fused ReLU
    CHECK_FALSE(std::isnan(dx[i]));  // every element written
  }
}

// BatchNorm's backward in parts (ConvBatchNorm's ranged backward):
// backward_sums then backward_images over ranges of images give backward()'s
// dx, dgamma and dbeta bit for bit, in both formats, at a 16-channel NHWC
// width (the specialised loops) and a generic one; a range without the sums
// of the same tensors first, or outside the batch, is refused.
TEST_CASE("BatchNorm's backward in ranges of images equals its whole backward, bit for bit",
          "[backend][onednn][batchnorm]") {
  Device<B> dev;
  Rng rng = Rng::stream(7, 11);
  for (const ChannelGeom g :
       {ChannelGeom{DataFormat::NHWC, 5, 16, 4, 4}, ChannelGeom{DataFormat::NCHW, 5, 3, 4, 3},
        ChannelGeom{DataFormat::NHWC, 5, 3, 2, 3}}) {
    for (const bool relu : {true, false}) {
      INFO(to_string(g.fmt) << " C=" << g.c << (relu ? " with" : " without") << " the fused ReLU");
      ops::BatchNorm<B, float> op;
      const auto x = random_vec(rng, g.size()), gamma = random_vec(rng, g.c), beta = random_vec(rng, g.c),
                 dy = random_cotangent(rng, g.size());
      auto y = poisoned(g.size()), mean = poisoned(g.c), var = poisoned(g.c), dx = poisoned(g.size()),
           dg = poisoned(g.c), db = poisoned(g.c), dx2 = poisoned(g.size()), dg2 = poisoned(g.c),
           db2 = poisoned(g.c);
      op.forward_train(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                       relu);
      const std::size_t per = g.c * g.h * g.w;
      auto images = [&](std::size_t i0, std::size_t i1) {
        op.backward_images(dev, g, x.data(), dy.data(), mean.data(), i0, i1, dx2.data() + i0 * per, relu);
      };
      CHECK_THROWS_WITH(images(0, 2), Catch::Contains("sums were not taken first"));
      op.backward(dev, g, 1e-3, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                  dg.data(), db.data(), relu);
      op.backward_sums(dev, g, 1e-3, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dg2.data(),
                       db2.data(), relu);
      images(0, 2);
      images(2, 4);
      images(4, 5);
      CHECK_THROWS_AS(images(4, 6), ConfigError);
      CHECK_THROWS_AS(op.backward_images(dev, g, x.data(), dx.data(), mean.data(), 0, 1, dx2.data(), relu),
                      ConfigError);  // another dy than the sums'
      CHECK(std::memcmp(dx2.data(), dx.data(), g.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(dg2.data(), dg.data(), g.c * sizeof(float)) == 0);
      CHECK(std::memcmp(db2.data(), db.data(), g.c * sizeof(float)) == 0);
      // A forward in between overwrites the coefficients: the ranges are refused until the sums again.
      op.forward_train(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                       relu);
      CHECK_THROWS_AS(images(0, 1), ConfigError);
    }
  }
}

TEST_CASE(
    "Batch norm's pass with a residual sum: x a + b + r as the row loop, the ReLU, the rounding, the mask",
    "[backend][onednn][batchnorm][eltwise]") {
  // bn::affine_sum (forward_train_sum's pass) against its definition,
  // element by element: y = (x a + b) + r written as the row loop writes it
  // (so contracted to an FMA, or not, as the compiler does there), then
  // max(., 0) keeping NaN and -0, the bf16 copy as host::store_bf16
  // rounds, the mask y > 0. The rows of the bf16 copy alone run in AVX-512
  // registers where the build has AVX512-BF16 (bn::affine_sum_rows_avx512);
  // with a float y, and elsewhere, in the row loop for C known at compile
  // time (16, 32, 64 or 256 channels). x and r float or bf16, y float (with
  // or without its bf16 copy) or the bf16 copy alone.
  namespace bn = backend::onednn::bn;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Rng rng = Rng::stream(7, 43);
  for (std::size_t c : {std::size_t(16), std::size_t(32), std::size_t(64), std::size_t(256)}) {
    const ChannelGeom g{DataFormat::NHWC, 3, c, 5, 6};
    const std::size_t n = g.size();
    REQUIRE(bn::bf16_only(g));
    const auto x = random_vec(rng, n, -2.0, 2.0), a = random_vec(rng, c), b = random_vec(rng, c);
    auto r = random_vec(rng, n);
    r[5] = nan;
    r[6] = inf;
    r[7] = -inf;
    r[8] = -0.f;
    std::vector<std::uint16_t> x16(n), r16(n);
    std::vector<float> xw(n), rw(n);
    for (std::size_t i = 0; i < n; ++i) {
      x16[i] = backend::host::bf16_bits(x[i]);
      r16[i] = backend::host::bf16_bits(r[i]);
      xw[i] = backend::host::bf16_to_float(x16[i]);
      rw[i] = backend::host::bf16_to_float(r16[i]);
    }
    for (int xb = 0; xb < 2; ++xb)
      for (int rb = 0; rb < 2; ++rb)
        for (bool relu : {false, true})
          for (int out = 0; out < 3; ++out) {  // y; y and its copy; the copy alone
            INFO(c << " channels, x " << (xb ? "bf16" : "float") << ", r " << (rb ? "bf16" : "float")
                   << (relu ? ", ReLU" : "") << ", output " << out);
            const std::vector<float>& xv = xb ? xw : x;
            const std::vector<float>& rv = rb ? rw : r;
            std::vector<float> expect(n);
            std::vector<std::uint16_t> expect16(n), expect_mask(n / 16, 0);
            for (std::size_t i = 0; i < n; ++i) {
              const std::size_t ch = i % c;
              float v = (xv[i] * a[ch] + b[ch]) + rv[i];
              if (v > 0.f) expect_mask[i / 16] = std::uint16_t(expect_mask[i / 16] | 1u << (i % 16));
              if (relu && v < 0.f) v = 0.f;
              expect[i] = v;
            }
            backend::host::store_bf16(expect.data(), expect16.data(), n);
            auto y = poisoned(n);
            std::vector<std::uint16_t> y16(n, 0xdead), mask(n / 16, 0xdead);
            float* yp = out < 2 ? y.data() : nullptr;
            std::uint16_t* y16p = out > 0 ? y16.data() : nullptr;
            std::uint16_t* maskp = relu ? mask.data() : nullptr;
            auto run = [&](const auto* xp, const auto* rp) {
              bn::with_channels(g, [&](auto cc) {
                bn::affine_sum<decltype(cc)::value>(g, xp, a.data(), b.data(), rp, relu, yp, y16p, maskp);
              });
            };
            if (xb && rb)
              run(x16.data(), r16.data());
            else if (xb)
              run(x16.data(), r.data());
            else if (rb)
              run(x.data(), r16.data());
            else
              run(x.data(), r.data());
            std::size_t wrong = 0, wrong16 = 0, wrong_mask = 0;
            for (std::size_t i = 0; i < n; ++i) {
              if (yp) wrong += std::memcmp(&y[i], &expect[i], sizeof(float)) != 0;
              if (y16p) wrong16 += y16[i] != expect16[i];
            }
            if (maskp)
              for (std::size_t i = 0; i < n / 16; ++i) wrong_mask += mask[i] != expect_mask[i];
            CHECK(wrong == 0);
            CHECK(wrong16 == 0);
            CHECK(wrong_mask == 0);
          }
  }
}

TEST_CASE("A block's output as large as the threads' L2 caches is streamed: the same bits, counted",
          "[backend][onednn][batchnorm][eltwise]") {
  // bn::affine_sum's bf16 copy alone (a residual block's output),
  // bn::affine's (ResNet's stem, bn_bf16_stream_into_block) and
  // bn::sum_into_dy_with_sums (a block's backward sum writing its batch
  // norm's dy while summing it, without and with the stem's ReLU) over
  // 16-channel 32x32 images, as many as make the output reach the
  // threshold (host/stream_store.hpp): written with streaming stores where
  // the build has AVX512-BF16 and streaming stores are on, else with plain
  // ones; the bits (and the sums) must be those of plain stores either
  // way, and only a streaming pass counts.
  namespace bn = backend::onednn::bn;
  namespace host = backend::host;
  const int threads = omp_get_max_threads();
  const std::size_t image = 32 * 32 * 16 * sizeof(std::uint16_t);
  Rng rng = Rng::stream(7, 44);
  const std::size_t big_n = host::streaming_threshold(threads) / image + 1;
  for (const std::size_t images : {std::size_t(2), big_n}) {
    const ChannelGeom g{DataFormat::NHWC, images, 16, 32, 32};
    const std::size_t n = g.size();
    std::vector<std::uint16_t> x16(n), r16(n), d16(n), bits(n / 16);
    for (std::size_t i = 0; i < n; ++i) {
      x16[i] = host::bf16_bits(float(rng.uniform(-2.0, 2.0)));
      r16[i] = host::bf16_bits(float(rng.uniform(-2.0, 2.0)));
      d16[i] = host::bf16_bits(float(rng.uniform(-1.0, 1.0)));
    }
    for (auto& w : bits) w = std::uint16_t(rng.uniform() * 65536.0);
    const auto a = random_vec(rng, 16), b = random_vec(rng, 16), k = random_vec(rng, 16),
               relu_ab = random_vec(rng, 32);
    for (int pass = 0; pass < 4; ++pass) {
      const char* names[] = {"affine_sum", "affine", "sum_into_dy_with_sums", "sum_into_dy_with_sums, ReLU"};
      INFO(images << " images, " << names[pass]);
      std::vector<double> sums;
      auto run = [&](bool streaming, HostVector<std::uint16_t>& y, HostVector<std::uint16_t>& mask) {
        const bool was = streaming_stores();
        set_streaming_stores(streaming);
        const std::size_t before = host::streamed_passes().load();
        bn::Scratch sc;
        if (pass == 0)
          bn::affine_sum<16>(g, x16.data(), a.data(), b.data(), r16.data(), true, nullptr, y.data(),
                             mask.data());
        else if (pass == 1)
          bn::affine<16>(g, x16.data(), a.data(), b.data(), nullptr, true, y.data());
        else
          bn::sum_into_dy_with_sums<16>(g, r16.data(), d16.data(), bits.data(), y.data(), x16.data(),
                                        pass == 3 ? relu_ab.data() : nullptr, k.data(), sc);
        sums = sc.sums;
        set_streaming_stores(was);
        return host::streamed_passes().load() - before;
      };
      HostVector<std::uint16_t> plain(n, 0xdead), plain_mask(n / 16, 0xdead), streamed(n, 0xbeef),
          streamed_mask(n / 16, 0xbeef);
      CHECK(run(false, plain, plain_mask) == 0);
      const std::vector<double> plain_sums = sums;
      const std::size_t counted = run(true, streamed, streamed_mask);
#ifdef CIFARNET_HOST_BF16_AVX512
      CHECK(counted == (images == big_n ? 1u : 0u));
#else
      CHECK(counted == 0);
#endif
      // (the buffers started apart: equal means every element written by
      // both; the plain passes' bits against their definitions: the tests
      // above and test_rules' bit-for-bit cases)
      CHECK(std::memcmp(plain.data(), streamed.data(), n * sizeof(std::uint16_t)) == 0);
      if (pass == 0) CHECK(std::memcmp(plain_mask.data(), streamed_mask.data(), n / 16 * 2) == 0);
      if (pass >= 2) {  // the backward sums (2 x 16 doubles): the same bits
        REQUIRE(sums.size() == 32);
        REQUIRE(plain_sums.size() == 32);
        CHECK(std::memcmp(sums.data(), plain_sums.data(), sums.size() * sizeof(double)) == 0);
      }
    }
  }
}

TEST_CASE("The residual sum's ReLU mask as bits: batch norm writes y > 0, add_masked_bits equals add_masked",
          "[backend][onednn][batchnorm][eltwise]") {
  // positive_bits on the values where a mask could go wrong: -0, the
  // smallest denormal, NaN of both signs, infinities.
  const float denorm = std::numeric_limits<float>::denorm_min(),
              nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special{0.f, -0.f, denorm, -denorm, nan,  -nan, inf,    -inf,
                                   1.f, -1.f, 1e-30f, -1e-30f, 2.5f, 0.f,  denorm, 3.f};
  std::uint16_t expect = 0;
  for (int l = 0; l < 16; ++l)
    expect = std::uint16_t(expect | (special[std::size_t(l)] > 0.f ? 1u << l : 0u));
  CHECK(backend::host::positive_bits(special.data()) == expect);

  Device<B> dev;
  Rng rng = Rng::stream(7, 31);
  ops::BatchNorm<B, float> bn_op;
  ops::Eltwise<B, float> add_op;
  for (std::size_t c : {std::size_t(16), std::size_t(32), std::size_t(64), std::size_t(256)}) {
    INFO(c << " channels");
    const ChannelGeom g{DataFormat::NHWC, 3, c, 5, 6};
    const std::size_t n = g.size();
    const auto x = random_vec(rng, n), gamma = random_vec(rng, c), beta = random_vec(rng, c);
    auto r = random_vec(rng, n);
    r[5] = nan;  // a NaN sum: no bit, as the float mask
    r[6] = inf;
    auto y = poisoned(n), mean = poisoned(c), var = poisoned(c);
    std::vector<std::uint16_t> bits(n / 16, 0xdead);
    REQUIRE(ops::BatchNorm<B, float>::writes_sum_mask(g));
    bn_op.forward_train_sum(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), r.data(), true, y.data(),
                            mean.data(), var.data(), nullptr, bits.data());
    std::size_t on = 0, wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool bit = (bits[i / 16] >> (i % 16)) & 1u;
      on += bit;
      wrong += bit != (y[i] > 0.f);
    }
    CHECK(wrong == 0);
    CHECK(on > n / 4);
    CHECK(on < n);
    // The same values as without the bits.
    auto y0 = poisoned(n);
    bn_op.forward_train_sum(dev, g, 1e-3, x.data(), gamma.data(), beta.data(), r.data(), true, y0.data(),
                            mean.data(), var.data());
    CHECK(same_bits(y, y0));
    // The gradient sum through the mask: bits against the float mask, out of place and in place.
    const auto a = random_cotangent(rng, n), b = random_cotangent(rng, n);
    auto out_bits = poisoned(n), out_float = poisoned(n), in_a = a, in_b = b;
    add_op.add_masked_bits(dev, n, a.data(), b.data(), bits.data(), out_bits.data());
    add_op.add_masked(dev, n, a.data(), b.data(), y.data(), out_float.data());
    CHECK(same_bits(out_bits, out_float));
    add_op.add_masked_bits(dev, n, in_a.data(), b.data(), bits.data(), in_a.data());
    add_op.add_masked_bits(dev, n, a.data(), in_b.data(), bits.data(), in_b.data());
    CHECK(same_bits(in_a, out_float));
    CHECK(same_bits(in_b, out_float));
    // a as bf16 bits (a residual body's input gradient): the float pass on the values the bits hold.
    std::vector<std::uint16_t> a16(n);
    std::vector<float> a16w(n);
    for (std::size_t i = 0; i < n; ++i) {
      a16[i] = backend::host::bf16_bits(a[i]);
      a16w[i] = backend::host::bf16_to_float(a16[i]);
    }
    auto out16 = poisoned(n), out16w = poisoned(n), in16_b = b;
    add_op.add_masked_bits(dev, n, a16.data(), b.data(), bits.data(), out16.data());
    add_op.add_masked_bits(dev, n, a16w.data(), b.data(), bits.data(), out16w.data());
    CHECK(same_bits(out16, out16w));
    add_op.add_masked_bits(dev, n, a16.data(), in16_b.data(), bits.data(), in16_b.data());
    CHECK(same_bits(in16_b, out16w));
    // b as bf16 bits too, and the sum written as bf16 (the residual path's
    // gradient between blocks): the float pass on the widened values, then
    // rounded as host::store_bf16 rounds; in place on a bf16 operand.
    std::vector<std::uint16_t> b16(n);
    std::vector<float> b16w(n);
    for (std::size_t i = 0; i < n; ++i) {
      b16[i] = backend::host::bf16_bits(b[i]);
      b16w[i] = backend::host::bf16_to_float(b16[i]);
    }
    auto both_w = poisoned(n);
    add_op.add_masked_bits(dev, n, a16w.data(), b16w.data(), bits.data(), both_w.data());
    std::vector<std::uint16_t> expect16(n);
    backend::host::store_bf16(both_w.data(), expect16.data(), n);
    auto both = poisoned(n);
    add_op.add_masked_bits(dev, n, a16.data(), b16.data(), bits.data(), both.data());
    CHECK(same_bits(both, both_w));
    std::vector<std::uint16_t> out_b16(n, 0xdead), in_place = b16;
    add_op.add_masked_bits(dev, n, a16.data(), b16.data(), bits.data(), out_b16.data());
    CHECK(out_b16 == expect16);
    add_op.add_masked_bits(dev, n, a16.data(), in_place.data(), bits.data(), in_place.data());
    CHECK(in_place == expect16);
    auto fb = poisoned(n);  // float a, bf16 b
    add_op.add_masked_bits(dev, n, a.data(), b16.data(), bits.data(), fb.data());
    auto fbw = poisoned(n);
    add_op.add_masked_bits(dev, n, a.data(), b16w.data(), bits.data(), fbw.data());
    CHECK(same_bits(fb, fbw));
    std::vector<std::uint16_t> ff16(n, 0xdead), ff16_expect(n);  // two floats, a bf16 sum
    add_op.add_masked_bits(dev, n, a.data(), b.data(), bits.data(), ff16.data());
    backend::host::store_bf16(out_float.data(), ff16_expect.data(), n);
    CHECK(ff16 == ff16_expect);
    // No mask (null bits): the plain sum, as Eltwise::add.
    auto plain = poisoned(n), plain_add = poisoned(n);
    add_op.add_masked_bits(dev, n, a.data(), b.data(), static_cast<const std::uint16_t*>(nullptr),
                           plain.data());
    add_op.add(dev, n, a.data(), b.data(), plain_add.data(), false);
    CHECK(same_bits(plain, plain_add));
  }
  // Refused: no ReLU, a layout or channel count without the bits, a count that is no multiple of 16.
  const ChannelGeom nchw{DataFormat::NCHW, 2, 16, 4, 4}, odd{DataFormat::NHWC, 2, 24, 4, 4};
  std::vector<float> v(nchw.size(), 1.f), st(32, 1.f);
  std::vector<std::uint16_t> bits(nchw.size() / 16);
  for (const ChannelGeom& geom : {nchw, odd}) {
    std::vector<float> buf(geom.size(), 1.f);
    std::vector<std::uint16_t> m((geom.size() + 15) / 16);
    CHECK_THROWS_AS(bn_op.forward_train_sum(dev, geom, 1e-3, buf.data(), st.data(), st.data(), buf.data(),
                                            true, buf.data(), st.data(), st.data(), nullptr, m.data()),
                    ConfigError);
  }
  const ChannelGeom ok{DataFormat::NHWC, 2, 16, 4, 4};
  CHECK_THROWS_WITH(bn_op.forward_train_sum(dev, ok, 1e-3, v.data(), st.data(), st.data(), v.data(), false,
                                            v.data(), st.data(), st.data(), nullptr, bits.data()),
                    Catch::Contains("needs the sum's ReLU"));
  CHECK_THROWS_WITH(add_op.add_masked_bits(dev, 17, v.data(), v.data(), bits.data(), v.data()),
                    Catch::Contains("not a multiple"));
}

TEST_CASE(
    "The masked passes' branch-free selects give the ternary's bits on NaN, infinities, -0 and denormals",
    "[backend][onednn][eltwise]") {
  // host::keep_if replaces `c ? v : 0.f` in the masked passes so that they
  // vectorize without mask registers (AVX2); add_masked_word has its own
  // AVX2 and AVX-512 paths. Each against the plain ternary, element by
  // element, on operands where a select could go wrong.
  const float denorm = std::numeric_limits<float>::denorm_min(),
              nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special{0.f, -0.f, denorm, -denorm, nan, -nan, inf, -inf, 1.f, -1.f, 1e-30f, 3.f};
  const std::size_t k = special.size(), n = k * k * 16;  // every pair of operands, a multiple of 16
  std::vector<float> a(n), b(n), m(n);
  std::vector<std::uint16_t> bits(n / 16);
  Rng rng = Rng::stream(7, 41);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = special[i % k];
    b[i] = special[(i / k) % k];
    m[i] = special[(i * 7 + i / 5) % k];  // the mask's own values: > 0 or not, NaN among them
  }
  for (std::size_t w = 0; w < n / 16; ++w) bits[w] = std::uint16_t(rng.uniform_int(0x10000));
  auto ternary = [](bool c, float v) { return c ? v : 0.f; };
  // The same bits, or both NaN: which NaN a sum of two NaNs gives depends on
  // the order the compiler puts the operands in (x86 returns the first).
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
        return false;
    return true;
  };
  std::vector<float> want(n), want_bits(n);
  for (std::size_t i = 0; i < n; ++i) {
    want[i] = ternary(m[i] > 0.f, a[i] + b[i]);
    want_bits[i] = ternary((bits[i / 16] >> (i % 16)) & 1u, a[i] + b[i]);
    CHECK(same(std::vector<float>{backend::host::keep_if(m[i] > 0.f, a[i] + b[i])},
               std::vector<float>{want[i]}));
  }
  Device<B> dev;
  ops::Eltwise<B, float> add_op;
  auto y = poisoned(n), y_bits = poisoned(n), in_place = a;
  add_op.add_masked(dev, n, a.data(), b.data(), m.data(), y.data());
  add_op.add_masked_bits(dev, n, a.data(), b.data(), bits.data(), y_bits.data());
  add_op.add_masked_bits(dev, n, in_place.data(), b.data(), bits.data(), in_place.data());
  CHECK(same(y, want));
  CHECK(same(y_bits, want_bits));
  CHECK(same(in_place, want_bits));
  // Batch norm's recomputed ReLU mask: 1 or 0 (+0) as the ternary, so dy
  // times it keeps a NaN or infinite dy NaN where the ReLU is off.
  for (float x : special)
    for (float bb : {0.f, -0.f, -1.f, 1.f, nan}) {
      const float got = backend::onednn::bn::relu_on(x, 1.f, bb), expect = x * 1.f + bb > 0.f ? 1.f : 0.f;
      CHECK(same_bits(std::vector<float>{got}, std::vector<float>{expect}));
    }
}

TEST_CASE("The fused ReLU's mask recomputed in BatchNorm's backward is the forward's (y > 0), bit for bit",
          "[backend][onednn][batchnorm]") {
  // The backward no longer reads a stored mask: it tests x a + b > 0 again
  // with the forward's a, b. Its sums and dx must be those of the plain
  // backward given dy already multiplied by the forward's mask (y > 0), for
  // float and bf16 x, NHWC (specialised and generic channel counts) and
  // NCHW, with values at and near the ReLU's threshold.
  namespace bn = backend::onednn::bn;
  Rng rng = Rng::stream(7, 12);
  for (DataFormat fmt : kFormats)
    for (std::size_t c : {std::size_t(16), std::size_t(5)})
      for (bool lowp : {false, true}) {
        INFO(to_string(fmt) << ", " << c << " channels, bf16 x " << lowp);
        const ChannelGeom g{fmt, 3, c, 6, 7};
        auto xf = random_vec(rng, g.size());
        for (std::size_t i = 0; i < g.size(); i += 7) xf[i] = 0.f;  // bn(x) = b exactly
        std::vector<std::uint16_t> xb(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) {
          xb[i] = backend::host::bf16_bits(xf[i]);
          if (lowp) xf[i] = backend::host::bf16_to_float(xb[i]);
        }
        const auto dy = random_cotangent(rng, g.size());
        auto gamma = random_vec(rng, c), beta = random_vec(rng, c);
        beta[0] = 0.f;  // channel 0: bn(0) = 0, on the threshold
        std::vector<float> y(g.size()), mean(c), var(c), ab(2 * c), dx(g.size()), dx0(g.size()), dg(c),
            dg0(c), db(c), db0(c);
        bn::Scratch sc;
        auto fwd = [&](auto* x) {
          bn::forward_train(g, 1e-3, x, gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                            ab.data(), sc);
        };
        auto bwd = [&](auto* x, const float* d, const float* relu_ab, float* out, float* og, float* ob) {
          bn::backward(g, 1e-3, x, d, gamma.data(), mean.data(), var.data(), out, og, ob, relu_ab, sc);
        };
        std::vector<float> masked(g.size());
        if (lowp) {
          fwd(xb.data());
          for (std::size_t i = 0; i < g.size(); ++i) masked[i] = dy[i] * float(y[i] > 0.f);
          bwd(xb.data(), dy.data(), ab.data(), dx.data(), dg.data(), db.data());
          bwd(xb.data(), masked.data(), nullptr, dx0.data(), dg0.data(), db0.data());
        } else {
          fwd(xf.data());
          for (std::size_t i = 0; i < g.size(); ++i) masked[i] = dy[i] * float(y[i] > 0.f);
          bwd(xf.data(), dy.data(), ab.data(), dx.data(), dg.data(), db.data());
          bwd(xf.data(), masked.data(), nullptr, dx0.data(), dg0.data(), db0.data());
        }
        std::size_t zeros = 0;
        for (std::size_t i = 0; i < g.size(); ++i) zeros += y[i] == 0.f;
        CHECK(zeros > g.size() / 8);  // the ReLU cut a good part
        CHECK(same_bits(dx, dx0));
        CHECK(same_bits(dg, dg0));
        CHECK(same_bits(db, db0));
      }
}

TEST_CASE("BatchNorm's NHWC loops for 16, 32, 64 and 256 channels give the generic loops' bits",
          "[backend][onednn][batchnorm]") {
  // bn_kernels.hpp runs ResNet's and airbench's channel counts through loops
  // specialised on the count (with_channels); they must be the generic
  // loops, only faster: for float and bf16 x and dy, float and bf16 dx, and
  // dx written over dy.
  namespace bn = backend::onednn::bn;
  Rng rng = Rng::stream(7, 11);
  for (std::size_t c : {std::size_t(16), std::size_t(32), std::size_t(64), std::size_t(256)}) {
    INFO("channels " << c);
    // 4 * 5 * 7 = 140 rows: several 16-row blocks and a partial one per thread.
    const ChannelGeom g{DataFormat::NHWC, 4, c, 5, 7};
    auto x = random_vec(rng, g.size());
    for (auto& v : x) v = 3.f + 2.f * v;  // a mean far from 0: the shifted sums matter
    const auto dy = random_cotangent(rng, g.size()), k = random_vec(rng, c), a = random_vec(rng, c),
               b = random_vec(rng, c), A = random_vec(rng, c), Bc = random_vec(rng, c),
               D = random_vec(rng, c);
    std::vector<float> ab(a);  // the ReLU's a, b as the forward keeps them
    ab.insert(ab.end(), b.begin(), b.end());
    std::vector<float> y(g.size()), y0(g.size()), dx(g.size()), dx0(g.size());
    bn::Scratch sc, sc0;
    bn::with_channels(g, [&](auto cc) {
      constexpr std::size_t C = decltype(cc)::value;
      REQUIRE(C == c);
      bn::channel_sums<bn::SumKind::Stats, C>(g, x.data(), nullptr, nullptr, k.data(), sc);
      bn::channel_sums<bn::SumKind::Stats, 0>(g, x.data(), nullptr, nullptr, k.data(), sc0);
      CHECK(sc.sums == sc0.sums);
      bn::affine<C>(g, x.data(), a.data(), b.data(), y.data(), true);
      bn::affine<0>(g, x.data(), a.data(), b.data(), y0.data(), true);
      CHECK(same_bits(y, y0));
      bn::affine<C>(g, x.data(), a.data(), b.data(), y.data(), false);
      bn::affine<0>(g, x.data(), a.data(), b.data(), y0.data(), false);
      CHECK(same_bits(y, y0));
      for (const float* m : {static_cast<const float*>(ab.data()), static_cast<const float*>(nullptr)}) {
        bn::channel_sums<bn::SumKind::Grad, C>(g, x.data(), dy.data(), m, k.data(), sc);
        bn::channel_sums<bn::SumKind::Grad, 0>(g, x.data(), dy.data(), m, k.data(), sc0);
        CHECK(sc.sums == sc0.sums);
        // input_gradient<C> and <0> on the same x and dy (float or bf16
        // bits), into float dx (o, o0) or its bf16 bits (ob, ob0)
        auto both = [&](const auto* xp, const auto* dyp, float* o, float* o0, std::uint16_t* ob = nullptr,
                        std::uint16_t* ob0 = nullptr) {
          bn::input_gradient<C>(g, xp, dyp, m, k.data(), A.data(), Bc.data(), D.data(), o, ob);
          bn::input_gradient<0>(g, xp, dyp, m, k.data(), A.data(), Bc.data(), D.data(), o0, ob0);
        };
        both(x.data(), dy.data(), dx.data(), dx0.data());
        CHECK(same_bits(dx, dx0));
        // in place (dy == dx), as the float backward without a bf16 dx runs it
        std::vector<float> io(dy), io0(dy);
        bn::input_gradient<C>(g, x.data(), io.data(), m, k.data(), A.data(), Bc.data(), D.data(), io.data());
        bn::input_gradient<0>(g, x.data(), io0.data(), m, k.data(), A.data(), Bc.data(), D.data(),
                              io0.data());
        CHECK(same_bits(io, dx0));
        CHECK(same_bits(io0, dx0));
        // x and dy as bf16 bits (the bf16 step's), dx as float and as bf16
        // bits; each output filled with a different value first, so that an
        // element left unwritten differs
        std::vector<std::uint16_t> xb(g.size()), dyb(g.size()), dxb(g.size()), dxb0(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) {
          xb[i] = backend::host::bf16_bits(x[i]);
          dyb[i] = backend::host::bf16_bits(dy[i]);
        }
        std::fill(dx.begin(), dx.end(), 1.f);
        std::fill(dx0.begin(), dx0.end(), 2.f);
        both(xb.data(), dyb.data(), dx.data(), dx0.data());
        CHECK(same_bits(dx, dx0));
        std::size_t differ = 0;  // bf16 x and dy changed dx: not the float case again
        for (std::size_t i = 0; i < g.size(); ++i) differ += dx0[i] != io0[i];
        CHECK(differ > g.size() / 2);
        auto bf16_dx = [&](const auto* xp) {  // from dy's bits, x bf16 or float
          std::fill(dxb.begin(), dxb.end(), std::uint16_t(1));
          std::fill(dxb0.begin(), dxb0.end(), std::uint16_t(2));
          both(xp, dyb.data(), nullptr, nullptr, dxb.data(), dxb0.data());
          CHECK(dxb == dxb0);
        };
        bf16_dx(xb.data());
        bf16_dx(x.data());
      }
    });
  }
}

// Eltwise::add_pooled (a residual sum whose other branch is ResNet's
// downsampling shortcut, its gradient formed on the fly from the padded
// output gradient) against the two passes it replaces: Pool2d's backward of
// the padded gradient (backward_padded), then add_masked_bits / add_masked
// / add: the same bits, with every mask kind, on a map whose last row and
// column lie outside every 2x2 window (their pooled gradient 0).
TEST_CASE("add_pooled forms the pooled shortcut's gradient in the sum, as the pool's backward and the sum",
          "[backend][onednn][pool]") {
  Device<B> dev;
  Rng rng = Rng::stream(37, 1);
  const std::size_t n = 3, c = 16, h = 7, w = 9, before = 8, channels = 32;
  const ConvGeom pg = ConvGeom::make(DataFormat::NHWC, Shape{n, c, h, w}, c, 2, 2, Padding::Valid);
  const ChannelGeom g{DataFormat::NHWC, n, c, h, w};
  const std::size_t size = g.size(), padded = n * pg.oh * pg.ow * channels;
  REQUIRE(ops::Pool2d<B, float>::pads_in_place(pg, PoolKind::Avg));
  const auto a = random_vec(rng, size), gy = random_vec(rng, padded), relu_y = random_vec(rng, size);
  std::vector<std::uint16_t> bits(size / 16);
  for (std::size_t i = 0; i < bits.size(); ++i)
    bits[i] = backend::host::positive_bits(relu_y.data() + 16 * i);
  ops::Pool2d<B, float> pool;
  ops::Eltwise<B, float> add;
  auto other = poisoned(size);
  pool.backward_padded(dev, pg, gy.data() + before, channels, other.data());
  for (int mask = 0; mask < 3; ++mask) {
    INFO("mask " << mask);
    auto want = poisoned(size), got = poisoned(size);
    if (mask == 0)
      add.add(dev, size, a.data(), other.data(), want.data(), false);
    else if (mask == 1)
      add.add_masked_bits(dev, size, a.data(), other.data(), bits.data(), want.data());
    else
      add.add_masked(dev, size, a.data(), other.data(), relu_y.data(), want.data());
    add.add_pooled(dev, g, a.data(), gy.data() + before, channels, 2, mask == 1 ? bits.data() : nullptr,
                   mask == 2 ? relu_y.data() : nullptr, got.data());
    CHECK(std::memcmp(got.data(), want.data(), size * sizeof(float)) == 0);
  }
  auto out = poisoned(size);  // fewer padded channels than the sum's: refused
  CHECK_THROWS_AS(add.add_pooled(dev, g, a.data(), gy.data(), 8, 2, nullptr, nullptr, out.data()),
                  ConfigError);
}
