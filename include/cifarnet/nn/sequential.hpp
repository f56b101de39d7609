// cifarnet/nn/sequential.hpp — the containers networks are composed of.
//
//   Sequential<A, B, C...>   children in order (a flat std::tuple, folded)
//   Residual<Body, Shortcut, Relu>  out = body(x) + shortcut(x), then
//                            max(., 0) when Relu (ResNet v1's block, fused)
//   Repeat<Block, Offset>    Block repeated NetOptions::repeat + Offset times
//                            (run-time count: ResNet depth is a flag)
//   RepeatN<Block, N>        Block repeated exactly N times (a stage's depth)
//   Named<Tag, L>            L under the fixed scope name Tag::name
//   Identity                 passes x through
//
// Sequential and Repeat are transparent: their children are named in the
// enclosing scope. Channel counts known at compile time are checked where a
// Model is declared (nn/channel_check.hpp: the error names both layer types,
// their positions and both counts); everything else is checked once when the
// model is built (ShapeError naming the layer and both shapes).
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/options.hpp"
#include "cifarnet/nn/channel_check.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

/// Defines a scope-name tag: CIFARNET_NAME(stage1) -> struct stage1 {...}.
#define CIFARNET_NAME(ident)                    \
  struct ident {                                \
    static constexpr const char* name = #ident; \
  }

namespace detail {
template <class... Ls>
struct ChannelChain {
  static constexpr int out(int in) {
    int c = in;
    ((c = (Ls::in_channels >= 0 ? Ls::out_channels(Ls::in_channels) : (c < 0 ? -1 : Ls::out_channels(c)))),
     ...);
    return c;
  }
};
/// Whether a node takes part in the bf16 output hand-over between neighbours
/// in a Sequential (a static bf16_output_handover, ConvBatchNorm's).
template <class N, class = void>
struct HasBf16OutputHandover : std::false_type {};
template <class N>
struct HasBf16OutputHandover<N, std::void_t<decltype(N::bf16_output_handover)>>
    : std::bool_constant<N::bf16_output_handover> {};
/// Whether a node takes part in the deferred float output hand-over
/// between neighbours in a Sequential (a static deferred_output_handover,
/// ConvBatchNorm's).
template <class N, class = void>
struct HasDeferredOutput : std::false_type {};
template <class N>
struct HasDeferredOutput<N, std::void_t<decltype(N::deferred_output_handover)>>
    : std::bool_constant<N::deferred_output_handover> {};
/// Whether node N has pooled_gradient (a Sequential: Residual's shortcut).
template <class N, class = void>
struct HasPooledGradient : std::false_type {};
template <class N>
struct HasPooledGradient<N, std::void_t<decltype(&N::pooled_gradient)>> : std::true_type {};
/// Whether two nodes are an average pool and a ChannelPad that it writes
/// into in place (pool_pad_source, pool_pad_target).
template <class P, class N, class = void>
struct IsPoolPad : std::false_type {};
template <class P, class N>
struct IsPoolPad<P, N, std::void_t<decltype(P::pool_pad_source), decltype(N::pool_pad_target)>>
    : std::bool_constant<P::pool_pad_source && N::pool_pad_target> {};
/// Whether a node takes part in the bf16 residual stream between
/// neighbouring blocks (a static bf16_block_handover: Residual, Repeat).
template <class N, class = void>
struct HasBlockHandover : std::false_type {};
template <class N>
struct HasBlockHandover<N, std::void_t<decltype(N::bf16_block_handover)>>
    : std::bool_constant<N::bf16_block_handover> {};
/// Whether node N can be asked to read its input only as a bf16 copy
/// (reads_only_bf16_input / require_bf16_input: ConvBatchNorm, Pool2d).
template <class N, class = void>
struct ReadsBf16Input : std::false_type {};
template <class N>
struct ReadsBf16Input<N, std::void_t<decltype(&N::require_bf16_input)>> : std::true_type {};
/// Whether node N has backward_first_bits (Sequential).
template <class N, class = void>
struct HasFirstBits : std::false_type {};
template <class N>
struct HasFirstBits<N, std::void_t<decltype(&N::backward_first_bits)>> : std::true_type {};
/// Whether node N has backward_last_bits (Sequential).
template <class N, class = void>
struct HasLastBits : std::false_type {};
template <class N>
struct HasLastBits<N, std::void_t<decltype(&N::backward_last_bits)>> : std::true_type {};
/// "No parameter id": a container built without an arena never reports
/// gradients as final before the end of backward.
inline constexpr std::size_t kNoParam = ~std::size_t(0);
template <class L, class... Ls>
struct First {
  using type = L;
};
/// Before a container's child runs forward: whether its input is the output
/// the Residual<..., FusedRelu> that ran just before it wrote
/// (RunContext::relu_out; see Residual). The first child keeps what the
/// container was told about its own input; any other child that ran in
/// between (even one that returns its input) ends the chain.
/// The same for a bf16 copy of the input (RunContext::bf16_of) and for a
/// batch norm's backward sums offered with it (RunContext::bn_out).
template <class B, class T>
void enter_child(RunContext<B, T>& rc, const Tensor<T>& in, bool& first) {
  if (!first) {
    rc.input_is_relu = rc.relu_out != nullptr && rc.relu_out == in.data();
    const bool copy = rc.bf16_of != nullptr && rc.bf16_of == in.data();
    rc.input_bf16_of = copy ? rc.bf16_of : nullptr;
    rc.input_bf16 = copy ? rc.bf16_bits : nullptr;
    rc.input_bn = rc.bn_out != nullptr && rc.bn_out->of == in.data() ? rc.bn_out : nullptr;
    rc.input_bn_shared = false;
  }
  first = false;
  rc.relu_out = nullptr;
  rc.bf16_of = nullptr;
  rc.bf16_bits = nullptr;
  rc.bn_out = nullptr;
}
/// A residual sum offered to a container (RunContext::sum_out), taken out
/// of the context so that only its last child sees it (offer_sum).
template <class T>
struct SumOffer {
  const T* shortcut = nullptr;
  T* out = nullptr;
  std::size_t n = 0;
  bool relu = false;
  std::uint16_t* mask = nullptr;                 // RunContext::sum_mask
  const std::uint16_t* shortcut_bits = nullptr;  // RunContext::sum_shortcut_bits
  bool skip_float = false;                       // RunContext::sum_skip_float
};
template <class B, class T>
SumOffer<T> take_sum(RunContext<B, T>& rc) {
  SumOffer<T> o{rc.sum_shortcut, rc.sum_out,           rc.sum_n,         rc.sum_relu,
                rc.sum_mask,     rc.sum_shortcut_bits, rc.sum_skip_float};
  rc.sum_shortcut = nullptr;
  rc.sum_out = nullptr;
  rc.sum_n = 0;
  rc.sum_mask = nullptr;
  rc.sum_shortcut_bits = nullptr;
  rc.sum_skip_float = false;
  return o;
}
template <class B, class T>
void offer_sum(RunContext<B, T>& rc, const SumOffer<T>& o, bool last) {
  rc.sum_shortcut = last ? o.shortcut : nullptr;
  rc.sum_out = last ? o.out : nullptr;
  rc.sum_n = last ? o.n : 0;
  rc.sum_relu = o.relu;
  rc.sum_mask = last ? o.mask : nullptr;
  rc.sum_shortcut_bits = last ? o.shortcut_bits : nullptr;
  rc.sum_skip_float = last && o.skip_float;
}
}  // namespace detail

