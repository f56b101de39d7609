// cifarnet/train/trainer.hpp — the training loop.
//
// One step: take a batch, forward in Mode::Train, mean softmax cross-entropy,
// backward, the optimizer chain's regularizers (optim::WeightDecay: adds
// wd · v to the gradients, its wd · Σ v²/2 is StepResult::regularization),
// check the total loss and the gradients are finite (else NumericsError
// "Model diverged with loss = NaN" before any update, so parameters and the
// last checkpoint stay good), the chain's other transforms and its optimizer
// with lr = schedule(step), the update ops (EMA...), increment the global
// step, then the hooks in the order they were added. Hooks (train/hooks.hpp)
// log, write summaries, checkpoint and stop, in the spirit of TensorFlow's
// SessionRunHooks.
//
// A checkpoint that cannot be saved (io::CheckpointSaveError from a hook:
// disk full, file-size limit) follows the trainer's CheckpointErrorPolicy:
// Stop (the default) ends run() by rethrowing it, the previous checkpoint
// being intact; Continue logs a warning and trains on, the next checkpoint
// retrying (a failure of the final save at the end still ends run() with the
// error, since nothing would retry it). restore_latest() resumes from the
// newest checkpoint that verifies and sets corrupt newer ones aside.
//
// TF-Slim's train() options are TrainerOptions too (docs/API.md):
// max_steps (Slim's number_of_steps; unset, the default, trains until the
// input ends, as Slim stops on OutOfRangeError), save_summaries_secs
// (SummaryHook's time limit), startup_delay_steps (every worker but the
// chief waits for global step N), trace_every_n_steps (a Chrome trace of one
// step's layer ops, train/trace.hpp) and init_fn (once, before the first
// step, not on resume). SlimLogHook (train/hooks.hpp) is Slim's log line.
//
// With RemoteVariables (asynchronous training against parameter servers,
// distributed/parameter_server.hpp) a step pulls the variables first and
// pushes the gradients instead of the local update; the global step is the
// servers'.
//
//   optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), optim::WeightDecayOptions(2e-4),
//                                                        optim::MomentumOptions().momentum(0.9));
//   Trainer<decltype(net)> trainer(net, TrainerOptions().max_steps(1000));
//   trainer.set_optimizer(opt, [&](std::int64_t s) { return schedule(s); });
//   trainer.add_hook(std::make_shared<LoggingHook>(100));
//   trainer.restore_latest(manager);   // resume from the latest checkpoint, if any
//   trainer.run([&]() -> const Batch& { return pipeline.next(); });
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/pending.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/data/batch.hpp"
#include "cifarnet/loss/losses.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/ops/ops.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/io/checkpoint_manager.hpp"
#include "cifarnet/train/state.hpp"
#include "cifarnet/train/trace.hpp"

