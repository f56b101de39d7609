// cifarnet/distributed/towers.hpp — synchronous data parallelism inside one
// process: the seed's towers (`--num-gpus N`, TF_SEMANTICS.md §3). Header-only, no MPI.
//
// Towers<ModelT> holds N replicas of one model (each on its own device: a GPU
// per tower on the CUDA backend) and looks like a Model to the Trainer and to
// evaluate(): forward() deals the batch's examples to the towers round-robin
// as the seed's input_fn does (example i goes to tower i % N, so the sizes
// differ by at most one; a batch smaller than N uses its first n towers),
// runs the replicas concurrently, one thread per tower, and puts every output
// row back at its example's place in the batch; backward() deals
// d(loss)/d(output) the same way,
// runs the replicas' backward passes concurrently and then sums the towers'
// gradients into tower 0 (TowerReducer: on the host, or NCCL across GPUs,
// distributed/nccl.hpp). Because a batch loss such as
// softmax_cross_entropy is a mean over the whole batch, the sum of the towers'
// gradients is the gradient of the whole batch, so an optimizer stepping on
// parameters() (tower 0's arena) makes the update a single model would make.
//
// The seed's variable semantics: the variables live once (tower 0's arena is
// the one the optimizer, checkpoints and EMA see); before every forward each
// other tower takes tower 0's values and non-trainable state, so every tower
// computes with the same weights and with tower 0's batch-norm moving
// statistics; only tower 0's statistic updates are kept, as the seed keeps
// tower 0's update ops. Batch statistics in training are per tower (the
// seed's towers do not synchronize batch norm either), so N towers follow one
// model exactly for networks without batch norm and within the difference of
// per-tower batch statistics with it.
//
// Where the variables and the gradient sum live is the seed's
// --variable-strategy (VariableStrategy, TowersOptions::variable_strategy):
// CPU sums on the host, GPU on tower 0's device (NCCL on CUDA); the sum is
// the same either way.
//
// Threads: on the CUDA backend each tower's forward and backward run on a
// thread of their own (tower 0 on the caller's; the others on TowerThreads'
// workers, kept between calls), which keeps N GPUs busy at once; on CPU backends the towers run one after the
// other by default (TowersOptions::parallel). A tower that throws makes forward()/backward() rethrow its
// exception after every tower has stopped (the lowest tower's error first).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/model.hpp"

namespace cifarnet::distributed {

/// Sums one buffer per tower: after sum(buffers, n), buffers[0] holds the sum
/// of all of them (the other buffers may hold it too).
template <class T>
class TowerReducer {
 public:
  virtual ~TowerReducer() = default;
  virtual void sum(const std::vector<T*>& buffers, std::size_t n) = 0;
  /// For logs: "host", "NCCL".
  virtual const char* name() const = 0;
};

/// A reducer that works on the towers' own devices (NCCL over the towers'
/// GPUs, on their streams): Towers calls bind() once, from its constructor,
/// with tower i's device at index i, before any sum(). The devices outlive
/// the reducer's use of them (the Towers own both).
template <class B, class T>
class DeviceTowerReducer : public TowerReducer<T> {
 public:
  virtual void bind(const std::vector<Device<B>*>& devices) = 0;
  /// buffers[0]'s n values into every other buffer, on the towers' devices
  /// (the variables from tower 0; a device-resident arena in place).
  virtual void broadcast(const std::vector<T*>& buffers, std::size_t n) = 0;
};

/// Sums on the host: buffers[0] += buffers[1] + ... + buffers[N-1], added in
/// tower order element by element, so the result does not depend on the
/// number of OpenMP threads.
template <class T>
class HostTowerReducer final : public TowerReducer<T> {
 public:
  void sum(const std::vector<T*>& buffers, std::size_t n) override {
    if (buffers.size() < 2) return;
    T* dst = buffers[0];
    const std::size_t towers = buffers.size();
    const std::int64_t chunks = std::int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= 4 * kChunk)
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::size_t b = std::size_t(c) * kChunk, e = std::min(n, b + kChunk);
      for (std::size_t t = 1; t < towers; ++t) {
        const T* src = buffers[t];
        for (std::size_t i = b; i < e; ++i) dst[i] += src[i];
      }
    }
  }
  const char* name() const override { return "host"; }

 private:
  static constexpr std::size_t kChunk = std::size_t(1) << 14;
};