/// Passes its input through unchanged (no copy).
struct Identity : LayerBase {
  static constexpr const char* kind = "identity";
  static constexpr bool container = true;
  static constexpr bool handover_protocol = true;
  template <class B, class T>
  class Node {
   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>&) {
      name_ = scope.prefix();
      shape_ = in;
      return in;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>&) { return x; }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>&) { return dy; }
    /// One "identity" node in a step plan (nn/plan.hpp): the executor runs
    /// it as a node of its own, so it separates the neighbours around it.
    int emit(plan::Builder& b, int in, RunContext<B, T>&) { return b.node(name_, "identity", {in}, shape_); }

   private:
    std::string name_;
    Shape shape_;
  };
};

/// Children applied in order.
template <class... Ls>
struct Sequential : LayerBase {
  static_assert(sizeof...(Ls) > 0, "cifarnet: Sequential<> needs at least one layer.");
  static constexpr const char* kind = "sequential";
  static constexpr bool transparent = true;
  static constexpr bool container = true;
  static constexpr bool handover_protocol = true;
  static constexpr int in_channels = detail::First<Ls...>::type::in_channels;
  static constexpr int out_channels(int in) { return detail::ChannelChain<Ls...>::out(in); }
  // The channel check (nn/channel_check.hpp): the children in order, the
  // I-th (from 1) at position I.
  static constexpr int walk_channels(detail::ChannelWalk& w, int c) {
    int i = 0;
    ((w.enter(++i), c = detail::walk_channels<Ls>(w, c), w.leave()), ...);
    return c;
  }
  template <int I>
  using child = std::tuple_element_t<std::size_t(I - 1), std::tuple<Ls...>>;

