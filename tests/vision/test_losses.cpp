// vision/losses.hpp and GatysLoss: Gram, content, style and total-variation
// values against hand computations on tiny tensors (every Gemm path and both
// data formats), then the gradient of the total loss with respect to the
// image against central differences through a small random VGG-shaped net
// (double, reference backend), and oneDNN against the reference.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/vision/style_transfer.hpp>
#include <cifarnet/demo/images.hpp>
#include "instances/vgg19.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

using namespace cifarnet;
using namespace cifarnet::vision;

namespace {
/// F with M = 2 positions (h = 1, w = 2) and N = 2 channels: rows (1, 2) and (3, 4).
template <class T>
Tensor<T> tiny(DataFormat fmt) {
  Tensor<T> f = make_tensor<T>({1, 2, 1, 2}, fmt);
  const Shape s{1, 2, 1, 2};
  const T v[2][2] = {{1, 2}, {3, 4}};  // [position][channel]
  for (std::size_t p = 0; p < 2; ++p)
    for (std::size_t c = 0; c < 2; ++c) f.data()[offset(s, fmt, 0, c, 0, p)] = v[p][c];
  return f;
}

template <class B, class T>
void check_hand_values(DataFormat fmt) {
  const Tensor<T> f = tiny<T>(fmt);
  std::vector<T> g;
  gram_matrix<B>(f, fmt, g);
  CHECK(g == std::vector<T>{10, 14, 14, 20});

  // Style: A = I, G − A = [[9, 14], [14, 19]], Σ² = 834, (2·N·M)² = 64.
  GramTarget<T> a;
  a.m = a.n = 2;
  a.a = {1, 0, 0, 1};
  std::vector<T> work;
  Tensor<T> df(f.shape());
  std::fill(df.begin(), df.end(), T(1));  // gradients are added: start from 1
  CHECK(style_layer_loss<B>(f, fmt, a, work, df.data(), 2.0) == Approx(834.0 / 64.0));
  // dE/dF = 4·F(G − A)/64 = [[37, 52], [83, 118]] / 16, times scale 2, plus the 1 already there.
  const Shape s{1, 2, 1, 2};
  const double want[2][2] = {{37, 52}, {83, 118}};
  for (std::size_t p = 0; p < 2; ++p)
    for (std::size_t c = 0; c < 2; ++c)
      CHECK(double(df.data()[offset(s, fmt, 0, c, 0, p)]) == Approx(1.0 + 2.0 * want[p][c] / 16.0));
}
}  // namespace

TEST_CASE("Gram matrix and style loss match hand computations on every Gemm path and format",
          "[vision][loss]") {
  for (auto fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    INFO("format " << to_string(fmt));
    check_hand_values<backend::Reference, double>(fmt);
    check_hand_values<backend::Reference, float>(fmt);
    check_hand_values<backend::OneDnn, float>(fmt);
  }
  Tensor<double> two = make_tensor<double>({2, 2, 1, 2}, DataFormat::NHWC);
  std::vector<double> g;
  CHECK_THROWS_AS(gram_matrix<backend::Reference>(two, DataFormat::NHWC, g), ShapeError);
}

TEST_CASE("Content loss is sum((F - P)^2) / (4 size(P)) with gradient (F - P) / (2 size(P))",
          "[vision][loss]") {
  Tensor<double> f = make_tensor<double>({1, 1, 2, 2}, DataFormat::NHWC), p = f;
  f.data()[0] = 1, f.data()[1] = 2, f.data()[2] = 3, f.data()[3] = 4;
  p.data()[0] = 0, p.data()[1] = 2, p.data()[2] = 5, p.data()[3] = 4;
  std::vector<double> d(4, 0.0);
  CHECK(content_loss(f, p, d.data(), 1.0) == Approx(5.0 / 16.0));
  CHECK(d == std::vector<double>{0.125, 0.0, -0.25, 0.0});
  Tensor<double> q = make_tensor<double>({1, 2, 2, 2}, DataFormat::NHWC);
  CHECK_THROWS_AS(content_loss(f, q), ShapeError);
}

