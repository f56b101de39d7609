// cifarnet/layers/pool.hpp — max and average pooling with TF semantics.
//
// MaxPool2d<K, S, P> and AvgPool2d<K, S, P>: K×K window, stride S, padding P
// (SAME by default). With SAME, padded positions never win a max and are
// excluded from the average (TF's avg_pool). GlobalAvgPool averages each
// channel over h·w and returns (n, c, 1, 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <PoolKind Kind, int K, int S, Padding P = Padding::Same>
struct Pool2d : LayerBase {
  static_assert(K > 0 && S > 0, "cifarnet: Pool2d<K, S>: window K and stride S must be positive.");
  static_assert(P != Padding::Explicit, "cifarnet: Pool2d supports Padding::Same and Padding::Valid.");
  static constexpr const char* kind = Kind == PoolKind::Max ? "max_pool" : "avg_pool";
  static plan::Attrs plan_attrs() {
    plan::Attrs a;
    a.kernel = K;
    a.stride = S;
    return a;
  }

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      geom_ = ConvGeom::make(fmt_, in, in.c, K, S, P);
      return {in.n, in.c, geom_.oh, geom_.ow};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      plan::Links<T> none;
      return forward(x, rc, none);
    }
    /// forward() with the hand-overs of a training plan (plan::Links): the
    /// bf16 copy of x, read instead of x after require_bf16_input.
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_.n = s.n;
      ensure_shape(y_, {s.n, s.c, geom_.oh, geom_.ow}, fmt_);
      x_ = &x;
      // In place into the channel pad after it (pad_into_once): y_ sized, not written.
      const Padded pad = std::exchange(pad_next_, Padded{});
      padded_ = pad.dst != nullptr;
      const bool bits_out = std::exchange(bits_alone_once_, false);
      if (std::exchange(expect_copy_, false)) {  // the producer skipped its float output
        if constexpr (kBf16In) {
          if (k.input_bf16 && decltype(op_)::reads_bf16_input(geom_, Kind)) {
            if constexpr (Kind == PoolKind::Max) {  // the argmax kept for the float x it stands for
              if (bits_out) {  // pool_bf16_output_to_bn: y as its bf16 copy alone (exact: values of x)
                y_bits_.resize(y_.size());
                op_.forward_bf16_io(*rc.device, geom_, rc.training(), k.input_bf16, y_bits_.data(), x.data());
                k.copy = y_bits_.data();
                k.copy_of = y_.data();
                ++bf16_outputs_alone_;
              } else {
                op_.forward_bf16_input(*rc.device, geom_, rc.training(), k.input_bf16, y_.data(), x.data());
              }
            } else if (padded_)
              pad_forward(rc, k.input_bf16, pad);
            else
              op_.forward_bf16_input(*rc.device, geom_, k.input_bf16, y_.data());
            ++bf16_inputs_;
            return y_;
          }
        }
        throw ConfigError("layer '" + name_ +
                          "': its input's float values were skipped for a bf16 copy that is not there");
      }
      if (bits_out)
        throw ConfigError("layer '" + name_ +
                          "': a bf16-only output asked of a pool that reads a float input");
      if (padded_) {
        pad_forward(rc, x.data(), pad);
        return y_;
      }
      op_.forward(*rc.device, geom_, Kind, rc.training(), x.data(), y_.data());
      return y_;
    }

    // Average pooling written in place into the ChannelPad after it
    // (pool_into_pad; backend_traits<B>::pool_pad_in_place):
    // that layer's output, at its channel `before`, pixels `channels`
    // apart; y_ is then sized but not written, and the backward reads the
    // gradient from the padded one, which the ChannelPad hands on as it is.
    static constexpr bool pool_pad_source = Kind == PoolKind::Avg;
    /// Whether the next forward of a batch of `n` can write in place so.
    bool can_pad_in_place(std::size_t n) const {
      if constexpr (backend_traits<B>::pool_pad_in_place && Kind == PoolKind::Avg) {
        ConvGeom g = geom_;
        g.n = n;
        return decltype(op_)::pads_in_place(g, Kind);
      } else {
        return (void)n, false;
      }
    }
    /// One node in a step plan (nn/plan.hpp), with the fact whether it can
    /// write in place into a ChannelPad after it at the plan's batch.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const int t = b.node(name_, kind, {in}, geom_.out_shape(), plan_attrs());
      if (rc.training() &&
          (pool_pad_source || kBf16Dx)) {  // the training executor's hooks (nn/train_executor.hpp)
        plan::LayerRun<B, T> r;
        r.forward = [this](const Tensor<T>& x, RunContext<B, T>& c, plan::Links<T>& k) -> const Tensor<T>& {
          return forward(x, c, k);
        };
        r.backward = [this](const Tensor<T>& dy, RunContext<B, T>& c, plan::Links<T>&) -> const Tensor<T>& {
          return backward(dy, c);
        };
        r.pair.pad_into = [this](const plan::PadTarget<T>& p) {
          pad_into_once(p.dst, p.channels, p.before, static_cast<detail::PaddedInput*>(p.written));
        };
        r.pair.require_bf16_input = [this] { require_bf16_input(); };
        r.pair.skip_float_output = [this] { skip_float_output_once(); };
        r.pair.pooled_gradient = [this](std::size_t& before, std::size_t& channels, std::size_t& stride) {
          if (!wrote_padded_windows()) return false;
          before = pad_before_, channels = pad_channels_, stride = S;
          return true;
        };
        r.pair.backward_bits = [this](const Tensor<T>* dy, RunContext<B, T>& c,
                                      std::uint16_t* dx_bits) -> const Tensor<T>& {
          return backward_bits(*dy, c, dx_bits);
        };
        b.producer(t).run = std::move(r);
      }
      b.producer(t).facts[plan::facts::kDxBits] =
          writes_bf16_dx(rc, b.key().batch)
              ? plan::Fact::yes()
              : plan::Fact::no(kBf16Dx
                                   ? "the pool's geometry is not one its own kernels take, or no dx needed"
                                   : "no bf16 dx from this pool on this backend");
      b.producer(t).facts[plan::facts::kPadsInPlace] =
          can_pad_in_place(b.key().batch)
              ? plan::Fact::yes()
              : plan::Fact::no(backend_traits<B>::pool_pad_in_place && Kind == PoolKind::Avg
                                   ? "the pool's geometry is not one it writes into a pad"
                                   : "no in-place pooling into a pad on this backend");
      b.producer(t).facts[plan::facts::kBf16OutputAlone] =
          writes_bf16_alone(rc, b.key().batch)
              ? plan::Fact::yes()
              : plan::Fact::no(kBf16Dx ? "the pool reads float x here (fp32 training, or its geometry)"
                                       : "no bf16-only output from this pool on this backend");
      b.producer(t).facts[plan::facts::kBf16InputOnly] =
          reads_only_bf16_input(rc, b.key().batch)
              ? plan::Fact::yes()
              : plan::Fact::no(kBf16In ? "the pool reads float x here (fp32 training, or its geometry)"
                                       : "no bf16 input for this pool on this backend");
      return t;
    }
    /// The next forward writes there (`written` then records what it wrote).
    void pad_into_once(T* dst, std::size_t channels, std::size_t before, detail::PaddedInput* written) {
      pad_next_ = {dst, channels, before, written};
    }
    /// Whether the last forward wrote in place (pad_into_once), with a
    /// window equal to the stride (the backward is Eltwise::add_pooled's).
    bool wrote_padded_windows() const { return padded_ && K == S; }
    static constexpr std::size_t stride() { return std::size_t(S); }
    /// Forwards written in place into a channel pad (tests).
    std::size_t padded_outputs() const { return padded_outputs_; }
    /// Whether a training forward of a batch of `n` can read x only through
    /// its producer's bf16 copy (pooling on backends with bf16 hand-overs,
    /// where the op takes bf16 x; the backward reads no x: the bf16 residual
    /// stream's average pool, bf16_residual_stream; a max pool after a bf16
    /// convolution, conv_bf16_output_to_pool), and the demand that the next
    /// forward does (it throws if the copy is not offered).
    bool reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (kBf16In) {
        ConvGeom g = geom_;
        g.n = n;
        return rc.training() && decltype(op_)::reads_bf16_input(g, Kind);
      } else {
        return (void)rc, (void)n, false;
      }
    }
    void require_bf16_input() { expect_copy_ = true; }
    /// Whether a training forward of a batch of `n` that reads its input
    /// as a bf16 copy can write its output as bf16 bits alone (max pooling
    /// on the own kernels' geometries: its maxima are values of that copy,
    /// so the bits are exact), for a batch norm that reads nothing else
    /// (pool_bf16_output_to_bn); the backward reads only the argmax.
    bool writes_bf16_alone(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (kBf16Dx) {
        return reads_only_bf16_input(rc, n);
      } else {
        return (void)rc, (void)n, false;
      }
    }
    /// The next training forward (which reads its input's bf16 copy) writes
    /// its output only as bf16 bits, left in k as the copy of y_ (whose
    /// values are then stale).
    void skip_float_output_once() { bits_alone_once_ = true; }
    /// Training forwards that wrote y only as bf16 bits (tests).
    std::size_t bf16_outputs_alone() const { return bf16_outputs_alone_; }
    /// Whether a training backward of a batch of `n` can write dx as bf16
    /// bits (max pooling on backends with bf16 hand-overs, on the own
    /// kernels' geometries): the dy of the bf16 convolution before it
    /// (pool_bf16_dx_to_conv).
    bool writes_bf16_dx(const RunContext<B, T>& rc, std::size_t n) const {
      if constexpr (kBf16Dx) {
        ConvGeom g = geom_;
        g.n = n;
        return rc.training() && this->need_dx(rc) && decltype(op_)::writes_bf16_dx(g, Kind);
      } else {
        return (void)rc, (void)n, false;
      }
    }
    /// backward() with dx as float (`dx_bits` null) or written as bf16
    /// bits there (the returned tensor is then empty): the training
    /// executor's entry (plan::PairHooks).
    const Tensor<T>& backward_bits(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bits) {
      if (!dx_bits) return backward(dy, rc);
      if constexpr (kBf16Dx) {
        op_.backward_bf16(*rc.device, geom_, Kind, x_->data(), dy.data(), dx_bits);
        return none_;
      } else {
        throw std::logic_error("layer '" + name_ + "': a bf16 dx from a pool that cannot write one");
      }
    }
    /// Training forwards that read x as the bf16 copy (tests).
    std::size_t bf16_inputs() const { return bf16_inputs_; }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, geom_.in_shape(), fmt_);
      if constexpr (backend_traits<B>::pool_pad_in_place && Kind == PoolKind::Avg) {
        if (padded_) {  // dy: the padded output's gradient (ChannelPad handed it on)
          if (dy.size() != y_.size() / geom_.oc * pad_channels_)
            throw std::logic_error("layer '" + name_ + "': a padded gradient of the wrong size");
          op_.backward_padded(*rc.device, geom_, dy.data() + pad_before_, pad_channels_, dx_.data());
          return dx_;
        }
      }
      op_.backward(*rc.device, geom_, Kind, x_->data(), y_.data(), dy.data(), dx_.data());
      return dx_;
    }

   private:
    struct Padded {
      T* dst = nullptr;
      std::size_t channels = 0, before = 0;
      detail::PaddedInput* written = nullptr;
    };
    template <class X>
    void pad_forward(RunContext<B, T>& rc, const X* x, const Padded& pad) {
      if constexpr (backend_traits<B>::pool_pad_in_place && Kind == PoolKind::Avg) {
        op_.forward_padded(*rc.device, geom_, x, pad.dst, pad.channels);
        pad_channels_ = pad.channels;
        pad_before_ = pad.before;
        *pad.written = {y_.data(), pad.dst};
        ++padded_outputs_;
      } else {
        (void)rc, (void)x, (void)pad;
        throw std::logic_error("layer '" + name_ + "': written in place into a pad on a backend without it");
      }
    }
    Padded pad_next_;      // pad_into_once, for the next forward
    bool padded_ = false;  // the last forward wrote in place
    std::size_t pad_channels_ = 0, pad_before_ = 0, padded_outputs_ = 0;
    static constexpr bool kBf16In = backend_traits<B>::bf16_gradients;
    static constexpr bool kBf16Dx = backend_traits<B>::bf16_gradients && Kind == PoolKind::Max;
    Tensor<T> none_;  // backward_bits' result where dx went out as bits
    ops::Pool2d<B, T> op_;
    ConvGeom geom_;
    const Tensor<T>* x_ = nullptr;
    bool expect_copy_ = false;          // require_bf16_input, for the next forward
    bool bits_alone_once_ = false;      // skip_float_output_once, for the next forward
    HostVector<std::uint16_t> y_bits_;  // its output as bf16 bits alone (skip_float_output_once)
    std::size_t bf16_outputs_alone_ = 0;
    std::size_t bf16_inputs_ = 0;
  };
};

template <int K, int S, Padding P = Padding::Same>
using MaxPool2d = Pool2d<PoolKind::Max, K, S, P>;
template <int K, int S, Padding P = Padding::Same>
using AvgPool2d = Pool2d<PoolKind::Avg, K, S, P>;

/// Mean over h·w per channel: (n, c, h, w) -> (n, c, 1, 1).
struct GlobalAvgPool : LayerBase {
  static constexpr const char* kind = "global_pool";

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      return {in.n, in.c, 1, 1};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_ = ChannelGeom::make(fmt_, s);
      ensure_shape(y_, {s.n, s.c, 1, 1}, fmt_);
      op_.forward(*rc.device, geom_, x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, geom_.shape(), fmt_);
      op_.backward(*rc.device, geom_, dy.data(), dx_.data());
      return dx_;
    }

   private:
    ops::GlobalAvgPool<B, T> op_;
    ChannelGeom geom_;
  };
};

}  // namespace cifarnet
