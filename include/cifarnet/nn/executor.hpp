// cifarnet/nn/executor.hpp — runs an inference step plan (nn/plan.hpp)
// straight through, node after node, with explicit tensors and buffers
// assigned from the tensors' lifetimes.
//
// The plan's rules (nn/plan_rules.hpp) say what runs fused: a convolution
// is one backend call, ops::ConvEpilogue, which takes its batch norm folded
// into its weights (conv_bn_fold), the residual sum and its ReLU after it
// (residual_sum_in_conv_epilogue), a standalone convolution's ReLU layer
// (conv_relu_post_op) and, with bf16 convolutions, reads and writes bf16
// activations where only such convolutions read them (bf16_activations). Every other node runs as what it is:
// an identity as an alias, a sum as the backend's add, any leaf layer as its own forward on a plain float
// tensor (plan::LayerRun, attached by detail::emit_child, so a new layer needs no code here). Where a node
// has none of these (a layer the plan could not split and that has no forward of its own), ok() is false,
// why() says which, and the Model runs its layers instead.
//
// Buffers: every output the executor writes itself lives in one of its own
// buffers, reused once the tensor in it is dead (its last reader ran; the
// input of a layer that keeps a pointer to it, a Tap, lives to the end of
// the run);
// float buffers are kept per shape (a layer may read them as tensors),
// bf16 ones per size. A sum in a convolution's epilogue is taken in place
// where its other term lives in an own buffer of the output's type that no
// later node reads; otherwise the backend copies it into the output first.
#pragma once

#include <any>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <sstream>
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
class InferenceExecutor {
 public:
  /// Prepares `p`, an inference plan after its rules, for batches of
  /// p.key.batch images in format `fmt`.
  InferenceExecutor(plan::Plan p, DataFormat fmt) : plan_(std::move(p)), fmt_(fmt) { build(); }
  InferenceExecutor(const InferenceExecutor&) = delete;
  InferenceExecutor& operator=(const InferenceExecutor&) = delete;

  /// Whether it can run the plan; if not, why().
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const plan::Plan& plan() const { return plan_; }

  /// The model's output for x (owned by the executor or its last layer,
  /// valid until the next run).
  const Tensor<T>& run(const Tensor<T>& x, RunContext<B, T>& rc) {
    if (!ok()) throw std::logic_error("InferenceExecutor::run: " + why_);
    slots_[std::size_t(plan_.input)] = Slot{&x, nullptr};
    for (Step& s : steps_) {
      switch (s.kind) {
        case Kind::Alias:
          slots_[std::size_t(s.out)] = slots_[std::size_t(s.in)];
          break;
        case Kind::Layer: {
          const Tensor<T>& in = *slots_[std::size_t(s.in)].f;
          plan::Links<T> none;  // inference: no hand-overs between layers
          const Tensor<T>& y =
              detail::profiled(rc.profiler, s.name, s.prof_kind.c_str(), false,
                               [&]() -> const Tensor<T>& { return s.layer->forward(in, rc, none); });
          slots_[std::size_t(s.out)] = Slot{&y, nullptr};
          break;
        }
        case Kind::Add: {
          Tensor<T>& y = own_float(s);
          detail::profiled(rc.profiler, s.name, "add", false, [&] {
            add_.add(*rc.device, y.size(), slots_[std::size_t(s.in)].f->data(),
                     slots_[std::size_t(s.in2)].f->data(), y.data(), s.relu);
            return 0;
          });
          break;
        }
        case Kind::Conv:
          detail::profiled(rc.profiler, s.name, s.prof_kind.c_str(), false, [&] { return conv(s, rc), 0; });
          break;
      }
    }
    const Slot& out = slots_[std::size_t(plan_.output)];
    return *out.f;
  }

  /// The executor's steps and buffers in words (Model::explain_plan).
  std::string describe() const {
    std::ostringstream os;
    if (!ok()) {
      os << "executor: not used (" << why_ << "): the layers run themselves\n";
      return os.str();
    }
    std::size_t convs = 0, layers = 0, adds = 0, sums = 0, bf16 = 0, own = 0, wino = 0;
    for (const Step& s : steps_) {
      convs += s.kind == Kind::Conv;
      layers += s.kind == Kind::Layer;
      adds += s.kind == Kind::Add;
      sums += s.kind == Kind::Conv && s.in2 >= 0;
      bf16 += s.kind == Kind::Conv && s.out_bf16;
      own += s.kind == Kind::Conv && s.own;
      wino += s.kind == Kind::Conv && s.wino;
    }
    os << "executor: " << steps_.size() << " steps for " << plan_.nodes.size() << " nodes: " << convs
       << " convolutions with their epilogues (" << sums << " with a residual sum, " << bf16
       << " writing bf16, " << own << " in the own kernels, " << wino << " in the own Winograd kernels), "
       << adds << " sums on their own, " << layers << " layers' own forwards; "
       << floats_.size() + bits_.size() << " own buffers, " << own_bytes() << " bytes\n";
    return os.str();
  }
  /// Bytes of the executor's own activation buffers.
  std::size_t own_bytes() const {
    std::size_t b = 0;
    for (const FloatBuf& f : floats_) b += f.shape.size() * sizeof(T);
    for (const BitsBuf& f : bits_) b += f.count * sizeof(std::uint16_t);
    return b;
  }

