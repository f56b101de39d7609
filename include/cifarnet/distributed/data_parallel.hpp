// cifarnet/distributed/data_parallel.hpp — synchronous data-parallel training
// over MPI (TF_SEMANTICS.md §8; the seed's --sync towers, one per process). Link
// cifarnet::mpi.
//
// Every rank holds the whole model and takes a disjoint, equal slice of each
// global batch; after backward, AllReduceMean (a gradient transform, placed
// first in an optim::Chain) replaces every gradient by its mean over the
// ranks, so every rank applies the same update and the parameters stay
// identical: N ranks × batch B/N follow the 1-rank × batch B run, exactly so
// when batch norm is synchronized (SyncBatchNorm), within rounding otherwise.
// Invariants and roles:
//  - the gradient buffer (Parameters::grads(), contiguous) is all-reduced in
//    a few large buckets (bucket_bytes), all started at once and waited for
//    together; every rank's arena has the same layout (same model);
//  - rank 0 is the chief: it alone restores checkpoints and broadcasts the
//    whole training state (parameters, BN statistics, optimizer slots, global
//    step, pipeline position) to the others, and it alone runs the logging,
//    summary and checkpoint hooks (ChiefHooks); BN moving statistics stay
//    per-rank unless BN is synchronized, and rank 0's are the ones saved (the
//    seed's tower 0);
//  - every collective has a deadline (Communicator::timeout): a dead or hung
//    rank makes the others throw DistributedError rather than wait forever.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/crc32c.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/distributed/buckets.hpp"
#include "cifarnet/distributed/mpi.hpp"
#include "cifarnet/io/safetensors.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/train/trainer.hpp"

namespace cifarnet::distributed {

// ------------------------------------------------------------ gradient all-reduce

/// Options of AllReduceMean.
class AllReduceOptions {
 public:
  explicit AllReduceOptions(Communicator& comm) : comm_(&comm) {}
  /// Bytes per all-reduce bucket (default 1 MiB: ResNet-20's 1.1 MB of
  /// gradients go in 2 all-reduces, ResNet-56's 3.4 MB in 4).
  AllReduceOptions& bucket_bytes(std::size_t b) {
    bucket_ = b;
    return *this;
  }
  std::size_t bucket_bytes() const { return bucket_; }
  Communicator& comm() const { return *comm_; }
  void validate() const {
    if (bucket_ < 4096)
      throw ConfigError("AllReduceOptions: bucket_bytes = " + std::to_string(bucket_) + " (at least 4096)");
  }

 private:
  Communicator* comm_;
  std::size_t bucket_ = std::size_t(1) << 20;
};

/// Gradient transform (optim::Chain stage): every gradient becomes its mean
/// over the ranks. Put it first: Chain<AllReduceMean, ClipByGlobalNorm,
/// Momentum> clips the averaged gradient, as one process with the global
/// batch would. Stateless (checkpoints are the same as without it).
template <class T>
class AllReduceMean {
 public:
  using Scalar = T;
  using Options = AllReduceOptions;
  static constexpr bool is_optimizer = false;

  AllReduceMean(const Parameters<T>& params, Options opts, const optim::Selection& = optim::Selection::all())
      : opts_(std::move(opts)), size_(std::size_t(params.grads().size())) {
    opts_.validate();
  }

