// The training executor (nn/train_executor.hpp): training steps run from
// the step plan, each layer's own forward and backward in plan order, the
// residual sums and the gradients of tensors with several readers formed by
// the executor. Checked bit for bit against the layer tree on the reference
// backend (the same operations in the same order), against the reference
// backend in double on oneDNN (the ResNet, its unfused composition, a
// user's two-branch container, airbench94's layers, in bf16 too), and the
// plan it runs: the rules between layers fire for it alone (the layer tree
// runs every layer on its own), the rules inside a layer for both.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/layers/tap.hpp>
#include <cifarnet/models/airbench.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>

#include "instances/resnet.hpp"
#include "nn/fusion_compare.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace cifarnet;

namespace {

template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

// Two training steps (forward, backward, a plain SGD update) of `ex`
// (through the training executor) and `tree` (the layers themselves), from
// the same parameters and inputs: outputs, input gradients, parameter
// gradients and values equal bit for bit.
template <class M>
void same_steps(M& ex, M& tree, std::size_t n, std::uint64_t seed, bool tree_is_executor = false) {
  REQUIRE(ex.train_executor(n));
  INFO(ex.explain_plan(Mode::Train, n));
  REQUIRE(ex.train_executor(n)->ok());
  if (tree_is_executor)  // another executor's plan (other rules off)
    REQUIRE(tree.train_executor(n)->ok());
  else
    REQUIRE_FALSE(tree.train_executor(n));
  test::same_random_parameters(ex, tree, seed);
  using T = typename M::Scalar;
  Rng rng(seed + 1);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    Tensor<T> x = make_tensor<T>(ex.input_shape(n), ex.format());
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = T(rng.uniform(-1.5, 1.5));
    const Tensor<T>& ya = ex.forward(x, Mode::Train);
    const Tensor<T>& yb = tree.forward(x, Mode::Train);
    REQUIRE(ya.size() == yb.size());
    CHECK(same_bits(ya.data(), yb.data(), ya.size()));
    Tensor<T> g(ya.shape());
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = T(rng.uniform(-0.5, 1.0));
    const Tensor<T> da = ex.backward(g);
    const Tensor<T> db = tree.backward(g);
    REQUIRE(da.size() == db.size());
    CHECK(same_bits(da.data(), db.data(), da.size()));
    auto& P = ex.parameters();
    auto& Q = tree.parameters();
    for (std::size_t id = 0; id < P.count(); ++id) {
      const ParamInfo& i = P.info(id);
      INFO("parameter " << i.name);
      CHECK(same_bits(P.value(id), Q.value(id), i.size));  // the moving statistics too
      if (!i.trainable) continue;
      CHECK(same_bits(P.grad(id), Q.grad(id), i.size));
      for (std::size_t k = 0; k < i.size; ++k) {
        P.value(id)[k] -= T(0.05) * P.grad(id)[k];
        Q.value(id)[k] -= T(0.05) * Q.grad(id)[k];
      }
    }
  }
}

CIFARNET_NAME(mid);

// A user's container with two branches (fusion_compare.hpp), which the
// executor runs as one opaque layer (its own forward and backward).
template <class A, class Bt>
using TwoBranch = test::TwoBranch<A, Bt>;
using CBR = ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>;
using CB = ConvBatchNorm<16, 16, 3>;
// Blocks with a user's container, an Identity between two ConvBatchNorm, a
// Tap, a downsampling shortcut (pool + pad) and a block without a ReLU.
using Mixed = Sequential<
    ConvBatchNorm<3, 16, 3, 1, Padding::Same, FusedRelu>, Residual<Sequential<CBR, CB>, Identity, FusedRelu>,
    Residual<Sequential<CBR, TwoBranch<CB, CB>>, Identity, FusedRelu>, Tap<mid>,
    Residual<Sequential<CBR, Identity, CB>, Identity, FusedRelu>,
    Residual<Sequential<ConvBatchNorm<16, 32, 3, 2, Padding::Same, FusedRelu>, ConvBatchNorm<32, 32, 3>>,
             PoolPadShortcut<16, 32, 2>, FusedRelu>,
    Residual<Sequential<ConvBatchNorm<32, 32, 3>>>, GlobalAvgPool, Dense<32, 10>>;

}  // namespace

