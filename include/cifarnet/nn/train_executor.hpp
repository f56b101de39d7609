// cifarnet/nn/train_executor.hpp — runs a training step plan (nn/plan.hpp)
// straight through: forward node after node, then backward node after node
// in reverse, with explicit tensors instead of a layer tree.
//
// Every node runs as what it is: an identity as an alias (its gradient too),
// a residual sum as the backend's add (with its ReLU; backward: the ReLU's
// mask, then the same gradient to both terms), any layer as its own forward
// and backward (plan::LayerRun, attached by detail::emit_child, so a new
// layer needs no code here; a ConvBatchNorm runs its two nodes as one
// layer, with the fusions inside it). Where a tensor has several readers
// (a block's input, read by its shortcut and its body), the executor sums
// their gradients itself; a gradient that nothing needs (a layer that
// computes no dx: nothing before it has parameters) ends the backward
// there. No hand-over passes between two layers: each one runs on the
// real context alone (RunContext::context_only). The fusions between
// neighbouring layers that the layer tree makes are rules this executor
// does not carry out yet; the plan it runs says so for each of them
// (plan::apply_rules, Key::train_executor).
//
// Buffers: a sum's output and the gradients the executor forms (a ReLU's
// masked gradient, a sum of several readers' gradients) live in its own
// buffers, one per tensor: the layers keep pointers to their inputs until
// backward, so nothing written in a step is reused within it.
#pragma once

#include <any>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cifarnet/core/tensor.hpp"
#include "cifarnet/layers/layer.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/node_run.hpp"
#include "cifarnet/nn/plan.hpp"
#include "cifarnet/nn/profile.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <class B, class T>
class TrainExecutor {
 public:
  /// Prepares `p`, a training plan after its rules, for batches of
  /// p.key.batch images in format `fmt`.
  TrainExecutor(plan::Plan p, DataFormat fmt) : plan_(std::move(p)), fmt_(fmt) { build(); }
  TrainExecutor(const TrainExecutor&) = delete;
  TrainExecutor& operator=(const TrainExecutor&) = delete;

  /// Whether it can run the plan; if not, why().
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const plan::Plan& plan() const { return plan_; }