namespace cifarnet::train {

/// A batch of images (in the model's format) and labels: the pipelines'
/// own type, so a data::Pipeline's batches go to the trainer as they are.
using Batch = data::Batch;

/// What one step produced.
struct StepResult {
  std::int64_t step = 0;      ///< global step after the update
  double loss = 0;            ///< mean cross-entropy
  double regularization = 0;  ///< the optimizer chain's regularizers' terms (weight decay)
  double total_loss = 0;      ///< loss + regularization
  double learning_rate = 0;
  std::size_t batch_size = 0;
  double seconds = 0;  ///< wall time of this step
};

class TrainerBase;

/// What a step function returns (TF-Slim's train_step_fn: total loss and
/// should_stop): the step's result, which the hooks see, and whether
/// training stops after this step.
struct TrainStepOutput {
  StepResult result;
  bool should_stop = false;
};

/// TF-Slim's train_step_fn (TrainerOptions::train_step_fn).
using TrainStepFn = std::function<TrainStepOutput(TrainerBase&, const Batch&)>;

/// Options of a Trainer, by name: `TrainerOptions().max_steps(1000).max_seconds(3600)`.
/// (Weight decay is a stage of the optimizer chain: optim::WeightDecay.)
/// A negative count or time is a ConfigError naming the option.
///
/// TF-Slim's learning.train options (docs/API.md, "Trainer"):
/// save_summaries_secs, startup_delay_steps (with worker_index and
/// global_step_source), trace_every_n_steps (with trace_dir), init_fn and
/// train_step_fn.
class TrainerOptions {
 public:
  /// Stop when the global step reaches this (Slim's number_of_steps). Unset
  /// (the default, Slim's None): train until the input ends (run() on a
  /// stream that ends, or a batch function that returns an empty batch),
  /// a hook's request_stop or max_seconds.
  TrainerOptions& max_steps(std::int64_t n) {
    max_steps_ = n;
    has_max_steps_ = true;
    return *this;
  }
  /// A NaN/Inf loss or gradient stops training with NumericsError (default on).
  TrainerOptions& check_numerics(bool on) {
    check_numerics_ = on;
    return *this;
  }
  /// > 0: also stop after this much wall time in run() (default 0: no limit).
  TrainerOptions& max_seconds(double s) {
    max_seconds_ = s;
    return *this;
  }
  /// Slim's save_summaries_secs: > 0 makes SummaryHook write summaries at
  /// most once every `s` seconds of wall time (a step its every_n makes due
  /// writes only when `s` seconds have passed since the last write; the first
  /// due step always writes). 0 (the default): every every_n steps.
  TrainerOptions& save_summaries_secs(double s) {
    save_summaries_secs_ = non_negative(s, "save_summaries_secs");
    return *this;
  }
  /// Slim's startup_delay_steps: every worker but the chief (worker_index
  /// k > 0) waits before its first step until the shared global step
  /// (global_step_source) reaches min(n, max_steps), so the chief trains the
  /// first n steps alone. The chief (k = 0) never waits. Must be 0 under
  /// synchronous gradient averaging (Slim: with a sync_optimizer), where the
  /// other workers cannot step without this one.
  TrainerOptions& startup_delay_steps(std::int64_t n) {
    startup_delay_steps_ = non_negative(n, "startup_delay_steps");
    return *this;
  }
  /// This worker's index k (under MPI: its rank; 0 = the chief, default).
  TrainerOptions& worker_index(int k) {
    worker_index_ = int(non_negative(k, "worker_index"));
    return *this;
  }
  /// Where a waiting worker reads the global step the other workers advance
  /// (e.g. a parameter server's); polled every startup_poll_secs.
  TrainerOptions& global_step_source(std::function<std::int64_t()> f) {
    global_step_source_ = std::move(f);
    return *this;
  }
  /// Seconds between two reads of global_step_source while waiting (default
  /// 1, as Slim's _wait_for_step).
  TrainerOptions& startup_poll_secs(double s) {
    startup_poll_secs_ = non_negative(s, "startup_poll_secs");
    return *this;
  }
  /// Slim's trace_every_n_steps: > 0 makes the chief time every layer call
  /// of the steps that start at a global step multiple of n and write them
  /// as a Chrome trace, <trace_dir>/tf_trace-<global step after it>.json
  /// (train/trace.hpp). 0 (the default): no traces.
  TrainerOptions& trace_every_n_steps(std::int64_t n) {
    trace_every_n_steps_ = non_negative(n, "trace_every_n_steps");
    return *this;
  }
  /// The directory of the traces (Slim's logdir); needed with trace_every_n_steps.
  TrainerOptions& trace_dir(std::string dir) {
    trace_dir_ = std::move(dir);
    return *this;
  }
  /// Slim's init_fn: called once with the trainer after the variables are
  /// initialized, before the first step (Trainer::initialize(), which the
  /// first run() or step() calls); not when training resumes from a
  /// checkpoint (load_state_dict / restore_latest), and only on the chief
  /// (worker_index 0), like Slim's, which the Supervisor runs only when the
  /// chief initializes the variables. E.g. a warm start:
  /// [&](TrainerBase& t) { assign(t.parameters(), ...); }.
  TrainerOptions& init_fn(std::function<void(TrainerBase&)> f) {
    init_fn_ = std::move(f);
    return *this;
  }
  /// Slim's train_step_fn: run() calls f(trainer, batch) for each step
  /// instead of the default step, TrainerBase::train_step (Slim's
  /// train_step). f may wrap it (work before or after a step, its own
  /// stopping rule: call t.train_step(b) and change its should_stop) or
  /// replace it; it returns the step's result, which the hooks then see, and
  /// should_stop, which ends run() after the hooks (as a hook's
  /// request_stop). With remote variables run() has pulled them before f
  /// runs. Trainer::step() is not affected. Empty (the default): train_step.
  TrainerOptions& train_step_fn(TrainStepFn f) {
    train_step_fn_ = std::move(f);
    return *this;
  }
  /// The step limit; the largest int64 when unset (has_max_steps() false).
  std::int64_t max_steps() const { return has_max_steps_ ? max_steps_ : kNoStepLimit; }
  bool has_max_steps() const { return has_max_steps_; }
  bool check_numerics() const { return check_numerics_; }
  double max_seconds() const { return max_seconds_; }
  double save_summaries_secs() const { return save_summaries_secs_; }
  std::int64_t startup_delay_steps() const { return startup_delay_steps_; }
  int worker_index() const { return worker_index_; }
  const std::function<std::int64_t()>& global_step_source() const { return global_step_source_; }
  double startup_poll_secs() const { return startup_poll_secs_; }
  std::int64_t trace_every_n_steps() const { return trace_every_n_steps_; }
  const std::string& trace_dir() const { return trace_dir_; }
  const std::function<void(TrainerBase&)>& init_fn() const { return init_fn_; }
  const TrainStepFn& train_step_fn() const { return train_step_fn_; }

