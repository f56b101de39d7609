// cifarnet/layers/conv_bn.hpp — a convolution followed by batch norm (and
// optionally ReLU) as one layer, with the batch norm folded into the
// convolution for inference.
//
// ConvBatchNorm<In, Out, K, S, P, Relu> is Sequential<Conv2d<In, Out, K, S, P>,
// BatchNorm2d<Out, Relu>>: the same parameters under the same names (it
// names its two parts in the enclosing scope, conv<k> and bn<k>) and, in
// Mode::Train, the same computation by the same two layers. In Mode::Infer
// the batch norm is folded into the convolution: per output channel
// s = gamma / sqrt(moving_variance + eps), weights w * s and bias
// beta - moving_mean * s, recomputed from the current parameters on every
// call (a pass over the weights, small next to the convolution), and the
// ReLU runs as the convolution's post-op where the backend fuses it — one
// pass over the activations instead of two or three. With
// ConvAlgorithm::Auto the folded convolution uses Winograd where the backend
// has it (3x3, stride 1, at least 8 input channels), whatever the batch size.
// Relu is NoRelu or FusedRelu (layers/options.hpp).
//
// The training step is detail::ConvBnTraining's: the two parts one after
// the other on any backend (layers/conv_bn_parts.hpp), and on oneDNN the
// fusions inside the pair and the hand-overs with its neighbours
// (layers/conv_bn_onednn.hpp: bf16 hand-overs between the parts, batch norm
// statistics in the convolution's epilogue, the backward in ranges of
// images or in the own kernels). Its step-plan nodes carry the facts that
// training step declares, which the rules read (nn/plan_rules.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/layers/batch_norm.hpp"
#include "cifarnet/layers/conv2d.hpp"
#include "cifarnet/layers/conv_bn_onednn.hpp"
#include "cifarnet/layers/conv_bn_parts.hpp"
#include "cifarnet/layers/layer.hpp"
#include "cifarnet/nn/profile.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

/// Conv2d (no bias) then BatchNorm2d (then ReLU with FusedRelu), folded for inference.
template <int In, int Out, int K, int S = 1, Padding P = Padding::Same, auto ReluOpt = NoRelu>
struct ConvBatchNorm : LayerBase {
  static_assert(
      detail::ReluOption<ReluOpt>::valid,
      "cifarnet: ConvBatchNorm<In, Out, K, S, P, Relu>: Relu must be FusedRelu or NoRelu (not a bool).");
  static constexpr bool Relu = detail::ReluOption<ReluOpt>::on;
  static constexpr const char* kind = "conv_bn";
  static constexpr bool transparent = true;  // its parts are named in the enclosing scope
  static constexpr bool container = true;    // it times its parts itself
  static constexpr int in_channels = In == 0 ? -1 : In;
  static constexpr int out_channels(int) { return Out; }
  using ConvL = Conv2d<In, Out, K, S, P, NoBias>;
  using BnL = BatchNorm2d<Out, ReluOpt>;

