// The step plan (nn/plan.hpp) and its fusion rules (nn/plan_rules.hpp):
// the nodes a network emits, the tensors' lifetimes, and every rule's
// verdict checked against what the training executor did in real training
// steps (its per-rule counts and the layers' counters), on the CIFAR ResNet
// in both precisions and both layouts, on a network with an Identity
// between two ConvBatchNorm, and on the networks the ResNet's fusions were
// not written for.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/models/airbench.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>

#include "nn/fusion_compare.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

using namespace cifarnet;

namespace {

// The layer tree's nodes in the order the plan emits them (a block's
// shortcut before its body), sorted by what they are.
template <class N, class = void>
struct IsConvBn : std::false_type {};
template <class N>
struct IsConvBn<
    N, std::void_t<decltype(std::declval<N&>().deferred_outputs()), decltype(std::declval<N&>().conv())>>
    : std::true_type {};
template <class N, class = void>
struct IsBlock : std::false_type {};
template <class N>
struct IsBlock<N, std::void_t<decltype(std::declval<N&>().body()), decltype(std::declval<N&>().shortcut())>>
    : std::true_type {};
template <class N, class = void>
struct IsRepeat : std::false_type {};
template <class N>
struct IsRepeat<N, std::void_t<decltype(std::declval<N&>().block(0)), decltype(std::declval<N&>().size())>>
    : std::true_type {};
template <class N, class = void>
struct IsSeq : std::false_type {};
template <class N>
struct IsSeq<N, std::void_t<decltype(std::declval<N&>().children())>> : std::true_type {};
template <class N, class = void>
struct IsAvgPool : std::false_type {};
template <class N>
struct IsAvgPool<N, std::void_t<decltype(std::declval<N&>().padded_outputs())>> : std::true_type {};

// What the layers did, per node, read from their counters after the steps.
struct Did {
  std::vector<std::vector<std::pair<std::string, bool>>> conv_bn;  // per ConvBatchNorm: rule -> fired
  std::vector<bool> pool_pad;                                      // per average pool
};

template <class N>
void walk(N& n, Did& d) {
  if constexpr (IsConvBn<N>::value) {
    d.conv_bn.push_back({
        {"conv_bn_bf16_output", n.bf16_outputs() > 0},
        {"bn_bf16_dx_to_conv", n.bf16_handoffs() > 0},
        {"bn_stats_in_conv_epilogue", n.bn().statistics_given() > 0},
        {"bn_dx_in_conv_prologue", n.direct_backwards() > 0},
        {"ranged_or_direct", n.ranged_backwards() > 0},
        {"bn_output_into_next_conv", n.deferred_outputs() > 0},
        {"bn_bf16_output_alone", n.float_outputs_skipped() > 0},
        {"bf16_dx_out", n.bf16_dx_handoffs() > 0},
        {"bn_sums_in_next_conv_backward", n.sums_given() > 0},
        {"bn_dx_into_conv_weight_gradient", n.weight_gradients_in_bn() > 0},
    });
  } else if constexpr (IsBlock<N>::value) {
    walk(n.shortcut(), d);
    walk(n.body(), d);
  } else if constexpr (IsRepeat<N>::value) {
    for (std::size_t i = 0; i < n.size(); ++i) walk(n.block(i), d);
  } else if constexpr (IsSeq<N>::value) {
    std::apply([&](auto&... c) { (walk(c, d), ...); }, n.children());
  } else if constexpr (IsAvgPool<N>::value) {
    d.pool_pad.push_back(n.padded_outputs() > 0);
  } else {
    (void)n, (void)d;
  }
}

const plan::Verdict* verdict_at(const plan::Plan& p, const std::string& rule, int node) {
  for (const auto& v : p.verdicts)
    if (v.rule == rule && v.nodes[0] == node) return &v;
  return nullptr;
}

// Builds the plan for a training step of `batch`, runs two training steps,
// and checks every verdict of the plan against the counters: the layers'
// for what happens inside a ConvBatchNorm, the executor's for every rule
// between layers (each fired verdict carried out once in the last step,
// none where none fired).
template <class Net>
void check_plan_against_steps(Model<Net, backend::OneDnn, float>& m, DataFormat fmt, std::size_t batch) {
  const plan::Plan p = m.step_plan(Mode::Train, batch);
  Rng rng(7);
  Tensor<float> x = make_tensor<float>(m.input_shape(batch), fmt);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform(-1, 1));
  for (int step = 0; step < 2; ++step) {
    const Tensor<float>& y = m.forward(x, Mode::Train);
    Tensor<float> g(y.shape());
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = float(rng.uniform(-0.1, 0.1));
    m.backward(g);
  }
  Did d;
  walk(m.root(), d);
  INFO(plan::describe(p));
  // ConvBatchNorm: the k-th convolution of a pair in the plan is the k-th in the tree.
  std::size_t k = 0;
  std::vector<int> convs;
  for (int i = 0; i < int(p.nodes.size()); ++i)
    if (p.nodes[std::size_t(i)].kind == "conv" && !p.nodes[std::size_t(i)].layer.empty()) convs.push_back(i);
  REQUIRE(convs.size() == d.conv_bn.size());
  for (k = 0; k < convs.size(); ++k) {
    const int c = convs[k];
    const std::string& name = p.nodes[std::size_t(c)].name;
    INFO("ConvBatchNorm '" << name << "'");
    for (const auto& [rule, did] : d.conv_bn[k]) {
      INFO("rule " << rule);
      if (rule == "ranged_or_direct") {
        CHECK((p.fires("conv_bn_ranged_backward", name) || p.fires("bn_dx_in_conv_prologue", name)) == did);
      } else if (rule == "bn_bf16_output_alone") {
        // its float output skipped: for the next convolution alone, or for
        // the residual block after it (ResNet's stem)
        const plan::Verdict* v = verdict_at(p, rule, c + 1);  // anchored at the batch norm
        const plan::Verdict* w = verdict_at(p, "bn_bf16_stream_into_block", c + 1);
        CHECK(((v && v->fires) || (w && w->fires)) == did);
      } else if (rule == "bn_output_into_next_conv" || rule == "bn_sums_in_next_conv_backward") {
        const plan::Verdict* v = verdict_at(p, rule, c + 1);  // anchored at the batch norm
        CHECK((v && v->fires) == did);
      } else if (rule == "bf16_dx_out") {
        // as the later layer of a pair: the rule anchored at the batch norm before it
        for (const auto& v : p.verdicts)
          if (v.rule == "bf16_dx_between_conv_bn" && v.nodes.size() == 2 && v.nodes[1] == c)
            CHECK(v.fires == did);
      } else {
        const plan::Verdict* v = p.verdict(rule, name);
        REQUIRE(v);
        CHECK(v->fires == did);
      }
    }
  }
  // Every rule between layers: carried out by the executor exactly where it fired.
  const TrainExecutor<backend::OneDnn, float>* e = m.train_executor(batch);
  REQUIRE(e);
  REQUIRE(e->ok());
  for (const plan::RuleInfo& r : plan::rules()) {
    if (plan::within_layer(r.name)) continue;
    INFO("rule " << r.name);
    CHECK(e->carried(r.name) == e->plan().fired(r.name));
  }
  // Average pools into the channel pad.
  std::vector<int> pools;
  for (int i = 0; i < int(p.nodes.size()); ++i)
    if (p.nodes[std::size_t(i)].kind == "avg_pool") pools.push_back(i);
  REQUIRE(pools.size() == d.pool_pad.size());
  for (k = 0; k < pools.size(); ++k) {
    const plan::Verdict* v = verdict_at(p, "pool_into_pad", pools[k]);
    CHECK((v && v->fires) == d.pool_pad[k]);
  }
}

}  // namespace

