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
// mask where the backend does not fuse them), ops::BnStats (moving
// statistics), ops::SyncBatchNorm.
//
// detail::BnBase holds the parameters, buffers and the passes every backend
// has; detail::BnTraining<B, ...> is the training and inference step on
// them (the activation as a pass of its own). A backend whose batch norm op
// does more specializes BnTraining (oneDNN: layers/batch_norm_onednn.hpp:
// the activation in the op's passes, bf16 copies and bits, a residual sum in
// the pass, ranges of images for ConvBatchNorm), without asking the backend
// what it is.
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

/// A batch norm's parameters and buffers, and the passes every backend's
/// ops have: the normalising passes, the activation as a pass of its own,
/// synchronized batch norm, the moving statistics.
template <class B, class T, bool Relu, bool Gelu>
class BnBase : protected NodeBase<T> {
 protected:
  using NB = NodeBase<T>;
  using NB::dx_, NB::fmt_, NB::in_, NB::name_, NB::y_;

 public:
  /// Registers the parameters; `fusing`: the backend's op can run the
  /// activation in its passes (bn_activation, where the rule is on).
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx, int channels, bool fusing) {
    this->bind(in, scope, ctx);
    geom_ = ChannelGeom::make(fmt_, Shape{1, in.c, in.h, in.w});  // the layout queries before a forward
    if (channels != 0 && in.c != std::size_t(channels))
      throw ShapeError("layer '" + name_ + "' (BatchNorm2d) expects " + std::to_string(channels) +
                       " channels but the input shape is " + in.str());
    decay_ = ctx.options ? ctx.options->bn_decay : 0.997;
    eps_ = ctx.options ? ctx.options->bn_epsilon : 1e-5;
    gamma_ = ctx.add_param(scope, "gamma", {in.c}, Initializer::ones());
    beta_ = ctx.add_param(scope, "beta", {in.c}, Initializer::zeros());
    mmean_ = ctx.add_param(scope, "moving_mean", {in.c}, Initializer::zeros(), false);
    mvar_ = ctx.add_param(scope, "moving_variance", {in.c}, Initializer::ones(), false);
    fuse_act_ = fusing && (Relu || Gelu) && ctx.rule_on("bn_activation");
    return in;
  }
  /// Arena ids of gamma, beta, moving_mean, moving_variance (for folding).
  std::array<std::size_t, 4> param_ids() const { return {gamma_, beta_, mmean_, mvar_}; }
  double epsilon() const { return eps_; }
  /// Training forwards that wrote only the bf16 copy, that left their
  /// output unwritten, that used statistics given (tests; 0 where the
  /// backend has none of that).
  std::size_t float_outputs_skipped() const { return float_outputs_skipped_; }
  std::size_t deferred_forwards() const { return deferred_forwards_; }
  std::size_t statistics_given() const { return 0; }

 protected:
  // Whether the op runs the activation in its passes (bn_activation): a
  // backend that fuses it, and the rule on; true without an activation.
  bool act_fused() const { return !(Relu || Gelu) || fuse_act_; }
  // act_fused() for this pass: synchronized BN runs the activation apart.
  bool act_in_op(const RunContext<B, T>& rc) const { return fuse_act_ && !rc.cross_replica; }

  // The start of a forward of x: its shape checked, the geometry, output
  // and statistics buffers.
  Shape start_forward(const Tensor<T>& x) {
    const Shape s = detail::check_input(name_, in_, x, fmt_);
    start(s);
    return s;
  }
  void start(const Shape& s) {
    geom_ = ChannelGeom::make(fmt_, s);
    ensure_shape(y_, s, fmt_);
    if (mean_.size() != s.c) {  // the batch's statistics, where the layer's tensors live
      mean_.resize(s.c);
      var_.resize(s.c);
    }
  }
  // A training forward of x: x kept for backward; where the normalised
  // values go (y_, or z_ under a GELU run apart, for its backward).
  T* train_target(const Tensor<T>& x, const RunContext<B, T>& rc) {
    x_ = &x;
    if (!(Gelu && !act_in_op(rc))) return y_.data();
    ensure_shape(z_, geom_.shape(), fmt_);
    return z_.data();
  }
  // Synchronized BN's training forward: the global statistics, then the
  // inference pass (`infer`: the step's, with its activation), or bn(x)
  // into `out` and the GELU apart. The values per channel.
  template <class Infer>
  double sync_forward(RunContext<B, T>& rc, const Tensor<T>& x, T* out, Infer&& infer) {
    const double m =
        sync_.statistics(*rc.device, geom_, x.data(), *rc.cross_replica, mean_.data(), var_.data());
    if (Gelu) {
      const Parameters<T>& cp = *rc.params;
      op_.forward_infer(*rc.device, geom_, eps_, x.data(), cp.value(gamma_), cp.value(beta_), mean_.data(),
                        var_.data(), out);
      gelu_.forward(*rc.device, z_.size(), z_.data(), y_.data());
    } else {
      infer();
    }
    return m;
  }
  // The training pass into `out` (y_, or z_ under a GELU), then the activation apart.
  void train_plain(RunContext<B, T>& rc, const T* x, T* out) {
    const Parameters<T>& cp = *rc.params;
    op_.forward_train(*rc.device, geom_, eps_, x, cp.value(gamma_), cp.value(beta_), out, mean_.data(),
                      var_.data());
    if (Relu) relu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
    if (Gelu) gelu_.forward(*rc.device, z_.size(), z_.data(), y_.data());
  }
  // y_ = bn(x) with the given statistics, then the activation apart.
  void infer_plain(RunContext<B, T>& rc, const Tensor<T>& x, const T* mean, const T* var) {
    const Parameters<T>& P = *rc.params;
    op_.forward_infer(*rc.device, geom_, eps_, x.data(), P.value(gamma_), P.value(beta_), mean, var,
                      y_.data());
    if (Relu) relu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
    if (Gelu) gelu_.forward(*rc.device, y_.size(), y_.data(), y_.data());
  }
  // The start of a backward: dx sized; dy through the ReLU's mask or the
  // GELU's derivative where the op does not take them (masked_), or dy.
  const T* act_backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    ensure_shape(dx_, geom_.shape(), fmt_);
    if (!(Relu || Gelu) || act_in_op(rc)) return dy.data();
    ensure_shape(masked_, geom_.shape(), fmt_);
    if (Relu) relu_.backward(*rc.device, masked_.size(), y_.data(), dy.data(), masked_.data());
    if (Gelu) gelu_.backward(*rc.device, masked_.size(), z_.data(), dy.data(), masked_.data());
    return masked_.data();
  }
  // dx_ (and dgamma, dbeta into dg, db) from g, the gradient past the
  // activation: synchronized BN's backward, or the op's plain one.
  void backward_plain(RunContext<B, T>& rc, const T* g, T* dg, T* db) {
    const T* gamma = std::as_const(*rc.params).value(gamma_);
    if (rc.cross_replica)  // synchronized BN (ops::SyncBatchNorm)
      sync_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(),
                     *rc.cross_replica, dx_.data(), dg, db);
    else
      op_.backward(*rc.device, geom_, eps_, x_->data(), g, gamma, mean_.data(), var_.data(), dx_.data(), dg,
                   db);
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

  ops::BatchNorm<B, T> op_;
  ops::Relu<B, T> relu_;  // the ReLU and its mask where the op does not run them
  // The GELU where the op does not run it (a placeholder in layers without
  // GELU: backends without a Gelu op still build every other BatchNorm2d).
  std::conditional_t<Gelu, ops::Gelu<B, T>, detail::NoGeluOp> gelu_;
  ops::BnStats<B, T> stats_;
  ops::SyncBatchNorm<B, T> sync_;
  ChannelGeom geom_;
  double decay_ = 0.997, eps_ = 1e-5;
  std::size_t gamma_ = 0, beta_ = 0, mmean_ = 0, mvar_ = 0;
  Buffer<T> mean_, var_, scratch_;  // sized in forward/backward: device memory on CUDA
  Tensor<T> masked_;                // dy through the ReLU or GELU when the op does not take it
  Tensor<T> z_;                     // bn(x) under a GELU the op does not run (its backward's input)
  const Tensor<T>* x_ = nullptr;
  bool fuse_act_ = false;  // the op runs the ReLU or GELU and bn_activation is on (build)
  std::size_t float_outputs_skipped_ = 0, deferred_forwards_ = 0;
};

