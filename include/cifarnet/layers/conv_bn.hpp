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
// With bf16 convolutions on a backend with bf16_gradients (oneDNN), a
// training step hands the two tensors between the parts over as bfloat16:
// the convolution writes its output as bf16 and the batch norm reads those
// bits (forward and backward), and the batch norm writes its input gradient
// as bf16 into the buffer the convolution's backward reads. The second is
// the rounding the convolution applied anyway; the first rounds the
// convolution's output once more than the separate layers do (bf16
// activations, as bf16 autocast has them; tests/backend/test_bf16.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/layers/batch_norm.hpp"
#include "cifarnet/layers/conv2d.hpp"
#include "cifarnet/layers/layer.hpp"
#include "cifarnet/nn/profile.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

namespace detail {
/// A ConvBatchNorm's training output left unwritten for the ConvBatchNorm
/// after it in a Sequential, as its batch norm's map (`of`: the output
/// tensor's data, whose values are not written).
template <class T>
struct DeferredOutput {
  const void* of = nullptr;
  ops::BnNormMap<T> map;
};
}  // namespace detail

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
  static constexpr bool handover_protocol = true;
  static constexpr int in_channels = In == 0 ? -1 : In;
  static constexpr int out_channels(int) { return Out; }
  using ConvL = Conv2d<In, Out, K, S, P, NoBias>;
  using BnL = BatchNorm2d<Out, ReluOpt>;

  template <class B, class T>
  class Node {
    static constexpr bool kFusedRelu = Relu && backend_traits<B>::fused_relu;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      const bool down = ctx.propagate_down;
      const Shape a = detail::build_child<ConvL>(conv_, in, scope, ctx, &conv_name_);
      ctx.propagate_down = true;
      const Shape b = detail::build_child<BnL>(bn_, a, scope, ctx, &bn_name_);
      ctx.propagate_down = down;
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
      bf16_dx_ = !ctx.options || ctx.options->bf16_gradients;
      chunk_bytes_ = ctx.options ? ctx.options->conv_bn_chunk_bytes : NetOptions{}.conv_bn_chunk_bytes;
      float_convs_ = !ctx.options || ctx.options->conv_precision == ConvPrecision::F32;
      hand_overs_ = !ctx.options || ctx.options->direct_conv_bn;
      folded_w_.assign(std::size_t(K) * std::size_t(K) * in.c * std::size_t(Out), T(0));
      folded_b_.assign(std::size_t(Out), T(0));
      return b;
    }

    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      if (!rc.training())
        return detail::profiled(rc.profiler, conv_name_, "conv_bn", false,
                                [&]() -> const Tensor<T>& { return infer(x, rc); });
      // bf16 convolutions: the convolution writes its output as bf16 and the
      // batch norm reads those bits, forward and backward (half the bytes of
      // a float output; the rounding bf16 training has anyway).
      if (std::exchange(expect_copy_, false) && rc.input_bf16_of != x.data())
        throw ConfigError("layer '" + conv_name_ +
                          "': its input's float values were skipped for a bf16 copy that is not there");
      take_input_offer(rc, x);
      // An input the layer before left unwritten (take_normalised_input):
      // its map, for this forward and the backward after it.
      in_norm_ = nullptr;
      if (std::exchange(expect_norm_, false)) {
        if (!norm_src_ || norm_src_->of != x.data())
          throw ConfigError("layer '" + conv_name_ +
                            "': its input was to be normalised in its kernels, but the layer before it did "
                            "not leave it so");
        in_norm_ = &norm_src_->map;
        ++normalised_inputs_;
      }
      const std::uint16_t* lp = nullptr;
      const Tensor<T>* with_stats = nullptr;  // the convolution took the batch norm's statistics
      const Tensor<T>& a =
          detail::profiled(rc.profiler, conv_name_, "conv", false, [&]() -> const Tensor<T>& {
            if constexpr (backend_traits<B>::bf16_gradients)
              if (bn_.backward_bf16_ready(rc)) lp = conv_.forward_bf16(x, rc);
            if (lp) return x;
            if constexpr (backend_traits<B>::conv_bn_prologue) {
              if (float_convs_ && bn_.chunkable(rc)) {
                stats_buf_.resize(2 * std::size_t(Out));
                with_stats = conv_.forward_stats(x, rc, stats_buf_.data(), in_norm_);
              }
            }
            if (in_norm_ && !with_stats)
              throw std::logic_error("layer '" + conv_name_ +
                                     "': a normalised input its kernels do not take");
            return with_stats ? *with_stats : conv_.forward(x, rc);
          });
      if (with_stats) bn_.give_statistics(a, stats_buf_.data());
      if (lp) {
        ++bf16_outputs_;
        return detail::profiled(rc.profiler, bn_name_, "bn", false, [&]() -> const Tensor<T>& {
          return bn_.forward_bf16(lp, conv_.geometry().out_shape(), rc);
        });
      }
      if (std::exchange(defer_once_, false)) {  // the next layer normalises it (deferred_output)
        if constexpr (backend_traits<B>::conv_bn_prologue && Relu) {
          const Tensor<T>& y =
              detail::profiled(rc.profiler, bn_name_, "bn", false,
                               [&]() -> const Tensor<T>& { return bn_.forward_deferred(a, rc); });
          norm_out_.of = y.data();
          norm_out_.map = bn_.norm_map();
          offer_sums(rc, y, nullptr, false);
          return y;
        }
      }
      norm_out_.of = nullptr;
      T* const sum_out = rc.sum_out;
      const bool sum_relu = rc.sum_relu;
      const Tensor<T>& y = detail::profiled(rc.profiler, bn_name_, "bn", false,
                                            [&]() -> const Tensor<T>& { return bn_.forward(a, rc); });
      offer_sums(rc, y, rc.sum_done ? sum_out : nullptr, sum_relu);
      return y;
    }

    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (in_norm_ && !direct_bn(rc))
        throw std::logic_error(
            "layer '" + conv_name_ +
            "': a backward outside the own kernels after a forward whose input was not stored");
      // Batch norm's sums given by the layer after this one (BnSumsOffer):
      // for this dy only, once.
      const bool given = sums_offer_.given_for != nullptr && sums_offer_.given_for == dy.data() &&
                         sums_offer_.sums.size() == 2 * std::size_t(Out);
      sums_offer_.given_for = nullptr;
      if constexpr (backend_traits<B>::bf16_gradients) {
        // bf16 convolutions: the batch norm writes its dx as bf16 straight
        // into the buffer the convolution's backward reads (no float dx, no
        // conversion pass; the same rounding).
        if (bn_.backward_bf16_ready(rc) && conv_.bf16_dy(rc)) return backward_io(&dy, rc, nullptr);
      }
      const std::size_t n = conv_.geometry().n;
      if (const std::size_t per = range_images(rc, n)) return backward_ranges(dy, rc, per, given);
      if (direct_bn(rc)) return backward_ranges(dy, rc, n, given);  // one range: the own kernels all the same
      const Tensor<T>& da = detail::profiled(rc.profiler, bn_name_, "bn", true,
                                             [&]() -> const Tensor<T>& { return bn_.backward(dy, rc); });
      return detail::profiled(rc.profiler, conv_name_, "conv", true,
                              [&]() -> const Tensor<T>& { return conv_.backward(da, rc); });
    }

    /// Its two nodes in a step plan (nn/plan.hpp), the convolution and the
    /// batch norm, with the facts the fusion rules read (nn/plan_rules.hpp):
    /// the answers of the queries below, at the plan's batch size.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      namespace f = plan::facts;
      const std::size_t n = b.key().batch;
      const Shape out = conv_.geometry().out_shape();
      const int a = b.node(conv_name_, "conv", {in}, out, ConvL::plan_attrs(), conv_name_);
      const int y = b.node(bn_name_, "bn", {a}, out, BnL::plan_attrs(), conv_name_);
      auto fact = [](bool ok, std::string why) {
        return ok ? plan::Fact::yes() : plan::Fact::no(std::move(why));
      };
      const std::string bf16_why = !backend_traits<B>::bf16_gradients ? "no bf16 hand-overs on this backend"
                                   : float_convs_                     ? "fp32 convolutions"
                                   : !rc.training()                   ? "inference"
                                                                      : "synchronized batch norm";
      const std::string chunk_why = !backend_traits<B>::chunked_conv_bn
                                        ? "no ranged conv + batch norm backward "
                                          "on this backend"
                                    : !float_convs_  ? "bf16 convolutions"
                                    : !rc.training() ? "inference"
                                                     : "synchronized batch norm";
      const bool chunk = float_convs_ && bn_.chunkable(rc);
      plan::Node& cn = b.producer(a);
      if (!rc.training()) {  // the plan executor runs the folded convolution itself (nn/executor.hpp)
        cn.facts[f::kEpilogueConv] = plan::Fact::yes();
        cn.run = plan::ConvRun<B, T>{
            conv_.geometry(), [this](RunContext<B, T>& c) {
              fold(c);
              return plan::FoldedWeights<T>{folded_w_.data(), folded_b_.data(), fold_stamp_};
            }};
      } else {  // the training executor runs both nodes as this layer (nn/train_executor.hpp)
        plan::LayerRun<B, T> r;
        r.forward = [this](const Tensor<T>& x, RunContext<B, T>& c) -> const Tensor<T>& {
          return forward(x, c);
        };
        r.backward = [this](const Tensor<T>& dy, RunContext<B, T>& c) -> const Tensor<T>& {
          return backward(dy, c);
        };
        r.covers = 2;
        r.times_itself = true;
        r.pair.dy_bits = [this] { return bf16_dy_target(); };
        r.pair.skip_float_output = [this] { skip_float_output_once(); };
        r.pair.require_bf16_input = [this] { require_bf16_input(); };
        r.pair.defer_output = [this]() -> const void* {
          defer_output_once();
          return deferred_output();
        };
        r.pair.take_normalised_input = [this](const void* src) {
          take_normalised_input(static_cast<const detail::DeferredOutput<T>*>(src));
        };
        r.pair.backward_bits = [this](const Tensor<T>* dy, RunContext<B, T>& c,
                                      std::uint16_t* dx_bits) -> const Tensor<T>& {
          return backward_bits_io(dy, c, dx_bits);
        };
        cn.run = std::move(r);
      }
      bool bf16 = false;
      if constexpr (backend_traits<B>::bf16_gradients) bf16 = bn_.backward_bf16_ready(rc) && !float_convs_;
      cn.facts[f::kBf16Output] = fact(bf16 && conv_.has_bf16_output(rc),
                                      bf16 ? "no bf16-output kernel for this convolution" : bf16_why);
      cn.facts[f::kBf16Backward] = fact(bf16 && conv_.bf16_dy(rc) != nullptr,
                                        bf16 ? "no bf16 backward kernel for this convolution" : bf16_why);
      const std::string fwd_why = conv_.direct_why_not(rc, true), bwd_why = conv_.direct_why_not(rc, false);
      cn.facts[f::kStatsEpilogue] = fact(chunk && conv_.direct_forward_next(rc), chunk ? fwd_why : chunk_why);
      cn.facts[f::kDirectBackward] = fact(direct_bn(rc), chunk ? bwd_why : chunk_why);
      cn.facts[f::kRangedBackward] =
          fact(range_images(rc, n) != 0, !chunk          ? chunk_why
                                         : !chunk_bytes_ ? "NetOptions::conv_bn_chunk_bytes is 0"
                                                         : "the batch fits one range of NetOptions::conv_bn_"
                                                           "chunk_bytes");
      cn.facts[f::kNormalisedInput] = fact(takes_normalised_input(rc), chunk ? fwd_why : chunk_why);
      cn.facts[f::kBf16InputOnly] =
          fact(reads_only_bf16_input(rc, n), bf16 ? "its kernels read the float input" : bf16_why);
      cn.facts[f::kBf16Dx] =
          fact(writes_bf16_dx(rc), !bf16       ? bf16_why
                                   : !bf16_dx_ ? "NetOptions::bf16_gradients is off"
                                               : "no bf16 dx kernel for this convolution, or no dx needed");
      cn.facts[f::kNeedsDx] = fact(conv_.needs_input_gradient(rc), "nothing before it needs a gradient");
      plan::Node& bnode = b.producer(y);
      bnode.facts[f::kSumMask] = fact(bn_.writes_sum_mask(n), "its channel count or layout has no mask bits");
      bnode.facts[f::kBf16Copy] = fact(bn_.writes_bf16_copy(rc), bf16_why);
      bnode.facts[f::kOffersSums] =
          fact(hand_overs_ && chunk && (direct_bn(rc) || range_images(rc, n) != 0),
               !hand_overs_ ? "NetOptions::direct_conv_bn is off"
               : !chunk     ? chunk_why
                            : "its backward runs neither in ranges nor in the own kernels");
      bnode.facts[f::kDeferOutput] =
          fact(can_defer_output(rc), !Relu ? "no fused ReLU (the map is batch norm + ReLU's)" : chunk_why);
      bool dy_bits = false;
      if constexpr (backend_traits<B>::bf16_gradients) dy_bits = bn_.backward_bf16_bits_ready(rc);
      bnode.facts[f::kBf16Dy] =
          fact(takes_bf16_dy(rc), !bf16     ? bf16_why
                                  : dy_bits ? "no bf16 backward kernel for its convolution"
                                            : "its channel count or layout has no bf16 dy");
      bool alone = false;
      if constexpr (backend_traits<B>::bf16_gradients) alone = bf16 && bn_.writes_bf16_alone(rc, n);
      bnode.facts[f::kBf16OutputAlone] =
          fact(alone, bf16 ? "the batch norm's channel count or layout has no bf16-only output" : bf16_why);
      bnode.facts[f::kTakesSum] =
          fact(bn_.takes_sum(rc), Relu                           ? "it has its own ReLU"
                                  : backend_traits<B>::fused_sum ? "inference or synchronized batch norm"
                                                                 : "no fused sum on this backend");
      return y;
    }

    // The float output skipped between two ConvBatchNorm in a Sequential
    // (nn/sequential.hpp): where the later one reads its input only through
    // the earlier one's bf16 copy (reads_only_bf16_input), the earlier one's
    // batch norm writes that copy alone (skip_float_output_once): 4 of the
    // 10 bytes per element its forward moves. The pair is fixed by the
    // types, and the later layer checks the copy is there (it throws, not
    // reads a stale float tensor, if it is not).
    static constexpr bool bf16_output_handover = true;
    /// Whether this layer's next training forward of a batch of `n` reads
    /// its input only through the previous layer's bf16 copy.
    bool reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (backend_traits<B>::bf16_gradients)
        return bn_.backward_bf16_ready(rc) && conv_.reads_only_bf16_input(rc, n);
      else
        return (void)rc, (void)n, false;
    }
    /// Whether a training forward of a batch of `n` that takes a residual
    /// block's sum can read the shortcut as bf16 and write the sum as bf16
    /// alone (BatchNorm2d::sums_bf16_only).
    bool sums_bf16_only(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (backend_traits<B>::bf16_gradients)
        return bn_.backward_bf16_ready(rc) && bn_.sums_bf16_only(rc, n);
      else
        return (void)rc, (void)n, false;
    }
    // The float output deferred between two ConvBatchNorm in a Sequential
    // (nn/sequential.hpp), on a backend with conv_bn_prologue, training: the
    // earlier layer's batch norm (with its ReLU) takes its statistics (from
    // its convolution's epilogue) and leaves its output unwritten
    // (defer_output_once); the later layer's own kernels compute each
    // image of it from its map (ops::BnNormMap) in their prologue, in the
    // forward and again for the weight gradient in the backward
    // (take_normalised_input). The output is neither written to memory nor
    // read back twice; the same float operations as the normalising pass.
    static constexpr bool deferred_output_handover = true;
    /// Whether this layer's next training forward can leave its output
    /// unwritten for the next layer: a fused ReLU, float convolutions, a
    /// batch norm that can.
    bool can_defer_output(RunContext<B, T>& rc) const {
      if constexpr (backend_traits<B>::conv_bn_prologue && Relu)
        return float_convs_ && bn_.chunkable(rc);
      else
        return (void)rc, false;
    }
    /// Let the next training forward leave its output unwritten.
    void defer_output_once() { defer_once_ = true; }
    /// Where the next layer finds this layer's output as a map after its
    /// forward (filled by that forward).
    const detail::DeferredOutput<T>* deferred_output() const { return &norm_out_; }
    /// Whether this layer's next training forward can take its input as
    /// the previous layer's map: its own kernels run this convolution.
    bool takes_normalised_input(RunContext<B, T>& rc) const {
      if constexpr (backend_traits<B>::conv_bn_prologue)
        return float_convs_ && bn_.chunkable(rc) && conv_.direct_forward_next(rc) && conv_.direct_bn();
      else
        return (void)rc, false;
    }
    /// The next training forward's input is `src`'s (defer_output_once was
    /// asked of that layer); the forward throws if it is not that input.
    void take_normalised_input(const detail::DeferredOutput<T>* src) {
      norm_src_ = src;
      expect_norm_ = true;
    }
    /// Training forwards that left their output unwritten, and that took
    /// their input as a map (tests).
    std::size_t deferred_outputs() const { return bn_.deferred_forwards(); }
    std::size_t normalised_inputs() const { return normalised_inputs_; }

    /// Let the next training forward write its output only as its bf16 copy.
    void skip_float_output_once() {
      if constexpr (backend_traits<B>::bf16_gradients) bn_.skip_float_output_once();
    }
    /// Training forwards that wrote only the bf16 copy (tests).
    std::size_t float_outputs_skipped() const {
      if constexpr (backend_traits<B>::bf16_gradients)
        return bn_.float_outputs_skipped();
      else
        return 0;
    }
    /// Before a training forward whose input's producer may have skipped its
    /// float output: throw unless the bf16 copy of that input is offered.
    void require_bf16_input() { expect_copy_ = true; }

    // The input gradient handed back as bf16 between two ConvBatchNorm in a
    // Sequential (nn/sequential.hpp, backward): the later layer's
    // convolution writes its dx as bf16 bits (ops::Conv2d::writes_bf16_dx)
    // into a buffer of the earlier layer, whose batch norm reads them as its
    // dy (BatchNorm2d::backward_bf16_bits): 2 bytes an element written and
    // read twice instead of 4. dy is then rounded to bf16 once more than
    // the float hand-over rounds it (bf16 gradients, as bf16 autocast has
    // them; tests/backend/test_bf16.cpp).
    /// Whether this layer's next backward can write its dx as bf16 bits
    /// (backward_to_bits).
    bool writes_bf16_dx(RunContext<B, T>& rc) {
      if constexpr (backend_traits<B>::bf16_gradients)
        return bf16_dx_ && bn_.backward_bf16_ready(rc) && conv_.bf16_dy(rc) != nullptr &&
               conv_.writes_bf16_dx(rc);
      else
        return (void)rc, false;
    }
    /// Whether this layer's next backward can take its dy as bf16 bits
    /// (bf16_dy_target, backward_from_bits).
    bool takes_bf16_dy(RunContext<B, T>& rc) {
      if constexpr (backend_traits<B>::bf16_gradients)
        return bn_.backward_bf16_bits_ready(rc) && conv_.bf16_dy(rc) != nullptr;
      else
        return (void)rc, false;
    }
    /// Where the layer after this one writes the bits of this layer's dy.
    std::uint16_t* bf16_dy_target() {
      const ConvGeom& g = conv_.geometry();
      dy_bits_.resize(g.n * g.oc * g.oh * g.ow);
      return dy_bits_.data();
    }
    /// backward() with dx written as bf16 bits into `dx_bits` (the earlier
    /// layer's bf16_dy_target, or a residual block's buffer); needs
    /// writes_bf16_dx(rc).
    void backward_to_bits(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
      backward_io(&dy, rc, dx_bits);
    }
    /// backward() with dy the bits the later layer wrote into
    /// bf16_dy_target(); needs takes_bf16_dy(rc).
    const Tensor<T>& backward_from_bits(RunContext<B, T>& rc) { return backward_io(nullptr, rc, nullptr); }
    /// Both: dy from bf16_dy_target(), dx as bf16 bits into `dx_bits`.
    void backward_bits_to_bits(RunContext<B, T>& rc, std::uint16_t* dx_bits) {
      backward_io(nullptr, rc, dx_bits);
    }

    /// backward() with dy float or from bf16_dy_target() (dy null), dx as
    /// float or as bits into `dx_bits` (then the returned tensor is empty):
    /// the training executor's entry (plan::PairHooks).
    const Tensor<T>& backward_bits_io(const Tensor<T>* dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
      if (dy && !dx_bits) return backward(*dy, rc);
      if (dx_bits && !writes_bf16_dx(rc))
        throw std::logic_error("layer '" + conv_name_ + "': asked for its dx as bf16 bits it cannot write");
      if (!dy && !takes_bf16_dy(rc))
        throw std::logic_error("layer '" + conv_name_ + "': given its dy as bf16 bits it cannot read");
      return backward_io(dy, rc, dx_bits);
    }
    /// How many backward passes handed the batch norm's dx to the
    /// convolution as bf16, and how many training forwards had the
    /// convolution write bf16 for the batch norm (above; tests).
    std::size_t bf16_handoffs() const { return bf16_handoffs_; }
    /// How many backward passes wrote this layer's dx as bf16 bits for the
    /// layer before it (backward_to_bits; tests).
    std::size_t bf16_dx_handoffs() const { return bf16_dx_handoffs_; }
    std::size_t bf16_outputs() const { return bf16_outputs_; }
    /// The parts (for inspection).
    const node_t<ConvL, B, T>& conv() const { return conv_; }
    const node_t<BnL, B, T>& bn() const { return bn_; }

    /// Backward passes that ran a range of images at a time (backward_ranges; tests).
    std::size_t ranged_backwards() const { return ranged_backwards_; }
    /// Of those, the ones that did a residual block's sum in their ranges
    /// (RunContext::grad_sum; tests).
    std::size_t range_sums() const { return range_sums_; }
    /// Of those, the ones that ran in the backend's own kernels with batch
    /// norm's input gradient in their prologue (direct_conv_bn; tests).
    std::size_t direct_backwards() const { return direct_backwards_; }
    /// Of those, the ones whose kernels also did the residual block's sum
    /// (grad_sum) image by image in their epilogue (tests).
    std::size_t epilogue_residual_sums() const { return epilogue_residual_sums_; }
    /// Of those, the ones whose kernels took the earlier layer's batch norm
    /// sums in their epilogue (BnSumsOffer; tests).
    std::size_t epilogue_bn_sums() const { return epilogue_bn_sums_; }
    /// Of the ranged backwards in oneDNN's kernels, the ones that took the
    /// earlier layer's batch norm sums range by range (BnSumsOffer; tests).
    std::size_t range_bn_sums() const { return range_bn_sums_; }
    /// Backward passes whose batch norm sums the layer after this one took
    /// (BatchNorm2d::backward_sums_given; tests).
    std::size_t sums_given() const { return sums_given_; }

   private:
    // The float backward a range of images at a time, on a backend with
    // chunked_conv_bn (oneDNN): after the batch norm's pass of the sums, its
    // dx is written a range of images at a time into a buffer of that size,
    // and the convolution's backward (both passes) reads that range from
    // cache at once: the full-size dx is neither written to memory nor read
    // back twice. Ranges hold NetOptions::conv_bn_chunk_bytes of the larger
    // of the convolution's input and output. On a backend with
    // conv_bn_prologue whose own kernels take the geometry (direct_bn), each
    // range goes to those kernels with batch norm's map instead, and they
    // compute batch norm's dx an image at a time in their prologue (whole
    // batches too, as one range: the same kernels either way).
    //
    // Images per range for a batch of n, or 0: the whole batch at once (bf16
    // convolutions, no chunked_conv_bn, a batch norm that cannot, or a batch
    // that fits one range).
    std::size_t range_images(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (backend_traits<B>::chunked_conv_bn) {
        if (!chunk_bytes_ || !float_convs_ || !bn_.chunkable(rc)) return 0;  // chunkable: training only
        const std::size_t image = sizeof(T) * std::max(conv_.in_image(), conv_.out_image()),
                          per = std::max<std::size_t>(1, chunk_bytes_ / image);
        return per < n ? per : 0;
      } else {
        return (void)rc, (void)n, 0;
      }
    }
    // Whether the backward runs in the backend's own kernels with batch
    // norm's input gradient computed in their prologue (NetOptions::
    // direct_conv_bn, conv_bn_prologue): float convolutions, a batch norm
    // that can, a geometry the kernels take.
    bool direct_bn(RunContext<B, T>& rc) const {
      if constexpr (backend_traits<B>::conv_bn_prologue)
        return float_convs_ && bn_.chunkable(rc) && conv_.direct_bn();
      else
        return (void)rc, false;
    }
    // `given`: the layer after this one took batch norm's sums over dy
    // (sums_offer_), which then replace the pass of the sums.
    const Tensor<T>& backward_ranges(const Tensor<T>& dy, RunContext<B, T>& rc, std::size_t range,
                                     bool given) {
      detail::PartTimer conv_t(rc.profiler), bn_t(rc.profiler);
      auto sums = [&] {
        if (given) {
          bn_.backward_sums_given(dy, rc, sums_offer_.sums.data());
          ++sums_given_;
        } else {
          bn_.backward_sums(dy, rc);
        }
      };
      if constexpr (backend_traits<B>::conv_bn_prologue) {
        // In the own kernels: batch norm's pass of the sums (unless given),
        // then each range of images in one call, the batch norm's dx of each
        // image computed in the kernels' prologue (booked with the
        // convolution it is part of; ++direct_backwards_), and in their
        // epilogue, on each image of dx while it is in cache, the residual
        // block's sum (grad_sum) and the sums of the batch norm whose
        // output this layer read (BnSumsOffer), where there are such.
        if (direct_bn(rc)) {
          const auto map = bn_t.run([&] {
            sums();
            return bn_.grad_map(dy, rc);
          });
          ++direct_backwards_;
          conv_t.run([&] { conv_.backward_begin(rc); });  // dx sized: range_sum and input_offer look at it
          // The kernels' epilogue adds a formed `other` (a pooled one: after them, each_range).
          const bool sum = range_sum(rc) && rc.grad_sum.other;
          const auto& gs = rc.grad_sum;
          typename ops::Conv2d<B, T>::BnEpilogue e{};
          if (sum) {
            e.other = gs.other;
            e.mask_bits = gs.mask_bits;
            e.mask_relu = gs.mask_relu;
          }
          BnSumsOffer<T>* o = input_offer(rc, sum);
          if (o) {
            o->sums.assign(2 * o->c, 0.0);
            e.x = o->x;
            e.relu_ab = o->relu_ab;
            e.mean = o->mean;
            e.sums = o->sums.data();
          }
          const Tensor<T>& dx = each_range(rc, range, conv_t, bn_t, sum, [&](std::size_t i0, std::size_t i1) {
            conv_t.run([&] { conv_.backward_images_bn(map, rc, i0, i1, sum || o ? &e : nullptr, in_norm_); });
          });
          epilogue_residual_sums_ += sum;
          if (o) {
            o->given_for = dx.data();
            ++epilogue_bn_sums_;
          }
          return dx;
        }
      }
      const ConvGeom& g = conv_.geometry();
      bn_t.run(sums);
      ensure_shape(range_dy_, Shape{range, g.oc, g.oh, g.ow}, g.fmt);
      // The earlier batch norm's sums (BnSumsOffer) over each range of the
      // final dx, right after it (and the block's sum) is done, while it is
      // in cache: booked as that batch norm's backward.
      BnSumsOffer<T>* o = nullptr;
      detail::PartTimer sums_t(rc.profiler);
      if constexpr (backend_traits<B>::conv_bn_prologue) {
        conv_t.run([&] { conv_.backward_begin(rc); });  // dx sized: range_sum and input_offer look at it
        o = input_offer(rc, range_sum(rc));
        if (o) o->sums.assign(2 * o->c, 0.0);
      }
      const Tensor<T>& dx = each_range(
          rc, range, conv_t, bn_t, false,
          [&](std::size_t i0, std::size_t i1) {
            bn_t.run([&] { bn_.backward_images(dy, rc, i0, i1, range_dy_.data()); });
            conv_t.run([&] { conv_.backward_images(range_dy_.data(), rc, i0, i1); });
          },
          [&](std::size_t i0, std::size_t i1) {
            if constexpr (backend_traits<B>::conv_bn_prologue) {
              if (o) {
                const ConvGeom& cg = conv_.geometry();
                const ChannelGeom part = ChannelGeom::make(cg.fmt, Shape{i1 - i0, cg.ic, cg.ih, cg.iw});
                const std::size_t at = i0 * conv_.in_image();
                sums_t.run([&] {
                  sums_op_.add_backward_sums(*rc.device, part, o->x + at, conv_.input_gradient_from(rc, i0),
                                             o->relu_ab, o->mean, o->sums.data());
                });
              }
            } else {
              (void)i0, (void)i1;
            }
          });
      if (o) {
        if (o->name) sums_t.book(*o->name, "bn", true);
        o->given_for = dx.data();
        ++range_bn_sums_;
      }
      return dx;
    }
    // Whether this backward does the residual block's sum for the gradient
    // of its input (RunContext::grad_sum): an offer for this input, and dx.
    bool range_sum(RunContext<B, T>& rc) {
      const auto& gs = rc.grad_sum;
      return gs.of && gs.of == conv_.input_data() && (gs.other || gs.pooled) && gs.name &&
             conv_.input_gradient_from(rc, 0) && (!gs.mask_bits || conv_.in_image() % 16 == 0);
    }
    // The ranges of backward_ranges: backward(i0, i1) on each in order, with
    // a residual block's sum for the gradient of this layer's input
    // (RunContext::grad_sum, where range_sum) done on each range of dx in
    // place right after the convolution wrote it, while it is in cache,
    // unless `in_kernels` did it image by image already; the parts booked.
    // Then `after(i0, i1)` on each range, if given.
    template <class Backward, class After = std::nullptr_t>
    const Tensor<T>& each_range(RunContext<B, T>& rc, std::size_t range, detail::PartTimer& conv_t,
                                detail::PartTimer& bn_t, bool in_kernels, Backward&& backward,
                                After&& after_range = nullptr) {
      const ConvGeom& g = conv_.geometry();
      conv_t.run([&] { conv_.backward_begin(rc); });
      auto& gs = rc.grad_sum;
      const std::size_t image = conv_.in_image();
      const bool sum = range_sum(rc), after = sum && !in_kernels;
      detail::PartTimer add_t(rc.profiler);
      for (std::size_t i0 = 0; i0 < g.n; i0 += range) {
        const std::size_t i1 = std::min(g.n, i0 + range);
        backward(i0, i1);
        if (after) add_t.run([&] { sum_range(rc, i0, i1, image); });
        if constexpr (!std::is_same_v<std::decay_t<After>, std::nullptr_t>) after_range(i0, i1);
      }
      bn_t.book(bn_name_, "bn", true);
      conv_t.book(conv_name_, "conv", true);
      if (after) add_t.book(*gs.name, "add", true);
      if (sum) {
        gs.done = true;
        ++range_sums_;
      }
      ++ranged_backwards_;
      return conv_.backward_end();
    }
    // A training forward: the batch norm sums offered with the input
    // (RunContext::input_bn), kept for this layer's backward.
    void take_input_offer(RunContext<B, T>& rc, const Tensor<T>& x) {
      in_bn_ = nullptr;
      in_bn_shared_ = false;
      if constexpr (backend_traits<B>::conv_bn_prologue) {
        if (rc.input_bn && rc.input_bn->of == x.data() && rc.input_bn->c == conv_.geometry().ic) {
          in_bn_ = rc.input_bn;
          in_bn_shared_ = rc.input_bn_shared;
        }
      }
    }
    // In a ranged backward (`sum`: it does the residual block's sum): the
    // offer of the last forward's input, if this backward forms that
    // input's whole gradient: with dx; an input read by this
    // layer alone and no sum, or one the shortcut reads too and the block's
    // sum here; through a ReLU's mask exactly where the offer went through
    // one (the block's sum through the mask of the block that wrote it).
    BnSumsOffer<T>* input_offer(RunContext<B, T>& rc, bool sum) {
      BnSumsOffer<T>* o = std::exchange(in_bn_, nullptr);
      if (!o || !conv_.input_gradient_from(rc, 0) || o->of != conv_.input_data() || in_bn_shared_ != sum)
        return nullptr;
      const bool masked = sum && (rc.grad_sum.mask_bits || rc.grad_sum.mask_relu);
      return o->masked == masked ? o : nullptr;
    }
    // After a float training forward: offer the batch norm's sums to the
    // layer that reads the output (`y`, or the residual sum written into
    // `sum_out`, through a ReLU with `sum_relu`), where this layer's
    // backward can take them given (backward_ranges).
    void offer_sums(RunContext<B, T>& rc, const Tensor<T>& y, const T* sum_out, bool sum_relu) {
      sums_offer_.given_for = nullptr;
      if constexpr (backend_traits<B>::conv_bn_prologue) {
        const std::size_t n = conv_.geometry().n;
        if (!hand_overs_ || !float_convs_ || !(direct_bn(rc) || range_images(rc, n))) return;
        const auto in = bn_.sums_inputs(rc);
        if (!in.x) return;
        sums_offer_.of = sum_out ? static_cast<const void*>(sum_out) : static_cast<const void*>(y.data());
        sums_offer_.x = in.x;
        sums_offer_.relu_ab = in.relu_ab;
        sums_offer_.mean = in.mean;
        sums_offer_.c = std::size_t(Out);
        sums_offer_.masked = sum_out != nullptr && sum_relu;
        sums_offer_.name = &bn_name_;
        rc.bn_out = &sums_offer_;
      } else {
        (void)rc, (void)y, (void)sum_out, (void)sum_relu;
      }
    }
    // dx = dx + other (through the offer's ReLU mask) on images [i0, i1).
    void sum_range(RunContext<B, T>& rc, std::size_t i0, std::size_t i1, std::size_t image) {
      const auto& gs = rc.grad_sum;
      const std::size_t o = i0 * image, n = (i1 - i0) * image;
      T* d = conv_.input_gradient_from(rc, i0);
      if (gs.pooled) {  // a downsampling shortcut's gradient, formed here
        if constexpr (backend_traits<B>::pool_pad_in_place) {
          const ConvGeom& cg = conv_.geometry();
          const std::size_t s = gs.pooled_stride, per = (cg.ih / s) * (cg.iw / s) * gs.pooled_channels;
          add_.add_pooled(*rc.device, ChannelGeom::make(cg.fmt, Shape{i1 - i0, cg.ic, cg.ih, cg.iw}), d,
                          gs.pooled + i0 * per, gs.pooled_channels, s,
                          gs.mask_bits ? gs.mask_bits + o / 16 : nullptr,
                          gs.mask_relu ? gs.mask_relu + o : nullptr, d);
          return;
        } else {
          throw std::logic_error("layer '" + conv_name_ + "': a pooled sum on a backend without it");
        }
      }
      if (gs.mask_bits) {
        if constexpr (backend_traits<B>::sum_mask_bits)
          add_.add_masked_bits(*rc.device, n, d, gs.other + o, gs.mask_bits + o / 16, d);
        else
          throw std::logic_error("layer '" + conv_name_ +
                                 "': a sum through mask bits on a backend without them");
      } else if (gs.mask_relu) {
        add_.add_masked(*rc.device, n, d, gs.other + o, gs.mask_relu + o, d);
      } else {
        add_.add(*rc.device, n, d, gs.other + o, d, false);
      }
    }

    // The bf16 backward: dy float (`dy`) or the bits in dy_bits_ (dy null);
    // the batch norm's dx as bf16 into the convolution's dy buffer; the
    // convolution's dx float (returned) or as bits into `dx_bits`.
    const Tensor<T>& backward_io(const Tensor<T>* dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
      if constexpr (backend_traits<B>::bf16_gradients) {
        std::uint16_t* lp = conv_.bf16_dy(rc);
        ++bf16_handoffs_;
        bf16_dx_handoffs_ += dx_bits != nullptr;
        detail::profiled(rc.profiler, bn_name_, "bn", true, [&] {
          if (dy)
            bn_.backward_bf16(*dy, rc, lp);
          else
            bn_.backward_bf16_bits(dy_bits_.data(), rc, lp);
          return 0;
        });
        if (!dx_bits)
          return detail::profiled(rc.profiler, conv_name_, "conv", true,
                                  [&]() -> const Tensor<T>& { return conv_.backward_bf16_dy(rc); });
        detail::profiled(rc.profiler, conv_name_, "conv", true, [&] {
          conv_.backward_bf16_dy_bits(rc, dx_bits);
          return 0;
        });
        return no_dx_;  // dx went to dx_bits
      } else {
        (void)dy, (void)rc, (void)dx_bits;
        throw ConfigError("ConvBatchNorm: bf16 gradients on a backend without them");
      }
    }
    // y = conv(x, w * s) + (beta - mean * s) [+ ReLU] with the moving statistics.
    const Tensor<T>& infer(const Tensor<T>& x, RunContext<B, T>& rc) {
      ConvGeom g = conv_.geometry();
      const Shape s = detail::check_input(conv_name_, Shape{1, g.ic, g.ih, g.iw}, x, g.fmt);
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
      const auto ids = bn_.param_ids();
      const Parameters<T>& p = *rc.params;
      std::uint64_t stamp = p.version(conv_.weights_id());
      for (std::size_t id : ids) stamp += p.version(id);
      if (stamp == fold_stamp_) return;
      fold_stamp_ = stamp;
      stats_.fold(*rc.device, folded_w_.size() / std::size_t(Out), std::size_t(Out), bn_.epsilon(),
                  p.value(conv_.weights_id()), p.value(ids[0]), p.value(ids[1]), p.value(ids[2]),
                  p.value(ids[3]), folded_w_.data(), folded_b_.data());
    }

    node_t<ConvL, B, T> conv_;
    node_t<BnL, B, T> bn_;
    ops::Conv2d<B, T> op_;  // the folded inference convolution (with bias)
    ops::BnStats<B, T> stats_;
    ops::Relu<B, T> relu_;  // where the convolution does not fuse it
    std::vector<T> folded_w_, folded_b_;
    std::uint64_t fold_stamp_ = 0;  // versions summed at the last fold (0: none yet)
    std::size_t bf16_handoffs_ = 0, bf16_outputs_ = 0, bf16_dx_handoffs_ = 0;
    std::vector<std::uint16_t> dy_bits_;  // bf16_dy_target (host backends only)
    Tensor<T> no_dx_;                     // backward_io's return when dx went out as bits (empty)
    bool bf16_dx_ = true;                 // NetOptions::bf16_gradients
    bool expect_copy_ = false;            // require_bf16_input, for the next forward
    std::size_t chunk_bytes_ = 0;         // NetOptions::conv_bn_chunk_bytes
    bool float_convs_ = true;             // NetOptions::conv_precision is F32
    bool hand_overs_ = true;              // NetOptions::direct_conv_bn: the batch norm hand-overs
    std::size_t ranged_backwards_ = 0, range_sums_ = 0, direct_backwards_ = 0;
    std::size_t epilogue_residual_sums_ = 0, epilogue_bn_sums_ = 0, sums_given_ = 0, range_bn_sums_ = 0;
    // An earlier batch norm's sums over ranges of dx (backward_ranges).
    std::conditional_t<backend_traits<B>::conv_bn_prologue, ops::BatchNorm<B, T>, char> sums_op_{};
    std::vector<double> stats_buf_;  // the batch norm's statistics the convolution took (forward)
    // The deferred output (defer_output_once, take_normalised_input).
    bool defer_once_ = false;                              // as the earlier layer: for the next forward
    detail::DeferredOutput<T> norm_out_;                   // and its output's map after it
    bool expect_norm_ = false;                             // as the later layer: for the next forward
    const detail::DeferredOutput<T>* norm_src_ = nullptr;  // where the map comes from
    const ops::BnNormMap<T>* in_norm_ = nullptr;           // the last forward's input map (null: stored)
    std::size_t normalised_inputs_ = 0;
    BnSumsOffer<T> sums_offer_;        // this layer's batch norm sums, offered forward
    BnSumsOffer<T>* in_bn_ = nullptr;  // the offer of the last training forward's input
    bool in_bn_shared_ = false;        // and whether the shortcut of a block read that input too
    ops::Eltwise<B, T> add_;           // a residual block's sum in the ranges (sum_range)
    Tensor<T> range_dy_;               // backward_ranges: one range of the batch norm's dx
    Tensor<T> y_;
    std::string conv_name_, bn_name_;
  };
};

}  // namespace cifarnet
