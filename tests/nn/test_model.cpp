// Model behaviour: names, shape errors, TF padding, BN statistics,
// initialization, losses, taps, and the backward pass skipped before the
// first parameter (test_model_training.cpp and test_grad_sync.cpp: small
// ResNets on both CPU backends).
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/weight_decay.hpp>
#include "instances/resnet.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

using namespace cifarnet;

namespace {
/// Backward calls booked under `name`; a name the profile does not hold
/// fails the test unless `absent_is_zero` (a layer whose backward never ran).
std::size_t backward_calls(const Profiler& p, const std::string& name, bool absent_is_zero = false) {
  for (const auto& e : p.entries())
    if (e.name == name) return e.backward_calls;
  if (!absent_is_zero) FAIL("no profile entry '" << name << "'");
  return 0;
}
}  // namespace

TEST_CASE("ResNet-20 parameters have stable hierarchical names", "[nn][names]") {
  Model<ResNetCifar<>, backend::Reference> net({3, 32, 32}, DataFormat::NCHW, resnet_options(20));
  auto& P = net.parameters();
  std::set<std::string> names;
  for (const auto& p : P.infos()) names.insert(p.name);
  CHECK(names.count("stem/conv1/weights"));
  CHECK(names.count("stem/bn1/gamma"));
  CHECK(names.count("stage1/block0/conv1/weights"));
  CHECK(names.count("stage1/block2/bn2/moving_variance"));
  CHECK(names.count("stage3/block2/conv2/weights"));
  CHECK(names.count("head/dense1/weights"));
  CHECK(names.count("head/dense1/biases"));
  CHECK_FALSE(names.count("stage1/block3/conv1/weights"));
  // 1 stem conv + 2 per block * 9 blocks = 19 convs + 1 dense = ResNet-20.
  std::size_t convs = 0, bns = 0;
  for (const auto& n : names) {
    convs += n.size() > 8 && n.substr(n.size() - 8) == "/weights" && n.find("conv") != std::string::npos;
    bns += n.size() > 6 && n.substr(n.size() - 6) == "/gamma";
  }
  CHECK(convs == 19);
  CHECK(bns == 19);
  const auto& w = P.info(P.id("stage2/block0/conv1/weights"));
  CHECK(w.shape == std::vector<std::size_t>{3, 3, 16, 32});
  CHECK(P.info(P.id("head/dense1/weights")).shape == std::vector<std::size_t>{64, 11});
  CHECK_FALSE(P.info(P.id("stage1/block0/bn1/moving_mean")).trainable);
  // the seed decays every trainable variable: the default weight decay does too
  const optim::WeightDecay<float> wd(P, optim::WeightDecayOptions(2e-4));
  CHECK(wd.decays("stage1/block0/bn1/gamma"));
  CHECK(wd.decays("head/dense1/biases"));
  CHECK_FALSE(wd.decays("stage1/block0/bn1/moving_mean"));
  std::size_t trainable = 0;
  for (const auto& p : P.infos()) trainable += p.trainable;
  CHECK(wd.decayed().size() == trainable);
  CHECK(net.output_shape(7) == Shape{7, 11, 1, 1});
}

TEST_CASE("A wrong input shape is an error naming the layer and both shapes", "[nn][errors]") {
  using Net = Sequential<Conv2d<3, 4, 3>, ReLU, Flatten, Dense<0, 2>>;
  Model<Net, backend::Reference> net({3, 8, 8});
  Tensor<float> bad = make_tensor<float>({2, 4, 8, 8}, DataFormat::NCHW);
  try {
    net.forward(bad);
    FAIL("no exception");
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("[n=2, c=3, h=8, w=8]"));
    CHECK_THAT(msg, Catch::Contains("[n=2, c=4, h=8, w=8]"));
  }
  // A layer that cannot take its input is reported when the model is built.
  using NoFlatten = Sequential<Conv2d<3, 4, 3>, Dense<0, 2>>;
  try {
    Model<NoFlatten, backend::Reference> m({3, 8, 8});
    FAIL("no exception");
  } catch (const ShapeError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("dense1") && Catch::Contains("Flatten"));
  }
  using WrongIn = Sequential<Conv2d<3, 4, 3>>;
  CHECK_THROWS_WITH((Model<WrongIn, backend::Reference>({5, 8, 8})),
                    Catch::Contains("conv1") && Catch::Contains("expects 3 input channels"));
}

