// cifarnet/layers/conv2d_onednn.hpp — a Conv2d node on the oneDNN backend.
//
// On top of what every backend's node does (detail::ConvParts,
// layers/conv2d_parts.hpp): the algorithm (NetOptions::conv_algorithm;
// Auto trains weights with Direct) and the precision
// (NetOptions::conv_precision) of its primitives; both backward passes in one
// call (frozen weights with a trained bias: the bias's sum alone, then dx);
// the weights handed over with their version, so the op reorders
// them only when they changed; and what ConvBatchNorm's training on this
// backend (layers/conv_bn_onednn.hpp) asks of its convolution: a bf16 copy of
// x from its writer, y written as bf16 bits, dy taken and dx written as bf16,
// the backward a range of images at a time, and the own kernels
// (backend/onednn/direct_conv.hpp: the batch norm's statistics in the
// forward's epilogue, its input gradient in the backward's prologue). Those
// need a convolution without bias; with bias they say no (null, false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/onednn/amx_tiles.hpp"
#include "cifarnet/backend/tags.hpp"
#include "cifarnet/layers/conv2d_parts.hpp"

namespace cifarnet::detail {

template <class T, class L>
class ConvNode<backend::OneDnn, T, L> : public ConvParts<backend::OneDnn, T, L> {
  using B = backend::OneDnn;
  using Base = ConvParts<B, T, L>;
  using Base::b_, Base::Bias, Base::dx_, Base::fmt_, Base::geom_, Base::kOut, Base::name_, Base::op_,
      Base::w_, Base::x_, Base::y_;

 public:
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
    const Shape out = Base::build(in, scope, ctx);
    policy_ = ctx.options ? ctx.options->conv_algorithm : ConvAlgorithm::Auto;
    op_.set_precision(ctx.options ? ctx.options->conv_precision : ConvPrecision::F32);
    op_.set_direct_kernels(!ctx.options || ctx.options->direct_conv_bn);
    return out;
  }

