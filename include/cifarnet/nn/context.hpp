// cifarnet/nn/context.hpp — what a layer sees while a model is built and while
// it runs.
//
// BuildContext: the parameter arena to register into, the current name scope,
// the data format, the network options (run-time repeat counts, initializer
// overrides by name pattern) and whether the layer must
// compute the gradient of its input (false for the first layer).
// RunContext: train or inference mode, the arena, the backend's device and
// the rest of the real context (profiler, gradient sync, cross-replica
// sums). What neighbouring layers hand each other is not context: the
// training executor passes it per call (plan::Links, nn/node_run.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/cross_replica.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/names.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/ops/conv_algorithm.hpp"
#include "cifarnet/nn/profile.hpp"

namespace cifarnet {

/// Train: BN uses batch statistics and updates its moving averages, layers
/// keep what backward needs. Infer: BN uses the moving statistics.
enum class Mode { Train, Infer };

/// Run-time options of a network, given to the Model.
struct NetOptions {
  /// Base count of every Repeat<Block, Offset> (which runs repeat + Offset times).
  int repeat = 1;
  /// Initializer overrides: the first pattern (glob on the full parameter name)
  /// that matches replaces the layer's default initializer.
  std::vector<std::pair<std::string, Initializer>> initializers;
  /// Batch norm moving-average decay and epsilon (TF ResNet: 0.997, 1e-5).
  double bn_decay = 0.997, bn_epsilon = 1e-5;
  /// Convolution algorithm on backends that offer a choice (ops/conv_algorithm.hpp).
  ConvAlgorithm conv_algorithm = ConvAlgorithm::Auto;
  /// Arithmetic of the convolutions on backends that offer bf16 (oneDNN;
  /// ops/conv_algorithm.hpp: inside ConvBatchNorm the convolution's output
  /// and the batch norm's dx are bf16 too). Master weights, the optimizer and
  /// every other layer's arithmetic stay float.
  ConvPrecision conv_precision = ConvPrecision::F32;
  /// With bf16 convolutions on a backend with bf16 gradients (oneDNN): the
  /// input gradient passed back between two ConvBatchNorm layers as bf16,
  /// i.e. the convolution's dx rounded to bf16 once (as bf16 autocast has
  /// its gradients; layers/conv_bn.hpp), and the residual path's gradient
  /// passed back between blocks as bf16 (the training plan's rules
  /// bf16_dx_between_conv_bn, bf16_branch_gradient, bf16_residual_gradient;
  /// nn/plan_rules.hpp). False keeps those gradients float.
  bool bf16_gradients = true;
  /// With bf16 convolutions on a backend with bf16 gradients (oneDNN): a
  /// residual block's output kept only as bf16 where the next block reads
  /// nothing else (its identity shortcut summed from the bf16 copy; ResNet
  /// stages: the rule bf16_residual_stream), as bf16 autocast keeps its
  /// activations. False keeps the residual stream float.
  bool bf16_residuals = true;
  /// On oneDNN (its ranged ConvBatchNorm step), a ConvBatchNorm's float
  /// backward runs a range of images at a time, each range of the
  /// convolution's input and output at most this many bytes, so that the
  /// convolution's backward reads each range of the batch norm's dx from
  /// cache (layers/conv_bn.hpp). 0: whole batches.
  std::size_t conv_bn_chunk_bytes = std::size_t(1) << 20;
  /// On oneDNN (its own conv + batch norm kernels), a ConvBatchNorm's float
  /// training backward whose geometry the backend's own kernels take (3x3,
  /// stride 1, 16/32/64 channels in and out, NHWC, on a CPU with AVX-512)
  /// runs in them, in the ranges above (or the whole batch as one), batch
  /// norm's input gradient computed image by image in their prologue
  /// (layers/conv_bn.hpp). False: oneDNN's kernels after batch norm's pass
  /// over each range. The same switch turns on the hand-overs that go with
  /// them (a batch norm's statistics taken in the forward kernel's
  /// epilogue, its backward sums taken by the next layer, its output left
  /// to the next layer's kernels: layers/conv_bn.hpp); false runs every
  /// batch norm pass on its own.
  bool direct_conv_bn = true;
  /// Mode::Infer runs the model's step plan through the plan executor
  /// (nn/executor.hpp: folded convolutions with their residual sums and
  /// ReLUs as epilogues, bf16 activations between bf16 convolutions) on
  /// backends that have its convolution (ops::ConvEpilogue); false, or
  /// where it cannot run a plan, the layers run themselves.
  bool plan_executor = true;
  /// Mode::Train runs the model's step plan through the training executor
  /// (nn/train_executor.hpp): each layer's own forward and backward in plan
  /// order, the residual sums and the gradients of tensors with several
  /// readers formed by the executor, the hand-overs between layers made
  /// where the plan's rules fired (explain_plan). False: the layer tree
  /// runs itself, every layer on its own (no fusion between layers: the
  /// reference the rules are tested against).
  bool plan_training = true;
  /// Fusion rules turned off, by name (nn/plan_rules.hpp, plan::rules();
  /// "all": every rule): where one's pattern matches, its verdict says
  /// "turned off (NetOptions::rules_off)" and the step runs without it (a
  /// rule inside one layer: the layer's plain path; a hand-over between
  /// layers: not made), and so do the rules that need it. The Model rejects
  /// a name that is no rule. Empty: every rule that applies fires.
  std::vector<std::string> rules_off;

  /// Whether the rule `name` is not turned off (rules_off).
  bool rule_on(const std::string& name) const {
    for (const std::string& r : rules_off)
      if (r == name || r == "all") return false;
    return true;
  }

