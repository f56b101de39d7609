// cifarnet/distributed/parameter_server.hpp — asynchronous training against
// parameter servers over MPI: the seed's default mode (without --sync), TF's
// between-graph replication with tf.train.replica_device_setter. Link
// cifarnet::mpi.
//
// Roles (PsRoles): ranks [0, num_ps) are parameter servers, the others
// workers; the first worker (rank num_ps) is the chief, which alone restores
// and writes checkpoints, logs and writes summaries.
//
// Placement (ShardMap): the variables — every parameter, trainable or BN
// moving statistic, in the model's registration order — are dealt to the
// servers round robin, as replica_device_setter's default strategy deals
// variable ops to the ps tasks in creation order. The global step is created
// first (the estimator creates it before the model), so it lives on server
// 0 and the model's variable i on server (i + 1) mod num_ps. An optimizer's
// slots (momentum accumulators) live with their variable.
//
// One worker step (TF's async semantics, ParameterServerClient with
// train::Trainer::set_remote_variables):
//   pull   every server sends its variables' current values; server 0 the
//          global step (the learning rate is the schedule at that step);
//   compute forward and backward on the worker's own batch, with the pulled
//          values; the regularizers (weight decay) on the pulled values;
//   push   each server gets its variables' gradients (and the change the
//          step made to its BN moving statistics, which it adds, as TF's
//          assign_sub on the ps) and applies them at once with its
//          optimizer — without waiting for the other workers. Server 0
//          counts the update in the global step and returns it.
// Between a worker's pull and its push, other workers' updates may land:
// the gradient is then computed on values that are `staleness` updates old
// (WorkerStats/ServeStats measure it). A server applies one push at a time
// (no interleaving within a variable, as TF's use_locking would give) and
// sends its replies without waiting for their delivery, so a stopped worker
// stalls only its own steps.
//
// Start: every rank builds the same model (checked: the ranks compare a
// fingerprint of the parameter layout); the chief restores its checkpoint
// (or keeps its initial values) and broadcasts its training state
// (broadcast_state_dict with root chief_rank()); each server takes its
// variables, its optimizer's slots and (server 0) the global step from it.
// Checkpoints: the chief's Trainer::state_dict() fetches every server's
// current values, BN statistics, slots and the global step
// (RemoteVariables::current_state), so a checkpoint is the whole job's.
// Stop: each worker stops when the global step reaches the trainer's
// max_steps (a worker that pulled just before may push one more update, so
// the step can end up to num_workers - 1 past it, as in TF), then calls
// finish(); a server returns from serve() when every worker has finished.
// Errors: every wait has the communicator's deadline; a malformed or
// unexpected message throws DistributedError naming both ranks. A program
// then ends the job with Environment::abort_all, so no rank waits forever.
// Threads: only the calling thread uses MPI (MPI_THREAD_FUNNELED).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/crc32c.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/distributed/mpi.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/io/safetensors.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/train/trainer.hpp"