/// The training and inference step of a batch norm on a backend whose op
/// has the plain passes only: the activation as a pass of its own, no
/// hand-over the rules could fire on.
template <class B, class T, bool Relu, bool Gelu>
class BnTraining : public BnBase<B, T, Relu, Gelu> {
 protected:
  using Base = BnBase<B, T, Relu, Gelu>;
  using Base::mmean_, Base::mvar_, Base::y_;

 public:
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx, int channels) {
    return Base::build(in, scope, ctx, channels, false);
  }
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>&) {
    const Shape s = this->start_forward(x);
    const Parameters<T>& cp = *rc.params;
    if (!rc.training()) {
      this->infer_plain(rc, x, cp.value(mmean_), cp.value(mvar_));
      return y_;
    }
    T* out = this->train_target(x, rc);
    double m = double(s.n * s.h * s.w);
    if (rc.cross_replica)
      m = this->sync_forward(rc, x, out,
                             [&] { this->infer_plain(rc, x, this->mean_.data(), this->var_.data()); });
    else
      this->train_plain(rc, x.data(), out);
    this->update_moving(rc, m);
    return y_;
  }
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    const T* g = this->act_backward(dy, rc);
    auto [dg, db] = this->grad_targets(rc);
    this->backward_plain(rc, g, dg, db);
    return this->dx_;
  }
  /// No bf16 copies, residual sums or mask bits here (the facts' answers).
  bool writes_bf16_copy(const RunContext<B, T>&) const { return false; }
  bool takes_sum(const RunContext<B, T>&) const { return false; }
  bool writes_sum_mask(std::size_t) const { return false; }
  bool writes_bf16_dx(const RunContext<B, T>&) const { return false; }
  bool writes_bf16_alone(const RunContext<B, T>&, std::size_t) const { return false; }
  bool reads_bf16_input(const RunContext<B, T>&, std::size_t) const { return false; }
  void require_bf16_input() {
    throw ConfigError("layer '" + this->name_ + "' (BatchNorm2d): no bf16 input on this backend");
  }
  void skip_float_output_once() {
    throw ConfigError("layer '" + this->name_ + "' (BatchNorm2d): no bf16-only output on this backend");
  }
  const Tensor<T>& backward_bits(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
    if (dx_bits) throw ConfigError("layer '" + this->name_ + "' (BatchNorm2d): no bf16 dx on this backend");
    return backward(dy, rc);
  }
  static const char* no_copy_why() { return "no bf16 copies on this backend"; }
  static const char* no_dx_bits_why() { return "no bf16 gradients on this backend"; }
  static const char* no_alone_why() { return "no bf16 copies on this backend"; }
  static const char* no_sum_why() {
    return Relu || Gelu ? "it has its own activation" : "no fused sum on this backend";
  }
};
}  // namespace detail

}  // namespace cifarnet

