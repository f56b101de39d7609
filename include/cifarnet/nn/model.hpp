// cifarnet/nn/model.hpp — a network type bound to a backend and a scalar.
//
// Model<Net, Backend, T> builds Net's nodes once for a per-example input
// shape (c, h, w): shapes are inferred layer by layer, every parameter gets
// its hierarchical name in one arena, and the arena is initialized from the
// seed. The batch size may change from call to call (the last partial batch,
// eval batches); each layer resizes its buffers and its backend caches per
// geometry, so steady-state steps allocate nothing.
//
//   Model<ResNetCifar, backend::OneDnn> net({3, 32, 32}, DataFormat::NCHW,
//                                          NetOptions().with_repeat(n), seed);
//   const auto& logits = net.forward(images, Mode::Train);
//   float loss = softmax_cross_entropy(logits, labels, &dlogits);
//   net.backward(dlogits);             // writes every trainable gradient
//   net.parameters() ...               // optimizers, checkpoints, EMA
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>
#include <string>
#include <tuple>
#include <type_traits>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/core/tensor_memory.hpp"
#include "cifarnet/layers/layer.hpp"
#include "cifarnet/nn/channel_check.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/executor.hpp"
#include "cifarnet/nn/plan_rules.hpp"
#include "cifarnet/nn/train_executor.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

/// Per-example input shape: channels, height, width.
struct InputShape {
  std::size_t c = 0, h = 0, w = 0;
};

template <class Net, class B = backend::Reference, class T = float>
class Model {
  // Net's compile-time channel counts agree (nn/channel_check.hpp: a
  // mismatch fails inside it, naming both layers and their positions).
  static_assert(sizeof(detail::ChannelCheck<Net>) > 0);

 public:
  using Backend = B;
  using Scalar = T;
  using NodeType = node_t<Net, B, T>;

  /// Builds and initializes the network. `input_gradient` makes backward()
  /// also return d(loss)/d(input) (style transfer); otherwise the first layer
  /// skips it.
  explicit Model(InputShape input, DataFormat fmt = DataFormat::NCHW, NetOptions options = {},
                 std::uint64_t seed = 0, bool input_gradient = false)
      : Model(nullptr, input, fmt, std::move(options), seed, input_gradient) {}

  /// The same, run on `device` (say a Device<backend::Cuda> built for GPU i,
  /// one per tower) instead of the backend's default one (null: default).
  Model(std::unique_ptr<Device<B>> device, InputShape input, DataFormat fmt, NetOptions options = {},
        std::uint64_t seed = 0, bool input_gradient = false);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;

  /// Re-initializes every parameter (and BN statistics) from `seed`.
  void reset(std::uint64_t seed) {
    host_parameters();  // a host write (device-resident: uploaded before the next op)
    Rng rng(seed);
    params_.initialize(rng);
    params_.zero_grad();
  }

  /// Runs the network on x (shape (n, c, h, w) in the model's format).
  /// The result is owned by the model and valid until the next forward. It
  /// is host memory on every backend (a CUDA model downloads its output).
  const Tensor<T>& forward(const Tensor<T>& x, Mode mode = Mode::Train);

  /// forward(), with the result where the backend keeps the model's
  /// tensors: the same as forward() on the CPU backends, device memory on
  /// CUDA (its elements are for the backend's ops, not the host; the
  /// Trainer hands it to the loss op). No copy, no wait for the GPU.
  const Tensor<T>& forward_on_device(const Tensor<T>& x, Mode mode = Mode::Train);

  /// forward_on_device() on a batch of `n` byte images of h x w x c bytes,
  /// interleaved (data::Batch::pixels). On a GPU the bytes go up through
  /// the input ring (a quarter of the float batch's PCIe bytes) and
  /// Eltwise::from_bytes makes the float input tensor there; elsewhere the
  /// backend converts them in host memory. The same values, so the same
  /// result as the float batch.
  const Tensor<T>& forward_pixels_on_device(const std::uint8_t* pixels, std::size_t n, std::size_t h,
                                            std::size_t w, std::size_t c, Mode mode = Mode::Train);