TEST_CASE("The training executor trains bit for bit as the layers do on the reference backend",
          "[nn][train_executor]") {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    for (bool input_grad : {false, true}) {
      INFO("input gradient " << input_grad);
      Model<ResNetCifar<>, backend::Reference, double> ex(
          {3, 16, 16}, fmt, resnet_options(8).with_plan_training(true), 1, input_grad);
      Model<ResNetCifar<>, backend::Reference, double> tree(
          {3, 16, 16}, fmt, resnet_options(8).with_plan_training(false), 1, input_grad);
      same_steps(ex, tree, 3, 11);
      // (an xtensor's elements are not initialized: the input is set)
      Tensor<double> x = make_tensor<double>(ex.input_shape(3), fmt);
      Rng rng(5);
      for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = rng.uniform(-1.5, 1.5);
      const Tensor<double> g(ex.forward(x, Mode::Train));
      CHECK(ex.backward(g).size() == (input_grad ? x.size() : 0));
      // A second backward after the same forward gives the same gradients.
      const Eigen::ArrayXd first = ex.parameters().grads();
      ex.parameters().grads().setZero();
      ex.backward(g);
      CHECK((ex.parameters().grads() == first).all());
    }
    Model<Mixed, backend::Reference, double> ex({3, 16, 16}, fmt, NetOptions().with_plan_training(true), 2,
                                                true);
    Model<Mixed, backend::Reference, double> tree({3, 16, 16}, fmt, NetOptions().with_plan_training(false), 2,
                                                  true);
    same_steps(ex, tree, 2, 13);
    // Its gradient buffers come from lifetimes: the masked gradients of the
    // four stage-1 blocks and the sums of their inputs' gradients share
    // fewer buffers than one per gradient.
    const TrainExecutor<backend::Reference, double>* e = ex.train_executor(2);
    INFO(e->describe());
    CHECK(e->gradient_pool_bytes() > 0);
    CHECK(e->gradient_pool_bytes() < e->gradients_formed_bytes());
    CHECK(e->describe().find("gradient buffers from lifetimes: ") != std::string::npos);
  }
}

TEST_CASE("The training executor's gradients through a tap and with frozen weights", "[nn][train_executor]") {
  const auto fmt = DataFormat::NHWC;
  Model<Mixed, backend::Reference, double> ex({3, 16, 16}, fmt, NetOptions().with_plan_training(true), 2,
                                              true);
  Model<Mixed, backend::Reference, double> tree({3, 16, 16}, fmt, NetOptions().with_plan_training(false), 2,
                                                true);
  test::same_random_parameters(ex, tree, 21);
  for (auto* m : {&ex, &tree}) m->set_weight_gradients(false);
  Tensor<double> x = make_tensor<double>(ex.input_shape(2), fmt);
  Rng rng(3);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = rng.uniform(-1.0, 1.0);
  Tensor<double> gy;
  for (auto* m : {&ex, &tree}) {
    const Tensor<double>& y = m->forward(x, Mode::Train);
    Tensor<double>& tg = m->tap_gradient("mid");
    for (std::size_t i = 0; i < tg.size(); ++i) tg.data()[i] = std::sin(double(i));
    if (gy.size() != y.size()) gy = Tensor<double>(y.shape());
    gy.fill(0.25);
  }
  const Tensor<double> da = ex.backward(gy);
  const Tensor<double> db = tree.backward(gy);
  REQUIRE(da.size() == x.size());
  CHECK(same_bits(da.data(), db.data(), da.size()));
  CHECK(same_bits(ex.activation("mid").data(), tree.activation("mid").data(), ex.activation("mid").size()));
}

TEST_CASE("The training executor on oneDNN against the reference backend in double", "[nn][train_executor]") {
  const NetOptions on = NetOptions().with_plan_training(true);
  // The ResNet (every rule of the layer tree off, the ConvBatchNorm's own on),
  // its unfused composition, whole and ranged ConvBatchNorm backward passes.
  test::compare_formats<ResNetCifar<10>, test::UnfusedResNet<10>, backend::OneDnn, float>(
      {3, 16, 16}, 4, 1e-4, NetOptions(on).with_repeat(2));
  test::compare_formats<ResNetCifar<10>, test::UnfusedResNet<10>, backend::OneDnn, float>(
      {3, 16, 16}, 4, 1e-4, NetOptions(on).with_repeat(1).with_conv_bn_chunk_bytes(16 * 16 * 16 * 4));
  test::compare_formats<Mixed, Mixed, backend::OneDnn, float>({3, 16, 16}, 4, 1e-4, on);
  // There the downsampling shortcut's gradient is formed in the sum, across
  // the empty Repeats (identities) between the stages.
  Model<ResNetCifar<10>, backend::OneDnn> m(
      {3, 16, 16}, DataFormat::NHWC,
      NetOptions(on).with_repeat(1).with_conv_bn_chunk_bytes(16 * 16 * 16 * 4));
  const plan::Plan p = m.step_plan(Mode::Train, 4);
  INFO(plan::describe(p));
  CHECK(p.fired("pooled_shortcut_gradient") == 2);
  CHECK(p.find("stage2/repeat (0 blocks)", "identity") >= 0);
}

