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
// their gradients itself; a gradient that nothing needs (nothing upstream
// has a parameter needing one, and no input gradient was asked for) is
// dropped, and a layer with nothing to compute is skipped.
//
// The hand-overs between layers are the plan's rules (nn/plan_rules.hpp):
// where one fired, the executor makes it for that one layer call, through
// the call's explicit plan::Links (a bf16 copy of the input, a residual sum
// to write, batch norm sums, a backward sum) and the hooks the layer
// offers (plan::PairHooks: a ConvBatchNorm's bf16 dy and bits backward,
// its output skipped or left as a map, a pad's target for the pool before
// it); no container negotiates anything. docs/ARCHITECTURE.md, "The
// training executor", lists what it does for each rule.
//
// Buffers: a sum's output lives in the executor's buffer for that sum to
// the end of the step (the layers keep pointers to their inputs until
// backward, and a sum's ReLU backward reads it). The float gradients the
// executor forms in backward (a sum's masked gradient, the sum of several
// readers' gradients) come from a pool assigned from their lifetimes: a
// buffer is taken when such a gradient is written and is free again once
// every gradient that refers to it has been read (reference counts: a
// sum's gradient goes to both its terms); a sum of two parts is formed in
// place where its first part is a pooled buffer nothing else refers to.
// describe() reports the pool's bytes against one buffer per gradient.
#pragma once