TEST_CASE("TF padding rules give the seed's output sizes", "[nn][padding]") {
  auto s = axis_padding(32, 3, 2, Padding::Same);
  CHECK(s.out == 16);
  CHECK(s.before == 0);
  CHECK(s.after == 1);  // TF puts the extra pad after
  auto e = axis_padding(32, 3, 2, Padding::Explicit);
  CHECK(e.out == 16);
  CHECK(e.before == 1);
  CHECK(e.after == 1);
  auto v = axis_padding(7, 3, 2, Padding::Valid);
  CHECK(v.out == 3);
  auto p = axis_padding(24, 3, 2, Padding::Same);  // the tutorial's pools: 24 -> 12 -> 6
  CHECK(p.out == 12);
  CHECK(axis_padding(12, 3, 2, Padding::Same).out == 6);
}

TEST_CASE("Batch norm updates moving statistics with TF's decay and Bessel correction", "[nn][bn]") {
  using Net = Sequential<BatchNorm2d<2>>;
  NetOptions o;
  o.bn_decay = 0.9;
  Model<Net, backend::Reference, double> net({2, 1, 2}, DataFormat::NCHW, o);
  Tensor<double> x = make_tensor<double>({2, 2, 1, 2}, DataFormat::NCHW);
  // channel 0: 1, 2, 3, 4 (mean 2.5, biased var 1.25); channel 1: 0, 0, 4, 4 (mean 2, var 4)
  const double v[] = {1, 2, 0, 0, 3, 4, 4, 4};
  std::copy(v, v + 8, x.data());
  const auto& y = net.forward(x, Mode::Train);
  auto& P = net.parameters();
  const double* mm = P.value(P.id("bn1/moving_mean"));
  const double* mv = P.value(P.id("bn1/moving_variance"));
  CHECK(mm[0] == Approx(0.1 * 2.5));
  CHECK(mm[1] == Approx(0.1 * 2.0));
  CHECK(mv[0] == Approx(0.9 + 0.1 * 1.25 * 4.0 / 3.0));
  CHECK(mv[1] == Approx(0.9 + 0.1 * 4.0 * 4.0 / 3.0));
  CHECK(y.data()[0] == Approx((1 - 2.5) / std::sqrt(1.25 + 1e-5)));
  // Inference uses the moving statistics.
  const auto& z = net.forward(x, Mode::Infer);
  CHECK(z.data()[0] == Approx((1 - mm[0]) / std::sqrt(mv[0] + 1e-5)));
  CHECK_THROWS_AS(net.backward(z), Error);  // backward needs a Train forward
}

TEST_CASE("Initialization is reproducible from the seed and follows TF's initializers", "[nn][init]") {
  using Net = Sequential<Conv2d<3, 8, 3>, Flatten, Dense<0, 10>>;
  Model<Net, backend::Reference> a({3, 4, 4}, DataFormat::NCHW, {}, 42),
      b({3, 4, 4}, DataFormat::NCHW, {}, 42), c({3, 4, 4}, DataFormat::NCHW, {}, 43);
  CHECK((a.parameters().values() == b.parameters().values()).all());
  CHECK_FALSE((a.parameters().values() == c.parameters().values()).all());
  auto& P = a.parameters();
  const auto& w = P.info(P.id("conv1/weights"));
  const double limit = std::sqrt(6.0 / (27.0 + 72.0));  // Glorot: fan_in 3*3*3, fan_out 3*3*8
  double mx = 0;
  for (std::size_t i = 0; i < w.size; ++i)
    mx = std::max(mx, double(std::fabs(P.value(P.id("conv1/weights"))[i])));
  CHECK(mx <= limit);
  CHECK(mx > 0.8 * limit);
  // Overrides by name pattern, as the tutorial's truncated normals.
  NetOptions o;
  o.init("conv1/weights", Initializer::truncated_normal(5e-2)).init("*/biases", Initializer::constant(0.1));
  Model<Net, backend::Reference> t({3, 4, 4}, DataFormat::NCHW, o, 1);
  auto& Q = t.parameters();
  const float* tw = Q.value(Q.id("conv1/weights"));
  double sum2 = 0;
  for (std::size_t i = 0; i < 216; ++i) {
    CHECK(std::fabs(tw[i]) <= 2 * 5e-2);
    sum2 += double(tw[i]) * tw[i];
  }
  CHECK(std::sqrt(sum2 / 216) == Approx(0.88 * 5e-2).epsilon(0.2));  // truncation shrinks the stddev to ~0.88
  CHECK(Q.value(Q.id("dense1/biases"))[3] == Approx(0.1f));
}

