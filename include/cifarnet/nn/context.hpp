// cifarnet/nn/context.hpp — what a layer sees while a model is built and while
// it runs.
//
// BuildContext: the parameter arena to register into, the current name scope,
// the data format, the network options (run-time repeat counts, initializer
// overrides by name pattern) and whether the layer must
// compute the gradient of its input (false for the first layer).
// RunContext: train or inference mode, the arena, and the backend's device.
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
  /// passed back between blocks as bf16 (nn/sequential.hpp). False keeps
  /// those gradients float.
  bool bf16_gradients = true;
  /// With bf16 convolutions on a backend with bf16 gradients (oneDNN): a
  /// residual block's output kept only as bf16 where the next block reads
  /// nothing else (its identity shortcut summed from the bf16 copy; ResNet
  /// stages, nn/sequential.hpp), as bf16 autocast keeps its activations.
  /// False keeps the residual stream float.
  bool bf16_residuals = true;
  /// On a backend with chunked_conv_bn (oneDNN), a ConvBatchNorm's float
  /// backward runs a range of images at a time, each range of the
  /// convolution's input and output at most this many bytes, so that the
  /// convolution's backward reads each range of the batch norm's dx from
  /// cache (layers/conv_bn.hpp). 0: whole batches.
  std::size_t conv_bn_chunk_bytes = std::size_t(1) << 20;
  /// On a backend with conv_bn_prologue (oneDNN), a ConvBatchNorm's float
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
  /// runs itself, its containers making the same hand-overs.
  bool plan_training = true;

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

