// Every fusion rule (nn/plan_rules.hpp) against the plan without any rule
// (NetOptions::rules_off "all"): the same network, parameters and inputs,
// once with the rule on (and the rules it needs, nothing else) and once
// with every rule off. The rule must fire with it and no rule without; the
// training executor carries a rule between layers out where it fired. The
// two steps (forward, backward, a plain SGD update, twice; or an inference
// forward) must agree bit for bit where the rule does the same float
// operations, else within the bounds of docs/NUMERICS.md ("One rule against
// none"): float within 1e-4 relative (root mean square) of the reference
// backend in double, as the plan without rules is; bf16 within 2 times
// the error of the plan without rules plus 1e-3. A rule whose kernels this
// CPU lacks (AVX-512 or AVX2 for the own kernels, AVX512-BF16 or AMX for bf16) must
// say so in its verdict, and the test says it was not compared (WARN).
#include <catch2/catch.hpp>

#include <omp.h>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>

#include "instances/resnet.hpp"
#include "nn/fusion_compare.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

using namespace cifarnet;

// CHECK, then leave the rule's case (not the test: the other rules still run).
#define ENSURE(...)             \
  do {                          \
    CHECK(__VA_ARGS__);         \
    if (!(__VA_ARGS__)) return; \
  } while (0)