TEST_CASE("Total variation sums absolute neighbour differences like tf.image.total_variation",
          "[vision][loss]") {
  const double x[4] = {1, 3, 4, 8};  // 2 x 2 x 1: [[1, 3], [4, 8]]
  double d[4] = {0, 0, 0, 0};
  CHECK(total_variation(x, 2, 2, 1, d, 1.0) == 14.0);  // |4−1| + |8−3| + |3−1| + |8−4|
  CHECK(d[0] == -2.0);
  CHECK(d[1] == 0.0);
  CHECK(d[2] == 0.0);
  CHECK(d[3] == 2.0);
}

namespace {
template <class M>
void randomize(M& net, std::uint64_t seed) {
  net.reset(seed);  // He-normal weights (vgg19_random_options), zero biases
  Rng rng(seed + 1);
  net.parameters().for_each([&](const ParamInfo& p, typename M::Scalar* v, typename M::Scalar*) {
    if (p.name.find("biases") != std::string::npos)
      for (std::size_t i = 0; i < p.size; ++i) v[i] = typename M::Scalar(rng.uniform(-0.5, 0.5));
  });
}
StyleTransferOptions small_options(std::size_t h, std::size_t w) {
  StyleTransferOptions o;
  o.height = h;
  o.width = w;
  o.tv_weight = 0.05;  // exercise the optional term too
  return o;
}
template <class T>
std::vector<T> centred(const cifarnet::Image& img) {
  std::vector<T> v(img.data.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = T(img.data[i] - kVgg19MeanPixel[i % 3]);
  return v;
}
}  // namespace

TEST_CASE(
    "The gradient of the total loss w.r.t. the image matches finite differences through a VGG-shaped net",
    "[vision][loss][gradcheck]") {
  const std::size_t H = 18, W = 22;
  // The seed's layers, and layers that repeat (the content layer is a style
  // layer, a style layer is listed twice): a tap's first loss writes its
  // gradient, the others add to it.
  StyleTransferOptions repeat = small_options(H, W);
  repeat.content_layer = "conv4_1";
  repeat.style_layers = {"conv1_1", "conv4_1", "conv1_1"};
  repeat.style_layer_weights = {0.5, 1.0, 2.0};
  for (const StyleTransferOptions& o : {small_options(H, W), repeat})
    for (auto fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
      INFO("format " << to_string(fmt) << ", content layer " << o.content_layer);
      using M = Model<Vgg19Features<32>, backend::Reference, double>;
      M net({3, H, W}, fmt, vgg19_random_options(), 3, /*input_gradient=*/true);
      randomize(net, 3);
      GatysLoss<M> loss(net, o);
      loss.set_content(centred<double>(builtin_content_image(H, W)).data());
      loss.set_style(centred<double>(builtin_style_image(H, W)).data());
      Rng rng(5);
      std::vector<double> x(H * W * 3), g(x.size());
      for (auto& v : x) v = rng.uniform(-100, 100);
      const LossParts p = loss.evaluate(x.data(), g.data());
      CHECK(p.content > 0);
      CHECK(p.style > 0);
      CHECK(p.tv > 0);
      CHECK(p.total == Approx(0.01 * p.content + p.style + 0.05 * p.tv));
      CHECK((net.parameters().grads() == 0).all());  // frozen weights: no weight gradient computed
      const double eps = 1e-4;
      for (int k = 0; k < 40; ++k) {
        const std::size_t i = std::size_t(rng.uniform_int(x.size()));
        const double keep = x[i];
        x[i] = keep + eps;
        const double fp = loss.evaluate(x.data()).total;
        x[i] = keep - eps;
        const double fm = loss.evaluate(x.data()).total;
        x[i] = keep;
        const double numeric = (fp - fm) / (2 * eps);
        INFO("pixel " << i << ": analytic " << g[i] << " numeric " << numeric);
        CHECK(g[i] == Approx(numeric).epsilon(1e-5).margin(1e-7 * std::fabs(p.total)));
      }
    }
}

namespace {
/// The Gatys losses and image gradient of a small VGG-shaped net (20x26,
/// format `fmt`) on the reference backend in double and on oneDNN in float
/// with the convolution precision `prec` (same weights and image).
struct GatysPair {
  LossParts ref, dnn;
  double grad_err = 0;  ///< relative L2 error of oneDNN's image gradient
};
GatysPair gatys_against_reference(ConvPrecision prec, DataFormat fmt = DataFormat::NHWC) {
  const std::size_t H = 20, W = 26;
  using R = Model<Vgg19Features<32>, backend::Reference, double>;
  using O = Model<Vgg19Features<32>, backend::OneDnn, float>;
  R ref({3, H, W}, fmt, vgg19_random_options(), 8, true);
  O dnn({3, H, W}, fmt, vgg19_random_options().with_conv_precision(prec), 8, true);
  randomize(ref, 8);
  auto& pr = ref.parameters();
  auto& po = dnn.parameters();
  for (std::size_t id = 0; id < pr.count(); ++id)
    for (std::size_t i = 0; i < pr.info(id).size; ++i) po.value(id)[i] = float(pr.value(id)[i]);
  StyleTransferOptions o = small_options(H, W);
  GatysLoss<R> lr(ref, o);
  GatysLoss<O> lo(dnn, o);
  const cifarnet::Image c = builtin_content_image(H, W), s = builtin_style_image(H, W);
  lr.set_content(centred<double>(c).data());
  lr.set_style(centred<double>(s).data());
  lo.set_content(centred<float>(c).data());
  lo.set_style(centred<float>(s).data());
  Rng rng(2);
  std::vector<double> xd(H * W * 3), gd(xd.size());
  std::vector<float> xf(xd.size()), gf(xd.size());
  // Two steps' images: the second evaluation is compared (nothing of the
  // first may leak into it, such as a product's stale rounding).
  GatysPair p;
  for (int step = 0; step < 2; ++step) {
    for (std::size_t i = 0; i < xd.size(); ++i) xf[i] = float(xd[i] = double(float(rng.uniform(-60, 60))));
    p.ref = lr.evaluate(xd.data(), gd.data());
    p.dnn = lo.evaluate(xf.data(), gf.data());
  }
  double num = 0, den = 0;
  for (std::size_t i = 0; i < gd.size(); ++i) {
    num += (double(gf[i]) - gd[i]) * (double(gf[i]) - gd[i]);
    den += gd[i] * gd[i];
  }
  p.grad_err = std::sqrt(num / den);
  return p;
}
}  // namespace

TEST_CASE("oneDNN (float) and the reference (double) agree on the Gatys losses and gradient",
          "[vision][loss]") {
  const GatysPair p = gatys_against_reference(ConvPrecision::F32);
  CHECK(p.dnn.content == Approx(p.ref.content).epsilon(1e-4));
  CHECK(p.dnn.style == Approx(p.ref.style).epsilon(1e-3));
  CHECK(p.dnn.total == Approx(p.ref.total).epsilon(1e-3));
  CHECK(p.grad_err < 1e-3);
}

namespace {
/// max |C - R| / max over entries of sum_k |a_ik b_kj| (the product's scale),
/// C and R both m x n.
template <class T>
double scaled_error(const std::vector<float>& c, const std::vector<T>& r, const std::vector<double>& scale) {
  double e = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    e = std::max(e, std::fabs(double(c[i]) - double(r[i])) / scale[i]);
  return e;
}
}  // namespace

TEST_CASE("bf16 Gram products: oneDNN's run_bf16 is the product of the rounded factors, summed in float",
          "[vision][loss][bf16]") {
  // The Gram product G = FᵀF and the style gradient F·(G − A) at a toy size
  // and at VGG-19 conv2_1's size in the example (M = 125·166 positions, N =
  // 128), against the reference backend in double on the same bf16-rounded
  // factors (only float summation may differ: bound 2e-6 of the product's
  // scale, measured at most 3.7e-7) and against the float product (the
  // rounding itself: bound 8e-3, measured 7e-4 / 8e-5 for G and 2.6e-3 /
  // 1.4e-3 for the gradient at the two sizes; NUMERICS.md).
  for (const auto& [M, N] : {std::pair<std::size_t, std::size_t>{37, 5}, {20750, 128}}) {
    Rng rng(M);
    std::vector<float> f(M * N), w(N * N);
    for (float& v : f) v = float(rng.uniform(0, 3));  // ReLU outputs are >= 0
    for (float& v : w) v = float(rng.uniform(-1, 1));
    std::vector<double> fd(f.begin(), f.end()), wd(w.begin(), w.end());
    Device<backend::OneDnn> dev;
    Device<backend::Reference> rdev;
    ops::Gemm<backend::OneDnn, float> op;
    ops::Gemm<backend::Reference, double> ref;
    const bool bf16 = backend::onednn::cpu_has_bf16_convolutions();
    // Gram: G = FᵀF (N x N).
    std::vector<float> g(N * N), g32(N * N);
    std::vector<double> gr(N * N), scale(N * N);
    op.run_bf16(dev, true, false, N, N, M, 1.0f, f.data(), f.data(), 0.0f, g.data());
    op.run(dev, true, false, N, N, M, 1.0f, f.data(), f.data(), 0.0f, g32.data());
    ref.run_bf16(rdev, true, false, N, N, M, 1.0, fd.data(), fd.data(), 0.0, gr.data());
    std::vector<double> fa(fd);  // |F| = F here; scale = Σ_k |f_ki||f_kj| = G in double
    ref.run(rdev, true, false, N, N, M, 1.0, fa.data(), fa.data(), 0.0, scale.data());
    INFO("M = " << M << ", N = " << N << ", oneDNN bf16 kernels: " << bf16);
    if (bf16) {
      CHECK(scaled_error(g, gr, scale) < 2e-6);
      CHECK(scaled_error(g, g32, scale) < 8e-3);
      CHECK(scaled_error(g, g32, scale) > 0);  // it did round
    } else {
      CHECK((g == g32));  // no bf16 kernels: the float product
    }
    // Gradient: dF (M x N) = 0.5·dF + 0.25·F·W, accumulated as the loss does.
    std::vector<float> d(M * N, 1.0f), d32(M * N, 1.0f);
    std::vector<double> dr(M * N, 1.0), ds(M * N, 0.0), wa(N * N);
    for (std::size_t i = 0; i < wa.size(); ++i) wa[i] = std::fabs(wd[i]);
    op.run_bf16(dev, false, false, M, N, N, 0.25f, f.data(), w.data(), 0.5f, d.data());
    op.run(dev, false, false, M, N, N, 0.25f, f.data(), w.data(), 0.5f, d32.data());
    ref.run_bf16(rdev, false, false, M, N, N, 0.25, fd.data(), wd.data(), 0.5, dr.data());
    ref.run(rdev, false, false, M, N, N, 0.25, fa.data(), wa.data(), 0.0, ds.data());
    for (double& v : ds) v += 0.5;  // the scale of 0.5·1 + 0.25·Σ|f||w|
    if (bf16) {
      CHECK(scaled_error(d, dr, ds) < 2e-6);
      CHECK(scaled_error(d, d32, ds) < 8e-3);
    } else {
      CHECK((d == d32));
    }
    // The loss's order: the Gram product, then the gradient reusing F's
    // rounding (`reuse`), in both operand positions (NHWC: F is A; NCHW: Fᵀ
    // is B): the same bits as rounding afresh.
    std::vector<float> again(M * N, 1.0f);
    op.run_bf16(dev, true, false, N, N, M, 1.0f, f.data(), f.data(), 0.0f, g.data());
    op.run_bf16(dev, false, false, M, N, N, 0.25f, f.data(), w.data(), 0.5f, again.data(), true);
    CHECK((again == d));  // (parenthesised: no printout of the vectors)
    std::vector<float> wt(N * N), dt(N * M, 1.0f), dt_again(N * M, 1.0f);  // (Wᵀ·Fᵀ = (F·W)ᵀ)
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t j = 0; j < N; ++j) wt[j * N + i] = w[i * N + j];
    op.run_bf16(dev, false, true, N, M, N, 0.25f, wt.data(), f.data(), 0.5f, dt.data());
    op.run_bf16(dev, true, false, N, N, M, 1.0f, f.data(), f.data(), 0.0f, g.data());
    op.run_bf16(dev, false, true, N, M, N, 0.25f, wt.data(), f.data(), 0.5f, dt_again.data(), true);
    CHECK((dt_again == dt));
    // Only the call just before is reused: W, rounded two calls ago and
    // changed in place since (as the loss's G − A buffer is from layer to
    // layer and step to step), is rounded afresh.
    std::vector<float> fresh(M * N, 1.0f), reused(M * N, 1.0f);
    op.run_bf16(dev, false, false, M, N, N, 0.25f, f.data(), w.data(), 0.5f, reused.data());  // F and W
    op.run_bf16(dev, true, false, N, N, M, 1.0f, f.data(), f.data(), 0.0f, g.data());         // F alone
    for (float& v : w) v = -v;                                                                // W changes
    ops::Gemm<backend::OneDnn, float>().run_bf16(dev, false, false, M, N, N, 0.25f, f.data(), w.data(), 0.5f,
                                                 fresh.data());
    std::fill(reused.begin(), reused.end(), 1.0f);
    op.run_bf16(dev, false, false, M, N, N, 0.25f, f.data(), w.data(), 0.5f, reused.data(), true);
    CHECK((reused == fresh));
    for (float& v : w) v = -v;  // back to W
    double te = 0;              // the transposed form is the same product
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        te = std::max(te, std::fabs(double(dt[j * M + i]) - double(d[i * N + j])) / ds[i * N + j]);
    CHECK(te < 2e-6);
  }
}

