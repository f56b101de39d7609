// cifarnet/recipes/strategy.hpp — how a training run is spread over
// processes and devices, as one object a program asks instead of testing
// build options itself: a single process; the ranks of an MPI job as
// synchronous data-parallel replicas (distributed/data_parallel.hpp); or
// parameter servers and asynchronous workers (distributed/parameter_server.hpp).
// Towers (several GPUs in one process, distributed/towers.hpp) are the model
// type, chosen with the devices (recipes/devices.hpp).
//
// The build options live here, not in programs: without MPI
// (CIFARNET_WITH_MPI unset) every process is a single one and the MPI
// members do not exist; without the CUDA backend (CIFARNET_WITH_CUDA unset)
// no GPU is present. The order of the calls is the order of a run, and every
// rank makes the same calls (they hold collectives):
//
//   recipes::Strategy st(&argc, &argv);        // before flag parsing: MPI may take arguments
//   st.configure(recipes::StrategyOptions().sync(sync).num_ps(num_ps));
//   st.broadcast_from_chief(format);           // a decision of the chief's
//   st.set_intra_op_threads(0);                // the node's cores shared by its processes
//   if (st.parameter_server()) return st.serve(server_model.parameters(), momentum);
//   train::Trainer<Net> trainer(net, st.trainer_options(options, max_seconds));
//   st.set_momentum_optimizer(trainer, net, decay, momentum, schedule);
//   ... the chief restores its checkpoint ...
//   st.share_state(trainer, pipeline, seed);   // the others take the chief's state
//   auto add_hook = st.hooks(trainer, max_seconds);   // chief-only hooks
//   trainer.run(st.feed(pipeline));            // each replica its slice of every batch
//   st.end_training(trainer, std::cerr);
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/data/batch.hpp"
#include "cifarnet/distributed/towers.hpp"
#include "cifarnet/io/checkpoint.hpp"
#include "cifarnet/optim/chain.hpp"
#include "cifarnet/optim/momentum.hpp"
#include "cifarnet/optim/schedules.hpp"
#include "cifarnet/optim/weight_decay.hpp"
#include "cifarnet/recipes/devices.hpp"
#include "cifarnet/train/hooks.hpp"
#include "cifarnet/train/trainer.hpp"
#ifdef CIFARNET_WITH_MPI
#include "cifarnet/distributed/data_parallel.hpp"
#include "cifarnet/distributed/parameter_server.hpp"
#endif

namespace cifarnet::recipes {

// ------------------------------------------------------------ processes

/// How the processes of an MPI job train (ignored in a single process).
class StrategyOptions {
 public:
  /// Synchronous replicas (true), or parameter servers and asynchronous
  /// workers (false, TF's default).
  StrategyOptions& sync(bool on) {
    sync_ = on;
    return *this;
  }
  /// Asynchronous: the number of parameter servers, the first ranks.
  StrategyOptions& num_ps(int n) {
    num_ps_ = n;
    return *this;
  }
  /// Seconds a rank waits for the others in a collective before the job ends with an error.
  StrategyOptions& collective_timeout(double s) {
    timeout_ = s;
    return *this;
  }
  /// Seconds a rank waits for the others while the job starts (until every
  /// rank holds the chief's training state: Strategy::share_state, serve),
  /// when longer than collective_timeout(). Ranks do unequal work then — a
  /// parameter server builds no input pipeline and waits for the workers to
  /// load their data, the workers wait for the chief's restore — so that
  /// wait grows with the data and the machine's load, not with a rank's
  /// failure; TF's workers wait up to 2 hours for the chief's session
  /// (SessionManager.wait_for_session).
  StrategyOptions& startup_timeout(double s) {
    startup_timeout_ = s;
    return *this;
  }
  /// Synchronous: the bytes of each gradient all-reduce bucket.
  StrategyOptions& allreduce_bucket_bytes(std::size_t b) {
    bucket_bytes_ = b;
    return *this;
  }
  /// Synchronous: start each bucket's all-reduce during backward (default) or all after it.
  StrategyOptions& overlap_allreduce(bool on) {
    overlap_ = on;
    return *this;
  }
  /// Synchronous: batch norm normalizes with the global batch's statistics.
  StrategyOptions& sync_batch_norm(bool on) {
    sync_bn_ = on;
    return *this;
  }
  bool sync() const { return sync_; }
  int num_ps() const { return num_ps_; }
  double collective_timeout() const { return timeout_; }
  double startup_timeout() const { return startup_timeout_; }
  std::size_t allreduce_bucket_bytes() const { return bucket_bytes_; }
  bool overlap_allreduce() const { return overlap_; }
  bool sync_batch_norm() const { return sync_bn_; }