namespace {

// What a rule needs to run on this machine.
enum class Needs { Nothing, OwnKernels, OwnInference, OwnWinograd, Bf16Cpu, Amx };

bool machine_has(Needs n) {
  switch (n) {
    case Needs::OwnKernels:
      return backend::onednn::direct::cpu_supported();
    case Needs::OwnInference:  // AVX2 or Zen 4's AVX-512 (ConvEpilogue::own_kernel_why_not), a batch of 4
                               // gives each thread images
      return backend::onednn::direct::own_inference_measured() && omp_get_max_threads() <= 4;
    case Needs::OwnWinograd:  // AVX2 or Zen 4's AVX-512 (ConvEpilogue::winograd_why_not)
      return backend::onednn::direct::own_inference_measured();
    case Needs::Bf16Cpu:
      return backend::onednn::cpu_has_bf16_convolutions();
    case Needs::Amx:  // the own AMX kernels (amx_conv.hpp, amx_wgrad.hpp)
      return backend::onednn::cpu_has_bf16_convolutions() && backend::onednn::amx::amx_available() &&
             backend::onednn::amx::avx512_bf16_available();
    default:
      return true;
  }
}

// One rule's comparison: the rules it needs on with it, how it is run, and
// whether its arithmetic is the plan without rules' (bit for bit).
struct Case {
  const char* rule;
  std::vector<const char*> with;
  Mode mode;
  ConvPrecision precision;
  Needs needs;
  bool exact;
  int repeat = 1;  // blocks per stage (the ReLU mask bits go between blocks of one stage)
  // bf16: each error against double with the rule at most this times the
  // error without any rule, + 1e-3 (docs/NUMERICS.md, "One rule against none")
  double bf16_factor = 2;
};

// Every rule but `on`.
std::vector<std::string> all_but(const std::vector<std::string>& on) {
  std::vector<std::string> off;
  for (const plan::RuleInfo& r : plan::rules())
    if (std::find(on.begin(), on.end(), r.name) == on.end()) off.push_back(r.name);
  return off;
}

// The relative root-mean-square difference of a and b (b in double).
template <class T>
double rms(const std::vector<T>& a, const std::vector<double>& b) {
  double e = 0, r = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += b[i] * b[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

// What a step produced: the outputs, the input gradients, the parameter
// gradients and the parameters after each update (moving statistics too).
template <class T>
struct Trace {
  std::vector<std::vector<T>> parts;
  std::vector<std::string> names;
  void add(const std::string& name, const T* p, std::size_t n) {
    names.push_back(name);
    parts.emplace_back(p, p + n);
  }
};

// Two training steps (or one inference forward) from the model's parameters.
template <class M>
auto trace(M& m, Mode mode, std::size_t n, std::uint64_t seed) {
  using T = typename M::Scalar;
  Trace<T> t;
  Rng rng(seed);
  for (int step = 0; step < (mode == Mode::Train ? 2 : 1); ++step) {
    const std::string s = "step " + std::to_string(step) + ": ";
    Tensor<T> x = make_tensor<T>(m.input_shape(n), m.format());
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = T(rng.uniform(-1.5, 1.5));
    const Tensor<T>& y = m.forward(x, mode);
    t.add(s + "output", y.data(), y.size());
    if (mode == Mode::Infer) break;
    Tensor<T> g(y.shape());
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = T(rng.uniform(-0.5, 1.0));
    const Tensor<T> dx = m.backward(g);
    t.add(s + "input gradient", dx.data(), dx.size());
    auto& P = m.parameters();
    for (std::size_t id = 0; id < P.count(); ++id) {
      const ParamInfo& i = P.info(id);
      if (!i.trainable) continue;
      t.add(s + i.name + " gradient", P.grad(id), i.size);
      for (std::size_t k = 0; k < i.size; ++k) P.value(id)[k] -= T(0.05) * P.grad(id)[k];
    }
    for (std::size_t id = 0; id < P.count(); ++id) t.add(s + P.info(id).name, P.value(id), P.info(id).size);
  }
  return t;
}

// The rule's case on network Net (input `in`, batch n, NHWC).
template <class Net>
void check_rule(const Case& c, InputShape in, std::size_t n, NetOptions base) {
  INFO("rule " << c.rule);
  std::vector<std::string> on(c.with.begin(), c.with.end());
  on.push_back(c.rule);
  base.with_conv_precision(c.precision).with_repeat(c.repeat);
  const auto fmt = DataFormat::NHWC;
  Model<Net, backend::OneDnn> with(in, fmt, NetOptions(base).with_rules_off(all_but(on)), 3, true);
  Model<Net, backend::OneDnn> none(in, fmt, NetOptions(base).with_rules_off({"all"}), 3, true);
  const plan::Plan pw = with.step_plan(c.mode, n), pn = none.step_plan(c.mode, n);
  INFO(plan::describe(pw));
  // Without any rule: none fires, and where a pattern matched it says so.
  for (const plan::RuleInfo& r : plan::rules()) {
    INFO("without rules: " << r.name);
    CHECK(pn.fired(r.name) == 0);
  }
  const plan::Verdict* off = nullptr;
  for (const plan::Verdict& v : pn.verdicts)
    if (v.rule == c.rule) off = &v;
  // (no verdict: its pattern needs another rule's, which did not fire)
  if (off) CHECK(off->reason.find("turned off (NetOptions::rules_off)") != std::string::npos);
  if (!machine_has(c.needs)) {
    // Not on this CPU: the verdict says why, and nothing is compared.
    CHECK(pw.fired(c.rule) == 0);
    const plan::Verdict* v = nullptr;
    for (const plan::Verdict& w : pw.verdicts)
      if (w.rule == c.rule) v = &w;
    ENSURE(v);
    CHECK_FALSE(v->reason.empty());
    WARN("rule " << c.rule << " not compared: this CPU lacks its kernels (" << v->reason << ")");
    return;
  }
  ENSURE(pw.fired(c.rule) > 0);
  if (c.mode == Mode::Train) {
    ENSURE(with.train_executor(n));
    ENSURE(with.train_executor(n)->ok());
    ENSURE(none.train_executor(n));
    ENSURE(none.train_executor(n)->ok());
  }
  test::same_random_parameters(with, none, 17);
  Model<Net, backend::Reference, double> ref(in, fmt, NetOptions(base).with_rules_off({"all"}), 3, true);
  test::same_random_parameters(with, ref, 17);
  const auto tw = trace(with, c.mode, n, 23);
  const auto tn = trace(none, c.mode, n, 23);
  if (c.mode == Mode::Train && !plan::within_layer(c.rule))
    CHECK(with.train_executor(n)->carried(c.rule) == pw.fired(c.rule));
  ENSURE(tw.parts.size() == tn.parts.size());
  if (c.exact) {
    for (std::size_t k = 0; k < tw.parts.size(); ++k) {
      INFO(tw.names[k]);
      CHECK(tw.parts[k] == tn.parts[k]);
    }
    return;
  }
  // Only the first step against double (the update then follows each
  // model's own gradients): its outputs, input gradient, gradients as one.
  const auto tr = trace(ref, c.mode, n, 23);
  auto first = [](const auto& t, std::size_t k) { return t.names[k].rfind("step 0: ", 0) == 0; };
  auto grads = [&](const auto& t) {
    std::vector<std::decay_t<decltype(t.parts[0][0])>> g;
    for (std::size_t k = 0; k < t.parts.size(); ++k)
      if (first(t, k) && t.names[k].find(" gradient") != std::string::npos &&
          t.names[k].find("input gradient") == std::string::npos)
        g.insert(g.end(), t.parts[k].begin(), t.parts[k].end());
    return g;
  };
  auto errors = [&](const auto& t) {
    std::vector<double> e{rms(t.parts[0], tr.parts[0])};
    if (c.mode == Mode::Train) {
      e.push_back(rms(t.parts[1], tr.parts[1]));
      e.push_back(rms(grads(t), grads(tr)));
    }
    return e;
  };
  const auto ew = errors(tw), en = errors(tn);
  for (std::size_t k = 0; k < ew.size(); ++k) {
    INFO("output, input gradient, parameter gradients: " << k << ": with the rule " << ew[k]
                                                         << ", without rules " << en[k]);
    if (c.precision == ConvPrecision::BF16)
      CHECK(ew[k] <= c.bf16_factor * en[k] + 1e-3);
    else
      CHECK(ew[k] <= (c.mode == Mode::Train ? 1e-4 : 1e-5));
  }
}

// Two training steps of a and b (4 images) from the same parameters and
// inputs: the same bits in every part of the trace.
template <class M>
void same_training_steps(M& a, M& b) {
  test::same_random_parameters(a, b, 17);
  const auto ta = trace(a, Mode::Train, 4, 23), tb = trace(b, Mode::Train, 4, 23);
  ENSURE(ta.parts.size() == tb.parts.size());
  for (std::size_t k = 0; k < ta.parts.size(); ++k) {
    INFO(ta.names[k]);
    CHECK(ta.parts[k] == tb.parts[k]);
  }
}

// Where this CPU has bf16 kernels: `rule` fires `fires` times on Net in
// bf16 training with the rules `with` (and no others; `base`'s other
// options), and the two training steps are the same bits as with `with`
// alone.
template <class Net>
void same_bits_with_and_without(const char* rule, std::vector<std::string> with, std::size_t fires,
                                const NetOptions& base = NetOptions()) {
  if (!backend::onednn::cpu_has_bf16_convolutions()) return;  // check_rule's WARN says so
  INFO("rule " << rule << " against the same plan without it");
  const NetOptions bf16 = NetOptions(base).with_conv_precision(ConvPrecision::BF16);
  Model<Net, backend::OneDnn> b({3, 16, 16}, DataFormat::NHWC, NetOptions(bf16).with_rules_off(all_but(with)),
                                3, true);
  with.push_back(rule);
  Model<Net, backend::OneDnn> a({3, 16, 16}, DataFormat::NHWC, NetOptions(bf16).with_rules_off(all_but(with)),
                                3, true);
  INFO(plan::describe(a.step_plan(Mode::Train, 4)));
  CHECK(a.step_plan(Mode::Train, 4).fired(rule) == fires);
  CHECK(b.step_plan(Mode::Train, 4).fired(rule) == 0);
  same_training_steps(a, b);
  REQUIRE(a.train_executor(4));
  CHECK(a.train_executor(4)->carried(rule) == fires);  // in the last step
}

const ConvPrecision F32 = ConvPrecision::F32, BF16 = ConvPrecision::BF16;
const Mode Train = Mode::Train, Infer = Mode::Infer;

// The rules on the CIFAR ResNet (ResNet-8 at 16x16, 4 images, ranges of one
// image), each with the rules it needs.
const std::vector<Case>& resnet_cases() {
  const std::vector<const char*> act = {"bn_activation"};
  const std::vector<const char*> own = {"bn_activation", "bn_dx_in_conv_prologue", "conv_bn_ranged_backward"};
  const std::vector<const char*> pair = {"bn_activation", "conv_bn_bf16_output"};
  const std::vector<const char*> pair_dx = {"bn_activation", "conv_bn_bf16_output", "bn_bf16_dx_to_conv"};
  const std::vector<const char*> bits = {"residual_sum_in_bn", "residual_mask_in_sum", "relu_mask_bits"};
  auto plus = [](std::vector<const char*> a, const std::vector<const char*>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  static const std::vector<Case> c = {
      {"conv_bn_fold", {}, Infer, F32, Needs::Nothing, false},
      {"bn_activation", {}, Train, F32, Needs::Nothing, true},
      {"conv_bn_bf16_output", act, Train, BF16, Needs::Bf16Cpu, false},
      {"bn_bf16_dx_to_conv", pair, Train, BF16, Needs::Bf16Cpu, false},
      {"bn_stats_in_conv_epilogue", act, Train, F32, Needs::OwnKernels, false},
      {"bn_dx_in_conv_prologue", act, Train, F32, Needs::OwnKernels, false},
      {"conv_bn_ranged_backward", act, Train, F32, Needs::Nothing, false},
      {"bn_output_into_next_conv", plus(own, {"bn_stats_in_conv_epilogue"}), Train, F32, Needs::OwnKernels,
       false},
      {"bn_bf16_output_alone", plus(pair, {"bf16_copy_to_readers"}), Train, BF16, Needs::Bf16Cpu, false},
      {"bf16_dx_between_conv_bn", pair_dx, Train, BF16, Needs::Bf16Cpu, false},
      {"pool_into_pad", {}, Train, F32, Needs::Nothing, true},
      {"residual_sum_in_bn", {}, Train, F32, Needs::Nothing, true},
      {"bf16_residual_stream", plus(plus(pair, bits), {"bf16_copy_to_readers", "bn_bf16_output_alone"}),
       Train, BF16, Needs::Bf16Cpu, false, 2},
      {"residual_mask_in_sum", {}, Train, F32, Needs::Nothing, true},
      {"relu_mask_bits", {"residual_sum_in_bn", "residual_mask_in_sum"}, Train, F32, Needs::Nothing, true, 2},
      {"residual_sum_in_conv_backward", own, Train, F32, Needs::Nothing, false},
      {"pooled_shortcut_gradient", plus(own, {"residual_sum_in_conv_backward", "pool_into_pad"}), Train, F32,
       Needs::Nothing, false},
      {"bf16_branch_gradient", plus(pair_dx, bits), Train, BF16, Needs::Bf16Cpu, false, 2},
      {"pooled_gradient_in_sum", plus(plus(pair_dx, bits), {"pool_into_pad"}), Train, BF16, Needs::Bf16Cpu,
       false, 2},
      {"bf16_residual_gradient", plus(pair_dx, bits), Train, BF16, Needs::Bf16Cpu, false, 2},
      {"bn_sums_in_next_conv_backward", plus(own, {"residual_sum_in_conv_backward"}), Train, F32,
       Needs::Nothing, false},
      {"bf16_copy_to_readers", act, Train, BF16, Needs::Bf16Cpu, true},
      // ResNet's stem before its first block (not bit for bit: the block's
      // sum reads the stem's output rounded to bf16; the stem's dy rounded
      // to bf16 once).
      {"bn_bf16_stream_into_block", plus(pair, {"bf16_copy_to_readers", "residual_sum_in_bn"}), Train, BF16,
       Needs::Bf16Cpu, false},
      {"bf16_dy_sum", pair, Train, BF16, Needs::Bf16Cpu, false},
      {"bn_sums_in_dy_sum", plus(plus(pair_dx, bits), {"bf16_branch_gradient", "bf16_residual_gradient"}),
       Train, BF16, Needs::Bf16Cpu, false, 2},
      {"residual_sum_in_conv_epilogue", {"conv_bn_fold"}, Infer, F32, Needs::Nothing, false},
      {"conv_winograd_epilogue",
       {"conv_bn_fold", "residual_sum_in_conv_epilogue"},
       Infer,
       F32,
       Needs::OwnWinograd,
       false},
      {"conv_epilogue_in_registers",
       {"conv_bn_fold", "residual_sum_in_conv_epilogue"},
       Infer,
       F32,
       Needs::OwnInference,
       false},
      {"bf16_activations",
       {"conv_bn_fold", "residual_sum_in_conv_epilogue"},
       Infer,
       BF16,
       Needs::Bf16Cpu,
       false},
  };
  return c;
}

// airbench94's pattern: standalone convolutions, a max pool, batch norms
// with their GELU.
using ConvGelu = Sequential<Conv2d<3, 16, 3>, BatchNorm2d<16, FusedGelu>, Conv2d<16, 32, 3>,
                            MaxPool2d<2, 2, Padding::Valid>, BatchNorm2d<32, FusedGelu>, Conv2d<32, 32, 3>,
                            BatchNorm2d<32, FusedGelu>, GlobalAvgPool, Dense<32, 10>>;
// airbench94's whitening: a convolution with bias, a GELU layer, and the
// next convolution.
using WhitenGelu = Sequential<Conv2d<3, 16, 2, 1, Padding::Valid, WithBias>, GELU, Conv2d<16, 32, 3>,
                              BatchNorm2d<32, FusedGelu>, GlobalAvgPool, Dense<32, 10>>;
// A standalone convolution and its ReLU layer (the tutorial CNN's pattern).
using ConvRelu = Sequential<Conv2d<3, 16, 3, 1, Padding::Same, WithBias>, ReLU, GlobalAvgPool, Dense<16, 10>>;

}  // namespace

TEST_CASE("Every rule against the plan without any rule", "[nn][plan][rules][onednn]") {
  const NetOptions base = NetOptions().with_repeat(1).with_conv_bn_chunk_bytes(16 * 16 * 16 * 4);
  std::set<std::string> covered;
  for (const Case& c : resnet_cases()) {
    check_rule<ResNetCifar<10>>(c, {3, 16, 16}, 4, base);
    covered.insert(c.rule);
  }
  // The batch norm's output left unwritten in bf16 too: the own AMX forward
  // computes it from the batch norm's input bits and map, the own AMX weight
  // gradient again (against no rules: bf16 bounds; the AMX forward sums 16
  // input channels in another order than oneDNN's kernel).
  check_rule<ResNetCifar<10>>({"bn_output_into_next_conv",
                               {"bn_activation", "conv_bn_bf16_output", "bn_bf16_dx_to_conv"},
                               Train,
                               BF16,
                               Needs::Amx,
                               false},
                              {3, 16, 16}, 4, base);
  // The downsampling blocks' pooled shortcut gradient formed in the
  // previous block's sum: bit for bit against the same plan without it
  // (the pool's backward and the sum's float operations, in one pass),
  // with the sum's other part and its output as float (the branch's dx
  // float) and as bf16 bits.
  const std::vector<std::string> pooled_with = {
      "bn_activation",        "conv_bn_bf16_output", "bn_bf16_dx_to_conv", "residual_sum_in_bn",
      "residual_mask_in_sum", "relu_mask_bits",      "pool_into_pad"};
  // (two blocks a stage: the mask bits go between blocks of one stage)
  const NetOptions two = NetOptions(base).with_repeat(2);
  same_bits_with_and_without<ResNetCifar<10>>("pooled_gradient_in_sum", pooled_with, 2, two);
  std::vector<std::string> pooled_bits = pooled_with;
  pooled_bits.insert(pooled_bits.end(), {"bf16_branch_gradient", "bf16_residual_gradient"});
  same_bits_with_and_without<ResNetCifar<10>>("pooled_gradient_in_sum", pooled_bits, 2, two);
  // A batch norm's backward sums taken in the pass that writes its dy
  // bits: bit for bit (the sums' pass's threads, blocks and order), at the
  // three blocks whose output gradient the next block's sum writes as bits
  // with an identity shortcut (not where that block pools its shortcut, nor
  // at the last block, whose gradient has one part), and at the stem's
  // batch norm, whose readers' gradients the executor sums.
  std::vector<std::string> sums_with = pooled_with;
  sums_with.insert(sums_with.end(), {"bf16_branch_gradient", "bf16_residual_gradient", "bf16_dy_sum"});
  same_bits_with_and_without<ResNetCifar<10>>("bn_sums_in_dy_sum", sums_with, 4, two);
  // The bf16 copy of a batch norm's output with its GELU, for the
  // convolutions after it (airbench94's layers).
  // (Not bit for bit: without rules the GELU is ops::Gelu's pass, not the
  // batch norm kernels' own.)
  const Case gelu{"bf16_copy_to_readers", {"bn_activation"}, Mode::Train,
                  ConvPrecision::BF16,    Needs::Bf16Cpu,    false};
  check_rule<ConvGelu>(gelu, {3, 16, 16}, 4, NetOptions());
  // A convolution's output as bf16 alone, which the max pool after it reads
  // (not bit for bit: the pool's output and the batch norm after it see
  // the rounded values, and the pool's argmax is taken over them, where
  // rounding makes ties that send a gradient to the window's first
  // maximum: the input gradient's error 2.1x that without rules, measured).
  const Case alone{
      "conv_bf16_output_to_pool", {}, Mode::Train, ConvPrecision::BF16, Needs::Bf16Cpu, false, 1, 3};
  check_rule<ConvGelu>(alone, {3, 16, 16}, 4, NetOptions());
  covered.insert(alone.rule);
  // That pool's output as bf16 alone, which the batch norm after it reads
  // (against no rules as conv_bf16_output_to_pool; bit for bit against
  // that rule alone: the maxima of bf16 values are bf16).
  const Case pool_out{"pool_bf16_output_to_bn",
                      {"conv_bf16_output_to_pool", "bn_activation"},
                      Mode::Train,
                      ConvPrecision::BF16,
                      Needs::Bf16Cpu,
                      false,
                      1,
                      3};
  check_rule<ConvGelu>(pool_out, {3, 16, 16}, 4, NetOptions());
  same_bits_with_and_without<ConvGelu>(pool_out.rule, {"conv_bf16_output_to_pool", "bn_activation"}, 1);
  covered.insert(pool_out.rule);
  // The max pool's dx as the bf16 dy of the convolution before it.
  const Case pool{"pool_bf16_dx_to_conv", {}, Mode::Train, ConvPrecision::BF16, Needs::Bf16Cpu, true};
  check_rule<ConvGelu>(pool, {3, 16, 16}, 4, NetOptions());
  covered.insert(pool.rule);
  // A standalone batch norm's dx (with its GELU) as the bf16 dy of the
  // convolution before it (not bit for bit, as above: it needs the GELU in
  // the batch norm's passes).
  const Case bn_dx{"bn_bf16_dx_to_standalone_conv",
                   {"bn_activation"},
                   Mode::Train,
                   ConvPrecision::BF16,
                   Needs::Bf16Cpu,
                   false};
  check_rule<ConvGelu>(bn_dx, {3, 16, 16}, 4, NetOptions());
  covered.insert(bn_dx.rule);
  // Against the same GELU in the batch norm's passes without the rule: the
  // bits are the float dx rounded as the convolution would round it
  // (conv3 + bn3; conv1's three input channels have no bf16 backward).
  same_bits_with_and_without<ConvGelu>(bn_dx.rule, {"bn_activation"}, 1);
  // A standalone batch norm's output (with its GELU) written only as the
  // bf16 copy the standalone convolution after it reads (bn1 -> conv2,
  // bn2 -> conv3): against the plan without rules as above, and bit for
  // bit against the same copy beside a float output.
  const Case bn_alone{"bn_bf16_output_alone",
                      {"bn_activation", "bf16_copy_to_readers"},
                      Mode::Train,
                      ConvPrecision::BF16,
                      Needs::Bf16Cpu,
                      false};
  check_rule<ConvGelu>(bn_alone, {3, 16, 16}, 4, NetOptions());
  same_bits_with_and_without<ConvGelu>(bn_alone.rule, {"bn_activation", "bf16_copy_to_readers"}, 2);
  {
    // The whitening's bias and GELU as the convolution's post-ops, bf16
    // out, where its parameters are frozen (no backward runs through it):
    // bit for bit against the plan without the rule (oneDNN's GELU post-op
    // is its GELU primitive's arithmetic, rounded once); while its bias
    // trains, the verdict says why not and the GELU runs.
    const NetOptions bf16 = NetOptions().with_conv_precision(ConvPrecision::BF16);
    Model<WhitenGelu, backend::OneDnn> a({3, 16, 16}, DataFormat::NHWC, bf16, 3, false);  // no input gradient
    Model<WhitenGelu, backend::OneDnn> b({3, 16, 16}, DataFormat::NHWC,
                                         NetOptions(bf16).with_rule_off("conv_gelu_bf16_output"), 3, false);
    const std::string rule = "conv_gelu_bf16_output";
    const plan::Plan trains = a.step_plan(Mode::Train, 4);
    const plan::Verdict* v = trains.verdict(rule, "conv1");
    ENSURE(v);
    CHECK_FALSE(v->fires);
    CHECK(v->reason.find("its backward runs") != std::string::npos);
    for (auto* m : {&a, &b}) {
      auto& P = m->parameters();
      P.set_requires_grad(P.id("conv1/weights"), false);
      P.set_requires_grad(P.id("conv1/biases"), false);
    }
    const plan::Plan frozen = a.step_plan(Mode::Train, 4);
    INFO(plan::describe(frozen));
    if (!machine_has(Needs::Bf16Cpu)) {
      CHECK(frozen.fired(rule) == 0);
      WARN("rule " << rule << " not compared: this CPU lacks its kernels ("
                   << (frozen.verdict(rule, "conv1") ? frozen.verdict(rule, "conv1")->reason : "") << ")");
    } else {
      CHECK(frozen.fired(rule) == 1);
      CHECK(b.step_plan(Mode::Train, 4).fired(rule) == 0);
      same_training_steps(a, b);
      REQUIRE(a.train_executor(4));
      CHECK(a.train_executor(4)->carried(rule) == 1);
      CHECK(a.train_executor(4)->describe().find("1 layers run by the layer before them") !=
            std::string::npos);
    }
    covered.insert(rule);
  }
  const Case relu{"conv_relu_post_op", {}, Mode::Infer, ConvPrecision::F32, Needs::Nothing, false};
  check_rule<ConvRelu>(relu, {3, 16, 16}, 4, NetOptions().with_conv_algorithm(ConvAlgorithm::Direct));
  {
    // Where the convolution's own forward takes Winograd (Auto at a batch
    // of 4 or fewer), the layer runs itself and the verdict says why; at 8
    // the executor's convolution takes the ReLU.
    Model<ConvRelu, backend::OneDnn> m({3, 16, 16}, DataFormat::NHWC, NetOptions(), 3, true);
    const plan::Plan small = m.step_plan(Mode::Infer, 4), large = m.step_plan(Mode::Infer, 8);
    INFO(plan::describe(small));
    CHECK(small.fired(relu.rule) == 0);
    const plan::Verdict* v = small.verdict(relu.rule, "conv1");
    ENSURE(v);
    CHECK(v->reason.find("Winograd") != std::string::npos);
    CHECK(large.fired(relu.rule) == 1);
  }
  covered.insert(relu.rule);
  // The stem's weight gradient in its batch norm's pass needs a model that
  // asks for no input gradient, which check_rule's traces do: its own test
  // case below ("ResNet's stem in bf16: its weight gradient ...").
  covered.insert("bn_dx_into_conv_weight_gradient");
  // Every rule has its case.
  for (const plan::RuleInfo& r : plan::rules()) {
    INFO("rule " << r.name);
    CHECK(covered.count(r.name) == 1);
  }
}

TEST_CASE("NetOptions::rules_off: a name that is no rule is refused, naming it", "[nn][plan][rules]") {
  using Net = Sequential<Conv2d<3, 4, 3>, GlobalAvgPool, Dense<4, 2>>;
  try {
    Model<Net, backend::Reference> m({3, 8, 8}, DataFormat::NHWC, NetOptions().with_rule_off("conv_bn_fuse"));
    FAIL("no error");
  } catch (const ConfigError& e) {
    const std::string w = e.what();
    CHECK(w.find("'conv_bn_fuse'") != std::string::npos);
    CHECK(w.find("conv_bn_fold") != std::string::npos);
  }
  Model<Net, backend::Reference> ok({3, 8, 8}, DataFormat::NHWC, NetOptions().with_rules_off({"all"}));
  CHECK(ok.step_plan(Mode::Train, 2).fired("bn_activation") == 0);
}

TEST_CASE("One rule off: its verdict says so, the rules that need it do not fire, training runs",
          "[nn][plan][rules][onednn]") {
  const NetOptions base = NetOptions().with_repeat(1).with_conv_bn_chunk_bytes(16 * 16 * 16 * 4);
  Model<ResNetCifar<10>, backend::OneDnn> all({3, 16, 16}, DataFormat::NHWC, base, 3, true);
  Model<ResNetCifar<10>, backend::OneDnn> less(
      {3, 16, 16}, DataFormat::NHWC, NetOptions(base).with_rule_off("residual_sum_in_conv_backward"), 3,
      true);
  const plan::Plan pa = all.step_plan(Mode::Train, 4), pl = less.step_plan(Mode::Train, 4);
  INFO(plan::describe(pl));
  REQUIRE(pa.fired("residual_sum_in_conv_backward") > 0);
  REQUIRE(pa.fired("pooled_shortcut_gradient") > 0);
  CHECK(pl.fired("residual_sum_in_conv_backward") == 0);
  CHECK(pl.fired("pooled_shortcut_gradient") == 0);
  CHECK(plan::describe(pl).find("turned off (NetOptions::rules_off)") != std::string::npos);
  // The other rules stand.
  CHECK(pl.fired("residual_sum_in_bn") == pa.fired("residual_sum_in_bn"));
  CHECK(pl.fired("bn_activation") == pa.fired("bn_activation"));
  REQUIRE(less.train_executor(4));
  CHECK(less.train_executor(4)->ok());
  test::same_random_parameters(all, less, 5);
  Rng rng(7);
  Tensor<float> x = make_tensor<float>(all.input_shape(4), DataFormat::NHWC);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform(-1, 1));
  const Tensor<float> ya = all.forward(x, Mode::Train);
  const Tensor<float> yl = less.forward(x, Mode::Train);
  CHECK(std::equal(ya.data(), ya.data() + ya.size(), yl.data()));
  Tensor<float> g(ya.shape());
  for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = float(rng.uniform(-1, 1));
  const Tensor<float> da = all.backward(g);
  const Tensor<float> dl = less.backward(g);
  std::vector<double> d(da.data(), da.data() + da.size());
  CHECK(rms(std::vector<float>(dl.data(), dl.data() + dl.size()), d) < 1e-4);
  CHECK(less.train_executor(4)->carried("residual_sum_in_conv_backward") == 0);
}

TEST_CASE("ResNet's stem in bf16: its output as the bf16 copy alone, its dy summed as bf16 bits",
          "[nn][plan][rules][onednn][bf16]") {
  // The stem's batch norm feeds the first block's identity shortcut and its
  // first convolution: with bf16 convolutions its float output is not
  // written (bn_bf16_stream_into_block: the block's sum reads the shortcut
  // from the bf16 copy), the first convolution's dx goes to the executor's
  // sum as bits (bf16_branch_gradient at the first block too), and that
  // sum is written as bits into the stem's dy (bf16_dy_sum), which the
  // stem's batch norm reads into a float dx for its float convolution
  // (3 input channels: no bf16 weight gradient).
  if (!backend::onednn::cpu_has_bf16_convolutions()) {
    WARN("not checked: this CPU has no bf16 convolutions");
    return;
  }
  const NetOptions base = NetOptions().with_repeat(1).with_conv_precision(ConvPrecision::BF16);
  using Net = ResNetCifar<10>;
  Model<Net, backend::OneDnn> on({3, 16, 16}, DataFormat::NHWC, base, 3, true);
  Model<Net, backend::OneDnn> off(
      {3, 16, 16}, DataFormat::NHWC,
      NetOptions(base).with_rules_off({"bn_bf16_stream_into_block", "bf16_dy_sum"}), 3, true);
  const plan::Plan p = on.step_plan(Mode::Train, 4), q = off.step_plan(Mode::Train, 4);
  INFO(plan::describe(p));
  CHECK(p.fires("bn_bf16_stream_into_block", "stem/bn1"));
  CHECK(p.fires("bf16_dy_sum", "stem/bn1"));
  CHECK(p.fires("bf16_branch_gradient", "stage1/block0/add"));
  CHECK(p.fired("bn_bf16_stream_into_block") == 1);
  CHECK(p.fired("bf16_dy_sum") == 1);
  const plan::Verdict* v = q.verdict("bn_bf16_stream_into_block", "stem/bn1");
  REQUIRE(v);
  CHECK(v->reason.find("turned off (NetOptions::rules_off)") != std::string::npos);
  // The stem's plan under other options (a plan, not a pointer into a temporary one).
  auto stem_plan = [&](const NetOptions& o) {
    Model<Net, backend::OneDnn> m({3, 16, 16}, DataFormat::NHWC, o, 3, true);
    return m.step_plan(Mode::Train, 4);
  };
  // A rule that does not fire at the stem's batch norm, its reason naming `why`.
  auto does_not_fire = [](const plan::Plan& pl, const char* rule, const char* why) {
    INFO(rule);
    const plan::Verdict* x = pl.verdict(rule, "stem/bn1");
    REQUIRE(x);
    CHECK_FALSE(x->fires);
    CHECK(x->reason.find(why) != std::string::npos);
  };
  // Without the copy the stream has nothing to read: it says why.
  does_not_fire(stem_plan(NetOptions(base).with_rule_off("bf16_copy_to_readers")),
                "bn_bf16_stream_into_block", "bf16_copy_to_readers");
  // NetOptions::bf16_gradients(false) keeps the stem's dy sum float, and
  // bf16_residuals(false) its output: each verdict says so.
  const plan::Plan pg = stem_plan(NetOptions(base).with_bf16_gradients(false));
  does_not_fire(pg, "bf16_dy_sum", "bf16_gradients");
  CHECK(pg.fires("bn_bf16_stream_into_block", "stem/bn1"));
  const plan::Plan ps = stem_plan(NetOptions(base).with_bf16_residuals(false));
  does_not_fire(ps, "bn_bf16_stream_into_block", "bf16_residuals");
  CHECK(ps.fires("bf16_dy_sum", "stem/bn1"));
  // Two training steps with and without the two rules against the layers
  // in double (the first step's output, input gradient and parameter
  // gradients): the rules' error at most twice that without them, + 1e-3
  // (the bound of every bf16 rule's case above); each carried out once a
  // step.
  Model<Net, backend::Reference, double> ref({3, 16, 16}, DataFormat::NHWC,
                                             NetOptions(base).with_rules_off({"all"}), 3, true);
  test::same_random_parameters(on, off, 5);
  test::same_random_parameters(on, ref, 5);
  const auto ta = trace(on, Mode::Train, 4, 9), tb = trace(off, Mode::Train, 4, 9);
  const auto tr = trace(ref, Mode::Train, 4, 9);
  REQUIRE(ta.parts.size() == tb.parts.size());
  REQUIRE(ta.parts.size() == tr.parts.size());
  for (std::size_t k = 0; k < ta.parts.size() && ta.names[k].rfind("step 0: ", 0) == 0; ++k) {
    if (ta.names[k].find("gradient") == std::string::npos && ta.names[k] != "step 0: output") continue;
    INFO(ta.names[k]);
    const double ea = rms(ta.parts[k], tr.parts[k]), eb = rms(tb.parts[k], tr.parts[k]);
    INFO("with the rules " << ea << ", without them " << eb);
    CHECK(ea <= 2 * eb + 1e-3);
  }
  REQUIRE(on.train_executor(4));
  CHECK(on.train_executor(4)->carried("bn_bf16_stream_into_block") == 1);
  CHECK(on.train_executor(4)->carried("bf16_dy_sum") == 1);
  CHECK(off.train_executor(4)->carried("bn_bf16_stream_into_block") == 0);
  CHECK(off.train_executor(4)->carried("bf16_dy_sum") == 0);
}

TEST_CASE("ResNet's stem in bf16: its weight gradient in its batch norm's pass of dx",
          "[nn][plan][rules][onednn][bf16]") {
  // The stem's convolution (3 input channels) has no bf16 weight gradient
  // and, without an input gradient asked for, computes no dx: its batch
  // norm's dx is summed into its weight gradient in the batch norm's own
  // pass (bn_dx_into_conv_weight_gradient), never stored. (Not among the
  // cases above: they ask for the input gradient.)
  if (!backend::onednn::cpu_has_bf16_convolutions()) {
    WARN("not checked: this CPU has no bf16 convolutions");
    return;
  }
  const NetOptions base = NetOptions().with_repeat(1).with_conv_precision(ConvPrecision::BF16);
  const char* rule = "bn_dx_into_conv_weight_gradient";
  using Net = ResNetCifar<10>;
  auto stem_verdict = [&](const NetOptions& o, bool input_gradient) {
    Model<Net, backend::OneDnn> m({3, 16, 16}, DataFormat::NHWC, o, 3, input_gradient);
    const plan::Plan p = m.step_plan(Mode::Train, 4);
    const plan::Verdict* v = p.verdict(rule, "stem/conv1");
    REQUIRE(v);
    CHECK(p.fired(rule) <= 1);  // the stem alone: the blocks' convolutions run their backward in bf16
    return *v;
  };
  const plan::Verdict on_v = stem_verdict(base, false);
  if (!on_v.fires) {  // a CPU with bf16 convolutions but without the AVX-512 kernel
    CHECK(on_v.reason.find("AVX-512") != std::string::npos);
    WARN("not compared: " << on_v.reason);
    return;
  }
  // Where it does not apply, the verdict says why.
  CHECK(stem_verdict(base, true).reason.find("the convolution computes a dx") != std::string::npos);
  CHECK(stem_verdict(NetOptions(base).with_conv_precision(ConvPrecision::F32), false)
            .reason.find("fp32 convolutions") != std::string::npos);
  CHECK(stem_verdict(NetOptions(base).with_rule_off(rule), false).reason.find("turned off") !=
        std::string::npos);
  // Two training steps with and without it, against the layers in double:
  // each parameter gradient of the first step within twice the error
  // without it + 1e-3 (the bf16 rules' bound), the stem's own weight
  // gradient too.
  Model<Net, backend::OneDnn> on({3, 16, 16}, DataFormat::NHWC, base, 3, false);
  Model<Net, backend::OneDnn> off({3, 16, 16}, DataFormat::NHWC, NetOptions(base).with_rule_off(rule), 3,
                                  false);
  // The layer tree runs it too (a rule within the layer), from a float dy.
  Model<Net, backend::OneDnn> tree({3, 16, 16}, DataFormat::NHWC, NetOptions(base).with_plan_training(false),
                                   3, false);
  CHECK(tree.step_plan(Mode::Train, 4).fires(rule, "stem/conv1"));
  Model<Net, backend::Reference, double> ref({3, 16, 16}, DataFormat::NHWC,
                                             NetOptions(base).with_rules_off({"all"}), 3, false);
  test::same_random_parameters(on, off, 5);
  test::same_random_parameters(on, tree, 5);
  test::same_random_parameters(on, ref, 5);
  const auto ta = trace(on, Mode::Train, 4, 9), tb = trace(off, Mode::Train, 4, 9);
  const auto tt = trace(tree, Mode::Train, 4, 9);
  const auto tr = trace(ref, Mode::Train, 4, 9);
  REQUIRE(ta.parts.size() == tb.parts.size());
  REQUIRE(ta.parts.size() == tt.parts.size());
  REQUIRE(ta.parts.size() == tr.parts.size());
  bool stem_seen = false;
  for (std::size_t k = 0; k < ta.parts.size() && ta.names[k].rfind("step 0: ", 0) == 0; ++k) {
    if (ta.names[k].find(" gradient") == std::string::npos ||
        ta.names[k].find("input gradient") != std::string::npos)
      continue;
    INFO(ta.names[k]);
    stem_seen = stem_seen || ta.names[k].find("stem/conv1/weights gradient") != std::string::npos;
    const double ea = rms(ta.parts[k], tr.parts[k]), eb = rms(tb.parts[k], tr.parts[k]);
    const double et = rms(tt.parts[k], tr.parts[k]);
    INFO("with the rule " << ea << " (the layer tree: " << et << "), without it " << eb);
    CHECK(ea <= 2 * eb + 1e-3);
    CHECK(et <= 2 * eb + 1e-3);
  }
  CHECK(stem_seen);
  // Carried out by the stem's layer in each of the two backward passes,
  // never with the rule off.
  CHECK(std::get<1>(on.root().children()).weight_gradients_in_bn() == 2);
  CHECK(std::get<1>(tree.root().children()).weight_gradients_in_bn() == 2);
  CHECK(std::get<1>(off.root().children()).weight_gradients_in_bn() == 0);
}