#include <algorithm>
#include <any>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <numeric>
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
    values_[std::size_t(plan_.input)] = &x;
    carried_.clear();
    std::fill(copies_.begin(), copies_.end(), nullptr);
    std::fill(offers_.begin(), offers_.end(), nullptr);
    for (Step& s : steps_) {
      const Tensor<T>& in = *values_[std::size_t(s.in)];
      switch (s.kind) {
        case Kind::Alias:
          values_[std::size_t(s.out)] = &in;
          copies_[std::size_t(s.out)] = copies_[std::size_t(s.in)];
          break;
        case Kind::Layer:
          layer_forward(s, in, rc);
          break;
        case Kind::Add: {
          Tensor<T>& y = s.value;
          values_[std::size_t(s.out)] = &y;
          if (s.summed) break;  // the body's last batch norm wrote it (residual_sum_in_bn)
          const Tensor<T>& b = *values_[std::size_t(s.in2)];
          ensure_shape(y, plan_.tensors[std::size_t(s.out)].shape, fmt_);
          detail::profiled(rc.profiler, s.name, "add", false, [&] {
            add_.add(*rc.device, y.size(), in.data(), b.data(), y.data(), s.relu);
            return 0;
          });
          break;
        }
      }
    }
    forwarded_ = true;
    return *values_[std::size_t(plan_.output)];
  }

  /// The backward of the last forward for output gradient dy: every
  /// layer's parameter gradients, and the model's input gradient (empty
  /// where no layer computes it: the model was built without one). It may
  /// run again after the same forward (style transfer's frozen backward),
  /// as the layers' own backward may.
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    if (!forwarded_) throw std::logic_error("TrainExecutor::backward: no training forward before it");
    for (Grad& g : grads_) g = Grad{};
    for (Pooled& b : pool_) b.refs = 0;
    formed_ = formed_bytes_ = 0;
    if (rc.params) own_params(*rc.params);
    needed_.assign(plan_.tensors.size(), true);
    requires_.assign(steps_.size(), true);
    if (rc.params && owned_all_) find_needed(*rc.params, rc.input_grad);
    give(plan_.output, Part{&dy, nullptr}, rc);
    const bool sync = rc.grad_sync && rc.param_grads && rc.params;
    if (sync) start_sync(*rc.params);
    for (std::size_t k = steps_.size(); k-- > 0;) {
      Step& s = steps_[k];
      if (!grads_[std::size_t(s.out)].a)
        continue;  // nothing after it needs its gradient (an alias: given through)
      // a layer whose input needs no gradient and that owns no parameter
      // needing one has nothing to compute (a frozen stem)
      if (s.kind == Kind::Layer && s.pooled_into_sum && needed_[std::size_t(root_[std::size_t(s.in)])] &&
          pooled_part(s, rc))
        ;  // its gradient part given as the pad's gradient, for the sum to spread
      else if (s.kind == Kind::Layer && (needed_[std::size_t(root_[std::size_t(s.in)])] || requires_[k]))
        layer_backward(s, rc);
      else if (s.kind == Kind::Layer)
        consume(s.out);
      if (sync && s.kind == Kind::Layer) report_final(k, rc);
      if (s.kind == Kind::Add) add_backward(s, rc);
    }
    const Tensor<T>* dx = grads_[std::size_t(plan_.input)].a ? resolve(plan_.input, rc) : nullptr;
    return dx ? *dx : none_;
  }

  /// How many times the last forward and backward (since the last forward)
  /// carried out `rule` (nn/plan_rules.hpp) where its verdict fired, as the
  /// layers reported it done: what tests compare with the verdicts.
  std::size_t carried(const std::string& rule) const {
    const auto it = carried_.find(rule);
    return it == carried_.end() ? 0 : it->second;
  }

  /// The bytes of the executor's pooled gradient buffers (nn/train_executor.hpp,
  /// "Buffers"), and those of the gradients the last backward formed in
  /// them: what one buffer per gradient would have held.
  std::size_t gradient_pool_bytes() const {
    std::size_t b = 0;
    for (const Pooled& p : pool_) b += p.t.size() * sizeof(T);
    return b;
  }
  std::size_t gradients_formed_bytes() const { return formed_bytes_; }

  /// The executor's steps and buffers in words (Model::explain_plan).
  std::string describe() const {
    std::ostringstream os;
    if (!ok()) {
      os << "training executor: not used (" << why_ << "): the layers run themselves\n";
      return os.str();
    }
    std::size_t layers = 0, adds = 0, aliases = 0, absorbed = 0, fan_in = 0;
    for (const Step& s : steps_) {
      layers += s.kind == Kind::Layer;
      adds += s.kind == Kind::Add;
      aliases += s.kind == Kind::Alias && !s.absorbed;
      absorbed += s.absorbed;
    }
    for (const plan::TensorInfo& t : plan_.tensors) fan_in += t.consumers.size() > 1;
    os << "training executor: " << steps_.size() << " steps for " << plan_.nodes.size()
       << " nodes: " << layers << " layers' own forward and backward, " << adds << " sums, " << aliases
       << " identities";
    if (absorbed) os << ", " << absorbed << " layers run by the layer before them (conv_gelu_bf16_output)";
    os << "; " << fan_in << " tensors with several readers (their gradients summed by the executor)\n";
    std::size_t sum_bytes = 0;
    for (const Step& s : steps_)
      if (s.kind == Kind::Add) sum_bytes += plan_.tensors[std::size_t(s.out)].shape.size() * sizeof(T);
    auto mib = [](std::size_t b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / (1024.0 * 1024.0));
      return std::string(buf);
    };
    os << "  own buffers: the sums' outputs " << mib(sum_bytes) << " (live to backward); ";
    if (formed_bytes_ == 0)
      os << "gradient buffers from lifetimes: no backward has run yet\n";
    else
      os << "gradient buffers from lifetimes: " << pool_.size() << " (" << mib(gradient_pool_bytes())
         << ") for " << formed_ << " gradients formed in the last backward (" << mib(formed_bytes_)
         << " with one buffer each)\n";
    return os.str();
  }

 private:
  enum class Kind { Alias, Layer, Add };
  struct Step {
    Kind kind = Kind::Alias;
    int node = -1;  // its (first) plan node
    std::string name, prof_kind;
    int in = -1, in2 = -1, out = -1;  // tensor ids (in2: a sum's other term)
    bool relu = false;
    const plan::LayerRun<B, T>* layer = nullptr;
    Tensor<T> value;  // a sum's output
    // The rules: a layer that writes the sum after it (that step's index)
    // and whose bf16 copy goes to its readers; a sum written so in the last
    // forward; a sum whose ReLU mask goes into its readers' gradient sum.
    int sum_into = -1;
    bool copy_out = false, summed = false, mask_in_sum = false;
    // A layer that does its input's residual gradient sum in its backward
    // (through the mask of the sum that wrote the input), booked as that sum.
    bool sum_in_backward = false, mask_input = false;
    std::string sum_name;
    // bf16 gradients: a layer that writes its dx as bits into the dy bits
    // of the step dx_bits_to (kOwnBits: into dx_bits, for a sum); a sum that
    // writes its ReLU's mask as bits in the forward (mask_bits, has_bits:
    // written by the last one) and its masked gradient as bits into the dy
    // bits of step grad_bits_to.
    int dx_bits_to = kNoBits, grad_bits_to = kNoBits;
    const char* bits_rule = "";  // the rule that hands the dx bits on (dx_bits_to >= 0)
    // A layer that writes its output only as its bf16 copy, and one that
    // reads its input only through such a copy (bn_bf16_output_alone or
    // conv_bf16_output_to_pool, the rule in alone_rule; the readers of a
    // bf16_residual_stream).
    bool float_alone = false, bf16_in = false;
    // A convolution that applies the GELU layer after it (which then runs
    // as an alias of its output and copy) and writes bf16 alone
    // (conv_gelu_bf16_output).
    bool gelu_bits = false, absorbed = false;  // absorbed: that GELU layer's step (an alias)
    const char* alone_rule = "bn_bf16_output_alone";
    bool copy_is_rule = true;  // copy_out is bf16_copy_to_readers' (not the copy alone_rule leaves)
    // The layer whose kernels compute this one's output from its map
    // (bn_output_into_next_conv); a layer that takes the batch norm sums
    // of the layer before it in its backward (bn_sums_in_next_conv_backward).
    int defer_to = -1;
    bool takes_sums = false;
    // A pool that writes into the pad of step pad_step (pool_into_pad); a
    // layer whose backward sum forms the gradient of the shortcut whose pad
    // is step pooled_from and pool step pooled_by (pooled_shortcut_gradient).
    int pad_step = -1, pooled_from = -1, pooled_by = -1;
    // A pool whose backward does not run: its input's gradient part is the
    // pad's gradient, spread by the sum that reads it (pooled_gradient_in_sum).
    bool pooled_into_sum = false;
    // bf16_residual_stream: a sum written as its bf16 copy and mask bits
    // alone (skip_float; float_skipped: by the last forward), and one whose
    // identity shortcut is read as such a copy.
    bool skip_float = false, float_skipped = false, shortcut_bits = false;
    // bf16_dy_sum: a layer whose dy, when it is the sum of two parts, the
    // executor writes as bf16 bits into the layer's own dy buffer.
    bool dy_sum_bits = false;
    // bn_sums_in_dy_sum: the sum that writes the dy bits of a layer (this
    // sum's gradient into grad_bits_to, or this layer's own dy_sum_bits)
    // takes that layer's batch norm sums in the same pass.
    bool dy_sums = false;
    HostVector<std::uint16_t> dx_bits, mask_bits;
    bool wants_bits = false, has_bits = false;
  };
  static constexpr int kNoBits = -1, kOwnBits = -2;
  static constexpr const char* kConvToPool = "conv_bf16_output_to_pool";
  static constexpr const char* kBnStream = "bn_bf16_stream_into_block";
  static constexpr const char* kDySum = "bf16_dy_sum";
  static constexpr const char* kDySums = "bn_sums_in_dy_sum";
  static constexpr const char* kConvGelu = "conv_gelu_bf16_output";
  static constexpr const char* kPoolToBn = "pool_bf16_output_to_bn";
  // A part of a gradient: a float tensor or bf16 bits (of the tensor's
  // size), or a pooled view: the backward of a stride x stride average
  // pool of `pooled` (a channel-padded gradient at its pool's channels,
  // pixels `channels` apart), formed only by the sum that reads it
  // (pooled_gradient_in_sum).
  struct Part {
    const Tensor<T>* f = nullptr;
    const std::uint16_t* bits = nullptr;
    int buf = -1;  // f (or the tensor `pooled` points into) is pool_[buf]
    const T* pooled = nullptr;
    std::size_t channels = 0, stride = 0;
    explicit operator bool() const { return f || bits || pooled; }
  };
  // A tensor's gradient during backward: one part, or two not yet summed
  // (a tensor with several readers), the sum formed when a node reads it.
  struct Grad {
    Part a, b;
    bool premasked = false;  // a is through the ReLU mask of the sum that wrote the tensor
  };
  // A pooled gradient buffer and how many gradients (or the executor,
  // while it writes one) refer to it; free at zero.
  struct Pooled {
    Tensor<T> t;
    int refs = 0;
  };
  // A free pooled buffer of `shape` (a new one if none is free), held once.
  template <class S>
  int take(const S& shape) {
    int found = -1;
    for (std::size_t b = 0; b < pool_.size() && found < 0; ++b)
      if (pool_[b].refs == 0 && pool_[b].t.shape() == shape) found = int(b);
    if (found < 0) {
      pool_.emplace_back();
      pool_.back().t.resize(shape);
      found = int(pool_.size()) - 1;
    }
    pool_[std::size_t(found)].refs = 1;
    ++formed_;
    formed_bytes_ += pool_[std::size_t(found)].t.size() * sizeof(T);
    return found;
  }
  void hold(const Part& p) {
    if (p.buf >= 0) ++pool_[std::size_t(p.buf)].refs;
  }
  void drop(const Part& p) {
    if (p.buf >= 0) --pool_[std::size_t(p.buf)].refs;
  }
  // Tensor t's gradient has been read by the step that needed it: its
  // buffers are free once nothing else refers to them.
  void consume(int t) {
    Grad& d = grads_[std::size_t(t)];
    drop(d.a);
    drop(d.b);
    d = Grad{};
  }

  // A layer's training forward, with what the rules give it (plan::Links):
  // the bf16 copy of its input that the input's writer made
  // (bf16_copy_to_readers), the batch norm sums its writer handed over
  // (bn_sums_in_next_conv_backward), the residual sum after it to write in
  // its own pass (residual_sum_in_bn); and what it leaves: its batch norm
  // sums and a bf16 copy of what it wrote.
  void layer_forward(Step& s, const Tensor<T>& in, RunContext<B, T>& rc) {
    const plan::LayerRun<B, T>& l = *s.layer;
    if (s.float_alone) l.pair.skip_float_output(), count(s.alone_rule);  // the earlier layer
    if (s.bf16_in) l.pair.require_bf16_input();  // the later one (or a reader of a bf16 stream)
    if (s.gelu_bits) l.pair.gelu_bits_output(), count(kConvGelu);
    if (s.defer_to >= 0) {  // bn_output_into_next_conv: the earlier layer's output as the later one's map
      steps_[std::size_t(s.defer_to)].layer->pair.take_normalised_input(l.pair.defer_output());
      count("bn_output_into_next_conv");
    }
    if (s.pad_step >= 0) {  // pool_into_pad: the pool writes into the pad's output
      l.pair.pad_into(steps_[std::size_t(s.pad_step)].layer->pair.pad_target(rc, shape_of(in, fmt_).n));
      count("pool_into_pad");
    }
    plan::Links<T> k;
    if (s.takes_sums) {  // bn_sums_in_next_conv_backward: the earlier's sums
      k.input_sums = offers_[std::size_t(s.in)];
      k.input_sums_shared = plan_.tensors[std::size_t(s.in)].consumers.size() > 1;
      if (k.input_sums) count("bn_sums_in_next_conv_backward");
    }
    k.input_bf16 = copies_[std::size_t(s.in)];
    Step* sum = s.sum_into >= 0 ? &steps_[std::size_t(s.sum_into)] : nullptr;
    plan::SumInPass<T> into;
    if (sum) {
      Tensor<T>& y = sum->value;
      ensure_shape(y, plan_.tensors[std::size_t(sum->out)].shape, fmt_);
      into.shortcut = values_[std::size_t(sum->in2)]->data();
      into.out = y.data();
      into.n = y.size();
      into.relu = sum->relu;
      if (sum->wants_bits) {
        sum->mask_bits.resize(y.size() / 16);
        into.mask = sum->mask_bits.data();
      }
      // bf16_residual_stream: the shortcut (an identity) read as its bf16
      // copy; the sum written as its copy and mask bits alone
      if (sum->shortcut_bits) {
        into.shortcut_bits = copies_[std::size_t(sum->in2)];
        if (!into.shortcut_bits)
          throw std::logic_error("TrainExecutor: the sum '" + sum->name +
                                 "' has no bf16 copy of its shortcut");
      }
      into.skip_float = sum->skip_float && sum->wants_bits;
      k.sum = &into;
    }
    auto pass = [&]() -> const Tensor<T>& { return l.forward(in, rc, k); };
    const Tensor<T>& out =
        l.times_itself ? pass() : detail::profiled(rc.profiler, s.name, s.prof_kind.c_str(), false, pass);
    values_[std::size_t(s.out)] = &out;
    if (sum) {
      sum->summed = into.done;
      sum->has_bits = into.done && into.mask_done;
      sum->float_skipped = into.done && into.float_skipped;
      if (sum->shortcut_bits && !sum->summed)
        throw std::logic_error("TrainExecutor: the sum '" + sum->name + "' of a bf16 shortcut was not taken");
      if (sum->summed) count("residual_sum_in_bn");
      if (sum->has_bits) count("relu_mask_bits");
      if (sum->float_skipped) count("bf16_residual_stream");
    }
    // what the layer left for the tensor it wrote (or the sum it wrote):
    // its batch norm sums, its bf16 copy
    const bool summed = sum && sum->summed;
    const int t = summed ? sum->out : s.out;
    const void* wrote = summed ? static_cast<const void*>(sum->value.data()) : out.data();
    if (k.sums_out && k.sums_out->of == wrote) offers_[std::size_t(t)] = k.sums_out;
    if (k.copy && s.copy_out && k.copy_of == wrote) {
      copies_[std::size_t(t)] = k.copy;
      if (s.copy_is_rule) count("bf16_copy_to_readers");
    }
  }

  // y = a + b where the mask bit is set (no mask: y = a + b), each of a
  // and b float or bf16 bits, y float (yf) or bits (yb)
  // (Eltwise::add_masked_bits; add where all is float and there is no mask).
  // `like`: a tensor of the sum's shape (a pooled part needs its geometry).
  void sum_parts(RunContext<B, T>& rc, const Tensor<T>& like, std::size_t n, Part a, Part b,
                 const std::uint16_t* mask, T* yf, std::uint16_t* yb) {
    if (a.pooled) std::swap(a, b);  // a float sum is the same either way round
    if (a.pooled) throw std::logic_error("TrainExecutor: a sum of two pooled gradient parts");
    if (a.f && b.f && yf && !mask) return add_.add(*rc.device, n, a.f->data(), b.f->data(), yf, false);
    if constexpr (backend_traits<B>::sum_mask_bits) {
      if (b.pooled) {  // pooled_gradient_in_sum
        const ChannelGeom g = ChannelGeom::make(fmt_, shape_of(like, fmt_));
        auto with_a = [&](const auto* ap) {
          if (yb)
            add_.add_pooled_bits(*rc.device, g, ap, b.pooled, b.channels, b.stride, mask, yb);
          else
            add_.add_pooled_bits(*rc.device, g, ap, b.pooled, b.channels, b.stride, mask, yf);
        };
        if (a.bits)
          with_a(a.bits);
        else
          with_a(a.f->data());
        return;
      }
      auto with_a = [&](const auto* ap) {
        auto with_b = [&](const auto* bp) {
          if (yb)
            add_.add_masked_bits(*rc.device, n, ap, bp, mask, yb);
          else
            add_.add_masked_bits(*rc.device, n, ap, bp, mask, yf);
        };
        if (b.bits)
          with_b(b.bits);
        else
          with_b(b.f->data());
      };
      if (a.bits)
        with_a(a.bits);
      else
        with_a(a.f->data());
    } else {
      throw std::logic_error("TrainExecutor: bf16 gradient parts or mask bits on a backend without them");
    }
  }

  // bn_sums_in_dy_sum: the parts a + b (through `mask`) written as bits
  // into layer l's dy by l itself, with its batch norm's backward sums in
  // the same pass. False (nothing done) where a part is pooled.
  bool sum_with_bn_sums(RunContext<B, T>& rc, const plan::LayerRun<B, T>& l, const Part& a, const Part& b,
                        const std::uint16_t* mask) {
    if (a.pooled || b.pooled || !l.pair.sum_into_dy) return false;
    l.pair.sum_into_dy(rc, a.f ? a.f->data() : nullptr, a.bits, b.f ? b.f->data() : nullptr, b.bits, mask);
    count(kDySums);
    return true;
  }

  // Tensor t's gradient as one float tensor: two parts are summed first,
  // in place into the first where it is a pooled buffer that nothing else
  // refers to, else into a buffer taken from the pool.
  const Tensor<T>* resolve(int t, RunContext<B, T>& rc) {
    Grad& d = grads_[std::size_t(t)];
    if (!d.b) {
      if (d.a.bits || d.a.pooled)
        throw std::logic_error("TrainExecutor: the gradient of tensor t" + std::to_string(t) + " is " +
                               (d.a.bits ? "bf16 bits" : "a pooled part alone") +
                               ", for a reader that takes float");
      return d.a.f;
    }
    const bool in_place = d.a.buf >= 0 && pool_[std::size_t(d.a.buf)].refs == 1;
    const int b = in_place ? d.a.buf : take(values_[std::size_t(t)]->shape());
    Tensor<T>& acc = pool_[std::size_t(b)].t;
    detail::profiled(rc.profiler, names_[std::size_t(t)], kinds_[std::size_t(t)].c_str(), true, [&] {
      sum_parts(rc, acc, acc.size(), d.a, d.b, nullptr, acc.data(), nullptr);
      return 0;
    });
    if (!in_place) drop(d.a);
    drop(d.b);
    d = Grad{Part{&acc, nullptr, b}, Part{}, false};
    return d.a.f;
  }

  // A layer's backward, with what the rules give it: its dy as bf16 bits
  // in its own buffer (written there by the layer or sum after it); its dx
  // written as bits into the next one's (bf16_dx_between_conv_bn) or for
  // its input's sum (bf16_branch_gradient); the residual sum of its input's
  // gradient (the shortcut's part, given already) to do in its own passes,
  // through the ReLU mask of the block that wrote the input
  // (residual_sum_in_conv_backward).
  void layer_backward(Step& s, RunContext<B, T>& rc) {
    const plan::LayerRun<B, T>& l = *s.layer;
    if (s.dy_sum_bits && grads_[std::size_t(s.out)].b) {  // bf16_dy_sum: the two parts summed as bits
      Grad& d = grads_[std::size_t(s.out)];
      std::uint16_t* yb = l.pair.dy_bits(rc);
      const Tensor<T>& like = *values_[std::size_t(s.out)];
      detail::profiled(rc.profiler, names_[std::size_t(s.out)], kinds_[std::size_t(s.out)].c_str(), true,
                       [&] {
                         if (s.dy_sums && sum_with_bn_sums(rc, l, d.a, d.b, nullptr)) return 0;
                         sum_parts(rc, like, like.size(), d.a, d.b, nullptr, nullptr, yb);
                         return 0;
                       });
      drop(d.a);
      drop(d.b);
      d = Grad{Part{nullptr, yb}, Part{}, false};
      count(kDySum);
    }
    const Grad& g = grads_[std::size_t(s.out)];
    const bool dy_bits = g.a.bits && !g.b;
    if (dy_bits && (!l.pair.dy_bits || g.a.bits != l.pair.dy_bits(rc)))
      throw std::logic_error("TrainExecutor: layer '" + s.name + "' given its dy as bf16 bits elsewhere");
    const Tensor<T>* dy = dy_bits ? nullptr : resolve(s.out, rc);
    std::uint16_t* to = nullptr;
    if (s.dx_bits_to >= 0) {
      to = steps_[std::size_t(s.dx_bits_to)].layer->pair.dy_bits(rc);
      count(s.bits_rule);
    } else if (s.dx_bits_to == kOwnBits) {
      s.dx_bits.resize(values_[std::size_t(s.in)]->size());
      to = s.dx_bits.data();
      count("bf16_branch_gradient");
    }
    const int in = root_[std::size_t(s.in)];  // the tensor the input is (through aliases)
    const Grad& d = grads_[std::size_t(in)];
    // the shortcut's part: given (an identity), or formed from the pad's
    // gradient by the sum (a pool written into a pad: pooled_shortcut_gradient)
    std::size_t before = 0, channels = 0, stride = 0;
    const int pad_out = s.pooled_from >= 0 ? root_[std::size_t(steps_[std::size_t(s.pooled_from)].out)] : -1;
    const Grad* pad = pad_out >= 0 ? &grads_[std::size_t(pad_out)] : nullptr;
    const bool pooled =
        pad && !d.a && pad->a.f && !pad->b &&
        steps_[std::size_t(s.pooled_by)].layer->pair.pooled_gradient(before, channels, stride);
    const bool sum = !to && dy && s.sum_in_backward && ((d.a.f && !d.b) || pooled);
    plan::Links<T> k;
    plan::GradSum<T> gs;
    if (sum) {
      gs.of = values_[std::size_t(s.in)]->data();
      if (pooled) {
        gs.pooled = pad->a.f->data() + before;
        gs.pooled_channels = channels;
        gs.pooled_stride = stride;
      } else {
        gs.other = d.a.f->data();
      }
      gs.mask_relu = s.mask_input ? values_[std::size_t(s.in)]->data() : nullptr;
      gs.name = &s.sum_name;
      k.grad_sum = &gs;
    }
    auto pass = [&]() -> const Tensor<T>& {
      return dy && !to ? l.backward(*dy, rc, k) : l.pair.backward_bits(dy, rc, to);
    };
    const Tensor<T>& dx =
        l.times_itself ? pass() : detail::profiled(rc.profiler, s.name, s.prof_kind.c_str(), true, pass);
    const bool done = sum && gs.done;
    if (done) count("residual_sum_in_conv_backward");
    if (done && pooled) count("pooled_shortcut_gradient");
    consume(s.out);
    if (done && pooled)  // the shortcut's gradient is in it: its pad and pool have none to pass back
      consume(pad_out);
    if (done) {  // dx is the input's whole gradient (through the mask)
      consume(in);
      grads_[std::size_t(in)] = Grad{Part{&dx, nullptr}, Part{}, s.mask_input};
    } else if (to)
      give(s.in, Part{nullptr, to}, rc);
    else if (dx.size())
      give(s.in, Part{&dx, nullptr}, rc);
  }

  // pooled_gradient_in_sum: instead of the pool's backward, its input's
  // gradient part as a view of the padded gradient the pad handed on (its
  // pool's channels), held until the sum reads it. False where the pool
  // did not write into the pad in place this step or its gradient is not
  // one float tensor: the pool's own backward runs then.
  bool pooled_part(Step& s, RunContext<B, T>& rc) {
    const Grad& g = grads_[std::size_t(root_[std::size_t(s.out)])];
    std::size_t before = 0, channels = 0, stride = 0;
    if (!g.a.f || g.a.bits || g.b || !s.layer->pair.pooled_gradient(before, channels, stride)) return false;
    Part p;
    p.pooled = g.a.f->data() + before;
    p.channels = channels;
    p.stride = stride;
    for (std::size_t b = 0; b < pool_.size() && p.buf < 0; ++b)
      if (&pool_[b].t == g.a.f) p.buf = int(b);
    // The pad handed its own gradient on without holding it (its buffer
    // may show no holder now): hold it again while this part refers to it.
    hold(p);
    consume(s.out);
    give(s.in, p, rc);
    drop(p);
    count("pooled_gradient_in_sum");
    return true;
  }

  // A sum's backward: its ReLU's mask (y > 0, or the bits its forward
  // wrote) on its output's gradient, summed in the same pass where that
  // has two parts (residual_mask_in_sum), unless a reader applied it
  // already; the result, float or bf16 bits into its body's last layer's
  // dy bits (bf16_residual_gradient), to both terms.
  void add_backward(Step& s, RunContext<B, T>& rc) {
    Grad& d = grads_[std::size_t(s.out)];
    Part g;
    int mb = -1;  // the pooled buffer taken for the masked gradient
    if (!s.relu || (d.premasked && !d.b)) {
      if (s.relu) count("residual_mask_in_sum");  // the reader's backward applied it (mask_input)
      if (d.b) resolve(s.out, rc);
      g = d.a;
    } else {
      // (add_masked takes float parts only: bits and a pooled part go
      // through the mask bits, or are summed first by resolve())
      const bool floats = !d.a.bits && !d.b.bits && !d.a.pooled && !d.b.pooled;
      const bool in_sum = d.b && (s.has_bits || (s.mask_in_sum && floats));
      std::uint16_t* yb = in_sum && s.has_bits && s.grad_bits_to >= 0
                              ? steps_[std::size_t(s.grad_bits_to)].layer->pair.dy_bits(rc)
                              : nullptr;
      Part out{nullptr, yb};
      if (!yb) {
        mb = take(s.value.shape());  // held until given to both terms
        out = Part{&pool_[std::size_t(mb)].t, nullptr, mb};
      }
      T* masked = out.f ? pool_[std::size_t(mb)].t.data() : nullptr;
      detail::profiled(rc.profiler, s.name, "add", true, [&] {
        const std::size_t n = s.value.size();
        if (in_sum) {
          count("residual_mask_in_sum");
          if (s.has_bits) {
            if (yb) count("bf16_residual_gradient");
            if (!(yb && s.dy_sums &&
                  sum_with_bn_sums(rc, *steps_[std::size_t(s.grad_bits_to)].layer, d.a, d.b,
                                   s.mask_bits.data())))
              sum_parts(rc, s.value, n, d.a, d.b, s.mask_bits.data(), masked, yb);
          } else {
            add_.add_masked(*rc.device, n, d.a.f->data(), d.b.f->data(), s.value.data(), masked);
          }
        } else {
          if (s.float_skipped)
            throw std::logic_error("TrainExecutor: the sum '" + s.name +
                                   "' kept only its bf16 copy and mask bits, and its gradient has one part");
          relu_.backward(*rc.device, n, s.value.data(), resolve(s.out, rc)->data(), masked);
        }
        return 0;
      });
      g = out;
    }
    give(s.in, g, rc);
    give(s.in2, g, rc);
    consume(s.out);
    if (mb >= 0) --pool_[std::size_t(mb)].refs;  // the hold taken while writing it
  }

  // Gradient synchronization overlapped with backward (GradientSync): the
  // parameters each layer step owns (registered under its nodes' names),
  // and after each one's backward, the lowest id from which every
  // parameter's gradient is final.
  void own_params(const Parameters<T>& P) {
    if (step_params_.size() == steps_.size() && owned_count_ == P.count()) return;
    step_params_.assign(steps_.size(), {});
    owned_count_ = P.count();
    owned_all_ = true;
    for (std::size_t id = 0; id < P.count(); ++id) {
      const std::string& name = P.info(id).name;
      bool found = false;
      for (std::size_t k = 0; k < steps_.size() && !found; ++k) {
        const Step& s = steps_[k];
        if (s.kind != Kind::Layer) continue;
        for (int i = s.node; i < s.node + s.layer->covers && !found; ++i) {
          const std::string& n = plan_.nodes[std::size_t(i)].name;
          found = name.size() > n.size() && name.compare(0, n.size(), n) == 0 && name[n.size()] == '/';
        }
        if (found) step_params_[k].push_back(id);
      }
      owned_all_ = owned_all_ && found;
    }
  }
  // Which tensors' gradients anything needs: those downstream of a
  // parameter that requires a gradient, or of the model's input where its
  // gradient was asked for (as the layer tree's needs_dx; a parameter no
  // layer step owns by name keeps every gradient needed).
  void find_needed(const Parameters<T>& P, bool input_grad) {
    std::fill(needed_.begin(), needed_.end(), false);
    requires_.assign(steps_.size(), false);
    needed_[std::size_t(plan_.input)] = input_grad;
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const Step& s = steps_[k];
      requires_[k] = std::any_of(step_params_[k].begin(), step_params_[k].end(),
                                 [&](std::size_t id) { return P.requires_grad(id); });
      bool n = requires_[k] || needed_[std::size_t(s.in)];
      if (s.in2 >= 0) n = n || needed_[std::size_t(s.in2)];
      needed_[std::size_t(s.out)] = n;
    }
  }
  void start_sync(const Parameters<T>& P) {
    final_.assign(P.count(), false);
    frontier_ = P.count();
  }
  void report_final(std::size_t k, RunContext<B, T>& rc) {
    for (std::size_t id : step_params_[k]) final_.at(id) = true;
    const std::size_t before = frontier_;
    while (frontier_ > 0 && final_[frontier_ - 1]) --frontier_;
    if (frontier_ < before) rc.grad_sync->ready_from(frontier_);
  }

  // Adds gradient part g to tensor t's (an alias's to the tensor it stands
  // for): kept as a part, summed when a third comes or a node reads it.
  void give(int t, Part g, RunContext<B, T>& rc) {
    if (t < 0 || !g) return;
    t = root_[std::size_t(t)];
    if (!needed_[std::size_t(t)]) return;  // nothing upstream needs it
    Grad& d = grads_[std::size_t(t)];
    hold(g);
    if (!d.a) {
      d.a = g;
    } else if (!d.b) {
      d.b = g;
    } else {
      resolve(t, rc);
      d.b = g;
    }
  }

  template <class S>
  static void match_shape(Tensor<T>& t, const S& shape) {
    if (t.shape() != shape) t.resize(shape);
  }

  // The hooks of the layer step k offers its neighbours; null where k is
  // no step or not a layer's.
  const plan::PairHooks<B, T>* hooks(int k) const {
    return k >= 0 && steps_[std::size_t(k)].layer ? &steps_[std::size_t(k)].layer->pair : nullptr;
  }

  int producer_node(int t) const { return plan_.tensors[std::size_t(t)].producer; }

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
      s.node = int(i);
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
    // The rules' verdicts the executor carries out.
    std::vector<int> step_of(p.tensors.size(), -1);  // the step that writes each tensor
    std::vector<int> step_at(p.nodes.size(), -1);    // the step that runs each node (its first)
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      step_of[std::size_t(steps_[k].out)] = int(k);
      step_at[std::size_t(steps_[k].node)] = int(k);
    }
    root_.resize(p.tensors.size());
    std::iota(root_.begin(), root_.end(), 0);
    for (const Step& s : steps_)
      if (s.kind == Kind::Alias) root_[std::size_t(s.out)] = root_[std::size_t(s.in)];
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      Step& s = steps_[k];
      if (s.kind == Kind::Layer)
        s.copy_out = p.fires("bf16_copy_to_readers", p.nodes[std::size_t(producer_node(s.out))].name);
      if (s.kind != Kind::Add) continue;
      s.mask_in_sum = s.relu && p.fires("residual_mask_in_sum", s.name);
      if (const plan::Verdict* v = p.verdict("residual_sum_in_conv_backward", s.name); v && v->fires) {
        const int f = step_at[std::size_t(v->nodes.back())];  // the body's first layer
        if (f < 0 || steps_[std::size_t(f)].kind != Kind::Layer)
          return fail("the sum '" + s.name + "' in the backward of a layer the executor does not run");
        Step& first = steps_[std::size_t(f)];
        first.sum_in_backward = true;
        first.sum_name = s.name;
        const int w = step_of[std::size_t(root_[std::size_t(first.in)])];  // who wrote the block's input
        first.mask_input = w >= 0 && steps_[std::size_t(w)].kind == Kind::Add && steps_[std::size_t(w)].relu;
      }
      if (const plan::Verdict* v = p.verdict("bf16_branch_gradient", s.name); v && v->fires) {
        const int f =
            step_at[std::size_t(v->nodes.back())];  // the body's first layer writes bits for the sum
        if (!hooks(f) || !hooks(f)->backward_bits)
          return fail("the sum '" + s.name + "' given bf16 bits by a layer that cannot write them");
        steps_[std::size_t(f)].dx_bits_to = kOwnBits;
      }
      if (p.fires("bf16_residual_gradient",
                  s.name)) {  // its masked gradient as bits into its body's last layer
        const int w = step_of[std::size_t(s.in)];
        if (!hooks(w) || !hooks(w)->dy_bits)
          return fail("the sum '" + s.name + "' hands bf16 bits to a layer that cannot read them");
        s.grad_bits_to = w;
      }
      if (!p.fires("residual_sum_in_bn", s.name)) continue;
      const int w = step_of[std::size_t(s.in)];
      if (w < 0 || steps_[std::size_t(w)].kind != Kind::Layer)
        return fail("the sum '" + s.name + "' in a batch norm the executor does not run as a layer");
      steps_[std::size_t(w)].sum_into = int(k);
    }
    // The mask bits a sum writes with its forward, for the gradient sum
    // of its output (relu_mask_bits, anchored at the sum that writes them).
    for (const plan::Verdict& v : p.verdicts) {
      if (v.rule == "relu_mask_bits" && v.fires) {
        const int k = step_at[std::size_t(v.nodes[0])];
        if (k >= 0 && steps_[std::size_t(k)].kind == Kind::Add) steps_[std::size_t(k)].wants_bits = true;
      }
      if (v.rule == "bn_bf16_output_alone" && v.fires) {
        const int e = step_of[std::size_t(p.nodes[std::size_t(v.nodes[0])].output)];
        const int l = step_at[std::size_t(v.nodes[1])];
        if (!hooks(e) || !hooks(l) || !hooks(e)->skip_float_output || !hooks(l)->require_bf16_input ||
            !steps_[std::size_t(e)].copy_out)
          return fail("bn_bf16_output_alone between layers without bf16 hand-overs");
        steps_[std::size_t(e)].float_alone = true;
        steps_[std::size_t(l)].bf16_in = true;
      }
      if (v.rule == kConvToPool && v.fires) {  // the convolution's copy alone, which the pool reads
        const int e = step_at[std::size_t(v.nodes[0])], l = step_at[std::size_t(v.nodes[1])];
        if (!hooks(e) || !hooks(l) || !hooks(e)->skip_float_output || !hooks(l)->require_bf16_input)
          return fail("conv_bf16_output_to_pool between layers without bf16 hand-overs");
        steps_[std::size_t(e)].float_alone = steps_[std::size_t(e)].copy_out = true;
        steps_[std::size_t(e)].alone_rule = kConvToPool;
        steps_[std::size_t(e)].copy_is_rule = false;
        steps_[std::size_t(l)].bf16_in = true;
      }
      if (v.rule == kPoolToBn && v.fires) {  // the pool's copy alone, which the batch norm reads
        const int e = step_at[std::size_t(v.nodes[0])], l = step_at[std::size_t(v.nodes[1])];
        if (!hooks(e) || !hooks(l) || !hooks(e)->skip_float_output || !hooks(l)->require_bf16_input)
          return fail(std::string(kPoolToBn) + " between layers without bf16 hand-overs");
        steps_[std::size_t(e)].float_alone = steps_[std::size_t(e)].copy_out = true;
        steps_[std::size_t(e)].alone_rule = kPoolToBn;
        steps_[std::size_t(e)].copy_is_rule = false;
        steps_[std::size_t(l)].bf16_in = true;
      }
      if (v.rule == kConvGelu && v.fires) {  // the GELU as the convolution's post-op, bf16 alone
        const int e = step_at[std::size_t(v.nodes[0])], a = step_at[std::size_t(v.nodes[1])],
                  l = step_at[std::size_t(v.nodes[2])];
        if (!hooks(e) || !hooks(l) || !hooks(e)->gelu_bits_output || !hooks(l)->require_bf16_input || a < 0 ||
            steps_[std::size_t(a)].kind != Kind::Layer ||
            steps_[std::size_t(a)].in != steps_[std::size_t(e)].out)
          return fail(std::string(kConvGelu) + " between layers without the hand-over");
        steps_[std::size_t(e)].gelu_bits = steps_[std::size_t(e)].copy_out = true;
        steps_[std::size_t(e)].copy_is_rule = false;
        // the GELU layer does not run: its output is the convolution's (the
        // stale float tensor of its shape) and that one's bf16 copy
        steps_[std::size_t(a)].kind = Kind::Alias;
        steps_[std::size_t(a)].layer = nullptr;
        steps_[std::size_t(a)].absorbed = true;
        steps_[std::size_t(l)].bf16_in = true;
        std::iota(root_.begin(), root_.end(), 0);  // the tensors an alias stands for, again
        for (const Step& x : steps_)
          if (x.kind == Kind::Alias) root_[std::size_t(x.out)] = root_[std::size_t(x.in)];
      }
      if (v.rule == "bn_output_into_next_conv" && v.fires) {
        const int e = step_of[std::size_t(p.nodes[std::size_t(v.nodes[0])].output)];
        const int l = step_at[std::size_t(v.nodes[1])];
        if (!hooks(e) || !hooks(l) || !hooks(e)->defer_output || !hooks(l)->take_normalised_input)
          return fail("bn_output_into_next_conv between layers without the hand-over");
        steps_[std::size_t(e)].defer_to = l;
      }
      if (v.rule == "pool_into_pad" && v.fires) {
        const int pl = step_at[std::size_t(v.nodes[0])], pd = step_at[std::size_t(v.nodes[1])];
        if (!hooks(pl) || !hooks(pd) || !hooks(pl)->pad_into || !hooks(pd)->pad_target)
          return fail("pool_into_pad between layers without the hand-over");
        steps_[std::size_t(pl)].pad_step = pd;
      }
      if (v.rule == "pooled_shortcut_gradient" && v.fires) {
        const plan::Node& add = p.nodes[std::size_t(v.nodes[0])];
        const plan::Verdict* sv = p.verdict("residual_sum_in_conv_backward", add.name);
        const int f = sv && sv->fires ? step_at[std::size_t(sv->nodes.back())] : -1;
        const int pl = step_at[std::size_t(v.nodes[1])], pd = step_of[std::size_t(add.inputs[1])];
        if (f < 0 || pd < 0 || !hooks(pl) || !hooks(pl)->pooled_gradient)
          return fail("pooled_shortcut_gradient at '" + add.name + "' without its sum or pool");
        steps_[std::size_t(f)].pooled_from = pd;
        steps_[std::size_t(f)].pooled_by = pl;
      }
      if (v.rule == "pooled_gradient_in_sum" && v.fires) {
        const int pl = step_at[std::size_t(v.nodes[1])];
        if (!hooks(pl) || !hooks(pl)->pooled_gradient)
          return fail("pooled_gradient_in_sum at '" + p.nodes[std::size_t(v.nodes[1])].name +
                      "', a layer without the pooled gradient");
        steps_[std::size_t(pl)].pooled_into_sum = true;
      }
      if (v.rule == "bf16_residual_stream" && v.fires) {
        const plan::Node& a = p.nodes[std::size_t(v.nodes[0])];
        const plan::Node& b = p.nodes[std::size_t(v.nodes[1])];
        const int ai = step_at[std::size_t(v.nodes[0])], bi = step_at[std::size_t(v.nodes[1])];
        const auto& readers = p.tensors[std::size_t(b.block_input)].consumers;
        if (ai < 0 || bi < 0 || b.block_input != a.output)
          return fail("bf16_residual_stream between '" + a.name + "' and '" + b.name + "' that do not meet");
        steps_[std::size_t(ai)].skip_float = true;
        // the next block reads the sum only as its copy: its identity
        // shortcut in its sum, its average pool and its body's first layer
        for (int r : readers) {
          const int k = step_at[std::size_t(r)];
          if (p.nodes[std::size_t(r)].kind == "identity") {
            if (p.nodes[std::size_t(r)].output != b.inputs[1])
              return fail("bf16_residual_stream into the identity '" + p.nodes[std::size_t(r)].name +
                          "', which is not the next block's shortcut");
            steps_[std::size_t(bi)].shortcut_bits = true;
            continue;
          }
          if (!hooks(k) || !hooks(k)->require_bf16_input)
            return fail("bf16_residual_stream into '" + p.nodes[std::size_t(r)].name +
                        "', which reads float");
          steps_[std::size_t(k)].bf16_in = true;
        }
      }
      if (v.rule == kDySum && v.fires) {  // the readers' gradients summed as bits into its dy
        const int w = step_of[std::size_t(p.nodes[std::size_t(v.nodes[0])].output)];
        if (!hooks(w) || !hooks(w)->dy_bits || !hooks(w)->backward_bits)
          return fail(std::string(kDySum) + " at '" + p.nodes[std::size_t(v.nodes[0])].name +
                      "', a layer that cannot read bf16 dy bits");
        steps_[std::size_t(w)].dy_sum_bits = true;
      }
      if (v.rule == kDySums && v.fires) {  // the batch norm's sums in the pass that writes its dy bits
        const plan::Node& n = p.nodes[std::size_t(v.nodes[0])];
        const int k = n.kind == "add" ? step_at[std::size_t(v.nodes[0])] : step_of[std::size_t(n.output)];
        const int w = k >= 0 && n.kind == "add" ? steps_[std::size_t(k)].grad_bits_to : k;
        if (k < 0 || w < 0 || !hooks(w) || !hooks(w)->sum_into_dy)
          return fail(std::string(kDySums) + " at '" + n.name + "', whose dy bits no layer's sum writes");
        steps_[std::size_t(k)].dy_sums = true;
      }
      if (v.rule == kBnStream && v.fires) {  // the batch norm's copy alone, read by the block after it
        const plan::Node& bn = p.nodes[std::size_t(v.nodes[0])];
        const int e = step_of[std::size_t(bn.output)], ai = step_at[std::size_t(v.nodes[1])];
        if (e < 0 || ai < 0 || !hooks(e) || !hooks(e)->skip_float_output || !steps_[std::size_t(e)].copy_out)
          return fail(std::string(kBnStream) + " at '" + bn.name + "' without its bf16 copy");
        steps_[std::size_t(e)].float_alone = true;
        steps_[std::size_t(e)].alone_rule = kBnStream;
        for (int r : p.tensors[std::size_t(bn.output)].consumers) {
          const int k = step_at[std::size_t(r)];
          if (p.nodes[std::size_t(r)].kind == "identity") {  // the block's shortcut, in its sum
            steps_[std::size_t(ai)].shortcut_bits = true;
            continue;
          }
          if (!hooks(k) || !hooks(k)->require_bf16_input)
            return fail(std::string(kBnStream) + " into '" + p.nodes[std::size_t(r)].name +
                        "', which reads float");
          steps_[std::size_t(k)].bf16_in = true;
        }
      }
      if (v.rule == "bn_sums_in_next_conv_backward" && v.fires) {
        const int l = step_at[std::size_t(v.nodes[1])];
        if (l < 0 || steps_[std::size_t(l)].kind != Kind::Layer)
          return fail("bn_sums_in_next_conv_backward into a layer the executor does not run");
        steps_[std::size_t(l)].takes_sums = true;
      }
      const bool conv_bits = v.rule == "pool_bf16_dx_to_conv" || v.rule == "bn_bf16_dx_to_standalone_conv";
      if ((v.rule != "bf16_dx_between_conv_bn" && !conv_bits) || !v.fires) continue;
      // the later layer's dx as bits into the earlier one's dy bits (a
      // ConvBatchNorm's, or a standalone convolution's before a max pool or
      // a batch norm)
      const int e = step_of[std::size_t(p.nodes[std::size_t(v.nodes[0])].output)];
      const int l = step_at[std::size_t(v.nodes[1])];
      if (!hooks(e) || !hooks(l) || !hooks(e)->dy_bits || !hooks(l)->backward_bits)
        return fail(v.rule + " at '" + p.nodes[std::size_t(v.nodes[1])].name +
                    "' between layers without bf16 hand-overs");
      steps_[std::size_t(l)].dx_bits_to = e;
      steps_[std::size_t(l)].bits_rule = !conv_bits                         ? "bf16_dx_between_conv_bn"
                                         : v.rule == "pool_bf16_dx_to_conv" ? "pool_bf16_dx_to_conv"
                                                                            : "bn_bf16_dx_to_standalone_conv";
    }
    values_.assign(p.tensors.size(), nullptr);
    copies_.assign(p.tensors.size(), nullptr);
    offers_.assign(p.tensors.size(), nullptr);
    grads_.assign(p.tensors.size(), Grad{});
    // A gradient sum is booked as part of the backward of the layer that
    // wrote the tensor (the model's input: of its first reader).
    names_.resize(p.tensors.size());
    kinds_.resize(p.tensors.size());
    for (std::size_t t = 0; t < p.tensors.size(); ++t) {
      const plan::TensorInfo& ti = p.tensors[t];
      const int w = ti.producer >= 0 ? ti.producer : ti.consumers.empty() ? -1 : ti.consumers[0];
      names_[t] = w >= 0 ? p.nodes[std::size_t(w)].name : "input";
      kinds_[t] = w >= 0 ? p.nodes[std::size_t(w)].kind : "add";
    }
  }

  plan::Plan plan_;
  DataFormat fmt_;
  std::string why_;
  std::vector<Step> steps_;
  std::vector<const Tensor<T>*> values_;       // per tensor, during forward and backward
  std::vector<const std::uint16_t*> copies_;   // per tensor: its bf16 copy, where its writer made one
  std::vector<plan::BnSums<T>*> offers_;       // per tensor: the batch norm sums its writer offered
  std::vector<Grad> grads_;                    // per tensor, during backward
  std::deque<Pooled> pool_;                    // gradient buffers from lifetimes (take, consume)
  std::size_t formed_ = 0, formed_bytes_ = 0;  // gradients the last backward formed in pooled buffers
  std::vector<int> root_;                      // per tensor: the tensor it is (through aliases)
  std::vector<std::string> names_, kinds_;     // where a tensor's gradient sum is booked
  Tensor<T> none_;                             // backward's result where no input gradient was formed
  bool forwarded_ = false;
  std::vector<std::vector<std::size_t>> step_params_;  // per step: the parameters it owns (own_params)
  std::size_t owned_count_ = 0;                        // the parameter count own_params saw
  bool owned_all_ = false;                             // every parameter has a step
  std::vector<bool> needed_;                           // per tensor: its gradient is needed (find_needed)
  std::vector<bool> requires_ = {};                    // per step: it owns a parameter needing a gradient
  std::vector<bool> final_;                            // per parameter: its gradient is final
  std::size_t frontier_ = 0;                           // every parameter from it on is final
  std::map<std::string, std::size_t> carried_;         // per rule: how often the last step carried it out
  void count(const char* rule) { ++carried_[rule]; }
  ops::Eltwise<B, T> add_;
  ops::Relu<B, T> relu_;
};

}  // namespace cifarnet