TEST_CASE("A ResNet's step plan: its nodes, tensors and lifetimes", "[nn][plan]") {
  Model<ResNetCifar<>, backend::Reference, float> m({3, 32, 32}, DataFormat::NHWC, resnet_options(20));
  const plan::Plan p = m.step_plan(Mode::Train, 128);
  // rescale, stem conv + bn; 9 blocks of conv, bn, conv, bn and the sum, an
  // identity shortcut in 7 and an average pool + channel pad in 2; the
  // global pool and the dense layer.
  CHECK(p.nodes.size() == 1 + 2 + 9 * 5 + 7 + 2 * 2 + 2);
  CHECK(p.nodes[0].kind == "rescale");
  CHECK(p.find("stem/conv1", "conv") == 1);
  CHECK(p.find("stem/bn1", "bn") == 2);
  CHECK(p.nodes.back().kind == "dense");
  CHECK(p.tensors[std::size_t(p.output)].shape == Shape{128, 11, 1, 1});
  // Every tensor but the input has one producer; a block's input has two
  // readers (its shortcut and its body).
  const int add0 = p.find("stage1/block0/add");
  REQUIRE(add0 >= 0);
  const int in0 = p.nodes[std::size_t(add0)].block_input;
  CHECK(p.tensors[std::size_t(in0)].consumers.size() == 2);
  // The largest set of live activations and gradients at once: at least the
  // stem's output and its gradient's worth, at most every tensor's values
  // and gradient.
  std::size_t all = 0;
  for (const auto& t : p.tensors) all += t.bytes;
  const std::size_t stem = p.tensors[std::size_t(p.nodes[2].output)].bytes;
  CHECK(p.peak_bytes() >= 2 * stem);
  CHECK(p.peak_bytes() <= 2 * all);
  const plan::Plan inf = m.step_plan(Mode::Infer, 128);
  CHECK(inf.peak_bytes() < p.peak_bytes());
  // The reference backend declares no fusion capability: nothing fires but
  // the inference folding and the ReLU mask in the next block's sum (the
  // containers' own, on every backend).
  for (const auto& v : p.verdicts) {
    INFO(v.rule << " at " << p.nodes[std::size_t(v.nodes[0])].name);
    CHECK(v.fires == (v.rule == "residual_mask_in_sum"));
    CHECK(v.reason.empty() == v.fires);
  }
  CHECK(p.fired("residual_mask_in_sum") == 8);
  CHECK(inf.fired("conv_bn_fold") == 19);
  CHECK_THROWS_AS(m.step_plan(Mode::Train, 0), ConfigError);
}