TEST_CASE("Softmax cross-entropy is stable and its gradient is softmax minus one-hot", "[nn][loss]") {
  Tensor<double> logits = make_tensor<double>({2, 3, 1, 1}, DataFormat::NCHW);
  const double z[] = {1000.0, 0.0, -1000.0, 1.0, 2.0, 3.0};
  std::copy(z, z + 6, logits.data());
  Tensor<double> d;
  const double loss = softmax_cross_entropy(logits, {0, 1}, &d);
  const double l2 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 2.0;
  CHECK(loss == Approx((0.0 + l2) / 2));
  CHECK(std::isfinite(loss));
  CHECK(d.data()[0] == Approx(0.0).margin(1e-12));
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(d.data()[4] == Approx((std::exp(2.0) / s - 1) / 2));
  CHECK(argmax(logits) == std::vector<std::int32_t>{0, 2});
  CHECK(count_correct(logits, {0, 1}) == 1);
  CHECK_THROWS_AS(softmax_cross_entropy(logits, {0, 3}), DataError);
  CHECK_THROWS_AS(softmax_cross_entropy(logits, {0}), ShapeError);
  // ties count as hits in TF's in_top_k
  Tensor<double> tie = make_tensor<double>({1, 2, 1, 1}, DataFormat::NCHW);
  tie.data()[0] = tie.data()[1] = 0.5;
  CHECK(in_top_1(tie, {1})[0]);
}

TEST_CASE("Weight decay is wd * sum(v^2)/2 with gradient wd * v", "[nn][loss]") {
  using Net = Sequential<Conv2d<1, 1, 1, 1, Padding::Same, WithBias>, BatchNorm2d<1>>;
  Model<Net, backend::Reference, double> net({1, 1, 1});
  auto& P = net.parameters();
  P.value(P.id("conv1/weights"))[0] = 2.0;
  P.value(P.id("conv1/biases"))[0] = -1.0;
  P.value(P.id("bn1/gamma"))[0] = 3.0;
  P.value(P.id("bn1/beta"))[0] = 0.5;
  P.zero_grad();
  const double l = optim::weight_decay(P, 0.1);
  CHECK(l == Approx(0.1 * (4 + 1 + 9 + 0.25) / 2));
  CHECK(P.grad(P.id("bn1/gamma"))[0] == Approx(0.3));
  CHECK(P.grad(P.id("conv1/biases"))[0] == Approx(-0.1));
  // Restrict decay by name, as the tutorial does for local3/local4.
  P.zero_grad();
  optim::WeightDecay<double> weights_only(
      P, optim::WeightDecayOptions(0.1).decay(optim::Selection({"*/weights"})));
  CHECK(weights_only.apply(P) == Approx(0.1 * 4 / 2));
  CHECK(P.grad(P.id("conv1/weights"))[0] == Approx(0.2));
  CHECK(P.grad(P.id("bn1/gamma"))[0] == 0.0);
}

namespace {
CIFARNET_NAME(mid);
}

TEST_CASE("Taps expose activations and inject gradients (checked by finite differences)", "[nn][tap]") {
  using Net = Sequential<Conv2d<2, 3, 3>, ReLU, Tap<mid>, Conv2d<3, 2, 3, 2>>;
  Model<Net, backend::Reference, double> net({2, 5, 5}, DataFormat::NHWC, {}, 4, /*input_gradient=*/true);
  net.set_weight_gradients(false);  // frozen weights, as style transfer
  Rng rng(9);
  Tensor<double> x = make_tensor<double>(net.input_shape(2), DataFormat::NHWC);
  for (auto& v : x) v = rng.uniform(-1, 1);
  const auto& y = net.forward(x);
  Tensor<double> g(y.shape()), h;
  for (auto& v : g) v = rng.uniform(-1, 1);
  h = net.activation("mid");
  for (auto& v : h) v = rng.uniform(-1, 1);
  net.tap_gradient("mid") = h;
  const Tensor<double> dx = net.backward(g);
  auto f = [&]() {
    const auto& out = net.forward(x);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out.data()[i] * g.data()[i];
    const auto& a = net.activation("mid");
    for (std::size_t i = 0; i < a.size(); ++i) s += a.data()[i] * h.data()[i];
    return s;
  };
  for (std::size_t i = 0; i < x.size(); i += 7) {
    const double keep = x.data()[i];
    x.data()[i] = keep + 1e-6;
    const double fp = f();
    x.data()[i] = keep - 1e-6;
    const double fm = f();
    x.data()[i] = keep;
    CHECK(dx.data()[i] == Approx((fp - fm) / 2e-6).epsilon(1e-5).margin(1e-8));
  }
  CHECK(net.tap_names() == std::vector<std::string>{"mid"});
  CHECK_THROWS_WITH(net.activation("nope"), Catch::Contains("no tap named 'nope'"));
  // Frozen weights: backward wrote no weight gradient.
  CHECK((net.parameters().grads() == 0).all());
}