  template <class B, class T>
  class Node {
    using FirstL = std::tuple_element_t<0, std::tuple<Ls...>>;
    using Last = std::tuple_element_t<sizeof...(Ls) - 1, std::tuple<Ls...>>;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      Shape s = in;
      const bool down = ctx.propagate_down;
      build_each(s, scope, ctx, down, std::index_sequence_for<Ls...>{});
      ctx.propagate_down = down;
      return s;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      return forward_each(x, rc, std::index_sequence_for<Ls...>{});
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      return backward_from<sizeof...(Ls) - 1>(dy, rc);
    }
    /// backward() with the first child's dx written as bf16 bits into
    /// `dx_bits` instead, where that child can (a ConvBatchNorm whose
    /// writes_bf16_dx holds): a residual block asks it for its body's input
    /// gradient, which its sum then reads as bf16. `wrote` says whether the
    /// bits were written; if so the returned tensor is not the input
    /// gradient, else it is (as backward() returns it).
    const Tensor<T>& backward_first_bits(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bits,
                                         bool& wrote) {
      return backward_bits(dy, rc, dx_bits, wrote);
    }
    /// A downsampling shortcut (an average pool written in place into a
    /// ChannelPad, the two children here) whose backward a residual block's
    /// sum can form on the fly from its output gradient
    /// (RunContext::grad_sum's `pooled`): true after such a forward, with
    /// the padded gradient's channel to start at, its channels a pixel and
    /// the pool's stride.
    bool pooled_gradient(std::size_t& before, std::size_t& channels, std::size_t& stride) const {
      if constexpr (sizeof...(Ls) == 2) {
        if constexpr (detail::IsPoolPad<node_t<FirstL, B, T>, node_t<Last, B, T>>::value) {
          const auto& pool = std::get<0>(nodes_);
          const auto& pad = std::get<1>(nodes_);
          if (!pool.wrote_padded_windows() || !pad.last_in_place()) return false;
          before = pad.pad_before();
          channels = pad.padded_channels();
          stride = pool.stride();
          return true;
        }
      }
      (void)before, (void)channels, (void)stride;
      return false;
    }
    /// Whether the last child can take its dy as bf16 bits in the next
    /// backward (a ConvBatchNorm whose takes_bf16_dy holds): a residual
    /// block then lets the next block's sum write its output's gradient as
    /// bits into last_dy_target() and runs backward_last_bits.
    bool last_takes_bf16_dy(RunContext<B, T>& rc) {
      if constexpr (detail::HasBf16OutputHandover<node_t<Last, B, T>>::value)
        return std::get<sizeof...(Ls) - 1>(nodes_).takes_bf16_dy(rc);
      else
        return (void)rc, false;
    }
    /// The buffer the last child reads its dy bits from (sized by the last
    /// forward); null where it takes none.
    std::uint16_t* last_dy_target() {
      if constexpr (detail::HasBf16OutputHandover<node_t<Last, B, T>>::value)
        return std::get<sizeof...(Ls) - 1>(nodes_).bf16_dy_target();
      else
        return nullptr;
    }
    /// For a residual block kept in bf16 between blocks (Residual's
    /// reads_only_bf16_input): whether the first child's next training
    /// forward of a batch of `n` reads its input only through a bf16 copy,
    /// and the demand that it then does; whether the last child's can read
    /// a block's shortcut as bf16 and write the sum as bf16 alone.
    bool first_reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (detail::ReadsBf16Input<node_t<FirstL, B, T>>::value)
        return std::get<0>(nodes_).reads_only_bf16_input(rc, n);
      else
        return (void)rc, (void)n, false;
    }
    void require_first_bf16_input() {
      if constexpr (detail::ReadsBf16Input<node_t<FirstL, B, T>>::value)
        std::get<0>(nodes_).require_bf16_input();
    }
    // A Sequential of blocks (a ResNet stage) in the bf16 residual stream
    // between its neighbours, as the plan decides (bf16_residual_stream):
    // its first block's input, its last block's output.
    static constexpr bool bf16_block_handover = detail::HasBlockHandover<node_t<FirstL, B, T>>::value ||
                                                detail::HasBlockHandover<node_t<Last, B, T>>::value;
    void require_bf16_input() {
      if constexpr (detail::HasBlockHandover<node_t<FirstL, B, T>>::value)
        std::get<0>(nodes_).require_bf16_input();
    }
    void skip_float_output_once() {
      if constexpr (detail::HasBlockHandover<node_t<Last, B, T>>::value)
        std::get<sizeof...(Ls) - 1>(nodes_).skip_float_output_once();
    }
    bool last_sums_bf16_only(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (detail::HasBf16OutputHandover<node_t<Last, B, T>>::value)
        return std::get<sizeof...(Ls) - 1>(nodes_).sums_bf16_only(rc, n);
      else
        return (void)rc, (void)n, false;
    }
    /// backward_first_bits with dy the bits in last_dy_target() (needs
    /// last_takes_bf16_dy); `dx_bits` may be null (dx as float).
    const Tensor<T>& backward_last_bits(RunContext<B, T>& rc, std::uint16_t* dx_bits, bool& wrote) {
      if (!last_dy_target())
        throw std::logic_error("Sequential::backward_last_bits: the last child takes no bf16 dy");
      last_bits_ = true;
      return backward_bits(no_dy_, rc, dx_bits, wrote);
    }
    /// The children (for inspection and taps).
    std::tuple<node_t<Ls, B, T>...>& children() { return nodes_; }
    /// Emits the children in order into a step plan (nn/plan.hpp), marking
    /// each tensor between two of them with the hand-overs this container
    /// makes between those two types (forward_each, backward_from).
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      return emit_each(b, in, rc, std::index_sequence_for<Ls...>{});
    }

   private:
    const Tensor<T>& backward_bits(const Tensor<T>& dy, RunContext<B, T>& rc, std::uint16_t* dx_bits,
                                   bool& wrote) {
      struct Reset {
        std::uint16_t*& p;
        bool& last;
        ~Reset() { p = nullptr, last = false; }
      } reset{first_bits_, last_bits_};
      first_bits_ = dx_bits;
      first_bits_done_ = false;
      const Tensor<T>& dx = backward_from<sizeof...(Ls) - 1>(dy, rc);
      wrote = first_bits_done_;
      return dx;
    }
    // A child must produce dx when this container must, or when a child
    // before it registered parameters (their gradients flow through it).
    // Children before the first parameter are skipped in backward when
    // nothing needs the container's input gradient (ResNet: the rescale
    // layer, and the stem convolution's backward-data pass).
    template <std::size_t... I>
    void build_each(Shape& s, Scope& scope, BuildContext<T>& ctx, bool down, std::index_sequence<I...>) {
      const std::size_t params_before = ctx.params ? ctx.params->count() : 0;
      ((ctx.propagate_down = down_[I] = down || (ctx.params ? ctx.params->count() > params_before : I > 0),
        first_param_[I] = ctx.params ? ctx.params->count() : detail::kNoParam,
        s = out_[I] = detail::build_child<Ls>(std::get<I>(nodes_), s, scope, ctx, &names_[I])),
       ...);
    }
    template <std::size_t... I>
    int emit_each(plan::Builder& b, int t, RunContext<B, T>& rc, std::index_sequence<I...>) {
      ((t = detail::emit_child<Ls>(std::get<I>(nodes_), b, t, rc, names_[I], out_[I]), mark_pair<I>(b, t)),
       ...);
      return t;
    }
    template <std::size_t I>
    void mark_pair(plan::Builder& b, int t) {
      if constexpr (I + 1 < sizeof...(Ls)) {
        using L = std::tuple_element_t<I, std::tuple<Ls...>>;
        using N = std::tuple_element_t<I + 1, std::tuple<Ls...>>;
        using NL = node_t<L, B, T>;
        using NN = node_t<N, B, T>;
        unsigned p = 0;
        if constexpr (detail::HasBf16OutputHandover<NL>::value && detail::HasBf16OutputHandover<NN>::value)
          p |= plan::kConvBnPair;
        if constexpr (detail::IsPoolPad<NL, NN>::value) p |= plan::kPoolPadPair;
        if constexpr (detail::HasBlockHandover<NL>::value && detail::HasBlockHandover<NN>::value)
          p |= plan::kBlockPair;
        b.between(t, L::kind, N::kind, p, &decided_[I]);
      } else {
        (void)b, (void)t;
      }
    }
    // Leaves are timed under their names; containers time their own children.
    template <std::size_t I, class L>
    const Tensor<T>& run_child(const Tensor<T>& in, RunContext<B, T>& rc, bool backward) {
      auto& n = std::get<I>(nodes_);
      if constexpr (L::container) {
        return detail::child_pass<L>(n, in, rc, backward);
      } else {
        return detail::profiled(rc.profiler, names_[I], L::kind, backward, [&]() -> const Tensor<T>& {
          return backward ? n.backward(in, rc) : n.forward(in, rc);
        });
      }
    }
    // Children in order; a residual sum offered to this container goes to
    // the last child only (RunContext::sum_out).
    // Between two neighbours, what the step plan decided (decided_, written
    // by Model; nn/plan_rules.hpp): two ConvBatchNorm (bf16_output_handover)
    // where the later one reads its input only through the earlier one's
    // bf16 copy: the earlier one writes that copy alone (layers/conv_bn.hpp)
    // and the later one insists on it; two ConvBatchNorm
    // (deferred_output_handover) where the later one's own kernels compute
    // its input from the earlier one's map: the earlier one leaves its
    // output unwritten; two blocks (the bf16 residual stream); an average
    // pool and the ChannelPad it writes into.
    template <std::size_t... I>
    const Tensor<T>& forward_each(const Tensor<T>& x, RunContext<B, T>& rc, std::index_sequence<I...>) {
      const Tensor<T>* cur = &x;
      bool first = true;
      const detail::SumOffer<T> sum = detail::take_sum(rc);
      ((detail::enter_child(rc, *cur, first), detail::offer_sum(rc, sum, I + 1 == sizeof...(Ls)),
        skip_float_output<I>(*cur, rc), cur = &run_child<I, Ls>(*cur, rc, false)),
       ...);
      return *cur;
    }
    template <std::size_t I>
    void skip_float_output(const Tensor<T>& in, RunContext<B, T>& rc) {
      if constexpr (I + 1 < sizeof...(Ls)) {
        using L = std::tuple_element_t<I, std::tuple<Ls...>>;
        using N = std::tuple_element_t<I + 1, std::tuple<Ls...>>;
        if constexpr (detail::IsPoolPad<node_t<L, B, T>, node_t<N, B, T>>::value) {
          // An average pool writing into the ChannelPad after it in place.
          auto& pool = std::get<I>(nodes_);
          auto& pad = std::get<I + 1>(nodes_);
          const std::size_t n = in.shape()[0];
          if (decided_[I] & plan::kDecidePoolPad) {
            T* dst = pad.padded_target(rc, n);
            pool.pad_into_once(dst, pad.padded_channels(), pad.pad_before(), pad.written());
          }
        }
        if constexpr (detail::HasDeferredOutput<node_t<L, B, T>>::value &&
                      detail::HasDeferredOutput<node_t<N, B, T>>::value) {
          auto& earlier = std::get<I>(nodes_);
          auto& later = std::get<I + 1>(nodes_);
          if (rc.training() && (decided_[I] & plan::kDecideDefer)) {
            earlier.defer_output_once();
            later.take_normalised_input(earlier.deferred_output());
            return;
          }
        }
        if constexpr ((detail::HasBf16OutputHandover<node_t<L, B, T>>::value &&
                       detail::HasBf16OutputHandover<node_t<N, B, T>>::value) ||
                      (detail::HasBlockHandover<node_t<L, B, T>>::value &&
                       detail::HasBlockHandover<node_t<N, B, T>>::value)) {
          if (rc.training() && (decided_[I] & plan::kDecideBf16Alone)) {
            std::get<I>(nodes_).skip_float_output_once();
            std::get<I + 1>(nodes_).require_bf16_input();
          }
        }
      }
    }
    // Children in reverse order. Two ConvBatchNorm neighbours hand the input
    // gradient between them as bf16 bits where the plan decided so
    // (bf16_dx_between_conv_bn; layers/conv_bn.hpp).
    // The last child reads its dy from its bf16_dy_target() where
    // backward_last_bits asked for it (`dy` is then empty).
    template <std::size_t I>
    const Tensor<T>& backward_from(const Tensor<T>& dy, RunContext<B, T>& rc) {
      using L = std::tuple_element_t<I, std::tuple<Ls...>>;
      bool bits_in = false;
      if constexpr (I + 1 == sizeof...(Ls)) bits_in = std::exchange(last_bits_, false);
      if constexpr (I > 0) {
        using P = std::tuple_element_t<I - 1, std::tuple<Ls...>>;
        if constexpr (detail::HasBf16OutputHandover<node_t<L, B, T>>::value &&
                      detail::HasBf16OutputHandover<node_t<P, B, T>>::value) {
          auto& later = std::get<I>(nodes_);
          auto& earlier = std::get<I - 1>(nodes_);
          if (decided_[I - 1] & plan::kDecideBf16Dx) {
            if (bits_in)
              later.backward_bits_to_bits(rc, earlier.bf16_dy_target());
            else
              later.backward_to_bits(dy, rc, earlier.bf16_dy_target());
            if (rc.grad_sync && rc.param_grads) rc.grad_sync->ready_from(first_param_[I]);
            if constexpr (I == 1) {  // the first child, whose dx may go out as bits too
              if (first_bits_ && earlier.writes_bf16_dx(rc)) {
                earlier.backward_bits_to_bits(rc, first_bits_);
                return first_bits_written(dy, rc);
              }
            }
            return continue_from<I - 1>(earlier.backward_from_bits(rc), rc);
          }
        }
      } else if constexpr (detail::HasBf16OutputHandover<node_t<L, B, T>>::value) {
        auto& first = std::get<0>(nodes_);
        if (first_bits_ && first.writes_bf16_dx(rc)) {
          if (bits_in)
            first.backward_bits_to_bits(rc, first_bits_);
          else
            first.backward_to_bits(dy, rc, first_bits_);
          return first_bits_written(dy, rc);
        }
      }
      if constexpr (detail::HasBf16OutputHandover<node_t<L, B, T>>::value)
        if (bits_in) return continue_from<I>(std::get<I>(nodes_).backward_from_bits(rc), rc);
      const Tensor<T>& dx = rc.profiler ? run_child<I, L>(dy, rc, true)
                                        : detail::backward_child<L>(std::get<I>(nodes_), dy, rc);
      return continue_from<I>(dx, rc);
    }
    // The first child wrote its dx into first_bits_: every gradient is final;
    // `dy` is returned in place of the input gradient, which went there.
    const Tensor<T>& first_bits_written(const Tensor<T>& dy, RunContext<B, T>& rc) {
      first_bits_done_ = true;
      if (rc.grad_sync && rc.param_grads) rc.grad_sync->ready_from(first_param_[0]);
      return dy;
    }
    // After child I's backward returned dx: its gradients are final, then the
    // children before it, if anything there needs a gradient.
    template <std::size_t I>
    const Tensor<T>& continue_from(const Tensor<T>& dx, RunContext<B, T>& rc) {
      if (rc.grad_sync && rc.param_grads) rc.grad_sync->ready_from(first_param_[I]);
      if constexpr (I == 0)
        return dx;
      else if (!down_[I] || !rc.needs_dx(first_param_[I]))  // nothing before child I needs a gradient
        return dx;
      else
        return backward_from<I - 1>(dx, rc);
    }
    std::tuple<node_t<Ls, B, T>...> nodes_;
    std::uint16_t* first_bits_ = nullptr;  // backward_first_bits' target, during that call
    bool first_bits_done_ = false;
    bool last_bits_ = false;  // backward_last_bits: the last child's dy is in its bf16_dy_target
    Tensor<T> no_dy_;         // backward_last_bits' dy (empty)
    std::array<std::string, sizeof...(Ls)> names_;  // children's full names (profiling)
    std::array<Shape, sizeof...(Ls)> out_{};        // children's output shapes (plans)
    // What the step plan decided between child I and child I + 1
    // (plan::Decision bits, written by Model before a step; 0: nothing).
    std::array<std::uint8_t, sizeof...(Ls)> decided_{};
    std::array<bool, sizeof...(Ls)> down_{};  // does child I produce dx (set in build)
    // Id of the first parameter child I (or a later child) registered: after
    // child I's backward, every parameter from it on has its final gradient.
    std::array<std::size_t, sizeof...(Ls)> first_param_{};
  };
};

