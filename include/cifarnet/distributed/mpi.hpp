// cifarnet/distributed/mpi.hpp — a thin, exception-safe wrapper of MPI for
// data-parallel training (TF_SEMANTICS.md §8): collectives for the synchronous mode,
// point-to-point messages for parameter servers. Link cifarnet::mpi.
//
// Environment: MPI_Init_thread / MPI_Finalize (RAII; it finalizes only what it
// initialized). Communicator: a private duplicate of a communicator (default
// MPI_COMM_WORLD) with rank, size, sums, maxima and broadcasts. Invariants:
//  - every MPI failure becomes a DistributedError (errors return instead of
//    aborting: MPI_ERRORS_RETURN on the duplicate) naming the operation;
//  - every collective, send and receive is non-blocking underneath and
//    waited for with a deadline (timeout(), default 600 s): a rank that died or hangs makes
//    the others throw "... did not complete within N s" instead of waiting
//    forever. After such an error the communicator is unusable; a program
//    then calls Environment::abort_all() so mpirun ends every rank;
//  - collectives must be called by every rank in the same order with the
//    same counts (MPI's rule); counts above INT_MAX are split.
// This is the only place of the library that includes <mpi.h>.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // OpenMPI's deprecated C++ bindings: not used
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet::distributed {

namespace detail {
/// Throws DistributedError naming `what` when rc is not MPI_SUCCESS.
inline void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw DistributedError(std::string("MPI ") + what + " failed: " + std::string(text, std::size_t(len)));
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UNSIGNED_CHAR;
  if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::uint8_t> ||
                    std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t> ||
                    std::is_same_v<T, int>,
                "cifarnet: distributed collectives take float, double, uint8, int, int64 or uint64 elements");
  return MPI_DATATYPE_NULL;
}
}  // namespace detail

/// True when this process was started by an MPI launcher (mpirun, mpiexec,
/// srun): OpenMPI, MPICH/Hydra, PMIx and Slurm set these variables.
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}

/// MPI's lifetime. Construct it first in main (before any Communicator) and
/// let it go out of scope last; it finalizes MPI only if it initialized it.
class Environment {
 public:
  /// MPI_Init_thread with MPI_THREAD_FUNNELED (only the main thread calls
  /// MPI; OpenMP and pipeline threads never do).
  Environment(int* argc = nullptr, char*** argv = nullptr) {
    int inited = 0;
    detail::check(MPI_Initialized(&inited), "Initialized");
    if (inited) return;
    int provided = 0;
    detail::check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "Init_thread");
    owner_ = true;
    if (provided < MPI_THREAD_FUNNELED) {  // a single-threaded MPI: OpenMP threads beside it are unsafe
      MPI_Finalize();
      owner_ = false;
      throw DistributedError(
          "MPI_Init_thread: this MPI library provides thread level " + std::to_string(provided) +
          ", below MPI_THREAD_FUNNELED (" + std::to_string(MPI_THREAD_FUNNELED) +
          "), which cifarnet needs (OpenMP and pipeline threads run beside the thread that calls MPI)");
    }
    // Errors on the world communicator return codes (Communicator dups it).
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment() {
    if (!owner_) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }

