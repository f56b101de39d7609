// cifarnet/layers/batch_norm.hpp — batch normalization with TF semantics.
//
// BatchNorm2d<C>: per-channel scale `gamma` (init 1) and offset `beta` (init
// 0), trainable; `moving_mean` (0) and `moving_variance` (1) are
// non-trainable state. Training normalizes with the batch mean and biased
// variance (over n·h·w) and updates moving = decay·moving + (1−decay)·batch,
// feeding the moving variance the Bessel-corrected batch variance (× m/(m−1))
// as TF's fused batch norm does. Inference uses the moving statistics.
// Decay and epsilon come from NetOptions (0.997 and 1e-5 by default).
// BatchNorm2d<C, FusedRelu> is batch norm followed by ReLU in one layer (same
// parameter names, kind "bn"): backends that fuse it (oneDNN's
// fuse_norm_relu) skip the separate ReLU passes; others apply the ReLU and
// its mask here. BatchNorm2d<C, FusedGelu> is the same with the exact GELU
// (backend_traits<B>::fused_gelu; elsewhere, and with synchronized BN, the
// layer keeps bn(x) and runs ops::Gelu on it).
// With RunContext::cross_replica set, training uses the global batch's
// statistics over all data-parallel replicas (ops::SyncBatchNorm).
// Every pass is a backend op: ops::BatchNorm, ops::Relu (the ReLU and its
// mask where the backend does not fuse them: backend_traits<B>::fused_relu),
// ops::BnStats (moving statistics), ops::SyncBatchNorm.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/options.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

namespace detail {
/// BatchNorm2d's stand-in for ops::Gelu when the layer has no GELU (never called).
struct NoGeluOp {
  template <class... A>
  void forward(A&&...) {}
  template <class... A>
  void backward(A&&...) {}
};
}  // namespace detail