/// A batch norm's backward sums, offered by the layer whose training
/// forward wrote the tensor `of` (its batch norm's output, or a residual
/// block's sum of that output) to the layer that reads it,
/// which forms the gradient of `of` in its backward and may take the sums
/// over it there, while it is in cache (RunContext::bn_out; ConvBatchNorm on
/// a backend with conv_bn_prologue). What the sums need: the batch norm's
/// input `x`, its fused ReLU's a then b (`relu_ab`, or null) and its batch
/// `mean`, `c` channels; through a sum followed by a ReLU (`masked`), the
/// gradient of `of` goes through that ReLU's mask first. The reader writes
/// `sums` (2c: Σ dy, Σ dy (x − mean)) and sets `given_for` to the gradient
/// they are of; the offering layer uses them only for a dy at that address,
/// once, and forgets them at its next forward.
template <class T>
struct BnSumsOffer {
  const void* of = nullptr;
  const T* x = nullptr;
  const T* relu_ab = nullptr;
  const T* mean = nullptr;
  std::size_t c = 0;
  bool masked = false;
  std::vector<double> sums;
  const void* given_for = nullptr;
  const std::string* name = nullptr;  ///< the batch norm's name (where sums taken outside kernels are booked)
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
  /// The residual sum's gradient through the previous block's ReLU in one
  /// pass (nn/sequential.hpp, Residual): forward, the output a
  /// Residual<..., FusedRelu> just wrote (`relu_out`, cleared by the
  /// containers before each child) and whether the child now running reads
  /// it as its input (`input_is_relu`); backward, the input gradient a block
  /// returned already multiplied by that ReLU's mask, and the ReLU output
  /// whose mask it was (`premasked_grad`, `premasked_by`).
  const void* relu_out = nullptr;
  bool input_is_relu = false;
  const void* premasked_grad = nullptr;
  const void* premasked_by = nullptr;
  /// A residual block's backward sum offered to the layer that computes the
  /// gradient of the block's input (nn/sequential.hpp, Residual): dx = dx +
  /// `other`, then, with `mask_bits` (host/mask_bits.hpp) or `mask_relu`
  /// (the ReLU output: > 0) set, times that ReLU's mask, in place — the
  /// block's Eltwise::add / add_masked / add_masked_bits. A layer that
  /// writes that gradient a range of images at a time (ConvBatchNorm on a
  /// backend with chunked_conv_bn, layers/conv_bn.hpp) does it to each range
  /// while the range is in cache, which saves the sum's read of dx from
  /// memory and its own output's write, and sets `done`. `of`: the input
  /// whose gradient it is (checked by pointer); `name`: where that time is
  /// booked (kind "add"). Residual sets it around its body's backward only.
  /// Instead of `other`, the other branch may be a downsampling shortcut
  /// whose gradient was never formed (an average pool written in place
  /// into a ChannelPad: Sequential::pooled_gradient): `pooled`, the padded
  /// gradient at its channel `before`, `pooled_channels` a pixel, pooled by
  /// `pooled_stride` (Eltwise::add_pooled forms it in the sum).
  struct GradSumOffer {
    const void* of = nullptr;
    const T* other = nullptr;
    const T* pooled = nullptr;
    std::size_t pooled_channels = 0, pooled_stride = 0;
    const std::uint16_t* mask_bits = nullptr;
    const T* mask_relu = nullptr;
    const std::string* name = nullptr;
    bool done = false;
  };
  GradSumOffer grad_sum;
  /// A batch norm's backward sums offered forward (BnSumsOffer): the layer
  /// that just wrote `bn_out->of` names its offer, and the containers turn
  /// it into `input_bn` for the child whose input that tensor is (checked by
  /// pointer, dropped at any other boundary, as relu_out). A Residual hands
  /// its input's offer to its body alone, with `input_bn_shared` set: its
  /// shortcut reads that input too, so only a layer that also does the
  /// block's gradient sum (grad_sum) may take the sums.
  BnSumsOffer<T>* bn_out = nullptr;
  BnSumsOffer<T>* input_bn = nullptr;
  bool input_bn_shared = false;
  /// A residual block's sum offered to the last layer of its body
  /// (nn/sequential.hpp, Residual): a layer that can add `sum_shortcut` to
  /// its own output in the pass that writes it (and ReLU with `sum_relu`)
  /// writes the `sum_n` values into `sum_out` and sets `sum_done`; the
  /// containers pass the offer to their last child only.
  const T* sum_shortcut = nullptr;
  T* sum_out = nullptr;
  std::size_t sum_n = 0;
  bool sum_relu = false;
  bool sum_done = false;
  /// With the offer, where its ReLU's mask may go as bits (backends with
  /// sum_mask_bits; host/mask_bits.hpp): the layer that takes the offer
  /// writes them when it can and sets `sum_mask_done`. Forward, a block
  /// whose output has such bits names them (`relu_mask`, for the output at
  /// `relu_mask_of`), for the next block's gradient sum (Residual).
  std::uint16_t* sum_mask = nullptr;
  bool sum_mask_done = false;
  /// With the offer, the shortcut as bf16 bits instead of `sum_shortcut`
  /// (`sum_shortcut_bits`: a residual stream kept in bf16, whose float
  /// values were not written), and whether the sum may go out as its bf16
  /// copy and mask bits alone (`sum_skip_float`; the layer sets
  /// `sum_float_skipped` when it did so).
  const std::uint16_t* sum_shortcut_bits = nullptr;
  bool sum_skip_float = false;
  bool sum_float_skipped = false;
  const void* relu_mask_of = nullptr;
  const std::uint16_t* relu_mask = nullptr;
  /// The residual path's gradient as bf16 bits between two blocks
  /// (Residual, with bf16 gradients): forward, a block that can take its
  /// output's gradient as bits names the buffer they go to (`grad_bits`,
  /// for the output at `grad_bits_of`; the body's last layer's dy buffer);
  /// backward, the next block's sum writes its input gradient there instead
  /// of into a float tensor and names the output it is the gradient of
  /// (`grad_bits_by`), which the earlier block checks before reading them.
  const void* grad_bits_of = nullptr;
  std::uint16_t* grad_bits = nullptr;
  const void* grad_bits_by = nullptr;
  /// A bfloat16 copy of the tensor a layer just wrote (`bf16_of`: its
  /// elements, `bf16_bits`: the copy, written in the same pass), for a bf16
  /// convolution that reads that tensor next; the containers turn it into
  /// `input_bf16` for the child whose input it is (checked by pointer,
  /// dropped at any other boundary), and a convolution uses it only for an
  /// x at `input_bf16_of` (layers/conv2d.hpp).
  const T* bf16_of = nullptr;
  const std::uint16_t* bf16_bits = nullptr;
  const T* input_bf16_of = nullptr;
  const std::uint16_t* input_bf16 = nullptr;
  bool training() const { return mode == Mode::Train; }
  /// A copy with the real context only (mode, arena, device, weight
  /// gradients, cross-replica sums, profiler, gradient sync, input
  /// gradient) and none of the hand-overs above: what a container that
  /// does not pass them on runs its children with (layers/layer.hpp).
  RunContext context_only() const {
    RunContext c;
    c.mode = mode;
    c.params = params;
    c.device = device;
    c.param_grads = param_grads;
    c.cross_replica = cross_replica;
    c.profiler = profiler;
    c.grad_sync = grad_sync;
    c.input_grad = input_grad;
    return c;
  }
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