  /// Ends every rank of the job (MPI_Abort): for a program's main after an
  /// error on one rank, so the others do not wait for it. Never returns.
  [[noreturn]] static void abort_all(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  bool owner_ = false;
};

/// A communicator for training: rank, size, and collectives with a deadline.
class Communicator {
 public:
  /// Duplicates `comm` (library traffic never mixes with the caller's).
  /// `timeout_seconds` bounds every collective (> 0).
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD, double timeout_seconds = 600) {
    set_timeout(timeout_seconds);
    detail::check(MPI_Comm_dup(comm, &comm_), "Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    detail::check(MPI_Comm_rank(comm_, &rank_), "Comm_rank");
    detail::check(MPI_Comm_size(comm_, &size_), "Comm_size");
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && comm_ != MPI_COMM_NULL && !broken_) MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Rank 0 is the chief: it logs, writes summaries and checkpoints.
  bool is_chief() const { return rank_ == 0; }
  MPI_Comm native() const { return comm_; }

  /// Seconds any collective may take before DistributedError.
  double timeout() const { return timeout_; }
  void set_timeout(double seconds) {
    if (!(seconds > 0) || !std::isfinite(seconds))
      throw ConfigError("distributed: the collective timeout must be a positive number of seconds, got " +
                        std::to_string(seconds));
    timeout_ = seconds;
  }

  /// In-place element-wise sum over all ranks.
  template <class T>
  void sum(T* data, std::size_t n, const char* what = "all-reduce (sum)") {
    allreduce(data, n, MPI_SUM, what);
  }
  /// In-place element-wise maximum over all ranks.
  template <class T>
  void max(T* data, std::size_t n, const char* what = "all-reduce (max)") {
    allreduce(data, n, MPI_MAX, what);
  }
  /// In-place element-wise minimum over all ranks.
  template <class T>
  void min(T* data, std::size_t n, const char* what = "all-reduce (min)") {
    allreduce(data, n, MPI_MIN, what);
  }

  /// Starts an in-place all-reduce (sum) of data[0, n) without waiting;
  /// wait_all() completes every started operation.
  template <class T>
  void start_sum(T* data, std::size_t n) {
    for (std::size_t off = 0; off < n; off += kMaxCount) {
      const int cnt = int(std::min<std::size_t>(kMaxCount, n - off));
      MPI_Request r;
      detail::check(MPI_Iallreduce(MPI_IN_PLACE, data + off, cnt, detail::mpi_type<T>(), MPI_SUM, comm_, &r),
                    "Iallreduce");
      pending_.push_back(r);
    }
  }
  /// Lets MPI advance the operations start_sum() began without waiting for
  /// them (MPI progresses non-blocking collectives inside its calls); returns
  /// whether all of them are complete. Throws on an MPI error.
  bool progress(const char* what = "all-reduce") {
    if (pending_.empty()) return true;
    int done = 0;
    const int rc = MPI_Testall(int(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      detail::check(rc, what);
    }
    if (done) pending_.clear();
    return done != 0;
  }
  /// Number of operations start_sum() began that wait_all() has not completed.
  std::size_t pending() const { return pending_.size(); }
  /// Waits for every operation start_sum() began, within the timeout.
  void wait_all(const char* what = "all-reduce") {
    if (pending_.empty()) return;
    wait(pending_.data(), int(pending_.size()), what);
    pending_.clear();
  }

  /// Broadcasts data[0, n) from `root` (in place on the others).
  template <class T>
  void broadcast(T* data, std::size_t n, int root = 0, const char* what = "broadcast") {
    std::vector<MPI_Request> reqs;
    for (std::size_t off = 0; off < n || (n == 0 && off == 0); off += kMaxCount) {
      const int cnt = int(std::min<std::size_t>(kMaxCount, n - off));
      MPI_Request r;
      detail::check(MPI_Ibcast(data + off, cnt, detail::mpi_type<T>(), root, comm_, &r), "Ibcast");
      reqs.push_back(r);
      if (n == 0) break;
    }
    wait(reqs.data(), int(reqs.size()), what);
  }
  /// Broadcasts a byte string of any length from `root` (resized on the others).
  void broadcast(std::vector<std::uint8_t>& bytes, int root = 0, const char* what = "broadcast") {
    std::uint64_t n = bytes.size();
    broadcast(&n, 1, root, what);
    bytes.resize(std::size_t(n));
    broadcast(bytes.data(), bytes.size(), root, what);
  }

  /// Waits until every rank got here (within the timeout).
  void barrier(const char* what = "barrier") {
    MPI_Request r;
    detail::check(MPI_Ibarrier(comm_, &r), "Ibarrier");
    wait(&r, 1, what);
  }

  // ---------------------------------------------------- point-to-point
  // The parameter servers' messages (distributed/parameter_server.hpp):
  // byte strings with a tag, sent and received with the same deadline as the
  // collectives.

  /// receive()'s wildcards.
  static constexpr int kAnySource = MPI_ANY_SOURCE;
  static constexpr int kAnyTag = MPI_ANY_TAG;

  /// Sends bytes [data, data + n) to rank `dest` with `tag` and waits, within
  /// the timeout, until the send buffer may be reused (for a large message:
  /// until `dest` receives it).
  void send(int dest, int tag, const void* data, std::size_t n, const char* what = "send") {
    MPI_Request r = start_send(dest, tag, data, n, what);
    complete(r, what);
  }

  /// Starts sending bytes [data, data + n) to `dest` with `tag` without
  /// waiting: the buffer must stay untouched until complete(request).
  MPI_Request start_send(int dest, int tag, const void* data, std::size_t n, const char* what = "send") {
    if (n > std::size_t(INT_MAX))
      throw DistributedError(std::string(what) + ": a message of " + std::to_string(n) +
                             " bytes is larger than MPI's int count allows");
    MPI_Request r;
    detail::check(MPI_Isend(data, int(n), MPI_BYTE, dest, tag, comm_, &r), "Isend");
    return r;
  }
  /// Waits, within the timeout, for a request start_send() returned (a null
  /// request returns at once).
  void complete(MPI_Request& r, const char* what = "send") {
    if (r != MPI_REQUEST_NULL) wait(&r, 1, what);
  }

  /// Where a received message came from.
  struct Received {
    int source = -1, tag = -1;
  };
  /// Waits for a message from `source` with `tag` (kAnySource / kAnyTag:
  /// any) and receives it into `out` (resized to its length). Throws
  /// DistributedError naming `what` and this rank when none arrives within
  /// `seconds` (<= 0: the timeout).
  Received receive(int source, int tag, std::vector<std::uint8_t>& out, const char* what = "receive",
                   double seconds = 0) {
    const double limit = seconds > 0 ? seconds : timeout_;
    MPI_Status st;
    poll([&](int& found) { return MPI_Iprobe(source, tag, comm_, &found, &st); }, what, limit, "arrive",
         "the sender");
    int count = 0;
    detail::check(MPI_Get_count(&st, MPI_BYTE, &count), "Get_count");
    out.resize(std::size_t(count));
    // Non-blocking too: a large message needs the sender's part of the
    // protocol, and a sender that stops mid-message must not hang us.
    MPI_Request r;
    detail::check(MPI_Irecv(out.data(), count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm_, &r), "Irecv");
    wait(&r, 1, what);
    return {st.MPI_SOURCE, st.MPI_TAG};
  }

 private:
  static constexpr std::size_t kMaxCount = std::size_t(1) << 30;

  template <class T>
  void allreduce(T* data, std::size_t n, MPI_Op op, const char* what) {
    std::vector<MPI_Request> reqs;
    for (std::size_t off = 0; off < n; off += kMaxCount) {
      const int cnt = int(std::min<std::size_t>(kMaxCount, n - off));
      MPI_Request r;
      detail::check(MPI_Iallreduce(MPI_IN_PLACE, data + off, cnt, detail::mpi_type<T>(), op, comm_, &r),
                    "Iallreduce");
      reqs.push_back(r);
    }
    if (!reqs.empty()) wait(reqs.data(), int(reqs.size()), what);
  }

  // Polls the requests (MPI progresses them inside MPI_Testall) until they
  // complete or the deadline passes.
  void wait(MPI_Request* reqs, int n, const char* what) {
    poll([&](int& done) { return MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE); }, what, timeout_,
         "complete", "another rank");
  }

  // Calls test(flag) (an MPI test call: returns its code, sets flag when
  // done) until the flag is set, backing off between calls; throws
  // DistributedError "<what> did not <verb> within N s on rank R of S: <who>
  // has probably died, ..." after `limit` seconds.
  template <class Test>
  void poll(Test&& test, const char* what, double limit, const char* verb, const char* who) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    for (;;) {
      int flag = 0;
      const int rc = test(flag);
      if (rc != MPI_SUCCESS) {
        broken_ = true;
        detail::check(rc, what);
      }
      if (flag) return;
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      if (s > limit) {
        broken_ = true;
        throw DistributedError(std::string(what) + " did not " + verb + " within " + seconds_text(limit) +
                               " s on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                               who +
                               " has probably died, hangs, or is far slower (the timeout is "
                               "Communicator::set_timeout)");
      }
      backoff(s);
    }
  }

  // Between polls: spin for the first 2 ms, then sleep 50 µs (a waiting rank
  // leaves the core to the others); after 100 ms of waiting, 1 ms (an idle
  // parameter server).
  static void backoff(double waited_seconds) {
    if (waited_seconds > 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else if (waited_seconds > 2e-3)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  static std::string seconds_text(double s) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", s);
    return secs;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_ = 600;
  bool broken_ = false;
  std::vector<MPI_Request> pending_;
};

}  // namespace cifarnet::distributed