namespace cifarnet::distributed {

/// Who does what in an asynchronous job.
class PsRoles {
 public:
  /// ConfigError unless 1 <= num_ps < ranks (at least one worker).
  PsRoles(int ranks, int rank, int num_ps) : ranks_(ranks), rank_(rank), num_ps_(num_ps) {
    if (num_ps < 1)
      throw ConfigError("--num-ps " + std::to_string(num_ps) +
                        ": asynchronous training needs at least one "
                        "parameter server");
    if (num_ps >= ranks)
      throw ConfigError("--num-ps " + std::to_string(num_ps) + " with mpirun -np " + std::to_string(ranks) +
                        " leaves no worker: the first --num-ps ranks are parameter servers, the others "
                        "workers, so -np must be at least --num-ps + 1");
    if (rank < 0 || rank >= ranks)
      throw ConfigError("PsRoles: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int num_ps() const { return num_ps_; }
  int num_workers() const { return ranks_ - num_ps_; }
  bool is_ps() const { return rank_ < num_ps_; }
  bool is_worker() const { return !is_ps(); }
  /// This rank's worker index (0 = the chief), -1 on a server.
  int worker_index() const { return is_ps() ? -1 : rank_ - num_ps_; }
  /// The chief: the first worker.
  int chief_rank() const { return num_ps_; }
  bool is_chief() const { return rank_ == num_ps_; }
  /// A rank's worker index, -1 for a server.
  int worker_of(int rank) const { return rank < num_ps_ ? -1 : rank - num_ps_; }

 private:
  int ranks_, rank_, num_ps_;
};

/// Which server holds each variable: the global step on server 0, the
/// model's variable i (registration order, trainable and state alike) on
/// server (i + 1) mod num_ps.
class ShardMap {
 public:
  template <class T>
  ShardMap(const Parameters<T>& params, int num_ps) : owner_(params.count()), ids_(std::size_t(num_ps)) {
    if (num_ps < 1) throw ConfigError("ShardMap: num_ps must be at least 1");
    elements_.assign(std::size_t(num_ps), 0);
    for (std::size_t id = 0; id < params.count(); ++id) {
      const int ps = int((id + 1) % std::size_t(num_ps));
      owner_[id] = ps;
      ids_[std::size_t(ps)].push_back(id);
      elements_[std::size_t(ps)] += params.info(id).size;
    }
  }
  int num_ps() const { return int(ids_.size()); }
  /// The server of variable `id`.
  int owner(std::size_t id) const { return owner_.at(id); }
  /// Server `ps`'s variables, in registration order.
  const std::vector<std::size_t>& ids(int ps) const { return ids_.at(std::size_t(ps)); }
  /// Their element count (the floats of a pull reply or a push).
  std::size_t elements(int ps) const { return elements_.at(std::size_t(ps)); }
  /// The server of the global step.
  static constexpr int global_step_owner() { return 0; }

 private:
  std::vector<int> owner_;
  std::vector<std::vector<std::size_t>> ids_;
  std::vector<std::size_t> elements_;
};

/// Staleness as a worker saw it: for each of its updates, how many other
/// workers' updates reached server 0 between its pull and its push.
struct WorkerStats {
  std::int64_t updates = 0;
  std::int64_t stale_updates = 0;  ///< updates computed on values some other update had changed
  std::int64_t max_staleness = 0;
  double staleness_sum = 0;
  double mean_staleness() const { return updates ? staleness_sum / double(updates) : 0.0; }
};

/// What a server did: pushes applied per worker, and the staleness of the
/// pushes as it saw them (updates applied to its variables between the
/// pushing worker's pull and its push).
struct ServeStats {
  std::int64_t pulls = 0, updates = 0, fetches = 0;
  std::vector<std::int64_t> updates_per_worker;
  std::int64_t max_staleness = 0;
  double staleness_sum = 0;
  std::int64_t global_step = 0;  ///< at the end (server 0; -1 elsewhere)
  double mean_staleness() const { return updates ? staleness_sum / double(updates) : 0.0; }
};

namespace detail {

enum PsTag : int {
  kPull = 7001,    // worker -> ps, empty
  kValues = 7002,  // ps -> worker: int64 global step (-1 off server 0), then the shard's values
  kPush = 7003,    // worker -> ps: double lr, then the shard's gradients and BN statistic changes
  kPushed = 7004,  // ps -> worker: int64 global step after the update (-1 off server 0)
  kFetch = 7005,   // chief -> ps, empty
  kState = 7006,   // ps -> chief: a safetensors StateDict (values, slots, global step)
  kDone = 7007,    // worker -> ps, empty
};

inline const char* tag_name(int tag) {
  switch (tag) {
    case kPull:
      return "pull";
    case kValues:
      return "values";
    case kPush:
      return "push";
    case kPushed:
      return "push acknowledgement";
    case kFetch:
      return "fetch";
    case kState:
      return "state";
    case kDone:
      return "done";
    default:
      return "unknown";
  }
}

/// A fingerprint of the parameter layout (names, shapes, kinds).
template <class T>
std::uint32_t layout_fingerprint(const Parameters<T>& params) {
  std::uint32_t crc = 0;
  for (const auto& p : params.infos()) {
    crc = crc32c_extend(crc, p.name.data(), p.name.size());
    const std::uint64_t words[2] = {std::uint64_t(p.size), std::uint64_t(p.trainable)};
    crc = crc32c_extend(crc, words, sizeof words);
    for (auto d : p.shape) {
      const std::uint64_t w = d;
      crc = crc32c_extend(crc, &w, sizeof w);
    }
  }
  return crc;
}

/// Collective: DistributedError on every rank unless all built the same model.
template <class T>
void check_same_layout(Communicator& comm, const Parameters<T>& params) {
  if (!params.allocated())
    throw ConfigError("parameter servers: the model's parameters are not allocated yet");
  double lo = double(layout_fingerprint(params)), hi = lo;
  comm.min(&lo, 1, "parameter layout check");
  comm.max(&hi, 1, "parameter layout check");
  if (lo != hi)
    throw DistributedError("rank " + std::to_string(comm.rank()) +
                           ": the ranks built different models (their parameter layouts differ); every "
                           "parameter server and worker must build the same model");
}

/// The header of a message, then the floats of the shard's variables.
template <class H>
void put_header(std::vector<std::uint8_t>& buf, H h, std::size_t floats) {
  buf.resize(sizeof(H) + floats * sizeof(float));
  std::memcpy(buf.data(), &h, sizeof(H));
}
template <class H>
H get_header(const std::vector<std::uint8_t>& buf) {
  H h;
  std::memcpy(&h, buf.data(), sizeof(H));
  return h;
}

/// DistributedError unless a message has exactly `expected` bytes.
inline void check_size(const std::vector<std::uint8_t>& buf, std::size_t expected, int tag, int from,
                       const std::string& at) {
  if (buf.size() != expected)
    throw DistributedError(at + ": the " + tag_name(tag) + " message from rank " + std::to_string(from) +
                           " has " + std::to_string(buf.size()) + " bytes, expected " +
                           std::to_string(expected) + " (do all ranks build the same model?)");
}

}  // namespace detail

/// A parameter server: holds the whole arena (the same model as the
/// workers) but owns only its shard, which it updates with its optimizer.
template <class T = float>
class ParameterServer {
  static_assert(std::is_same_v<T, float>, "cifarnet: parameter servers hold float variables");

 public:
  /// Collective (with every worker's ParameterServerClient): checks that all
  /// ranks built the same model.
  ParameterServer(Communicator& comm, Parameters<T>& params, const PsRoles& roles)
      : comm_(&comm), params_(&params), roles_(roles), shards_(params, roles.num_ps()) {
    if (!roles.is_ps())
      throw ConfigError("ParameterServer on rank " + std::to_string(roles.rank()) + ", a worker");
    if (comm.size() != roles.ranks() || comm.rank() != roles.rank())
      throw ConfigError("ParameterServer: the roles do not describe this communicator");
    detail::check_same_layout(comm, params);
    ps_ = roles.rank();
  }

  /// The trainable variables this server updates: the Selection its
  /// optimizer is built with; nullopt when its shard holds none.
  std::optional<optim::Selection> selection() const {
    std::vector<optim::Pattern> names;
    for (std::size_t id : shards_.ids(ps_))
      if (params_->info(id).trainable) names.push_back(optim::Pattern::exact(params_->info(id).name));
    if (names.empty()) return std::nullopt;
    return optim::Selection(std::move(names));
  }
  const ShardMap& shards() const { return shards_; }

  /// Serves the workers until every one has finished. `initial` is the
  /// chief's broadcast training state: this server takes its variables'
  /// values, `opt`'s slots and (server 0) the global step from it. `opt`
  /// (step(params, lr) and visit_state, built over selection()) applies each
  /// push; it may be null only when selection() is empty.
  template <class Opt>
  ServeStats serve(Opt* opt, const StateDict& initial) {
    if (!opt && selection())
      throw ConfigError("ParameterServer::serve: rank " + std::to_string(ps_) +
                        " holds trainable variables but was given no optimizer");
    io::LoadOptions whole_state;  // the chief's whole state: slots and global_step besides the variables
    whole_state.ignore_unexpected = true;
    io::load_parameters(*params_, initial, whole_state);
    if (opt) io::load_state(*opt, initial);
    const auto step = io::global_step(initial);
    if (!step)
      throw DataError("parameter server: the chief's state " + io::detail::source_of(initial) +
                      " has no 'global_step'");
    std::int64_t global_step = *step;
    const bool holds_step = ps_ == ShardMap::global_step_owner();

    const int workers = roles_.num_workers();
    ServeStats st;
    st.updates_per_worker.assign(std::size_t(workers), 0);
    std::vector<char> done(std::size_t(workers), 0);
    std::vector<std::int64_t> pulled_at(std::size_t(workers), 0);  // this server's update count at the pull
    int active = workers;
    // Replies go out without waiting (a stopped worker must not stall the
    // others), each from its worker's own buffer; a worker's next request
    // means it received the previous reply, so the buffer is free again.
    std::vector<std::vector<std::uint8_t>> outs(static_cast<std::size_t>(workers));
    std::vector<MPI_Request> sending(std::size_t(workers), MPI_REQUEST_NULL);
    std::vector<std::uint8_t> in;
    const auto& ids = shards_.ids(ps_);
    const std::size_t floats = shards_.elements(ps_);
    while (active > 0) {
      const auto m = comm_->receive(Communicator::kAnySource, Communicator::kAnyTag, in,
                                    "parameter server: the next message from a worker");
      const int w = roles_.worker_of(m.source);
      if (w < 0 || done[std::size_t(w)])
        throw DistributedError(who() + ": unexpected " + detail::tag_name(m.tag) + " message from rank " +
                               std::to_string(m.source) +
                               (w < 0 ? " (a parameter server)" : " (a worker that had finished)"));
      std::vector<std::uint8_t>& out = outs[std::size_t(w)];
      MPI_Request& pending = sending[std::size_t(w)];
      comm_->complete(pending, "parameter server: a reply");
      switch (m.tag) {
        case detail::kPull: {
          detail::check_size(in, 0, m.tag, m.source, who());
          detail::put_header<std::int64_t>(out, holds_step ? global_step : -1, floats);
          std::uint8_t* dst = out.data() + sizeof(std::int64_t);
          for (std::size_t id : ids) {
            const std::size_t bytes = params_->info(id).size * sizeof(T);
            std::memcpy(dst, params_->value(id), bytes);
            dst += bytes;
          }
          pending = comm_->start_send(m.source, detail::kValues, out.data(), out.size());
          pulled_at[std::size_t(w)] = st.updates;
          ++st.pulls;
          break;
        }
        case detail::kPush: {
          detail::check_size(in, sizeof(double) + floats * sizeof(float), m.tag, m.source, who());
          const double lr = detail::get_header<double>(in);
          const std::uint8_t* src = in.data() + sizeof(double);
          for (std::size_t id : ids) {
            const ParamInfo& p = params_->info(id);
            if (p.trainable) {
              std::memcpy(params_->grad(id), src, p.size * sizeof(T));
            } else {  // the step's change of a BN moving statistic: added (TF's assign_sub)
              delta_.resize(p.size);
              std::memcpy(delta_.data(), src, p.size * sizeof(T));
              T* v = params_->value(id);
              for (std::size_t i = 0; i < p.size; ++i) v[i] += delta_[i];
            }
            src += p.size * sizeof(T);
          }
          if (opt) opt->step(*params_, lr);
          const std::int64_t stale = st.updates - pulled_at[std::size_t(w)];
          st.staleness_sum += double(stale);
          st.max_staleness = std::max(st.max_staleness, stale);
          ++st.updates;
          ++st.updates_per_worker[std::size_t(w)];
          if (holds_step) ++global_step;
          detail::put_header<std::int64_t>(out, holds_step ? global_step : -1, 0);
          pending = comm_->start_send(m.source, detail::kPushed, out.data(), out.size());
          break;
        }
        case detail::kFetch: {
          detail::check_size(in, 0, m.tag, m.source, who());
          StateDict d;
          for (std::size_t id : ids)
            d.set(params_->info(id).name, TensorData::from<T>(params_->info(id).shape, params_->value(id)));
          if (opt) io::add_state(d, *opt);
          if (holds_step) io::set_global_step(d, global_step);
          out = io::serialize_safetensors(d);
          pending = comm_->start_send(m.source, detail::kState, out.data(), out.size());
          ++st.fetches;
          break;
        }
        case detail::kDone:
          detail::check_size(in, 0, m.tag, m.source, who());
          done[std::size_t(w)] = 1;
          --active;
          break;
        default:
          throw DistributedError(who() + ": message with unknown tag " + std::to_string(m.tag) +
                                 " from rank " + std::to_string(m.source));
      }
    }
    for (auto& r : sending) comm_->complete(r, "parameter server: a reply");
    st.global_step = holds_step ? global_step : -1;
    return st;
  }

 private:
  std::string who() const { return "parameter server rank " + std::to_string(ps_); }

  Communicator* comm_;
  Parameters<T>* params_;
  PsRoles roles_;
  ShardMap shards_;
  int ps_ = 0;
  std::vector<T> delta_;
};

/// A worker's side: the Trainer's RemoteVariables
/// (trainer.set_remote_variables(&client)).
template <class T = float>
class ParameterServerClient final : public train::RemoteVariables {
  static_assert(std::is_same_v<T, float>, "cifarnet: parameter servers hold float variables");

 public:
  /// Collective (with every server's ParameterServer): checks that all ranks
  /// built the same model.
  ParameterServerClient(Communicator& comm, Parameters<T>& params, const PsRoles& roles)
      : comm_(&comm), params_(&params), roles_(roles), shards_(params, roles.num_ps()) {
    if (!roles.is_worker())
      throw ConfigError("ParameterServerClient on rank " + std::to_string(roles.rank()) +
                        ", a parameter server");
    if (comm.size() != roles.ranks() || comm.rank() != roles.rank())
      throw ConfigError("ParameterServerClient: the roles do not describe this communicator");
    detail::check_same_layout(comm, params);
    pulled_state_.resize(std::size_t(params.state().size()));
  }

  /// The slots a checkpoint must get from the servers: those of `opt` (the
  /// worker's optimizer, the same kind as the servers'). current_state()
  /// then fails if a server did not send one of them.
  template <class Opt>
  void expect_slots(Opt& opt) {
    expected_slots_.clear();
    opt.visit_state([&](const std::string& name, auto*, const std::vector<std::size_t>&) {
      expected_slots_.push_back(name);
    });
  }

  std::int64_t pull() override {
    check_open("pull");
    for (int p = 0; p < roles_.num_ps(); ++p)
      comm_->send(p, detail::kPull, nullptr, 0, "worker: pull request");
    std::int64_t step = -1;
    for (int p = 0; p < roles_.num_ps(); ++p) {
      comm_->receive(p, detail::kValues, buf_, "worker: the values from a parameter server");
      detail::check_size(buf_, sizeof(std::int64_t) + shards_.elements(p) * sizeof(float), detail::kValues, p,
                         who());
      if (p == ShardMap::global_step_owner()) step = detail::get_header<std::int64_t>(buf_);
      const std::uint8_t* src = buf_.data() + sizeof(std::int64_t);
      for (std::size_t id : shards_.ids(p)) {
        const std::size_t bytes = params_->info(id).size * sizeof(T);
        std::memcpy(params_->value(id), src, bytes);
        src += bytes;
      }
    }
    if (params_->state().size() > 0)
      std::memcpy(pulled_state_.data(), params_->state().data(), pulled_state_.size() * sizeof(T));
    pulled_step_ = step;
    return step;
  }

  std::int64_t push(double lr) override {
    check_open("push");
    for (int p = 0; p < roles_.num_ps(); ++p) {
      detail::put_header<double>(buf_, lr, shards_.elements(p));
      std::uint8_t* dst = buf_.data() + sizeof(double);
      for (std::size_t id : shards_.ids(p)) {
        const ParamInfo& info = params_->info(id);
        const std::size_t bytes = info.size * sizeof(T);
        if (info.trainable) {
          std::memcpy(dst, params_->grad(id), bytes);
        } else {  // what this step's forward did to the pulled BN statistic
          const T* now = params_->value(id);
          const T* was = pulled_state_.data() + info.offset;
          delta_.resize(info.size);
          for (std::size_t i = 0; i < info.size; ++i) delta_[i] = now[i] - was[i];
          std::memcpy(dst, delta_.data(), bytes);
        }
        dst += bytes;
      }
      comm_->send(p, detail::kPush, buf_.data(), buf_.size(), "worker: push");
    }
    std::int64_t step = -1;
    for (int p = 0; p < roles_.num_ps(); ++p) {
      comm_->receive(p, detail::kPushed, buf_, "worker: a parameter server's push acknowledgement");
      detail::check_size(buf_, sizeof(std::int64_t), detail::kPushed, p, who());
      if (p == ShardMap::global_step_owner()) step = detail::get_header<std::int64_t>(buf_);
    }
    const std::int64_t stale = std::max<std::int64_t>(0, step - pulled_step_ - 1);
    ++stats_.updates;
    if (stale > 0) ++stats_.stale_updates;
    stats_.max_staleness = std::max(stats_.max_staleness, stale);
    stats_.staleness_sum += double(stale);
    return step;
  }

  void current_state(StateDict& d) override {
    check_open("fetch the state");
    for (int p = 0; p < roles_.num_ps(); ++p)
      comm_->send(p, detail::kFetch, nullptr, 0, "worker: fetch request");
    std::size_t params_seen = 0;
    std::vector<std::string> slots_seen;
    for (int p = 0; p < roles_.num_ps(); ++p) {
      comm_->receive(p, detail::kState, buf_, "worker: the state of a parameter server");
      const StateDict part = io::parse_safetensors(buf_.data(), buf_.size(),
                                                   "the state of parameter server rank " + std::to_string(p));
      for (const auto& [name, t] : part.tensors()) {
        const TensorData* mine = d.find(name);
        if (!mine || mine->shape != t.shape || mine->dtype != t.dtype)
          throw DistributedError(
              who() + ": tensor '" + name + "' from parameter server rank " + std::to_string(p) +
              (mine ? " does not match the local one's shape or dtype" : " is not in the local state") +
              " (the servers' optimizer must be the workers' kind)");
        if (params_->find(name))
          ++params_seen;
        else
          slots_seen.push_back(name);
        d.set(name, t);
      }
      if (p == ShardMap::global_step_owner()) {
        const auto step = io::global_step(part);
        if (!step) throw DistributedError(who() + ": parameter server rank 0 sent no global step");
        io::set_global_step(d, *step);
      }
    }
    if (params_seen != params_->count())
      throw DistributedError(who() + ": the parameter servers sent " + std::to_string(params_seen) +
                             " of the model's " + std::to_string(params_->count()) + " variables");
    for (const auto& s : expected_slots_)
      if (std::find(slots_seen.begin(), slots_seen.end(), s) == slots_seen.end())
        throw DistributedError(who() + ": no parameter server sent the slot '" + s +
                               "' (the servers' optimizer must be the workers' kind)");
    io::LoadOptions o;
    o.strict = true;
    o.ignore_unexpected = true;           // the servers' slots and global step are in `d` too
    io::load_parameters(*params_, d, o);  // the local model now holds what the checkpoint holds
  }

  /// Tells every server this worker is done (once); a server returns from
  /// serve() when every worker has. No pull or push may follow.
  void finish() {
    if (finished_) return;
    for (int p = 0; p < roles_.num_ps(); ++p) comm_->send(p, detail::kDone, nullptr, 0, "worker: done");
    finished_ = true;
  }
  bool finished() const { return finished_; }

  const WorkerStats& stats() const { return stats_; }
  const ShardMap& shards() const { return shards_; }
  const PsRoles& roles() const { return roles_; }

 private:
  std::string who() const { return "worker rank " + std::to_string(comm_->rank()); }
  void check_open(const char* what) const {
    if (finished_)
      throw ConfigError("ParameterServerClient: " + std::string(what) + " after finish() on rank " +
                        std::to_string(comm_->rank()));
  }

  Communicator* comm_;
  Parameters<T>* params_;
  PsRoles roles_;
  ShardMap shards_;
  std::vector<T> pulled_state_, delta_;
  std::vector<std::uint8_t> buf_;
  std::vector<std::string> expected_slots_;
  std::int64_t pulled_step_ = 0;
  WorkerStats stats_;
  bool finished_ = false;
};

}  // namespace cifarnet::distributed