TEST_CASE("Winograd asked for in fp32 training: inside the conv + batch norm kernels, against the reference",
          "[nn][train_executor][winograd]") {
  // ResNet-8 at 32x32 (stage shapes 32x32x16, 16x16x32, 8x8x64, which the
  // own kernels take in AVX-512 and AVX2 alike), NHWC: where the own
  // Winograd kernels stand in for oneDNN's (AVX2, Zen 4's AVX-512 in
  // halves) they run inside ConvBatchNorm's own training passes, so the
  // batch norm's statistics are taken in the convolution's epilogue
  // there; elsewhere oneDNN's Winograd runs and the rule says why not.
  // Either way the step agrees with the reference backend in double.
  namespace on = backend::onednn;
  const NetOptions opts =
      NetOptions().with_plan_training(true).with_repeat(1).with_conv_algorithm(ConvAlgorithm::Winograd);
  test::compare<ResNetCifar<10>, test::UnfusedResNet<10>, backend::OneDnn, float>(
      {3, 32, 32}, 4, DataFormat::NHWC, 1e-4, opts);
  Model<ResNetCifar<10>, backend::OneDnn> m({3, 32, 32}, DataFormat::NHWC, opts);
  const plan::Plan p = m.step_plan(Mode::Train, 4);
  const std::string text = plan::describe(p);
  INFO(text);
  if (on::direct::cpu_supported() && on::direct::own_inference_measured()) {
    // Every stride-1 stage convolution: 2 + 1 + 1 (the stride-2 ones not).
    CHECK(p.fired("bn_stats_in_conv_epilogue") == 4);
    CHECK(p.fired("bn_dx_in_conv_prologue") == 4);
  } else {
    CHECK(p.fired("bn_stats_in_conv_epilogue") == 0);
    if (on::direct::cpu_supported())
      CHECK(text.find("Winograd convolutions, AVX-512 on full-width units") != std::string::npos);
  }
}

TEST_CASE("The training executor runs airbench94 as the layers do", "[nn][train_executor]") {
  // No hand-over of the layer tree applies to airbench94's layers in fp32:
  // the executor's step is the layers' bit for bit, on oneDNN too.
  const auto fmt = DataFormat::NHWC;
  Model<Airbench94, backend::OneDnn> ex({3, 32, 32}, fmt,
                                        NetOptions(airbench_options()).with_plan_training(true), 4);
  Model<Airbench94, backend::OneDnn> tree({3, 32, 32}, fmt,
                                          NetOptions(airbench_options()).with_plan_training(false), 4);
  same_steps(ex, tree, 8, 5);
  const plan::Plan p = ex.step_plan(Mode::Train, 8);
  CHECK(p.key.train_executor);
  CHECK(p.fired("bn_activation") == 6);
}

TEST_CASE("airbench94 in bf16 with its whitening frozen: the rules that change no bit, against them off",
          "[nn][train_executor][bf16]") {
  // bn_bf16_output_alone between its standalone layers, its max pools'
  // bf16 outputs for the batch norms (pool_bf16_output_to_bn), and the
  // whitening's bias and GELU as post-ops (conv_gelu_bf16_output, once
  // nothing before the first group trains): the same bits as without them.
  const auto fmt = DataFormat::NHWC;
  const std::vector<std::string> rules = {"bn_bf16_output_alone", "pool_bf16_output_to_bn",
                                          "conv_gelu_bf16_output"};
  const NetOptions bf16 = NetOptions(airbench_options()).with_conv_precision(ConvPrecision::BF16);
  Model<Airbench94, backend::OneDnn> with({3, 32, 32}, fmt, bf16, 4);
  Model<Airbench94, backend::OneDnn> without({3, 32, 32}, fmt, NetOptions(bf16).with_rules_off(rules), 4);
  for (auto* m : {&with, &without}) {
    auto& P = m->parameters();
    P.set_requires_grad(P.id("whiten/weights"), false);
    P.set_requires_grad(P.id("whiten/biases"), false);
  }
  const plan::Plan p = with.step_plan(Mode::Train, 8);
  INFO(plan::describe(p));
  const bool bf16_cpu = backend::onednn::cpu_has_bf16_convolutions();
  CHECK(p.fired("bn_bf16_output_alone") == (bf16_cpu ? 5u : 0u));  // the last batch norm: a max pool reads it
  CHECK(p.fired("pool_bf16_output_to_bn") == (bf16_cpu ? 3u : 0u));
  CHECK(p.fired("conv_gelu_bf16_output") == (bf16_cpu ? 1u : 0u));
  same_steps(with, without, 8, 21, true);
  for (const std::string& r : rules) {
    INFO("rule " << r);
    CHECK(with.train_executor(8)->carried(r) == p.fired(r));
    CHECK(without.train_executor(8)->carried(r) == 0);
  }
}