  /// `x_bf16`: a bf16 copy of x its writer made in the same pass, which a
  /// bf16 convolution then reads instead of rounding x.
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, const std::uint16_t* x_bf16 = nullptr) {
    prepare(x, rc, x_bf16);
    ensure_shape(y_, geom_.out_shape(), fmt_);
    const Parameters<T>& params = *rc.params;
    op_.forward(*rc.device, geom_, x.data(), weights(params), Bias ? params.value(b_) : nullptr, y_.data());
    return y_;
  }
  /// forward() with the hand-overs of a training plan (plan::Links): the
  /// bf16 copy of x its writer made; after skip_float_output_once, y
  /// written only as bf16 bits, left in k as the copy of y_ (whose values
  /// are then stale) for the max pool after it (conv_bf16_output_to_pool).
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
    if (std::exchange(expect_copy_, false) && !k.input_bf16)
      throw ConfigError(
          "layer '" + name_ +
          "' (Conv2d): its input's float values were skipped for a bf16 copy that is not there");
    if (std::exchange(gelu_once_, false)) {  // conv_gelu_bf16_output
      prepare(x, rc, k.input_bf16);
      ensure_shape(y_, geom_.out_shape(), fmt_);
      y_bf16_.resize(geom_.out_shape().size());
      const Parameters<T>& params = *rc.params;
      op_.forward_gelu_bf16_dst(*rc.device, geom_, x.data(), weights(params),
                                Bias ? params.value(b_) : nullptr, y_bf16_.data());
      k.copy = y_bf16_.data();
      k.copy_of = y_.data();
      ++gelu_outputs_;
      return y_;
    }
    if (!std::exchange(bf16_alone_once_, false)) return forward(x, rc, k.input_bf16);
    const std::uint16_t* bits = forward_bf16(x, rc, k.input_bf16);
    if (!bits) throw ConfigError("layer '" + name_ + "' (Conv2d): asked for a bf16 output it cannot write");
    ensure_shape(y_, geom_.out_shape(), fmt_);
    k.copy = bits;
    k.copy_of = y_.data();
    ++bf16_outputs_alone_;
    return y_;
  }
  /// The next training forward writes y only as bf16 bits (forward(x, rc, k)).
  void skip_float_output_once() { bf16_alone_once_ = true; }
  /// The next training forward writes gelu(conv(x) + b) only as bf16 bits
  /// (ops::Conv2d::forward_gelu_bf16_dst), left in k as the copy of y_
  /// (whose values are then stale), for the GELU layer after it that does
  /// not run and the bf16 convolution that reads its output
  /// (conv_gelu_bf16_output): only where no backward runs through it.
  void gelu_bits_output_once() { gelu_once_ = true; }
  /// Training forwards that wrote the GELU of their output as bf16 bits (tests).
  std::size_t gelu_outputs() const { return gelu_outputs_; }
  /// The next training forward's input is a bf16 copy alone, its float
  /// values stale (bn_bf16_output_alone from a standalone batch norm,
  /// bf16_residual_stream): forward(x, rc, k) throws if the copy is not
  /// there rather than read them.
  void require_bf16_input() { expect_copy_ = true; }
  /// Training forwards that wrote y only as bf16 bits (tests).
  std::size_t bf16_outputs_alone() const { return bf16_outputs_alone_; }

  /// A training forward in the own kernels (direct_bn()) that also takes
  /// the batch norm statistics of its output (2 Out: the means, then the
  /// biased variances, in double) image by image while each is in cache
  /// (ops::Conv2d::forward_stats), for the batch norm after it
  /// (ConvBatchNorm). Returns y, or nullptr where this cannot run (nothing
  /// done: call forward()). With `in` (not null), x's values are not read:
  /// it is an earlier batch norm's output left unwritten, given as its map
  /// (ops::BnNormMap), whose images the op computes itself.
  const Tensor<T>* forward_stats(const Tensor<T>& x, RunContext<B, T>& rc, double* stats,
                                 const ops::BnNormMap<T>* in) {
    if (!direct_forward_next(rc)) return nullptr;
    prepare(x, rc, nullptr);
    if (!op_.direct_forward(geom_, algorithm_for(rc))) return nullptr;
    ensure_shape(y_, geom_.out_shape(), fmt_);
    op_.forward_stats(*rc.device, geom_, x.data(), weights(*rc.params), y_.data(), stats, in);
    return &y_;
  }

  /// A training forward writing y as bfloat16 bits into a buffer of this
  /// layer (ops::Conv2d::forward_bf16_dst: bf16 convolutions with a kernel
  /// for it, no bias), for a batch norm that reads bf16 (ConvBatchNorm);
  /// y_ is not written. Returns the bits, or nullptr when this cannot run
  /// (nothing done: call forward()).
  const std::uint16_t* forward_bf16(const Tensor<T>& x, RunContext<B, T>& rc, const std::uint16_t* x_bf16) {
    if (Bias || !rc.training()) return nullptr;
    prepare(x, rc, x_bf16);
    if (!op_.has_bf16_dst(*rc.device, geom_)) return nullptr;
    y_bf16_.resize(geom_.out_shape().size());
    op_.forward_bf16_dst(*rc.device, geom_, x.data(), weights(*rc.params), y_bf16_.data());
    return y_bf16_.data();
  }

  /// A training forward_bf16 whose input x was never written: it is the
  /// previous batch norm's input `bits` through its map
  /// (ops::Conv2d::forward_bf16_mapped, the own AMX kernel; mapped_why_not
  /// must be empty). x names the input (its tensor, sized); the backward's
  /// weight gradient applies the map again. With `stats` (2 * out channels),
  /// y's per-channel sums and sums of squares.
  const std::uint16_t* forward_bf16_mapped(const Tensor<T>& x, RunContext<B, T>& rc,
                                           const std::uint16_t* bits,
                                           const backend::onednn::amx::InputMap& map, double* stats) {
    if (Bias || !rc.training())
      throw ConfigError("layer '" + name_ + "' (Conv2d): a mapped input needs a training step and no bias");
    prepare(x, rc, nullptr);
    y_bf16_.resize(geom_.out_shape().size());
    op_.forward_bf16_mapped(*rc.device, geom_, x.data(), bits, map, weights(*rc.params), y_bf16_.data(),
                            stats);
    return y_bf16_.data();
  }
  /// Why forward_bf16_mapped cannot run at a batch of `n`, in words; empty
  /// where it can (step plans).
  std::string mapped_why_not(RunContext<B, T>& rc, std::size_t n) {
    if (Bias) return "it has a bias";
    if (!rc.training()) return "inference";
    ConvGeom g = geom_;
    g.n = n;
    return op_.mapped_why_not(*rc.device, g);
  }

  /// Whether a training forward_bf16 of a batch of `n` given its producer's
  /// bf16 copy of x (forward's x_bf16), and the backward after it, read
  /// x only through that copy: the bf16-output kernel exists and the
  /// weight gradient (if any) reads the kept bf16 copy too. The producer
  /// may then skip its float output (Sequential, ConvBatchNorm).
  bool reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
    if (Bias || !rc.training()) return false;
    ConvGeom g = geom_;
    g.n = n;
    return op_.has_bf16_dst(*rc.device, g) &&
           (!this->wants_grads(rc) || op_.bf16_weights_gradient(*rc.device, g));
  }

  /// Both passes (dx, dw, db) in one call of the op; where the bias alone
  /// requires a gradient (frozen weights), its sum over dy and dx alone.
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    const bool grads = this->wants_grads(rc), down = this->need_dx(rc);
    if (!grads && !down) return dx_;
    if (down) ensure_shape(dx_, geom_.in_shape(), fmt_);
    if (this->wants_bias_grad_only(rc)) {
      op_.bias_gradient(*rc.device, geom_, dy.data(), rc.params->grad(b_));
      if (down)
        op_.backward_data(*rc.device, geom_, dy.data(), weights(std::as_const(*rc.params)), dx_.data());
      return dx_;
    }
    op_.backward(*rc.device, geom_, x_->data(), dy.data(), weights(std::as_const(*rc.params)),
                 down ? dx_.data() : nullptr, grads ? rc.params->grad(w_) : nullptr,
                 grads && Bias ? rc.params->grad(b_) : nullptr);
    return dx_;
  }

  /// Where this backward can take dy as bfloat16 (ops::Conv2d::bf16_dy:
  /// bf16 convolutions whose passes needed now all run in bf16, no bias),
  /// or nullptr. ConvBatchNorm's batch norm writes its dx there and then
  /// calls backward_bf16_dy instead of backward.
  std::uint16_t* bf16_dy(RunContext<B, T>& rc) {
    if (Bias) return nullptr;
    const bool grads = this->wants_grads(rc), down = this->need_dx(rc);
    if (!grads && !down) return nullptr;
    return op_.bf16_dy(*rc.device, geom_, grads, down);
  }
  /// backward() with dy the values written into bf16_dy()'s buffer.
  const Tensor<T>& backward_bf16_dy(RunContext<B, T>& rc) {
    if (Bias)
      throw ConfigError("layer '" + name_ + "' (Conv2d): backward_bf16_dy on a convolution with bias");
    const bool grads = this->wants_grads(rc), down = this->need_dx(rc);
    if (down) ensure_shape(dx_, geom_.in_shape(), fmt_);
    op_.backward_bf16_dy(*rc.device, geom_, x_->data(), weights(std::as_const(*rc.params)),
                         down ? dx_.data() : nullptr, grads ? rc.params->grad(w_) : nullptr);
    return dx_;
  }

  /// Whether backward_bf16_dy can write this layer's dx as bfloat16 bits
  /// now (backward_bf16_dy_bits; ops::Conv2d::writes_bf16_dx): a dx it
  /// must produce, whose pass runs as oneDNN's bf16 forward kernel.
  bool writes_bf16_dx(RunContext<B, T>& rc) {
    return !Bias && this->need_dx(rc) && op_.writes_bf16_dx(*rc.device, geom_);
  }
  /// backward_bf16_dy with dx written as bfloat16 bits into `dx_bits` (the
  /// input's size) instead of dx_; needs writes_bf16_dx(rc).
  void backward_bf16_dy_bits(RunContext<B, T>& rc, std::uint16_t* dx_bits) {
    if (Bias) throw ConfigError("layer '" + name_ + "' (Conv2d): a bf16 dx of a convolution with bias");
    const bool grads = this->wants_grads(rc);
    op_.backward_bf16_dy(*rc.device, geom_, x_->data(), weights(std::as_const(*rc.params)), dx_bits,
                         grads ? rc.params->grad(w_) : nullptr);
  }

  // The backward a range of images at a time (ConvBatchNorm's ranges):
  // each range of dy is handed from the batch norm to the convolution while
  // it is in cache. Images are independent, so dx is backward()'s; the
  // weight gradient is the sum of the ranges' gradients (each one pass of
  // the op), added in range order.
  /// Sizes the input gradient for backward_images.
  void backward_begin(RunContext<B, T>& rc) {
    if (this->need_dx(rc)) ensure_shape(dx_, geom_.in_shape(), fmt_);
  }
  /// The backward of images [i0, i1), dy_images their output gradient (a
  /// caller's buffer of their size), ranges in order from image 0: their
  /// input gradient into dx (backward_end), their weight gradient written
  /// (i0 == 0) or added to the gradient.
  void backward_images(const T* dy_images, RunContext<B, T>& rc, std::size_t i0, std::size_t i1) {
    backward_range(rc, i0, i1, [&](const ConvGeom& g, const T* x, const T* w, T* dx, T* dw, T* db) {
      op_.backward(*rc.device, g, x, dy_images, w, dx, dw, db);
    });
  }
  /// Whether backward_images_bn can run (the own kernels take this
  /// geometry; no bias).
  bool direct_bn() const { return !Bias && op_.direct_bn(geom_); }
  /// One node in a step plan (nn/plan.hpp), with the fact whether the own
  /// conv + batch norm kernels take its geometry (and why not).
  /// In training, the hooks the training executor's rules call: its dy
  /// taken as bf16 bits written by the max pool or batch norm after it
  /// (pool_bf16_dx_to_conv, bn_bf16_dx_to_standalone_conv), where its
  /// backward passes run in bf16; its output written as bf16 alone for the
  /// max pool after it (conv_bf16_output_to_pool); its input read only as
  /// the bf16 copy the batch norm before it wrote alone
  /// (bn_bf16_output_alone); the GELU layer after it as its post-op, bf16
  /// out (conv_gelu_bf16_output).
  int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
    const int t = this->emit_node(b, in, rc, direct_why_not(rc, false));
    if (!rc.training()) {
      // Where this layer's own forward takes Winograd (fp32 3x3 stride 1,
      // asked or Auto at a batch <= 4: VGG-19's style transfer), it runs
      // itself: oneDNN 2.6 has no Winograd on the plain layouts the plan
      // executor's convolution uses (ops::ConvEpilogue), and its direct
      // kernel took 0.157 s against Winograd's 0.132 s for VGG-19's
      // forward at 250x333 (docs/BENCHMARKS.md, 2026-12-03).
      if (winograd_forward(b.key().batch)) {
        plan::Node& n = b.producer(t);
        n.run.reset();
        n.facts[plan::facts::kEpilogueConv] = plan::Fact::no(
            "its own forward runs Winograd here (fp32 3x3 stride 1, conv_algorithm Winograd, or Auto at a "
            "batch of 4 or fewer), which the plan executor's convolution cannot");
      }
      return t;
    }
    plan::Node& n = b.producer(t);
    ConvGeom g = geom_;
    g.n = b.key().batch;
    const bool grads = this->wants_grads(rc), down = this->need_dx(rc);
    const bool bits = !Bias && (grads || down) && op_.bf16_dy(*rc.device, g, grads, down) != nullptr;
    n.facts[plan::facts::kBf16OutputAlone] =
        !Bias && op_.has_bf16_dst(*rc.device, g)
            ? plan::Fact::yes()
            : plan::Fact::no(
                  Bias ? "a convolution with bias"
                       : "no bf16 kernel with a bf16 output for this geometry (or fp32 convolutions)");
    // With no backward (nothing before the GELU after it needs a gradient,
    // and nothing here trains), the GELU can be a post-op: its input is not kept.
    const bool backward_runs = grads || down;
    n.facts[plan::facts::kGeluBf16Output] =
        !backward_runs && op_.precision() == ConvPrecision::BF16 && op_.has_gelu_bf16_dst(*rc.device, g, Bias)
            ? plan::Fact::yes()
            : plan::Fact::no(backward_runs ? "its backward runs (it or a layer before it needs a gradient)"
                                           : "no bf16 kernel with a GELU post-op and a bf16 output for this "
                                             "geometry (or fp32 convolutions)");
    n.facts[plan::facts::kBf16InputOnly] =
        reads_only_bf16_input(rc, g.n)
            ? plan::Fact::yes()
            : plan::Fact::no(Bias ? "a convolution with bias"
                                  : "its kernels read the float input (fp32 convolutions, or no bf16 kernel "
                                    "with a bf16 output or weight gradient for this geometry)");
    n.facts[plan::facts::kDyBits] =
        bits ? plan::Fact::yes()
             : plan::Fact::no(Bias ? "a convolution with bias"
                              : !(grads || down)
                                  ? "no backward"
                                  : "its backward passes do not all run in bf16 (fp32 convolutions, "
                                    "or no bf16 kernel for this geometry)");
    plan::LayerRun<B, T> r;
    r.forward = [this](const Tensor<T>& x, RunContext<B, T>& c, plan::Links<T>& k) -> const Tensor<T>& {
      return forward(x, c, k);
    };
    r.backward = [this](const Tensor<T>& dy, RunContext<B, T>& c, plan::Links<T>&) -> const Tensor<T>& {
      return backward(dy, c);
    };
    r.pair.dy_bits = [this](RunContext<B, T>& c) { return bf16_dy(c); };
    r.pair.skip_float_output = [this] { skip_float_output_once(); };
    r.pair.require_bf16_input = [this] { require_bf16_input(); };
    r.pair.gelu_bits_output = [this] { gelu_bits_output_once(); };
    r.pair.backward_bits = [this](const Tensor<T>* dy, RunContext<B, T>& c,
                                  std::uint16_t* dx_bits) -> const Tensor<T>& {
      if (dx_bits) throw std::logic_error("layer '" + name_ + "' (Conv2d): asked for its dx as bf16 bits");
      return dy ? backward(*dy, c) : backward_bf16_dy(c);
    };
    n.run = std::move(r);
    return t;
  }
  /// Whether an inference forward of a batch of `n` runs Winograd: the op's
  /// rule under this layer's policy (what an inference call sets), float.
  bool winograd_forward(std::size_t n) const {
    ConvGeom g = geom_;
    g.n = n;
    return op_.precision() == ConvPrecision::F32 &&
           ops::Conv2d<backend::OneDnn, T>::want_winograd(policy_, g);
  }
  /// Why direct_bn() (forward: direct_forward_next(rc)) is false, in
  /// words (step plans, nn/plan.hpp); empty where it is true.
  std::string direct_why_not(const RunContext<B, T>& rc, bool forward) const {
    if (Bias) return "the backend has no own conv + batch norm kernels";
    if (forward && !rc.training()) return "inference";
    return op_.direct_why_not(geom_, algorithm_for(rc), forward);
  }
  /// Whether a training forward_bf16 can write y as bf16 bits (step plans).
  bool has_bf16_output(RunContext<B, T>& rc) {
    return !Bias && rc.training() && op_.has_bf16_dst(*rc.device, geom_);
  }
  /// Whether the next training forward under `rc` can run forward_stats
  /// (with the algorithm that forward will set: frozen weights keep Auto,
  /// which may take Winograd).
  bool direct_forward_next(const RunContext<B, T>& rc) const {
    return !Bias && rc.training() && op_.direct_forward(geom_, algorithm_for(rc));
  }
  /// backward_images with dy_images the input gradient of the batch norm
  /// after this layer, given as that batch norm's map `m` over the whole
  /// batch (ops::BatchNorm::grad_map): the op computes each image of it in
  /// its kernels' prologue (ConvBatchNorm). Needs direct_bn(). With `e`
  /// (not null; pointers at the batch's first image, as m's), the op's
  /// epilogue on each image of dx (ops::Conv2d::BnEpilogue: a residual
  /// sum, an earlier batch norm's backward sums, added into e->sums).
  /// With `in` (not null; at the batch's first image), x's values are not
  /// read: the input given as an earlier batch norm's map (forward_stats).
  template <class Map, class Epilogue>
  void backward_images_bn(const Map& m, RunContext<B, T>& rc, std::size_t i0, std::size_t i1,
                          const Epilogue* e, const ops::BnNormMap<T>* in) {
    if (Bias) throw ConfigError("layer '" + name_ + "' (Conv2d): backward_images_bn is not available here");
    Map mi = m;
    mi.x += i0 * this->out_image();
    mi.dy += i0 * this->out_image();
    Epilogue ei{};
    if (e) {  // at image i0
      const std::size_t o = i0 * this->in_image();
      ei = *e;
      if (ei.other) ei.other += o;
      if (ei.mask_bits) ei.mask_bits += o / 16;
      if (ei.mask_relu) ei.mask_relu += o;
      if (ei.x) ei.x += o;
    }
    ops::BnNormMap<T> ni{};
    if (in) {
      ni = *in;
      ni.x += i0 * this->in_image();
    }
    backward_range(rc, i0, i1, [&](const ConvGeom& g, const T* x, const T* w, T* dx, T* dw, T*) {
      op_.backward_images_bn(*rc.device, g, x, mi, w, dx, dw, e ? &ei : nullptr, in ? &ni : nullptr);
    });
  }
  /// The input gradient backward_images wrote.
  const Tensor<T>& backward_end() const { return dx_; }
  /// Between backward_begin and backward_end: the input gradient of image
  /// i0 on (backward_images of the images before has written them), for
  /// ConvBatchNorm to finish a range in place while it is in cache
  /// (plan::GradSum); null where this backward computes no dx.
  T* input_gradient_from(RunContext<B, T>& rc, std::size_t i0) {
    return this->need_dx(rc) ? dx_.data() + i0 * this->in_image() : nullptr;
  }
  /// How many forward passes read the bf16 copy of x its producer wrote
  /// (forward's x_bf16) instead of rounding x (tests).
  std::size_t bf16_inputs() const { return op_.bf16_inputs(); }

 private:
  // Everything forward does before the op: what every backend does
  // (take_input), the algorithm and what the op keeps for backward.
  void prepare(const Tensor<T>& x, RunContext<B, T>& rc, const std::uint16_t* x_bf16) {
    this->take_input(x);
    // Auto never trains weights with Winograd: a replica's result must not
    // depend on how many images it holds (ops/conv_algorithm.hpp).
    op_.set_algorithm(algorithm_for(rc));
    op_.set_keep_input(rc.training() && rc.param_grads);
    op_.set_bf16_input(x_bf16);  // the copy of x its writer made (forward's x_bf16)
  }
  // The algorithm a forward under rc runs with (prepare).
  ConvAlgorithm algorithm_for(const RunContext<B, T>& rc) const {
    return policy_ == ConvAlgorithm::Auto && rc.training() && rc.param_grads ? ConvAlgorithm::Direct
                                                                             : policy_;
  }
  // The backward of images [i0, i1) through run(g, x, w, dx, dw, db): their
  // input gradient into dx_, their weight gradient written (i0 == 0) or
  // computed into dw_part_ and added (a later range).
  template <class Run>
  void backward_range(RunContext<B, T>& rc, std::size_t i0, std::size_t i1, Run&& run) {
    const bool grads = this->wants_grads(rc), down = this->need_dx(rc);
    const ConvGeom g = images(i0, i1);
    T* dw = nullptr;
    T* db = nullptr;
    if (grads) {
      dw = rc.params->grad(w_);
      if (Bias) db = rc.params->grad(b_);
      if (i0 > 0) {  // a later range: its gradient into dw_part_, then added
        dw_part_.resize(rc.params->info(w_).size + (Bias ? kOut : 0));
        dw = dw_part_.data();
        if (Bias) db = dw + rc.params->info(w_).size;
      }
    }
    T* dx = down ? dx_.data() + i0 * this->in_image() : nullptr;
    run(g, x_->data() + i0 * this->in_image(), weights(std::as_const(*rc.params)), dx, dw, db);
    if (grads && i0 > 0) {
      const std::size_t nw = rc.params->info(w_).size;
      add_.add(*rc.device, nw, rc.params->grad(w_), dw_part_.data(), rc.params->grad(w_), false);
      if (Bias)
        add_.add(*rc.device, kOut, rc.params->grad(b_), dw_part_.data() + nw, rc.params->grad(b_), false);
    }
  }
  // The geometry of images [i0, i1) of the current batch.
  ConvGeom images(std::size_t i0, std::size_t i1) const {
    if (i1 <= i0 || i1 > geom_.n)
      throw ConfigError("layer '" + name_ + "' (Conv2d): images [" + std::to_string(i0) + ", " +
                        std::to_string(i1) + ") of a batch of " + std::to_string(geom_.n));
    ConvGeom g = geom_;
    g.n = i1 - i0;
    return g;
  }
  // The weights for the op with their version: the op keeps a copy in its
  // primitive's layout and reorders again only when the version changed
  // (core/params.hpp).
  const T* weights(const Parameters<T>& params) {
    op_.set_weights_version(params.version(w_));
    return params.value(w_);
  }

  ConvAlgorithm policy_ = ConvAlgorithm::Auto;
  HostVector<std::uint16_t> y_bf16_;  // forward_bf16's output
  bool bf16_alone_once_ = false;      // skip_float_output_once, for the next forward
  bool expect_copy_ = false;          // require_bf16_input, for the next forward
  bool gelu_once_ = false;            // gelu_bits_output_once, for the next forward
  std::size_t gelu_outputs_ = 0;
  std::size_t bf16_outputs_alone_ = 0;
  Buffer<T> dw_part_;       // backward_images: a later range's weight (and bias) gradient
  ops::Eltwise<B, T> add_;  // which is added to the first's
};

}  // namespace cifarnet::detail