  /// The training forward of x: the model's output (owned by the executor
  /// or its last layer, valid until the next forward). x must stay as it
  /// is until backward.
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
    if (!ok()) throw std::logic_error("TrainExecutor::forward: " + why_);
    if (!rc.training()) throw std::logic_error("TrainExecutor::forward: the executor runs training steps");
    rc = rc.context_only();
    values_[std::size_t(plan_.input)] = &x;
    for (Step& s : steps_) {
      const Tensor<T>& in = *values_[std::size_t(s.in)];
      switch (s.kind) {
        case Kind::Alias:
          values_[std::size_t(s.out)] = &in;
          break;
        case Kind::Layer:
          values_[std::size_t(s.out)] = &layer_pass(s, in, rc, false);
          break;
        case Kind::Add: {
          const Tensor<T>& b = *values_[std::size_t(s.in2)];
          Tensor<T>& y = s.value;
          ensure_shape(y, plan_.tensors[std::size_t(s.out)].shape, fmt_);
          detail::profiled(rc.profiler, s.name, "add", false, [&] {
            add_.add(*rc.device, y.size(), in.data(), b.data(), y.data(), s.relu);
            return 0;
          });
          values_[std::size_t(s.out)] = &y;
          break;
        }
      }
    }
    forwarded_ = true;
    return *values_[std::size_t(plan_.output)];
  }

  /// The backward of the last forward for output gradient dy: every
  /// layer's parameter gradients, and the model's input gradient (empty
  /// where no layer computes it: the model was built without one).
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    if (!forwarded_) throw std::logic_error("TrainExecutor::backward: no training forward before it");
    rc = rc.context_only();
    for (Grad& g : grads_) g = Grad{};
    grads_[std::size_t(plan_.output)] = Grad{&dy, false};
    for (std::size_t k = steps_.size(); k-- > 0;) {
      Step& s = steps_[k];
      const Tensor<T>* g = grads_[std::size_t(s.out)].t;
      if (!g) continue;  // nothing after this node needs its output's gradient
      switch (s.kind) {
        case Kind::Alias:
          give(s.in, g, rc);
          break;
        case Kind::Layer: {
          const Tensor<T>& dx = layer_pass(s, *g, rc, true);
          if (dx.size()) give(s.in, &dx, rc);
          break;
        }
        case Kind::Add: {
          if (s.relu) {  // the sum's ReLU: its mask (y > 0) on the gradient, once for both terms
            Tensor<T>& m = s.masked;
            match_shape(m, g->shape());
            detail::profiled(rc.profiler, s.name, "add", true, [&] {
              relu_.backward(*rc.device, m.size(), s.value.data(), g->data(), m.data());
              return 0;
            });
            g = &m;
          }
          give(s.in, g, rc);
          give(s.in2, g, rc);
          break;
        }
      }
    }
    forwarded_ = false;
    const Tensor<T>* dx = grads_[std::size_t(plan_.input)].t;
    return dx ? *dx : none_;
  }

  /// The executor's steps and buffers in words (Model::explain_plan).
  std::string describe() const {
    std::ostringstream os;
    if (!ok()) {
      os << "training executor: not used (" << why_ << "): the layers run themselves\n";
      return os.str();
    }
    std::size_t layers = 0, adds = 0, aliases = 0, fan_in = 0;
    for (const Step& s : steps_) {
      layers += s.kind == Kind::Layer;
      adds += s.kind == Kind::Add;
      aliases += s.kind == Kind::Alias;
    }
    for (const plan::TensorInfo& t : plan_.tensors) fan_in += t.consumers.size() > 1;
    os << "training executor: " << steps_.size() << " steps for " << plan_.nodes.size()
       << " nodes: " << layers << " layers' own forward and backward, " << adds << " sums, " << aliases
       << " identities; " << fan_in
       << " tensors with several readers (their gradients summed by the executor)\n";
    return os.str();
  }

 private:
  enum class Kind { Alias, Layer, Add };
  struct Step {
    Kind kind = Kind::Alias;
    std::string name, prof_kind;
    int in = -1, in2 = -1, out = -1;  // tensor ids (in2: a sum's other term)
    bool relu = false;
    const plan::LayerRun<B, T>* layer = nullptr;
    Tensor<T> value, masked;  // a sum's output and its masked gradient
  };
  struct Grad {
    const Tensor<T>* t = nullptr;
    bool own = false;  // in sums_[tensor]: the executor may add into it
  };

  const Tensor<T>& layer_pass(Step& s, const Tensor<T>& in, RunContext<B, T>& rc, bool backward) {
    const plan::LayerRun<B, T>& l = *s.layer;
    auto pass = [&]() -> const Tensor<T>& { return backward ? l.backward(in, rc) : l.forward(in, rc); };
    const Tensor<T>& out =
        l.times_itself ? pass() : detail::profiled(rc.profiler, s.name, s.prof_kind.c_str(), backward, pass);
    rc = rc.context_only();  // no hand-over outlives a layer
    return out;
  }

  // Adds gradient g to tensor t's: the first one is taken as it is; a
  // second one is summed into the executor's buffer for t.
  void give(int t, const Tensor<T>* g, RunContext<B, T>& rc) {
    if (t < 0) return;
    Grad& d = grads_[std::size_t(t)];
    if (!d.t) {
      d = Grad{g, false};
      return;
    }
    if (g->size() != d.t->size())
      throw std::logic_error("TrainExecutor: two gradients of different sizes for tensor t" +
                             std::to_string(t));
    Tensor<T>& acc = sums_[std::size_t(t)];
    if (!d.own) match_shape(acc, d.t->shape());
    detail::profiled(rc.profiler, names_[std::size_t(t)], "add", true, [&] {
      add_.add(*rc.device, acc.size(), d.t->data(), g->data(), acc.data(), false);
      return 0;
    });
    d = Grad{&acc, true};
  }

  template <class S>
  static void match_shape(Tensor<T>& t, const S& shape) {
    if (t.shape() != shape) t.resize(shape);
  }

  void fail(const std::string& why) {
    why_ = why;
    steps_.clear();
  }

  void build() {
    if (!plan_.key.training) return fail("an inference plan (this executor runs training steps)");
    const plan::Plan& p = plan_;
    const std::size_t count = p.nodes.size();
    for (std::size_t i = 0; i < count;) {
      const plan::Node& n = p.nodes[i];
      Step s;
      s.name = n.name;
      s.prof_kind = n.kind;
      s.in = n.inputs.empty() ? -1 : n.inputs[0];
      s.out = n.output;
      std::size_t covers = 1;
      if (n.kind == "identity" && n.inputs.size() == 1) {
        s.kind = Kind::Alias;
      } else if (n.kind == "add" && n.inputs.size() == 2 && !n.run.has_value()) {
        s.kind = Kind::Add;
        s.in2 = n.inputs[1];
        s.relu = n.attrs.relu;
      } else if (const auto* l = std::any_cast<plan::LayerRun<B, T>>(&n.run);
                 l && n.inputs.size() == 1 && l->forward && l->backward) {
        s.kind = Kind::Layer;
        s.layer = l;
        covers = std::size_t(l->covers);
        if (covers < 1 || i + covers > count)
          return fail("layer '" + n.name + "' runs " + std::to_string(l->covers) +
                      " nodes, past the plan's end");
        // the nodes it runs must form a chain, each reading the one before
        for (std::size_t j = i + 1; j < i + covers; ++j)
          if (p.nodes[j].inputs.size() != 1 || p.nodes[j].inputs[0] != p.nodes[j - 1].output)
            return fail("layer '" + n.name + "' runs node '" + p.nodes[j].name +
                        "', which does not read the node before it");
        s.out = p.nodes[i + covers - 1].output;
        if (covers > 1) s.prof_kind = n.layer.empty() ? n.kind : p.nodes[i + covers - 1].kind;
      } else {
        return fail("node '" + n.name + "' (" + n.kind +
                    ") is neither a layer with a forward and backward of its own nor one the executor runs");
      }
      steps_.push_back(std::move(s));
      i += covers;
    }
    values_.assign(p.tensors.size(), nullptr);
    grads_.assign(p.tensors.size(), Grad{});
    sums_.resize(p.tensors.size());
    names_.resize(p.tensors.size());
    for (std::size_t t = 0; t < p.tensors.size(); ++t) {
      const int w = p.tensors[t].producer;
      names_[t] = (w < 0 ? std::string("input") : p.nodes[std::size_t(w)].name) + " (gradient sum)";
    }
  }

  plan::Plan plan_;
  DataFormat fmt_;
  std::string why_;
  std::vector<Step> steps_;
  std::vector<const Tensor<T>*> values_;  // per tensor, during forward and backward
  std::vector<Grad> grads_;               // per tensor, during backward
  std::vector<Tensor<T>> sums_;           // per tensor with several readers: their gradients' sum
  std::vector<std::string> names_;        // where a tensor's gradient sum is booked
  Tensor<T> none_;                        // backward's result where no input gradient was formed
  bool forwarded_ = false;
  ops::Eltwise<B, T> add_;
  ops::Relu<B, T> relu_;
};

}  // namespace cifarnet