 private:
  template <class V>
  static V non_negative(V v, const char* option) {
    if (!(v >= V(0))) {
      std::ostringstream os;
      os << "TrainerOptions::" << option << " must be >= 0, got " << v;
      throw ConfigError(os.str());
    }
    return v;
  }
  static constexpr std::int64_t kNoStepLimit = std::numeric_limits<std::int64_t>::max();
  std::int64_t max_steps_ = 0;
  bool has_max_steps_ = false;
  bool check_numerics_ = true;
  double max_seconds_ = 0;
  double save_summaries_secs_ = 0;
  std::int64_t startup_delay_steps_ = 0;
  int worker_index_ = 0;
  std::function<std::int64_t()> global_step_source_;
  double startup_poll_secs_ = 1.0;
  std::int64_t trace_every_n_steps_ = 0;
  std::string trace_dir_;
  std::function<void(TrainerBase&)> init_fn_;
  TrainStepFn train_step_fn_;
};

namespace detail {
/// Whether Opt has regularize(params) (an optim::Chain): then the trainer
/// runs its regularizers before the numerics check and update() after it.
template <class Opt, class T, class = void>
struct has_regularize : std::false_type {};
template <class Opt, class T>
struct has_regularize<Opt, T,
                      std::void_t<decltype(std::declval<Opt&>().regularize(std::declval<Parameters<T>&>()))>>
    : std::true_type {};
/// Whether an optimizer's regularizers can leave their term on the device
/// (optim::Chain::regularize_deferred).
template <class Opt, class T, class = void>
struct has_regularize_deferred : std::false_type {};
template <class Opt, class T>
struct has_regularize_deferred<
    Opt, T, std::void_t<decltype(std::declval<Opt&>().regularize_deferred(std::declval<Parameters<T>&>()))>>
    : std::true_type {};
/// Whether a model takes a Profiler (Model does; distributed::Towers does
/// not: its traces have the Trainer's phases only).
template <class M, class = void>
struct has_profiler : std::false_type {};
template <class M>
struct has_profiler<M, std::void_t<decltype(std::declval<M&>().set_profiler(std::declval<M&>().profiler()))>>
    : std::true_type {};
/// Does M keep its output where the backend computes (Model::
/// forward_on_device, Model::tensor_memory)? Then the Trainer hands the
/// logits to the loss op there, and d(loss)/d(logits) lives there too.
template <class M, class = void>
struct has_device_forward : std::false_type {};
template <class M>
struct has_device_forward<M, std::void_t<decltype(std::declval<M&>().forward_on_device(
                                             std::declval<const Tensor<float>&>(), Mode::Train)),
                                         decltype(std::declval<M&>().tensor_memory())>> : std::true_type {};
/// Does M take byte images (Model::forward_pixels_on_device)?
template <class M, class = void>
struct has_pixel_forward : std::false_type {};
template <class M>
struct has_pixel_forward<M, std::void_t<decltype(std::declval<M&>().forward_pixels_on_device(
                                std::declval<const std::uint8_t*>(), std::size_t(0), std::size_t(0),
                                std::size_t(0), std::size_t(0), Mode::Train))>> : std::true_type {};
/// Can M keep its parameter arena on its device (Model::set_device_resident)?
template <class M, class = void>
struct has_device_arena : std::false_type {};
template <class M>
struct has_device_arena<M, std::void_t<decltype(std::declval<M&>().device_resident()),
                                       decltype(std::declval<M&>().sync_parameters_to_host()),
                                       decltype(std::declval<M&>().host_parameters())>> : std::true_type {};
/// Does M's device queue launches (CUDA graphs: Device<Cuda>::run_queued)?
template <class M, class = void>
struct has_queued_launches : std::false_type {};
template <class M>
struct has_queued_launches<M, std::void_t<decltype(std::declval<M&>().device().run_queued())>>
    : std::true_type {};
}  // namespace detail

/// What the trainer does when a checkpoint cannot be saved.
enum class CheckpointErrorPolicy {
  Stop,      ///< run() ends with the io::CheckpointSaveError (the previous checkpoint is intact)
  Continue,  ///< log a warning, keep training, retry at the next checkpoint
};

/// "stop" / "continue" (a flag's value); ConfigError naming `option` otherwise.
inline CheckpointErrorPolicy parse_checkpoint_error_policy(
    const std::string& value, const std::string& option = "--on-checkpoint-error") {
  if (value == "stop") return CheckpointErrorPolicy::Stop;
  if (value == "continue") return CheckpointErrorPolicy::Continue;
  throw ConfigError(option + " must be 'stop' or 'continue', got '" + value + "'");
}

/// A training hook (TF SessionRunHook): begin before the first step,
/// after_step after every step, end when training finishes normally.
class Hook {
 public:
  virtual ~Hook() = default;
  virtual void begin(TrainerBase&) {}
  virtual void after_step(TrainerBase&, const StepResult&) {}
  virtual void end(TrainerBase&) {}
};

/// Variables that live elsewhere (distributed::ParameterServerClient:
/// asynchronous training against parameter servers). With one set, a
/// Trainer step pulls the variables into the model before forward, computes
/// the gradients and the optimizer chain's regularizers locally, checks
/// numerics, and pushes the gradients instead of running the local update;
/// the global step is the remote one.
class RemoteVariables {
 public:
  virtual ~RemoteVariables() = default;
  /// Copies the variables' current values (parameters and BN statistics)
  /// into the local model; returns the current global step.
  virtual std::int64_t pull() = 0;
  /// Sends the local gradients (and the step's BN statistic changes) to be
  /// applied with learning rate `lr`; returns the global step after this
  /// update (other workers' updates included).
  virtual std::int64_t push(double lr) = 0;
  /// For a checkpoint: replaces the entries of `d` (built from the local
  /// copy) that live remotely — parameters, BN statistics, optimizer slots,
  /// global step — with their current remote values, and copies the values
  /// into the local model.
  virtual void current_state(StateDict& d) = 0;
};

/// The model-independent part of a trainer: the loop, the optimizer chain,
/// the checkpointed state, hooks, checkpoints, numerics checks and traces.
/// Hooks see it; so does code that drives a run without knowing the model's
/// type (examples/resnet_cifar10 compiles that once for every backend). A
/// Trainer<Model> adds the model's part of a step: forward, loss, backward.
class TrainerBase {
 public:
  using T = float;
  using Options = TrainerOptions;