  /// All-reduces the whole gradient buffer (padding included, it is zero) in
  /// buckets, then scales by 1/N. A no-op with one rank.
  void apply(Parameters<T>& params) {
    Communicator& c = opts_.comm();
    if (std::size_t(params.grads().size()) != size_)
      throw DistributedError("AllReduceMean: the gradient buffer changed size (" + std::to_string(size_) +
                             " -> " + std::to_string(params.grads().size()) + " elements)");
    if (c.size() == 1) return;
    const auto t0 = std::chrono::steady_clock::now();
    T* g = params.grads().data();
    const std::size_t per = std::max<std::size_t>(1, opts_.bucket_bytes() / sizeof(T));
    // Last parameters first: the order backward finishes them in.
    for (std::size_t end = size_; end > 0;) {
      const std::size_t begin = end > per ? end - per : 0;
      c.start_sum(g + begin, end - begin);
      end = begin;
    }
    c.wait_all("gradient all-reduce");
    params.grads() *= T(1) / T(c.size());
    last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  /// Number of all-reduce calls per step.
  std::size_t buckets() const {
    const std::size_t per = std::max<std::size_t>(1, opts_.bucket_bytes() / sizeof(T));
    return (size_ + per - 1) / per;
  }
  /// Wall time of the last apply() (communication, including waiting for
  /// the slowest rank).
  double last_seconds() const { return last_seconds_; }

  template <class F>
  void visit_state(F&&) {}
  const Options& options() const { return opts_; }

 private:
  Options opts_;
  std::size_t size_;
  double last_seconds_ = 0;
};

/// The gradient all-reduce overlapped with backward (nn/context.hpp's
/// GradientSync): give it to Trainer::set_gradient_sync and use the plain
/// optimizer (no AllReduceMean in the chain). During backward the model
/// reports which gradients are final; each bucket (the same fixed-size
/// chunks of the gradient buffer as AllReduceMean, last parameters first)
/// starts its all-reduce as soon as all of it is final, and MPI is given a
/// chance to progress the started ones after every block. finish() starts
/// what is left, waits, and scales by 1/N; the trainer then adds weight decay
/// (the same on every rank, since the parameters are), so the update equals
/// AllReduceMean's up to rounding. Stateless across steps; one rank: no-op.
template <class T>
class OverlappedAllReduce : public GradientSync {
 public:
  using Options = AllReduceOptions;

  OverlappedAllReduce(Parameters<T>& params, Options opts)
      : params_(&params), opts_(std::move(opts)), buckets_(init(params, opts_)) {}

  void begin() override {
    if (std::size_t(params_->grads().size()) != buckets_.size())
      throw DistributedError("OverlappedAllReduce: the gradient buffer changed size (" +
                             std::to_string(buckets_.size()) + " -> " +
                             std::to_string(params_->grads().size()) + " elements)");
    if (opts_.comm().pending() != 0)
      throw DistributedError(
          "OverlappedAllReduce: a previous step's all-reduce is still in flight "
          "(a backward pass ended without finish())");
    t0_ = std::chrono::steady_clock::now();
    buckets_.begin();
  }

  void ready_from(std::size_t first_param) override {
    if (opts_.comm().size() == 1) return;
    const std::size_t started =
        buckets_.ready_from(first_param, [&](std::size_t b, std::size_t e) { start(b, e); });
    if (started == 0) opts_.comm().progress("gradient all-reduce");
  }

  void finish() override {
    Communicator& c = opts_.comm();
    if (c.size() == 1) return;
    const auto t1 = std::chrono::steady_clock::now();
    buckets_.rest([&](std::size_t b, std::size_t e) { start(b, e); });
    c.wait_all("gradient all-reduce");
    params_->grads() *= T(1) / T(c.size());
    const auto t2 = std::chrono::steady_clock::now();
    last_wait_seconds_ = std::chrono::duration<double>(t2 - t1).count();
    last_seconds_ = std::chrono::duration<double>(t2 - t0_).count();
  }

  /// Number of all-reduce calls per step.
  std::size_t buckets() const { return buckets_.count(); }
  /// Buckets the last step started while backward still had gradients to
  /// compute (the rest started when all were final, or in finish()).
  std::size_t last_early_buckets() const { return buckets_.early(); }
  /// Seconds the last finish() took (the all-reduce time backward did not hide).
  double last_wait_seconds() const { return last_wait_seconds_; }
  /// Seconds from the last begin() to the end of its finish() (backward included).
  double last_seconds() const { return last_seconds_; }
  const Options& options() const { return opts_; }