TEST_CASE("Every rule's verdict on the ResNet is what the executor did in training steps",
          "[nn][plan][onednn]") {
  for (auto fmt : {DataFormat::NHWC, DataFormat::NCHW})
    for (auto prec : {ConvPrecision::F32, ConvPrecision::BF16}) {
      INFO("format " << to_string(fmt) << ", " << (prec == ConvPrecision::BF16 ? "bf16" : "fp32"));
      Model<ResNetCifar<>, backend::OneDnn, float> m({3, 16, 16}, fmt,
                                                     resnet_options(8).with_conv_precision(prec), 3);
      check_plan_against_steps(m, fmt, 8);
    }
  // With ranged backward passes (ranges of 2 images).
  Model<ResNetCifar<>, backend::OneDnn, float> r(
      {3, 16, 16}, DataFormat::NHWC, resnet_options(8).with_conv_bn_chunk_bytes(2 * 16 * 16 * 16 * 4), 3);
  check_plan_against_steps(r, DataFormat::NHWC, 8);
  // ResNet-20 at CIFAR's 32x32, NHWC, both precisions: the benchmarks'
  // geometry (two repeated blocks a stage; the default range size).
  for (auto prec : {ConvPrecision::F32, ConvPrecision::BF16}) {
    INFO("ResNet-20, " << (prec == ConvPrecision::BF16 ? "bf16" : "fp32"));
    Model<ResNetCifar<>, backend::OneDnn, float> m20({3, 32, 32}, DataFormat::NHWC,
                                                     resnet_options(20).with_conv_precision(prec), 3);
    check_plan_against_steps(m20, DataFormat::NHWC, 32);
  }
}

namespace {
// Two ConvBatchNorm with an Identity between them, and the same without.
using Apart = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>, Identity,
                         ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>>;
using Together = Sequential<ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>,
                            ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>>;
}  // namespace

TEST_CASE("An Identity between two ConvBatchNorm: the plan says why the pair's rules did not apply",
          "[nn][plan][onednn]") {
  for (auto prec : {ConvPrecision::F32, ConvPrecision::BF16}) {
    const NetOptions o = NetOptions().with_conv_precision(prec);
    Model<Apart, backend::OneDnn, float> apart({16, 8, 16}, DataFormat::NHWC, o, 1);
    Model<Together, backend::OneDnn, float> together({16, 8, 16}, DataFormat::NHWC, o, 1);
    const plan::Plan a = apart.step_plan(Mode::Train, 4);
    const std::string text = plan::describe(a);
    INFO(text);
    for (const char* rule : {"bn_output_into_next_conv", "bn_bf16_output_alone", "bf16_dx_between_conv_bn"}) {
      INFO(rule);
      const plan::Verdict* v = a.verdict(rule, "bn1");
      REQUIRE(v);
      CHECK_FALSE(v->fires);
      CHECK(v->reason.find("'identity1' (identity)") != std::string::npos);
    }
    CHECK(text.find("its output goes to 'identity1' (identity), not to the convolution of a ConvBatchNorm") !=
          std::string::npos);
    // Together, the pair's rules fire where the CPU has their kernels, and
    // their verdicts are what the executor did.
    check_plan_against_steps(together, DataFormat::NHWC, 4);
    check_plan_against_steps(apart, DataFormat::NHWC, 4);
  }
}