  virtual ~TrainerBase() = default;

  std::int64_t global_step() const { return step_; }
  std::int64_t max_steps() const { return opts_.max_steps(); }
  bool has_max_steps() const { return opts_.has_max_steps(); }
  /// Whether the last run() ended because its input ended (max_steps unset).
  bool input_ended() const { return input_ended_; }
  /// Asks the loop to stop after the current step.
  void request_stop() { stop_ = true; }
  bool stop_requested() const { return stop_; }
  /// TrainerOptions::save_summaries_secs (SummaryHook reads it).
  double save_summaries_secs() const { return opts_.save_summaries_secs(); }

  /// Sets the optimizer (or Chain of transforms + optimizer) and the
  /// learning-rate schedule; the optimizer's slots join the checkpoint. A
  /// Chain's regularizers (optim::WeightDecay) run before the numerics
  /// check, and their terms are the step's regularization.
  template <class Opt, class Schedule>
  void set_optimizer(Opt& opt, Schedule schedule) {
    if constexpr (detail::has_regularize<Opt, T>::value) {
      if constexpr (detail::has_regularize_deferred<Opt, T>::value)
        regularize_ = [&opt](Parameters<T>& p) { return opt.regularize_deferred(p); };
      else
        regularize_ = [&opt](Parameters<T>& p) { return Pending::ready(opt.regularize(p)); };
      apply_ = [&opt](Parameters<T>& p, double lr) { opt.update(p, lr); };
    } else {
      regularize_ = nullptr;
      apply_ = [&opt](Parameters<T>& p, double lr) { opt.step(p, lr); };
    }
    schedule_ = std::move(schedule);
    state_.add_slots(opt);
  }

  /// Gradient synchronization overlapped with backward (data-parallel
  /// training: distributed::OverlappedAllReduce): the model reports final
  /// gradients to `s` during backward, and every step waits for `s` to finish
  /// before the regularizers, the numerics check and the optimizer, so the
  /// optimizer sees synchronized gradients. Null turns it off. `s` must
  /// outlive the trainer's steps.
  void set_gradient_sync(GradientSync* s) {
    grad_sync_ = s;
    attach_gradient_sync(s);
  }

  /// Trains against variables held elsewhere (RemoteVariables; null: the
  /// local model's, the default). The optimizer given to set_optimizer()
  /// then contributes its regularizers (run locally, on the pulled values,
  /// as TF computes the L2 term on the worker), the schedule and its slots'
  /// names and shapes for checkpoints; its update runs remotely. `r` must
  /// outlive the trainer's steps.
  void set_remote_variables(RemoteVariables* r) { remote_ = r; }
  RemoteVariables* remote_variables() const { return remote_; }

  /// Runs after every optimizer step with the new global step (TF's update
  /// ops), e.g. [&](auto& p, auto step) { ema.apply(p, step); }.
  void add_update(std::function<void(Parameters<T>&, std::int64_t)> op) { updates_.push_back(std::move(op)); }
  /// An object whose visit_state slots join the checkpoint (EMA...).
  template <class S>
  void add_state_slots(S& obj) {
    state_.add_slots(obj);
  }
  void add_state(std::shared_ptr<Saveable> s) { state_.add(std::move(s)); }
  void add_rng(const std::string& name, Rng& rng) { state_.add_rng(name, rng); }
  void add_hook(std::shared_ptr<Hook> h) { hooks_.push_back(std::move(h)); }
  /// What a failed checkpoint save does (default Stop); Continue's warnings go to `log`.
  void set_checkpoint_error_policy(CheckpointErrorPolicy p, std::ostream* log = &std::cerr) {
    policy_ = p;
    policy_log_ = log;
  }
  CheckpointErrorPolicy checkpoint_error_policy() const { return policy_; }
  /// Checkpoint saves that failed during run() (Continue policy: the ones it trained past).
  std::int64_t checkpoint_failures() const { return checkpoint_failures_; }

