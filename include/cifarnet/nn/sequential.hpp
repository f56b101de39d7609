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
/// "No parameter id": a container built without an arena never reports
/// gradients as final before the end of backward.
inline constexpr std::size_t kNoParam = ~std::size_t(0);
template <class L, class... Ls>
struct First {
  using type = L;
};
}  // namespace detail

/// Passes its input through unchanged (no copy).
struct Identity : LayerBase {
  static constexpr const char* kind = "identity";
  static constexpr bool container = true;
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
    /// One "identity" node in a step plan (nn/plan.hpp): the executors run
    /// it as an alias of its input.
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
    /// The children (for inspection and taps).
    std::tuple<node_t<Ls, B, T>...>& children() { return nodes_; }
    /// Emits the children in order into a step plan (nn/plan.hpp).
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      return emit_each(b, in, rc, std::index_sequence_for<Ls...>{});
    }

   private:
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
      ((t = detail::emit_child<Ls>(std::get<I>(nodes_), b, t, rc, names_[I], out_[I])), ...);
      return t;
    }
    // Leaves are timed under their names; containers time their own children.
    template <std::size_t I, class L>
    const Tensor<T>& run_child(const Tensor<T>& in, RunContext<B, T>& rc, bool backward) {
      auto& n = std::get<I>(nodes_);
      auto pass = [&]() -> const Tensor<T>& { return backward ? n.backward(in, rc) : n.forward(in, rc); };
      return L::container ? pass() : detail::profiled(rc.profiler, names_[I], L::kind, backward, pass);
    }
    template <std::size_t... I>
    const Tensor<T>& forward_each(const Tensor<T>& x, RunContext<B, T>& rc, std::index_sequence<I...>) {
      const Tensor<T>* cur = &x;
      ((cur = &run_child<I, Ls>(*cur, rc, false)), ...);
      return *cur;
    }
    // Children in reverse order; after child I, its gradients are final,
    // then the children before it, if anything there needs a gradient.
    template <std::size_t I>
    const Tensor<T>& backward_from(const Tensor<T>& dy, RunContext<B, T>& rc) {
      using L = std::tuple_element_t<I, std::tuple<Ls...>>;
      const Tensor<T>& dx = run_child<I, L>(dy, rc, true);
      if (rc.grad_sync && rc.param_grads) rc.grad_sync->ready_from(first_param_[I]);
      if constexpr (I == 0)
        return dx;
      else if (!down_[I] || !rc.needs_dx(first_param_[I]))  // nothing before child I needs a gradient
        return dx;
      else
        return backward_from<I - 1>(dx, rc);
    }
    std::tuple<node_t<Ls, B, T>...> nodes_;
    std::array<std::string, sizeof...(Ls)> names_;  // children's full names (profiling)
    std::array<Shape, sizeof...(Ls)> out_{};        // children's output shapes (plans)
    std::array<bool, sizeof...(Ls)> down_{};        // does child I produce dx (set in build)
    // Id of the first parameter child I (or a later child) registered: after
    // child I's backward, every parameter from it on has its final gradient.
    std::array<std::size_t, sizeof...(Ls)> first_param_{};
  };
};

