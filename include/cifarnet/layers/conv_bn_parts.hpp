// cifarnet/layers/conv_bn_parts.hpp — the two layers a ConvBatchNorm is made
// of, and its training step where the backend has nothing of its own for it.
//
// detail::ConvBnParts: the convolution and the batch norm (named in the
// enclosing scope, conv<k> and bn<k>), the options that decide their
// hand-overs, and the counters tests read. detail::ConvBnTraining<B, ...>:
// the training step: here, for any backend, each part's own forward and
// backward, one after the other, and no fact the rules could fire on; a
// backend with kernels for the pair specializes it (oneDNN:
// layers/conv_bn_onednn.hpp). ConvBatchNorm (layers/conv_bn.hpp) holds one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cifarnet/layers/batch_norm.hpp"
#include "cifarnet/layers/conv2d.hpp"
#include "cifarnet/layers/layer.hpp"
#include "cifarnet/nn/profile.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet::detail {

/// A ConvBatchNorm's training output left unwritten for the ConvBatchNorm
/// after it (bn_output_into_next_conv), as its batch norm's map (`of`: the
/// output tensor's data, whose values are not written). With bf16
/// convolutions, `bits` (not null) is the batch norm's input as bf16 bits
/// and `scale`, `shift` its map (ops::Conv2d::forward_bf16_mapped); `map`
/// is then unused.
template <class T>
struct DeferredOutput {
  const void* of = nullptr;
  ops::BnNormMap<T> map;
  const std::uint16_t* bits = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
};

template <class B, class T, class ConvL, class BnL>
class ConvBnParts {
 public:
  /// Builds the convolution and the batch norm in `scope`; the options.
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
    const bool down = ctx.propagate_down;
    const Shape a = build_child<ConvL>(conv_, in, scope, ctx, &conv_name_);
    ctx.propagate_down = true;
    const Shape b = build_child<BnL>(bn_, a, scope, ctx, &bn_name_);
    ctx.propagate_down = down;
    bf16_dx_ = !ctx.options || ctx.options->bf16_gradients;
    chunk_bytes_ = ctx.options ? ctx.options->conv_bn_chunk_bytes : NetOptions{}.conv_bn_chunk_bytes;
    float_convs_ = !ctx.options || ctx.options->conv_precision == ConvPrecision::F32;
    hand_overs_ = !ctx.options || ctx.options->direct_conv_bn;
    bf16_output_on_ = ctx.rule_on("conv_bn_bf16_output");
    bf16_dx_conv_on_ = ctx.rule_on("bn_bf16_dx_to_conv");
    stats_epilogue_on_ = ctx.rule_on("bn_stats_in_conv_epilogue");
    dx_prologue_on_ = ctx.rule_on("bn_dx_in_conv_prologue");
    ranged_on_ = ctx.rule_on("conv_bn_ranged_backward");
    wgrad_in_bn_on_ = ctx.rule_on("bn_dx_into_conv_weight_gradient");
    return b;
  }
  node_t<ConvL, B, T>& conv() { return conv_; }
  node_t<BnL, B, T>& bn() { return bn_; }
  const node_t<ConvL, B, T>& conv() const { return conv_; }
  const node_t<BnL, B, T>& bn() const { return bn_; }
  const std::string& conv_name() const { return conv_name_; }
  const std::string& bn_name() const { return bn_name_; }

  // What the training step did (tests; ConvBatchNorm's accessors say what each counts).
  std::size_t bf16_handoffs_ = 0, bf16_outputs_ = 0, bf16_dx_handoffs_ = 0, normalised_inputs_ = 0;
  std::size_t ranged_backwards_ = 0, range_sums_ = 0, direct_backwards_ = 0;
  std::size_t epilogue_residual_sums_ = 0, epilogue_bn_sums_ = 0, sums_given_ = 0, range_bn_sums_ = 0;
  std::size_t dy_sums_taken_ = 0, wgrads_in_bn_ = 0;

 protected:
  // The batch norm's backward, then the convolution's, each booked under its name.
  const Tensor<T>& backward_parts(const Tensor<T>& dy, RunContext<B, T>& rc) {
    const Tensor<T>& da = profiled(rc.profiler, bn_name_, "bn", true,
                                   [&]() -> const Tensor<T>& { return bn_.backward(dy, rc); });
    return profiled(rc.profiler, conv_name_, "conv", true,
                    [&]() -> const Tensor<T>& { return conv_.backward(da, rc); });
  }
  static constexpr std::size_t kOut = std::size_t(ConvL::out_channels(0));
  node_t<ConvL, B, T> conv_;
  node_t<BnL, B, T> bn_;
  std::string conv_name_, bn_name_;
  bool bf16_dx_ = true;          // NetOptions::bf16_gradients
  std::size_t chunk_bytes_ = 0;  // NetOptions::conv_bn_chunk_bytes
  bool float_convs_ = true;      // NetOptions::conv_precision is F32
  bool hand_overs_ = true;       // NetOptions::direct_conv_bn: the batch norm hand-overs
  // The rules inside the pair that are on (NetOptions::rules_off): a
  // training step of a backend with kernels for the pair asks them before
  // taking the path each names.
  bool bf16_output_on_ = true, bf16_dx_conv_on_ = true, stats_epilogue_on_ = true, dx_prologue_on_ = true,
       ranged_on_ = true, wgrad_in_bn_on_ = true;
  /// Why a rule of the pair does not apply, when `on` says it is turned off.
  static std::string off_or(bool on, std::string why) {
    return on ? std::move(why) : std::string("turned off (NetOptions::rules_off)");
  }
};