  /// Everything a checkpoint holds, at the current step.
  StateDict state_dict() {
    arena_to_host();
    StateDict d = state_.save(step_);
    if (remote_) {
      remote_->current_state(d);
      if (const auto s = io::global_step(d)) step_ = *s;  // the remote global step, now
    }
    return d;
  }
  /// Restores everything from a checkpoint; returns the global step.
  std::int64_t load_state_dict(const StateDict& d) {
    arena_host_write();
    step_ = state_.restore(d);
    restored_ = true;  // a resume: init_fn is not run
    return step_;
  }
  /// Resumes from the newest checkpoint of `mgr` that reads and verifies.
  /// Newer ones that do not are skipped with a warning to `log` (file and
  /// fault); the corrupt ones are set aside as "<file>.corrupt" (kept, never
  /// deleted). Returns true when one was loaded.
  bool restore_latest(io::CheckpointManager& mgr, std::ostream* log = nullptr) {
    auto r = mgr.restore_latest();
    if (!r) return false;
    if (log)
      for (const auto& w : r->warnings) *log << "WARNING: " << w << "\n";
    for (const auto& c : r->corrupt) {
      try {
        const std::string moved = mgr.set_aside(c);
        if (log)
          *log << "WARNING: set the corrupt checkpoint '" << c.path << "' aside as '" << moved << "'\n";
      } catch (const Error& e) {
        if (log) *log << "WARNING: " << e.what() << "\n";
      }
    }
    load_state_dict(r->dict);
    if (log) *log << "Restored " << r->checkpoint.path << " (global step " << step_ << ")\n";
    return true;
  }

  /// Trainable parameters and their gradients, for summaries.
  void visit_parameters(const std::function<void(const ParamInfo&, const float*, const float*)>& f) {
    arena_to_host();
    params_->for_each([&](const ParamInfo& p, float* v, float* g) { f(p, v, g); });
  }
  /// The model's parameters, current on the host for reading and writing
  /// (init_fn assigns initial values here). With a device-resident arena
  /// (Model::set_device_resident) this brings the host copy current and the
  /// device takes it back before the next step: call it where the host
  /// reads or writes values, not in a per-step loop.
  Parameters<T>& parameters() {
    arena_host_write();
    return *params_;
  }

  /// Runs init_fn unless a checkpoint was restored or this is not the chief
  /// (once; later calls do nothing). run() and step() call it; call it
  /// yourself before broadcasting the chief's state to the other ranks.
  void initialize() {
    if (initialized_) return;
    initialized_ = true;
    if (restored_ || opts_.worker_index() != 0 || !opts_.init_fn()) return;
    opts_.init_fn()(*this);
    init_fn_ran_ = true;
  }
  /// Whether init_fn has run (false when a checkpoint was restored first).
  bool init_fn_ran() const { return init_fn_ran_; }
  /// The global step a non-chief worker waited for in its last run() (0: none).
  std::int64_t startup_waited_for() const { return startup_waited_for_; }
  /// The Chrome trace written last (trace_every_n_steps; empty: none yet).
  const std::string& last_trace_path() const { return last_trace_path_; }

  /// Slim's train_step, the step run() takes by default: one step on `b`
  /// with the variables in place (run() has pulled remote ones), and
  /// should_stop once the global step has reached max_steps. A
  /// TrainerOptions::train_step_fn may call it. ConfigError before
  /// set_optimizer().
  TrainStepOutput train_step(const Batch& b) {
    TrainStepOutput out;
    out.result = pulled_step(b);
    out.should_stop = step_ >= opts_.max_steps();
    return out;
  }

  /// One training step on `b`; returns what it did.
  StepResult step(const Batch& b) {
    if (!apply_) throw ConfigError("Trainer: set_optimizer() was not called");
    check_trace_options();
    initialize();
    if (remote_) step_ = remote_->pull();
    return pulled_step(b);
  }

  /// Trains on the batches of `stream` (a data::Pipeline, ...) until
  /// max_steps (or a hook's request_stop, or max_seconds). A stream that
  /// ends stops training cleanly when max_steps is unset (Slim's
  /// number_of_steps=None and its OutOfRangeError stop) and is an Error when
  /// max_steps is set and not reached. Returns the final global step.
  std::int64_t run(data::BatchStream& stream) {
    Batch b;
    return run([&]() -> const Batch& {
      if (!stream.next(b)) b.labels.clear();
      return b;
    });
  }

  /// Trains until max_steps (or a hook's request_stop, or max_seconds),
  /// pulling batches from `next`; an empty batch (no labels) is the end of
  /// the input, treated as run(stream) treats a stream that ends. Returns
  /// the final global step. With remote variables, each step first pulls
  /// them and ends the loop when the global step (advanced by every worker)
  /// has reached max_steps.
  std::int64_t run(const std::function<const Batch&()>& next) {
    stop_ = false;
    input_ended_ = false;
    check_trace_options();
    initialize();
    wait_for_startup_delay();
    const auto start = std::chrono::steady_clock::now();
    for (auto& h : hooks_) h->begin(*this);
    while (step_ < opts_.max_steps() && !stop_) {
      if (remote_) {
        step_ = remote_->pull();
        if (step_ >= opts_.max_steps()) break;
      }
      const Batch& b = next();
      if (b.labels.empty()) {
        if (opts_.has_max_steps())
          throw Error("Trainer::run: the batch stream ended at global step " + std::to_string(step_) +
                      ", before max_steps " + std::to_string(opts_.max_steps()) +
                      " (a training pipeline repeats forever: epochs = 0; or leave max_steps unset to "
                      "train until the input ends)");
        input_ended_ = true;  // Slim: "Caught OutOfRangeError. Stopping Training."
        break;
      }
      const TrainStepOutput out = opts_.train_step_fn() ? opts_.train_step_fn()(*this, b) : train_step(b);
      const StepResult& r = out.result;
      if (out.should_stop) stop_ = true;
      for (auto& h : hooks_) {
        try {
          h->after_step(*this, r);
        } catch (const io::CheckpointSaveError& e) {
          ++checkpoint_failures_;
          if (policy_ == CheckpointErrorPolicy::Stop) throw;
          if (policy_log_)
            *policy_log_ << "WARNING: " << e.what() << "; training continues (failure "
                         << checkpoint_failures_ << "), the next checkpoint retries\n"
                         << std::flush;
        }
      }
      if (opts_.max_seconds() > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >=
              opts_.max_seconds())
        stop_ = true;
    }
    // Every hook ends; a failed final checkpoint is rethrown after them
    // (under either policy: nothing would retry it).
    std::optional<io::CheckpointSaveError> final_error;
    for (auto& h : hooks_) {
      try {
        h->end(*this);
      } catch (const io::CheckpointSaveError& e) {
        ++checkpoint_failures_;
        if (!final_error) final_error = e;
      }
    }
    if (final_error) throw *final_error;
    return step_;
  }