  /// Backpropagates d(loss)/d(output) through the last Train-mode forward;
  /// writes every trainable gradient (overwriting) and returns d(loss)/d(x)
  /// when the model was built with input_gradient (else an empty tensor;
  /// host memory on every backend). dy may be host or device memory.
  const Tensor<T>& backward(const Tensor<T>& dy);

  /// Where the layers' activations and gradients live on a backend whose
  /// memory is not the host's (docs/ARCHITECTURE.md, "Storage"): on (the
  /// default) the device only, allocated from Device::tensor_memory(); off,
  /// host tensors that every op stages (copies in and out, a debugging
  /// path). Set it before the first forward. A no-op on the CPU backends.
  void set_device_activations(bool on) {
    if (forwarded_ && on != device_activations_)
      throw ConfigError("Model::set_device_activations: set it before the first forward");
    device_activations_ = on;
  }
  bool device_activations() const { return !backend_traits<B>::host_memory && device_activations_; }
  /// The memory the model makes current while its layers run (null: none;
  /// its tensors then come from whatever memory is current, host memory
  /// unless the caller's TensorMemoryScope says otherwise).
  TensorMemory* tensor_memory() {
    if constexpr (!backend_traits<B>::host_memory)
      if (device_activations_) return &device_->tensor_memory();
    return nullptr;
  }

  /// Freezes (false) or unfreezes the weights: frozen, backward computes
  /// only activation gradients (cheaper; style transfer).
  void set_weight_gradients(bool on) { param_grads_ = on; }
  /// Synchronized batch norm: with a reducer set, every BatchNorm2d in
  /// Mode::Train uses the statistics of the global batch over all replicas
  /// (distributed::SyncBatchNorm); null (the default) restores local ones.
  void set_cross_replica(CrossReplicaSum* reducer) { cross_replica_ = reducer; }
  /// The step plan of this model for `mode` and batches of `batch` images
  /// (nn/plan.hpp): its nodes and tensors, and the fusion rules' verdicts
  /// (nn/plan_rules.hpp). Needs no forward first.
  plan::Plan step_plan(Mode mode, std::size_t batch);
  /// step_plan(mode, batch) in words: the nodes, where each rule fired and
  /// why it did not elsewhere (the examples' --explain-plan).
  std::string explain_plan(Mode mode, std::size_t batch) {
    std::string s = plan::describe(step_plan(mode, batch));
    if (mode == Mode::Train) {
      if (const auto* e = train_executor(batch))
        s += e->describe();
      else
        s += "training executor: off (NetOptions::plan_training): the layers run themselves, unfused\n";
    } else {
      if (const auto* e = executor(batch))
        s += e->describe();
      else
        s += options_.plan_executor
                 ? "executor: none on this backend (no ops::ConvEpilogue): the layers run "
                   "themselves\n"
                 : "executor: off (NetOptions::plan_executor): the layers run themselves\n";
    }
    return s;
  }
  /// The plan executor that runs Mode::Infer on batches of `batch` images
  /// (nn/executor.hpp), made on first use; null where it is off
  /// (NetOptions::plan_executor) or the backend has none. One that cannot
  /// run the plan says why (ok(), why()); then the layers run themselves.
  InferenceExecutor<B, T>* executor(std::size_t batch) {
    if constexpr (ops::ConvEpilogue<B, T>::supported) {
      if (!options_.plan_executor || batch == 0) return nullptr;
      for (const auto& e : executors_)
        if (e->plan().key.batch == batch) return e.get();
      if (executors_.size() >= 4) executors_.erase(executors_.begin());  // batch sizes seen last
      executors_.push_back(std::make_unique<InferenceExecutor<B, T>>(step_plan(Mode::Infer, batch), fmt_));
      return executors_.back().get();
    } else {
      (void)batch;
      return nullptr;
    }
  }