 private:
  bool sync_ = false, overlap_ = true, sync_bn_ = false;
  int num_ps_ = 1;
  double timeout_ = 600, startup_timeout_ = 600;
  std::size_t bucket_bytes_ = std::size_t(1) << 20;
};

/// The processes of a run and what each does. See the top of this file.
class Strategy {
 public:
  /// Starts MPI when the process was launched by mpirun (call it before
  /// parsing the flags: MPI may take arguments of its own); otherwise, and
  /// in a build without MPI, the run is a single process.
  Strategy([[maybe_unused]] int* argc, [[maybe_unused]] char*** argv) {
#ifdef CIFARNET_WITH_MPI
    if (distributed::launched_by_mpi()) mpi_.emplace(argc, argv);
#endif
  }
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  /// After the flags are parsed: this process's rank and role. ConfigError
  /// when the job has no room for a worker.
  void configure(const StrategyOptions& o) {
    opts_ = o;
#ifdef CIFARNET_WITH_MPI
    if (!mpi_) return;
    // The start's deadline until share_state() / serve() have shared the
    // chief's state; collective_timeout() from then on.
    comm_ = std::make_unique<distributed::Communicator>(
        MPI_COMM_WORLD, std::max(o.collective_timeout(), o.startup_timeout()));
    rank_ = comm_->rank();
    size_ = comm_->size();
    if (size_ > 1 && !o.sync()) {                      // asynchronous: parameter servers, then workers
      distributed::PsRoles(size_, rank_, o.num_ps());  // ConfigError when -np leaves no worker
      num_ps_ = o.num_ps();
    }
#endif
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int num_ps() const { return num_ps_; }
  /// Parameter servers and asynchronous workers.
  bool async() const { return num_ps_ > 0; }
  /// Several synchronous replicas, each on its slice of every global batch.
  bool synchronous_replicas() const { return size_ > 1 && !async(); }
  int chief_rank() const { return num_ps_; }
  bool chief() const { return rank_ == chief_rank(); }
  bool parameter_server() const { return rank_ < num_ps_; }
  int worker_index() const { return rank_ - num_ps_; }

  /// Ends every process of a distributed job with `code` (the others would
  /// wait for this one until the collective timeout); returns `code` in a
  /// single process.
  int abort_job(int code) const {
#ifdef CIFARNET_WITH_MPI
    if (size_ > 1) distributed::Environment::abort_all(code);
#endif
    return code;
  }

  /// Every rank waits here for the others (e.g. for the chief's download).
  void barrier([[maybe_unused]] const char* what) {
#ifdef CIFARNET_WITH_MPI
    if (comm_) comm_->barrier(what);
#endif
  }

  /// Every rank takes the chief's `value` (an enum or arithmetic value).
  template <class T>
  void broadcast_from_chief([[maybe_unused]] T& value, [[maybe_unused]] const char* what = "broadcast") {
    static_assert(std::is_enum_v<T> || std::is_arithmetic_v<T>, "broadcast_from_chief: an enum or a number");
#ifdef CIFARNET_WITH_MPI
    if (!comm_) return;
    if constexpr (std::is_enum_v<T>) {
      auto v = static_cast<std::int64_t>(value);
      comm_->broadcast(&v, 1, chief_rank(), what);
      value = static_cast<T>(v);
    } else {
      comm_->broadcast(&value, 1, chief_rank(), what);
    }
#endif
  }

  /// OpenMP threads of the compute kernels: `requested` when > 0; else, in
  /// a job of several processes, the node's cores shared by the processes
  /// on it (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else all of the job's);
  /// else OpenMP's default (one per core).
  void set_intra_op_threads(int requested) const {
    if (requested > 0) {
      omp_set_num_threads(requested);
    } else if (size_ > 1) {
      const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      const int per_node = local ? std::max(1, std::atoi(local)) : size_;
      omp_set_num_threads(std::max(1, omp_get_num_procs() / per_node));
    }
  }

  /// How the job trains, for a program's first line ("" in a single
  /// process); `batch` is the global batch (synchronous) or each worker's.
  std::string describe(int batch) const {
    if (async())
      return ", asynchronous: " + std::to_string(num_ps_) + " parameter server(s) and " +
             std::to_string(size_ - num_ps_) + " workers of batch " + std::to_string(batch) + " each";
    if (size_ > 1)
      return ", " + std::to_string(size_) + " MPI processes of batch " + std::to_string(batch / size_) +
             (opts_.sync_batch_norm() ? " (synchronized batch norm)" : "") +
             (opts_.overlap_allreduce() ? ", all-reduce overlapped with backward"
                                        : ", all-reduce after backward");
    return "";
  }

  /// A parameter server's whole run: it holds `params` (the workers'
  /// model's), its shard's momentum slots, takes the chief's training state
  /// and serves the workers until all have finished, then says how it went
  /// on `log`. Returns the process's exit status.
  template <class T>
  int serve([[maybe_unused]] Parameters<T>& params, [[maybe_unused]] const optim::MomentumOptions& momentum,
            [[maybe_unused]] std::ostream& log) {
#ifdef CIFARNET_WITH_MPI
    const distributed::PsRoles roles(size_, rank_, num_ps_);
    distributed::ParameterServer<T> ps(*comm_, params, roles);
    std::optional<optim::Momentum<T>> opt;
    if (auto sel = ps.selection()) opt.emplace(params, momentum, *sel);
    io::StateDict initial;  // the chief's training state
    distributed::broadcast_state_dict(*comm_, initial, roles.chief_rank());
    comm_->set_timeout(opts_.collective_timeout());  // started: a silent worker now ends the job
    const distributed::ServeStats st = ps.serve(opt ? &*opt : nullptr, initial);
    std::string per_worker;
    for (auto n : st.updates_per_worker) per_worker += (per_worker.empty() ? "" : ", ") + std::to_string(n);
    std::ostringstream line;  // one write: other ranks share the output
    line << "parameter server (rank " << rank_ << "): " << st.updates << " updates (" << per_worker
         << " by worker 0, 1, ...), staleness mean " << st.mean_staleness() << " max " << st.max_staleness
         << (st.global_step >= 0 ? ", global step " + std::to_string(st.global_step) : std::string()) << "\n";
    log << line.str() << std::flush;
    return 0;
#else
    throw Error("Strategy::serve: this build has no MPI, so no process is a parameter server");
#endif
  }

  /// `o` with what the strategy decides: the time limit (the chief's alone
  /// when replicas are synchronous: hooks() enforces it), the worker index
  /// and, asynchronous, the servers' global step for startup_delay_steps.
  train::TrainerOptions trainer_options(train::TrainerOptions o, double max_seconds) const {
    return o.max_seconds(synchronous_replicas() ? 0.0 : max_seconds)
        .worker_index(worker_index())
        .global_step_source([this] { return remote_step(); });
  }

  /// The recipe's optimizer: weight decay, then momentum, with `schedule`;
  /// synchronous replicas average their gradients before the momentum step
  /// (overlapped with backward, or a stage of the chain). With
  /// StrategyOptions::sync_batch_norm under mpirun it also makes the
  /// cross-replica reducer the model must use (sync_batch_norm(); the
  /// overload with the model installs it).
  void set_momentum_optimizer(train::TrainerBase& trainer, const optim::WeightDecayOptions& decay,
                              const optim::MomentumOptions& momentum, optim::Schedule schedule) {
    opt_ = std::make_unique<PlainOptimizer>(trainer.parameters(), decay, momentum);
#ifdef CIFARNET_WITH_MPI
    if (comm_ && !async()) {
      const auto ar = distributed::AllReduceOptions(*comm_).bucket_bytes(opts_.allreduce_bucket_bytes());
      if (opts_.overlap_allreduce())
        overlap_ = std::make_unique<distributed::OverlappedAllReduce<float>>(trainer.parameters(), ar);
      else
        dist_opt_ = std::make_unique<AveragingOptimizer>(trainer.parameters(), decay, ar, momentum);
      if (opts_.sync_batch_norm()) sync_bn_ = std::make_unique<distributed::SyncBatchNorm>(*comm_);
    }
    if (dist_opt_) {
      trainer.set_optimizer(*dist_opt_, std::move(schedule));
    } else {
      trainer.set_optimizer(*opt_, std::move(schedule));
    }
    if (overlap_) trainer.set_gradient_sync(overlap_.get());
#else
    trainer.set_optimizer(*opt_, std::move(schedule));
#endif
  }

  /// The same, and synchronized batch norm installed in `net` (not towers:
  /// never under mpirun).
  template <class Net>
  void set_momentum_optimizer(train::TrainerBase& trainer, [[maybe_unused]] Net& net,
                              const optim::WeightDecayOptions& decay, const optim::MomentumOptions& momentum,
                              optim::Schedule schedule) {
    set_momentum_optimizer(trainer, decay, momentum, std::move(schedule));
    if constexpr (!is_towers<Net>::value)
      if (CrossReplicaSum* s = sync_batch_norm()) net.set_cross_replica(s);
  }

  /// Synchronized batch norm's cross-replica reducer (after
  /// set_momentum_optimizer; null unless StrategyOptions::sync_batch_norm
  /// under mpirun): the model's Model::set_cross_replica.
  CrossReplicaSum* sync_batch_norm() const {
#ifdef CIFARNET_WITH_MPI
    return sync_bn_.get();
#else
    return nullptr;
#endif
  }

  /// After the chief restored its checkpoint: synchronous replicas take the
  /// chief's whole training state (parameters, slots, step, pipeline
  /// position); asynchronous, the servers take it, every worker trains
  /// against them, and each worker but the chief reads its own shuffle of
  /// the data (`stream` reseeded by its index and the step it starts at).
  void share_state([[maybe_unused]] train::TrainerBase& trainer, [[maybe_unused]] data::BatchStream& stream,
                   [[maybe_unused]] std::uint64_t seed) {
#ifdef CIFARNET_WITH_MPI
    if (async()) {
      const distributed::PsRoles roles(size_, rank_, num_ps_);
      client_ =
          std::make_unique<distributed::ParameterServerClient<float>>(*comm_, trainer.parameters(), roles);
      client_->expect_slots(*opt_);
      io::StateDict d;
      if (chief()) d = trainer.state_dict();
      distributed::broadcast_state_dict(*comm_, d, chief_rank());
      if (!chief())
        stream.reseed(
            Rng::stream(seed + 0x9E3779B97F4A7C15ull * std::uint64_t(io::global_step(d).value_or(0)),
                        std::uint64_t(worker_index()))
                .next_u64());
      trainer.set_remote_variables(client_.get());
    } else if (comm_) {
      distributed::broadcast_training_state(*comm_, trainer);
    }
    if (comm_) comm_->set_timeout(opts_.collective_timeout());  // started
#endif
  }

  /// The function that adds a hook: synchronous replicas run their hooks on
  /// the chief only, behind one that averages the loss over the ranks and
  /// shares the chief's stop decision (and `max_seconds`); elsewhere the
  /// trainer's own. Every rank calls it (it adds that hook).
  std::function<void(std::shared_ptr<train::Hook>)> hooks(train::TrainerBase& trainer,
                                                          [[maybe_unused]] double max_seconds) {
#ifdef CIFARNET_WITH_MPI
    if (comm_ && !async()) {
      auto chief_hooks = std::make_shared<distributed::ChiefHooks>(*comm_, max_seconds);
      trainer.add_hook(chief_hooks);
      return [chief_hooks](std::shared_ptr<train::Hook> h) { chief_hooks->add(std::move(h)); };
    }
#endif
    return [&trainer](std::shared_ptr<train::Hook> h) { trainer.add_hook(std::move(h)); };
  }

  /// The trainer's batches from `stream`: synchronous replicas read the
  /// same global batches (same seed and position) and each takes its slice;
  /// a process alone, or an asynchronous worker, whole batches. The stream
  /// must not end (an Error).
  std::function<const train::Batch&()> feed(data::BatchStream& stream) {
    return [this, &stream]() -> const train::Batch& {
      if (!stream.next(batch_))
        throw Error("the training pipeline ended (it repeats forever; this is a bug)");
#ifdef CIFARNET_WITH_MPI
      if (comm_ && !async()) {
        distributed::take_shard(batch_, rank_, size_, shard_);
        return shard_;
      }
#endif
      return batch_;
    };
  }

  /// After trainer.run(): a worker that waited for --startup-delay-steps
  /// says so, an asynchronous worker says how stale its updates were (both
  /// on `log`); the chief pulls the servers' latest values (to evaluate),
  /// the other workers finish.
  void end_training(const train::TrainerBase& trainer, std::ostream& log) {
    if (trainer.startup_waited_for() > 0) {
      // One write per line: ranks share a terminal (or mpirun's merged
      // stdout), where piecewise writes interleave with other ranks' lines.
      std::ostringstream line;
      line << "worker " << worker_index() << " (rank " << rank_ << ") started at global step "
           << trainer.startup_waited_for() << " (--startup-delay-steps)\n";
      log << line.str() << std::flush;
    }
#ifdef CIFARNET_WITH_MPI
    if (!client_) return;
    const distributed::WorkerStats& ws = client_->stats();
    std::ostringstream line;
    line << "worker " << worker_index() << " (rank " << rank_ << "): " << ws.updates << " updates, "
         << ws.stale_updates << " of them computed on stale variables (staleness mean " << ws.mean_staleness()
         << ", max " << ws.max_staleness << ")\n";
    log << line.str() << std::flush;
    if (chief())
      client_->pull();
    else
      client_->finish();
#endif
  }

  /// The chief's line on the last step's overlapped all-reduce ("" when
  /// there is none or nothing was trained).
  std::string allreduce_report([[maybe_unused]] bool trained) const {
#ifdef CIFARNET_WITH_MPI
    if (overlap_ && trained) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "Gradient all-reduce (last step): %zu of %zu buckets started during backward, %.2f ms "
                    "waited after it\n",
                    overlap_->last_early_buckets(), overlap_->buckets(), overlap_->last_wait_seconds() * 1e3);
      return buf;
    }
#endif
    return "";
  }

