// cifarnet/nn/plan_rules.hpp — the fusion rules, in one place, over a step
// plan's node list (nn/plan.hpp).
//
// Each rule has a pattern (node kinds, who reads whose output, what the
// containers pair) and a legality check (mode, precision, the facts the
// layers recorded: the backend's "supports this pattern here" answers with
// their reasons). Where the pattern matches, the rule records a verdict:
// fired, or not and why. describe() prints them; tests assert on them.
//
// The executors carry the verdicts out (nn/executor.hpp in inference,
// nn/train_executor.hpp in training; docs/ARCHITECTURE.md, "The step
// plan"), passing each layer call the hand-overs its verdicts give it
// (plan::Links). Where the layer tree runs a training step itself
// (NetOptions::plan_training off) every layer runs on its own: the
// training rules' patterns are listed, none fires.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/nn/plan.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet::plan {

/// A rule's name and what it saves when it fires.
struct RuleInfo {
  const char* name;
  const char* saves;
};

/// The rules inside one layer (a ConvBatchNorm's two parts, a batch norm
/// and its activation): the layer does them whoever runs it, the layer
/// tree too. Every other rule hands something between layers, which only
/// the executors do.
inline bool within_layer(const std::string& rule) {
  static const char* const r[] = {"conv_bn_fold",
                                  "bn_activation",
                                  "conv_bn_bf16_output",
                                  "bn_bf16_dx_to_conv",
                                  "bn_stats_in_conv_epilogue",
                                  "bn_dx_in_conv_prologue",
                                  "conv_bn_ranged_backward",
                                  "bn_dx_into_conv_weight_gradient"};
  return std::find(std::begin(r), std::end(r), rule) != std::end(r);
}

/// Every rule, in the order apply_rules() runs them.
inline const std::vector<RuleInfo>& rules() {
  static const std::vector<RuleInfo> r = {
      {"conv_bn_fold",
       "inference: batch norm folded into the convolution's weights and bias, one pass instead of two"},
      {"bn_activation", "the batch norm's ReLU or GELU in its own pass: one pass over the activations less"},
      {"conv_relu_post_op", "a ReLU as the convolution's post-op: one pass over the activations less"},
      {"conv_bn_bf16_output", "the convolution's output written and read as bf16: 2 bytes an element, not 4"},
      {"bn_bf16_dx_to_conv", "the batch norm's dx written as bf16 straight into the convolution's backward"},
      {"bn_stats_in_conv_epilogue",
       "the batch norm's statistics summed in the convolution's epilogue: one read of its output less"},
      {"bn_dx_in_conv_prologue",
       "the batch norm's dx computed image by image in the convolution backward's prologue: never stored"},
      {"conv_bn_ranged_backward",
       "the batch norm's dx handed to the convolution's backward a range of images at "
       "a time, from cache"},
      {"bn_dx_into_conv_weight_gradient",
       "bf16 training, a convolution that computes no dx and whose weight gradient would run in float "
       "(ResNet's stem: 3 input channels): the batch norm's dx summed row by row into the convolution's "
       "weight gradient in the batch norm's own pass, never stored: the float dx's write, its read by the "
       "convolution's backward and that backward's pass saved"},
      {"bn_output_into_next_conv",
       "a batch norm's output left unwritten, computed by the next convolution's kernels from its map"},
      {"bn_bf16_output_alone",
       "a batch norm's output written only as the bf16 copy the next convolution reads"},
      {"bf16_dx_between_conv_bn", "the input gradient between two ConvBatchNorm handed over as bf16 bits"},
      {"pool_into_pad", "the shortcut's average pool written straight into the channel pad after it"},
      {"conv_bf16_output_to_pool",
       "a standalone bf16 convolution's output written only as bf16 for the max pool that alone reads it: "
       "half the bytes written and read, no float output"},
      {"pool_bf16_output_to_bn",
       "a max pool that reads a bf16 convolution's output (conv_bf16_output_to_pool) written only as bf16 "
       "for the standalone batch norm that alone reads it, its maxima exact in bf16: half the bytes written "
       "and read four times (the batch norm's two forward and two backward passes)"},
      {"conv_gelu_bf16_output",
       "training, nothing before the GELU's output needing a gradient (airbench94's whitening after its bias "
       "epochs): a standalone convolution's bias and the GELU layer after it as the convolution's post-ops, "
       "written only as bf16 for the bf16 convolution that alone reads it: the GELU's pass and the rounding "
       "pass saved, 2 bytes an element written instead of 4"},
      {"pool_bf16_dx_to_conv",
       "a max pool's dx written as bf16 bits into the dy of the bf16 convolution before it: 2 bytes an "
       "element, and no rounding pass in the convolution's backward"},
      {"bn_bf16_dx_to_standalone_conv",
       "a standalone batch norm's dx (with its ReLU or GELU) written as bf16 bits into the dy of the bf16 "
       "convolution before it: 2 bytes an element, and no rounding pass in the convolution's backward"},
      {"residual_sum_in_bn",
       "the residual sum (and its ReLU) in the body's last batch norm pass: the sum's own pass saved"},
      {"bf16_residual_stream",
       "a block's output kept only as bf16 and ReLU mask bits where the next block reads nothing else"},
      {"residual_mask_in_sum",
       "the previous block's ReLU mask applied in this block's backward sum: that block's mask pass saved"},
      {"relu_mask_bits", "that mask written as bits with the sum (1 bit an element) and read from them"},
      {"residual_sum_in_conv_backward",
       "a block's backward sum done on each range of its first convolution's dx while in cache: a pass "
       "saved"},
      {"pooled_shortcut_gradient",
       "the pooled shortcut's gradient formed inside that sum: its own pass saved"},
      {"pooled_gradient_in_sum",
       "a downsampling block's pooled shortcut gradient formed inside the previous block's backward sum "
       "(through its mask bits) from the pad's gradient: the pool's backward pass and its full-size "
       "float dx saved"},
      {"bf16_branch_gradient", "the body's input gradient handed to the block's sum as bf16 bits"},
      {"bf16_residual_gradient", "a block's output gradient written by the next block's sum as bf16 bits"},
      {"bn_sums_in_next_conv_backward",
       "a batch norm's backward sums taken by the next convolution's backward over its dx: a read saved"},
      {"bf16_copy_to_readers",
       "training executor, bf16 convolutions: a batch norm's bf16 copy of its output read by the "
       "convolutions after it, which then do not round the float values themselves"},
      {"bn_bf16_stream_into_block",
       "training executor, bf16 convolutions: a batch norm's output that only the residual block after it "
       "reads (ResNet's stem) written only as its bf16 copy, the block's identity shortcut read from that "
       "copy in its sum: 4 bytes an element less written, 2 less read"},
      {"bf16_dy_sum",
       "training executor, bf16 convolutions: the gradients of a batch norm's output from its several "
       "readers (ResNet's stem) summed as bf16 bits straight into the batch norm's dy: 2 bytes an element "
       "written and read twice instead of 4"},
      {"bn_sums_in_dy_sum",
       "training executor, bf16 convolutions: a batch norm's backward sums taken in the pass that writes its "
       "dy as bf16 bits from two gradient parts (a residual block's backward sum through its ReLU mask bits, "
       "or the sum of ResNet's stem readers' gradients): the batch norm's pass of its sums saved (a read of "
       "its dy and its input)"},
      {"residual_sum_in_conv_epilogue",
       "inference: the residual sum (and its ReLU) as the folded convolution's post-ops: the sum's own pass "
       "saved"},
      {"conv_winograd_epilogue",
       "inference, float: the convolution in the backend's own Winograd F(4x4, 3x3) kernels, a quarter of "
       "the multiplies, its bias, residual sum and ReLU added in the output transform"},
      {"conv_epilogue_in_registers",
       "inference, float: the convolution in the backend's own kernels, its bias, residual sum and ReLU "
       "added to each register tile before it is stored (no copy of the sum's term first)"},
      {"bf16_activations",
       "inference with bf16 convolutions: an output kept as bf16 where only bf16 convolutions read it: "
       "half the bytes, no rounding pass in the next convolution"},
  };
  return r;
}