  /// The training executor that runs Mode::Train on batches of `batch`
  /// images (nn/train_executor.hpp), made on first use; null where it is
  /// off (NetOptions::plan_training). One that cannot run the plan says why
  /// (ok(), why()); then the layers run themselves. One per key: the batch
  /// and what the layers' answers depend on at run time (weight gradients,
  /// the first parameter needing one, synchronized batch norm, the input
  /// gradient).
  TrainExecutor<B, T>* train_executor(std::size_t batch) {
    if (!options_.plan_training || batch == 0) return nullptr;
    const PlanKey key{
        Mode::Train,    batch, params_.first_requiring_grad(), param_grads_, cross_replica_ != nullptr,
        input_gradient_};
    for (const auto& [k, e] : train_executors_)
      if (k == key) return e.get();
    if (train_executors_.size() >= 4) train_executors_.erase(train_executors_.begin());  // keys seen last
    train_executors_.emplace_back(key,
                                  std::make_unique<TrainExecutor<B, T>>(step_plan(Mode::Train, batch), fmt_));
    return train_executors_.back().second.get();
  }

  /// Books every leaf layer's forward/backward wall-clock time into `p`
  /// (nn/profile.hpp); null (the default) turns profiling off.
  void set_profiler(Profiler* p) { profiler_ = p; }
  /// The profiler set by set_profiler (null: none).
  Profiler* profiler() const { return profiler_; }
  /// Gradient synchronization overlapped with backward (nn/context.hpp's
  /// GradientSync; the Trainer sets it): during backward the containers tell
  /// `s` which gradients are final. Null (the default) turns it off.
  void set_gradient_sync(GradientSync* s) { grad_sync_ = s; }

  /// The activation a Tap<Tag> saw in the last forward (Tag::name); host
  /// memory (a CUDA model's device activation is downloaded).
  const Tensor<T>& activation(const std::string& tap) {
    auto& s = slot(tap);
    if (!s.activation) throw Error("tap '" + tap + "' has no activation yet: run forward first");
    if (!device_activations()) return *s.activation;
    return to_host(*s.activation, s.host_activation);
  }
  /// The gradient to inject at a tap in the next backward(s), sized like the
  /// tap's last activation; fill it after a forward.
  Tensor<T>& tap_gradient(const std::string& tap) {
    auto& s = slot(tap);
    if (!s.activation) throw Error("tap '" + tap + "' has no activation yet: run forward first");
    if (s.grad.shape() != s.activation->shape()) s.grad.resize(s.activation->shape());
    s.has_grad = true;
    return s.grad;
  }
  /// Stops injecting gradients at every tap.
  void clear_tap_gradients() {
    for (auto& [name, s] : taps_) s.has_grad = false;
  }
  std::vector<std::string> tap_names() const {
    std::vector<std::string> v;
    for (const auto& [name, s] : taps_) v.push_back(name);
    return v;
  }

  Parameters<T>& parameters() { return params_; }
  const Parameters<T>& parameters() const { return params_; }

  /// Device storage of the parameter arena (docs/ARCHITECTURE.md, "Storage").
  /// On a backend whose memory is not the host's (backend_traits<B>::
  /// host_memory false: CUDA), `on` keeps the values, gradients and state on
  /// the device: the backend allocates a device copy of each buffer, every op
  /// and arena kernel given a pointer into parameters() uses that copy in
  /// place, and the host copy is synchronised lazily. Then the host reads the
  /// arena only after sync_parameters_to_host() and writes it only through
  /// host_parameters(). A no-op on the CPU backends, whose arena already is
  /// the device's. Off by default until a GPU run has checked it against the
  /// staged path (tests/backend/test_cuda_model.cpp).
  void set_device_resident(bool on) {
    if constexpr (!backend_traits<B>::host_memory) {
      if (on == resident_) return;
      if (on) {
        device_->mirror(params_.values().data(), std::size_t(params_.values().size()));
        device_->mirror(params_.grads().data(), std::size_t(params_.grads().size()));
        device_->mirror(params_.state().data(), std::size_t(params_.state().size()));
      } else {
        device_->mirrors().host_read_all();
        device_->clear_mirrors();
      }
      resident_ = on;
    } else {
      (void)on;
    }
  }
  bool device_resident() const { return resident_; }
  /// The host copy of the arena, current for reading (downloads what the
  /// device wrote since the last sync; device-resident models only).
  const Parameters<T>& sync_parameters_to_host() {
    if constexpr (!backend_traits<B>::host_memory)
      if (resident_) device_->mirrors().host_read_all();
    return params_;
  }
  /// The arena on the host, current, for reading and writing (a restore, a
  /// broadcast): a device-resident model uploads it before its next op.
  Parameters<T>& host_parameters() {
    if constexpr (!backend_traits<B>::host_memory)
      if (resident_) device_->mirrors().host_write_all();
    return params_;
  }
  DataFormat format() const { return fmt_; }
  /// Output shape for a batch of n.
  Shape output_shape(std::size_t n = 1) const { return {n, output_.c, output_.h, output_.w}; }
  Shape input_shape(std::size_t n = 1) const { return {n, input_.c, input_.h, input_.w}; }
  const NetOptions& options() const { return options_; }
  Device<B>& device() { return *device_; }
  NodeType& root() { return *node_; }