TEST_CASE("The plan of networks the ResNet's fusions were not written for: airbench94",
          "[nn][plan][onednn]") {
  Model<Airbench94, backend::OneDnn, float> m({3, 32, 32}, DataFormat::NHWC,
                                              NetOptions().with_conv_precision(ConvPrecision::BF16), 1);
  const plan::Plan p = m.step_plan(Mode::Train, 64);
  const std::string text = plan::describe(p);
  INFO(text);
  // Its batch norms are standalone, with GELU: the activation rule matches them.
  std::size_t matched = 0;
  CHECK(p.fired("bn_activation", &matched) == matched);
  CHECK(matched == 6);
  // Its convolutions and batch norms are standalone layers (a max pool
  // between the first of each group): the conv + BN rules match and say why
  // they did not fire.
  for (const char* rule : {"conv_bn_bf16_output", "bn_stats_in_conv_epilogue", "bn_dx_in_conv_prologue"}) {
    INFO(rule);
    CHECK(p.fired(rule, &matched) == 0);
    CHECK(matched == 6);
    const plan::Verdict* v = p.verdict(rule, "block1/conv1");
    REQUIRE(v);
    CHECK(v->reason.find("standalone Conv2d and BatchNorm2d layers") != std::string::npos);
    CHECK(v->reason.find("a max pool between them") != std::string::npos);
  }
  // The own kernels' geometry is named: bf16 here.
  CHECK(p.verdict("bn_stats_in_conv_epilogue", "block2/conv2")->reason.find("bf16 convolutions") !=
        std::string::npos);
  // No ConvBatchNorm: the rules over two of them do not match.
  p.fired("bn_output_into_next_conv", &matched);
  CHECK(matched == 0);
}

TEST_CASE("The plan of the tutorial CNN: its ReLU layers after the convolutions", "[nn][plan][onednn]") {
  Model<Cifar10Cnn, backend::OneDnn, float> m({3, 24, 24}, DataFormat::NHWC, NetOptions(), 1);
  const plan::Plan p = m.step_plan(Mode::Train, 128);
  INFO(plan::describe(p));
  std::size_t matched = 0;
  CHECK(p.fired("conv_relu_post_op", &matched) == 0);
  CHECK(matched == 2);
  CHECK(p.verdict("conv_relu_post_op", "conv1")->reason.find("training: a ReLU layer is its own pass") !=
        std::string::npos);
  CHECK(p.nodes.front().name == "conv1");
  CHECK(p.tensors[std::size_t(p.output)].shape == Shape{128, 10, 1, 1});
  // In inference the plan executor gives both convolutions their ReLU, and
  // its logits are the layers' (reference backend, double: bit for bit;
  // oneDNN float: within float rounding).
  const plan::Plan q = m.step_plan(Mode::Infer, 8);
  INFO(plan::describe(q));
  CHECK(q.fired("conv_relu_post_op", &matched) == 2);
  CHECK(matched == 2);
  Model<Cifar10Cnn, backend::Reference, double> ex({3, 24, 24}, DataFormat::NHWC, NetOptions(), 1);
  Model<Cifar10Cnn, backend::Reference, double> layers({3, 24, 24}, DataFormat::NHWC,
                                                       NetOptions().with_plan_executor(false), 1);
  Tensor<double> x = make_tensor<double>(ex.input_shape(8), DataFormat::NHWC);
  Tensor<float> xf = make_tensor<float>(ex.input_shape(8), DataFormat::NHWC);
  Rng rng(43);
  for (std::size_t i = 0; i < x.size(); ++i)
    xf.data()[i] = float(x.data()[i] = double(float(rng.uniform(-2, 2))));
  for (std::size_t id = 0; id < m.parameters().count(); ++id) {
    const auto& in = m.parameters().info(id);
    std::copy(std::as_const(m.parameters()).value(id), std::as_const(m.parameters()).value(id) + in.size,
              ex.parameters().value(id));
    std::copy(std::as_const(m.parameters()).value(id), std::as_const(m.parameters()).value(id) + in.size,
              layers.parameters().value(id));
  }
  REQUIRE(ex.executor(8));
  REQUIRE(ex.executor(8)->ok());
  const Tensor<double> a = ex.forward(x, Mode::Infer);
  const Tensor<double>& b = layers.forward(x, Mode::Infer);
  REQUIRE(a.shape() == b.shape());
  CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  CHECK(test::rel_err(m.forward(xf, Mode::Infer), b) <= 1e-5);
}