  /// The end of the chief's run: the servers stop once every worker has finished.
  void finish() {
#ifdef CIFARNET_WITH_MPI
    if (client_) client_->finish();
#endif
  }

 private:
  using PlainOptimizer = optim::Chain<optim::WeightDecay, optim::Momentum>;

  std::int64_t remote_step() const {
#ifdef CIFARNET_WITH_MPI
    if (client_) return client_->pull();
#endif
    return 0;
  }

  StrategyOptions opts_;
  int rank_ = 0, size_ = 1, num_ps_ = 0;
  std::unique_ptr<PlainOptimizer> opt_;
  train::Batch batch_, shard_;
#ifdef CIFARNET_WITH_MPI
  using AveragingOptimizer = optim::Chain<optim::WeightDecay, distributed::AllReduceMean, optim::Momentum>;
  std::optional<distributed::Environment> mpi_;
  std::unique_ptr<distributed::Communicator> comm_;
  std::unique_ptr<AveragingOptimizer> dist_opt_;
  std::unique_ptr<distributed::OverlappedAllReduce<float>> overlap_;
  std::unique_ptr<distributed::SyncBatchNorm> sync_bn_;
  std::unique_ptr<distributed::ParameterServerClient<float>> client_;
#endif
};

}  // namespace cifarnet::recipes