 private:
  enum class Kind { Alias, Layer, Add, Conv };
  struct Step {
    Kind kind = Kind::Alias;
    std::string name, prof_kind;
    int in = -1, in2 = -1, out = -1;  // tensor ids (in2: a sum's other term)
    bool relu = false, out_bf16 = false;
    bool own = false;   // conv_epilogue_in_registers: in the backend's own kernels
    bool wino = false;  // conv_winograd_epilogue: in the backend's own Winograd kernels
    int buffer = -1;    // own buffer of the output (floats_ or bits_ by out_bf16)
    const plan::LayerRun<B, T>* layer = nullptr;
    const plan::ConvRun<B, T>* conv = nullptr;
    std::unique_ptr<ops::ConvEpilogue<B, T>> op;
  };
  struct Slot {                           // where a tensor's values are while the plan runs
    const Tensor<T>* f = nullptr;         // float
    const std::uint16_t* bits = nullptr;  // bf16
  };
  struct FloatBuf {
    Shape shape;
    Tensor<T> t;
  };
  struct BitsBuf {
    std::size_t count = 0;
    HostVector<std::uint16_t> v;
  };

  Tensor<T>& own_float(const Step& s) {
    FloatBuf& b = floats_[std::size_t(s.buffer)];
    ensure_shape(b.t, b.shape, fmt_);
    slots_[std::size_t(s.out)] = Slot{&b.t, nullptr};
    return b.t;
  }

  void conv(Step& s, RunContext<B, T>& rc) {
    const plan::FoldedWeights<T> w = s.conv->weights(rc);
    ConvGeom g = s.conv->geom;
    g.fmt = fmt_;
    g.n = plan_.key.batch;
    const Slot& x = slots_[std::size_t(s.in)];
    const void* xp = x.bits ? static_cast<const void*>(x.bits) : static_cast<const void*>(x.f->data());
    const void* sp = nullptr;
    bool s_bf16 = false;
    if (s.in2 >= 0) {
      const Slot& t = slots_[std::size_t(s.in2)];
      s_bf16 = t.bits != nullptr;
      sp = s_bf16 ? static_cast<const void*>(t.bits) : static_cast<const void*>(t.f->data());
    }
    void* yp = nullptr;
    if (s.out_bf16) {
      BitsBuf& b = bits_[std::size_t(s.buffer)];
      b.v.resize(b.count);
      yp = b.v.data();
      slots_[std::size_t(s.out)] = Slot{nullptr, b.v.data()};
    } else {
      yp = own_float(s).data();
    }
    s.op->forward(*rc.device, g, xp, x.bits != nullptr, w.w, w.b, w.version, bf16_, sp, s_bf16, yp,
                  s.out_bf16, s.relu, s.own, s.wino);
  }

  void fail(const std::string& why) {
    why_ = why;
    steps_.clear();
  }

  // The steps from the plan's nodes and the rules' verdicts, then buffers.
  void build() {
    if (plan_.key.training) return fail("a training plan (the executor runs inference)");
    const plan::Plan& p = plan_;
    bf16_ = p.key.precision == ConvPrecision::BF16;
    const std::size_t count = p.nodes.size();
    std::vector<bool> done(count, false);
    for (std::size_t i = 0; i < count; ++i) {
      if (done[i]) continue;
      const plan::Node& n = p.nodes[i];
      Step s;
      s.name = n.name;
      s.prof_kind = n.kind;
      s.in = n.inputs.empty() ? -1 : n.inputs[0];
      s.out = n.output;
      if (const auto* f = std::any_cast<plan::ConvRun<B, T>>(&n.run); f && n.kind == "conv") {
        if (!ops::ConvEpilogue<B, T>::supported)
          return fail("no convolution epilogue on this backend, for '" + n.name + "'");
        s.kind = Kind::Conv;
        s.conv = f;
        s.op = std::make_unique<ops::ConvEpilogue<B, T>>();
        if (p.fires("conv_bn_fold", n.name) && i + 1 < count) {  // its batch norm runs in it
          s.prof_kind = "conv_bn";
          const plan::Node& bn = p.nodes[i + 1];
          done[i + 1] = true;
          s.out = bn.output;
          s.relu = bn.attrs.relu;
          if (const plan::Verdict* v = p.verdict("residual_sum_in_conv_epilogue", n.name); v && v->fires) {
            const int a = v->nodes.back();  // conv, bn, add
            const plan::Node& add = p.nodes[std::size_t(a)];
            done[std::size_t(a)] = true;
            s.in2 = add.inputs[0] == bn.output ? add.inputs[1] : add.inputs[0];
            s.out = add.output;
            s.relu = add.attrs.relu;
          }
        } else if (!n.layer.empty()) {
          return fail("the convolution '" + n.name + "' of a layer whose batch norm is not folded");
        } else if (const plan::Verdict* v = p.verdict("conv_relu_post_op", n.name); v && v->fires) {
          const int r = v->nodes.back();  // a standalone convolution's ReLU
          done[std::size_t(r)] = true;
          s.out = p.nodes[std::size_t(r)].output;
          s.relu = true;
        }
        s.out_bf16 = p.fires("bf16_activations", n.name);
        s.own = p.fires("conv_epilogue_in_registers", n.name);
        s.wino = p.fires("conv_winograd_epilogue", n.name);
      } else if (n.kind == "identity" && n.inputs.size() == 1) {
        s.kind = Kind::Alias;
      } else if (n.kind == "add" && n.inputs.size() == 2) {
        s.kind = Kind::Add;
        s.in2 = n.inputs[1];
        s.relu = n.attrs.relu;
      } else if (const auto* l = std::any_cast<plan::LayerRun<B, T>>(&n.run);
                 l && n.inputs.size() == 1 && l->covers == 1) {
        s.kind = Kind::Layer;
        s.layer = l;
      } else {
        return fail("node '" + n.name + "' (" + n.kind +
                    ") is neither a layer with a forward of its own nor one the executor runs");
      }
      steps_.push_back(std::move(s));
    }
    slots_.assign(p.tensors.size(), Slot{});
    assign_buffers();
  }