/// A residual block: out = body(x) + shortcut(x). ResNet v1 follows the sum
/// with ReLU: FusedRelu does it in the same pass (and masks the incoming
/// gradient in one pass before both branches), equal to
/// Sequential<Residual<Body, Shortcut>, ReLU> with the same parameter names.
/// Run by the layer tree, it is exactly that, unfused; in a training plan
/// (nn/train_executor.hpp) the rules may move the sum into the body's last
/// batch norm pass and the backward sum into its first convolution's
/// backward (nn/plan_rules.hpp), with the facts this block records.
template <class Body, class Shortcut = Identity, auto ReluOpt = NoRelu>
struct Residual : LayerBase {
  static_assert(detail::ReluOption<ReluOpt>::valid,
                "cifarnet: Residual<Body, Shortcut, Relu>: Relu must be FusedRelu or NoRelu (not a bool).");
  static constexpr bool Relu = detail::ReluOption<ReluOpt>::on;
  static constexpr const char* kind = "block";
  static constexpr bool container = true;
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
      const Tensor<T>& b = shortcut_.forward(x, rc);
      const Tensor<T>& a = body_.forward(x, rc);
      if (y_.shape() != b.shape()) y_.resize(b.shape());
      detail::profiled(rc.profiler, add_name_, "add", false, [&]() -> const Tensor<T>& {
        add_.add(*rc.device, a.size(), a.data(), b.data(), y_.data(), Relu);
        return y_;
      });
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const Tensor<T>* g = &dy;
      if constexpr (Relu) {  // the ReLU's gradient: dy where y > 0
        detail::profiled(rc.profiler, add_name_, "add", true, [&]() -> const Tensor<T>& {
          if (g_.shape() != dy.shape()) g_.resize(dy.shape());
          relu_.backward(*rc.device, dy.size(), y_.data(), dy.data(), g_.data());
          return g_;
        });
        g = &g_;
      }
      // Shortcut first: its parameters were registered after the body's, and
      // backward finishes parameters in reverse registration order (what
      // GradientSync::ready_from reports inside the body relies on it).
      const Tensor<T>& db = shortcut_.backward(*g, rc);
      const Tensor<T>& da = body_.backward(*g, rc);
      if (!propagate_down_ || !rc.needs_dx(params_before_)) return da;
      return detail::profiled(rc.profiler, add_name_, "add", true, [&]() -> const Tensor<T>& {
        if (dx_.shape() != da.shape()) dx_.resize(da.shape());
        add_.add(*rc.device, da.size(), da.data(), db.data(), dx_.data(), false);
        return dx_;
      });
    }
    /// Emits the block into a step plan (nn/plan.hpp), in the order forward
    /// runs it: the shortcut, the body, then the sum ("add", with the ReLU
    /// where FusedRelu), whose inputs are the body's output and the
    /// shortcut's, with what the block's rules need to know of it.
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      namespace f = plan::facts;
      const int s = detail::emit_child<Shortcut>(shortcut_, b, in, rc, shortcut_name_, out_);
      const int a = detail::emit_child<Body>(body_, b, in, rc, body_name_, out_);
      plan::Attrs at;
      at.relu = Relu;
      const int y = b.node(add_name_, "add", {a, s}, out_, at, name_);
      plan::Node& add = b.producer(y);
      add.block_input = in;
      const bool bits = Relu && backend_traits<B>::sum_mask_bits;
      const char* no_bits = Relu ? "no ReLU mask bits on this backend" : "no fused ReLU";
      auto fact = [](bool ok, std::string why) {
        return ok ? plan::Fact::yes() : plan::Fact::no(std::move(why));
      };
      add.facts[f::kSumNeeded] =
          fact(propagate_down_ && rc.needs_dx(params_before_), "nothing before the block needs a gradient");
      add.facts[f::kMaskBits] = fact(bits && rc.training() && b.key().batch * out_.per_example() % 16 == 0,
                                     bits ? "the output's size is not a multiple of 16" : no_bits);
      add.facts[f::kSkipFloat] = fact(bits, no_bits);
      add.facts[f::kBranchBits] = fact(bits, no_bits);
      add.facts[f::kPathBits] =
          fact(bits && bf16_grads_, bits ? "NetOptions::bf16_gradients is off" : no_bits);
      add.facts[f::kBf16Stream] = fact(bits && bf16_residuals_ && rc.training(),
                                       !bits              ? no_bits
                                       : !bf16_residuals_ ? "NetOptions::bf16_residuals is off"
                                                          : "inference");
      add.facts[f::kPooledShortcut] = fact(backend_traits<B>::pool_pad_in_place && hand_overs_,
                                           hand_overs_ ? "no in-place pooling into a pad on this backend"
                                                       : "NetOptions::direct_conv_bn is off");
      return y;
    }
    /// The branches (for inspection).
    node_t<Body, B, T>& body() { return body_; }
    node_t<Shortcut, B, T>& shortcut() { return shortcut_; }

   private:
    ops::Eltwise<B, T> add_;  // the sum (with ReLU)
    ops::Relu<B, T> relu_;    // the ReLU's mask in backward
    node_t<Body, B, T> body_;
    node_t<Shortcut, B, T> shortcut_;
    Tensor<T> y_, g_, dx_;
    bool bf16_grads_ = true;      // NetOptions::bf16_gradients
    bool bf16_residuals_ = true;  // NetOptions::bf16_residuals
    bool hand_overs_ = true;      // NetOptions::direct_conv_bn: a pooled shortcut's gradient in the sum
    std::string name_, add_name_, body_name_, shortcut_name_;
    Shape out_;  // the block's output shape (plans)
    bool propagate_down_ = true;
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
      for (auto& b : blocks_) cur = &b.forward(*cur, rc);
      return *cur;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const Tensor<T>* cur = &dy;
      for (std::size_t i = blocks_.size(); i-- > 0;) {
        cur = &blocks_[i].backward(*cur, rc);
        if (rc.grad_sync && rc.param_grads) rc.grad_sync->ready_from(first_param_[i]);
        if (!down_[i] || !rc.needs_dx(first_param_[i])) break;  // nothing before block i needs a gradient
      }
      return *cur;
    }
    std::size_t size() const { return blocks_.size(); }
    /// Emits the blocks in order into a step plan (nn/plan.hpp).
    int emit(plan::Builder& b, int t, RunContext<B, T>& rc) {
      // No block: the Repeat is an identity in the plan.
      if (blocks_.empty()) return b.node(name_ + " (0 blocks)", "identity", {t}, shape_);
      for (std::size_t i = 0; i < blocks_.size(); ++i)
        t = detail::emit_child<Block>(blocks_[i], b, t, rc, names_[i], shape_);
      return t;
    }
    /// Block i (for inspection).
    node_t<Block, B, T>& block(std::size_t i) { return blocks_.at(i); }

   private:
    std::vector<node_t<Block, B, T>> blocks_;
    std::vector<std::string> names_;        // the blocks' full names (plans)
    std::string name_;                      // where the blocks are (plans)
    Shape shape_;                           // the blocks' input and output shape (plans)
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
  static constexpr int in_channels = L::in_channels;
  static constexpr int out_channels(int in) { return L::out_channels(in); }
  // The channel check (nn/channel_check.hpp): L, at no position of its own.
  using channel_inner = L;
  static constexpr int walk_channels(detail::ChannelWalk& w, int c) { return detail::walk_channels<L>(w, c); }
  template <class B, class T>
  class Node : public node_t<L, B, T> {};
};

}  // namespace cifarnet