 private:
  // What a training executor is made for: the mode, the batch, and what
  // the layers' answers depend on at run time (weight gradients, the first
  // parameter needing one, synchronized batch norm, the input gradient).
  struct PlanKey {
    Mode mode;
    std::size_t n, first_grad;
    bool param_grads, cross, input_grad;
    bool operator==(const PlanKey& o) const {
      return mode == o.mode && n == o.n && first_grad == o.first_grad && param_grads == o.param_grads &&
             cross == o.cross && input_grad == o.input_grad;
    }
  };
  RunContext<B, T> run_context(Mode mode) {
    RunContext<B, T> rc;
    rc.mode = mode;
    rc.params = &params_;
    rc.device = device_.get();
    rc.cross_replica = cross_replica_;
    rc.profiler = profiler_;
    rc.grad_sync = grad_sync_;
    rc.input_grad = input_gradient_;
    return rc;
  }

  std::vector<std::unique_ptr<InferenceExecutor<B, T>>> executors_;  // executor(), per batch size
  std::vector<std::pair<PlanKey, std::unique_ptr<TrainExecutor<B, T>>>> train_executors_;  // train_executor()
  TrainExecutor<B, T>* trained_by_ = nullptr;  // the executor that ran the last training forward (or null)
  DataFormat fmt_;
  NetOptions options_;
  Shape input_, output_;
  bool input_gradient_ = false;  // backward() returns d/d(input)
  Parameters<T> params_;
  std::unique_ptr<Device<B>> device_;
  std::unique_ptr<NodeType> node_;
  TapSlot<T>& slot(const std::string& tap) {
    auto it = taps_.find(tap);
    if (it == taps_.end()) throw Error("the model has no tap named '" + tap + "'");
    return it->second;
  }
  const TapSlot<T>& slot(const std::string& tap) const {
    auto it = taps_.find(tap);
    if (it == taps_.end()) throw Error("the model has no tap named '" + tap + "'");
    return it->second;
  }

  // A host copy of a device tensor (CUDA), in `dst` (host memory: it is
  // resized outside the model's TensorMemoryScope).
  const Tensor<T>& to_host(const Tensor<T>& src, Tensor<T>& dst) {
    if constexpr (!backend_traits<B>::host_memory) {
      if (dst.shape() != src.shape()) {
        const TensorMemoryScope host(nullptr);
        dst.resize(src.shape());
      }
      device_->download(dst.data(), src.data(), src.size());
      return dst;
    } else {
      return src;
    }
  }

  // A host input batch on its way to the device (backends without host
  // memory): through the device's input ring (pinned slots, a copy stream)
  // into this model's device input tensor of the ring's next slot; the
  // compute stream waits for the copy, the host does not.
  const Tensor<T>& upload_input(const Tensor<T>& x) {
    if constexpr (!backend_traits<B>::host_memory) {
      auto& ring = device_->input_ring();
      static_assert(std::decay_t<decltype(ring)>::kSlots == std::tuple_size<decltype(inputs_)>::value,
                    "cifarnet: one device input tensor per slot of the input ring");
      Tensor<T>& slot = inputs_[ring.next()];
      if (slot.shape() != x.shape()) {
        const TensorMemoryScope memory(&device_->tensor_memory());
        slot.resize(x.shape());
      }
      ring.upload(x.data(), x.size() * sizeof(T), slot.data());
      return slot;
    } else {
      return x;  // the device's memory is the host's
    }
  }