/// A residual block: out = body(x) + shortcut(x). ResNet v1 follows the sum
/// with ReLU: FusedRelu does it in the same pass (and masks the incoming
/// gradient in one pass before both branches), equal to
/// Sequential<Residual<Body, Shortcut>, ReLU> with the same parameter names.
/// When a block's input is the output of such a block just before it (a
/// ResNet stage), its backward sums the two branches' input gradients and
/// applies the previous block's ReLU mask (input > 0) in one pass
/// (Eltwise::add_masked), and the previous block skips its mask pass: the
/// containers pass the facts along in RunContext, checked by pointer.
template <class Body, class Shortcut = Identity, auto ReluOpt = NoRelu>
struct Residual : LayerBase {
  static_assert(detail::ReluOption<ReluOpt>::valid,
                "cifarnet: Residual<Body, Shortcut, Relu>: Relu must be FusedRelu or NoRelu (not a bool).");
  static constexpr bool Relu = detail::ReluOption<ReluOpt>::on;
  static constexpr const char* kind = "block";
  static constexpr bool container = true;
  static constexpr bool handover_protocol = true;
  static constexpr int first_index = 0;
  static constexpr int in_channels = Body::in_channels;
  static constexpr int out_channels(int in) { return Body::out_channels(in); }
  // The channel check (nn/channel_check.hpp): the body at position 1, the
  // shortcut at 2, both given the block's input (where that is unknown,
  // what the body or else the shortcut declares); their outputs must agree.
  static constexpr int walk_channels(detail::ChannelWalk& w, int c) {
    const int x = c >= 0 ? c : Body::in_channels >= 0 ? Body::in_channels : Shortcut::in_channels;
    w.enter(1);
    const int a = detail::walk_channels<Body>(w, x);
    w.leave();
    const auto body_setter = w.setter;
    w.enter(2);
    const int b = detail::walk_channels<Shortcut>(w, x);
    w.leave();
    if (a >= 0 && b >= 0 && a != b) w.residual_mismatch(x, a, b);
    if (a >= 0) w.setter = body_setter;  // the sum's channels are the body's
    return a >= 0 ? a : b;
  }
  template <int I>
  using child = std::conditional_t<I == 1, Body, Shortcut>;