/// Batch normalization over channels; FusedRelu applies max(., 0) after it,
/// FusedGelu the exact GELU.
template <int C = 0, auto ActOpt = NoRelu>
struct BatchNorm2d : LayerBase {
  static_assert(detail::ReluOption<ActOpt>::valid || detail::GeluOption<ActOpt>::valid,
                "cifarnet: BatchNorm2d<C, Act>: Act must be FusedRelu, FusedGelu or NoRelu (not a bool).");
  static constexpr bool Relu = detail::ReluOption<ActOpt>::on;
  static constexpr bool Gelu = detail::GeluOption<ActOpt>::on;
  static_assert(C >= 0, "cifarnet: BatchNorm2d<C>: C must be >= 0 (0 = inferred from the input).");
  static constexpr const char* kind = "bn";
  static constexpr int in_channels = C == 0 ? -1 : C;
  static plan::Attrs plan_attrs() {
    plan::Attrs a;
    a.relu = Relu;
    a.gelu = Gelu;
    return a;
  }

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;
    static constexpr bool kFused = Relu && backend_traits<B>::fused_relu;
    static constexpr bool kFusedGelu = Gelu && backend_traits<B>::fused_gelu;
    // The op takes bf16 x and writes bf16 dx (forward_bf16, backward_bf16).
    static constexpr bool kBf16 = backend_traits<B>::bf16_gradients && !Gelu && (!Relu || kFused);
    // The op adds a residual branch in its normalising pass (takes_sum).
    static constexpr bool kFusedSum = backend_traits<B>::fused_sum && !Gelu && !Relu;
    // The float backward a range of images at a time (backward_sums, backward_images).
    static constexpr bool kChunked = backend_traits<B>::chunked_conv_bn && !Gelu && (!Relu || kFused);

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      geom_ = ChannelGeom::make(fmt_, Shape{1, in.c, in.h, in.w});  // the layout queries before a forward
      if (C != 0 && in.c != std::size_t(C))
        throw ShapeError("layer '" + name_ + "' (BatchNorm2d) expects " + std::to_string(C) +
                         " channels but the input shape is " + in.str());
      decay_ = ctx.options ? ctx.options->bn_decay : 0.997;
      eps_ = ctx.options ? ctx.options->bn_epsilon : 1e-5;
      gamma_ = ctx.add_param(scope, "gamma", {in.c}, Initializer::ones());
      beta_ = ctx.add_param(scope, "beta", {in.c}, Initializer::zeros());
      mmean_ = ctx.add_param(scope, "moving_mean", {in.c}, Initializer::zeros(), false);
      mvar_ = ctx.add_param(scope, "moving_variance", {in.c}, Initializer::ones(), false);
      bf16_copies_ = kBf16 && ctx.options && ctx.options->conv_precision == ConvPrecision::BF16;
      fuse_act_ = (kFused || kFusedGelu) && ctx.rule_on("bn_activation");
      return in;
    }

    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      plan::Links<T> none;
      return forward(x, rc, none);
    }
    /// forward() with the hand-overs of a training plan (plan::Links): a
    /// residual sum to write in the same pass (k.sum), and where it writes
    /// a bf16 copy of what it wrote, that copy left in k.
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      start(s);
      const Parameters<T>& cp = *rc.params;  // reads (a non-const access counts as a write)
      if (rc.training()) {
        x_ = &x;
        x_bf16_ = nullptr;
        double m = double(s.n * s.h * s.w);
        // A GELU the op does not fuse runs here on bn(x), kept in z_ for its backward.
        T* bn_out = y_.data();
        if (Gelu && !act_in_op(rc)) {
          ensure_shape(z_, s, fmt_);
          bn_out = z_.data();
        }
        if (rc.cross_replica) {  // synchronized BN: global statistics, then the inference op
          m = sync_.statistics(*rc.device, geom_, x.data(), *rc.cross_replica, mean_.data(), var_.data());
          if constexpr (Gelu) {
            op_.forward_infer(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_),
                              mean_.data(), var_.data(), bn_out);
            gelu_.forward(*rc.device, z_.size(), z_.data(), y_.data());
          } else {
            infer(rc, x, mean_.data(), var_.data());
          }
        } else if (!train_sum(rc, x.data(), k)) {  // else a residual block's sum, in this pass
          if (!act_fused()) {  // the activation as a pass of its own (bn_activation does not apply)
            op_.forward_train(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_), bn_out,
                              mean_.data(), var_.data());
            if (Relu) relu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
            if (Gelu) gelu_.forward(*rc.device, z_.size(), z_.data(), y_.data());
          } else if constexpr (kBf16) {  // and a bf16 copy of y for a bf16 convolution after it
            train_with_copy(rc, x.data(), k);
          } else if constexpr (kFused) {
            op_.forward_train(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_), y_.data(),
                              mean_.data(), var_.data(), true);
          } else if constexpr (kFusedGelu) {
            op_.forward_train(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_), y_.data(),
                              mean_.data(), var_.data(), ops::BnActivation::Gelu);
          } else {
            op_.forward_train(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_), y_.data(),
                              mean_.data(), var_.data());
          }
        }
        update_moving(rc, m);
      } else {
        infer(rc, x, cp.value(mmean_), cp.value(mvar_));
      }
      skip_float_once_ = false;  // for this forward only, whichever path it took
      return y_;
    }

    /// The training forward of x given as bfloat16 bits of shape `s` (the
    /// bf16 output of the convolution in front of it, ConvBatchNorm: the
    /// buffer must hold them until backward, which reads them again). Needs
    /// backward_bf16_ready(rc).
    const Tensor<T>& forward_bf16(const std::uint16_t* x, const Shape& s, RunContext<B, T>& rc,
                                  plan::Links<T>& k) {
      if constexpr (kBf16) {
        if (s.c != in_.c || s.h != in_.h || s.w != in_.w)
          throw ShapeError("layer '" + name_ + "' (BatchNorm2d) expects " + in_.str() + " but got " +
                           s.str());
        start(s);
        x_ = nullptr;
        x_bf16_ = x;
        if (!train_sum(rc, x, k)) train_with_copy(rc, x, k);
        skip_float_once_ = false;
        update_moving(rc, double(s.n * s.h * s.w));
      } else {
        (void)x, (void)s, (void)rc, (void)k;
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): forward_bf16 is not available here");
      }
      return y_;
    }

    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const T* gamma = std::as_const(*rc.params).value(gamma_);
      ensure_shape(dx_, geom_.shape(), fmt_);
      auto [dg, db] = grad_targets(rc);
      // The ReLU's mask (dy where y > 0) or the GELU's derivative: fused into
      // the op, or applied here.
      const T* g = dy.data();
      if (Relu && !act_in_op(rc)) {
        ensure_shape(masked_, geom_.shape(), fmt_);
        relu_.backward(*rc.device, masked_.size(), y_.data(), dy.data(), masked_.data());
        g = masked_.data();
      }
      if (Gelu && !act_in_op(rc)) {
        ensure_shape(masked_, geom_.shape(), fmt_);
        gelu_.backward(*rc.device, masked_.size(), z_.data(), dy.data(), masked_.data());
        g = masked_.data();
      }
      if constexpr (kBf16) {
        if (x_bf16_) {  // forward_bf16's x
          op_.backward(*rc.device, geom_, eps_, x_bf16_, g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                       db, Relu);
          return dx_;
        }
      }
      if (rc.cross_replica)  // synchronized BN (ops::SyncBatchNorm)
        sync_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(),
                       *rc.cross_replica, dx_.data(), dg, db);
      else if (!act_fused())  // the activation's backward done above
        op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                     db);
      else if constexpr (kFused)
        op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                     db, true);
      else if constexpr (kFusedGelu)
        op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                     db, ops::BnActivation::Gelu);
      else
        op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                     db);
      return dx_;
    }

    // The float backward a range of images at a time (ConvBatchNorm on a
    // backend with chunked_conv_bn): dx produced range by range for the
    // convolution's backward.
    /// Whether backward_sums/backward_images can run: no GELU, the ReLU (if
    /// any) fused, no synchronized batch norm.
    bool chunkable(const RunContext<B, T>& rc) const {
      if constexpr (kChunked)
        return rc.training() && !rc.cross_replica && act_fused();
      else
        return (void)rc, false;
    }
    /// backward(dy, rc) in parts after a float training forward: the pass of
    /// the sums (the parameters' gradients), then backward_images for ranges
    /// of images, each writing their dx into `dx_images` (their size).
    void backward_sums(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if constexpr (kChunked) {
        if (!x_) throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_sums after a bf16 forward");
        auto [dg, db] = grad_targets(rc);
        op_.backward_sums(*rc.device, geom_, eps_, x_->data(), dy.data(),
                          std::as_const(*rc.params).value(gamma_), mean_.data(), var_.data(), dg, db, Relu);
      } else {
        (void)dy, (void)rc;
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_sums is not available here");
      }
    }
    /// backward_sums with the sums taken by the layer that read this one's
    /// output, over this dy (plan::BnSums, in that layer's kernels'
    /// epilogue; 2C values), on a backend with conv_bn_prologue.
    void backward_sums_given(const Tensor<T>& dy, RunContext<B, T>& rc, const double* sums) {
      if constexpr (kChunked && backend_traits<B>::conv_bn_prologue) {
        if (!x_)
          throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_sums_given after a bf16 forward");
        auto [dg, db] = grad_targets(rc);
        op_.backward_sums_given(*rc.device, geom_, eps_, x_->data(), dy.data(),
                                std::as_const(*rc.params).value(gamma_), mean_.data(), var_.data(), dg, db,
                                Relu, sums);
      } else {
        (void)dy, (void)rc, (void)sums;
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_sums_given is not available here");
      }
    }
    /// The batch statistics of x (2C: the means, then the biased
    /// variances, in double) taken by the convolution that wrote x
    /// (ConvBatchNorm, ops::Conv2d::forward_stats): the next training
    /// forward of this x uses them instead of its own pass over x (a
    /// backend with conv_bn_prologue; elsewhere nothing happens). `stats`
    /// must hold them until then.
    void give_statistics(const Tensor<T>& x, const double* stats) {
      if constexpr (backend_traits<B>::conv_bn_prologue)
        op_.give_statistics(x.data(), in_.c, stats);
      else
        (void)x, (void)stats;
    }
    /// A training forward with the fused ReLU whose output is not written
    /// (ConvBatchNorm's deferred output; a backend with conv_bn_prologue,
    /// chunkable(rc)): the statistics (those given, or a pass over x), the
    /// moving averages and the coefficients, which norm_map() hands to the
    /// convolution that computes each image of the output itself. Returns
    /// the output tensor, sized, its values not written. The backward is
    /// forward()'s.
    const Tensor<T>& forward_deferred(const Tensor<T>& x, RunContext<B, T>& rc) {
      if constexpr (kChunked && Relu && backend_traits<B>::conv_bn_prologue) {
        if (!chunkable(rc))
          throw ConfigError("layer '" + name_ + "' (BatchNorm2d): forward_deferred outside a training step");
        const Shape s = detail::check_input(name_, in_, x, fmt_);
        start(s);
        x_ = &x;
        x_bf16_ = nullptr;
        const Parameters<T>& cp = *rc.params;
        op_.forward_train_deferred(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_),
                                   mean_.data(), var_.data());
        update_moving(rc, double(s.n * s.h * s.w));
        skip_float_once_ = false;
        ++deferred_forwards_;
        return y_;
      } else {
        (void)x, (void)rc;
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): forward_deferred is not available here");
      }
    }
    /// After forward_deferred: its output as a map (ops::BnNormMap over the
    /// whole batch), valid until the next forward.
    ops::BnNormMap<T> norm_map() const {
      if constexpr (kChunked && Relu && backend_traits<B>::conv_bn_prologue) {
        if (!x_) throw ConfigError("layer '" + name_ + "' (BatchNorm2d): norm_map before forward_deferred");
        return op_.norm_map(geom_, x_->data());
      } else {
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): norm_map is not available here");
      }
    }
    /// Training forwards that left their output unwritten (tests).
    std::size_t deferred_forwards() const { return deferred_forwards_; }
    /// Training forwards that used statistics given (tests).
    std::size_t statistics_given() const {
      if constexpr (backend_traits<B>::conv_bn_prologue)
        return op_.statistics_given();
      else
        return 0;
    }
    /// What a later layer needs to take this layer's backward sums
    /// (plan::BnSums) after a float training forward: its x, the fused
    /// ReLU's a, b (null without) and the batch mean; all null where
    /// backward_sums_given cannot follow (not chunkable, a bf16 forward, a
    /// backend without conv_bn_prologue).
    struct SumsInputs {
      const T* x = nullptr;
      const T* relu_ab = nullptr;
      const T* mean = nullptr;
    };
    SumsInputs sums_inputs(const RunContext<B, T>& rc) const {
      if constexpr (kChunked && backend_traits<B>::conv_bn_prologue) {
        if (!chunkable(rc) || !x_) return {};
        const T* ab = Relu ? op_.relu_coefficients(geom_) : nullptr;
        if (Relu && !ab) return {};
        return {x_->data(), ab, mean_.data()};
      } else {
        return (void)rc, SumsInputs{};
      }
    }
    void backward_images(const Tensor<T>& dy, RunContext<B, T>& rc, std::size_t i0, std::size_t i1,
                         T* dx_images) {
      if constexpr (kChunked) {
        if (!x_)
          throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_images after a bf16 forward");
        op_.backward_images(*rc.device, geom_, x_->data(), dy.data(), mean_.data(), i0, i1, dx_images, Relu);
      } else {
        (void)dy, (void)rc, (void)i0, (void)i1, (void)dx_images;
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_images is not available here");
      }
    }

    /// After backward_sums of `dy`: backward_images' map (ops::BatchNorm::
    /// grad_map), for a convolution that applies it to an image at a time in
    /// its own kernels (ConvBatchNorm; backend_traits<B>::conv_bn_prologue).
    auto grad_map(const Tensor<T>& dy, RunContext<B, T>& rc) const {
      if (!x_) throw ConfigError("layer '" + name_ + "' (BatchNorm2d): grad_map after a bf16 forward");
      return op_.grad_map(*rc.device, geom_, x_->data(), dy.data(), mean_.data(), Relu);
    }

    /// Whether backward_bf16 can run now: a backend with bf16_gradients, no
    /// synchronized BN, no GELU, the ReLU (if any) fused into the op.
    bool backward_bf16_ready(const RunContext<B, T>& rc) const {
      if constexpr (kBf16)
        return !rc.cross_replica && act_fused();
      else
        return (void)rc, false;
    }
    /// backward() with dx written as bfloat16 bits into `dx_bf16` (the
    /// buffer of the bf16 convolution in front of it, Conv2d's bf16_dy)
    /// instead of dx_; needs backward_bf16_ready(rc).
    void backward_bf16(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bf16) {
      run_backward_bf16(dy.data(), rc, dx_bf16);
    }
    /// Whether backward_bf16 can also take dy as bfloat16 bits now
    /// (backward_bf16_bits): backward_bf16_ready and the op's NHWC channel
    /// counts (ops::BatchNorm::writes_bf16_only).
    bool backward_bf16_bits_ready(const RunContext<B, T>& rc) const {
      if constexpr (kBf16)
        return backward_bf16_ready(rc) && decltype(op_)::writes_bf16_only(geom_);
      else
        return (void)rc, false;
    }
    /// backward_bf16 with dy given as bfloat16 bits (the bf16 input gradient
    /// the convolution after this layer wrote; ConvBatchNorm).
    void backward_bf16_bits(const std::uint16_t* dy, RunContext<B, T>& rc, std::uint16_t* dx_bf16) {
      run_backward_bf16(dy, rc, dx_bf16);
    }

    /// Whether a training forward of a batch of `n` that takes a residual
    /// block's sum (plan::SumInPass) can read the shortcut as bf16 bits
    /// and write the sum as its bf16 copy and ReLU mask alone (the residual
    /// stream in bf16, bf16_residual_stream): bf16 copies on, and the op's
    /// NHWC channel counts.
    bool sums_bf16_only(const RunContext<B, T>& rc, std::size_t n) const {
      if constexpr (kFusedSum && kBf16 && backend_traits<B>::sum_mask_bits) {
        const ChannelGeom g = ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w});
        return bf16_copies_ && !rc.cross_replica && decltype(op_)::bf16_copies_useful() &&
               decltype(op_)::writes_bf16_only(g) && decltype(op_)::writes_sum_mask(g);
      } else {
        return (void)rc, (void)n, false;
      }
    }
    /// Whether a training forward writes a bf16 copy of its output (or of
    /// the residual sum it writes) beside it, for a bf16 convolution that
    /// reads it (bf16_copy_to_readers): bf16 convolutions, a CPU
    /// where they run in bf16, no synchronized batch norm.
    bool writes_bf16_copy(const RunContext<B, T>& rc) const {
      if constexpr (kBf16)
        return rc.training() && bf16_copies_ && act_fused() && !rc.cross_replica &&
               decltype(op_)::bf16_copies_useful();
      else
        return (void)rc, false;
    }
    /// One node in a step plan (nn/plan.hpp), with the facts whether its
    /// training forward writes a bf16 copy of its output, can add a
    /// residual block's sum in its pass and write that sum's mask as bits.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const int t = b.node(name_, kind, {in}, in_, plan_attrs());
      b.producer(t).facts[plan::facts::kBf16Copy] =
          writes_bf16_copy(rc)
              ? plan::Fact::yes()
              : plan::Fact::no(kBf16 ? "no bf16 convolutions here, or synchronized batch norm"
                                     : "no bf16 copies with this activation on this backend");
      b.producer(t).facts[plan::facts::kTakesSum] =
          takes_sum(rc) ? plan::Fact::yes()
                        : plan::Fact::no(Relu || Gelu ? "it has its own activation"
                                         : kFusedSum  ? "inference or synchronized batch norm"
                                                      : "no fused sum on this backend");
      b.producer(t).facts[plan::facts::kSumMask] =
          writes_sum_mask(b.key().batch) ? plan::Fact::yes()
                                         : plan::Fact::no("its channel count or layout has no mask bits");
      return t;
    }
    /// Whether a training forward of a batch of `n` can write its output as
    /// its bf16 copy alone (skip_float_output_once; step plans): bf16
    /// copies, and the op's NHWC channel counts.
    bool writes_bf16_alone(const RunContext<B, T>& rc, std::size_t n) const {
      if constexpr (kBf16) {
        const ChannelGeom g = ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w});
        return bf16_copies_ && act_fused() && !rc.cross_replica && decltype(op_)::bf16_copies_useful() &&
               decltype(op_)::writes_bf16_only(g);
      } else {
        return (void)rc, (void)n, false;
      }
    }
    /// Whether a training forward of a batch of `n` that adds a residual
    /// block's sum can also write the sum's ReLU mask as bits (step plans).
    bool writes_sum_mask(std::size_t n) const {
      if constexpr (kFusedSum && backend_traits<B>::sum_mask_bits)
        return decltype(op_)::writes_sum_mask(ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w}));
      else
        return (void)n, false;
    }
    /// Whether a training forward can add a residual block's sum in its
    /// pass (train_sum): no activation of its own, a backend with fused_sum,
    /// no synchronized batch norm (step plans).
    bool takes_sum(const RunContext<B, T>& rc) const {
      if constexpr (kFusedSum)
        return rc.training() && !rc.cross_replica;
      else
        return (void)rc, false;
    }
    /// The next training forward may write its output only as the bf16 copy
    /// when it writes one, leaving y_ stale: for a next layer that reads
    /// nothing else (bn_bf16_output_alone, bf16_residual_stream). Reset by
    /// that forward.
    void skip_float_output_once() { skip_float_once_ = true; }
    /// Training forwards that wrote only the bf16 copy (tests).
    std::size_t float_outputs_skipped() const { return float_outputs_skipped_; }

    /// Arena ids of gamma, beta, moving_mean, moving_variance (for folding).
    std::array<std::size_t, 4> param_ids() const { return {gamma_, beta_, mmean_, mvar_}; }
    double epsilon() const { return eps_; }

   private:
    // backward_bf16 with dy float or bfloat16 bits.
    template <class DY>
    void run_backward_bf16(const DY* dy, RunContext<B, T>& rc, std::uint16_t* dx_bf16) {
      if constexpr (kBf16) {
        auto [dg, db] = grad_targets(rc);
        const T* gamma = std::as_const(*rc.params).value(gamma_);
        if (x_bf16_)
          op_.backward_bf16(*rc.device, geom_, eps_, x_bf16_, dy, gamma, mean_.data(), var_.data(), dx_bf16,
                            dg, db, Relu);
        else
          op_.backward_bf16(*rc.device, geom_, eps_, x_->data(), dy, gamma, mean_.data(), var_.data(),
                            dx_bf16, dg, db, Relu);
      } else {
        (void)dy, (void)rc, (void)dx_bf16;
        throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_bf16 is not available here");
      }
    }
    // The training forward writing the residual sum it was given (k.sum:
    // residual_sum_in_bn) instead of y_, when it can: no activation of its
    // own, no synchronized BN, a backend with fused_sum, the sum sized as
    // the output. False: nothing done.
    template <class X>
    bool train_sum(RunContext<B, T>& rc, const X* x, plan::Links<T>& k) {
      plan::SumInPass<T>* sum = k.sum;
      if constexpr (kFusedSum) {
        if (!sum || rc.cross_replica || sum->n != geom_.size()) return false;
        const Parameters<T>& cp = *rc.params;
        std::uint16_t* yb = copy_target(rc);
        if constexpr (backend_traits<B>::sum_mask_bits) {
          // The sum's ReLU mask as bits too, where asked and the op can.
          std::uint16_t* mask =
              sum->mask && sum->relu && decltype(op_)::writes_sum_mask(geom_) ? sum->mask : nullptr;
          // The shortcut as bf16 bits (a residual stream in bf16), and the
          // sum as its bf16 copy and mask alone where asked.
          if (sum->shortcut_bits && !yb)
            throw ConfigError("layer '" + name_ + "': a bf16 shortcut needs bf16 copies (bf16 convolutions)");
          const bool skip = sum->skip_float && yb && mask && decltype(op_)::writes_bf16_only(geom_);
          float* out = skip ? nullptr : sum->out;
          if (sum->shortcut_bits)
            op_.forward_train_sum(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_),
                                  sum->shortcut_bits, sum->relu, out, mean_.data(), var_.data(), yb, mask);
          else
            op_.forward_train_sum(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_),
                                  sum->shortcut, sum->relu, out, mean_.data(), var_.data(), yb, mask);
          sum->mask_done = mask != nullptr;
          sum->float_skipped = skip;
        } else {
          op_.forward_train_sum(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_), sum->shortcut,
                                sum->relu, sum->out, mean_.data(), var_.data(), yb);
        }
        sum->done = true;
        publish_copy(k, sum->out, yb);
        return true;
      } else {
        (void)rc, (void)x, (void)sum;
        return false;
      }
    }
    // The training forward of x (float, or bfloat16 bits) into y_, with the
    // fused ReLU (if any) and a bf16 copy of y_ for a bf16 convolution after it.
    // After skip_float_output_once(), only the bf16 copy when the op can
    // write it alone: y_ then keeps stale values (its size is right).
    template <class X>
    void train_with_copy(RunContext<B, T>& rc, const X* x, plan::Links<T>& k) {
      const Parameters<T>& cp = *rc.params;
      std::uint16_t* yb = copy_target(rc);
      const bool skip =
          std::exchange(skip_float_once_, false) && yb && decltype(op_)::writes_bf16_only(geom_);
      float_outputs_skipped_ += skip;
      op_.forward_train(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_),
                        skip ? nullptr : y_.data(), mean_.data(), var_.data(), Relu, yb);
      publish_copy(k, y_.data(), yb);
    }
    // Where the training forward also writes its output as bf16, or nullptr:
    // with bf16 convolutions (NetOptions::conv_precision) on a CPU where they
    // run in bf16, for the convolutions that may read the output next
    // (bf16_copy_to_readers). The buffer lives until the next forward.
    std::uint16_t* copy_target(const RunContext<B, T>& rc) {
      if constexpr (kBf16) {
        if (!bf16_copies_ || !act_fused() || rc.cross_replica || !decltype(op_)::bf16_copies_useful())
          return nullptr;
        y_bits_.resize(geom_.size());
        return y_bits_.data();
      } else {
        (void)rc;
        return nullptr;
      }
    }
    // Leaves the copy (if any) of the tensor at `out` for its readers.
    static void publish_copy(plan::Links<T>& k, const T* out, const std::uint16_t* bits) {
      k.copy_of = bits ? out : nullptr;
      k.copy = bits;
    }
    // The training or inference forward's geometry, output and statistics buffers.
    void start(const Shape& s) {
      geom_ = ChannelGeom::make(fmt_, s);
      ensure_shape(y_, s, fmt_);
      if (mean_.size() != s.c) {  // the batch's statistics, where the layer's tensors live
        mean_.resize(s.c);
        var_.resize(s.c);
      }
    }
    // The moving statistics from the batch's (m values per channel).
    void update_moving(RunContext<B, T>& rc, double m) {
      auto& P = *rc.params;
      const double bessel = m > 1 ? m / (m - 1) : 1.0;
      stats_.update_moving(*rc.device, geom_.c, decay_, bessel, mean_.data(), var_.data(), P.value(mmean_),
                           P.value(mvar_));
    }
    // Where the op writes dgamma and dbeta: the gradients, or scratch when
    // the weights are frozen (the op computes them together with dx).
    std::pair<T*, T*> grad_targets(RunContext<B, T>& rc) {
      if (rc.param_grads) return {rc.params->grad(gamma_), rc.params->grad(beta_)};
      scratch_.resize(2 * in_.c);
      return {scratch_.data(), scratch_.data() + in_.c};
    }
    // y_ = bn(x) with the given statistics (+ ReLU).
    void infer(RunContext<B, T>& rc, const Tensor<T>& x, const T* mean, const T* var) {
      const Parameters<T>& P = *rc.params;
      if (!act_fused()) {  // the activation as a pass of its own (bn_activation does not apply)
        op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                          y_.data());
        if (Relu) relu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
        if (Gelu) gelu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
      } else if constexpr (kFused)
        op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                          y_.data(), true);
      else if constexpr (kFusedGelu)
        op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                          y_.data(), ops::BnActivation::Gelu);
      else
        op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                          y_.data());
    }
    // Whether the op runs the activation in its passes (bn_activation):
    // a backend that fuses it, and the rule on; true without an activation.
    bool act_fused() const { return !(Relu || Gelu) || fuse_act_; }
    // act_fused() for this pass: synchronized BN runs the activation apart.
    bool act_in_op(const RunContext<B, T>& rc) const { return fuse_act_ && !rc.cross_replica; }
    ops::BatchNorm<B, T> op_;
    ops::Relu<B, T> relu_;  // the ReLU and its mask where the op does not fuse them
    // The GELU where the op does not fuse it (a placeholder in layers without
    // GELU: backends without a Gelu op still build every other BatchNorm2d).
    std::conditional_t<Gelu, ops::Gelu<B, T>, detail::NoGeluOp> gelu_;
    ops::BnStats<B, T> stats_;
    ops::SyncBatchNorm<B, T> sync_;
    ChannelGeom geom_;
    double decay_ = 0.997, eps_ = 1e-5;
    std::size_t gamma_ = 0, beta_ = 0, mmean_ = 0, mvar_ = 0;
    Buffer<T> mean_, var_, scratch_;  // sized in forward/backward: device memory on CUDA
    Tensor<T> masked_;                // dy through the ReLU or GELU when the op does not fuse it
    Tensor<T> z_;                     // bn(x) under a GELU the op does not fuse (its backward's input)
    const Tensor<T>* x_ = nullptr;
    const std::uint16_t* x_bf16_ = nullptr;  // forward_bf16's x (then x_ is null)
    std::vector<std::uint16_t> y_bits_;      // copy_target's buffer (host backends only)
    bool bf16_copies_ = false;               // bf16 convolutions asked for (build)
    bool skip_float_once_ = false;           // skip_float_output_once, for the next forward
    bool fuse_act_ = false;                  // the op fuses the ReLU or GELU and bn_activation is on (build)
    std::size_t float_outputs_skipped_ = 0, deferred_forwards_ = 0;
  };
};

}  // namespace cifarnet