/// Whether `name` is one of rules().
inline bool is_rule(const std::string& name) {
  const auto& r = rules();
  return std::any_of(r.begin(), r.end(), [&](const RuleInfo& i) { return name == i.name; });
}
/// Every rule's name, comma-separated (for messages).
inline std::string rule_names() {
  std::string s;
  for (const RuleInfo& i : rules()) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

/// The backend's capabilities the rules read directly (the rest come as
/// facts recorded by the layers).
struct Caps {
  bool fused_relu = false, fused_gelu = false;
  /// The plan executor's convolution with a bias, sum and ReLU epilogue
  /// (ops::ConvEpilogue), and whether it keeps activations bf16 here.
  bool conv_epilogue = false, bf16_activations = false;
};
template <class B, class T = float>
Caps caps_of() {
  return {backend_traits<B>::fused_relu, backend_traits<B>::fused_gelu, ops::ConvEpilogue<B, T>::supported,
          ops::ConvEpilogue<B, T>::bf16_storage()};
}

namespace rules_detail {
inline const Node& at(const Plan& p, int i) { return p.nodes[std::size_t(i)]; }
/// Whether node i is the convolution of a ConvBatchNorm (its batch norm next).
inline bool conv_of_pair(const Plan& p, int i) {
  const Node& n = at(p, i);
  return n.kind == "conv" && !n.layer.empty() && std::size_t(i) + 1 < p.nodes.size() &&
         at(p, i + 1).kind == "bn" && at(p, i + 1).layer == n.layer;
}
/// The fact's answer: ok, or its reason (a layer that recorded no such fact
/// declares no such capability).
inline std::pair<bool, std::string> fact(const Node& n, const char* f) {
  const Fact* x = n.fact(f);
  if (!x) return {false, "'" + n.name + "' (" + n.kind + ") declares no " + f};
  return {x->ok, x->ok ? std::string() : x->why};
}
/// A verdict that fired, withdrawn with its reason (and off its nodes' lists).
inline void withdraw(Plan& p, Verdict& v, std::string reason) {
  v.fires = false;
  v.reason = std::move(reason);
  for (int i : v.nodes) {
    auto& f = p.nodes[std::size_t(i)].fused;
    f.erase(std::remove(f.begin(), f.end(), v.rule), f.end());
  }
}
/// The tensor t is, looking through identities (the executors alias them).
inline int through_identities(const Plan& p, int t) {
  for (int w = p.tensors[std::size_t(t)].producer;
       w >= 0 && at(p, w).kind == "identity" && at(p, w).inputs.size() == 1;
       w = p.tensors[std::size_t(t)].producer)
    t = at(p, w).inputs[0];
  return t;
}
/// The residual sum of the block that reads the output of block sum i as
/// its input (through identities: an empty Repeat between stages), or -1.
inline int next_block(const Plan& p, int i) {
  for (std::size_t j = std::size_t(i) + 1; j < p.nodes.size(); ++j)
    if (p.nodes[j].kind == "add" && p.nodes[j].block_input >= 0 &&
        through_identities(p, p.nodes[j].block_input) == at(p, i).output)
      return int(j);
  return -1;
}
/// Who reads node i's output, in words (for reasons).
inline std::string readers(const Plan& p, int i) {
  const auto& c = p.tensors[std::size_t(at(p, i).output)].consumers;
  if (c.empty()) return "nothing reads its output";
  if (c.size() > 1) return "its output has " + std::to_string(c.size()) + " readers";
  const Node& r = at(p, c[0]);
  return "its output goes to '" + r.name + "' (" + r.kind + ")";
}
}  // namespace rules_detail

/// The plan executor's rules (nn/executor.hpp, inference): a folded
/// convolution takes the residual sum after it into its epilogue; a
/// convolution runs in the backend's own kernels where they take it; with bf16
/// convolutions, the outputs that only such convolutions read stay bf16.
template <class Verdict>
void inference_rules(const Plan& p, const Caps& caps, Verdict&& verdict) {
  using namespace rules_detail;
  const int count = int(p.nodes.size());
  // The convolutions the executor runs itself, and the node whose output
  // each writes: its batch norm's (folded), the ReLU's (conv_relu_post_op),
  // or its own; a sum an epilogue takes.
  std::vector<int> last(std::size_t(count), -1);
  std::vector<bool> sum_taken(std::size_t(count), false);
  for (int c = 0; c < count; ++c) {
    const Node& n = at(p, c);
    if (n.kind != "conv" || !caps.conv_epilogue || !fact(n, facts::kEpilogueConv).first) continue;
    const bool folded = p.fires("conv_bn_fold", n.name);
    last[std::size_t(c)] = folded ? c + 1 : c;
    const int r = p.only_consumer(n.output);
    if (!folded && r >= 0 && p.fires("conv_relu_post_op", n.name)) last[std::size_t(c)] = r;
  }
  // The sum (and its ReLU) of a block whose body ends in a folded convolution.
  for (int c = 0; c + 1 < count; ++c) {
    if (!p.fires("conv_bn_fold", at(p, c).name)) continue;
    const Node& bn = at(p, c + 1);
    const int a = p.only_consumer(bn.output);
    if (a < 0 || at(p, a).kind != "add") continue;
    const std::string why = !caps.conv_epilogue ? "no convolution epilogue on this backend"
                            : bn.attrs.relu     ? "a ReLU between the batch norm and the sum"
                                                : "";
    verdict("residual_sum_in_conv_epilogue", {c, c + 1, a}, why.empty(), why);
    if (why.empty()) sum_taken[std::size_t(a)] = true, last[std::size_t(c)] = a;
  }
  // Each convolution the executor runs, in the backend's own Winograd
  // kernels where they take it (its fact: geometry, float products,
  // channels), else in its own direct kernels where they do (geometry,
  // float products, batch vs threads).
  for (int c = 0; c < count; ++c) {
    const int l = last[std::size_t(c)];
    if (l < 0) continue;
    const std::vector<int> nodes = l == c ? std::vector<int>{c} : std::vector<int>{c, l};
    auto [wino, wino_why] = fact(at(p, c), facts::kWinogradForward);
    verdict("conv_winograd_epilogue", nodes, wino, wino_why);
    if (p.fires("conv_winograd_epilogue", at(p, c).name)) {
      verdict("conv_epilogue_in_registers", nodes, false, "conv_winograd_epilogue runs it");
      continue;
    }
    auto [ok, why] = fact(at(p, c), facts::kOwnForward);
    verdict("conv_epilogue_in_registers", nodes, ok, why);
  }
  if (p.key.precision != ConvPrecision::BF16) return;
  // Who reads tensor t, looking through identities: a convolution the
  // executor runs (its input) and a sum one takes read bf16; anything else
  // float.
  auto float_reader = [&](int t) -> int {
    std::vector<int> todo{t};
    while (!todo.empty()) {
      const int u = todo.back();
      todo.pop_back();
      for (int r : p.tensors[std::size_t(u)].consumers) {
        const Node& n = at(p, r);
        if (n.kind == "identity" && n.output != p.output)
          todo.push_back(n.output);
        else if (!(n.kind == "conv" && last[std::size_t(r)] >= 0) &&
                 !(n.kind == "add" && sum_taken[std::size_t(r)]))
          return r;
      }
    }
    return -1;
  };
  for (int c = 0; c < count; ++c) {
    if (last[std::size_t(c)] < 0) continue;
    const int out = at(p, last[std::size_t(c)]).output;
    if (p.tensors[std::size_t(out)].consumers.empty() || out == p.output) {
      verdict("bf16_activations", {c, last[std::size_t(c)]}, false, "the model's output is float");
      continue;
    }
    const int r = caps.bf16_activations ? float_reader(out) : -1;
    const std::string why = !caps.bf16_activations ? "no bf16 activations on this CPU"
                            : r >= 0
                                ? "read by '" + at(p, r).name + "' (" + at(p, r).kind + "), which reads float"
                                : "";
    verdict("bf16_activations", {c, last[std::size_t(c)]}, why.empty(), why);
  }
}

/// apply_rules' last part for a plan the training executor runs
/// (Key::train_executor, nn/train_executor.hpp): where its order of work
/// cannot carry a verdict out, the verdict is withdrawn with the reason;
/// then a batch norm's bf16 copy to every layer that reads its output.
template <class MakeVerdict>
void train_executor_rules(Plan& p, MakeVerdict&& verdict) {
  using namespace rules_detail;
  if (!p.key.training || !p.key.train_executor) return;
  // A block's backward sum in its first convolution's backward needs the
  // shortcut's part of the gradient first: an identity's, given when the
  // sum's backward runs (a pool's comes after the body's in plan order).
  for (Verdict& v : p.verdicts) {
    if (v.rule != "residual_sum_in_conv_backward" || !v.fires) continue;
    const Node& add = at(p, v.nodes[0]);
    const int sc = p.tensors[std::size_t(add.inputs[1])].producer;
    if (sc >= 0 && at(p, sc).kind == "identity") continue;
    if (p.fires("pooled_shortcut_gradient", add.name)) continue;  // formed in the sum itself
    withdraw(
        p, v,
        "the shortcut is neither an identity nor a pool into a pad: the training executor forms its gradient "
        "after the body's");
  }
  // A batch norm's sums taken by the next block's first convolution need
  // that block's sum in the convolution's backward too (its shortcut reads
  // the tensor as well).
  for (Verdict& v : p.verdicts) {
    if (v.rule != "bn_sums_in_next_conv_backward" || !v.fires) continue;
    const int t = at(p, v.nodes[1]).inputs[0];
    if (p.tensors[std::size_t(t)].consumers.size() < 2) continue;
    bool summed = false;
    for (const Node& n : p.nodes)
      if (n.kind == "add" && n.block_input == t) summed = p.fires("residual_sum_in_conv_backward", n.name);
    if (summed) continue;
    withdraw(p, v,
             "the next block's sum is not in its first convolution's backward in the training executor");
  }
  // The bf16 copy a batch norm writes of its output (or of the residual sum
  // it writes) handed to the layers that read that tensor, through
  // identities.
  const int count = int(p.nodes.size());
  for (int b = 0; b < count; ++b) {
    const Node& bn = at(p, b);
    if (bn.kind != "bn") continue;
    int t = bn.output;
    const int r0 = p.only_consumer(t);
    if (r0 >= 0 && at(p, r0).kind == "add" && p.fires("residual_sum_in_bn", at(p, r0).name))
      t = at(p, r0).output;
    std::vector<int> todo{t}, readers;
    while (!todo.empty()) {
      const int u = todo.back();
      todo.pop_back();
      for (int r : p.tensors[std::size_t(u)].consumers) {
        if (at(p, r).kind == "identity") todo.push_back(at(p, r).output);
        readers.push_back(r);
      }
    }
    if (readers.empty()) continue;
    const bool conv =
        std::any_of(readers.begin(), readers.end(), [&](int r) { return at(p, r).kind == "conv"; });
    auto [ok, why] = fact(bn, facts::kBf16Copy);
    if (p.fires("bn_output_into_next_conv", bn.name)) {
      verdict("bf16_copy_to_readers", {b, readers.front()}, false,
              "its output is not written (bn_output_into_next_conv)");
      continue;
    }
    verdict("bf16_copy_to_readers", {b, readers.front()}, ok && conv, !ok ? why : "no convolution reads it");
  }
  // A batch norm whose output only the residual block after it reads (the
  // stem before ResNet's first block: that block's identity shortcut and
  // its first convolution): written only as the bf16 copy it hands to its
  // readers, the shortcut read from that copy in the block's sum, as
  // bf16_residual_stream does between two blocks.
  for (int b = 0; b < count; ++b) {
    const Node& bn = at(p, b);
    if (bn.kind != "bn") continue;
    int add = -1;
    for (int i = 0; i < count && add < 0; ++i)
      if (at(p, i).kind == "add" && at(p, i).block_input == bn.output) add = i;
    if (add < 0) continue;
    const Node& sum = at(p, add);
    const int last = p.tensors[std::size_t(sum.inputs[0])].producer;
    auto [alone, walone] = fact(bn, facts::kBf16OutputAlone);
    auto [stream, wstream] = fact(sum, facts::kBf16Stream);
    std::string why = !alone ? "the batch norm: " + walone
                      : !p.fires("bf16_copy_to_readers", bn.name)
                          ? "its bf16 copy is not handed to its readers "
                            "(bf16_copy_to_readers)"
                      : !stream                                  ? "the block: " + wstream
                      : !p.fires("residual_sum_in_bn", sum.name) ? "the block's sum is not its batch norm's"
                      : last < 0 || !fact(at(p, last), facts::kBf16Sum).first
                          ? "the block's last batch norm reads no bf16 shortcut"
                          : "";
    for (int r : p.tensors[std::size_t(bn.output)].consumers) {
      if (!why.empty()) break;
      const Node& n = at(p, r);
      if (n.kind == "identity" && n.output == sum.inputs[1]) continue;  // the block's shortcut
      if (n.kind == "conv" || n.kind == "avg_pool") {
        auto [only, wonly] = fact(n, facts::kBf16InputOnly);
        if (!only) why = "'" + n.name + "': " + wonly;
      } else {
        why = "'" + n.name + "' (" + n.kind + ") reads it as float";
      }
    }
    verdict("bn_bf16_stream_into_block", {b, add}, why.empty(), why);
  }
  // A batch norm's output read by several layers (the stem before ResNet's
  // first block: its identity shortcut and its first convolution): the
  // executor sums their gradients before the batch norm's backward, and
  // writes that sum as bf16 bits into the batch norm's dy where it reads
  // them (its dx stays float where its convolution's backward is float).
  for (int b = 0; b < count; ++b) {
    const Node& bn = at(p, b);
    if (bn.kind != "bn" || p.tensors[std::size_t(bn.output)].consumers.size() < 2) continue;
    auto [dy, wdy] = fact(bn, facts::kBf16DySum);
    verdict("bf16_dy_sum", {b, p.tensors[std::size_t(bn.output)].consumers.front()}, dy,
            "the batch norm: " + wdy);
  }
  // A batch norm's backward sums taken in the pass that writes its dy as
  // bf16 bits from two parts: a block's backward sum through its ReLU's
  // mask bits into its body's last batch norm (bf16_residual_gradient), or
  // the executor's sum of a batch norm's readers' gradients (bf16_dy_sum).
  // Not where one part is a pooled shortcut gradient, formed in the sum
  // by the pool's own kernel (pooled_gradient_in_sum).
  const std::size_t before = p.verdicts.size();
  for (std::size_t k = 0; k < before; ++k) {
    const Verdict v = p.verdicts[k];  // a copy: verdict() appends
    if (!v.fires || v.nodes.size() < 2) continue;
    if (v.rule == "bf16_residual_gradient") {
      const int bn = p.tensors[std::size_t(at(p, v.nodes[0]).inputs[0])].producer;  // the body's last
      if (bn < 0) continue;
      auto [sums, wsums] = fact(at(p, bn), facts::kDySums);
      const bool pooled = p.fires("pooled_gradient_in_sum", at(p, v.nodes[1]).name);
      verdict("bn_sums_in_dy_sum", {v.nodes[0], bn}, sums && !pooled,
              !sums ? "the batch norm: " + wsums
                    : "the next block's shortcut gradient is formed in that sum (pooled_gradient_in_sum)");
    } else if (v.rule == "bf16_dy_sum") {
      auto [sums, wsums] = fact(at(p, v.nodes[0]), facts::kDySums);
      verdict("bn_sums_in_dy_sum", {v.nodes[0], v.nodes[1]}, sums, "the batch norm: " + wsums);
    }
  }
}

/// Runs every rule over the plan: its verdicts, and the rules that fired
/// recorded on their nodes (Node::fused).
inline void apply_rules(Plan& p, const Caps& caps) {
  using namespace rules_detail;
  const bool tree = p.key.training && !p.key.train_executor;
  auto verdict = [&](const char* rule, std::vector<int> nodes, bool fires, std::string reason) {
    if (tree && fires && !within_layer(rule)) {  // a hand-over the layer tree does not make
      fires = false;
      reason = "the layer tree runs the step, every layer on its own (NetOptions::plan_training is off)";
    }
    if (!p.key.rule_on(rule)) {  // the first reason (the layers asked too: BuildContext::rule_on)
      fires = false;
      reason = "turned off (NetOptions::rules_off)";
    }
    // A hand-over that reads what another rule's hand-over leaves (the
    // rest follow from the verdicts and facts they test).
    static const std::pair<const char*, const char*> needs[] = {
        {"bn_bf16_output_alone", "bf16_copy_to_readers"},
        {"bf16_residual_stream", "bf16_copy_to_readers"},
        {"bn_bf16_stream_into_block", "bf16_copy_to_readers"},
        {"pool_bf16_output_to_bn", "conv_bf16_output_to_pool"}};
    for (const auto& [r, q] : needs)
      if (fires && std::string(rule) == r && !p.key.rule_on(q)) {
        fires = false;
        reason = std::string("needs ") + q + ", which is turned off (NetOptions::rules_off)";
      }
    if (fires)
      for (int i : nodes) p.nodes[std::size_t(i)].fused.push_back(rule);
    p.verdicts.push_back({rule, std::move(nodes), fires, fires ? std::string() : std::move(reason)});
  };
  auto by_fact = [&](const char* rule, std::vector<int> nodes, const Node& holder, const char* f) {
    auto [ok, why] = fact(holder, f);
    verdict(rule, std::move(nodes), ok, why);
  };
  const bool train = p.key.training;
  const int count = int(p.nodes.size());
  // Rules over one ConvBatchNorm (its convolution c, its batch norm c + 1).
  for (int c = 0; c < count; ++c) {
    if (!conv_of_pair(p, c)) continue;
    const Node& conv = at(p, c);
    if (!train) {
      // ConvBatchNorm::infer: the moving statistics folded into w and b.
      verdict("conv_bn_fold", {c, c + 1}, true, {});
      continue;
    }
    by_fact("conv_bn_bf16_output", {c, c + 1}, conv, facts::kBf16Output);
    by_fact("bn_bf16_dx_to_conv", {c, c + 1}, conv, facts::kBf16Backward);
    by_fact("bn_stats_in_conv_epilogue", {c, c + 1}, conv, facts::kStatsEpilogue);
    by_fact("bn_dx_in_conv_prologue", {c, c + 1}, conv, facts::kDirectBackward);
    by_fact("conv_bn_ranged_backward", {c, c + 1}, conv, facts::kRangedBackward);
    by_fact("bn_dx_into_conv_weight_gradient", {c, c + 1}, conv, facts::kWgradInBn);
  }
  // Standalone layers (airbench94, VGG-19, the tutorial CNN): a Conv2d
  // followed by a BatchNorm2d (through a max pool or not), or by a ReLU
  // layer. The patterns match; today's executor fuses neither.
  for (int c = 0; c < count; ++c) {
    const Node& conv = at(p, c);
    if (conv.kind != "conv" || !conv.layer.empty()) continue;
    int r = p.only_consumer(conv.output);
    if (r < 0) continue;
    if (at(p, r).kind == "relu") {
      // inference: the plan executor's convolution takes it (nn/executor.hpp)
      auto [epi, wepi] = fact(conv, facts::kEpilogueConv);
      const std::string why = train
                                  ? "training: a ReLU layer is its own pass (the plan executor, which gives "
                                    "a convolution its ReLU, runs inference only)"
                              : !caps.conv_epilogue ? "no convolution epilogue on this backend"
                              : !epi                ? wepi
                                                    : "";
      verdict("conv_relu_post_op", {c, r}, why.empty(), why);
      continue;
    }
    std::string between;
    if (at(p, r).kind == "max_pool") {
      between = "; a max pool between them";
      r = p.only_consumer(at(p, r).output);
      if (r < 0) continue;
    }
    if (at(p, r).kind != "bn" || !train) continue;
    auto [own, wown] = fact(conv, facts::kOwnKernels);
    const std::string why =
        "standalone Conv2d and BatchNorm2d layers (the executor fuses a ConvBatchNorm "
        "layer only)" +
        between + "; the own kernels: " + (own ? "take this geometry" : wown);
    const std::string layers =
        "standalone Conv2d and BatchNorm2d layers (the executor fuses a ConvBatchNorm "
        "layer only)" +
        between;
    verdict("conv_bn_bf16_output", {c, r}, false, layers);
    verdict("bn_bf16_dx_to_conv", {c, r}, false, layers);
    verdict("bn_stats_in_conv_epilogue", {c, r}, false, why);
    verdict("bn_dx_in_conv_prologue", {c, r}, false, why);
  }
  // A standalone convolution read by a max pool alone (airbench94's
  // groups): its output written as bf16 alone, which the pool reads.
  for (int c = 0; c < count && train; ++c) {
    const Node& conv = at(p, c);
    if (conv.kind != "conv" || !conv.layer.empty()) continue;
    const int r = p.only_consumer(conv.output);
    if (r < 0 || at(p, r).kind != "max_pool") continue;
    auto [out, wout] = fact(conv, facts::kBf16OutputAlone);
    auto [in, win] = fact(at(p, r), facts::kBf16InputOnly);
    verdict("conv_bf16_output_to_pool", {c, r}, out && in,
            !out ? "the convolution: " + wout : "the pool: " + win);
  }
  // That max pool, read by a standalone batch norm alone: its output (the
  // maxima of bf16 values, bf16 themselves) as bf16 alone.
  for (int q = 0; q < count && train; ++q) {
    const Node& pool = at(p, q);
    if (pool.kind != "max_pool") continue;
    const int r = p.only_consumer(pool.output);
    if (r < 0 || at(p, r).kind != "bn" || !at(p, r).layer.empty()) continue;
    const int c = p.tensors[std::size_t(pool.inputs[0])].producer;
    bool bits_in = false;
    for (const Verdict& v : p.verdicts)
      if (v.rule == "conv_bf16_output_to_pool" && v.nodes == std::vector<int>{c, q}) bits_in = v.fires;
    auto [out, wout] = fact(pool, facts::kBf16OutputAlone);
    auto [in, win] = fact(at(p, r), facts::kBf16InputOnly);
    verdict("pool_bf16_output_to_bn", {q, r}, bits_in && out && in,
            !bits_in ? "the pool's input is not a convolution's bf16 output alone (conv_bf16_output_to_pool)"
            : !out   ? "the pool: " + wout
                     : "the batch norm: " + win);
  }
  // A standalone convolution, the GELU layer that alone reads it and a
  // standalone convolution that alone reads the GELU's output (airbench94's
  // whitening): with no backward through them, the GELU as the first
  // convolution's post-op, its output as bf16 alone.
  for (int c = 0; c < count && train; ++c) {
    const Node& conv = at(p, c);
    if (conv.kind != "conv" || !conv.layer.empty()) continue;
    const int g = p.only_consumer(conv.output);
    if (g < 0 || at(p, g).kind != "gelu") continue;
    const int r = p.only_consumer(at(p, g).output);
    if (r < 0 || at(p, r).kind != "conv" || !at(p, r).layer.empty()) continue;
    auto [epi, wepi] = fact(conv, facts::kGeluBf16Output);
    auto [in, win] = fact(at(p, r), facts::kBf16InputOnly);
    verdict("conv_gelu_bf16_output", {c, g, r}, epi && in,
            !epi ? "the convolution: " + wepi : "the next convolution: " + win);
  }
  // A standalone convolution read by a max pool or a standalone batch norm
  // alone (airbench94's groups): the reader's dx handed to the
  // convolution's backward as bf16.
  for (int c = 0; c < count && train; ++c) {
    const Node& conv = at(p, c);
    if (conv.kind != "conv" || !conv.layer.empty()) continue;
    const int r = p.only_consumer(conv.output);
    const bool pool = r >= 0 && at(p, r).kind == "max_pool";
    if (r < 0 || (!pool && (at(p, r).kind != "bn" || !at(p, r).layer.empty()))) continue;
    auto [dy, wdy] = fact(conv, facts::kDyBits);
    auto [dx, wdx] = fact(at(p, r), facts::kDxBits);
    verdict(pool ? "pool_bf16_dx_to_conv" : "bn_bf16_dx_to_standalone_conv", {c, r}, dy && dx,
            !dy ? "the convolution: " + wdy : (pool ? "the pool: " : "the batch norm: ") + wdx);
  }
  // A batch norm's activation in its own pass (standalone or in a ConvBatchNorm).
  for (int i = 0; i < count; ++i) {
    const Node& n = at(p, i);
    if (n.kind != "bn" || !(n.attrs.relu || n.attrs.gelu)) continue;
    if (!train && !n.layer.empty() && p.key.rule_on("conv_bn_fold"))
      continue;  // folded: the ReLU is the convolution's post-op
    const bool ok = n.attrs.relu ? caps.fused_relu : caps.fused_gelu;
    verdict(
        "bn_activation", {i}, ok,
        std::string("the backend runs the ") + (n.attrs.relu ? "ReLU" : "GELU") + " as a pass of its own");
  }
  // A standalone batch norm (with its activation) read by a standalone
  // convolution alone (airbench94's groups): its output written only as the
  // bf16 copy the convolution reads.
  for (int b = 0; b < count && train; ++b) {
    const Node& bn = at(p, b);
    if (bn.kind != "bn" || !bn.layer.empty()) continue;
    const int r = p.only_consumer(bn.output);
    if (r < 0 || at(p, r).kind != "conv" || !at(p, r).layer.empty()) continue;
    auto [out, wout] = fact(bn, facts::kBf16OutputAlone);
    auto [in, win] = fact(at(p, r), facts::kBf16InputOnly);
    verdict("bn_bf16_output_alone", {b, r}, out && in,
            !out ? "the batch norm: " + wout : "the next convolution: " + win);
  }
  // Two ConvBatchNorm, the first one's batch norm b feeding the second one's
  // convolution (its only reader): what the executor hands between them.
  for (int b = 0; b < count; ++b) {
    const Node& bn = at(p, b);
    if (bn.kind != "bn" || bn.layer.empty() || !train) continue;
    const int r = p.only_consumer(bn.output);
    if (r < 0 || !conv_of_pair(p, r)) {
      const std::string why = readers(p, b) + ", not to the convolution of a ConvBatchNorm";
      if (r >= 0 && (at(p, r).kind == "identity" || conv_of_pair(p, r)))
        for (const char* rule :
             {"bn_output_into_next_conv", "bn_bf16_output_alone", "bf16_dx_between_conv_bn"})
          verdict(rule, {b, r}, false, why);
      continue;
    }
    const Node& next = at(p, r);
    auto both = [&](const char* rule, const Node& x, const char* fx, const Node& y, const char* fy) {
      auto [a, wa] = fact(x, fx);
      auto [c, wc] = fact(y, fy);
      verdict(rule, {b, r}, a && c, !a ? "the batch norm: " + wa : "the next convolution: " + wc);
    };
    both("bn_output_into_next_conv", bn, facts::kDeferOutput, next, facts::kNormalisedInput);
    if (p.verdicts.back().fires)  // bf16 convolutions: no output, not even its bf16 copy
      verdict("bn_bf16_output_alone", {b, r}, false, "its output is not written (bn_output_into_next_conv)");
    else
      both("bn_bf16_output_alone", bn, facts::kBf16OutputAlone, next, facts::kBf16InputOnly);
    both("bf16_dx_between_conv_bn", bn, facts::kBf16Dy, next, facts::kBf16Dx);
  }
  // An average pool and the channel pad after it.
  for (int i = 0; i < count; ++i) {
    const Node& n = at(p, i);
    if (n.kind != "avg_pool") continue;
    const int r = p.only_consumer(n.output);
    if (r < 0 || at(p, r).kind != "channel_pad") continue;
    by_fact("pool_into_pad", {i, r}, n, facts::kPadsInPlace);
  }
  // Residual blocks: the sum in the body's last batch norm; the ReLU mask
  // of a block applied in the sum of the block reading its output.
  for (int i = 0; i < count; ++i) {
    const Node& add = at(p, i);
    if (add.kind != "add" || add.block_input < 0) continue;
    if (train) {
      const int body = p.tensors[std::size_t(add.inputs[0])].producer;
      if (body >= 0 && at(p, body).kind == "bn") {
        if (p.only_consumer(add.inputs[0]) != i)
          verdict("residual_sum_in_bn", {i, body}, false, "the body's output has other readers");
        else
          by_fact("residual_sum_in_bn", {i, body}, at(p, body), facts::kTakesSum);
      } else {
        verdict("residual_sum_in_bn", {i}, false,
                body < 0 ? "the body is empty"
                         : "the body ends in '" + at(p, body).name + "' (" + at(p, body).kind +
                               "), not a batch norm");
      }
    }
    if (train) {
      const int next = next_block(p, i);
      if (next >= 0)
        verdict("residual_mask_in_sum", {i, next}, add.attrs.relu, "the block has no fused ReLU");
    }
  }
  if (!train) return inference_rules(p, caps, verdict);
  // The backward hand-overs around residual blocks, on the verdicts above.
  auto fired_at = [&](const char* rule, int a, int b = -1) {
    for (const Verdict& v : p.verdicts)
      if (v.rule == rule && v.nodes[0] == a && (b < 0 || (v.nodes.size() > 1 && v.nodes[1] == b)))
        return v.fires;
    return false;
  };
  auto ok = [&](int node, const char* f) { return fact(at(p, node), f).first; };
  // The sum node of the block whose output the block with sum node `a`
  // reads as its input, or -1.
  auto previous = [&](int a) {
    const int t = at(p, a).block_input;
    const int w = p.tensors[std::size_t(t)].producer;
    return w >= 0 && at(p, w).kind == "add" && at(p, w).block_input >= 0 ? w : -1;
  };
  // A block's body's first node: the last reader of the block's input (the
  // shortcut is emitted first), if the input has exactly the two readers.
  auto body_first = [&](int a) {
    const auto& c = p.tensors[std::size_t(at(p, a).block_input)].consumers;
    return c.size() == 2 ? c[1] : -1;
  };
  for (int i = 0; i < count; ++i) {
    if (at(p, i).kind != "add" || at(p, i).block_input < 0) continue;
    const int prev = previous(i);
    // The sum's ReLU mask written as bits, read by the next block's sum.
    if (prev >= 0 && fired_at("residual_mask_in_sum", prev, i)) {
      const int prev_last = p.tensors[std::size_t(at(p, prev).inputs[0])].producer;
      auto [bits, wbits] = fact(at(p, prev), facts::kMaskBits);
      auto [bn_bits, wbn] = fact(at(p, prev_last), facts::kSumMask);
      const bool summed = fired_at("residual_sum_in_bn", prev);
      verdict("relu_mask_bits", {prev, i}, summed && bits && bn_bits,
              !summed ? "the previous block's sum is not its batch norm's"
              : !bits ? "the previous block: " + wbits
                      : "the previous block's batch norm: " + wbn);
    }
  }
  // The residual stream in bf16 between a block and the block reading its
  // output: this block's sum (written by its body's last batch norm, with
  // its ReLU mask as bits) written only as its bf16 copy and mask, where
  // every reader of it can read that alone: the next block's convolutions
  // and pools their input, its identity shortcut as the bf16 shortcut its
  // last batch norm sums.
  for (int i = 0; i < count; ++i) {
    const Node& add = at(p, i);
    if (add.kind != "add" || add.block_input < 0) continue;
    const int next = next_block(p, i);
    if (next < 0) continue;
    auto [skip, wskip] = fact(add, facts::kSkipFloat);
    auto [stream, wstream] = fact(at(p, next), facts::kBf16Stream);
    const int body_last = p.tensors[std::size_t(add.inputs[0])].producer;
    std::string why =
        !skip                                  ? "this block: " + wskip
        : !stream                              ? "the next block: " + wstream
        : !fired_at("residual_sum_in_bn", i)   ? "this block's sum is not its batch norm's"
        : !fired_at("relu_mask_bits", i, next) ? "this block's ReLU mask is not written as bits"
        : !fact(at(p, body_last), facts::kBf16OutputAlone).first
            ? "this block's last batch norm: " + fact(at(p, body_last), facts::kBf16OutputAlone).second
            : "";
    for (int r : p.tensors[std::size_t(add.output)].consumers) {
      if (!why.empty()) break;
      const Node& n = at(p, r);
      if (n.kind == "identity" && n.output == at(p, next).inputs[1]) {  // the next block's shortcut
        const int last = p.tensors[std::size_t(at(p, next).inputs[0])].producer;
        if (!fired_at("residual_sum_in_bn", next))
          why = "the next block's sum is not its batch norm's";
        else if (!fact(at(p, last), facts::kBf16Sum).first)
          why = "the next block's last batch norm: " + fact(at(p, last), facts::kBf16Sum).second;
      } else if (n.kind == "conv" || n.kind == "avg_pool") {
        auto [only, wonly] = fact(n, facts::kBf16InputOnly);
        if (!only) why = "'" + n.name + "': " + wonly;
      } else if (n.kind == "identity") {
        why = "the identity '" + n.name + "' between the blocks";
      } else {
        why = "'" + n.name + "' (" + n.kind + ") reads it as float";
      }
    }
    verdict("bf16_residual_stream", {i, next}, why.empty(), why);
  }
  for (int i = 0; i < count; ++i) {
    const Node& add = at(p, i);
    if (add.kind != "add" || add.block_input < 0) continue;
    const int prev = previous(i), first = body_first(i);
    const int body_last = p.tensors[std::size_t(add.inputs[0])].producer;
    const bool mask_bits = prev >= 0 && fired_at("relu_mask_bits", prev, i);
    // The block's backward sum in its body's first convolution backward.
    if (first < 0 || !conv_of_pair(p, first)) {
      verdict(
          "residual_sum_in_conv_backward", {i}, false,
          first < 0 ? "the block's input has other readers" : "the body does not start with a ConvBatchNorm");
    } else {
      auto [need, wneed] = fact(add, facts::kSumNeeded);
      const bool ranged = ok(first, facts::kRangedBackward), direct = ok(first, facts::kDirectBackward);
      const Shape& in = p.tensors[std::size_t(add.block_input)].shape;
      const bool aligned = !mask_bits || in.per_example() % 16 == 0;
      verdict("residual_sum_in_conv_backward", {i, first}, need && (ranged || direct) && aligned,
              !need ? wneed
              : !(ranged || direct)
                  ? "its first convolution's backward: " + fact(at(p, first), facts::kRangedBackward).second
                  : "an image's elements are not a multiple of 16 (the mask bits)");
      // The shortcut's average pool + channel pad: its gradient formed in that sum.
      const int pad = p.tensors[std::size_t(add.inputs[1])].producer;
      const int pool = pad >= 0 && at(p, pad).kind == "channel_pad"
                           ? p.tensors[std::size_t(at(p, pad).inputs[0])].producer
                           : -1;
      if (pool >= 0 && at(p, pool).kind == "avg_pool") {
        auto [cap, wcap] = fact(add, facts::kPooledShortcut);
        const bool windows = at(p, pool).attrs.kernel == at(p, pool).attrs.stride;
        const bool in_place = fired_at("pool_into_pad", pool),
                   sum = fired_at("residual_sum_in_conv_backward", i);
        verdict("pooled_shortcut_gradient", {i, pool}, cap && windows && in_place && sum,
                !cap        ? wcap
                : !windows  ? "the pool's window is not its stride"
                : !in_place ? "the pool does not write into the pad"
                            : "the block's sum is not in its first convolution's backward");
        // ... else in the previous block's backward sum, which adds the
        // block's two input gradients through that block's mask bits (the
        // bf16 sums: Eltwise::add_pooled_bits).
        verdict("pooled_gradient_in_sum", {i, pool},
                cap && windows && in_place && !sum && mask_bits && first >= 0,
                !cap         ? wcap
                : !windows   ? "the pool's window is not its stride"
                : !in_place  ? "the pool does not write into the pad"
                : sum        ? "formed in the block's first convolution's backward (pooled_shortcut_gradient)"
                : !mask_bits ? "the block's input is not a sum whose backward reads mask bits"
                             : "the block's input has other readers");
      }
    }
    // The body's input gradient as bits into the sum through the mask bits,
    // or into the sum the training executor forms for the layer that wrote
    // the block's input (ResNet's stem), which reads bits parts too.
    const int writer = p.tensors[std::size_t(add.block_input)].producer;
    const bool by_layer = prev < 0 && writer >= 0 && at(p, writer).kind != "identity" &&
                          at(p, writer).kind != "add" && p.key.train_executor;
    if ((mask_bits || by_layer) && first >= 0 && conv_of_pair(p, first)) {
      auto [cap, wcap] = fact(add, facts::kBranchBits);
      auto [need, wneed] = fact(add, facts::kSumNeeded);
      auto [dx, wdx] = fact(at(p, first), facts::kBf16Dx);
      verdict("bf16_branch_gradient", {i, first}, cap && need && dx,
              !cap    ? wcap
              : !need ? wneed
                      : "its first convolution: " + wdx);
    }
    // This block's output gradient as bf16 bits from the next block's sum.
    for (int j = i + 1; j < count; ++j) {
      if (at(p, j).kind != "add" || at(p, j).block_input != add.output) continue;
      if (!fired_at("relu_mask_bits", i, j)) continue;
      auto [cap, wcap] = fact(add, facts::kPathBits);
      auto [dy, wdy] = body_last >= 0 ? fact(at(p, body_last), facts::kBf16Dy)
                                      : std::pair<bool, std::string>{false, "no body"};
      auto [need, wneed] = fact(at(p, j), facts::kSumNeeded);
      // this block's own input: the mask as bits too, or no mask at all
      const bool own = prev < 0 || !fired_at("residual_mask_in_sum", prev, i) || mask_bits;
      // the same bits go to its shortcut: an identity passes them on
      const int sc = p.tensors[std::size_t(add.inputs[1])].producer;
      const bool ident = sc >= 0 && at(p, sc).kind == "identity";
      verdict("bf16_residual_gradient", {i, j}, cap && dy && need && own && ident,
              !cap    ? wcap
              : !dy   ? "its body's last batch norm: " + wdy
              : !need ? "the next block: " + wneed
              : !own  ? "this block's own input mask is not bits"
                      : "its shortcut is not an identity (it takes a float gradient)");
    }
  }
  // A batch norm's backward sums taken by the next convolution's backward:
  // over its output, or over the residual sum it wrote (through the ReLU).
  for (int x = 0; x < count; ++x) {
    const Node& bn = at(p, x);
    if (bn.kind != "bn" || bn.layer.empty()) continue;
    int t = bn.output, sum = -1;
    const int r0 = p.only_consumer(t);
    if (r0 >= 0 && at(p, r0).kind == "add" && fired_at("residual_sum_in_bn", r0))
      sum = r0, t = at(p, r0).output;
    const auto& readers = p.tensors[std::size_t(t)].consumers;
    int reader = -1, block = -1;
    if (readers.size() == 1 && conv_of_pair(p, readers[0])) reader = readers[0];
    for (int j = 0; j < count && readers.size() == 2; ++j)
      if (at(p, j).kind == "add" && at(p, j).block_input == t && conv_of_pair(p, body_first(j)))
        block = j, reader = body_first(j);
    if (reader < 0) continue;  // not read by a ConvBatchNorm's convolution
    auto [offers, woffers] = fact(bn, facts::kOffersSums);
    const bool ranged = ok(reader, facts::kRangedBackward), direct = ok(reader, facts::kDirectBackward);
    const bool masked = sum >= 0 && at(p, sum).attrs.relu;
    std::string why = !offers               ? woffers
                      : !(ranged || direct) ? "the next convolution's backward runs whole, in oneDNN"
                                            : "";
    if (why.empty() && !ok(reader, facts::kNeedsDx)) why = "the next convolution computes no dx";
    if (why.empty() && block < 0 && masked)
      why = "its gradient goes through a ReLU mask no sum there applies";
    if (why.empty() && block >= 0) {
      if (!fired_at("residual_sum_in_conv_backward", block))
        why = "the next block's sum is not in its first convolution's backward (the shortcut reads it too)";
      else if (direct && fired_at("pooled_shortcut_gradient", block))
        why = "the next convolution's own kernels do a pooled sum after them";
      else if (masked != (sum >= 0 && fired_at("residual_mask_in_sum", sum, block)))
        why = "the ReLU mask of the sum does not match";
    }
    verdict("bn_sums_in_next_conv_backward", {x, reader}, why.empty(), why);
  }
  train_executor_rules(p, verdict);
}

/// The plan in words with every rule (Plan::describe).
inline std::string describe(const Plan& p) {
  std::vector<std::pair<std::string, std::string>> r;
  for (const RuleInfo& i : rules()) r.emplace_back(i.name, i.saves);
  return p.describe(r);
}

}  // namespace cifarnet::plan