  // Own buffers from lifetimes: a tensor lives from the step that writes it
  // to the last step that reads it (or an alias of it); the model's output
  // lives to the end. A buffer is free again after its tensor's last reader.
  void assign_buffers() {
    const std::size_t nt = plan_.tensors.size(), ns = steps_.size();
    std::vector<int> root(nt);  // the tensor whose storage a tensor is (aliases)
    std::iota(root.begin(), root.end(), 0);
    std::vector<std::size_t> last(nt, 0);
    for (std::size_t k = 0; k < ns; ++k) {
      const Step& s = steps_[k];
      if (s.kind == Kind::Alias) root[std::size_t(s.out)] = root[std::size_t(s.in)];
      for (int t : {s.in, s.in2})
        if (t >= 0) last[std::size_t(root[std::size_t(t)])] = k;
    }
    // A layer that keeps a pointer to its input until the next run (a Tap:
    // Model::activation): that input is never reused within a run.
    for (const Step& s : steps_)
      if (s.kind == Kind::Layer && s.layer->keeps_input) last[std::size_t(root[std::size_t(s.in)])] = ns;
    if (plan_.output >= 0) last[std::size_t(root[std::size_t(plan_.output)])] = ns;
    // per own buffer (both kinds): bf16 or not, its index in floats_/bits_,
    // and the last step that reads the tensor in it
    std::vector<bool> bits_owner;
    std::vector<int> own_index;
    std::vector<std::size_t> free_at;
    std::vector<int> buffer_of(nt, -1);  // own buffer (an index into free_at) of a root tensor
    for (std::size_t k = 0; k < ns; ++k) {
      Step& s = steps_[k];
      if (s.kind != Kind::Conv && s.kind != Kind::Add) continue;
      const Shape shape = plan_.tensors[std::size_t(s.out)].shape;
      // in place: the sum's other term, dead after this step, in an own buffer of the output's type
      if (s.kind == Kind::Conv && s.in2 >= 0) {
        const int r = root[std::size_t(s.in2)];
        const int b = buffer_of[std::size_t(r)];
        const bool same_type =
            b >= 0 && (s.out_bf16 ? bits_owner[std::size_t(b)] : !bits_owner[std::size_t(b)]);
        if (b >= 0 && same_type && last[std::size_t(r)] == k && r != root[std::size_t(s.in)]) {
          s.buffer = own_index[std::size_t(b)];
          buffer_of[std::size_t(s.out)] = b;
          free_at[std::size_t(b)] = last[std::size_t(s.out)];
          continue;
        }
      }
      int found = -1;
      for (std::size_t b = 0; b < free_at.size(); ++b) {
        if (free_at[b] >= k || bits_owner[b] != s.out_bf16) continue;
        if (s.out_bf16 ? bits_[std::size_t(own_index[b])].count != shape.size()
                       : floats_[std::size_t(own_index[b])].shape != shape)
          continue;
        found = int(b);
        break;
      }
      if (found < 0) {
        found = int(free_at.size());
        bits_owner.push_back(s.out_bf16);
        if (s.out_bf16) {
          own_index.push_back(int(bits_.size()));
          bits_.push_back(BitsBuf{shape.size(), {}});
        } else {
          own_index.push_back(int(floats_.size()));
          floats_.push_back(FloatBuf{shape, {}});
        }
        free_at.push_back(0);
      }
      s.buffer = own_index[std::size_t(found)];
      buffer_of[std::size_t(s.out)] = found;
      free_at[std::size_t(found)] = last[std::size_t(s.out)];
    }
  }

  plan::Plan plan_;
  DataFormat fmt_;
  bool bf16_ = false;
  std::string why_;
  std::vector<Step> steps_;
  std::vector<Slot> slots_;
  std::vector<FloatBuf> floats_;
  std::vector<BitsBuf> bits_;
  ops::Eltwise<B, T> add_;
};

}  // namespace cifarnet
