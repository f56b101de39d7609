// cifarnet/layers/layer.hpp — what every layer type provides, and helpers.
//
// A layer is a type (its compile-time hyper-parameters) with a nested
// `template <class Backend, class T> class Node` (its run-time state: output
// and gradient buffers, parameter ids, backend op objects). Node interface:
//
//   Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx);
//       registers parameters under `scope`, returns the output shape
//       (n is ignored: batch size may change at run time).
//   const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc);
//       returns the layer's own output buffer (valid until its next forward).
//       In Train mode the layer may keep a pointer to x for backward, so x
//       must stay alive and unchanged until backward.
//   const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc);
//       writes parameter gradients (overwrites; every parameter belongs to one
//       layer) and returns dx, unless the layer was built with
//       propagate_down = false (then the returned tensor is empty).
//
// Compile-time traits (from LayerBase, overridden by layers):
//   kind          automatic name base ("conv" -> conv1, conv2 in a scope)
//   first_index   where automatic numbering starts (1; blocks use 0)
//   transparent   containers that add no scope level (Sequential, Repeat)
//   in_channels   required input channels, or -1 when any / inferred
//   out_channels(c)  output channels for c input channels (-1: unknown)
//   container     true for types that only run children (Sequential,
//                 Residual, Repeat, Identity): the profiler times leaves only
//   keeps_input   the layer keeps a pointer to its input after an inference
//                 forward (Tap); the plan executor then leaves that buffer be
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/node_run.hpp"
#include "cifarnet/nn/plan.hpp"