  TrainingState<T>& training_state() { return state_; }

 protected:
  TrainerBase(Parameters<T>& params, Options opts)
      : params_(&params), opts_(std::move(opts)), state_(params) {}

  /// A model whose arena (and optimizer slots) live on a device: bring the
  /// host copies current for reading (checkpoints, summaries) ...
  virtual void arena_to_host() {}
  /// ... or for writing too (a restore, init_fn): the device takes them
  /// back before its next op. Host backends: nothing to do.
  virtual void arena_host_write() {}
  /// After the step's last update: a device that queues its launches (CUDA
  /// graphs) starts the queued update now, while the host fetches the next
  /// batch, rather than at the step's next use of the stream.
  virtual void end_of_step() {}

  /// The model's part of a step: forward in Mode::Train on `b.images`, the
  /// mean softmax cross-entropy against `b.labels` (returned as a Pending:
  /// on a GPU it stays there until read), backward (gradients into the
  /// parameters), each booked on `tp` when it is set. Between the loss and
  /// backward it calls begin_gradient_sync().
  virtual Pending forward_backward(const Batch& b, Profiler* tp) = 0;
  /// Hands `s` to the model (set_gradient_sync).
  virtual void attach_gradient_sync(GradientSync* s) = 0;
  /// Puts `p` in the model's profiler slot for a traced step (and, after
  /// it, the profiler it returned back); returns the one the model had.
  /// Models without a profiler slot ignore it and return null.
  virtual Profiler* swap_profiler(Profiler* p) = 0;

  void begin_gradient_sync() {
    if (grad_sync_) grad_sync_->begin();
  }

  /// Runs f(), booked as the Trainer's phase `name` when `tp` is set.
  template <class F>
  static void phase(Profiler* tp, const char* name, F&& f) {
    if (!tp) return f();
    const auto t0 = Profiler::Clock::now();
    f();
    tp->add(name, "step", false, t0, Profiler::Clock::now());
  }

 private:
  /// A step once the variables are in the model (pulled, when remote).
  StepResult pulled_step(const Batch& b) {
    if (!apply_) throw ConfigError("Trainer: set_optimizer() was not called");
    // Slim's should_trace: the chief traces the steps that start at a
    // multiple of trace_every_n_steps (times from here on).
    const std::int64_t every = opts_.trace_every_n_steps();
    TraceScope trace(*this, every > 0 && opts_.worker_index() == 0 && step_ % every == 0);
    Profiler* tp = trace.profiler();
    const auto t0 = Profiler::Clock::now();
    auto& P = *params_;
    StepResult r;
    r.learning_rate = schedule_(step_);
    r.batch_size = b.labels.size();
    // The step's three host values (loss, weight decay term, gradients'
    // finiteness) as Pendings: on a GPU they wait in the device's read-back
    // area and the first get() brings all three in one copy (core/pending.hpp).
    const Pending loss = forward_backward(b, tp);
    if (grad_sync_) phase(tp, "gradient_sync", [&] { grad_sync_->finish(); });
    Pending reg, finite;
    phase(tp, "regularization", [&] {
      if (regularize_) reg = regularize_(P);
    });
    if (opts_.check_numerics()) finite = gradients_finite();
    phase(tp, "read_back", [&] {
      r.loss = double(T(loss.get()));
      r.regularization = reg.get();
    });
    r.total_loss = r.loss + r.regularization;
    if (opts_.check_numerics()) phase(tp, "check_numerics", [&] { check_numerics(r, finite); });
    phase(tp, "optimizer", [&] {
      if (remote_) {
        step_ = remote_->push(r.learning_rate);
      } else {
        apply_(P, r.learning_rate);
        ++step_;
      }
    });
    phase(tp, "update_ops", [&] {
      for (auto& u : updates_) u(P, step_);
    });
    end_of_step();
    r.step = step_;
    const auto t1 = Profiler::Clock::now();
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    if (tp) {
      tp->add("train_step", "step", false, t0, t1);
      last_trace_path_ = opts_.trace_dir() + "/tf_trace-" + std::to_string(step_) + ".json";
      write_chrome_trace(last_trace_path_, *tp, step_);
    }
    return r;
  }