 private:
  static GradientBuckets init(const Parameters<T>& params, const Options& opts) {
    opts.validate();
    if (!params.allocated())
      throw ConfigError("OverlappedAllReduce: the model's parameters are not allocated yet");
    return GradientBuckets(params.infos(), std::size_t(params.grads().size()),
                           opts.bucket_bytes() / sizeof(T));
  }
  void start(std::size_t begin, std::size_t end) {
    opts_.comm().start_sum(params_->grads().data() + begin, end - begin);
  }

  Parameters<T>* params_;
  Options opts_;
  GradientBuckets buckets_;
  std::chrono::steady_clock::time_point t0_;
  double last_wait_seconds_ = 0, last_seconds_ = 0;
};

// ------------------------------------------------------------ synchronized BN

/// Synchronized batch norm's reducer: Model::set_cross_replica(&sync_bn)
/// makes every BatchNorm2d normalize with the global batch's statistics
/// (two small all-reduces per BN layer forward, one backward).
class SyncBatchNorm : public CrossReplicaSum {
 public:
  explicit SyncBatchNorm(Communicator& comm) : comm_(&comm) {}
  void sum(double* values, std::size_t n) override {
    if (comm_->size() > 1) comm_->sum(values, n, "synchronized batch norm all-reduce");
  }