/// The seed's --variable-strategy: where the shared variables and the
/// gradient reduction live. CPU: tower 0's arena is the host copy the
/// optimizer steps on, and the towers' gradients are summed on the host
/// (HostTowerReducer). GPU: they live on tower 0's device, and the towers'
/// gradients are summed there (on the CUDA backend NCCL over the towers'
/// device arenas, distributed/nccl.hpp's NcclTowerReducer; on a host backend
/// the device is the host, Tower0Reducer). The sum is the same either way
/// (tower order), so both strategies train to the same bits; they differ in
/// where the work and the memory are.
enum class VariableStrategy { CPU, GPU };

inline const char* to_string(VariableStrategy v) { return v == VariableStrategy::CPU ? "CPU" : "GPU"; }

/// "CPU" or "GPU" (the seed's spelling); anything else is a ConfigError
/// naming the flag.
inline VariableStrategy parse_variable_strategy(const std::string& s) {
  if (s == "CPU") return VariableStrategy::CPU;
  if (s == "GPU") return VariableStrategy::GPU;
  throw ConfigError("--variable-strategy \"" + s + "\": expected CPU or GPU");
}

/// The GPU strategy's reduction on a backend whose device memory is host
/// memory (reference, oneDNN): the sum runs on tower 0's device, in tower
/// order, into tower 0's gradients. On the CUDA backend the GPU strategy uses
/// NcclTowerReducer instead.
template <class B, class T>
class Tower0Reducer final : public DeviceTowerReducer<B, T> {
  static_assert(backend_traits<B>::host_memory,
                "Tower0Reducer sums in host memory: on a GPU backend use NcclTowerReducer");

 public:
  void bind(const std::vector<Device<B>*>& devices) override {
    if (devices.empty()) throw ConfigError("Tower0Reducer: no towers to bind");
    device_ = devices[0];
  }
  void sum(const std::vector<T*>& buffers, std::size_t n) override {
    if (!device_) throw Error("Tower0Reducer: sum before bind");
    sum_.sum(buffers, n);  // tower 0's device is the host on these backends
  }
  void broadcast(const std::vector<T*>& buffers, std::size_t n) override {
    for (std::size_t i = 1; i < buffers.size(); ++i) std::copy(buffers[0], buffers[0] + n, buffers[i]);
  }
  const char* name() const override { return "tower 0's device"; }
  Device<B>* device() const { return device_; }

 private:
  Device<B>* device_ = nullptr;
  HostTowerReducer<T> sum_;
};

/// Options of Towers: `TowersOptions().parallel(false)`.
class TowersOptions {
 public:
  /// Where the variables and the gradient sum live (the seed's
  /// --variable-strategy; default CPU, as the seed's). Used when Towers is
  /// given no reducer: CPU -> HostTowerReducer, GPU -> Tower0Reducer on host
  /// backends (the CUDA caller passes an NcclTowerReducer).
  TowersOptions& variable_strategy(VariableStrategy v) {
    strategy_ = v;
    return *this;
  }
  VariableStrategy variable_strategy() const { return strategy_; }

  /// Run the towers on threads of their own, or one after the other on the
  /// caller's thread. Unset (the default): threads on backends whose replicas
  /// may run concurrently (backend_traits<B>::concurrent_replicas: CUDA, one GPU per
  /// tower), one after the other elsewhere: on the CPU every tower already
  /// uses every core, and oneDNN's library-managed scratchpad makes one
  /// cached primitive unsafe to run from two threads at once.
  TowersOptions& parallel(bool on) {
    parallel_ = on ? 1 : 0;
    return *this;
  }
  /// Whether towers of backend B run on threads under these options.
  template <class B>
  bool parallel_for() const {
    return parallel_ < 0 ? backend_traits<B>::concurrent_replicas : parallel_ == 1;
  }

 private:
  int parallel_ = -1;  // -1: the backend's default
  VariableStrategy strategy_ = VariableStrategy::CPU;
};

namespace towers_detail {
// Makes a tower's device current on the calling thread (the CUDA device is
// per-thread state); a no-op for backends whose Device has no make_current.
template <class D>
auto make_current(D& d, int) -> decltype(d.make_current(), void()) {
  d.make_current();
}
template <class D>
void make_current(D&, long) {}
}  // namespace towers_detail

