// cifarnet/layers/batch_norm_onednn.hpp — BatchNorm2d's step on the oneDNN
// backend, whose batch norm op does more than the plain passes:
//
// - the ReLU or GELU in the op's passes (bn_activation; where the rule is
//   off, or under synchronized batch norm, the activation runs apart);
// - with bf16 convolutions, a bf16 copy of the output beside it for the
//   convolutions that read it (bf16_copy_to_readers), or that copy alone
//   (bn_bf16_output_alone); x taken as bf16 bits and dx written as bf16 for
//   the convolution of a ConvBatchNorm (conv_bn_bf16_output,
//   bn_bf16_dx_to_conv, bf16_dx_between_conv_bn);
// - a residual block's sum (and its ReLU, its mask as bits, the shortcut as
//   bf16 bits) written in the normalising pass (residual_sum_in_bn,
//   relu_mask_bits, bf16_residual_stream);
// - for ConvBatchNorm's float training: statistics given by the
//   convolution's epilogue, the backward's sums pass apart from its dx,
//   computed a range of images at a time or as a map the convolution's own
//   kernels apply, the output left as such a map (layers/conv_bn_onednn.hpp).
//
// No ReLU, GELU or sum options beyond those ask which backend this is: it
// is oneDNN's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/layers/batch_norm.hpp"

namespace cifarnet::detail {

template <class T, bool Relu, bool Gelu>
class BnTraining<backend::OneDnn, T, Relu, Gelu> : public BnBase<backend::OneDnn, T, Relu, Gelu> {
 protected:
  using B = backend::OneDnn;
  using Base = BnBase<B, T, Relu, Gelu>;
  using Base::act_fused, Base::act_in_op, Base::beta_, Base::deferred_forwards_, Base::dx_, Base::eps_,
      Base::float_outputs_skipped_, Base::fmt_, Base::gamma_, Base::geom_, Base::grad_targets, Base::in_,
      Base::mean_, Base::mmean_, Base::mvar_, Base::name_, Base::op_, Base::var_, Base::x_, Base::y_;
  // The op reads x as bf16 bits and writes dx as bf16 with no GELU; it adds
  // a residual sum in its pass with no activation of its own.
  static constexpr bool kBits = !Gelu;
  static constexpr bool kSum = !Gelu && !Relu;

 public:
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx, int channels) {
    const Shape s = Base::build(in, scope, ctx, channels, true);
    bf16_copies_ = ctx.options && ctx.options->conv_precision == ConvPrecision::BF16;
    return s;
  }