 private:
  Communicator* comm_;
};

// ------------------------------------------------------------ state broadcast

/// Parameter values and non-trainable state (BN moving statistics) from
/// `root` to every rank.
template <class T>
void broadcast_parameters(Communicator& comm, Parameters<T>& params, int root = 0) {
  comm.broadcast(params.values().data(), std::size_t(params.values().size()), root, "parameter broadcast");
  comm.broadcast(params.state().data(), std::size_t(params.state().size()), root, "parameter broadcast");
}

/// A StateDict (tensors and metadata) from `root` to every rank, through its
/// safetensors bytes; the others' `dict` is replaced.
inline void broadcast_state_dict(Communicator& comm, StateDict& dict, int root = 0) {
  std::vector<std::uint8_t> bytes;
  if (comm.rank() == root) bytes = io::serialize_safetensors(dict);
  comm.broadcast(bytes, root, "state broadcast");
  if (comm.rank() != root)
    dict = io::parse_safetensors(bytes.data(), bytes.size(),
                                 "state broadcast from rank " + std::to_string(root));
}

/// Makes every rank's training state equal the chief's: parameters, BN
/// statistics, optimizer slots, global step and every saveable added to the
/// trainer (pipeline position...). Call it after the chief restored a
/// checkpoint (or not: it then broadcasts the initial parameters).
template <class TrainerT>
void broadcast_training_state(Communicator& comm, TrainerT& trainer) {
  StateDict d;
  if (comm.is_chief()) d = trainer.state_dict();
  broadcast_state_dict(comm, d, 0);
  if (!comm.is_chief()) trainer.load_state_dict(d);
}

/// Whether every rank holds bit-identical trainable parameter values (and,
/// with `with_state`, BN statistics). Collective.
template <class T>
bool replicas_identical(Communicator& comm, const Parameters<T>& params, bool with_state = false) {
  std::uint32_t crc = crc32c(params.values().data(), std::size_t(params.values().size()) * sizeof(T));
  if (with_state)
    crc = crc32c_extend(crc, params.state().data(), std::size_t(params.state().size()) * sizeof(T));
  double lo = double(crc), hi = double(crc);
  comm.min(&lo, 1, "replica check");
  comm.max(&hi, 1, "replica check");
  return lo == hi;
}

// ------------------------------------------------------------ data sharding

/// The per-rank batch of a global batch: ConfigError (the seed's message)
/// unless `global_batch` divides by the number of ranks.
inline std::size_t local_batch_size(std::size_t global_batch, int ranks,
                                    const std::string& flag = "--train-batch-size") {
  if (ranks <= 0) throw ConfigError("distributed: the number of ranks must be positive");
  if (global_batch % std::size_t(ranks) != 0)
    throw ConfigError(flag + " must be multiple of the number of MPI processes (" + flag + " " +
                      std::to_string(global_batch) + ", mpirun -np " + std::to_string(ranks) + ").");
  return global_batch / std::size_t(ranks);
}

/// Copies rank `rank`'s slice (examples [rank·b, (rank+1)·b), b = n/ranks)
/// of a global batch into `out`. The batch dimension is outermost in both
/// formats, so the slice is one contiguous block. ConfigError if n does not
/// divide.
inline void take_shard(const train::Batch& global, int rank, int ranks, train::Batch& out) {
  const std::size_t n = global.labels.size();
  const std::size_t b = local_batch_size(n, ranks, "the global batch size");
  if (rank < 0 || rank >= ranks)
    throw ConfigError("take_shard: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  if (global.images.shape()[0] != n)
    throw ShapeError("take_shard: " + std::to_string(n) + " labels but " +
                     std::to_string(global.images.shape()[0]) + " images");
  auto shape = global.images.shape();
  shape[0] = b;
  if (out.images.shape() != shape) out.images.resize(shape);
  const std::size_t per = global.images.size() / std::max<std::size_t>(1, n);
  std::memcpy(out.images.data(), global.images.data() + std::size_t(rank) * b * per, b * per * sizeof(float));
  out.index = global.index;
  out.labels.assign(global.labels.begin() + std::ptrdiff_t(std::size_t(rank) * b),
                    global.labels.begin() + std::ptrdiff_t(std::size_t(rank + 1) * b));
}

// ------------------------------------------------------------ chief-only hooks

/// A hook every rank adds to its trainer: each step it averages the loss
/// terms over the ranks and counts the global batch, runs the hooks added to
/// it on the chief only (logging, summaries, checkpoints, evaluation), and
/// makes a stop request of the chief's (or max_seconds on the chief) stop
/// every rank after the same step. Two small collectives per step.
class ChiefHooks : public train::Hook {
 public:
  /// `max_seconds` > 0: stop after that much training time on the chief
  /// (give the Trainer max_seconds = 0, so the ranks cannot disagree).
  explicit ChiefHooks(Communicator& comm, double max_seconds = 0) : comm_(&comm), max_seconds_(max_seconds) {}

  /// A hook to run on the chief only (ignored elsewhere).
  void add(std::shared_ptr<train::Hook> h) {
    if (comm_->is_chief()) hooks_.push_back(std::move(h));
  }

  void begin(train::TrainerBase& t) override {
    start_ = std::chrono::steady_clock::now();
    for (auto& h : hooks_) h->begin(t);
  }
  void after_step(train::TrainerBase& t, const train::StepResult& r) override {
    double v[3] = {r.loss, r.regularization, r.total_loss};
    comm_->sum(v, 3, "loss all-reduce");
    train::StepResult g = r;
    const double n = double(comm_->size());
    g.loss = v[0] / n;
    g.regularization = v[1] / n;
    g.total_loss = v[2] / n;
    g.batch_size = r.batch_size * std::size_t(comm_->size());
    std::int64_t stop = 0;
    if (comm_->is_chief()) {
      for (auto& h : hooks_) h->after_step(t, g);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      stop = (t.stop_requested() || (max_seconds_ > 0 && secs >= max_seconds_)) ? 1 : 0;
    }
    comm_->broadcast(&stop, 1, 0, "stop flag broadcast");
    if (stop) t.request_stop();
  }
  void end(train::TrainerBase& t) override {
    for (auto& h : hooks_) h->end(t);
  }

 private:
  Communicator* comm_;
  double max_seconds_;
  std::vector<std::shared_ptr<train::Hook>> hooks_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cifarnet::distributed