#include "cifarnet/layers/batch_norm_onednn.hpp"

namespace cifarnet {

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
  class Node : public detail::BnTraining<B, T, Relu, Gelu> {
    using Step = detail::BnTraining<B, T, Relu, Gelu>;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      return Step::build(in, scope, ctx, C);
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      plan::Links<T> none;
      return Step::forward(x, rc, none);
    }
    /// forward() with the hand-overs of a training plan (plan::Links): a
    /// residual sum to write in the same pass (k.sum), and where it writes
    /// a bf16 copy of what it wrote, that copy left in k.
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
      return Step::forward(x, rc, k);
    }
    /// One node in a step plan (nn/plan.hpp), with the facts whether its
    /// training forward writes a bf16 copy of its output (or that copy
    /// alone), can read its input as bf16 bits alone, can add a residual
    /// block's sum in its pass and write that sum's mask as bits.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const int t = b.node(this->name_, kind, {in}, this->in_, plan_attrs());
      plan::Node& n = b.producer(t);
      n.facts[plan::facts::kBf16Copy] =
          this->writes_bf16_copy(rc) ? plan::Fact::yes() : plan::Fact::no(Step::no_copy_why());
      n.facts[plan::facts::kTakesSum] =
          this->takes_sum(rc) ? plan::Fact::yes() : plan::Fact::no(Step::no_sum_why());
      n.facts[plan::facts::kSumMask] = this->writes_sum_mask(b.key().batch)
                                           ? plan::Fact::yes()
                                           : plan::Fact::no("its channel count or layout has no mask bits");
      n.facts[plan::facts::kDxBits] =
          this->writes_bf16_dx(rc) ? plan::Fact::yes() : plan::Fact::no(Step::no_dx_bits_why());
      const bool alone = this->writes_bf16_alone(rc, b.key().batch);
      n.facts[plan::facts::kBf16OutputAlone] =
          alone ? plan::Fact::yes() : plan::Fact::no(Step::no_alone_why());
      const bool bits_in = this->reads_bf16_input(rc, b.key().batch);
      n.facts[plan::facts::kBf16InputOnly] =
          bits_in ? plan::Fact::yes() : plan::Fact::no(Step::no_alone_why());
      if (this->writes_bf16_dx(rc) || alone ||
          bits_in) {  // the training executor's hooks (nn/train_executor.hpp)
        plan::LayerRun<B, T> r;
        r.forward = [this](const Tensor<T>& x, RunContext<B, T>& c, plan::Links<T>& k) -> const Tensor<T>& {
          return Step::forward(x, c, k);
        };
        r.backward = [this](const Tensor<T>& dy, RunContext<B, T>& c, plan::Links<T>&) -> const Tensor<T>& {
          return Step::backward(dy, c);
        };
        r.pair.backward_bits = [this](const Tensor<T>* dy, RunContext<B, T>& c,
                                      std::uint16_t* dx_bits) -> const Tensor<T>& {
          return this->backward_bits(*dy, c, dx_bits);
        };
        r.pair.skip_float_output = [this] { this->skip_float_output_once(); };
        r.pair.require_bf16_input = [this] { this->require_bf16_input(); };
        n.run = std::move(r);
      }
      return t;
    }
  };
};

}  // namespace cifarnet