  template <class B, class T>
  class Node {
    static constexpr bool kFusedRelu = Relu && backend_traits<B>::fused_relu;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      const Shape b = t_.build(in, scope, ctx);
      // Auto: Winograd for the folded inference convolution at any batch size
      // (forward only, weights reordered once: measured faster here, unlike
      // training, where backward_data and the layout conversions outweigh it),
      // except on inputs of fewer than 8 channels (ResNet's stem on the RGB
      // image: 2.9 ms with Winograd against 0.5 ms direct per batch of 100).
      if constexpr (backend_traits<B>::conv_algorithms) {
        const ConvAlgorithm a = ctx.options ? ctx.options->conv_algorithm : ConvAlgorithm::Auto;
        const ConvAlgorithm wide = in.c >= 8 ? ConvAlgorithm::Winograd : ConvAlgorithm::Direct;
        op_.set_algorithm(a == ConvAlgorithm::Auto ? wide : a);
      }
      if constexpr (backend_traits<B>::bf16_convolutions)
        op_.set_precision(ctx.options ? ctx.options->conv_precision : ConvPrecision::F32);
      fold_on_ = ctx.rule_on("conv_bn_fold");
      folded_w_.assign(std::size_t(K) * std::size_t(K) * in.c * std::size_t(Out), T(0));
      folded_b_.assign(std::size_t(Out), T(0));
      return b;
    }

    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      plan::Links<T> none;
      return forward(x, rc, none);
    }
    /// forward() with the hand-overs of a training plan (plan::Links): the
    /// bf16 copy of x, the sums of the batch norm that wrote x, the residual
    /// sum to write in its batch norm's pass; it leaves its batch norm's
    /// sums and bf16 copy for its readers.
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
      if (rc.training()) return t_.forward(x, rc, k);
      return detail::profiled(rc.profiler, t_.conv_name(), "conv_bn", false,
                              [&]() -> const Tensor<T>& { return infer(x, rc); });
    }
    /// `gs`: a residual block's backward sum to do on dx (plan::GradSum,
    /// residual_sum_in_conv_backward), where its training step can.
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc, plan::GradSum<T>* gs = nullptr) {
      return t_.backward(dy, rc, gs);
    }

    /// Its two nodes in a step plan (nn/plan.hpp), the convolution and the
    /// batch norm, with the facts the fusion rules read (nn/plan_rules.hpp):
    /// in inference the folded convolution the plan executor runs, in
    /// training what its training step declares at the plan's batch size.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const std::string& conv_name = t_.conv_name();
      const Shape out = t_.conv().geometry().out_shape();
      const int a = b.node(conv_name, "conv", {in}, out, ConvL::plan_attrs(), conv_name);
      const int y = b.node(t_.bn_name(), "bn", {a}, out, BnL::plan_attrs(), conv_name);
      plan::Node& cn = b.producer(a);
      if (!rc.training() && !fold_on_) {  // the two parts in turn, by the layer tree
        cn.facts[plan::facts::kEpilogueConv] =
            plan::Fact::no("conv_bn_fold is turned off (NetOptions::rules_off)");
        return y;
      }
      if (!rc.training()) {  // the plan executor runs the folded convolution itself (nn/executor.hpp)
        cn.facts[plan::facts::kEpilogueConv] = plan::Fact::yes();
        cn.facts[plan::facts::kOwnForward] = plan::own_forward_fact<B, T>(t_.conv().geometry(), b.key());
        cn.facts[plan::facts::kWinogradForward] =
            plan::winograd_forward_fact<B, T>(t_.conv().geometry(), b.key());
        cn.run = plan::ConvRun<B, T>{
            t_.conv().geometry(), [this](RunContext<B, T>& c) {
              fold(c);
              return plan::FoldedWeights<T>{folded_w_.data(), folded_b_.data(), fold_stamp_};
            }};
        return y;
      }
      // the training executor runs both nodes as this layer (nn/train_executor.hpp)
      plan::LayerRun<B, T> r;
      r.forward = [this](const Tensor<T>& x, RunContext<B, T>& c, plan::Links<T>& k) -> const Tensor<T>& {
        return forward(x, c, k);
      };
      r.backward = [this](const Tensor<T>& dy, RunContext<B, T>& c, plan::Links<T>& k) -> const Tensor<T>& {
        return backward(dy, c, k.grad_sum);
      };
      r.covers = 2;
      r.times_itself = true;
      t_.attach(r);
      cn.run = std::move(r);
      t_.record_facts(cn, b.producer(y), rc, b.key().batch);
      return y;
    }

    /// The parts (for inspection).
    const node_t<ConvL, B, T>& conv() const { return t_.conv(); }
    const node_t<BnL, B, T>& bn() const { return t_.bn(); }
    /// What the training step did (tests): backward passes that handed the
    /// batch norm's dx to the convolution as bf16; training forwards whose
    /// convolution wrote bf16 for the batch norm; backward passes that wrote
    /// this layer's dx as bf16 bits for the layer before it.
    std::size_t bf16_handoffs() const { return t_.bf16_handoffs_; }
    std::size_t bf16_outputs() const { return t_.bf16_outputs_; }
    std::size_t bf16_dx_handoffs() const { return t_.bf16_dx_handoffs_; }
    /// Backward passes that ran a range of images at a time; of those, the
    /// ones that did a residual block's sum in their ranges (plan::GradSum),
    /// that ran in the backend's own kernels with the batch norm's dx in
    /// their prologue, whose kernels did the block's sum in their epilogue,
    /// that took an earlier batch norm's sums there (plan::BnSums) or range
    /// by range; and backward passes whose batch norm sums the layer after
    /// this one took.
    std::size_t ranged_backwards() const { return t_.ranged_backwards_; }
    std::size_t range_sums() const { return t_.range_sums_; }
    std::size_t direct_backwards() const { return t_.direct_backwards_; }
    std::size_t epilogue_residual_sums() const { return t_.epilogue_residual_sums_; }
    std::size_t epilogue_bn_sums() const { return t_.epilogue_bn_sums_; }
    std::size_t range_bn_sums() const { return t_.range_bn_sums_; }
    std::size_t sums_given() const { return t_.sums_given_; }
    /// Backward passes whose batch norm took its sums from the pass that
    /// wrote its dy as bf16 bits (bn_sums_in_dy_sum).
    std::size_t dy_sums_taken() const { return t_.dy_sums_taken_; }
    /// Backward passes whose batch norm computed the convolution's weight
    /// gradient in the pass of its dx (bn_dx_into_conv_weight_gradient).
    std::size_t weight_gradients_in_bn() const { return t_.wgrads_in_bn_; }
    /// Training forwards that left their output unwritten, that took their
    /// input as a map, and that wrote only the bf16 copy of their output.
    std::size_t deferred_outputs() const { return t_.bn().deferred_forwards(); }
    std::size_t normalised_inputs() const { return t_.normalised_inputs_; }
    std::size_t float_outputs_skipped() const { return t_.bn().float_outputs_skipped(); }

   private:
    // y = conv(x, w * s) + (beta - mean * s) [+ ReLU] with the moving statistics.
    const Tensor<T>& infer(const Tensor<T>& x, RunContext<B, T>& rc) {
      if (!fold_on_) return t_.bn().forward(t_.conv().forward(x, rc), rc);  // conv_bn_fold off
      ConvGeom g = t_.conv().geometry();
      const Shape s = detail::check_input(t_.conv_name(), Shape{1, g.ic, g.ih, g.iw}, x, g.fmt);
      g.n = s.n;
      ensure_shape(y_, g.out_shape(), g.fmt);
      fold(rc);
      if constexpr (backend_traits<B>::versioned_weights) op_.set_weights_version(fold_stamp_);
      if constexpr (kFusedRelu) {
        op_.forward(*rc.device, g, x.data(), folded_w_.data(), folded_b_.data(), y_.data(), true);
      } else {
        op_.forward(*rc.device, g, x.data(), folded_w_.data(), folded_b_.data(), y_.data());
        if constexpr (Relu) relu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
      }
      return y_;
    }

    // Folds again only when one of the five parameters was written since the
    // last fold (the sum of their versions changes exactly then).
    void fold(RunContext<B, T>& rc) {
      const auto ids = t_.bn().param_ids();
      const Parameters<T>& p = *rc.params;
      const std::size_t w = t_.conv().weights_id();
      std::uint64_t stamp = p.version(w);
      for (std::size_t id : ids) stamp += p.version(id);
      if (stamp == fold_stamp_) return;
      fold_stamp_ = stamp;
      stats_.fold(*rc.device, folded_w_.size() / std::size_t(Out), std::size_t(Out), t_.bn().epsilon(),
                  p.value(w), p.value(ids[0]), p.value(ids[1]), p.value(ids[2]), p.value(ids[3]),
                  folded_w_.data(), folded_b_.data());
    }

    detail::ConvBnTraining<B, T, ConvL, BnL, Relu> t_;  // the two parts and the training step
    ops::Conv2d<B, T> op_;                              // the folded inference convolution (with bias)
    ops::BnStats<B, T> stats_;
    ops::Relu<B, T> relu_;  // where the convolution does not fuse it
    std::vector<T> folded_w_, folded_b_;
    std::uint64_t fold_stamp_ = 0;  // versions summed at the last fold (0: none yet)
    bool fold_on_ = true;           // the rule conv_bn_fold (NetOptions::rules_off)
    Tensor<T> y_;
  };
};

}  // namespace cifarnet