  /// The forward with the call's hand-overs (plan::Links): a residual sum
  /// to write in the same pass (k.sum), and where it writes a bf16 copy of
  /// what it wrote, that copy left in k.
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
    const Shape s = this->start_forward(x);
    const Parameters<T>& cp = *rc.params;
    if (std::exchange(expect_copy_, false)) {  // pool_bf16_output_to_bn: x's float values are stale
      if (!k.input_bf16 || !reads_bf16_input(rc, s.n))
        throw ConfigError(
            "layer '" + name_ +
            "' (BatchNorm2d): its input's float values were skipped for a bf16 copy that is not "
            "there, or that it cannot read");
      x_ = nullptr;
      x_bf16_ = k.input_bf16;
      if (Gelu)
        train_gelu(rc, x_bf16_, k);
      else
        train_with_copy(rc, x_bf16_, k);
      skip_float_once_ = false;
      this->update_moving(rc, double(s.n * s.h * s.w));
      return y_;
    }
    if (rc.training()) {
      x_bf16_ = nullptr;
      T* out = this->train_target(x, rc);
      double m = double(s.n * s.h * s.w);
      if (rc.cross_replica) {  // global statistics, then the inference pass
        m = this->sync_forward(rc, x, out, [&] { infer(rc, x, mean_.data(), var_.data()); });
      } else if (!train_sum(rc, x.data(), k)) {  // else a residual block's sum, in this pass
        if (!act_fused())                        // the activation apart (bn_activation off)
          this->train_plain(rc, x.data(), out);
        else if (Gelu)  // with a bf16 copy of y for a bf16 convolution after it
          train_gelu(rc, x.data(), k);
        else  // with its ReLU, and a bf16 copy of y for a bf16 convolution after it
          train_with_copy(rc, x.data(), k);
      }
      this->update_moving(rc, m);
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
    if (!kBits) throw ConfigError("layer '" + name_ + "' (BatchNorm2d): forward_bf16 with a GELU");
    if (s.c != in_.c || s.h != in_.h || s.w != in_.w)
      throw ShapeError("layer '" + name_ + "' (BatchNorm2d) expects " + in_.str() + " but got " + s.str());
    this->start(s);
    x_ = nullptr;
    x_bf16_ = x;
    if (!train_sum(rc, x, k)) train_with_copy(rc, x, k);
    skip_float_once_ = false;
    this->update_moving(rc, double(s.n * s.h * s.w));
    return y_;
  }

  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    const T* g = this->act_backward(dy, rc);  // the mask or derivative where the op does not take it
    auto [dg, db] = grad_targets(rc);
    const T* gamma = std::as_const(*rc.params).value(gamma_);
    if (x_bf16_)  // forward_bf16's x, or a max pool's bf16 output (pool_bf16_output_to_bn)
      op_.backward(*rc.device, geom_, eps_, x_bf16_, g, gamma, mean_.data(), var_.data(), dx_.data(), dg, db,
                   Gelu   ? ops::BnActivation::Gelu
                   : Relu ? ops::BnActivation::Relu
                          : ops::BnActivation::None);
    else if (rc.cross_replica || !act_fused() || !(Relu || Gelu))
      this->backward_plain(rc, g, dg, db);
    else if (Relu)
      op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                   db, true);
    else
      op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                   db, ops::BnActivation::Gelu);
    return dx_;
  }

  // The float backward a range of images at a time (ConvBatchNorm's
  // ranges): dx produced range by range for the convolution's backward.
  /// Whether backward_sums/backward_images can run: no GELU, the ReLU (if
  /// any) in the op, no synchronized batch norm.
  bool chunkable(const RunContext<B, T>& rc) const {
    return kBits && rc.training() && !rc.cross_replica && act_fused();
  }
  /// backward(dy, rc) in parts after a float training forward: the pass of
  /// the sums (the parameters' gradients), then backward_images for ranges
  /// of images, each writing their dx into `dx_images` (their size).
  void backward_sums(const Tensor<T>& dy, RunContext<B, T>& rc) {
    if (!kBits || !x_)
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_sums not after a float forward");
    auto [dg, db] = grad_targets(rc);
    op_.backward_sums(*rc.device, geom_, eps_, x_->data(), dy.data(), std::as_const(*rc.params).value(gamma_),
                      mean_.data(), var_.data(), dg, db, Relu);
  }
  /// backward_sums with the sums taken by the layer that read this one's
  /// output, over this dy (plan::BnSums, in that layer's kernels'
  /// epilogue; 2C values).
  void backward_sums_given(const Tensor<T>& dy, RunContext<B, T>& rc, const double* sums) {
    if (!kBits || !x_)
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_sums_given not after a float forward");
    auto [dg, db] = grad_targets(rc);
    op_.backward_sums_given(*rc.device, geom_, eps_, x_->data(), dy.data(),
                            std::as_const(*rc.params).value(gamma_), mean_.data(), var_.data(), dg, db, Relu,
                            sums);
  }
  /// The batch statistics of x (2C: the means, then the biased
  /// variances, in double) taken by the convolution that wrote x
  /// (ConvBatchNorm, ops::Conv2d::forward_stats): the next training
  /// forward of this x uses them instead of its own pass over x. `stats`
  /// must hold them until then.
  void give_statistics(const Tensor<T>& x, const double* stats) {
    op_.give_statistics(x.data(), in_.c, stats);
  }
  /// A training forward with the ReLU whose output is not written
  /// (ConvBatchNorm's deferred output; chunkable(rc)): the statistics
  /// (those given, or a pass over x), the moving averages and the
  /// coefficients, which norm_map() hands to the convolution that computes
  /// each image of the output itself. Returns the output tensor, sized, its
  /// values not written. The backward is forward()'s.
  const Tensor<T>& forward_deferred(const Tensor<T>& x, RunContext<B, T>& rc) {
    if (!Relu || !chunkable(rc))
      throw ConfigError("layer '" + name_ +
                        "' (BatchNorm2d): forward_deferred needs a ReLU in the op and a training step");
    const Shape s = this->start_forward(x);
    x_ = &x;
    x_bf16_ = nullptr;
    const Parameters<T>& cp = *rc.params;
    op_.forward_train_deferred(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_),
                               mean_.data(), var_.data());
    this->update_moving(rc, double(s.n * s.h * s.w));
    skip_float_once_ = false;
    ++deferred_forwards_;
    return y_;
  }
  /// forward_bf16 whose output is not written (ConvBatchNorm's deferred
  /// output in bf16: bn_output_into_next_conv with bf16 convolutions): the
  /// statistics of the bits x, the moving averages and the coefficients,
  /// which bf16_map() hands to the convolution that computes its input from
  /// x itself (ops::Conv2d::forward_bf16_mapped). Returns the output
  /// tensor, sized, its values not written. The backward is forward_bf16's
  /// (it reads x and recomputes the ReLU's mask); x must hold until then.
  const Tensor<T>& forward_bf16_deferred(const std::uint16_t* x, const Shape& s, RunContext<B, T>& rc) {
    if (!Relu || !backward_bf16_ready(rc) || !rc.training())
      throw ConfigError("layer '" + name_ +
                        "' (BatchNorm2d): forward_bf16_deferred needs a fused ReLU and a bf16 training step");
    if (s.c != in_.c || s.h != in_.h || s.w != in_.w)
      throw ShapeError("layer '" + name_ + "' (BatchNorm2d) expects " + in_.str() + " but got " + s.str());
    this->start(s);
    x_ = nullptr;
    x_bf16_ = x;
    const Parameters<T>& cp = *rc.params;
    op_.forward_train_deferred(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_), mean_.data(),
                               var_.data());
    this->update_moving(rc, double(s.n * s.h * s.w));
    skip_float_once_ = false;
    ++deferred_forwards_;
    return y_;
  }
  /// After forward_bf16_deferred: the map's scale and shift (C floats each),
  /// valid until the next forward.
  std::pair<const float*, const float*> bf16_map() const {
    if (!Relu || !x_bf16_)
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): bf16_map before forward_bf16_deferred");
    const ops::BnNormMap<T> m = op_.norm_map(geom_, nullptr);
    return {m.a, m.b};
  }
  /// After forward_deferred: its output as a map (ops::BnNormMap over the
  /// whole batch), valid until the next forward.
  ops::BnNormMap<T> norm_map() const {
    if (!Relu || !x_)
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): norm_map before forward_deferred");
    return op_.norm_map(geom_, x_->data());
  }
  /// Training forwards that used statistics given (tests).
  std::size_t statistics_given() const { return op_.statistics_given(); }
  /// What a later layer needs to take this layer's backward sums
  /// (plan::BnSums) after a float training forward: its x, the ReLU's a, b
  /// (null without) and the batch mean; all null where backward_sums_given
  /// cannot follow (not chunkable, a bf16 forward).
  struct SumsInputs {
    const T* x = nullptr;
    const T* relu_ab = nullptr;
    const T* mean = nullptr;
  };
  SumsInputs sums_inputs(const RunContext<B, T>& rc) const {
    if (!chunkable(rc) || !x_) return {};
    const T* ab = Relu ? op_.relu_coefficients(geom_) : nullptr;
    if (Relu && !ab) return {};
    return {x_->data(), ab, mean_.data()};
  }
  void backward_images(const Tensor<T>& dy, RunContext<B, T>& rc, std::size_t i0, std::size_t i1,
                       T* dx_images) {
    if (!kBits || !x_)
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_images not after a float forward");
    op_.backward_images(*rc.device, geom_, x_->data(), dy.data(), mean_.data(), i0, i1, dx_images, Relu);
  }
  /// After backward_sums of `dy`: backward_images' map (ops::BatchNorm::
  /// grad_map), for a convolution that applies it to an image at a time in
  /// its own kernels (ConvBatchNorm).
  auto grad_map(const Tensor<T>& dy, RunContext<B, T>& rc) const {
    if (!x_) throw ConfigError("layer '" + name_ + "' (BatchNorm2d): grad_map after a bf16 forward");
    return op_.grad_map(*rc.device, geom_, x_->data(), dy.data(), mean_.data(), Relu);
  }

  /// Whether backward_bf16 can run now: no synchronized BN, no GELU, the
  /// ReLU (if any) in the op.
  bool backward_bf16_ready(const RunContext<B, T>& rc) const {
    return kBits && !rc.cross_replica && act_fused();
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
    return backward_bf16_ready(rc) && decltype(op_)::writes_bf16_only(geom_);
  }
  /// backward_bf16 with dy given as bfloat16 bits (the bf16 input gradient
  /// the convolution after this layer wrote; ConvBatchNorm).
  void backward_bf16_bits(const std::uint16_t* dy, RunContext<B, T>& rc, std::uint16_t* dx_bf16) {
    run_backward_bf16(dy, rc, dx_bf16);
  }

  /// Writes this layer's dy as bfloat16 bits into `dy` (the buffer its
  /// next backward reads them from: backward_bf16_bits, backward_from_bits)
  /// as a + b through the ReLU mask bits `mask` (null: none), a and b float
  /// or bits, taking its backward's sums over them in the same pass
  /// (ops::BatchNorm::sum_into_dy): that backward then has no pass of its
  /// own for them (bn_sums_in_dy_sum). Needs backward_bf16_bits_ready.
  template <class A, class Bv>
  void sum_into_dy(RunContext<B, T>& rc, const A* a, const Bv* b, const std::uint16_t* mask,
                   std::uint16_t* dy) {
    if (!backward_bf16_bits_ready(rc))
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): a bf16 dy sum where it cannot read one");
    if (x_bf16_)
      op_.sum_into_dy(*rc.device, geom_, a, b, mask, dy, x_bf16_, mean_.data(), Relu);
    else
      op_.sum_into_dy(*rc.device, geom_, a, b, mask, dy, x_->data(), mean_.data(), Relu);
  }
  /// Whether backward_into_weight_gradient takes a batch of `n` with a
  /// convolution of `cin` input channels in front (the op's
  /// weight_gradient_in_backward; not with the GELU).
  bool weight_gradient_in_backward(std::size_t n, std::size_t cin) const {
    const ChannelGeom g = ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w});
    return kBits && decltype(op_)::weight_gradient_in_backward(g, cin);
  }
  /// The training backward with dy float or bfloat16 bits, dx not stored:
  /// the output gradient of the 3x3 stride-1 padding-1 convolution in front
  /// of this layer, whose weight gradient (`dw`, HWIO) it computes from that
  /// convolution's float input `conv_x` (`cin` channels) in the same pass
  /// (bn_dx_into_conv_weight_gradient).
  template <class DY>
  void backward_into_weight_gradient(const DY* dy, RunContext<B, T>& rc, const T* conv_x, std::size_t cin,
                                     T* dw) {
    if (!weight_gradient_in_backward(geom_.n, cin))
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): no weight gradient in its backward here");
    auto [dg, db] = grad_targets(rc);
    const T* gamma = std::as_const(*rc.params).value(gamma_);
    if (x_bf16_)
      op_.backward_into_weight_gradient(*rc.device, geom_, eps_, x_bf16_, dy, gamma, mean_.data(),
                                        var_.data(), dg, db, Relu, conv_x, cin, dw);
    else
      op_.backward_into_weight_gradient(*rc.device, geom_, eps_, x_->data(), dy, gamma, mean_.data(),
                                        var_.data(), dg, db, Relu, conv_x, cin, dw);
  }
  /// Backward passes that used sum_into_dy's sums.
  std::size_t dy_sums_used() const { return op_.dy_sums_used(); }

  /// backward() with dy given as bfloat16 bits (backward_bf16_bits_ready)
  /// and dx float: the batch norm of a ConvBatchNorm whose convolution's
  /// backward stays float, given its dy as bits by a gradient sum
  /// (bf16_dy_sum).
  const Tensor<T>& backward_from_bits(const std::uint16_t* dy, RunContext<B, T>& rc) {
    if (!backward_bf16_bits_ready(rc))
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): a bf16 dy where it cannot read one");
    ensure_shape(dx_, geom_.shape(), fmt_);
    auto [dg, db] = grad_targets(rc);
    const T* gamma = std::as_const(*rc.params).value(gamma_);
    if (x_bf16_)
      op_.backward_bits_dy(*rc.device, geom_, eps_, x_bf16_, dy, gamma, mean_.data(), var_.data(), dx_.data(),
                           dg, db, Relu);
    else
      op_.backward_bits_dy(*rc.device, geom_, eps_, x_->data(), dy, gamma, mean_.data(), var_.data(),
                           dx_.data(), dg, db, Relu);
    return dx_;
  }

  /// Whether a training backward can write dx as bf16 bits, for the bf16
  /// convolution in front of it (bn_bf16_dx_to_standalone_conv): bf16
  /// convolutions on a CPU where they run in bf16, the activation in the
  /// op's passes, no synchronized batch norm.
  bool writes_bf16_dx(const RunContext<B, T>& rc) const {
    return rc.training() && bf16_copies_ && act_fused() && !rc.cross_replica &&
           decltype(op_)::bf16_copies_useful();
  }
  static const char* no_dx_bits_why() {
    return "no bf16 convolutions here, its activation in a pass of its own, or synchronized batch norm";
  }
  /// backward() with dx as float (`dx_bits` null) or written as bf16 bits
  /// there (the returned tensor is then empty): the training executor's
  /// entry (plan::PairHooks). The bits are the float dx rounded as the
  /// convolution would round it.
  const Tensor<T>& backward_bits(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
    if (!dx_bits) return backward(dy, rc);
    if (!writes_bf16_dx(rc) || !(x_ || x_bf16_))
      throw ConfigError("layer '" + name_ + "' (BatchNorm2d): a bf16 dx where it cannot write one");
    if constexpr (Gelu) {
      const T* g = this->act_backward(dy, rc);  // dy itself (the GELU in the op); sizes dx_ for u
      auto [dg, db] = grad_targets(rc);
      const T* gamma = std::as_const(*rc.params).value(gamma_);
      if (x_bf16_)  // a max pool's bf16 output (pool_bf16_output_to_bn)
        op_.backward_bf16_gelu(*rc.device, geom_, eps_, x_bf16_, g, gamma, mean_.data(), var_.data(),
                               dx_.data(), dx_bits, dg, db);
      else
        op_.backward_bf16_gelu(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(),
                               dx_.data(), dx_bits, dg, db);
    } else {
      run_backward_bf16(dy.data(), rc, dx_bits);
    }
    return none_;
  }

  /// Whether a training forward of a batch of `n` that takes a residual
  /// block's sum (plan::SumInPass) can read the shortcut as bf16 bits
  /// and write the sum as its bf16 copy and ReLU mask alone (the residual
  /// stream in bf16, bf16_residual_stream): bf16 copies on, and the op's
  /// NHWC channel counts.
  bool sums_bf16_only(const RunContext<B, T>& rc, std::size_t n) const {
    const ChannelGeom g = ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w});
    return kSum && bf16_copies_ && !rc.cross_replica && decltype(op_)::bf16_copies_useful() &&
           decltype(op_)::writes_bf16_only(g) && decltype(op_)::writes_sum_mask(g);
  }
  /// Whether a training forward writes a bf16 copy of its output (or of
  /// the residual sum it writes) beside it, for a bf16 convolution that
  /// reads it (bf16_copy_to_readers): bf16 convolutions, a CPU where they
  /// run in bf16, no synchronized batch norm.
  bool writes_bf16_copy(const RunContext<B, T>& rc) const {
    return rc.training() && bf16_copies_ && act_fused() && !rc.cross_replica &&
           decltype(op_)::bf16_copies_useful();
  }
  static const char* no_copy_why() { return "no bf16 convolutions here, or synchronized batch norm"; }
  /// Whether a training forward of a batch of `n` can write its output as
  /// its bf16 copy alone (skip_float_output_once; step plans): bf16
  /// copies, and the op's NHWC channel counts (with its ReLU or GELU: the
  /// backward reads x, never y).
  bool writes_bf16_alone(const RunContext<B, T>& rc, std::size_t n) const {
    const ChannelGeom g = ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w});
    return bf16_copies_ && act_fused() && !rc.cross_replica && decltype(op_)::bf16_copies_useful() &&
           decltype(op_)::writes_bf16_only(g);
  }
  static const char* no_alone_why() {
    return "no bf16 convolutions here, synchronized batch norm, or a channel count or layout with no "
           "bf16-only output";
  }
  /// Whether a training forward of a batch of `n` that adds a residual
  /// block's sum can also write the sum's ReLU mask as bits (step plans).
  bool writes_sum_mask(std::size_t n) const {
    return kSum && decltype(op_)::writes_sum_mask(ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w}));
  }
  /// Whether a training forward can add a residual block's sum in its
  /// pass (train_sum): no activation of its own, no synchronized batch
  /// norm (step plans).
  bool takes_sum(const RunContext<B, T>& rc) const { return kSum && rc.training() && !rc.cross_replica; }
  static const char* no_sum_why() {
    return kSum ? "inference or synchronized batch norm" : "it has its own activation";
  }
  /// Whether a training forward of a batch of `n` can read its input only
  /// as bf16 bits, the copy a max pool wrote alone (pool_bf16_output_to_bn):
  /// bf16 copies, its activation in the op's passes, no synchronized batch
  /// norm, the op's NHWC channel counts.
  bool reads_bf16_input(const RunContext<B, T>& rc, std::size_t n) const {
    return rc.training() && writes_bf16_alone(rc, n);
  }
  /// The next training forward reads its input only as its bf16 copy
  /// (k.input_bf16), and throws if none is given.
  void require_bf16_input() { expect_copy_ = true; }
  /// The next training forward may write its output only as the bf16 copy
  /// when it writes one, leaving y_ stale: for a next layer that reads
  /// nothing else (bn_bf16_output_alone, bf16_residual_stream). Reset by
  /// that forward.
  void skip_float_output_once() { skip_float_once_ = true; }

 private:
  // backward_bf16 with dy float or bfloat16 bits.
  template <class DY>
  void run_backward_bf16(const DY* dy, RunContext<B, T>& rc, std::uint16_t* dx_bf16) {
    if (!kBits) throw ConfigError("layer '" + name_ + "' (BatchNorm2d): backward_bf16 with a GELU");
    auto [dg, db] = grad_targets(rc);
    const T* gamma = std::as_const(*rc.params).value(gamma_);
    if (x_bf16_)
      op_.backward_bf16(*rc.device, geom_, eps_, x_bf16_, dy, gamma, mean_.data(), var_.data(), dx_bf16, dg,
                        db, Relu);
    else
      op_.backward_bf16(*rc.device, geom_, eps_, x_->data(), dy, gamma, mean_.data(), var_.data(), dx_bf16,
                        dg, db, Relu);
  }
  // The training forward writing the residual sum it was given (k.sum:
  // residual_sum_in_bn) instead of y_, when it can: no activation of its
  // own, no synchronized BN, the sum sized as the output. False: nothing
  // done.
  template <class X>
  bool train_sum(RunContext<B, T>& rc, const X* x, plan::Links<T>& k) {
    plan::SumInPass<T>* sum = k.sum;
    if (!kSum || !sum || rc.cross_replica || sum->n != geom_.size()) return false;
    const Parameters<T>& cp = *rc.params;
    std::uint16_t* yb = copy_target(rc);
    // The sum's ReLU mask as bits too, where asked and the op can.
    std::uint16_t* mask =
        sum->mask && sum->relu && decltype(op_)::writes_sum_mask(geom_) ? sum->mask : nullptr;
    // The shortcut as bf16 bits (a residual stream in bf16), and the sum
    // as its bf16 copy and mask alone where asked.
    if (sum->shortcut_bits && !yb)
      throw ConfigError("layer '" + name_ + "': a bf16 shortcut needs bf16 copies (bf16 convolutions)");
    const bool skip = sum->skip_float && yb && mask && decltype(op_)::writes_bf16_only(geom_);
    T* out = skip ? nullptr : sum->out;
    if (sum->shortcut_bits)
      op_.forward_train_sum(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_), sum->shortcut_bits,
                            sum->relu, out, mean_.data(), var_.data(), yb, mask);
    else
      op_.forward_train_sum(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_), sum->shortcut,
                            sum->relu, out, mean_.data(), var_.data(), yb, mask);
    sum->mask_done = mask != nullptr;
    sum->float_skipped = skip;
    sum->done = true;
    publish_copy(k, sum->out, yb);
    return true;
  }
  // The training forward of x (float, or bfloat16 bits) into y_, with the
  // ReLU (if any) and a bf16 copy of y_ for a bf16 convolution after it.
  // After skip_float_output_once(), only the bf16 copy when the op can
  // write it alone: y_ then keeps stale values (its size is right).
  template <class X>
  void train_with_copy(RunContext<B, T>& rc, const X* x, plan::Links<T>& k) {
    const Parameters<T>& cp = *rc.params;
    std::uint16_t* yb = copy_target(rc);
    const bool skip = std::exchange(skip_float_once_, false) && yb && decltype(op_)::writes_bf16_only(geom_);
    float_outputs_skipped_ += skip;
    op_.forward_train(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_),
                      skip ? nullptr : y_.data(), mean_.data(), var_.data(), Relu, yb);
    publish_copy(k, y_.data(), yb);
  }
  // The training forward with the GELU in the op's pass, and a bf16 copy of
  // y for a bf16 convolution after it; after skip_float_output_once(), that
  // copy alone where the op can write it so (bn_bf16_output_alone between
  // standalone layers: airbench94's BN + GELU before its next convolution),
  // y_ then stale as in train_with_copy.
  template <class X>
  void train_gelu(RunContext<B, T>& rc, const X* x, plan::Links<T>& k) {
    const Parameters<T>& cp = *rc.params;
    std::uint16_t* yb = copy_target(rc);
    const bool skip = std::exchange(skip_float_once_, false) && yb && decltype(op_)::writes_bf16_only(geom_);
    float_outputs_skipped_ += skip;
    op_.forward_train(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_),
                      skip ? nullptr : y_.data(), mean_.data(), var_.data(), ops::BnActivation::Gelu, yb);
    publish_copy(k, y_.data(), yb);
  }
  // Where the training forward also writes its output as bf16, or nullptr:
  // with bf16 convolutions (NetOptions::conv_precision) on a CPU where they
  // run in bf16, for the convolutions that may read the output next
  // (bf16_copy_to_readers). The buffer lives until the next forward.
  std::uint16_t* copy_target(const RunContext<B, T>& rc) {
    if (!bf16_copies_ || !act_fused() || rc.cross_replica || !decltype(op_)::bf16_copies_useful())
      return nullptr;
    y_bits_.resize(geom_.size());
    return y_bits_.data();
  }
  // Leaves the copy (if any) of the tensor at `out` for its readers.
  static void publish_copy(plan::Links<T>& k, const T* out, const std::uint16_t* bits) {
    k.copy_of = bits ? out : nullptr;
    k.copy = bits;
  }
  // y_ = bn(x) with the given statistics, the activation in the op where it runs it.
  void infer(RunContext<B, T>& rc, const Tensor<T>& x, const T* mean, const T* var) {
    const Parameters<T>& P = *rc.params;
    if (!act_fused() || !(Relu || Gelu))
      this->infer_plain(rc, x, mean, var);
    else if (Relu)
      op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                        y_.data(), true);
    else
      op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                        y_.data(), ops::BnActivation::Gelu);
  }

  const std::uint16_t* x_bf16_ = nullptr;  // forward_bf16's x (then x_ is null)
  Tensor<T> none_;                         // backward_bits' result where dx went out as bits
  HostVector<std::uint16_t> y_bits_;       // copy_target's buffer
  bool bf16_copies_ = false;               // bf16 convolutions asked for (build)
  bool skip_float_once_ = false;           // skip_float_output_once, for the next forward
  bool expect_copy_ = false;               // require_bf16_input, for the next forward
};

}  // namespace cifarnet::detail