  template <class B, class T>
  class Node {
   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      name_ = scope.prefix();
      add_name_ = scope.name("add");
      fmt_ = ctx.fmt;
      const bool down = ctx.propagate_down;
      params_before_ = ctx.params ? ctx.params->count() : 0;
      bf16_grads_ = !ctx.options || ctx.options->bf16_gradients;
      bf16_residuals_ = !ctx.options || ctx.options->bf16_residuals;
      hand_overs_ = !ctx.options || ctx.options->direct_conv_bn;
      const Shape a = detail::build_child<Body>(body_, in, scope, ctx, &body_name_);
      ctx.propagate_down = down;
      const Shape b = detail::build_child<Shortcut>(shortcut_, in, scope, ctx, &shortcut_name_);
      out_ = a;
      ctx.propagate_down = down;
      propagate_down_ = down;
      if (a != b)
        throw ShapeError("block '" + name_ + "': body output " + a.str() + " and shortcut output " + b.str() +
                         " differ, so they cannot be added");
      return a;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const bool input_is_relu = rc.input_is_relu;
      const T* input_bf16_of = rc.input_bf16_of;
      const std::uint16_t* input_bf16 = rc.input_bf16;
      const bool bf16_in = std::exchange(expect_bf16_in_, false), skip_out = std::exchange(skip_once_, false);
      // The previous block's mask as bits, if it wrote them for this x.
      x_bits_ = input_is_relu && rc.relu_mask_of == x.data() ? rc.relu_mask : nullptr;
      if (bf16_in && (input_bf16_of != x.data() || !input_bf16 || (input_is_relu && !x_bits_)))
        throw ConfigError("block '" + name_ +
                          "': its input's float values were skipped for a bf16 copy and mask bits that are "
                          "not there");
      rc.relu_mask_of = nullptr;
      rc.relu_mask = nullptr;
      // Where the previous block takes x's gradient as bf16 bits, if it does.
      dx_bits_ = x_bits_ && rc.grad_bits_of == x.data() ? rc.grad_bits : nullptr;
      rc.grad_bits_of = nullptr;
      rc.grad_bits = nullptr;
      detail::take_sum(rc);  // an offer for this block's output is not for its insides
      // A batch norm's sums offered with x: for the body alone (the shortcut
      // reads x too: only a layer that also does this block's gradient sum
      // may take them).
      auto* const input_bn = rc.input_bn;
      rc.input_bn = nullptr;
      rc.input_bn_shared = false;
      rc.bn_out = nullptr;
      rc.relu_out = nullptr;
      rc.bf16_of = nullptr;
      // The shortcut first: the body's last layer may then add it (and the
      // ReLU) in the pass that writes its own output (RunContext::sum_out),
      // which saves the sum's pass over memory.
      if constexpr (kShortcutIn)
        if (bf16_in) shortcut_.require_first_bf16_input();
      const Tensor<T>& b = detail::forward_child<Shortcut>(shortcut_, x, rc);
      if (y_.shape() != b.shape()) y_.resize(b.shape());
      rc.input_is_relu = input_is_relu;  // the body reads the same x
      rc.input_bf16_of = input_bf16_of;
      rc.input_bf16 = input_bf16;
      rc.input_bn = input_bn;
      rc.input_bn_shared = input_bn != nullptr;
      rc.bn_out = nullptr;
      rc.relu_out = nullptr;
      rc.bf16_of = nullptr;
      std::uint16_t* mask = nullptr;  // the ReLU's mask as bits, for the next block's backward
      if constexpr (Relu && backend_traits<B>::sum_mask_bits) {
        if (rc.training() && y_.size() % 16 == 0) {
          mask_bits_.resize(y_.size() / 16);
          mask = mask_bits_.data();
        }
      }
      // The bf16 residual stream (reads_only_bf16_input): the shortcut (an
      // identity) summed from x's bf16 copy, and the body's first layer
      // reading x through it too; this block's sum written as bf16 and mask
      // bits alone where the next block asked for that.
      detail::offer_sum(
          rc,
          detail::SumOffer<T>{b.data(), y_.data(), y_.size(), Relu, mask,
                              bf16_in && kPathBits ? input_bf16 : nullptr, skip_out && mask != nullptr},
          true);
      if constexpr (kPathBits || kShortcutIn)
        if (bf16_in) body_.require_first_bf16_input();
      rc.sum_done = rc.sum_mask_done = rc.sum_float_skipped = false;
      const Tensor<T>& a = detail::forward_child<Body>(body_, x, rc);
      rc.input_bn = nullptr;
      rc.input_bn_shared = false;
      summed_ = rc.sum_done;
      // The body's last layer may offer its batch norm's sums for the sum it
      // wrote, this block's output (through this block's ReLU).
      if (!summed_ || !rc.bn_out || rc.bn_out->of != y_.data()) rc.bn_out = nullptr;
      const bool bits = summed_ && rc.sum_mask_done;
      float_skipped_ = summed_ && rc.sum_float_skipped;
      floats_skipped_ += float_skipped_;
      bf16_inputs_ += bf16_in;
      bf16_shortcuts_ += bf16_in && kPathBits;
      detail::take_sum(rc);
      rc.sum_done = rc.sum_mask_done = rc.sum_float_skipped = false;
      if (bf16_in && kPathBits && !summed_)
        throw std::logic_error("block '" + name_ + "': its body did not take the sum of a bf16 shortcut");
      if (!summed_) rc.bf16_of = nullptr;  // a copy of the body's output, not of y_
      x_ = &x;
      mask_input_ = input_is_relu && rc.training();
      if (!summed_)
        detail::profiled(rc.profiler, add_name_, "add", false, [&]() -> const Tensor<T>& {
          add_.add(*rc.device, a.size(), a.data(), b.data(), y_.data(), Relu);
          return y_;
        });
      rc.relu_out = Relu ? y_.data() : nullptr;
      rc.relu_mask_of = bits ? y_.data() : nullptr;
      rc.relu_mask = bits ? mask : nullptr;
      // This block's output gradient may come as bf16 bits, straight into
      // the buffer its body's last layer reads its dy from: where that
      // layer takes them, the shortcut passes them on unchanged (Identity),
      // and the sum below can read them (through the previous block's mask
      // bits, or with no mask).
      if constexpr (kPathBits) {
        if (bits && bf16_grads_ && (x_bits_ || !input_is_relu) && body_.last_takes_bf16_dy(rc)) {
          rc.grad_bits_of = y_.data();
          rc.grad_bits = body_.last_dy_target();
        }
      }
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const Tensor<T>* g = &dy;
      const bool premasked = rc.premasked_grad == dy.data() && rc.premasked_by == y_.data();
      rc.premasked_grad = rc.premasked_by = nullptr;
      // The next block wrote this block's output gradient as bf16 bits into
      // the body's last layer's dy buffer (announced by forward, above):
      // `dy` is then empty; the bits are already through this block's ReLU.
      const bool path_bits = rc.grad_bits_by != nullptr && rc.grad_bits_by == y_.data();
      rc.grad_bits_by = nullptr;
      if constexpr (Relu) {
        // The ReLU's gradient: dy where y > 0, unless the next block already
        // applied it in its sum (below). Kept in dx_: the sum below is
        // elementwise, so it may overwrite it in place (one buffer less).
        if (!premasked && !path_bits) {
          if (float_skipped_)  // the next block asked for the bf16 output alone, and masks dy itself
            throw std::logic_error("block '" + name_ +
                                   "': its float output was skipped, and dy is not masked");
          detail::profiled(rc.profiler, add_name_, "add", true, [&]() -> const Tensor<T>& {
            if (dx_.shape() != dy.shape()) dx_.resize(dy.shape());
            relu_.backward(*rc.device, dy.size(), y_.data(), dy.data(), dx_.data());
            return dx_;
          });
          g = &dx_;
        }
      }
      // Shortcut first: its parameters were registered after the body's, and
      // backward finishes parameters in reverse registration order (what
      // GradientSync::ready_from reports inside the body relies on it).
      // With the gradient as bits the shortcut is Identity: its gradient is
      // the bits.
      // A downsampling shortcut (pool and pad) whose gradient the body's
      // first layer can form in its sum from g (RunContext::grad_sum's
      // `pooled`): its own pass only if that layer does not do the sum.
      std::size_t pooled_before = 0, pooled_channels = 0, pooled_stride = 0;
      bool pooled = false;
      if constexpr (backend_traits<B>::pool_pad_in_place &&
                    detail::HasPooledGradient<node_t<Shortcut, B, T>>::value)
        pooled = hand_overs_ && !path_bits && !dx_bits_ &&
                 shortcut_.pooled_gradient(pooled_before, pooled_channels, pooled_stride);
      const Tensor<T>* db =
          path_bits || pooled ? nullptr : &detail::backward_child<Shortcut>(shortcut_, *g, rc);
      // The body's input gradient as bf16 bits where its first layer can
      // write them and the sum below reads the mask as bits too.
      bool da_bits = false;
      const bool sum = propagate_down_ && rc.needs_dx(params_before_);
      const Tensor<T>* dap = nullptr;
      // The float sum below offered to the body's layer that computes x's
      // gradient, to do a range of images at a time while each is in cache
      // (RunContext::grad_sum; ConvBatchNorm's float ranged backward, which
      // writes no bits); any other offer is cleared, so a block inside the
      // body never sees this one.
      rc.grad_sum = {};
      if (sum && (db || pooled) && !path_bits && !dx_bits_) {
        rc.grad_sum.of = x_->data();
        rc.grad_sum.other = db ? db->data() : nullptr;
        if (pooled) {
          rc.grad_sum.pooled = g->data() + pooled_before;
          rc.grad_sum.pooled_channels = pooled_channels;
          rc.grad_sum.pooled_stride = pooled_stride;
        }
        rc.grad_sum.mask_bits = mask_input_ ? x_bits_ : nullptr;
        rc.grad_sum.mask_relu = mask_input_ && !x_bits_ ? x_->data() : nullptr;
        rc.grad_sum.name = &add_name_;
      }
      if constexpr (Relu && backend_traits<B>::sum_mask_bits &&
                    detail::HasFirstBits<node_t<Body, B, T>>::value) {
        std::uint16_t* first = nullptr;
        if (sum && mask_input_ && x_bits_) {
          da_bits_.resize(x_->size());
          first = da_bits_.data();
        }
        if constexpr (kPathBits) {
          if (path_bits) {
            dap = &body_.backward_last_bits(rc, first, da_bits);
            ++bf16_path_grads_;
          }
        }
        if (!dap && first) dap = &body_.backward_first_bits(*g, rc, first, da_bits);
        bf16_branch_grads_ += da_bits;
      }
      if (!dap) dap = &detail::backward_child<Body>(body_, *g, rc);
      const bool range_summed = rc.grad_sum.done;
      rc.grad_sum = {};
      if (pooled && range_summed) ++pooled_sums_;
      if (pooled && !range_summed && sum)
        db = &detail::backward_child<Shortcut>(shortcut_, *g, rc);  // the sum is this block's
      if (range_summed && da_bits)                                  // ranges write float dx, never bits
        throw std::logic_error("block '" + name_ + "': its sum was done in ranges of a dx written as bits");
      rc.premasked_grad = rc.premasked_by = nullptr;
      if (!sum) return *dap;
      if (range_summed) {  // the body's dx is already the sum (through the mask)
        ++range_sums_;
        if (mask_input_) {
          rc.premasked_grad = dap->data();
          rc.premasked_by = x_->data();
        }
        return *dap;
      }
      if constexpr (backend_traits<B>::sum_mask_bits) {
        // Either branch's gradient in bf16, or the sum wanted in bf16: the
        // sum through the mask bits (or none, where the input is not a
        // block's output).
        if ((da_bits || path_bits || dx_bits_) && (x_bits_ || !mask_input_)) {
          const std::uint16_t* gb = path_bits ? body_.last_dy_target() : nullptr;
          if (da_bits)
            return gb ? sum_bits(rc, da_bits_.data(), gb) : sum_bits(rc, da_bits_.data(), db->data());
          return gb ? sum_bits(rc, dap->data(), gb) : sum_bits(rc, dap->data(), db->data());
        }
      }
      if (path_bits)  // forward announced the bits only where the sum above reads them
        throw std::logic_error("block '" + name_ + "': output gradient given as bf16 bits it cannot sum");
      const Tensor<T>& da = *dap;
      return detail::profiled(rc.profiler, add_name_, "add", true, [&]() -> const Tensor<T>& {
        if (dx_.shape() != da.shape()) dx_.resize(da.shape());
        if (mask_input_) {  // x is the previous block's ReLU output: its mask in this pass
          if constexpr (backend_traits<B>::sum_mask_bits) {
            if (x_bits_)  // the same mask, as the bits that block wrote with x
              add_.add_masked_bits(*rc.device, da.size(), da.data(), db->data(), x_bits_, dx_.data());
            else
              add_.add_masked(*rc.device, da.size(), da.data(), db->data(), x_->data(), dx_.data());
          } else {
            add_.add_masked(*rc.device, da.size(), da.data(), db->data(), x_->data(), dx_.data());
          }
          rc.premasked_grad = dx_.data();
          rc.premasked_by = x_->data();
        } else {
          add_.add(*rc.device, da.size(), da.data(), db->data(), dx_.data(), false);
        }
        return dx_;
      });
    }
    /// Whether the last training forward found the input to be the output of
    /// a Residual<..., FusedRelu> just before this block: backward then
    /// multiplies the input gradient by that ReLU's mask in the pass of its
    /// sum, and that block skips its own mask pass (RunContext::premasked_grad).
    bool masks_input_gradient() const { return mask_input_; }
    /// Whether that mask comes from the bits the previous block's batch norm
    /// wrote with its sum (RunContext::relu_mask; backends with
    /// sum_mask_bits) rather than from the input's values.
    bool masks_from_bits() const { return mask_input_ && x_bits_ != nullptr; }
    /// Backward passes whose body handed its input gradient to the sum as
    /// bf16 bits (Sequential::backward_first_bits; tests).
    std::size_t bf16_branch_grads() const { return bf16_branch_grads_; }
    // The residual stream in bf16 between two blocks (a Sequential or a
    // Repeat pairs them before the earlier one runs, as it pairs two
    // ConvBatchNorm): the later block, when its shortcut is an identity and
    // its body's first layer reads x only through a bf16 copy and its last
    // batch norm can sum a bf16 shortcut, reads x only as that copy (and
    // the earlier block's mask bits); the earlier block's last batch norm
    // then writes the block's output as its bf16 copy and mask alone: the
    // float output's write and half the shortcut's read, 6 bytes an element.
    // A downsampling block reads x as bf16 in its shortcut's average pool
    // instead (kShortcutIn). NetOptions::bf16_residuals(false) keeps the
    // stream float.
    static constexpr bool bf16_block_handover = true;
    /// Whether this block's next training forward of a batch of `n` reads
    /// its input only through the previous block's bf16 copy and mask bits.
    bool reads_only_bf16_input(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (kPathBits)
        return bf16_residuals_ && rc.training() && body_.first_reads_only_bf16_input(rc, n) &&
               body_.last_sums_bf16_only(rc, n);
      else if constexpr (kShortcutIn)
        return bf16_residuals_ && rc.training() && body_.first_reads_only_bf16_input(rc, n) &&
               shortcut_.first_reads_only_bf16_input(rc, n);
      else
        return (void)rc, (void)n, false;
    }
    /// Whether skip_float_output_once can take effect (the sum's mask bits exist here).
    static constexpr bool can_skip_float_output() { return Relu && backend_traits<B>::sum_mask_bits; }
    /// Let the next training forward write the output only as its bf16 copy
    /// and mask bits (where the body's last batch norm can).
    void skip_float_output_once() { skip_once_ = true; }
    /// Before a training forward whose input's producer may have skipped its
    /// float output: throw unless the bf16 copy and mask bits are offered.
    void require_bf16_input() { expect_bf16_in_ = true; }
    /// Training forwards that wrote the output only as bf16 and mask bits,
    /// that read the input only as bf16, and that summed an identity
    /// shortcut from bf16 (tests).
    std::size_t float_outputs_skipped() const { return floats_skipped_; }
    std::size_t bf16_inputs() const { return bf16_inputs_; }
    std::size_t bf16_shortcuts() const { return bf16_shortcuts_; }
    /// Backward passes that received this block's output gradient as bf16
    /// bits from the next block's sum, and that wrote this block's input
    /// gradient as bits for the previous block (tests).
    std::size_t bf16_path_grads() const { return bf16_path_grads_; }
    std::size_t bf16_path_grads_out() const { return bf16_path_grads_out_; }
    /// Whether the last forward's sum (and ReLU) was computed by the body's
    /// last layer in its own pass (RunContext::sum_out; batch norm on
    /// backends with fused_sum) rather than by a pass of this block.
    bool body_summed() const { return summed_; }
    /// Backward passes whose sum the body's first layer did a range of
    /// images at a time (RunContext::grad_sum; tests).
    std::size_t range_sums() const { return range_sums_; }
    /// Backward sums that formed the downsampling shortcut's gradient from
    /// the output gradient (RunContext::grad_sum's `pooled`; tests).
    std::size_t pooled_sums() const { return pooled_sums_; }
    /// Emits the block into a step plan (nn/plan.hpp), in the order forward
    /// runs it: the shortcut, the body, then the sum ("add", with the ReLU
    /// where FusedRelu), whose inputs are the body's output and the
    /// shortcut's.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const int s = detail::emit_child<Shortcut>(shortcut_, b, in, rc, shortcut_name_, out_);
      const int a = detail::emit_child<Body>(body_, b, in, rc, body_name_, out_);
      plan::Attrs at;
      at.relu = Relu;
      const int y = b.node(add_name_, "add", {a, s}, out_, at, name_);
      plan::Node& add = b.producer(y);
      add.block_input = in;
      add.facts[plan::facts::kBf16Stream] =
          reads_only_bf16_input(rc, b.key().batch) ? plan::Fact::yes()
          : !bf16_residuals_                       ? plan::Fact::no("NetOptions::bf16_residuals is off")
          : !rc.training()                         ? plan::Fact::no("inference")
          : !(kPathBits || kShortcutIn)
              ? plan::Fact::no(
                    "the block is not one the stream takes (a fused ReLU, mask bits, an identity or "
                    "pooled shortcut, a body ending in a ConvBatchNorm)")
              : plan::Fact::no(
                    "its first convolution or its last batch norm cannot read or write bf16 alone "
                    "here (fp32 convolutions, or their channel counts)");
      const bool relu_bits = Relu && backend_traits<B>::sum_mask_bits;
      add.facts[plan::facts::kSumNeeded] = propagate_down_ && rc.needs_dx(params_before_)
                                               ? plan::Fact::yes()
                                               : plan::Fact::no("nothing before the block needs a gradient");
      add.facts[plan::facts::kMaskBits] =
          relu_bits && rc.training() && b.key().batch * out_.per_example() % 16 == 0
              ? plan::Fact::yes()
              : plan::Fact::no(!relu_bits ? "no ReLU mask bits here"
                                          : "the output's size is not a multiple of 16");
      bool pooled = false;
      if constexpr (backend_traits<B>::pool_pad_in_place &&
                    detail::HasPooledGradient<node_t<Shortcut, B, T>>::value)
        pooled = hand_overs_;
      add.facts[plan::facts::kPooledShortcut] =
          pooled ? plan::Fact::yes()
                 : plan::Fact::no("NetOptions::direct_conv_bn is off, or no such shortcut");
      add.facts[plan::facts::kPathBits] = kPathBits && bf16_grads_
                                              ? plan::Fact::yes()
                                              : plan::Fact::no(kPathBits ? "NetOptions::bf16_gradients is off"
                                                                         : "not a block the bits path takes");
      add.facts[plan::facts::kBranchBits] = relu_bits && detail::HasFirstBits<node_t<Body, B, T>>::value
                                                ? plan::Fact::yes()
                                                : plan::Fact::no("not a block whose body can write bits");
      add.facts[plan::facts::kSkipFloat] =
          can_skip_float_output()
              ? plan::Fact::yes()
              : plan::Fact::no(Relu ? "no ReLU mask bits on this backend" : "no fused ReLU");
      return y;
    }
    /// The branches (for inspection).
    node_t<Body, B, T>& body() { return body_; }
    node_t<Shortcut, B, T>& shortcut() { return shortcut_; }

   private:
    // An identity shortcut, the mask bits, and a body (a Sequential) whose
    // last layer can read its dy as bits and sum a bf16 shortcut: the
    // residual path's gradient as bf16 bits between blocks (forward's
    // announcement, backward's path_bits), and the bf16 residual stream's
    // later block (reads_only_bf16_input).
    static constexpr bool kPathBits = Relu && backend_traits<B>::sum_mask_bits &&
                                      std::is_same_v<Shortcut, Identity> &&
                                      detail::HasLastBits<node_t<Body, B, T>>::value;
    // A later block whose shortcut is a Sequential (ResNet's pool and pad)
    // reading x only as bf16 where its first layer can (an average pool):
    // its sum adds the shortcut's float output as usual.
    static constexpr bool kShortcutIn =
        Relu && backend_traits<B>::sum_mask_bits && !std::is_same_v<Shortcut, Identity> &&
        detail::HasLastBits<node_t<Body, B, T>>::value && detail::HasFirstBits<node_t<Shortcut, B, T>>::value;
    // The backward sum a + b through the previous block's mask bits (none
    // where the input is not a block's output), each operand float or bf16
    // bits, into dx_ or, where the previous block takes it so, as bits into
    // its buffer (dx_bits_; dx_ is then returned unwritten, and that block
    // reads the bits: RunContext::grad_bits_by).
    template <class A, class Bv>
    const Tensor<T>& sum_bits(RunContext<B, T>& rc, const A* a, const Bv* b) {
      return detail::profiled(rc.profiler, add_name_, "add", true, [&]() -> const Tensor<T>& {
        if (dx_.shape() != x_->shape()) dx_.resize(x_->shape());
        const std::uint16_t* mask = mask_input_ ? x_bits_ : nullptr;
        if (dx_bits_) {
          add_.add_masked_bits(*rc.device, dx_.size(), a, b, mask, dx_bits_);
          rc.grad_bits_by = x_->data();
          ++bf16_path_grads_out_;
        } else {
          add_.add_masked_bits(*rc.device, dx_.size(), a, b, mask, dx_.data());
        }
        if (mask_input_) {
          rc.premasked_grad = dx_.data();
          rc.premasked_by = x_->data();
        }
        return dx_;
      });
    }
    ops::Eltwise<B, T> add_;  // the sum (with ReLU)
    ops::Relu<B, T> relu_;    // the ReLU's mask in backward
    node_t<Body, B, T> body_;
    node_t<Shortcut, B, T> shortcut_;
    Tensor<T> y_, dx_;
    std::vector<std::uint16_t> mask_bits_;  // y_ > 0 as bits, when the body's last layer wrote them
    std::vector<std::uint16_t> da_bits_;    // the body's input gradient as bf16 (backward_first_bits)
    std::size_t bf16_branch_grads_ = 0, bf16_path_grads_ = 0, bf16_path_grads_out_ = 0, range_sums_ = 0;
    std::uint16_t* dx_bits_ = nullptr;  // the previous block's buffer for dx as bits (or null)
    bool bf16_grads_ = true;            // NetOptions::bf16_gradients
    bool bf16_residuals_ = true;        // NetOptions::bf16_residuals
    bool hand_overs_ = true;            // NetOptions::direct_conv_bn: a pooled shortcut's gradient in the sum
    std::size_t pooled_sums_ = 0;       // backward sums that formed the shortcut's gradient (tests)
    bool expect_bf16_in_ = false;       // require_bf16_input, for the next forward
    bool skip_once_ = false;            // skip_float_output_once, for the next forward
    bool float_skipped_ = false;        // the last forward wrote y_ only as bf16 and bits
    std::size_t floats_skipped_ = 0, bf16_shortcuts_ = 0, bf16_inputs_ = 0;
    const Tensor<T>* x_ = nullptr;           // the last forward's input (backward's mask)
    const std::uint16_t* x_bits_ = nullptr;  // its mask as bits, from the block before (or null)
    std::string name_, add_name_, body_name_, shortcut_name_;
    Shape out_;  // the block's output shape (plans)
    DataFormat fmt_ = DataFormat::NCHW;
    bool propagate_down_ = true;
    bool mask_input_ = false;
    bool summed_ = false;
    std::size_t params_before_ = 0;  // parameters registered before the block
  };
};

