// cifarnet/layers/conv_bn_onednn.hpp — ConvBatchNorm's training on the
// oneDNN backend: the fusions inside the layer and the hand-overs the
// training executor makes with it (nn/plan_rules.hpp).
//
// Inside the layer: with bf16 convolutions the convolution writes its output
// as bf16 for the batch norm and the batch norm its dx as bf16 for the
// convolution's backward (conv_bn_bf16_output, bn_bf16_dx_to_conv); with
// float convolutions the batch norm's statistics come from the forward
// kernel's epilogue (bn_stats_in_conv_epilogue) and the backward runs a
// range of images at a time (conv_bn_ranged_backward) or in the own
// kernels with the batch norm's dx in their prologue (bn_dx_in_conv_prologue).
// With its neighbours, from the call's plan::Links and the hooks it
// attaches (plan::PairHooks): its input as a bf16 copy, its output skipped
// or left as a map, its dy and dx as bf16 bits, a residual block's sum in
// its backward ranges, an earlier batch norm's backward sums.
//
// The layer-independent part (the two layers, their names, the options) is
// detail::ConvBnParts (layers/conv_bn_parts.hpp); ConvBatchNorm
// (layers/conv_bn.hpp) runs inference and the plan and calls this.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/layers/conv_bn_parts.hpp"

namespace cifarnet::detail {

template <class T, class ConvL, class BnL, bool Relu>
class ConvBnTraining<backend::OneDnn, T, ConvL, BnL, Relu>
    : public ConvBnParts<backend::OneDnn, T, ConvL, BnL> {
  using B = backend::OneDnn;
  using Base = ConvBnParts<B, T, ConvL, BnL>;
  using Base::bf16_dx_, Base::chunk_bytes_, Base::conv_, Base::conv_name_, Base::float_convs_,
      Base::hand_overs_;
  using Base::bf16_dx_conv_on_, Base::bf16_output_on_, Base::dx_prologue_on_, Base::ranged_on_,
      Base::stats_epilogue_on_;
  using Base::bn_, Base::bn_name_, Base::kOut, Base::wgrad_in_bn_on_;

 public:
  // The counters (ConvBnParts), public as there.
  using Base::bf16_dx_handoffs_, Base::bf16_handoffs_, Base::bf16_outputs_, Base::direct_backwards_;
  using Base::epilogue_bn_sums_, Base::epilogue_residual_sums_, Base::normalised_inputs_;
  using Base::range_bn_sums_, Base::range_sums_, Base::ranged_backwards_, Base::sums_given_;

  /// The training forward of x with the call's hand-overs (plan::Links).
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
    // bf16 convolutions: the convolution writes its output as bf16 and the
    // batch norm reads those bits, forward and backward (half the bytes of
    // a float output; the rounding bf16 training has anyway).
    if (std::exchange(expect_copy_, false) && !k.input_bf16)
      throw ConfigError("layer '" + conv_name_ +
                        "': its input's float values were skipped for a bf16 copy that is not there");
    take_input_offer(k, x);
    // An input the layer before left unwritten (take_normalised_input):
    // its map, for this forward and the backward after it.
    in_norm_ = nullptr;
    const DeferredOutput<T>* in_bits = nullptr;  // the same in bf16: the batch norm's input bits and map
    if (std::exchange(expect_norm_, false)) {
      if (!norm_src_ || norm_src_->of != x.data())
        throw ConfigError("layer '" + conv_name_ +
                          "': its input was to be normalised in its kernels, but the layer before it did "
                          "not leave it so");
      if (norm_src_->bits)
        in_bits = norm_src_;
      else
        in_norm_ = &norm_src_->map;
      ++normalised_inputs_;
    }
    const std::uint16_t* lp = nullptr;
    const Tensor<T>* with_stats = nullptr;  // the convolution took the batch norm's statistics
    const Tensor<T>& a = profiled(rc.profiler, conv_name_, "conv", false, [&]() -> const Tensor<T>& {
      if (bf16_pair(rc) && in_bits) {
        const backend::onednn::amx::InputMap m{in_bits->scale, in_bits->shift, true};
        lp = conv_.forward_bf16_mapped(x, rc, in_bits->bits, m, nullptr);
      } else if (bf16_pair(rc)) {
        lp = conv_.forward_bf16(x, rc, k.input_bf16);
      }
      if (lp) return x;
      if (in_bits)
        throw std::logic_error("layer '" + conv_name_ + "': a bf16 input map its convolution does not take");
      if (float_convs_ && bn_.chunkable(rc) && stats_epilogue_on_) {
        stats_buf_.resize(2 * kOut);
        with_stats = conv_.forward_stats(x, rc, stats_buf_.data(), in_norm_);
      }
      if (in_norm_ && !with_stats)
        throw std::logic_error("layer '" + conv_name_ + "': a normalised input its kernels do not take");
      return with_stats ? *with_stats : conv_.forward(x, rc, k.input_bf16);
    });
    if (with_stats) bn_.give_statistics(a, stats_buf_.data());
    if (lp) {
      ++bf16_outputs_;
      if (std::exchange(defer_once_, false)) {  // the next layer computes it from lp (deferred_output)
        if constexpr (Relu) {
          const Tensor<T>& y = profiled(rc.profiler, bn_name_, "bn", false, [&]() -> const Tensor<T>& {
            return bn_.forward_bf16_deferred(lp, conv_.geometry().out_shape(), rc);
          });
          const auto [scale, shift] = bn_.bf16_map();
          norm_out_ = DeferredOutput<T>{y.data(), {}, lp, scale, shift};
          return y;
        }
      }
      norm_out_.of = nullptr;
      return profiled(rc.profiler, bn_name_, "bn", false, [&]() -> const Tensor<T>& {
        return bn_.forward_bf16(lp, conv_.geometry().out_shape(), rc, k);
      });
    }
    if (std::exchange(defer_once_, false)) {  // the next layer normalises it (deferred_output)
      if constexpr (Relu) {
        const Tensor<T>& y = profiled(rc.profiler, bn_name_, "bn", false,
                                      [&]() -> const Tensor<T>& { return bn_.forward_deferred(a, rc); });
        norm_out_ = DeferredOutput<T>{y.data(), bn_.norm_map(), nullptr, nullptr, nullptr};
        offer_sums(k, rc, y, nullptr, false);
        return y;
      }
    }
    norm_out_.of = nullptr;
    const Tensor<T>& y = profiled(rc.profiler, bn_name_, "bn", false,
                                  [&]() -> const Tensor<T>& { return bn_.forward(a, rc, k); });
    const bool summed = k.sum && k.sum->done;
    offer_sums(k, rc, y, summed ? k.sum->out : nullptr, summed && k.sum->relu);
    return y;
  }

