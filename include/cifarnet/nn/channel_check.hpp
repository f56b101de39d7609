// cifarnet/nn/channel_check.hpp — the compile-time check that a network's
// channel counts agree, run once per Model<Net, ...> (nn/model.hpp).
//
// walk_channels<Net> follows the channel count through the network as it
// is written: a layer that declares its input channels (Conv2d<In, ...>,
// BatchNorm2d<C>, Dense<In, ...>; layer.hpp's in_channels) must get that
// many from the layers before it, and a Residual's body and shortcut must
// give the same count. Containers (nn/sequential.hpp) walk their children
// through a static walk_channels member and name them by position through
// a member template child<I>; a type whose single child adds no position
// (Named, Repeat) names it channel_inner.
//
// The first disagreement fails to compile inside detail::channel_mismatch
// or detail::residual_channel_mismatch, whose template arguments (printed
// by the compiler on the first line of the error) name both layer types,
// their positions and both channel counts, e.g.
//
//   channel_mismatch<layer_at<2>, Conv2d<8, 8, 3, ...>, expects_input_channels<8>,
//                    but_layer_at<1>, Conv2d<3, 4, 3, ...>, outputs_channels<4>>
//
// Positions count a container's template arguments from 1, as written;
// nested containers make a path: layer_at<4, 2, 1> is the first argument of
// the second argument of the network's fourth. Residual<Body, Shortcut>
// counts its body as 1 and its shortcut as 2; Named and Repeat add no
// position. The check runs where the Model is declared: a C++17 alias
// (`using Net = Sequential<...>;`) instantiates nothing, so the compiler
// cannot point at it.
//
// Counts that are unknown at compile time (-1: a layer that takes any
// count, Dense<0, N>) match anything; the Model checks every shape once
// when it is built (ShapeError).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "cifarnet/core/error.hpp"

namespace cifarnet {
namespace detail {

/// A walk over a network's channel counts: where it is, and the first
/// place the counts disagree.
struct ChannelWalk {
  static constexpr int kMaxDepth = 12;  // deeper positions are cut to this many
  struct Path {
    int at[kMaxDepth] = {};
    int depth = 0;
  };
  Path here;    // the node being walked
  Path setter;  // the last layer that set the count flowing on
  enum Kind : int { none = 0, layer = 1, residual = 2 };
  int kind = none;
  Path where;                 // layer: the layer that disagrees; residual: the block
  Path from;                  // layer: the layer whose output count reaches it
  int first = 0, second = 0;  // layer: expects, gets; residual: body's, shortcut's output
  int block_input = -1;       // residual: the block's input channels