namespace detail {
/// Repeat counts: NetOptions::repeat + Offset (a run-time depth, as ResNet's
/// --num-layers), or exactly N (a fixed per-stage depth).
template <int Offset>
struct RepeatFromOptions {
  static int count(const NetOptions* o, const std::string& scope) {
    const int n = (o ? o->repeat : 1) + Offset;
    if (n < 0)
      throw ConfigError("Repeat in scope '" + scope + "': repeat count " + std::to_string(n) +
                        " is negative (NetOptions::repeat too small)");
    return n;
  }
};
template <int N>
struct RepeatExactly {
  static_assert(N >= 0, "cifarnet: RepeatN<Block, N>: N must not be negative.");
  static int count(const NetOptions*, const std::string&) { return N; }
};
}  // namespace detail

/// Block repeated Count::count(options) times (zero times is allowed); see
/// Repeat and RepeatN.
template <class Block, class Count>
struct RepeatOf : LayerBase {
  static_assert(Block::in_channels < 0 || Block::out_channels(Block::in_channels) == Block::in_channels,
                "cifarnet: Repeat<Block>: a repeated block must keep its channel count (In == Out).");
  static constexpr const char* kind = "repeat";
  static constexpr bool transparent = true;
  static constexpr bool container = true;
  static constexpr bool handover_protocol = true;
  static constexpr int in_channels = Block::in_channels;
  static constexpr int out_channels(int in) { return in; }
  // The channel check (nn/channel_check.hpp): the block, at no position of
  // its own.
  using channel_inner = Block;
  static constexpr int walk_channels(detail::ChannelWalk& w, int c) {
    return detail::walk_channels<Block>(w, c);
  }

