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
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cifarnet/core/tensor.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::plan {

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
  /// last forward): the next layer or sum writes them there.
  std::function<std::uint16_t*()> dy_bits;
  /// Its backward with dy float (`dy`) or as the bits in dy_bits() (dy
  /// null), dx as float (returned; `dx_bits` null) or as bf16 bits into
  /// `dx_bits` (the returned tensor is then empty).
  std::function<const Tensor<T>&(const Tensor<T>* dy, RunContext<B, T>&, std::uint16_t* dx_bits)>
      backward_bits;
  /// Its next training forward writes its output only as its bf16 copy
  /// (the float values stay stale): for readers that read nothing else.
  std::function<void()> skip_float_output;
  /// Its next training forward reads its input only through the bf16 copy
  /// of it, and throws if none is given.
  std::function<void()> require_bf16_input;
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
/// the layer computes none: nothing before it needs one).
template <class B, class T>
struct LayerRun {
  using Pass = std::function<const Tensor<T>&(const Tensor<T>&, RunContext<B, T>&)>;
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

}  // namespace cifarnet::plan