/// Worker threads 1..n-1 that live as long as the towers (tower 0 runs on
/// the caller's thread): run(k, f) calls f(i) for i < k, f(0) on the caller,
/// and returns when all are done. Starting a thread per call would put two
/// thread creations on every training step; these wait on a condition
/// variable between calls, and a call allocates nothing.
class TowerThreads {
 public:
  TowerThreads() = default;
  TowerThreads(const TowerThreads&) = delete;
  TowerThreads& operator=(const TowerThreads&) = delete;
  ~TowerThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }

  /// f(i) for i in [0, k): i = 0 here, the others on workers (started on
  /// first use). f must not throw (Towers catches inside it).
  template <class F>
  void run(std::size_t k, F& f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (threads_.size() + 1 < k) {  // a new worker waits for the next call
        const std::size_t id = threads_.size() + 1, seen = generation_;
        threads_.emplace_back([this, id, seen] { work(id, seen); });
      }
      fn_ = [](void* c, std::size_t i) { (*static_cast<F*>(c))(i); };
      ctx_ = &f;
      active_ = k;
      pending_ = k - 1;
      ++generation_;
    }
    start_.notify_all();
    f(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void work(std::size_t id, std::size_t seen) {
    for (;;) {
      void (*fn)(void*, std::size_t) = nullptr;
      void* ctx = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (id >= active_) continue;
        fn = fn_;
        ctx = ctx_;
      }
      fn(ctx, id);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  void (*fn_)(void*, std::size_t) = nullptr;
  void* ctx_ = nullptr;
  std::size_t active_ = 0, pending_ = 0, generation_ = 0;
  bool stop_ = false;
};

/// N replicas of ModelT (a Model<Net, B, T>) trained as one; see the header.
template <class ModelT>
class Towers {
 public:
  using Backend = typename ModelT::Backend;
  using Scalar = typename ModelT::Scalar;
  using T = Scalar;
  using DeviceFactory = std::function<std::unique_ptr<Device<Backend>>(std::size_t tower)>;

  /// Builds `n` replicas of the network, all initialized from `seed`. Tower
  /// i runs on `device(i)` when a factory is given (GPU i, say), else on the
  /// backend's default device. `reducer` sums the towers' gradients (null:
  /// the one of topts' variable strategy: HostTowerReducer for CPU,
  /// Tower0Reducer for GPU).
  Towers(std::size_t n, InputShape input, DataFormat fmt = DataFormat::NCHW, NetOptions options = {},
         std::uint64_t seed = 0, const DeviceFactory& device = {},
         std::unique_ptr<TowerReducer<T>> reducer = nullptr, TowersOptions topts = {})
      : reducer_(std::move(reducer)), topts_(topts) {
    if (n == 0) throw ConfigError("Towers: the number of towers must be at least 1");
    for (std::size_t i = 0; i < n; ++i) {
      replicas_.push_back(std::make_unique<ModelT>(device ? device(i) : nullptr, input, fmt, options, seed));
    }
    if (!reducer_) {
      if (topts_.variable_strategy() == VariableStrategy::GPU) {
        if constexpr (backend_traits<Backend>::host_memory)
          reducer_ = std::make_unique<Tower0Reducer<Backend, T>>();
        else
          throw ConfigError(
              "Towers: --variable-strategy GPU on a GPU backend needs a device reducer (NcclTowerReducer)");
      } else
        reducer_ = std::make_unique<HostTowerReducer<T>>();
    }
    if (auto* r = dynamic_cast<DeviceTowerReducer<Backend, T>*>(reducer_.get())) {
      std::vector<Device<Backend>*> devices;
      for (auto& m : replicas_) devices.push_back(&m->device());
      r->bind(devices);
    }
    inputs_.resize(n);
    douts_.resize(n);
    outs_.assign(n, nullptr);
    grads_.reserve(n);
  }

  Towers(const Towers&) = delete;
  Towers& operator=(const Towers&) = delete;

  std::size_t size() const { return replicas_.size(); }
  ModelT& tower(std::size_t i) { return *replicas_.at(i); }
  const TowerReducer<T>& reducer() const { return *reducer_; }

  /// Tower 0's arena: the variables (optimizer, checkpoints, EMA, logs).
  Parameters<T>& parameters() { return replicas_[0]->parameters(); }
  const Parameters<T>& parameters() const { return replicas_[0]->parameters(); }
  /// Tower 0's device: where the Trainer runs the loss on the concatenated
  /// logits (and, with tower 0's arena, the update).
  Device<Backend>& device() { return replicas_[0]->device(); }
  DataFormat format() const { return replicas_[0]->format(); }
  Shape output_shape(std::size_t n = 1) const { return replicas_[0]->output_shape(n); }
  Shape input_shape(std::size_t n = 1) const { return replicas_[0]->input_shape(n); }
  const NetOptions& options() const { return replicas_[0]->options(); }

  /// Device storage of every tower's arena (Model::set_device_resident): on
  /// GPUs each tower's values, gradients and state stay on its device. With
  /// a device reducer (NcclTowerReducer: --variable-strategy GPU) the
  /// variables go from tower 0 to the others by ncclBroadcast and the
  /// gradients are summed by ncclAllReduce, both in place in the device
  /// arenas (no PCIe); with the host reducer (CPU) the arenas are brought to
  /// the host for the sum and the copy, as that strategy asks. A no-op on
  /// the CPU backends.
  void set_device_resident(bool on) {
    for (auto& m : replicas_) m->set_device_resident(on);
  }
  bool device_resident() const { return replicas_[0]->device_resident(); }
  /// Tower 0's arena on the host, current for reading.
  const Parameters<T>& sync_parameters_to_host() { return replicas_[0]->sync_parameters_to_host(); }
  /// Tower 0's arena on the host for reading and writing (uploaded before its next op).
  Parameters<T>& host_parameters() { return replicas_[0]->host_parameters(); }

  /// Re-initializes tower 0 from `seed` (the others follow at the next forward).
  void reset(std::uint64_t seed) { replicas_[0]->reset(seed); }

  /// The Trainer's overlap hook: with towers every gradient is final only
  /// after the towers' sum, which backward() reports as a whole.
  void set_gradient_sync(GradientSync* s) { grad_sync_ = s; }

  /// Runs the towers on their examples of x (dealt round-robin); the output,
  /// row i for example i, is owned by the towers and valid until the next
  /// forward.
  const Tensor<T>& forward(const Tensor<T>& x, Mode mode = Mode::Train) {
    if (x.dimension() != 4 || x.size() == 0)
      throw ShapeError(std::string("towers: input must be a non-empty 4-D tensor in ") + to_string(format()) +
                       " order");
    const std::size_t n = x.shape()[0];
    split(n);
    broadcast_variables();
    const Shape in = shape_of(x, format());
    const std::size_t per = x.size() / n;
    for (std::size_t i = 0; i < active_; ++i) {
      Shape s = in;
      s.n = sizes_[i];
      ensure_shape(inputs_[i], s, format());
      deal(x.data(), inputs_[i].data(), i, per);
    }
    run([&](std::size_t i) { outs_[i] = &replicas_[i]->forward(inputs_[i], mode); });
    const Shape os = output_shape(n);
    ensure_shape(out_, os, format());
    const std::size_t oper = out_.size() / n;
    for (std::size_t i = 0; i < active_; ++i) collect(outs_[i]->data(), out_.data(), i, oper);
    last_mode_ = mode;
    forwarded_ = true;
    return out_;
  }

  /// Backpropagates d(loss)/d(output) through the last Train-mode forward and
  /// leaves in parameters().grads() the sum of the towers' gradients. Returns
  /// an empty tensor (towers do not compute input gradients).
  const Tensor<T>& backward(const Tensor<T>& dy) {
    if (!forwarded_ || last_mode_ != Mode::Train)
      throw Error("Towers::backward needs a preceding forward in Mode::Train");
    if (dy.shape() != out_.shape())
      throw ShapeError("Towers::backward: d(output) has shape " + shape_of(dy, format()).str() +
                       " but the last forward's output is " + shape_of(out_, format()).str());
    const std::size_t oper = dy.size() / dy.shape()[0];
    for (std::size_t i = 0; i < active_; ++i) {
      if (douts_[i].shape() != outs_[i]->shape()) douts_[i].resize(outs_[i]->shape());
      deal(dy.data(), douts_[i].data(), i, oper);
    }
    run([&](std::size_t i) { replicas_[i]->backward(douts_[i]); });
    grads_.clear();
    for (std::size_t i = 0; i < active_; ++i) grads_.push_back(replicas_[i]->parameters().grads().data());
    if (active_ > 1) {
      // A host reducer sums host copies: resident arenas come down first
      // and tower 0's goes back up before its next op.
      const bool via_host = device_resident() && !device_reducer();
      if (via_host)
        for (std::size_t i = 0; i < active_; ++i) replicas_[i]->sync_parameters_to_host();
      reducer_->sum(grads_, std::size_t(parameters().grads().size()));
      if (via_host) replicas_[0]->host_parameters();
    }
    if (grad_sync_) grad_sync_->ready_from(0);
    return empty_;
  }

 private:
  // Round-robin over k = min(n, towers) towers, as the seed's input_fn
  // (`idx = i % num_shards`): tower t takes examples t, t + k, t + 2k, ...,
  // so the first n % k towers take one more.
  void split(std::size_t n) {
    active_ = std::min(n, replicas_.size());
    sizes_.assign(active_, n / active_);
    for (std::size_t i = 0; i < n % active_; ++i) ++sizes_[i];
  }
  // Tower t's rows (each `per` values) from the batch `src` into `dst`.
  void deal(const T* src, T* dst, std::size_t t, std::size_t per) const {
    for (std::size_t j = 0; j < sizes_[t]; ++j)
      std::memcpy(dst + j * per, src + (t + j * active_) * per, per * sizeof(T));
  }
  // Tower t's rows from `src` back to their examples' places in the batch `dst`.
  void collect(const T* src, T* dst, std::size_t t, std::size_t per) const {
    for (std::size_t j = 0; j < sizes_[t]; ++j)
      std::memcpy(dst + (t + j * active_) * per, src + j * per, per * sizeof(T));
  }

  // Every other tower takes tower 0's values and non-trainable state: on
  // device-resident arenas by the device reducer's broadcast (NCCL), else
  // on the host.
  void broadcast_variables() {
    auto& p0 = replicas_[0]->parameters();
    for (std::size_t i = 1; i < active_; ++i) {
      auto& p = replicas_[i]->parameters();
      if (p.values().size() != p0.values().size() || p.state().size() != p0.state().size())
        throw Error("Towers: tower " + std::to_string(i) + " has a different parameter layout from tower 0");
    }
    if (active_ < 2) return;
    if (device_resident()) {
      if (DeviceTowerReducer<Backend, T>* d = device_reducer()) {
        values_.clear();
        state_.clear();
        for (std::size_t i = 0; i < active_; ++i) {
          values_.push_back(replicas_[i]->parameters().values().data());
          state_.push_back(replicas_[i]->parameters().state().data());
        }
        d->broadcast(values_, std::size_t(p0.values().size()));
        if (p0.state().size()) d->broadcast(state_, std::size_t(p0.state().size()));
        return;
      }
      const Parameters<T>& h0 = replicas_[0]->sync_parameters_to_host();
      for (std::size_t i = 1; i < active_; ++i) {
        Parameters<T>& p = replicas_[i]->host_parameters();
        p.values() = h0.values();
        p.state() = h0.state();
      }
      return;
    }
    for (std::size_t i = 1; i < active_; ++i) {
      auto& p = replicas_[i]->parameters();
      p.values() = p0.values();
      p.state() = p0.state();
    }
  }
  DeviceTowerReducer<Backend, T>* device_reducer() const {
    return dynamic_cast<DeviceTowerReducer<Backend, T>*>(reducer_.get());
  }

  // f(i) for every active tower, concurrently unless parallel(false); the
  // first tower's exception is rethrown after all have stopped.
  template <class F>
  void run(F&& f) {
    errors_.assign(active_, nullptr);
    auto one = [&](std::size_t i) {
      try {
        towers_detail::make_current(replicas_[i]->device(), 0);
        f(i);
      } catch (...) {
        errors_[i] = std::current_exception();
      }
    };
    if (!topts_.template parallel_for<Backend>() || active_ == 1) {
      for (std::size_t i = 0; i < active_; ++i) one(i);
    } else {
      threads_.run(active_, one);
    }
    for (const auto& e : errors_)
      if (e) std::rethrow_exception(e);
  }

  std::vector<std::unique_ptr<ModelT>> replicas_;
  std::unique_ptr<TowerReducer<T>> reducer_;
  TowerThreads threads_;  // (declared after the replicas: joined before they go)
  TowersOptions topts_;
  std::vector<Tensor<T>> inputs_, douts_;
  std::vector<const Tensor<T>*> outs_;
  std::vector<T*> grads_, values_, state_;  // the towers' buffers for a sum or a broadcast
  std::vector<std::exception_ptr> errors_;
  std::vector<std::size_t> sizes_;
  std::size_t active_ = 0;
  Tensor<T> out_, empty_;
  Mode last_mode_ = Mode::Train;
  bool forwarded_ = false;
  GradientSync* grad_sync_ = nullptr;
};

}  // namespace cifarnet::distributed