  constexpr void enter(int i) {
    if (here.depth < kMaxDepth) here.at[here.depth] = i;
    ++here.depth;
  }
  constexpr void leave() { --here.depth; }
  constexpr Path clipped(Path p) const {
    if (p.depth > kMaxDepth) p.depth = kMaxDepth;
    return p;
  }
  constexpr void layer_mismatch(int expects, int gets) {
    if (kind != none) return;
    kind = layer;
    where = clipped(here);
    from = clipped(setter);
    first = expects;
    second = gets;
  }
  constexpr void residual_mismatch(int in, int body, int shortcut) {
    if (kind != none) return;
    kind = residual;
    where = clipped(here);
    first = body;
    second = shortcut;
    block_input = in;
  }
};

template <class L, class = void>
struct WalksChannels : std::false_type {};
template <class L>
struct WalksChannels<L, std::void_t<decltype(L::walk_channels(std::declval<ChannelWalk&>(), 0))>>
    : std::true_type {};

/// Walks layer type L given `c` input channels (-1: unknown); returns its
/// output channels (-1: unknown).
template <class L>
constexpr int walk_channels(ChannelWalk& w, int c) {
  if constexpr (WalksChannels<L>::value) {
    return L::walk_channels(w, c);
  } else {
    constexpr int in = L::in_channels;
    if (in >= 0 && c >= 0 && in != c) w.layer_mismatch(in, c);
    const int out = in >= 0 ? L::out_channels(in) : (c < 0 ? -1 : L::out_channels(c));
    if (in >= 0 || out != c) w.setter = w.here;
    return out;
  }
}

// The names the compiler prints with a failed channel check: the positions
// and the counts that disagree are these templates' arguments.
template <int... Position>
struct layer_at {};
template <int... Position>
struct but_layer_at {};
template <int... Position>
struct block_at {};
template <int C>
struct expects_input_channels {};
template <int C>
struct outputs_channels {};
template <int C>
struct block_input_channels {};
template <int C>
struct body_outputs_channels {};
template <int C>
struct shortcut_outputs_channels {};

template <class Position, class Layer, class Expects, class FromPosition, class Earlier, class Gives>
struct channel_mismatch {
  static_assert(dependent_false<Position, Layer, Expects, FromPosition, Earlier, Gives>,
                "cifarnet: a layer's input channel count differs from the count the layers before it give: "
                "the arguments of channel_mismatch<layer_at<P...>, Layer, expects_input_channels<C>, "
                "but_layer_at<Q...>, Earlier, outputs_channels<D>> in this error name the layer, where it "
                "is and the channels it expects, and the earlier layer whose output reaches it with D "
                "channels. Positions count template arguments from 1, as written; a path (layer_at<4, 2>) "
                "goes into nested containers (Residual<Body, Shortcut>: body 1, shortcut 2; Named and "
                "Repeat add none).");
};

template <class Position, class BlockInput, class Body, class BodyOut, class Shortcut, class ShortcutOut>
struct residual_channel_mismatch {
  static_assert(dependent_false<Position, BlockInput, Body, BodyOut, Shortcut, ShortcutOut>,
                "cifarnet: Residual<Body, Shortcut>: body and shortcut give different channel counts, so "
                "they cannot be added (use a shortcut that maps the block's input to the body's output "
                "channels): the arguments of residual_channel_mismatch<block_at<P...>, "
                "block_input_channels<C>, Body, body_outputs_channels<B>, Shortcut, "
                "shortcut_outputs_channels<S>> in this error name the block's position (template arguments "
                "counted from 1, as written; block_at<> is the network itself), both branches and their "
                "channel counts.");
};

/// The layer type at a position path in L.
template <class L, class = void>
struct ChannelInner {
  using type = void;
};
template <class L>
struct ChannelInner<L, std::void_t<typename L::channel_inner>> {
  using type = typename L::channel_inner;
};
template <class L, int... P>
struct TypeAt {
  using type = L;
};
template <class L, int P0, int... P>
struct TypeAt<L, P0, P...> {
  using Inner = typename ChannelInner<L>::type;
  template <class U>
  struct Child {
    using type = typename U::template child<P0>;
  };
  using Next = typename std::conditional_t<std::is_void_v<Inner>, Child<L>, ChannelInner<L>>::type;
  using type =
      typename std::conditional_t<std::is_void_v<Inner>, TypeAt<Next, P...>, TypeAt<Next, P0, P...>>::type;
};

template <class Net>
struct ChannelWalkOf {
  static constexpr ChannelWalk run() {
    ChannelWalk w;
    walk_channels<Net>(w, -1);
    return w;
  }
  static constexpr ChannelWalk value = run();
};

/// The position path of the disagreeing layer (or block), or of the layer
/// whose output reaches it (From).
template <class Net, bool From>
struct WalkPath {
  static constexpr ChannelWalk::Path value =
      From ? ChannelWalkOf<Net>::value.from : ChannelWalkOf<Net>::value.where;
};
template <class Net, template <int...> class Tag, bool From, class Seq>
struct PathOf;
template <class Net, template <int...> class Tag, bool From, std::size_t... I>
struct PathOf<Net, Tag, From, std::index_sequence<I...>> {
  using tag = Tag<WalkPath<Net, From>::value.at[I]...>;
  using type = typename TypeAt<Net, WalkPath<Net, From>::value.at[I]...>::type;
  template <int Branch>
  using branch = typename TypeAt<Net, WalkPath<Net, From>::value.at[I]..., Branch>::type;
};
template <class Net, template <int...> class Tag, bool From>
using PathIn =
    PathOf<Net, Tag, From, std::make_index_sequence<std::size_t(WalkPath<Net, From>::value.depth)>>;

/// Complete when Net's channel counts agree; otherwise completing it fails
/// naming what disagrees (its base: channel_mismatch or
/// residual_channel_mismatch). Model<Net> asks for its size.
template <class Net, int Kind = ChannelWalkOf<Net>::value.kind>
struct ChannelCheck {};
template <class Net, class At = PathIn<Net, layer_at, false>, class From = PathIn<Net, but_layer_at, true>>
using LayerMismatchOf =
    channel_mismatch<typename At::tag, typename At::type,
                     expects_input_channels<ChannelWalkOf<Net>::value.first>, typename From::tag,
                     typename From::type, outputs_channels<ChannelWalkOf<Net>::value.second>>;
template <class Net, class At = PathIn<Net, block_at, false>>
using ResidualMismatchOf = residual_channel_mismatch<
    typename At::tag, block_input_channels<ChannelWalkOf<Net>::value.block_input>,
    typename At::template branch<1>, body_outputs_channels<ChannelWalkOf<Net>::value.first>,
    typename At::template branch<2>, shortcut_outputs_channels<ChannelWalkOf<Net>::value.second>>;
template <class Net>
struct ChannelCheck<Net, ChannelWalk::layer> : LayerMismatchOf<Net> {};
template <class Net>
struct ChannelCheck<Net, ChannelWalk::residual> : ResidualMismatchOf<Net> {};

}  // namespace detail
}  // namespace cifarnet