  /// Attaches the trainer's event-recording profiler to the model for one
  /// traced step (and puts back whatever profiler the model had).
  class TraceScope {
   public:
    TraceScope(TrainerBase& t, bool on) : t_(on ? &t : nullptr) {
      if (!t_) return;
      t.trace_.clear();
      t.trace_.record_events(true);
      saved_ = t.swap_profiler(&t.trace_);
    }
    ~TraceScope() {
      if (!t_) return;
      t_->swap_profiler(saved_);
      t_->trace_.record_events(false);
    }
    TraceScope(const TraceScope&) = delete;
    TraceScope& operator=(const TraceScope&) = delete;
    Profiler* profiler() const { return t_ ? &t_->trace_ : nullptr; }

   private:
    TrainerBase* t_;
    Profiler* saved_ = nullptr;
  };

  void check_trace_options() const {
    if (opts_.trace_every_n_steps() > 0 && opts_.trace_dir().empty())
      throw ConfigError(
          "TrainerOptions::trace_every_n_steps needs trace_dir (where tf_trace-<step>.json goes), as Slim's "
          "needs a logdir");
  }

  /// startup_delay_steps: every worker but the chief waits for global step
  /// min(n, max_steps), as Slim's _wait_for_step(min(startup_delay_steps,
  /// number_of_steps or sys.maxsize)).
  void wait_for_startup_delay() {
    const std::int64_t n = opts_.startup_delay_steps();
    const int k = opts_.worker_index();
    if (n == 0 || k == 0) return;
    if (grad_sync_)
      throw ConfigError(
          "TrainerOptions::startup_delay_steps must be 0 under synchronous gradient averaging "
          "(worker " +
          std::to_string(k) +
          " would wait for steps the others cannot take without it; Slim forbids it with a "
          "sync_optimizer too)");
    const auto& source = opts_.global_step_source();
    if (!source)
      throw ConfigError("TrainerOptions::startup_delay_steps " + std::to_string(n) + " on worker " +
                        std::to_string(k) + " needs global_step_source (the global step the others advance)");
    const std::int64_t target = std::min(n, opts_.max_steps());
    const auto poll = std::chrono::duration<double>(opts_.startup_poll_secs());
    while (source() < target) std::this_thread::sleep_for(poll);
    startup_waited_for_ = target;
  }

  /// The numerics check's Pending: finite exactly when every gradient is.
  Pending gradients_finite() {
    auto& P = *params_;
    const std::size_t n = std::size_t(P.grads().size());
    if (grad_runs_.elements != n) grad_runs_ = ArenaRuns::span(0, n);  // built once
    return optim::detail::kernels(P).finite_deferred(grad_runs_, P.grads().data());
  }

  /// Throws before any update when the loss or a gradient is NaN or Inf
  /// (`finite`: gradients_finite() of this step).
  void check_numerics(const StepResult& r, const Pending& finite) {
    if (!std::isfinite(r.total_loss))
      throw NumericsError("Model diverged with loss = NaN (step " + std::to_string(step_) +
                          ", cross-entropy " + std::to_string(r.loss) + ")");
    if (std::isfinite(finite.get())) return;
    auto& P = *params_;
    auto& kern = optim::detail::kernels(P);
    std::string bad;
    for (std::size_t id = 0; id < P.count() && bad.empty(); ++id) {
      const ParamInfo& p = P.info(id);
      if (p.trainable &&
          kern.find_non_finite(ArenaRuns::span(p.offset, p.offset + p.size), P.grads().data()).found)
        bad = p.name;
    }
    throw NumericsError("Model diverged with loss = NaN: the gradient of '" + bad + "' is not finite (step " +
                        std::to_string(step_) + ")");
  }

  Parameters<T>* params_;
  Options opts_;
  std::int64_t step_ = 0;
  bool stop_ = false, input_ended_ = false;
  GradientSync* grad_sync_ = nullptr;
  RemoteVariables* remote_ = nullptr;
  TrainingState<T> state_;
  std::function<Pending(Parameters<T>&)> regularize_;
  std::function<void(Parameters<T>&, double)> apply_;
  std::function<double(std::int64_t)> schedule_;
  std::vector<std::function<void(Parameters<T>&, std::int64_t)>> updates_;
  std::vector<std::shared_ptr<Hook>> hooks_;
  CheckpointErrorPolicy policy_ = CheckpointErrorPolicy::Stop;
  std::ostream* policy_log_ = &std::cerr;
  std::int64_t checkpoint_failures_ = 0;
  ArenaRuns grad_runs_;  // the whole gradient buffer, for the numerics check
  bool restored_ = false, initialized_ = false, init_fn_ran_ = false;
  std::int64_t startup_waited_for_ = 0;
  Profiler trace_;  // the traced step's events (trace_every_n_steps)
  std::string last_trace_path_;
};

/// Trains a ModelT (Model<Net, Backend>, distributed::Towers...): its
/// forward, loss and backward; the rest is TrainerBase's.
template <class ModelT>
class Trainer : public TrainerBase {
 public:
  static_assert(std::is_same_v<typename ModelT::Scalar, float>, "cifarnet: Trainer trains float models");

  explicit Trainer(ModelT& model, Options opts = Options())
      : TrainerBase(model.parameters(), std::move(opts)), model_(&model) {}

  ModelT& model() { return *model_; }

