// cifarnet/nn/plan.hpp — the training or inference step of a model as an
// explicit plan: a flat list of nodes (one backend operation each, with
// explicit input and output tensor ids), every tensor's lifetime, and the
// fusion rules' verdicts over that list (nn/plan_rules.hpp).
//
// A plan is built for one key (mode, batch size, data format, precision,
// options) by Model::plan(): the containers emit their structure (a
// Sequential its children in order, a Residual its body, its shortcut and
// the sum, a Repeat its blocks) and every leaf layer one node, or the nodes
// it is made of (ConvBatchNorm: its convolution and its batch norm). A leaf
// needs no code for this: by default it is one opaque node named and typed
// as the layer. Layers that take part in fusions record facts about
// themselves at emission (Fact: yes, or no and why), the backend's answer to
// "do you support this pattern here", which the rules read.
//
// describe() prints the nodes, their tensors and shapes, the peak of live
// activation bytes, and for each rule where it fired and, where its pattern
// matched but it did not fire, why.
#pragma once

#include <algorithm>
#include <any>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/ops/conv_algorithm.hpp"

namespace cifarnet::plan {

/// What a plan is built for.
struct Key {
  bool training = true;
  std::size_t batch = 1;
  DataFormat fmt = DataFormat::NCHW;
  ConvPrecision precision = ConvPrecision::F32;
  std::string backend;  ///< "reference", "onednn", "cuda"
  /// A training plan that the training executor runs (nn/train_executor.hpp),
  /// carrying the rules out; false: the layer tree runs the step itself,
  /// unfused, and no training rule fires (NetOptions::plan_training off).
  bool train_executor = false;
  /// The rules turned off (NetOptions::rules_off; "all": every one).
  std::vector<std::string> rules_off;
  bool rule_on(const std::string& rule) const {
    return std::none_of(rules_off.begin(), rules_off.end(),
                        [&](const std::string& r) { return r == rule || r == "all"; });
  }
};

/// A capability answer recorded by a layer when it emits its nodes: ok, or
/// not and why (the backend's "supports this pattern here" declaration).
struct Fact {
  bool ok = false;
  std::string why;  ///< when !ok: what is missing
  static Fact yes() { return {true, {}}; }
  static Fact no(std::string why) { return {false, std::move(why)}; }
};

/// The facts layers record on their nodes (Node::facts), by name.
namespace facts {
// a convolution of a ConvBatchNorm
inline constexpr const char* kBf16Output = "bf16_output";  ///< writes its output as bf16 for the batch norm
inline constexpr const char* kBf16Backward = "bf16_backward";  ///< reads the batch norm's dx as bf16
inline constexpr const char* kStatsEpilogue =
    "stats_epilogue";  ///< forward in the own kernels, statistics in the epilogue
inline constexpr const char* kDirectBackward =
    "direct_backward";  ///< backward in the own kernels, BN's dx in the prologue
inline constexpr const char* kRangedBackward = "ranged_backward";    ///< backward a range of images at a time
inline constexpr const char* kNormalisedInput = "normalised_input";  ///< can compute its input from a BN map
inline constexpr const char* kBf16InputOnly = "bf16_input_only";  ///< can read its input only as a bf16 copy
inline constexpr const char* kBf16Dx = "bf16_dx";                 ///< can write its dx as bf16 bits
inline constexpr const char* kNeedsDx = "needs_dx";               ///< its backward computes dx
// a convolution in inference (standalone or of a ConvBatchNorm)
inline constexpr const char* kEpilogueConv =
    "epilogue_conv";  ///< the plan executor runs it as ops::ConvEpilogue (its ConvRun)
inline constexpr const char* kOwnForward =
    "own_forward";  ///< ops::ConvEpilogue's own kernels take it (own_kernel_why_not)
inline constexpr const char* kWinogradForward =
    "winograd_forward";  ///< ops::ConvEpilogue's own Winograd kernels take it (winograd_why_not)
// a standalone convolution
inline constexpr const char* kOwnKernels =
    "own_kernels";                                 ///< the own conv + batch norm kernels take its geometry
inline constexpr const char* kDyBits = "dy_bits";  ///< its backward can read dy as bf16 bits
inline constexpr const char* kGeluBf16Output =
    "gelu_bf16_output";  ///< no backward runs, and it can add a GELU as a post-op and write bf16 alone
// a max pool, a standalone batch norm
inline constexpr const char* kDxBits = "dx_bits";  ///< its backward can write dx as bf16 bits
// a batch norm (of a ConvBatchNorm, or standalone: kBf16Copy,
// kBf16OutputAlone; a standalone convolution: kBf16OutputAlone,
// kBf16InputOnly)
inline constexpr const char* kDeferOutput =
    "defer_output";  ///< can leave its output to the next layer's kernels
inline constexpr const char* kBf16OutputAlone =
    "bf16_output_alone";                           ///< can write its output as a bf16 copy alone
inline constexpr const char* kBf16Dy = "bf16_dy";  ///< can take its dy as bf16 bits
inline constexpr const char* kBf16DySum =
    "bf16_dy_sum";  ///< can take the sum of its readers' gradients as bf16 bits (bf16_dy, bf16 gradients on)
inline constexpr const char* kTakesSum = "takes_sum";  ///< can add a residual block's sum in its pass
inline constexpr const char* kSumMask = "sum_mask";    ///< can write that sum's ReLU mask as bits
inline constexpr const char* kBf16Sum =
    "bf16_sum";  ///< can read that sum's shortcut as bf16 bits and write the sum as bf16 and mask alone
inline constexpr const char* kBf16Copy =
    "bf16_copy";  ///< its training forward writes a bf16 copy of its output (or of its sum)
inline constexpr const char* kOffersSums =
    "offers_sums";  ///< its backward sums can be taken by the next layer
inline constexpr const char* kWgradInBn =
    "wgrad_in_bn";  ///< its weight gradient computed in its batch norm's pass of dx, which is not stored
inline constexpr const char* kDySums =
    "dy_sums";  ///< its backward sums can be taken by the pass that sums its dy as bf16 bits
// an average pool (and kBf16InputOnly)
inline constexpr const char* kPadsInPlace = "pads_in_place";  ///< can write into the ChannelPad after it
// a residual block's sum ("add")
inline constexpr const char* kBf16Stream =
    "bf16_stream";  ///< the block may read its input only as bf16 (and mask bits), where its readers can
inline constexpr const char* kSkipFloat =
    "skip_float";  ///< the block can write its output as bf16 and mask bits alone
inline constexpr const char* kSumNeeded =
    "sum_needed";  ///< its backward forms the gradient of the block's input
inline constexpr const char* kMaskBits =
    "mask_bits";  ///< its ReLU's mask can go out as bits (backend, sizes)
inline constexpr const char* kPooledShortcut =
    "pooled_shortcut";                                 ///< its shortcut's gradient can be formed in the sum
inline constexpr const char* kPathBits = "path_bits";  ///< its output's gradient can come in as bf16 bits
inline constexpr const char* kBranchBits =
    "branch_bits";  ///< its body's input gradient can go to the sum as bits
}  // namespace facts

/// Static attributes of a node that rules read (-1: not applicable).
struct Attrs {
  int kernel = -1, stride = -1;
  bool relu = false;  ///< a ReLU fused into the node (batch norm, the residual sum)
  bool gelu = false;
  bool bias = false;
};

struct Node {
  std::string name;         ///< the layer's scoped name (ConvBatchNorm: conv<k> or bn<k>)
  std::string kind;         ///< the layer kind ("conv", "bn", "add", "avg_pool", ...)
  std::vector<int> inputs;  ///< tensor ids
  int output = -1;          ///< tensor id
  Attrs attrs;
  std::string layer;     ///< the layer that emitted it, where it emitted several (a ConvBatchNorm)
  int block_input = -1;  ///< a residual block's sum: the tensor the block reads
  std::map<std::string, Fact> facts;
  std::vector<std::string> fused;  ///< the rules that fired with this node in their pattern
  /// How the plan executor runs it (nn/node_run.hpp: a LayerRun or a
  /// ConvRun for the model's backend and scalar; empty: a container's
  /// node, run by the executor itself, or a layer it cannot run alone).
  std::any run;
  const Fact* fact(const std::string& f) const {
    const auto it = facts.find(f);
    return it == facts.end() ? nullptr : &it->second;
  }
};

struct TensorInfo {
  Shape shape;                 ///< with n = the key's batch
  std::size_t bytes = 0;       ///< of its float values
  int producer = -1;           ///< node id, -1: the model's input
  std::vector<int> consumers;  ///< node ids, in order
};

/// A rule's decision at one match of its pattern (`nodes`, the anchor first).
struct Verdict {
  std::string rule;
  std::vector<int> nodes;
  bool fires = false;
  std::string reason;  ///< why not (empty when it fires)
};

class Plan {
 public:
  Key key;
  std::vector<Node> nodes;
  std::vector<TensorInfo> tensors;
  std::vector<Verdict> verdicts;
  int input = -1, output = -1;  ///< tensor ids