TEST_CASE("The training executor's plan: the rules between layers fire for it, not for the layer tree",
          "[nn][train_executor]") {
  Model<Mixed, backend::OneDnn, float> ex({3, 16, 16}, DataFormat::NHWC,
                                          NetOptions().with_plan_training(true), 2);
  Model<Mixed, backend::OneDnn, float> tree({3, 16, 16}, DataFormat::NHWC,
                                            NetOptions().with_plan_training(false), 2);
  const plan::Plan pe = ex.step_plan(Mode::Train, 4), pt = tree.step_plan(Mode::Train, 4);
  const std::string text = ex.explain_plan(Mode::Train, 4);
  INFO(text);
  CHECK(text.find("run by the training executor") != std::string::npos);
  CHECK(text.find("training executor: ") != std::string::npos);
  CHECK(tree.explain_plan(Mode::Train, 4).find("training executor: off") != std::string::npos);
  // The rules inside a layer match and fire alike in both plans; the rules
  // between layers fire for the executor alone (where one needs another
  // that did not fire, it does not even match in the layer tree's plan).
  for (const plan::RuleInfo& r : plan::rules()) {
    const std::string rule = r.name;
    INFO("rule " << rule);
    std::size_t mt = 0, me = 0;
    const std::size_t fe = pe.fired(rule, &me), ft = pt.fired(rule, &mt);
    if (plan::within_layer(rule)) {
      CHECK(fe == ft);
      CHECK(mt == me);
    } else {
      CHECK(ft == 0);
    }
  }
  // The layer tree's plan says why, where the executor's fired.
  for (const char* rule : {"residual_sum_in_bn", "residual_mask_in_sum", "residual_sum_in_conv_backward",
                           "pool_into_pad", "bn_output_into_next_conv"})
    for (const plan::Verdict& v : pe.verdicts) {
      if (v.rule != rule || !v.fires) continue;
      const plan::Verdict* w = pt.verdict(rule, pe.nodes[std::size_t(v.nodes[0])].name);
      REQUIRE(w);
      CHECK(w->reason.find("the layer tree runs the step") != std::string::npos);
    }
  for (const char* rule :
       {"residual_sum_in_bn", "residual_mask_in_sum", "relu_mask_bits", "residual_sum_in_conv_backward",
        "pool_into_pad", "bn_output_into_next_conv", "bn_sums_in_next_conv_backward"}) {
    INFO("rule " << rule);
    CHECK(pe.fired(rule) > 0);
  }
  CHECK(pe.fired("bf16_copy_to_readers") == 0);
  const plan::Verdict* c = pe.verdict("bf16_copy_to_readers", "bn1");
  REQUIRE(c);
  CHECK(c->reason == "fp32 convolutions");
  // Inside a ConvBatchNorm the layer's own fusions stand.
  for (const char* rule : {"bn_stats_in_conv_epilogue", "bn_dx_in_conv_prologue", "bn_activation"})
    CHECK(pe.fired(rule) == pt.fired(rule));
  CHECK(pe.fired("bn_activation") > 0);
}