namespace cifarnet {

struct LayerBase {
  static constexpr const char* kind = "layer";
  static constexpr int first_index = 1;
  static constexpr bool transparent = false;
  static constexpr bool container = false;
  static constexpr int in_channels = -1;
  static constexpr int out_channels(int in) { return in; }
  /// Whether the layer keeps a pointer to its input after an inference
  /// forward (a Tap, for Model::activation): the plan executor then keeps
  /// that input's buffer unchanged until its next run.
  static constexpr bool keeps_input = false;
};

/// The run-time node of layer type L on backend B with scalar T.
template <class L, class B, class T>
using node_t = typename L::template Node<B, T>;

namespace detail {
/// An output written in place into the next layer's buffer (an average
/// pool into the ChannelPad after it, nn/sequential.hpp): `of`, the
/// writer's output tensor (sized, not written), and `at`, where it wrote.
struct PaddedInput {
  const void* of = nullptr;
  const void* at = nullptr;
};
/// Checks x against the built per-example shape (c, h, w); returns its shape.
template <class T>
Shape check_input(const std::string& layer, const Shape& built, const Tensor<T>& x, DataFormat fmt) {
  if (x.dimension() != 4) throw ShapeError("layer '" + layer + "' expects a 4-D tensor");
  const Shape s = shape_of(x, fmt);
  if (s.c != built.c || s.h != built.h || s.w != built.w) {
    Shape e = built;
    e.n = s.n;
    throw ShapeError("layer '" + layer + "' expects input " + e.str() + " but got " + s.str());
  }
  return s;
}

/// What every layer node keeps: its scoped name (for error messages), the
/// data format, whether it must produce dx, the built per-example input
/// shape, and its output and input-gradient buffers (resized per batch size,
/// reused otherwise). Layers derive from it and call bind() first in build().
template <class T>
class NodeBase {
 protected:
  void bind(const Shape& in, const Scope& scope, const BuildContext<T>& ctx) {
    name_ = scope.prefix();
    fmt_ = ctx.fmt;
    down_ = ctx.propagate_down;
    params_before_ = ctx.params ? ctx.params->count() : 0;
    in_ = in;
  }
  /// Whether backward must produce dx in this run (the build's decision and
  /// RunContext::needs_dx).
  template <class RC>
  bool need_dx(const RC& rc) const {
    return down_ && rc.needs_dx(params_before_);
  }
  std::string name_;
  DataFormat fmt_ = DataFormat::NCHW;
  bool down_ = true;
  std::size_t params_before_ = 0;  // parameters registered before this node
  Shape in_;
  Tensor<T> y_, dx_;
};

/// Trait: does L define a fixed name (Named<Tag, ...>)?
template <class L, class = void>
struct has_fixed_name : std::false_type {};
template <class L>
struct has_fixed_name<L, std::void_t<decltype(L::fixed_name)>> : std::true_type {};

/// Builds child `node` of type L inside `parent`: containers that are
/// transparent share the parent scope; others get a named child scope.
/// `full_name`, when given, receives the child's scope name.
template <class L, class N, class T>
Shape build_child(N& node, const Shape& in, Scope& parent, BuildContext<T>& ctx,
                  std::string* full_name = nullptr) {
  if constexpr (L::transparent) {
    if (full_name) *full_name = parent.prefix();
    return node.build(in, parent, ctx);
  } else {
    std::string leaf;
    if constexpr (has_fixed_name<L>::value)
      leaf = L::fixed_name;
    else
      leaf = parent.next(L::kind, L::first_index);
    Scope s = parent.child(leaf);
    if (full_name) *full_name = s.prefix();
    return node.build(in, s, ctx);
  }
}

/// A layer type's static plan attributes (nn/plan.hpp): its plan_attrs()
/// where it declares them (Conv2d, BatchNorm2d, Pool2d), else none.
template <class L, class = void>
struct PlanAttrsOf {
  static plan::Attrs get() { return {}; }
};
template <class L>
struct PlanAttrsOf<L, std::void_t<decltype(L::plan_attrs())>> {
  static plan::Attrs get() { return L::plan_attrs(); }
};
/// Whether node N's forward takes the call's hand-overs (plan::Links):
/// forward(x, rc, links), which the training executor then calls.
template <class N, class B, class T, class = void>
struct TakesLinks : std::false_type {};
template <class N, class B, class T>
struct TakesLinks<N, B, T,
                  std::void_t<decltype(std::declval<N&>().forward(
                      std::declval<const Tensor<T>&>(), std::declval<RunContext<B, T>&>(),
                      std::declval<plan::Links<T>&>()))>> : std::true_type {};
template <class N, class B, class T, class = void>
struct HasEmit : std::false_type {};
template <class N, class B, class T>
struct HasEmit<N, B, T,
               std::void_t<decltype(std::declval<N&>().emit(
                   std::declval<plan::Builder&>(), 0, std::declval<RunContext<B, T>&>()))>> : std::true_type {
};

/// Emits child `node` of type L into a step plan (nn/plan.hpp), reading
/// tensor `in`: its own emit() where it has one (containers, layers made of
/// several nodes or recording facts), else one opaque node named `name`
/// with output shape `out`. A leaf's node, and the opaque node of a
/// container without emit() (a user's), runs as the layer's own forward
/// and backward in the plan executors (plan::LayerRun, nn/node_run.hpp).
/// Returns the id of the tensor it writes.
template <class L, class N, class B, class T>
int emit_child(N& node, plan::Builder& b, int in, RunContext<B, T>& rc, const std::string& name,
               const Shape& out) {
  int t = -1;
  if constexpr (HasEmit<N, B, T>::value)
    t = node.emit(b, in, rc);
  else
    t = b.node(name, L::kind, {in}, out, PlanAttrsOf<L>::get());
  if constexpr (!HasEmit<N, B, T>::value || !L::container)
    if (!b.producer(t).run.has_value()) {  // unless its emit() attached a run of its own
      plan::LayerRun<B, T> r;
      r.forward = [&node](const Tensor<T>& x, RunContext<B, T>& c, plan::Links<T>& k) -> const Tensor<T>& {
        if constexpr (TakesLinks<N, B, T>::value)
          return node.forward(x, c, k);
        else
          return (void)k, node.forward(x, c);
      };
      r.backward = [&node](const Tensor<T>& dy, RunContext<B, T>& c, plan::Links<T>&) -> const Tensor<T>& {
        return node.backward(dy, c);
      };
      r.keeps_input = L::keeps_input;
      r.times_itself = L::container;
      b.producer(t).run = std::move(r);
    }
  return t;
}
}  // namespace detail

}  // namespace cifarnet