 protected:
  Pending forward_backward(const Batch& b, Profiler* tp) override {
    const auto tf = Profiler::Clock::now();
    // The logits stay where the model computed them (on a GPU: the loss op
    // reads them there, and the host reads back the loss only).
    const Tensor<T>* out = nullptr;
    if (b.has_pixels()) {  // byte images (PipelineOptions::byte_pixels)
      if constexpr (detail::has_pixel_forward<ModelT>::value) {
        out = &model_->forward_pixels_on_device(b.pixels.data(), b.size(), b.pixel_height, b.pixel_width,
                                                b.pixel_channels, Mode::Train);
      } else {
        data::pixels_to_images(b, model_->format(), pixel_images_);
        out = &model_->forward(pixel_images_, Mode::Train);
      }
    } else if constexpr (detail::has_device_forward<ModelT>::value) {
      out = &model_->forward_on_device(b.images, Mode::Train);
    } else {
      out = &model_->forward(b.images, Mode::Train);
    }
    const Tensor<T>& logits = *out;
    if (tp) tp->add("forward", "step", false, tf, Profiler::Clock::now());
    cifarnet::detail::check_logits(logits, b.labels.size());
    if (dlogits_.shape() != logits.shape()) {
      std::optional<TensorMemoryScope> scope;  // beside the logits
      if constexpr (detail::has_device_forward<ModelT>::value)
        if (TensorMemory* m = model_->tensor_memory()) scope.emplace(m);
      dlogits_.resize(logits.shape());
    }
    const std::size_t n = logits.shape()[0];
    Pending loss;
    phase(tp, "softmax_cross_entropy", [&] {
      loss = xent_.loss_deferred(model_->device(), n, logits.size() / n, logits.data(), b.labels.data(),
                                 dlogits_.data());
    });
    begin_gradient_sync();
    phase(tp, "backward", [&] { model_->backward(dlogits_); });
    return loss;
  }
  void attach_gradient_sync(GradientSync* s) override { model_->set_gradient_sync(s); }
  void arena_to_host() override {
    if constexpr (detail::has_device_arena<ModelT>::value)
      if (model_->device_resident()) model_->sync_parameters_to_host();
  }
  void arena_host_write() override {
    if constexpr (detail::has_device_arena<ModelT>::value)
      if (model_->device_resident()) model_->host_parameters();
  }
  void end_of_step() override {
    if constexpr (detail::has_queued_launches<ModelT>::value) model_->device().run_queued();
  }
  Profiler* swap_profiler([[maybe_unused]] Profiler* p) override {
    if constexpr (detail::has_profiler<ModelT>::value) {
      Profiler* had = model_->profiler();
      model_->set_profiler(p);
      return had;
    } else {
      return nullptr;
    }
  }

 private:
  ModelT* model_;
  ops::SoftmaxCrossEntropy<typename ModelT::Backend, T> xent_;
  Tensor<T> dlogits_;
  Tensor<T> pixel_images_;  // a byte batch as floats, for models that take floats only
};
/// Precision@1 of a model over batches (Mode::Infer), TF's in_top_k.
struct EvalResult {
  std::size_t correct = 0, total = 0;
  double loss = 0;  ///< mean cross-entropy
  double precision() const { return total ? double(correct) / double(total) : 0.0; }
};

/// Evaluates `num_batches` batches from `next` (0: until `next` returns an
/// empty batch).
template <class ModelT>
EvalResult evaluate(ModelT& model, const std::function<const Batch&()>& next, std::size_t num_batches = 0) {
  using T = typename ModelT::Scalar;
  EvalResult r;
  double loss_sum = 0;
  ops::SoftmaxCrossEntropy<typename ModelT::Backend, T> xent;
  std::vector<std::uint8_t> hits;
  Tensor<T> pixel_images;
  for (std::size_t i = 0; num_batches == 0 || i < num_batches; ++i) {
    const Batch& b = next();
    if (b.labels.empty()) break;
    const Tensor<T>* in = &b.images;
    if (b.has_pixels()) {
      data::pixels_to_images(b, model.format(), pixel_images);
      in = &pixel_images;
    }
    const auto& logits = model.forward(*in, Mode::Infer);
    cifarnet::detail::check_logits(logits, b.labels.size());
    const std::size_t n = logits.shape()[0], k = logits.size() / n;
    loss_sum +=
        double(T(xent.loss(model.device(), n, k, logits.data(), b.labels.data(), nullptr))) * double(n);
    hits.resize(n);
    xent.in_top1(model.device(), n, k, logits.data(), b.labels.data(), hits.data());
    r.correct += std::size_t(std::count(hits.begin(), hits.end(), std::uint8_t(1)));
    r.total += n;
  }
  r.loss = r.total ? loss_sum / double(r.total) : 0.0;
  return r;
}

/// Evaluates the batches of `stream` until it ends (or `num_batches` of them).
template <class ModelT>
EvalResult evaluate(ModelT& model, data::BatchStream& stream, std::size_t num_batches = 0) {
  Batch b;
  return evaluate(
      model,
      [&]() -> const Batch& {
        if (!stream.next(b)) b.labels.clear();
        return b;
      },
      num_batches);
}

}  // namespace cifarnet::train