  /// The node named `name` of kind `kind` (any kind when empty); -1 if none.
  int find(const std::string& name, const std::string& kind = {}) const {
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].name == name && (kind.empty() || nodes[i].kind == kind)) return int(i);
    return -1;
  }
  /// The verdict of `rule` whose pattern starts at the node named `name`
  /// (the anchor); null where the pattern did not match there.
  const Verdict* verdict(const std::string& rule, const std::string& name) const {
    for (const Verdict& v : verdicts)
      if (v.rule == rule && !v.nodes.empty() && nodes[std::size_t(v.nodes[0])].name == name) return &v;
    return nullptr;
  }
  bool fires(const std::string& rule, const std::string& name) const {
    const Verdict* v = verdict(rule, name);
    return v && v->fires;
  }
  /// How many matches of `rule` fired (and, with `matched`, how many matched).
  std::size_t fired(const std::string& rule, std::size_t* matched = nullptr) const {
    std::size_t f = 0, m = 0;
    for (const Verdict& v : verdicts)
      if (v.rule == rule) ++m, f += v.fires;
    if (matched) *matched = m;
    return f;
  }
  /// The single consumer of tensor t, or -1 (none, or several).
  int only_consumer(int t) const {
    const auto& c = tensors[std::size_t(t)].consumers;
    return c.size() == 1 ? c[0] : -1;
  }

  /// The largest sum of the bytes of the tensors alive at one time, each
  /// tensor's values and (training) its gradient: a value from its
  /// producer's forward to the last pass that reads it (training: the
  /// backward of its last consumer, which may keep it), a gradient from the
  /// backward of its last consumer to its producer's backward. What an
  /// executor assigning buffers from these lifetimes needs at most (the
  /// model's input and the parameters not counted).
  std::size_t peak_bytes() const {
    const std::size_t n = nodes.size();
    const std::size_t steps = key.training ? 2 * n : n;
    // +bytes where a lifetime starts, -bytes after it ends; the running sum
    // is what is alive at each step
    std::vector<long long> change(steps + 2, 0);
    auto live = [&](std::size_t from, std::size_t to, std::size_t bytes) {
      change[std::min(from, steps)] += static_cast<long long>(bytes);
      change[std::min(to, steps) + 1] -= static_cast<long long>(bytes);
    };
    for (const TensorInfo& ti : tensors) {
      if (ti.producer < 0) continue;
      const std::size_t p = std::size_t(ti.producer);
      std::size_t first = p, last = p;
      if (!ti.consumers.empty()) first = std::size_t(ti.consumers.front());
      for (int c : ti.consumers) last = std::max(last, std::size_t(c));
      if (!key.training) {
        live(p, last, ti.bytes);
        continue;
      }
      // the backward of node i runs at step 2n - 1 - i
      live(p, 2 * n - 1 - first, ti.bytes);
      live(2 * n - 1 - last, 2 * n - 1 - p, ti.bytes);
    }
    long long now = 0, peak = 0;
    for (long long c : change) peak = std::max(peak, now += c);
    return std::size_t(peak);
  }

  /// The plan in words: the key, the nodes with their tensors, shapes and
  /// the rules that fused them, the peak of live bytes, and for every rule
  /// where it fired and why it did not elsewhere.
  std::string describe(const std::vector<std::pair<std::string, std::string>>& rules = {}) const {
    std::ostringstream os;
    os << "step plan: " << (key.training ? "training" : "inference") << ", batch " << key.batch << ", "
       << (key.fmt == DataFormat::NHWC ? "channels_last (NHWC)" : "channels_first (NCHW)") << ", "
       << (key.precision == ConvPrecision::BF16 ? "bf16" : "fp32") << " convolutions, backend " << key.backend
       << (key.training ? key.train_executor ? ", run by the training executor" : ", run by the layer tree"
                        : "")
       << "\n";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(peak_bytes()) / (1024.0 * 1024.0));
    os << nodes.size() << " nodes, " << tensors.size() << " tensors; live activations"
       << (key.training ? " and gradients" : "") << " at most " << buf << "\n";
    os << "  id  node                          kind         inputs      out   shape (n,c,h,w)    fused by\n";
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const Node& nd = nodes[i];
      std::string in;
      for (int t : nd.inputs) in += (in.empty() ? "t" : ",t") + std::to_string(t);
      const Shape& s = tensors[std::size_t(nd.output)].shape;
      std::string shape = std::to_string(s.n) + "," + std::to_string(s.c) + "," + std::to_string(s.h) + "," +
                          std::to_string(s.w);
      std::string fused;
      for (const auto& f : nd.fused) fused += (fused.empty() ? "" : " ") + f;
      std::snprintf(buf, sizeof buf, "%4zu  ", i);
      os << buf << pad(nd.name, 30) << pad(nd.kind, 13) << pad(in, 12)
         << pad("t" + std::to_string(nd.output), 6) << pad(shape, 19) << fused << "\n";
    }
    os << "rules:\n";
    for (const auto& [rule, saves] : rules) {
      std::size_t m = 0;
      const std::size_t f = fired(rule, &m);
      os << "  " << rule << ": fired at " << f << " of " << m << " matches";
      if (!saves.empty()) os << " (" << saves << ")";
      os << "\n";
      // where it fired, then each reason it did not, with where
      std::string at;
      std::map<std::string, std::vector<std::string>> why;
      for (const Verdict& v : verdicts) {
        if (v.rule != rule) continue;
        std::string where;
        for (int id : v.nodes) where += (where.empty() ? "" : "+") + nodes[std::size_t(id)].name;
        if (v.fires)
          at += (at.empty() ? "" : ", ") + where;
        else
          why[v.reason].push_back(where);
      }
      if (!at.empty()) os << "    fired: " << at << "\n";
      for (const auto& [reason, where] : why) {
        os << "    not applied (" << reason << "): ";
        for (std::size_t k = 0; k < where.size(); ++k) os << (k ? ", " : "") << where[k];
        os << "\n";
      }
    }
    return os.str();
  }

 private:
  static std::string pad(const std::string& s, std::size_t w) {
    return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
  }
};

