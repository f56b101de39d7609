// cifarnet/nn/node_run.hpp — how the plan executor (nn/executor.hpp) runs a
// node of a step plan: what a layer attaches to the nodes it emits
// (plan::Node::run, a std::any holding one of the types below).
//
// Every leaf layer gets a LayerRun without code of its own
// (detail::emit_child): its forward and its backward on plain float
// tensors, the same calls a container makes. A layer whose node can run as
// part of a fused operation attaches what that needs instead: in inference
// a convolution a ConvRun (its geometry and its weights: a Conv2d's own, a
// ConvBatchNorm's with the batch norm folded in); in training a LayerRun
// with the PairHooks the training executor's rules call (ConvBatchNorm,
// ChannelPad, Pool2d). Container nodes ("identity", "add") carry nothing:
// the executors run them themselves.
//
// The hand-overs between layers are explicit: the training executor passes
// each layer call the Links its rules gave it (a bf16 copy of its input, a
// residual sum to write, batch norm sums, a backward sum), and nothing
// about its neighbours goes through RunContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cifarnet/core/tensor.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/plan.hpp"
#include "cifarnet/ops/geometry.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet::plan {

/// A batch norm's backward sums, handed by the layer that wrote tensor
/// `of` (its batch norm's output, or the residual sum that batch norm
/// wrote) to the layer that reads it, which forms the gradient of `of` in
/// its backward and takes the sums over it there, while it is in cache
/// (bn_sums_in_next_conv_backward). What the sums need: the batch norm's
/// input `x`, its fused ReLU's a then b (`relu_ab`, or null) and its batch
/// `mean`, `c` channels; through a sum followed by a ReLU (`masked`), the
/// gradient of `of` goes through that ReLU's mask first. The reader writes
/// `sums` (2c: sum dy, sum dy (x - mean)) and sets `given_for` to the
/// gradient they are of; the writer uses them only for a dy at that
/// address, once, and forgets them at its next forward.
template <class T>
struct BnSums {
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

/// The residual sum a layer writes in the pass that writes its own output
/// (residual_sum_in_bn): out = own output + `shortcut` (or the bf16 bits
/// `shortcut_bits`), then the ReLU with `relu`; its mask as bits into
/// `mask` where given and the layer can; only as its bf16 copy and mask
/// where `skip_float` (bf16_residual_stream). The layer reports what it did.
template <class T>
struct SumInPass {
  const T* shortcut = nullptr;
  const std::uint16_t* shortcut_bits = nullptr;
  T* out = nullptr;
  std::size_t n = 0;
  bool relu = false;
  std::uint16_t* mask = nullptr;
  bool skip_float = false;
  bool done = false, mask_done = false, float_skipped = false;  ///< set by the layer
};

/// A residual block's backward sum done by the layer that computes the
/// gradient of the block's input (residual_sum_in_conv_backward): dx = dx
/// + `other` (or, for a downsampling shortcut written in place into a
/// channel pad, the pooled gradient formed from `pooled`: that pad's
/// gradient at its channel `before`, `pooled_channels` a pixel, pooled by
/// `pooled_stride`), then times the ReLU mask of `mask_bits` or
/// `mask_relu` (> 0) where given, on each range of dx while it is in
/// cache. `of`: the input whose gradient it is; `name`: where its time is
/// booked. The layer sets `done`.
template <class T>
struct GradSum {
  const void* of = nullptr;
  const T* other = nullptr;
  const T* pooled = nullptr;
  std::size_t pooled_channels = 0, pooled_stride = 0;
  const std::uint16_t* mask_bits = nullptr;
  const T* mask_relu = nullptr;
  const std::string* name = nullptr;
  bool done = false;
};

/// The hand-overs of one layer call, passed explicitly by the training
/// executor where the plan's rules fired (nn/train_executor.hpp): what the
/// call is given (null: nothing) and what it leaves for its readers. A
/// layer without fusions never sees one.
template <class T>
struct Links {
  // forward, given
  const std::uint16_t* input_bf16 = nullptr;  ///< the bf16 copy of the input its writer made
  BnSums<T>* input_sums = nullptr;            ///< the sums the input's writer hands over
  bool input_sums_shared = false;             ///< the input has another reader (a block's shortcut)
  SumInPass<T>* sum = nullptr;                ///< the residual sum to write in the same pass
  // forward, left for the readers
  BnSums<T>* sums_out = nullptr;  ///< the sums over what it wrote (the output, or sum->out)
  const T* copy_of = nullptr;     ///< a bf16 copy of what it wrote: of which tensor
  const std::uint16_t* copy = nullptr;
  // backward, given
  GradSum<T>* grad_sum = nullptr;  ///< the block's sum to do on its dx
};

/// Where a pool writes its output in place into the channel pad after it:
/// that pad's output at channel `before` of the first pixel, pixels
/// `channels` apart; `written` is where the pool records it (opaque).
template <class T>
struct PadTarget {
  T* dst = nullptr;
  std::size_t channels = 0, before = 0;
  void* written = nullptr;
};

/// What a layer offers the training executor's rules between it and its
/// neighbours beside its forward and backward (a ConvBatchNorm's, a
/// ChannelPad's and a Pool2d's; empty functions elsewhere), each used only
/// where a rule fired on the facts the layers recorded (nn/plan_rules.hpp).
template <class B, class T>
struct PairHooks {
  /// Where its backward can read its dy from as bf16 bits (sized by the
  /// last forward; asked just before that backward): the next layer or sum
  /// writes them there.
  std::function<std::uint16_t*(RunContext<B, T>&)> dy_bits;
  /// Its backward with dy float (`dy`) or as the bits in dy_bits() (dy
  /// null), dx as float (returned; `dx_bits` null) or as bf16 bits into
  /// `dx_bits` (the returned tensor is then empty).
  std::function<const Tensor<T>&(const Tensor<T>* dy, RunContext<B, T>&, std::uint16_t* dx_bits)>
      backward_bits;
  /// Its dy written as bf16 bits into dy_bits() as a + b through the ReLU
  /// mask bits `mask` (null: none), each part float (af, bf) or bits (ab,
  /// bb; one of each pair null), with its batch norm's backward sums
  /// taken in the same pass for its next backward (bn_sums_in_dy_sum).
  std::function<void(RunContext<B, T>&, const T* af, const std::uint16_t* ab, const T* bf,
                     const std::uint16_t* bb, const std::uint16_t* mask)>
      sum_into_dy;
  /// Its next training forward writes its output only as its bf16 copy
  /// (the float values stay stale): for readers that read nothing else.
  std::function<void()> skip_float_output;
  /// Its next training forward reads its input only through the bf16 copy
  /// of it, and throws if none is given.
  std::function<void()> require_bf16_input;
  /// A convolution's next training forward applies the GELU layer after it
  /// as a post-op and writes the result only as bf16 bits, left as its
  /// copy (its float output stays stale; the GELU layer does not run).
  std::function<void()> gelu_bits_output;
  /// Its next training forward leaves its output unwritten, as a map the
  /// next layer's kernels compute it from (returned, opaque), and the
  /// next one's takes its input so.
  std::function<const void*()> defer_output;
  std::function<void(const void*)> take_normalised_input;
  /// A channel pad's output for a batch of n, for the pool before it to
  /// write into (its padding zeroed); the pool's next forward writes there.
  std::function<PadTarget<T>(RunContext<B, T>&, std::size_t n)> pad_target;
  std::function<void(const PadTarget<T>&)> pad_into;
  /// After a pool's forward written into a pad: whether its gradient can be
  /// formed from the pad's output gradient on the fly (a window equal to
  /// the stride), with the pad's channel to start at, its channels a pixel
  /// and the stride (Eltwise::add_pooled).
  std::function<bool(std::size_t& before, std::size_t& channels, std::size_t& stride)> pooled_gradient;
};

/// A layer's own forward and backward: the layer's output for input x
/// (owned by the layer, valid until its next forward), and after a
/// training forward, its input gradient for output gradient dy (empty where
/// the layer computes none: nothing before it needs one), each with the
/// call's hand-overs (Links; empty where no rule fired there).
template <class B, class T>
struct LayerRun {
  using Pass = std::function<const Tensor<T>&(const Tensor<T>&, RunContext<B, T>&, Links<T>&)>;
  Pass forward;
  Pass backward;
  bool keeps_input = false;  ///< LayerBase::keeps_input: its input must stay as it is until the next run
  /// How many consecutive plan nodes the layer runs (from the one that
  /// holds the run): 1, or a layer that emits several nodes and runs
  /// them itself in training (a ConvBatchNorm's convolution and batch norm).
  int covers = 1;
  /// The layer books its own parts' times in a profiler (a container);
  /// otherwise the executor books the node's.
  bool times_itself = false;
  PairHooks<B, T> pair;
};

/// Folded weights: HWIO weights and a bias per output channel, and a number
/// that changes exactly when they do (0: unknown, always changed).
template <class T>
struct FoldedWeights {
  const T* w = nullptr;
  const T* b = nullptr;
  std::uint64_t version = 0;
};

/// A convolution the executor runs itself (ops::ConvEpilogue), with the
/// bias, sum and ReLU the rules give it: a standalone Conv2d's own weights
/// and bias, or a ConvBatchNorm's convolution with its batch norm folded in
/// (y = conv(x, w·s) + (β − mean·s) with the moving statistics). `geom` has
/// n unset; `weights` refolds where a parameter changed since the last call.
template <class B, class T>
struct ConvRun {
  ConvGeom geom;
  std::function<FoldedWeights<T>(RunContext<B, T>&)> weights;
};

/// A fact from a backend's answer `why_not(g, bf16)` for a convolution of
/// geometry `g` (n unset) that the executor runs at the plan's key.
inline Fact epilogue_fact(ConvGeom g, const Key& k, std::string (*why_not)(const ConvGeom&, bool)) {
  g.n = k.batch;
  g.fmt = k.fmt;
  const std::string why = why_not(g, k.precision == ConvPrecision::BF16);
  return why.empty() ? Fact::yes() : Fact::no(why);
}

/// The fact facts::kOwnForward of such a convolution: whether the backend's
/// own inference kernels take it (ops::ConvEpilogue::own_kernel_why_not).
template <class B, class T>
Fact own_forward_fact(const ConvGeom& g, const Key& k) {
  return epilogue_fact(g, k, &ops::ConvEpilogue<B, T>::own_kernel_why_not);
}

/// The fact facts::kWinogradForward: whether the backend's own Winograd
/// kernels take it (ops::ConvEpilogue::winograd_why_not).
template <class B, class T>
Fact winograd_forward_fact(const ConvGeom& g, const Key& k) {
  return epilogue_fact(g, k, &ops::ConvEpilogue<B, T>::winograd_why_not);
}

}  // namespace cifarnet::plan