// The relative error of a bf16 model's training step against the
// reference backend in double, from the same parameters and inputs: the
// output, the input gradient, and all parameter gradients as one vector.
template <class Net>
std::vector<double> bf16_errors(const NetOptions& opts, DataFormat fmt, std::size_t n) {
  Model<Net, backend::Reference, double> ref({3, 16, 16}, fmt, NetOptions(), 3, true);
  Model<Net, backend::OneDnn, float> net({3, 16, 16}, fmt, opts, 3, true);
  test::same_random_parameters(ref, net, 17);
  Rng rng(19);
  Tensor<double> xd = make_tensor<double>(ref.input_shape(n), fmt);
  Tensor<float> x = make_tensor<float>(net.input_shape(n), fmt);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(xd.data()[i] = rng.uniform(-1.5, 1.5));
  const Tensor<double>& yr = ref.forward(xd, Mode::Train);
  const Tensor<float>& y = net.forward(x, Mode::Train);
  const double ey = test::rel_err(y, yr);
  Tensor<double> gd(yr.shape());
  Tensor<float> g(y.shape());
  for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = float(gd.data()[i] = rng.uniform(-0.5, 1.0));
  const Tensor<double> dxr = ref.backward(gd);
  const Tensor<float> dx = net.backward(g);
  double e = 0, r = 0;
  for (std::size_t id = 0; id < ref.parameters().count(); ++id) {
    const ParamInfo& i = ref.parameters().info(id);
    if (!i.trainable) continue;
    for (std::size_t k = 0; k < i.size; ++k) {
      const double a = net.parameters().grad(id)[k], b = ref.parameters().grad(id)[k];
      e += (a - b) * (a - b);
      r += b * b;
    }
  }
  return {ey, test::rel_err(dx, dxr), std::sqrt(e / r)};
}

TEST_CASE("The training executor with bf16 convolutions: the copies its rule hands over",
          "[nn][train_executor][bf16]") {
  const auto fmt = DataFormat::NHWC;
  const NetOptions bf16 = NetOptions().with_conv_precision(ConvPrecision::BF16);
  Model<Mixed, backend::OneDnn, float> ex({3, 16, 16}, fmt, NetOptions(bf16).with_plan_training(true), 2);
  const plan::Plan p = ex.step_plan(Mode::Train, 4);
  INFO(plan::describe(p));
  // Copies and bf16 gradients where bf16 convolutions run in bf16 (a CPU
  // with AVX512-BF16 or AMX); the mask bits of the sums everywhere.
  const bool bf16_cpu = backend::onednn::cpu_has_bf16_convolutions();
  for (const char* rule : {"bf16_copy_to_readers", "bf16_dx_between_conv_bn", "bf16_branch_gradient",
                           "bf16_residual_gradient"}) {
    INFO("rule " << rule);
    CHECK((p.fired(rule) > 0) == bf16_cpu);
  }
  // The bf16 residual stream: its one match here that can fire feeds the
  // stride-2 block, whose weight gradient is bf16 only where oneDNN runs
  // bf16 on AMX or the own AVX512-BF16 kernel takes it (NHWC, here; Zen 4,
  // since 2026-12-06; ops::Conv2d::bf16_weights_gradient); elsewhere it
  // reads the float input, and the verdict says so (seen on a Zen 4 EPYC
  // before that kernel).
  const bool amx_convs =
      backend::onednn::cpu_has_amx_convolutions() || backend::onednn::cpu_has_own_bf16_weights();
  CHECK((p.fired("bf16_residual_stream") > 0) == (bf16_cpu && amx_convs));
  if (bf16_cpu && !amx_convs) {
    const plan::Verdict* v = p.verdict("bf16_residual_stream", "block2/add");
    REQUIRE(v);
    CHECK(v->reason == "'block3/conv1': its kernels read the float input");
  }
  // Between two ConvBatchNorm, the first one's output is written only as
  // the bf16 copy the second one reads, or (where the own AMX kernels take
  // the second convolution) not at all.
  const bool amx = backend::onednn::amx::amx_available() && backend::onednn::amx::avx512_bf16_available();
  CHECK((p.fired("bn_bf16_output_alone") + p.fired("bn_output_into_next_conv") > 0) == bf16_cpu);
  CHECK((p.fired("bn_output_into_next_conv") > 0) == (bf16_cpu && amx));
  CHECK(p.fired("relu_mask_bits") > 0);
  // Against the reference backend in double: within the layer tree's bf16
  // error (which rounds more: its bf16 residual stream and gradients).
  const auto e = bf16_errors<Mixed>(NetOptions(bf16).with_plan_training(true), fmt, 4);
  const auto t = bf16_errors<Mixed>(NetOptions(bf16).with_plan_training(false), fmt, 4);
  for (std::size_t k = 0; k < e.size(); ++k) {
    INFO("output, input gradient, parameter gradients: " << k << ": executor " << e[k] << ", layer tree "
                                                         << t[k]);
    CHECK(e[k] <= 1.25 * t[k] + 1e-3);
  }
}