TEMPLATE_TEST_CASE("Layers before the first parameter run no backward unless the input gradient is asked for",
                   "[nn][backward]", backend::Reference, backend::OneDnn) {
  // ResNet-8 starts with the parameterless rescale: without input_gradient
  // neither it nor the stem convolution's backward-data pass is needed.
  Model<ResNetCifar<>, TestType> plain({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 5);
  Model<ResNetCifar<>, TestType> with_dx({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 5,
                                         /*input_gradient=*/true);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({4, 3, 32, 32}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.uniform_int(256));
  const std::vector<std::int32_t> y{1, 4, 7, 9};
  Profiler pa, pb;
  plain.set_profiler(&pa);
  with_dx.set_profiler(&pb);
  Tensor<float> d;
  softmax_cross_entropy(plain.forward(x), y, &d);
  const std::size_t dx_plain = plain.backward(d).size();
  softmax_cross_entropy(with_dx.forward(x), y, &d);
  const std::size_t dx_with = with_dx.backward(d).size();
  CHECK(dx_plain == 0);
  CHECK(dx_with == x.size());
  CHECK(backward_calls(pa, "rescale1") == 0);
  CHECK(backward_calls(pb, "rescale1") == 1);
  CHECK(backward_calls(pa, "stem/conv1") == 1);  // its weight gradient is still computed
  // Every parameter gradient is the same either way.
  const auto& ga = plain.parameters().grads();
  const auto& gb = with_dx.parameters().grads();
  REQUIRE(ga.size() == gb.size());
  float scale = 0, diff = 0;  // plain loops: Eigen's AVX-512 maxCoeff trips GCC 12's -Wmaybe-uninitialized
  for (Eigen::Index i = 0; i < gb.size(); ++i) {
    scale = std::max(scale, std::abs(gb[i]));
    diff = std::max(diff, std::abs(ga[i] - gb[i]));
  }
  CHECK(scale > 0);
  CHECK(diff <= 1e-5f * scale);
}

TEST_CASE(
    "A convolution whose weights are frozen and whose bias trains sums its bias gradient alone (oneDNN)",
    "[nn][backward]") {
  // airbench94's whitening: frozen filters, a bias trained for a few
  // epochs. The weights' gradient is not computed (it keeps its stale
  // values, as Parameters::requires_grad says), the bias's equals the full
  // backward's within float rounding, and every other gradient is the
  // same bits (none depends on the skipped pass). Both layouts, fp32 and
  // bf16 convolutions.
  using Net = Sequential<Conv2d<3, 8, 2, 1, Padding::Valid, WithBias>, GELU,
                         Conv2d<8, 16, 3, 1, Padding::Same>, GlobalAvgPool, Dense<16, 10>>;
  for (DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW})
    for (ConvPrecision prec : {ConvPrecision::F32, ConvPrecision::BF16}) {
      INFO((fmt == DataFormat::NHWC ? "NHWC " : "NCHW ") << (prec == ConvPrecision::BF16 ? "bf16" : "fp32"));
      NetOptions o;
      o.conv_precision = prec;
      Model<Net, backend::OneDnn> full({3, 9, 9}, fmt, o, 4), frozen({3, 9, 9}, fmt, o, 4);
      Rng rng(5);
      Tensor<float> x = make_tensor<float>({6, 3, 9, 9}, fmt);
      for (auto& v : x) v = float(rng.uniform_int(256)) / 64.f - 2.f;
      const std::vector<std::int32_t> y{1, 4, 7, 9, 0, 2};
      auto& P = frozen.parameters();
      const std::size_t w = P.id("conv1/weights"), b = P.id("conv1/biases");
      P.set_requires_grad(w, false);
      for (auto* m : {&full, &frozen}) {
        m->parameters().grads().setConstant(7.0f);  // stale values a skipped pass would leave
        Tensor<float> d;
        softmax_cross_entropy(m->forward(x), y, &d);
        m->backward(d);
      }
      const auto& F = full.parameters();
      for (std::size_t i = 0; i < P.info(w).size; ++i) CHECK(P.grad(w)[i] == 7.0f);
      float scale = 0, diff = 0;
      for (std::size_t i = 0; i < P.info(b).size; ++i) {
        scale = std::max(scale, std::abs(F.grad(b)[i]));
        diff = std::max(diff, std::abs(P.grad(b)[i] - F.grad(b)[i]));
      }
      CHECK(scale > 0);
      CHECK(diff <= 1e-5f * scale);
      for (std::size_t id = 0; id < P.count(); ++id) {
        if (id == w || id == b || !P.info(id).trainable) continue;
        INFO(P.info(id).name);
        CHECK(std::equal(P.grad(id), P.grad(id) + P.info(id).size, F.grad(id)));
      }
    }
}

TEMPLATE_TEST_CASE("Parameters that require no gradient end backward below them (Parameters::requires_grad)",
                   "[nn][backward]", backend::Reference, backend::OneDnn) {
  // ResNet-8 with its stem frozen at run time: backward stops at the first
  // block, whose first convolution computes no input gradient, and every
  // other gradient is what the full backward gives. With the model's input
  // gradient asked for, nothing stops. Turned back on, the stem trains again.
  Model<ResNetCifar<>, TestType> net({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 5);
  Model<ResNetCifar<>, TestType> with_dx({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 5,
                                         /*input_gradient=*/true);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({4, 3, 32, 32}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.uniform_int(256));
  const std::vector<std::int32_t> y{1, 4, 7, 9};
  auto run = [&](auto& m) {
    Profiler p;
    m.set_profiler(&p);
    m.parameters().grads().setConstant(7.0f);  // stale values a skipped pass would leave
    Tensor<float> d;
    softmax_cross_entropy(m.forward(x), y, &d);
    m.backward(d);
    m.set_profiler(nullptr);
    return p;
  };
  auto calls = [](const Profiler& p, const std::string& name) { return backward_calls(p, name, true); };
  const Profiler full = run(net);
  const Eigen::ArrayXf g_full = net.parameters().grads();
  auto& P = net.parameters();
  std::vector<std::size_t> stem;
  for (std::size_t id = 0; id < P.count(); ++id)
    if (P.info(id).name.rfind("stem/", 0) == 0 && P.info(id).trainable) stem.push_back(id);
  REQUIRE(stem.size() >= 3);  // conv weights, BN gamma and beta
  CHECK(P.first_requiring_grad() == 0);
  for (auto id : stem) P.set_requires_grad(id, false);
  CHECK_FALSE(P.requires_grad(stem[0]));
  CHECK(P.first_requiring_grad() > stem.back());
  CHECK_THROWS_AS(P.set_requires_grad(P.id("stem/bn1/moving_mean"), true), Error);  // state has no gradient
  const Profiler frozen = run(net);
  CHECK(calls(full, "stem/conv1") == 1);
  CHECK(calls(frozen, "stem/conv1") == 0);
  CHECK(calls(frozen, "stem/bn1") == 0);
  const Eigen::ArrayXf g_frozen = net.parameters().grads();
  float scale = 0, diff = 0;
  for (std::size_t id = 0; id < P.count(); ++id) {
    const auto& info = P.info(id);
    if (!info.trainable) continue;
    const bool is_stem = std::find(stem.begin(), stem.end(), id) != stem.end();
    for (std::size_t i = 0; i < info.size; ++i) {
      const std::size_t k = info.offset + i;
      if (is_stem) {
        CHECK(g_frozen[Eigen::Index(k)] == 7.0f);  // not computed: left as it was
        continue;
      }
      scale = std::max(scale, std::abs(g_full[Eigen::Index(k)]));
      diff = std::max(diff, std::abs(g_frozen[Eigen::Index(k)] - g_full[Eigen::Index(k)]));
    }
  }
  CHECK(scale > 0);
  CHECK(diff <= 1e-5f * scale);
  // The input gradient asked for: the frozen stem still passes it down.
  for (auto id : stem) with_dx.parameters().set_requires_grad(id, false);
  const Profiler wdx = run(with_dx);
  CHECK(calls(wdx, "stem/conv1") == 1);
  // Back on: the stem's gradients are computed again.
  for (auto id : stem) P.set_requires_grad(id, true);
  CHECK(P.first_requiring_grad() == 0);
  const Profiler again = run(net);
  CHECK(calls(again, "stem/conv1") == 1);
  const Eigen::ArrayXf g_again = net.parameters().grads();
  float diff2 = 0;
  for (Eigen::Index i = 0; i < g_again.size(); ++i) diff2 = std::max(diff2, std::abs(g_again[i] - g_full[i]));
  CHECK(diff2 <= 1e-5f * scale);
}