namespace {
// A two-branch container as a user writes one (fusion_compare.hpp).
template <class A, class Bt>
using TwoBranch = test::TwoBranch<A, Bt>;
using CBR = ConvBatchNorm<16, 16, 3, 1, Padding::Same, FusedRelu>;
using CB = ConvBatchNorm<16, 16, 3>;
// The user's container as the last layer of a residual body (where a block
// offers its sum) and as the first (where the block's backward offers its
// gradient sum), between blocks whose hand-overs all fire on oneDNN.
using WithTwoBranch = Sequential<ConvBatchNorm<3, 16, 3, 1, Padding::Same, FusedRelu>,
                                 Residual<Sequential<CBR, CB>, Identity, FusedRelu>,
                                 Residual<Sequential<CBR, TwoBranch<CB, CB>>, Identity, FusedRelu>,
                                 Residual<Sequential<TwoBranch<CBR, CBR>, CB>, Identity, FusedRelu>,
                                 Residual<Sequential<CBR, CB>, Identity, FusedRelu>>;
}  // namespace

TEST_CASE("A user's two-branch container trains correctly with every rule on", "[nn][plan][onednn]") {
  // oneDNN in float with every hand-over on, against the reference backend
  // in double (no hand-overs): outputs, input and parameter gradients,
  // moving statistics, inference; with whole and ranged backward passes
  // (the own kernels fire: 16 channels, rows of 16); float only.
  test::compare_formats<WithTwoBranch, WithTwoBranch, backend::OneDnn, float>({3, 16, 16}, 4, 1e-4);
  test::compare_formats<WithTwoBranch, WithTwoBranch, backend::OneDnn, float>(
      {3, 16, 16}, 4, 1e-4, NetOptions().with_conv_bn_chunk_bytes(16 * 16 * 16 * 4));
  Model<WithTwoBranch, backend::OneDnn, float> m({3, 16, 16}, DataFormat::NHWC, NetOptions(), 3);
  const plan::Plan p = m.step_plan(Mode::Train, 4);
  INFO(plan::describe(p));
  // The container is one opaque node; the rules around it say why they stop there.
  const int tb = p.find("block1/two_branch1");
  REQUIRE(tb >= 0);
  CHECK(p.nodes[std::size_t(tb)].kind == "two_branch");
  const plan::Verdict* sum = p.verdict("residual_sum_in_bn", "block1/add");
  REQUIRE(sum);
  CHECK_FALSE(sum->fires);
  CHECK(sum->reason.find("(two_branch), not a batch norm") != std::string::npos);
  CHECK(p.fires("residual_sum_in_bn", "block0/add"));
  // Inference through the plan executor: the container is one node that
  // runs its own forward; bit for bit what the layers do themselves.
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    Model<WithTwoBranch, backend::Reference, double> ex({3, 16, 16}, fmt, NetOptions(), 3);
    Model<WithTwoBranch, backend::Reference, double> layers({3, 16, 16}, fmt,
                                                            NetOptions().with_plan_executor(false), 3);
    Tensor<double> x = make_tensor<double>(ex.input_shape(4), fmt);
    Rng rng(41);
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = rng.uniform(-1.5, 1.5);
    REQUIRE(ex.executor(4));
    INFO(ex.explain_plan(Mode::Infer, 4));
    REQUIRE(ex.executor(4)->ok());
    const Tensor<double> a = ex.forward(x, Mode::Infer);
    const Tensor<double>& b = layers.forward(x, Mode::Infer);
    REQUIRE(a.shape() == b.shape());
    CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  }
}
