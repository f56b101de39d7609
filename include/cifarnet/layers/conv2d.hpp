// cifarnet/layers/conv2d.hpp — 2-D convolution.
//
// Conv2d<In, Out, K, S, P, Bias>: K×K kernel, stride S, padding P (TF SAME,
// VALID, or Explicit = ResNet's fixed padding for strided convs), optional
// bias. In = 0 infers the input channels at build time. Parameters:
// `weights` (K, K, In, Out) HWIO, TF's default Glorot-uniform initializer, and
// `biases` (Out) initialized to zero. The convolution algorithm and
// precision come from NetOptions::conv_algorithm and conv_precision on
// backends that offer a choice (oneDNN). Bias is WithBias or NoBias (the
// default; layers/options.hpp).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/options.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <int In, int Out, int K, int S = 1, Padding P = Padding::Same, auto BiasOpt = NoBias>
struct Conv2d : LayerBase {
  static_assert(detail::BiasOption<BiasOpt>::valid,
                "cifarnet: Conv2d<In, Out, K, S, P, Bias>: Bias must be WithBias or NoBias (not a bool).");
  static_assert(In >= 0, "cifarnet: Conv2d<In, ...>: In must be >= 0 (0 = inferred from the input).");
  static_assert(Out > 0, "cifarnet: Conv2d<In, Out, ...>: Out (output channels) must be positive.");
  static_assert(K > 0, "cifarnet: Conv2d<In, Out, K>: kernel size K must be positive.");
  static_assert(S > 0, "cifarnet: Conv2d<In, Out, K, S>: stride S must be positive.");
  static constexpr const char* kind = "conv";
  static constexpr int in_channels = In == 0 ? -1 : In;
  static constexpr int out_channels(int) { return Out; }
  static constexpr bool Bias = detail::BiasOption<BiasOpt>::on;
  static plan::Attrs plan_attrs() {
    plan::Attrs a;
    a.kernel = K;
    a.stride = S;
    a.bias = Bias;
    return a;
  }

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      if (In != 0 && in.c != std::size_t(In))
        throw ShapeError("layer '" + name_ + "' (Conv2d) expects " + std::to_string(In) +
                         " input channels but the input shape is " + in.str());
      geom_ = ConvGeom::make(fmt_, in, Out, K, S, P);
      if constexpr (backend_traits<B>::conv_algorithms)
        policy_ = ctx.options ? ctx.options->conv_algorithm : ConvAlgorithm::Auto;
      if constexpr (backend_traits<B>::bf16_convolutions)
        op_.set_precision(ctx.options ? ctx.options->conv_precision : ConvPrecision::F32);
      if constexpr (backend_traits<B>::conv_bn_prologue)
        op_.set_direct_kernels(!ctx.options || ctx.options->direct_conv_bn);
      w_ = ctx.add_param(scope, "weights", {std::size_t(K), std::size_t(K), in.c, std::size_t(Out)},
                         Initializer::glorot_uniform());
      if constexpr (Bias) b_ = ctx.add_param(scope, "biases", {std::size_t(Out)}, Initializer::zeros());
      return {in.n, std::size_t(Out), geom_.oh, geom_.ow};
    }

    /// `x_bf16`: a bf16 copy of x its writer made in the same pass, which a
    /// bf16 convolution then reads instead of rounding x.
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc,
                             const std::uint16_t* x_bf16 = nullptr) {
      prepare(x, rc, x_bf16);
      ensure_shape(y_, geom_.out_shape(), fmt_);
      const Parameters<T>& params = *rc.params;
      op_.forward(*rc.device, geom_, x.data(), weights(params), Bias ? params.value(b_) : nullptr, y_.data());
      return y_;
    }

    /// forward() with the hand-overs of a training plan (plan::Links).
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
      return forward(x, rc, k.input_bf16);
    }

    /// A training forward in the backend's own kernels (conv_bn_prologue,
    /// direct_bn()) that also takes the batch norm statistics of its output
    /// (2 Out: the means, then the biased variances, in double) image by
    /// image while each is in cache (ops::Conv2d::forward_stats), for the
    /// batch norm after it (ConvBatchNorm). Returns y, or nullptr where this
    /// cannot run (nothing done: call forward()). With `in` (not null), x's
    /// values are not read: it is an earlier batch norm's output left
    /// unwritten, given as its map (ops::BnNormMap), whose images the op
    /// computes itself.
    const Tensor<T>* forward_stats(const Tensor<T>& x, RunContext<B, T>& rc, double* stats,
                                   const ops::BnNormMap<T>* in) {
      if constexpr (backend_traits<B>::conv_bn_prologue && !Bias) {
        if (!direct_forward_next(rc)) return nullptr;
        prepare(x, rc, nullptr);
        if (!op_.direct_forward(geom_, algorithm_for(rc))) return nullptr;
        ensure_shape(y_, geom_.out_shape(), fmt_);
        op_.forward_stats(*rc.device, geom_, x.data(), weights(*rc.params), y_.data(), stats, in);
        return &y_;
      } else {
        (void)x, (void)rc, (void)stats, (void)in;
        return nullptr;
      }
    }

    /// A training forward writing y as bfloat16 bits into a buffer of this
    /// layer (ops::Conv2d::forward_bf16_dst: bf16 convolutions with a kernel
    /// for it, no bias), for a batch norm that reads bf16 (ConvBatchNorm);
    /// y_ is not written. Returns the bits, or nullptr when this cannot run
    /// (nothing done: call forward()).
    const std::uint16_t* forward_bf16(const Tensor<T>& x, RunContext<B, T>& rc, const std::uint16_t* x_bf16) {
      if constexpr (backend_traits<B>::bf16_gradients && !Bias) {
        if (!rc.training()) return nullptr;
        prepare(x, rc, x_bf16);
        if (!op_.has_bf16_dst(*rc.device, geom_)) return nullptr;
        y_bf16_.resize(geom_.out_shape().size());
        op_.forward_bf16_dst(*rc.device, geom_, x.data(), weights(*rc.params), y_bf16_.data());
        return y_bf16_.data();
      } else {
        (void)x, (void)rc, (void)x_bf16;
        return nullptr;
      }
    }

    /// Whether a training forward_bf16 of a batch of `n` given its producer's
    /// bf16 copy of x (forward's x_bf16), and the backward after it, read
    /// x only through that copy: the bf16-output kernel exists and the
    /// weight gradient (if any) reads the kept bf16 copy too. The producer
    /// may then skip its float output (Sequential, ConvBatchNorm).
    bool reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (backend_traits<B>::bf16_gradients && backend_traits<B>::bf16_convolutions && !Bias) {
        if (!rc.training()) return false;
        ConvGeom g = geom_;
        g.n = n;
        return op_.has_bf16_dst(*rc.device, g) &&
               (!wants_grads(rc) || op_.bf16_weights_gradient(*rc.device, g));
      } else {
        return (void)rc, (void)n, false;
      }
    }

    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const bool grads = wants_grads(rc), down = this->need_dx(rc);
      if constexpr (backend_traits<B>::joint_conv_backward) {
        if (!grads && !down) return dx_;
        if (down) ensure_shape(dx_, geom_.in_shape(), fmt_);
        op_.backward(*rc.device, geom_, x_->data(), dy.data(), weights(std::as_const(*rc.params)),
                     down ? dx_.data() : nullptr, grads ? rc.params->grad(w_) : nullptr,
                     grads && Bias ? rc.params->grad(b_) : nullptr);
        return dx_;
      }
      if (grads)
        op_.backward_weights(*rc.device, geom_, x_->data(), dy.data(), rc.params->grad(w_),
                             Bias ? rc.params->grad(b_) : nullptr);
      if (!down) return dx_;
      ensure_shape(dx_, geom_.in_shape(), fmt_);
      op_.backward_data(*rc.device, geom_, dy.data(), weights(std::as_const(*rc.params)), dx_.data());
      return dx_;
    }

    /// Where this backward can take dy as bfloat16 (ops::Conv2d::bf16_dy:
    /// bf16 convolutions whose passes needed now all run in bf16, no bias),
    /// or nullptr. ConvBatchNorm's batch norm writes its dx there and then
    /// calls backward_bf16_dy instead of backward.
    std::uint16_t* bf16_dy(RunContext<B, T>& rc) {
      if constexpr (backend_traits<B>::bf16_gradients && !Bias) {
        const bool grads = wants_grads(rc), down = this->need_dx(rc);
        if (!grads && !down) return nullptr;
        return op_.bf16_dy(*rc.device, geom_, grads, down);
      } else {
        (void)rc;
        return nullptr;
      }
    }
    /// backward() with dy the values written into bf16_dy()'s buffer.
    const Tensor<T>& backward_bf16_dy(RunContext<B, T>& rc) {
      if constexpr (backend_traits<B>::bf16_gradients && !Bias) {
        const bool grads = wants_grads(rc), down = this->need_dx(rc);
        if (down) ensure_shape(dx_, geom_.in_shape(), fmt_);
        op_.backward_bf16_dy(*rc.device, geom_, x_->data(), weights(std::as_const(*rc.params)),
                             down ? dx_.data() : nullptr, grads ? rc.params->grad(w_) : nullptr);
      } else {
        throw ConfigError("layer '" + name_ +
                          "' (Conv2d): backward_bf16_dy on a backend without bf16 gradients");
      }
      return dx_;
    }

    /// Whether backward_bf16_dy can write this layer's dx as bfloat16 bits
    /// now (backward_bf16_dy_bits; ops::Conv2d::writes_bf16_dx): a dx it
    /// must produce, whose pass runs as oneDNN's bf16 forward kernel.
    bool writes_bf16_dx(RunContext<B, T>& rc) {
      if constexpr (backend_traits<B>::bf16_gradients && !Bias)
        return this->need_dx(rc) && op_.writes_bf16_dx(*rc.device, geom_);
      else
        return (void)rc, false;
    }
    /// backward_bf16_dy with dx written as bfloat16 bits into `dx_bits` (the
    /// input's size) instead of dx_; needs writes_bf16_dx(rc).
    void backward_bf16_dy_bits(RunContext<B, T>& rc, std::uint16_t* dx_bits) {
      if constexpr (backend_traits<B>::bf16_gradients && !Bias) {
        const bool grads = wants_grads(rc);
        op_.backward_bf16_dy(*rc.device, geom_, x_->data(), weights(std::as_const(*rc.params)), dx_bits,
                             grads ? rc.params->grad(w_) : nullptr);
      } else {
        (void)rc, (void)dx_bits;
        throw ConfigError("layer '" + name_ + "' (Conv2d): a bf16 dx on a backend without bf16 gradients");
      }
    }

    // The backward a range of images at a time (ConvBatchNorm, on a backend
    // with chunked_conv_bn): each range of dy is handed from the batch norm to
    // the convolution while it is in cache. Images are independent, so dx is
    // backward()'s; the weight gradient is the sum of the ranges' gradients
    // (each one pass of the op), added in range order.
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
        if constexpr (backend_traits<B>::joint_conv_backward) {
          op_.backward(*rc.device, g, x, dy_images, w, dx, dw, db);
        } else {
          if (dw) op_.backward_weights(*rc.device, g, x, dy_images, dw, db);
          if (dx) op_.backward_data(*rc.device, g, dy_images, w, dx);
        }
      });
    }
    /// Whether backward_images_bn can run (a backend with conv_bn_prologue
    /// whose own kernels take this geometry; no bias).
    bool direct_bn() const {
      if constexpr (backend_traits<B>::conv_bn_prologue && !Bias)
        return op_.direct_bn(geom_);
      else
        return false;
    }
    /// One node in a step plan (nn/plan.hpp), with the fact whether the
    /// backend's own conv + batch norm kernels take its geometry (and why
    /// not): what the rules say about a standalone convolution.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const int t = b.node(name_, Conv2d::kind, {in}, geom_.out_shape(), Conv2d::plan_attrs());
      const std::string why = direct_why_not(rc, false);
      plan::Node& n = b.producer(t);
      n.facts[plan::facts::kOwnKernels] = why.empty() ? plan::Fact::yes() : plan::Fact::no(why);
      if (!rc.training()) {  // the plan executor runs it itself, with the epilogue the rules give it
        n.facts[plan::facts::kEpilogueConv] = plan::Fact::yes();
        n.run =
            plan::ConvRun<B, T>{geom_, [this](RunContext<B, T>& c) {
                                  const Parameters<T>& p = *c.params;
                                  return plan::FoldedWeights<T>{p.value(w_), Bias ? p.value(b_) : nullptr,
                                                                p.version(w_) + (Bias ? p.version(b_) : 0)};
                                }};
      }
      return t;
    }
    /// Why direct_bn() (forward: direct_forward_next(rc)) is false, in
    /// words (step plans, nn/plan.hpp); empty where it is true.
    std::string direct_why_not(const RunContext<B, T>& rc, bool forward) const {
      if constexpr (backend_traits<B>::conv_bn_prologue && !Bias) {
        if (forward && !rc.training()) return "inference";
        return op_.direct_why_not(geom_, algorithm_for(rc), forward);
      } else {
        return (void)rc, (void)forward, "the backend has no own conv + batch norm kernels";
      }
    }
    /// Whether backward computes dx under `rc` (step plans).
    bool needs_input_gradient(const RunContext<B, T>& rc) const { return this->need_dx(rc); }
    /// Whether a training forward_bf16 can write y as bf16 bits (step plans).
    bool has_bf16_output(RunContext<B, T>& rc) {
      if constexpr (backend_traits<B>::bf16_gradients && !Bias)
        return rc.training() && op_.has_bf16_dst(*rc.device, geom_);
      else
        return (void)rc, false;
    }
    /// Whether the next training forward under `rc` can run forward_stats
    /// (with the algorithm that forward will set: frozen weights keep Auto,
    /// which may take Winograd).
    bool direct_forward_next(const RunContext<B, T>& rc) const {
      if constexpr (backend_traits<B>::conv_bn_prologue && !Bias)
        return rc.training() && op_.direct_forward(geom_, algorithm_for(rc));
      else
        return (void)rc, false;
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
      if constexpr (backend_traits<B>::conv_bn_prologue && !Bias) {
        Map mi = m;
        mi.x += i0 * out_image();
        mi.dy += i0 * out_image();
        Epilogue ei{};
        if (e) {  // at image i0
          const std::size_t o = i0 * in_image();
          ei = *e;
          if (ei.other) ei.other += o;
          if (ei.mask_bits) ei.mask_bits += o / 16;
          if (ei.mask_relu) ei.mask_relu += o;
          if (ei.x) ei.x += o;
        }
        ops::BnNormMap<T> ni{};
        if (in) {
          ni = *in;
          ni.x += i0 * in_image();
        }
        backward_range(rc, i0, i1, [&](const ConvGeom& g, const T* x, const T* w, T* dx, T* dw, T*) {
          op_.backward_images_bn(*rc.device, g, x, mi, w, dx, dw, e ? &ei : nullptr, in ? &ni : nullptr);
        });
      } else {
        (void)m, (void)rc, (void)i0, (void)i1, (void)e, (void)in;
        throw ConfigError("layer '" + name_ + "' (Conv2d): backward_images_bn is not available here");
      }
    }
    /// The input gradient backward_images wrote.
    const Tensor<T>& backward_end() const { return dx_; }
    /// Between backward_begin and backward_end: the input gradient of image
    /// i0 on (backward_images of the images before has written them), for
    /// ConvBatchNorm to finish a range in place while it is in cache
    /// (plan::GradSum); null where this backward computes no dx.
    T* input_gradient_from(RunContext<B, T>& rc, std::size_t i0) {
      return this->need_dx(rc) ? dx_.data() + i0 * in_image() : nullptr;
    }
    /// The input of the last forward (null before one): which tensor's
    /// gradient this layer computes.
    const T* input_data() const { return x_ ? x_->data() : nullptr; }
    /// Elements of one image of the input and of the output.
    std::size_t in_image() const { return geom_.ic * geom_.ih * geom_.iw; }
    std::size_t out_image() const { return geom_.oc * geom_.oh * geom_.ow; }

    const ConvGeom& geometry() const { return geom_; }
    /// How many forward passes read the bf16 copy of x its producer wrote
    /// (forward's x_bf16) instead of rounding x (tests).
    std::size_t bf16_inputs() const {
      if constexpr (backend_traits<B>::bf16_convolutions)
        return op_.bf16_inputs();
      else
        return 0;
    }
    /// The arena id of `weights` (layers/conv_bn.hpp folds batch norm into it).
    std::size_t weights_id() const { return w_; }

   private:
    // Everything forward does before the op: input check, batch size, the
    // kept input, the algorithm and what the op keeps for backward.
    void prepare(const Tensor<T>& x, RunContext<B, T>& rc, const std::uint16_t* x_bf16) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_.n = s.n;
      x_ = &x;
      // Auto never trains weights with Winograd: a replica's result must not
      // depend on how many images it holds (ops/conv_algorithm.hpp).
      if constexpr (backend_traits<B>::conv_algorithms) op_.set_algorithm(algorithm_for(rc));
      if constexpr (backend_traits<B>::bf16_convolutions) {
        op_.set_keep_input(rc.training() && rc.param_grads);
        op_.set_bf16_input(x_bf16);  // the copy of x its writer made (forward's x_bf16)
      } else {
        (void)x_bf16;
      }
    }
    // The algorithm a forward under rc runs with (prepare).
    ConvAlgorithm algorithm_for(const RunContext<B, T>& rc) const {
      if constexpr (backend_traits<B>::conv_algorithms)
        return policy_ == ConvAlgorithm::Auto && rc.training() && rc.param_grads ? ConvAlgorithm::Direct
                                                                                 : policy_;
      else
        return (void)rc, ConvAlgorithm::Direct;
    }
    // The backward of images [i0, i1) through run(g, x, w, dx, dw, db): their
    // input gradient into dx_, their weight gradient written (i0 == 0) or
    // computed into dw_part_ and added (a later range).
    template <class Run>
    void backward_range(RunContext<B, T>& rc, std::size_t i0, std::size_t i1, Run&& run) {
      const bool grads = wants_grads(rc), down = this->need_dx(rc);
      const ConvGeom g = images(i0, i1);
      T* dw = nullptr;
      T* db = nullptr;
      if (grads) {
        dw = rc.params->grad(w_);
        if constexpr (Bias) db = rc.params->grad(b_);
        if (i0 > 0) {  // a later range: its gradient into dw_part_, then added
          dw_part_.resize(rc.params->info(w_).size + (Bias ? std::size_t(Out) : 0));
          dw = dw_part_.data();
          if constexpr (Bias) db = dw + rc.params->info(w_).size;
        }
      }
      T* dx = down ? dx_.data() + i0 * in_image() : nullptr;
      run(g, x_->data() + i0 * in_image(), weights(std::as_const(*rc.params)), dx, dw, db);
      if (grads && i0 > 0) {
        const std::size_t nw = rc.params->info(w_).size;
        add_.add(*rc.device, nw, rc.params->grad(w_), dw_part_.data(), rc.params->grad(w_), false);
        if constexpr (Bias)
          add_.add(*rc.device, std::size_t(Out), rc.params->grad(b_), dw_part_.data() + nw,
                   rc.params->grad(b_), false);
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
    // Weight gradients unless frozen (Model::set_weight_gradients) or none
    // of this layer's parameters requires one (Parameters::requires_grad).
    bool wants_grads(const RunContext<B, T>& rc) const {
      return rc.param_grads && (rc.params->requires_grad(w_) || (Bias && rc.params->requires_grad(b_)));
    }
    // The weights for the op; a backend that caches a copy of them in its own
    // layout gets their version (core/params.hpp).
    const T* weights(const Parameters<T>& params) {
      if constexpr (backend_traits<B>::versioned_weights) op_.set_weights_version(params.version(w_));
      return params.value(w_);
    }

    ops::Conv2d<B, T> op_;
    ConvGeom geom_;
    std::size_t w_ = 0, b_ = 0;
    ConvAlgorithm policy_ = ConvAlgorithm::Auto;
    const Tensor<T>* x_ = nullptr;
    std::vector<std::uint16_t> y_bf16_;  // forward_bf16's output (host backends only)
    Buffer<T> dw_part_;                  // backward_images: a later range's weight (and bias) gradient
    ops::Eltwise<B, T> add_;             // which is added to the first's
  };
};

}  // namespace cifarnet