  NetOptions& with_repeat(int n) {
    repeat = n;
    return *this;
  }
  NetOptions& init(std::string pattern, Initializer i) {
    initializers.emplace_back(std::move(pattern), i);
    return *this;
  }
  NetOptions& with_conv_algorithm(ConvAlgorithm a) {
    conv_algorithm = a;
    return *this;
  }
  NetOptions& with_conv_precision(ConvPrecision p) {
    conv_precision = p;
    return *this;
  }
  NetOptions& with_bf16_gradients(bool on) {
    bf16_gradients = on;
    return *this;
  }
  NetOptions& with_bf16_residuals(bool on) {
    bf16_residuals = on;
    return *this;
  }
  NetOptions& with_conv_bn_chunk_bytes(std::size_t bytes) {
    conv_bn_chunk_bytes = bytes;
    return *this;
  }
  NetOptions& with_direct_conv_bn(bool on) {
    direct_conv_bn = on;
    return *this;
  }
  NetOptions& with_plan_executor(bool on) {
    plan_executor = on;
    return *this;
  }
  NetOptions& with_plan_training(bool on) {
    plan_training = on;
    return *this;
  }
  NetOptions& with_rule_off(std::string name) {
    rules_off.push_back(std::move(name));
    return *this;
  }
  NetOptions& with_rules_off(std::vector<std::string> names) {
    rules_off = std::move(names);
    return *this;
  }
};

/// Hierarchical names ("stage1/block0/conv1") with per-scope counters.
class Scope {
 public:
  Scope() = default;
  explicit Scope(std::string prefix) : prefix_(std::move(prefix)) {}

  /// Full name of `leaf` in this scope.
  std::string name(const std::string& leaf) const { return prefix_.empty() ? leaf : prefix_ + "/" + leaf; }
  const std::string& prefix() const { return prefix_; }

  /// Next automatic child name for `base`: base + k, k counting from `first`.
  std::string next(const std::string& base, int first) {
    return base + std::to_string(first + counters_[base]++);
  }

  /// A child scope.
  Scope child(const std::string& leaf) const { return Scope(name(leaf)); }

 private:
  std::string prefix_;
  std::map<std::string, int> counters_;
};

/// An activation exposed by a Tap layer, and the gradient injected there.
template <class T>
struct TapSlot {
  Shape shape;                            ///< per-example shape (n = 1)
  const Tensor<T>* activation = nullptr;  ///< set by the last forward
  Tensor<T> host_activation;              ///< its host copy (a model whose tensors are device memory)
  Tensor<T> grad;                         ///< added to the backward gradient when has_grad
  bool has_grad = false;
};

template <class T>
struct BuildContext {
  Parameters<T>* params = nullptr;
  DataFormat fmt = DataFormat::NCHW;
  const NetOptions* options = nullptr;
  bool propagate_down = true;                         ///< does this layer need to produce dx?
  std::map<std::string, TapSlot<T>>* taps = nullptr;  ///< the model's taps (layers/tap.hpp)

  /// Whether the fusion rule `name` is on (NetOptions::rules_off): a layer
  /// asks before taking a path of its own that the rule names.
  bool rule_on(const std::string& name) const { return !options || options->rule_on(name); }

  /// Registers a parameter under `scope`, applying the option overrides.
  std::size_t add_param(const Scope& scope, const std::string& leaf, std::vector<std::size_t> shape,
                        Initializer init, bool trainable = true) {
    ParamSpec s;
    s.name = scope.name(leaf);
    s.shape = std::move(shape);
    s.trainable = trainable;
    s.init = init;
    if (options) {
      for (const auto& [pattern, i] : options->initializers)
        if (glob_match(pattern, s.name)) {
          s.init = i;
          break;
        }
    }
    return params->add(std::move(s));
  }
};

/// Synchronizes gradients across replicas while backward runs (overlap of
/// communication with computation; distributed::OverlappedAllReduce). The
/// Trainer calls begin() before backward and finish() after it; during
/// backward the containers call ready_from(id) each time every parameter
/// registered from id on (registration order, which is forward order) holds
/// its final gradient. After finish() every gradient is synchronized.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// A backward pass starts: no gradient is final yet.
  virtual void begin() = 0;
  /// Parameters with id >= first_param have their final gradients (calls
  /// come with non-increasing ids; a repeated id is harmless).
  virtual void ready_from(std::size_t first_param) = 0;
  /// Backward ended: complete the synchronization of every gradient.
  virtual void finish() = 0;
};

template <class B, class T>
struct RunContext {
  Mode mode = Mode::Train;
  Parameters<T>* params = nullptr;
  Device<B>* device = nullptr;
  /// False when the weights are frozen (style transfer): backward then
  /// computes activation gradients only, no weight gradients.
  bool param_grads = true;
  /// Set: batch norm in Mode::Train normalizes with the statistics of the
  /// global batch over all replicas (synchronized BN); null: local batch.
  CrossReplicaSum* cross_replica = nullptr;
  /// Set: every leaf layer's forward/backward time is booked there (nn/profile.hpp).
  Profiler* profiler = nullptr;
  /// Set: containers report, during backward, which gradients are final
  /// (GradientSync::ready_from) so their all-reduce can start early.
  GradientSync* grad_sync = nullptr;
  /// Whether the caller needs the model's input gradient (Model's
  /// input_gradient). True keeps every dx the build decided on.
  bool input_grad = true;
  bool training() const { return mode == Mode::Train; }
  /// Whether a node must produce dx now, given `params_before`, the number
  /// of parameters registered before it (forward order): only if the model's
  /// input gradient is wanted or a parameter before it requires a gradient
  /// (Parameters::requires_grad). The build's static decision still applies
  /// on top; this one changes at run time (a stem frozen after N steps).
  bool needs_dx(std::size_t params_before) const {
    return input_grad || !params || params->first_requiring_grad() < params_before;
  }
};

}  // namespace cifarnet