/// The training step of a ConvBatchNorm on a backend without kernels for
/// the pair: the convolution's forward and backward, the batch norm's (which
/// takes the hand-overs of its own it has: plan::Links), one after the other.
template <class B, class T, class ConvL, class BnL, bool Relu>
class ConvBnTraining : public ConvBnParts<B, T, ConvL, BnL> {
  using Base = ConvBnParts<B, T, ConvL, BnL>;
  using Base::bn_, Base::bn_name_, Base::conv_, Base::conv_name_;

 public:
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
    const Tensor<T>& a = profiled(rc.profiler, conv_name_, "conv", false,
                                  [&]() -> const Tensor<T>& { return conv_.forward(x, rc, k.input_bf16); });
    return profiled(rc.profiler, bn_name_, "bn", false,
                    [&]() -> const Tensor<T>& { return bn_.forward(a, rc, k); });
  }
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc, plan::GradSum<T>*) {
    return this->backward_parts(dy, rc);
  }
  /// The facts the rules read: no pattern of the pair on this backend.
  void record_facts(plan::Node& cn, plan::Node& bnode, RunContext<B, T>& rc, std::size_t n) {
    namespace f = plan::facts;
    const plan::Fact none = plan::Fact::no("no conv + batch norm kernels on this backend");
    for (const char* k :
         {f::kBf16Output, f::kBf16Backward, f::kStatsEpilogue, f::kDirectBackward, f::kRangedBackward,
          f::kNormalisedInput, f::kBf16InputOnly, f::kBf16Dx, f::kWgradInBn})
      cn.facts[k] = none;
    cn.facts[f::kNeedsDx] = conv_.needs_input_gradient(rc)
                                ? plan::Fact::yes()
                                : plan::Fact::no("nothing before it needs a gradient");
    for (const char* k :
         {f::kBf16Sum, f::kOffersSums, f::kDeferOutput, f::kBf16Dy, f::kBf16OutputAlone, f::kDySums})
      bnode.facts[k] = none;
    bnode.facts[f::kSumMask] =
        bn_.writes_sum_mask(n) ? plan::Fact::yes() : plan::Fact::no("no mask bits here");
    bnode.facts[f::kBf16Copy] =
        bn_.writes_bf16_copy(rc) ? plan::Fact::yes() : plan::Fact::no("no bf16 copies on this backend");
    bnode.facts[f::kTakesSum] =
        bn_.takes_sum(rc) ? plan::Fact::yes()
                          : plan::Fact::no(Relu ? "it has its own ReLU" : "no fused sum on this backend");
  }
  /// No hooks: no rule between it and its neighbours fires here.
  void attach(plan::LayerRun<B, T>&) {}
};

}  // namespace cifarnet::detail