  template <class B, class T>
  class Node {
   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      blocks_.resize(std::size_t(Count::count(ctx.options, scope.prefix())));
      decided_.assign(blocks_.size(), 0);
      names_.clear();
      name_ = scope.name("repeat");
      Shape s = in;
      shape_ = in;
      const bool down = ctx.propagate_down;
      const std::size_t params_before = ctx.params ? ctx.params->count() : 0;
      down_.assign(blocks_.size(), true);
      first_param_.assign(blocks_.size(), detail::kNoParam);
      for (std::size_t i = 0; i < blocks_.size(); ++i) {  // as Sequential: dx once parameters precede
        ctx.propagate_down = down_[i] = down || (ctx.params ? ctx.params->count() > params_before : i > 0);
        if (ctx.params) first_param_[i] = ctx.params->count();
        names_.emplace_back();
        const Shape o = detail::build_child<Block>(blocks_[i], s, scope, ctx, &names_.back());
        if (o != s)
          throw ShapeError("repeated block in scope '" + scope.prefix() + "' changes its input shape " +
                           s.str() + " to " + o.str() + "; a repeated block must keep its shape");
      }
      ctx.propagate_down = down;
      return s;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Tensor<T>* cur = &x;
      bool first = true;
      const detail::SumOffer<T> sum = detail::take_sum(rc);  // for the last block only
      const bool skip_last = std::exchange(skip_once_, false);
      for (std::size_t i = 0; i < blocks_.size(); ++i) {
        detail::enter_child(rc, *cur, first);
        detail::offer_sum(rc, sum, i + 1 == blocks_.size());
        // A block's float output skipped where the next block reads only
        // its bf16 copy (the residual stream in bf16, as the plan decided;
        // as Sequential does).
        if constexpr (detail::HasBlockHandover<node_t<Block, B, T>>::value) {
          if (i + 1 < blocks_.size()) {
            if (rc.training() && (decided_[i] & plan::kDecideBf16Alone)) {
              blocks_[i].skip_float_output_once();
              blocks_[i + 1].require_bf16_input();
            }
          } else if (skip_last) {
            blocks_[i].skip_float_output_once();
          }
        }
        cur = &detail::forward_child<Block>(blocks_[i], *cur, rc);
      }
      return *cur;
    }
    // The bf16 residual stream at the Repeat's ends (a Sequential pairs it
    // with the blocks around it): its first block's input, its last block's
    // output.
    static constexpr bool bf16_block_handover = detail::HasBlockHandover<node_t<Block, B, T>>::value;
    void require_bf16_input() {
      if constexpr (bf16_block_handover)
        if (!blocks_.empty()) blocks_.front().require_bf16_input();
    }
    void skip_float_output_once() { skip_once_ = true; }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const Tensor<T>* cur = &dy;
      for (std::size_t i = blocks_.size(); i-- > 0;) {
        cur = &detail::backward_child<Block>(blocks_[i], *cur, rc);
        if (rc.grad_sync && rc.param_grads) rc.grad_sync->ready_from(first_param_[i]);
        if (!down_[i] || !rc.needs_dx(first_param_[i])) break;  // nothing before block i needs a gradient
      }
      return *cur;
    }
    std::size_t size() const { return blocks_.size(); }
    /// Emits the blocks in order into a step plan (nn/plan.hpp), the
    /// tensors between them marked as forward pairs them (the bf16 residual
    /// stream).
    int emit(plan::Builder& b, int t, RunContext<B, T>& rc) {
      // No block: the executor still runs the Repeat as a child of its own,
      // which ends the neighbour hand-overs around it as an Identity does.
      if (blocks_.empty()) return b.node(name_ + " (0 blocks)", "identity", {t}, shape_);
      for (std::size_t i = 0; i < blocks_.size(); ++i) {
        t = detail::emit_child<Block>(blocks_[i], b, t, rc, names_[i], shape_);
        if (i + 1 < blocks_.size())
          b.between(t, Block::kind, Block::kind,
                    detail::HasBlockHandover<node_t<Block, B, T>>::value ? plan::kBlockPair : 0u,
                    &decided_[i]);
      }
      return t;
    }
    /// Block i (for inspection).
    node_t<Block, B, T>& block(std::size_t i) { return blocks_.at(i); }

   private:
    std::vector<node_t<Block, B, T>> blocks_;
    std::vector<std::string> names_;        // the blocks' full names (plans)
    std::vector<std::uint8_t> decided_;     // the plan's decisions between block i and i + 1
    std::string name_;                      // where the blocks are (plans)
    Shape shape_;                           // the blocks' input and output shape (plans)
    bool skip_once_ = false;                // skip_float_output_once, for the last block
    std::vector<bool> down_;                // does block i produce dx (set in build)
    std::vector<std::size_t> first_param_;  // first parameter id of block i (as Sequential)
  };
};