  std::map<std::string, TapSlot<T>> taps_;
  Tensor<T> host_output_, host_input_grad_;  // CUDA: forward's and backward's results, downloaded
  bool device_activations_ = true;           // set_device_activations (backends without host memory)
  std::array<Tensor<T>, 2> inputs_;          // device copies of host input batches (upload_input)
  Tensor<T> host_pixels_;                    // a byte batch as floats, where the host converts
  ops::Eltwise<B, T> bytes_op_;              // forward_pixels_on_device's conversion
  Mode last_mode_ = Mode::Train;
  bool forwarded_ = false;
  bool param_grads_ = true;
  bool resident_ = false;  // set_device_resident
  CrossReplicaSum* cross_replica_ = nullptr;
  Profiler* profiler_ = nullptr;
  GradientSync* grad_sync_ = nullptr;
};

// The members that build and run the network's layers are defined out of
// the class, so they are not inline: after an explicit instantiation
// declaration (`extern template class cifarnet::Model<Net, B, T>;`) a
// translation unit compiles none of the network's code, which one other
// translation unit compiles once (`template class cifarnet::Model<Net, B,
// T>;`). The tests do this for their common models (tests/instances/).

template <class Net, class B, class T>
Model<Net, B, T>::Model(std::unique_ptr<Device<B>> device, InputShape input, DataFormat fmt,
                        NetOptions options, std::uint64_t seed, bool input_gradient)
    : fmt_(fmt), options_(std::move(options)), input_{1, input.c, input.h, input.w} {
  if (input.c == 0 || input.h == 0 || input.w == 0)
    throw ShapeError("model input shape " + input_.str() + " has a zero dimension");
  for (const std::string& r : options_.rules_off)
    if (r != "all" && !plan::is_rule(r))
      throw ConfigError("NetOptions::rules_off: '" + r +
                        "' is no fusion rule (the rules: " + plan::rule_names() + ", or all)");
  device_ = device ? std::move(device) : std::make_unique<Device<B>>();
  node_ = std::make_unique<NodeType>();
  BuildContext<T> ctx;
  ctx.params = &params_;
  ctx.fmt = fmt_;
  ctx.options = &options_;
  ctx.propagate_down = input_gradient;
  input_gradient_ = input_gradient;
  ctx.taps = &taps_;
  Scope root;
  output_ = detail::build_child<Net>(*node_, input_, root, ctx);
  params_.allocate();
  params_.set_kernels(std::make_shared<ops::BackendArenaKernels<B, T>>(*device_));
  reset(seed);
}

template <class Net, class B, class T>
plan::Plan Model<Net, B, T>::step_plan(Mode mode, std::size_t batch) {
  if (batch == 0) throw ConfigError("Model::step_plan: the batch size must be positive");
  plan::Key key;
  key.training = mode == Mode::Train;
  key.batch = batch;
  key.fmt = fmt_;
  key.precision = options_.conv_precision;
  key.backend = B::name;
  key.train_executor = mode == Mode::Train && options_.plan_training;
  key.rules_off = options_.rules_off;
  RunContext<B, T> rc = run_context(mode);
  rc.param_grads = param_grads_;
  std::optional<TensorMemoryScope> memory;
  if (TensorMemory* m = tensor_memory()) memory.emplace(m);
  plan::Builder b(key, sizeof(T));
  const int in = b.input(input_);
  const int out = detail::emit_child<Net>(*node_, b, in, rc, "model", output_);
  plan::Plan p = b.finish(out);
  plan::apply_rules(p, plan::caps_of<B, T>());
  return p;
}