TEST_CASE("Gatys losses with bf16 products on oneDNN against the reference (double)",
          "[vision][loss][bf16]") {
  // The whole loss with ConvPrecision::BF16 (bf16 convolutions and Gram
  // products) against the reference in double: measured 0.59 % (content),
  // 0.56 % (style) and 0.83 % (the image gradient's relative L2 error);
  // bounds 2 %, 2 % and 3 % (NUMERICS.md, "Gatys in bf16").
  for (const DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    const GatysPair p = gatys_against_reference(ConvPrecision::BF16, fmt);
    INFO(to_string(fmt) << ": content " << p.dnn.content << " vs " << p.ref.content << ", style "
                        << p.dnn.style << " vs " << p.ref.style << ", gradient relative L2 error "
                        << p.grad_err);
    CHECK(p.dnn.content == Approx(p.ref.content).epsilon(2e-2));
    CHECK(p.dnn.style == Approx(p.ref.style).epsilon(2e-2));
    CHECK(p.grad_err < 3e-2);
  }
}

TEST_CASE("GatysLoss refuses layers that are not taps and images of the wrong size", "[vision][loss]") {
  using M = Model<Vgg19Features<32>, backend::Reference, double>;
  M net({3, 16, 16}, DataFormat::NHWC, {}, 1, true);
  StyleTransferOptions o = small_options(16, 16);
  o.content_layer = "conv5_2";  // beyond Vgg19Features
  CHECK_THROWS_WITH(GatysLoss<M>(net, o), Catch::Contains("'conv5_2' is not a tap"));
  CHECK_THROWS_AS(GatysLoss<M>(net, small_options(16, 17)), ShapeError);
  o = small_options(16, 16);
  o.style_layer_weights.pop_back();
  CHECK_THROWS_WITH(GatysLoss<M>(net, o), Catch::Contains("style_layer_weights"));
}