  /// The backward; `gs`: a residual block's backward sum to do on dx
  /// (residual_sum_in_conv_backward), where its ranges or kernels can.
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc, plan::GradSum<T>* gs) {
    if (in_norm_ && !direct_bn(rc))
      throw std::logic_error(
          "layer '" + conv_name_ +
          "': a backward outside the own kernels after a forward whose input was not stored");
    // Batch norm's sums given by the layer after this one (plan::BnSums):
    // for this dy only, once.
    const bool given = sums_offer_.given_for != nullptr && sums_offer_.given_for == dy.data() &&
                       sums_offer_.sums.size() == 2 * kOut;
    sums_offer_.given_for = nullptr;
    // bf16 convolutions: the batch norm writes its dx as bf16 straight
    // into the buffer the convolution's backward reads (no float dx, no
    // conversion pass; the same rounding).
    if (bf16_backward(rc)) return backward_io(&dy, rc, nullptr);
    const std::size_t n = conv_.geometry().n;
    if (wgrad_in_bn(rc, n)) return backward_into_weight_gradient(dy.data(), rc);
    if (const std::size_t per = range_images(rc, n)) return backward_ranges(dy, rc, per, given, gs);
    if (direct_bn(rc))
      return backward_ranges(dy, rc, n, given, gs);  // one range: the own kernels all the same
    return this->backward_parts(dy, rc);
  }

  /// The facts the rules read on its two nodes, at the plan's batch `n`.
  void record_facts(plan::Node& cn, plan::Node& bnode, RunContext<B, T>& rc, std::size_t n) {
    namespace f = plan::facts;
    auto fact = [](bool ok, std::string why) {
      return ok ? plan::Fact::yes() : plan::Fact::no(std::move(why));
    };
    const std::string bf16_why = float_convs_     ? "fp32 convolutions"
                                 : !rc.training() ? "inference"
                                                  : "synchronized batch norm";
    const std::string chunk_why = !float_convs_    ? "bf16 convolutions"
                                  : !rc.training() ? "inference"
                                                   : "synchronized batch norm";
    const bool chunk = float_convs_ && bn_.chunkable(rc);
    const bool bf16 = bn_.backward_bf16_ready(rc) && !float_convs_;
    cn.facts[f::kBf16Output] =
        fact(bf16_pair(rc) && conv_.has_bf16_output(rc),
             this->off_or(bf16_output_on_, bf16 ? "no bf16-output kernel for this convolution" : bf16_why));
    cn.facts[f::kBf16Backward] =
        fact(bf16_backward(rc), !bf16_pair(rc)      ? "needs conv_bn_bf16_output, which does not apply"
                                : !bf16_dx_conv_on_ ? "turned off (NetOptions::rules_off)"
                                                    : "no bf16 backward kernel for this convolution");
    const char* wgrad_why = wgrad_in_bn_why(rc, n);
    cn.facts[f::kWgradInBn] = fact(wgrad_why == nullptr, wgrad_why ? wgrad_why : "");
    const std::string fwd_why = conv_.direct_why_not(rc, true), bwd_why = conv_.direct_why_not(rc, false);
    cn.facts[f::kStatsEpilogue] = fact(chunk && stats_epilogue_on_ && conv_.direct_forward_next(rc),
                                       this->off_or(stats_epilogue_on_, chunk ? fwd_why : chunk_why));
    cn.facts[f::kDirectBackward] =
        fact(direct_bn(rc), this->off_or(dx_prologue_on_, chunk ? bwd_why : chunk_why));
    cn.facts[f::kRangedBackward] =
        fact(range_images(rc, n) != 0, !ranged_on_     ? "turned off (NetOptions::rules_off)"
                                       : !chunk        ? chunk_why
                                       : !chunk_bytes_ ? "NetOptions::conv_bn_chunk_bytes is 0"
                                                       : "the batch fits one range of NetOptions::conv_bn_"
                                                         "chunk_bytes");
    cn.facts[f::kNormalisedInput] = fact(takes_normalised_input(rc, n),
                                         float_convs_     ? (chunk ? fwd_why : chunk_why)
                                         : !bf16_pair(rc) ? "needs conv_bn_bf16_output, which does not apply"
                                                          : conv_.mapped_why_not(rc, n));
    cn.facts[f::kBf16InputOnly] =
        fact(reads_only_bf16_input(rc, n), bf16 ? "its kernels read the float input" : bf16_why);
    cn.facts[f::kBf16Dx] =
        fact(writes_bf16_dx(rc), !bf16       ? bf16_why
                                 : !bf16_dx_ ? "NetOptions::bf16_gradients is off"
                                             : "no bf16 dx kernel for this convolution, or no dx needed");
    cn.facts[f::kNeedsDx] = fact(conv_.needs_input_gradient(rc), "nothing before it needs a gradient");
    bnode.facts[f::kSumMask] = fact(bn_.writes_sum_mask(n), "its channel count or layout has no mask bits");
    bnode.facts[f::kBf16Sum] = fact(sums_bf16_only(rc, n), bf16 ? "its channel count or layout" : bf16_why);
    bnode.facts[f::kBf16Copy] = fact(bn_.writes_bf16_copy(rc), bf16_why);
    bnode.facts[f::kOffersSums] =
        fact(hand_overs_ && chunk && (direct_bn(rc) || range_images(rc, n) != 0),
             !hand_overs_ ? "NetOptions::direct_conv_bn is off"
             : !chunk     ? chunk_why
                          : "its backward runs neither in ranges nor in the own kernels");
    bnode.facts[f::kDeferOutput] =
        fact(can_defer_output(rc), !Relu          ? "no fused ReLU (the map is batch norm + ReLU's)"
                                   : float_convs_ ? chunk_why
                                                  : "needs conv_bn_bf16_output, which does not apply");
    const bool dy_bits = bn_.backward_bf16_bits_ready(rc);
    bnode.facts[f::kBf16Dy] =
        fact(takes_bf16_dy(rc), !bf16     ? bf16_why
                                : dy_bits ? "needs conv_bn_bf16_output, which does not apply"
                                          : "its channel count or layout has no bf16 dy");
    bnode.facts[f::kDySums] = fact(takes_bf16_dy(rc), bnode.facts[f::kBf16Dy].why);
    bnode.facts[f::kBf16DySum] =
        fact(takes_bf16_dy(rc) && bf16_dx_,
             !takes_bf16_dy(rc) ? bnode.facts[f::kBf16Dy].why : "NetOptions::bf16_gradients is off");
    const bool alone = bf16 && bn_.writes_bf16_alone(rc, n);
    bnode.facts[f::kBf16OutputAlone] =
        fact(alone, bf16 ? "the batch norm's channel count or layout has no bf16-only output" : bf16_why);
    bnode.facts[f::kTakesSum] =
        fact(bn_.takes_sum(rc), Relu ? "it has its own ReLU" : "inference or synchronized batch norm");
  }

  /// The hooks the training executor's rules call (plan::PairHooks).
  void attach(plan::LayerRun<B, T>& r) {
    r.pair.dy_bits = [this](RunContext<B, T>&) { return bf16_dy_target(); };
    r.pair.sum_into_dy = [this](RunContext<B, T>& rc, const T* af, const std::uint16_t* ab, const T* bf,
                                const std::uint16_t* bb,
                                const std::uint16_t* mask) { sum_into_dy(rc, af, ab, bf, bb, mask); };
    r.pair.skip_float_output = [this] { skip_float_output_once(); };
    r.pair.require_bf16_input = [this] { require_bf16_input(); };
    r.pair.defer_output = [this]() -> const void* {
      defer_output_once();
      return deferred_output();
    };
    r.pair.take_normalised_input = [this](const void* src) {
      take_normalised_input(static_cast<const DeferredOutput<T>*>(src));
    };
    r.pair.backward_bits = [this](const Tensor<T>* dy, RunContext<B, T>& c,
                                  std::uint16_t* dx_bits) -> const Tensor<T>& {
      return backward_bits_io(dy, c, dx_bits);
    };
  }

 private:
  // The float output skipped between two ConvBatchNorm
  // (bn_bf16_output_alone): where the later one reads its input only
  // through the earlier one's bf16 copy (reads_only_bf16_input), the
  // earlier one's batch norm writes that copy alone
  // (skip_float_output_once): 4 of the 10 bytes per element its forward
  // moves. The later layer checks the copy is there (it throws, not reads
  // a stale float tensor, if it is not).
  /// Whether this layer's next training forward of a batch of `n` reads
  /// its input only through the previous layer's bf16 copy.
  bool reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
    return bf16_pair(rc) && conv_.reads_only_bf16_input(rc, n);
  }
  /// Whether a training forward of a batch of `n` that takes a residual
  /// block's sum can read the shortcut as bf16 and write the sum as bf16
  /// alone (BatchNorm2d::sums_bf16_only).
  bool sums_bf16_only(RunContext<B, T>& rc, std::size_t n) {
    return bf16_pair(rc) && bn_.sums_bf16_only(rc, n);
  }
  // The float output deferred between two ConvBatchNorm
  // (bn_output_into_next_conv), in the own kernels: the
  // earlier layer's batch norm (with its ReLU) takes its statistics (from
  // its convolution's epilogue) and leaves its output unwritten
  // (defer_output_once); the later layer's own kernels compute each
  // image of it from its map (ops::BnNormMap) in their prologue, in the
  // forward and again for the weight gradient in the backward
  // (take_normalised_input). The output is neither written to memory nor
  // read back twice; the same float operations as the normalising pass.
  // With bf16 convolutions (an AMX CPU): the batch norm takes the
  // statistics of its bf16 input and leaves its output unwritten
  // (BatchNorm2d::forward_bf16_deferred); the later layer's convolution
  // runs the own AMX forward, which computes its input from those bits and
  // the map while it copies them (ops::Conv2d::forward_bf16_mapped), and
  // its AMX weight gradient applies the map again.
  /// Whether this layer's next training forward can leave its output
  /// unwritten for the next layer: a fused ReLU, and float convolutions
  /// with a batch norm that can, or a bf16 pair (conv_bn_bf16_output).
  bool can_defer_output(RunContext<B, T>& rc) const {
    if constexpr (Relu)
      return (float_convs_ && bn_.chunkable(rc)) || (!float_convs_ && rc.training() && bf16_pair(rc));
    else
      return (void)rc, false;
  }
  /// Let the next training forward leave its output unwritten.
  void defer_output_once() { defer_once_ = true; }
  /// Where the next layer finds this layer's output as a map after its
  /// forward (filled by that forward).
  const DeferredOutput<T>* deferred_output() const { return &norm_out_; }
  /// Whether this layer's next training forward can take its input as
  /// the previous layer's map: its own kernels run this convolution.
  /// With bf16 convolutions: the own AMX forward and weight gradient take
  /// the convolution at a batch of `n` (ops::Conv2d::forward_bf16_mapped).
  bool takes_normalised_input(RunContext<B, T>& rc, std::size_t n) {
    if (!float_convs_) return rc.training() && bf16_pair(rc) && conv_.mapped_why_not(rc, n).empty();
    return bn_.chunkable(rc) && stats_epilogue_on_ && conv_.direct_forward_next(rc) && direct_bn(rc);
  }
  /// The next training forward's input is `src`'s (defer_output_once was
  /// asked of that layer); the forward throws if it is not that input.
  void take_normalised_input(const DeferredOutput<T>* src) {
    norm_src_ = src;
    expect_norm_ = true;
  }

  /// Let the next training forward write its output only as its bf16 copy.
  void skip_float_output_once() { bn_.skip_float_output_once(); }
  /// Before a training forward whose input's producer may have skipped its
  /// float output: throw unless the bf16 copy of that input is offered.
  void require_bf16_input() { expect_copy_ = true; }

  // The input gradient handed back as bf16 between two ConvBatchNorm
  // (bf16_dx_between_conv_bn): the later layer's
  // convolution writes its dx as bf16 bits (ops::Conv2d::writes_bf16_dx)
  // into a buffer of the earlier layer, whose batch norm reads them as its
  // dy (BatchNorm2d::backward_bf16_bits): 2 bytes an element written and
  // read twice instead of 4. dy is then rounded to bf16 once more than
  // the float hand-over rounds it (bf16 gradients, as bf16 autocast has
  // them; tests/backend/test_bf16.cpp).
  /// Whether this layer's next backward can write its dx as bf16 bits
  /// (backward_bits_io).
  bool writes_bf16_dx(RunContext<B, T>& rc) {
    return bf16_dx_ && bf16_backward(rc) && conv_.writes_bf16_dx(rc);
  }
  /// Whether this layer's next backward can take its dy as bf16 bits
  /// (bf16_dy_target, backward_bits_io).
  /// With a float convolution backward after a bf16 pair's forward (ResNet's
  /// stem: no bf16 weight gradient for 3 input channels), the batch norm
  /// reads the bits and writes a float dx (BatchNorm2d::backward_from_bits).
  bool takes_bf16_dy(RunContext<B, T>& rc) {
    return bn_.backward_bf16_bits_ready(rc) && (bf16_backward(rc) || (bf16_pair(rc) && !float_convs_));
  }
  /// Where the layer after this one writes the bits of this layer's dy.
  std::uint16_t* bf16_dy_target() {
    const ConvGeom& g = conv_.geometry();
    dy_bits_.resize(g.n * g.oc * g.oh * g.ow);
    return dy_bits_.data();
  }
  /// Its dy into bf16_dy_target() as a + b through the mask bits `mask`
  /// (null: none), each part float or bits, with the batch norm's backward
  /// sums in that pass (plan::PairHooks::sum_into_dy, bn_sums_in_dy_sum):
  /// its next backward must use them.
  void sum_into_dy(RunContext<B, T>& rc, const T* af, const std::uint16_t* ab, const T* bf,
                   const std::uint16_t* bb, const std::uint16_t* mask) {
    if (!takes_bf16_dy(rc) || (!af && !ab) || (!bf && !bb))
      throw std::logic_error("layer '" + bn_name_ + "': a dy sum with its sums it cannot take");
    std::uint16_t* dy = bf16_dy_target();
    auto with_a = [&](const auto* a) {
      if (bb)
        bn_.sum_into_dy(rc, a, bb, mask, dy);
      else
        bn_.sum_into_dy(rc, a, bf, mask, dy);
    };
    if (ab)
      with_a(ab);
    else
      with_a(af);
    dy_sums_expected_ = bn_.dy_sums_used() + 1;
  }
  /// backward() with dy float or from bf16_dy_target() (dy null), dx as
  /// float or as bits into `dx_bits` (then the returned tensor is empty):
  /// the training executor's entry (plan::PairHooks).
  const Tensor<T>& backward_bits_io(const Tensor<T>* dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
    if (dy && !dx_bits) return backward(*dy, rc, nullptr);
    if (dx_bits && !writes_bf16_dx(rc))
      throw std::logic_error("layer '" + conv_name_ + "': asked for its dx as bf16 bits it cannot write");
    if (!dy && !takes_bf16_dy(rc))
      throw std::logic_error("layer '" + conv_name_ + "': given its dy as bf16 bits it cannot read");
    return backward_io(dy, rc, dx_bits);
  }
  // The float backward a range of images at a time: after the batch
  // norm's pass of the sums, its
  // dx is written a range of images at a time into a buffer of that size,
  // and the convolution's backward (both passes) reads that range from
  // cache at once: the full-size dx is neither written to memory nor read
  // back twice. Ranges hold NetOptions::conv_bn_chunk_bytes of the larger
  // of the convolution's input and output. Where the own kernels take
  // the geometry (direct_bn), each
  // range goes to those kernels with batch norm's map instead, and they
  // compute batch norm's dx an image at a time in their prologue (whole
  // batches too, as one range: the same kernels either way).
  //
  // Images per range for a batch of n, or 0: the whole batch at once (bf16
  // convolutions, a batch norm that cannot, or a batch
  // that fits one range).
  std::size_t range_images(RunContext<B, T>& rc, std::size_t n) {
    if (!ranged_on_ || !chunk_bytes_ || !float_convs_ || !bn_.chunkable(rc)) return 0;  // training only
    const std::size_t image = sizeof(T) * std::max(conv_.in_image(), conv_.out_image()),
                      per = std::max<std::size_t>(1, chunk_bytes_ / image);
    return per < n ? per : 0;
  }
  // Whether the backward runs in the backend's own kernels with batch
  // norm's input gradient computed in their prologue (NetOptions::
  // direct_conv_bn): float convolutions, a batch norm
  // that can, a geometry the kernels take.
  bool direct_bn(RunContext<B, T>& rc) const {
    return dx_prologue_on_ && float_convs_ && bn_.chunkable(rc) && conv_.direct_bn();
  }
  // Whether the pair runs in bf16 (conv_bn_bf16_output): the convolution
  // writes its output as bf16 for the batch norm, which reads those bits.
  bool bf16_pair(RunContext<B, T>& rc) const { return bf16_output_on_ && bn_.backward_bf16_ready(rc); }
  // Whether the batch norm's dx goes to the convolution's backward as bf16
  // (bn_bf16_dx_to_conv), after a bf16 pair's forward.
  bool bf16_backward(RunContext<B, T>& rc) {
    return bf16_pair(rc) && bf16_dx_conv_on_ && conv_.bf16_dy(rc) != nullptr;
  }
  // `given`: the layer after this one took batch norm's sums over dy
  // (sums_offer_), which then replace the pass of the sums.
  const Tensor<T>& backward_ranges(const Tensor<T>& dy, RunContext<B, T>& rc, std::size_t range, bool given,
                                   plan::GradSum<T>* gs) {
    PartTimer conv_t(rc.profiler), bn_t(rc.profiler);
    auto sums = [&] {
      if (given) {
        bn_.backward_sums_given(dy, rc, sums_offer_.sums.data());
        ++sums_given_;
      } else {
        bn_.backward_sums(dy, rc);
      }
    };
    // In the own kernels: batch norm's pass of the sums (unless given),
    // then each range of images in one call, the batch norm's dx of each
    // image computed in the kernels' prologue (booked with the
    // convolution it is part of; ++direct_backwards_), and in their
    // epilogue, on each image of dx while it is in cache, the residual
    // block's sum (grad_sum) and the sums of the batch norm whose
    // output this layer read (plan::BnSums), where there are such.
    if (direct_bn(rc)) {
      const auto map = bn_t.run([&] {
        sums();
        return bn_.grad_map(dy, rc);
      });
      ++direct_backwards_;
      conv_t.run([&] { conv_.backward_begin(rc); });  // dx sized: range_sum and input_offer look at it
      // The kernels' epilogue adds a formed `other` (a pooled one: after them, each_range).
      const bool sum = range_sum(rc, gs) && gs->other;
      typename ops::Conv2d<B, T>::BnEpilogue e{};
      if (sum) {
        e.other = gs->other;
        e.mask_bits = gs->mask_bits;
        e.mask_relu = gs->mask_relu;
      }
      plan::BnSums<T>* o = input_offer(rc, sum, gs);
      if (o) {
        o->sums.assign(2 * o->c, 0.0);
        e.x = o->x;
        e.relu_ab = o->relu_ab;
        e.mean = o->mean;
        e.sums = o->sums.data();
      }
      const Tensor<T>& dx = each_range(
          rc, gs, range, conv_t, bn_t, sum,
          [&](std::size_t i0, std::size_t i1) {
            conv_t.run([&] { conv_.backward_images_bn(map, rc, i0, i1, sum || o ? &e : nullptr, in_norm_); });
          },
          [](std::size_t, std::size_t) {});
      epilogue_residual_sums_ += sum;
      if (o) {
        o->given_for = dx.data();
        ++epilogue_bn_sums_;
      }
      return dx;
    }
    const ConvGeom& g = conv_.geometry();
    bn_t.run(sums);
    ensure_shape(range_dy_, Shape{range, g.oc, g.oh, g.ow}, g.fmt);
    // The earlier batch norm's sums (plan::BnSums) over each range of the
    // final dx, right after it (and the block's sum) is done, while it is
    // in cache: booked as that batch norm's backward.
    plan::BnSums<T>* o = nullptr;
    PartTimer sums_t(rc.profiler);
    conv_t.run([&] { conv_.backward_begin(rc); });  // dx sized: range_sum and input_offer look at it
    o = input_offer(rc, range_sum(rc, gs), gs);
    if (o) o->sums.assign(2 * o->c, 0.0);
    const Tensor<T>& dx = each_range(
        rc, gs, range, conv_t, bn_t, false,
        [&](std::size_t i0, std::size_t i1) {
          bn_t.run([&] { bn_.backward_images(dy, rc, i0, i1, range_dy_.data()); });
          conv_t.run([&] { conv_.backward_images(range_dy_.data(), rc, i0, i1); });
        },
        [&](std::size_t i0, std::size_t i1) {
          if (o) {
            const ConvGeom& cg = conv_.geometry();
            const ChannelGeom part = ChannelGeom::make(cg.fmt, Shape{i1 - i0, cg.ic, cg.ih, cg.iw});
            const std::size_t at = i0 * conv_.in_image();
            sums_t.run([&] {
              sums_op_.add_backward_sums(*rc.device, part, o->x + at, conv_.input_gradient_from(rc, i0),
                                         o->relu_ab, o->mean, o->sums.data());
            });
          }
        });
    if (o) {
      if (o->name) sums_t.book(*o->name, "bn", true);
      o->given_for = dx.data();
      ++range_bn_sums_;
    }
    return dx;
  }
  // Whether this backward does the residual block's sum `gs` for the
  // gradient of its input: one for this input, and dx.
  bool range_sum(RunContext<B, T>& rc, const plan::GradSum<T>* gs) {
    return gs && gs->of == conv_.input_data() && (gs->other || gs->pooled) && gs->name &&
           conv_.input_gradient_from(rc, 0) && (!gs->mask_bits || conv_.in_image() % 16 == 0);
  }
  // The ranges of backward_ranges: backward(i0, i1) on each in order, with
  // a residual block's sum for the gradient of this layer's input
  // (`gs`, where range_sum) done on each range of dx in
  // place right after the convolution wrote it, while it is in cache,
  // unless `in_kernels` did it image by image already; the parts booked.
  // Then `after_range(i0, i1)` on each range.
  template <class Backward, class After>
  const Tensor<T>& each_range(RunContext<B, T>& rc, plan::GradSum<T>* gs, std::size_t range,
                              PartTimer& conv_t, PartTimer& bn_t, bool in_kernels, Backward&& backward,
                              After&& after_range) {
    const ConvGeom& g = conv_.geometry();
    conv_t.run([&] { conv_.backward_begin(rc); });
    const std::size_t image = conv_.in_image();
    const bool sum = range_sum(rc, gs), after = sum && !in_kernels;
    PartTimer add_t(rc.profiler);
    for (std::size_t i0 = 0; i0 < g.n; i0 += range) {
      const std::size_t i1 = std::min(g.n, i0 + range);
      backward(i0, i1);
      if (after) add_t.run([&] { sum_range(rc, *gs, i0, i1, image); });
      after_range(i0, i1);
    }
    bn_t.book(bn_name_, "bn", true);
    conv_t.book(conv_name_, "conv", true);
    if (after) add_t.book(*gs->name, "add", true);
    if (sum) {
      gs->done = true;
      ++range_sums_;
    }
    ++ranged_backwards_;
    return conv_.backward_end();
  }
  // A training forward: the batch norm sums handed over with the input
  // (k.input_sums), kept for this layer's backward.
  void take_input_offer(const plan::Links<T>& k, const Tensor<T>& x) {
    in_bn_ = nullptr;
    in_bn_shared_ = false;
    if (k.input_sums && k.input_sums->of == x.data() && k.input_sums->c == conv_.geometry().ic) {
      in_bn_ = k.input_sums;
      in_bn_shared_ = k.input_sums_shared;
    }
  }
  // In a ranged backward (`sum`: it does the residual block's sum): the
  // offer of the last forward's input, if this backward forms that
  // input's whole gradient: with dx; an input read by this
  // layer alone and no sum, or one the shortcut reads too and the block's
  // sum here; through a ReLU's mask exactly where the offer went through
  // one (the block's sum through the mask of the block that wrote it).
  plan::BnSums<T>* input_offer(RunContext<B, T>& rc, bool sum, const plan::GradSum<T>* gs) {
    plan::BnSums<T>* o = std::exchange(in_bn_, nullptr);
    if (!o || !conv_.input_gradient_from(rc, 0) || o->of != conv_.input_data() || in_bn_shared_ != sum)
      return nullptr;
    const bool masked = sum && (gs->mask_bits || gs->mask_relu);
    return o->masked == masked ? o : nullptr;
  }
  // After a float training forward: offer the batch norm's sums to the
  // layer that reads the output (`y`, or the residual sum written into
  // `sum_out`, through a ReLU with `sum_relu`), where this layer's
  // backward can take them given (backward_ranges).
  void offer_sums(plan::Links<T>& k, RunContext<B, T>& rc, const Tensor<T>& y, const T* sum_out,
                  bool sum_relu) {
    sums_offer_.given_for = nullptr;
    const std::size_t n = conv_.geometry().n;
    if (!hand_overs_ || !float_convs_ || !(direct_bn(rc) || range_images(rc, n))) return;
    const auto in = bn_.sums_inputs(rc);
    if (!in.x) return;
    sums_offer_.of = sum_out ? static_cast<const void*>(sum_out) : static_cast<const void*>(y.data());
    sums_offer_.x = in.x;
    sums_offer_.relu_ab = in.relu_ab;
    sums_offer_.mean = in.mean;
    sums_offer_.c = kOut;
    sums_offer_.masked = sum_out != nullptr && sum_relu;
    sums_offer_.name = &bn_name_;
    k.sums_out = &sums_offer_;
  }
  // dx = dx + other (through the offer's ReLU mask) on images [i0, i1).
  void sum_range(RunContext<B, T>& rc, const plan::GradSum<T>& gs, std::size_t i0, std::size_t i1,
                 std::size_t image) {
    const std::size_t o = i0 * image, n = (i1 - i0) * image;
    T* d = conv_.input_gradient_from(rc, i0);
    if (gs.pooled) {  // a downsampling shortcut's gradient, formed here
      const ConvGeom& cg = conv_.geometry();
      const std::size_t s = gs.pooled_stride, per = (cg.ih / s) * (cg.iw / s) * gs.pooled_channels;
      add_.add_pooled(*rc.device, ChannelGeom::make(cg.fmt, Shape{i1 - i0, cg.ic, cg.ih, cg.iw}), d,
                      gs.pooled + i0 * per, gs.pooled_channels, s,
                      gs.mask_bits ? gs.mask_bits + o / 16 : nullptr,
                      gs.mask_relu ? gs.mask_relu + o : nullptr, d);
      return;
    }
    if (gs.mask_bits) {
      add_.add_masked_bits(*rc.device, n, d, gs.other + o, gs.mask_bits + o / 16, d);
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
    if (!bf16_backward(rc)) {  // dy as bits (takes_bf16_dy), the convolution's backward float
      if (dy || dx_bits)
        throw std::logic_error("layer '" + conv_name_ + "': a bf16 hand-over its float backward cannot make");
      if (wgrad_in_bn(rc, conv_.geometry().n)) {
        const Tensor<T>& none = backward_into_weight_gradient(dy_bits_.data(), rc);
        check_dy_sums();
        return none;
      }
      const Tensor<T>& da = profiled(rc.profiler, bn_name_, "bn", true, [&]() -> const Tensor<T>& {
        return bn_.backward_from_bits(dy_bits_.data(), rc);
      });
      check_dy_sums();
      return profiled(rc.profiler, conv_name_, "conv", true,
                      [&]() -> const Tensor<T>& { return conv_.backward(da, rc); });
    }
    std::uint16_t* lp = conv_.bf16_dy(rc);
    ++bf16_handoffs_;
    bf16_dx_handoffs_ += dx_bits != nullptr;
    profiled(rc.profiler, bn_name_, "bn", true, [&] {
      if (dy)
        bn_.backward_bf16(*dy, rc, lp);
      else
        bn_.backward_bf16_bits(dy_bits_.data(), rc, lp);
      return 0;
    });
    check_dy_sums();
    if (!dx_bits)
      return profiled(rc.profiler, conv_name_, "conv", true,
                      [&]() -> const Tensor<T>& { return conv_.backward_bf16_dy(rc); });
    profiled(rc.profiler, conv_name_, "conv", true, [&] {
      conv_.backward_bf16_dy_bits(rc, dx_bits);
      return 0;
    });
    return no_dx_;  // dx went to dx_bits
  }

  // bn_dx_into_conv_weight_gradient: a convolution that needs no dx and
  // whose weight gradient is float (its input channels: ResNet's stem's 3)
  // gets it from its batch norm's pass of dx, which is not stored.
  // (Asked in every backward: the reason is a literal, no string is built.)
  bool wgrad_in_bn(RunContext<B, T>& rc, std::size_t n) { return wgrad_in_bn_why(rc, n) == nullptr; }
  const char* wgrad_in_bn_why(RunContext<B, T>& rc, std::size_t n) {
    const ConvGeom& g = conv_.geometry();
    if (!wgrad_in_bn_on_) return "turned off (NetOptions::rules_off)";
    if (!rc.training()) return "inference";
    if (float_convs_) return "fp32 convolutions (the convolution's own weight gradient)";
    if (!bf16_pair(rc)) return "needs conv_bn_bf16_output, which does not apply";
    if (bf16_backward(rc)) return "the convolution's backward runs in bf16 (bn_bf16_dx_to_conv)";
    if (conv_.needs_input_gradient(rc)) return "the convolution computes a dx";
    if (!conv_.weight_gradient_target(rc)) return "no weight gradient wanted";
    if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.pt != 1 || g.pl != 1 || g.pb != 1 || g.pr != 1)
      return "not a 3x3 stride-1 convolution with padding 1";
    if (!bn_.weight_gradient_in_backward(n, g.ic))
      return "the batch norm's kernels: NHWC, 16 channels, 1 to 4 input channels, a width up to 512, AVX-512";
    return nullptr;
  }
  // Its backward then: the batch norm's, with the convolution's weight
  // gradient (booked with the batch norm); no dx (none is needed).
  template <class DY>
  const Tensor<T>& backward_into_weight_gradient(const DY* dy, RunContext<B, T>& rc) {
    profiled(rc.profiler, bn_name_, "bn", true, [&] {
      bn_.backward_into_weight_gradient(dy, rc, conv_.input_data(), conv_.geometry().ic,
                                        conv_.weight_gradient_target(rc));
      return 0;
    });
    ++this->wgrads_in_bn_;
    return no_dx_;
  }
  // After a backward: the sums sum_into_dy took (if it did) were used.
  void check_dy_sums() {
    const std::size_t want = std::exchange(dy_sums_expected_, 0);
    if (want == 0) return;
    if (bn_.dy_sums_used() != want)
      throw std::logic_error("layer '" + bn_name_ + "': the sums taken with its dy were not used");
    ++this->dy_sums_taken_;
  }

  HostVector<std::uint16_t> dy_bits_;  // bf16_dy_target
  std::size_t dy_sums_expected_ = 0;   // sum_into_dy: the batch norm's count of sums used, after the backward
  Tensor<T> no_dx_;                    // backward_io's return when dx went out as bits (empty)
  bool expect_copy_ = false;           // require_bf16_input, for the next forward
  ops::BatchNorm<B, T> sums_op_;       // an earlier batch norm's sums over ranges of dx (backward_ranges)
  std::vector<double> stats_buf_;      // the batch norm's statistics the convolution took (forward)
  // The deferred output (defer_output, take_normalised_input).
  bool defer_once_ = false;                      // as the earlier layer: for the next forward
  DeferredOutput<T> norm_out_;                   // and its output's map after it
  bool expect_norm_ = false;                     // as the later layer: for the next forward
  const DeferredOutput<T>* norm_src_ = nullptr;  // where the map comes from
  const ops::BnNormMap<T>* in_norm_ = nullptr;   // the last forward's input map (null: stored)
  plan::BnSums<T> sums_offer_;                   // this layer's batch norm sums, left for its reader
  plan::BnSums<T>* in_bn_ = nullptr;             // the sums handed over with the last forward's input
  bool in_bn_shared_ = false;                    // and whether a block's shortcut read that input too
  ops::Eltwise<B, T> add_;                       // a residual block's sum in the ranges (sum_range)
  Tensor<T> range_dy_;                           // backward_ranges: one range of the batch norm's dx
};

}  // namespace cifarnet::detail