template <class Net, class B, class T>
const Tensor<T>& Model<Net, B, T>::forward(const Tensor<T>& x, Mode mode) {
  const Tensor<T>& y = forward_on_device(x, mode);
  return device_activations() ? to_host(y, host_output_) : y;
}

template <class Net, class B, class T>
const Tensor<T>& Model<Net, B, T>::forward_on_device(const Tensor<T>& x, Mode mode) {
  if (x.dimension() != 4 || x.size() == 0)
    throw ShapeError("model input must be a non-empty 4-D tensor in " + std::string(to_string(fmt_)) +
                     " order");
  const Shape s = shape_of(x, fmt_);
  if (s.c != input_.c || s.h != input_.h || s.w != input_.w) {
    Shape e = input_;
    e.n = s.n;
    throw ShapeError("model expects input " + e.str() + " (" + to_string(fmt_) + ") but got " + s.str());
  }
  RunContext<B, T> rc = run_context(mode);
  rc.param_grads = param_grads_;
  last_mode_ = mode;
  forwarded_ = true;
  std::optional<TensorMemoryScope> memory;  // the layers' buffers: device memory on CUDA
  if (TensorMemory* m = tensor_memory()) memory.emplace(m);
  const Tensor<T>* in = &x;
  if constexpr (!backend_traits<B>::host_memory)
    if (device_activations_ && !device_->is_device_memory(x.data())) in = &upload_input(x);
  trained_by_ = nullptr;
  if (mode == Mode::Infer) {
    if (auto* e = executor(s.n); e && e->ok()) return e->run(*in, rc);
  } else if (auto* e = train_executor(s.n); e && e->ok()) {
    trained_by_ = e;
    return e->forward(*in, rc);
  }
  return node_->forward(*in, rc);
}

template <class Net, class B, class T>
const Tensor<T>& Model<Net, B, T>::forward_pixels_on_device(const std::uint8_t* pixels, std::size_t n,
                                                            std::size_t h, std::size_t w, std::size_t c,
                                                            Mode mode) {
  if (n == 0 || c != input_.c || h != input_.h || w != input_.w) {
    Shape e = input_;
    e.n = n;
    throw ShapeError("model expects input " + e.str() + " but got " + std::to_string(n) + " byte images of " +
                     std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c));
  }
  const std::size_t bytes = n * h * w * c;
  const Shape s{n, c, h, w};
  if constexpr (!backend_traits<B>::host_memory) {
    if (device_activations_) {
      auto& ring = device_->input_ring();
      const std::size_t j = ring.next();
      Tensor<T>& slot = inputs_[j];
      {
        const TensorMemoryScope memory(&device_->tensor_memory());  // (a no-op at the same shape)
        ensure_shape(slot, s, fmt_);
      }
      std::uint8_t* up = device_->input_bytes(j, bytes);
      ring.upload(pixels, bytes, up);
      bytes_op_.from_bytes(*device_, n, c, h, w, fmt_, up,
                           slot.data());  // on the compute stream, after the copy
      return forward_on_device(slot, mode);
    }
  }
  {
    const TensorMemoryScope host(nullptr);
    ensure_shape(host_pixels_, s, fmt_);
  }
  bytes_op_.from_bytes(*device_, n, c, h, w, fmt_, pixels, host_pixels_.data());
  return forward_on_device(host_pixels_, mode);
}

template <class Net, class B, class T>
const Tensor<T>& Model<Net, B, T>::backward(const Tensor<T>& dy) {
  if (!forwarded_ || last_mode_ != Mode::Train)
    throw Error("Model::backward needs a preceding forward in Mode::Train");
  RunContext<B, T> rc = run_context(Mode::Train);
  rc.param_grads = param_grads_;
  const Tensor<T>* dx = nullptr;
  {
    std::optional<TensorMemoryScope> memory;
    if (TensorMemory* m = tensor_memory()) memory.emplace(m);
    dx = trained_by_ ? &trained_by_->backward(dy, rc) : &node_->backward(dy, rc);
  }
  return device_activations() && dx->size() ? to_host(*dx, host_input_grad_) : *dx;
}

}  // namespace cifarnet