/// Block repeated NetOptions::repeat + Offset times: the run-time depth of
/// the CIFAR ResNets (6n + 2 layers, n from --num-layers).
template <class Block, int Offset = 0>
struct Repeat : RepeatOf<Block, detail::RepeatFromOptions<Offset>> {};

/// Block repeated exactly N times: a fixed depth per stage, as ResNet-18's
/// 2/2/2/2 or ResNet-34's 3/4/6/3 (models/resnet.hpp).
template <class Block, int N>
struct RepeatN : RepeatOf<Block, detail::RepeatExactly<N>> {};

/// L under the fixed scope name Tag::name (see CIFARNET_NAME).
template <class Tag, class L>
struct Named : LayerBase {
  static constexpr const char* kind = L::kind;
  static constexpr const char* fixed_name = Tag::name;
  static constexpr bool container = L::container;
  static constexpr bool handover_protocol = L::handover_protocol;
  static constexpr int in_channels = L::in_channels;
  static constexpr int out_channels(int in) { return L::out_channels(in); }
  // The channel check (nn/channel_check.hpp): L, at no position of its own.
  using channel_inner = L;
  static constexpr int walk_channels(detail::ChannelWalk& w, int c) { return detail::walk_channels<L>(w, c); }
  template <class B, class T>
  class Node : public node_t<L, B, T> {};
};

}  // namespace cifarnet