/// What containers and layers emit their nodes into.
class Builder {
 public:
  Builder(Key key, std::size_t element_bytes) : elem_(element_bytes) { plan_.key = std::move(key); }

  const Key& key() const { return plan_.key; }
  /// The model's input tensor (per-example shape; n is the key's batch).
  int input(const Shape& per_example) {
    plan_.input = tensor(per_example, -1);
    return plan_.input;
  }
  /// A node reading `inputs` and writing a new tensor of per-example shape
  /// `out`; returns that tensor's id.
  int node(std::string name, std::string kind, std::vector<int> inputs, const Shape& out, Attrs attrs = {},
           std::string layer = {}) {
    const int id = int(plan_.nodes.size());
    for (int t : inputs) {
      if (t < 0 || std::size_t(t) >= plan_.tensors.size())
        throw std::logic_error("plan::Builder: node '" + name + "' reads tensor " + std::to_string(t) +
                               ", which no node wrote");
      plan_.tensors[std::size_t(t)].consumers.push_back(id);
    }
    Node n;
    n.name = std::move(name);
    n.kind = std::move(kind);
    n.inputs = std::move(inputs);
    n.attrs = attrs;
    n.layer = std::move(layer);
    n.output = tensor(out, id);
    plan_.nodes.push_back(std::move(n));
    return plan_.nodes.back().output;
  }
  /// The node that wrote tensor t (for a layer to record facts on it).
  Node& producer(int t) { return plan_.nodes.at(std::size_t(plan_.tensors.at(std::size_t(t)).producer)); }
  Plan finish(int output) {
    plan_.output = output;
    return std::move(plan_);
  }

 private:
  int tensor(const Shape& per_example, int producer) {
    TensorInfo t;
    t.shape = per_example;
    t.shape.n = plan_.key.batch;
    t.bytes = t.shape.size() * elem_;
    t.producer = producer;
    plan_.tensors.push_back(std::move(t));
    return int(plan_.tensors.size()) - 1;
  }
  Plan plan_;
  std::size_t elem_;
};

}  // namespace cifarnet::plan
