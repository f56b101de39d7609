// cifarnet/backend/cuda/host_config.hpp — the CUDA backend's pure host
// logic, kept apart from every CUDA call so the CPU tests run it on machines
// without a GPU (tests/backend/test_cuda_host.cpp):
//
//  - the environment: CIFARNET_CUDA_DEVICE and CIFARNET_CUDA_WORKSPACE_MB
//    parsed strictly (a value that is not a number is a ConfigError naming
//    the variable, never a silent 0);
//  - which GPU a process takes: CIFARNET_CUDA_DEVICE when the user set it,
//    else the MPI/Slurm local rank modulo the GPUs present (one GPU per
//    process of a node, without setenv), else GPU 0;
//  - the convolution options (TF32 opt-in, deterministic algorithms) and the
//    choice of one algorithm from cuDNN's measured list under them;
//  - a process-wide cache of those choices, keyed by device, geometry,
//    options and workspace limit (each geometry is measured once);
//  - a scoped guard that sets a current device and restores the caller's,
//    written over two functions so a CPU test can drive it;
//  - the PCIe traffic counters (bytes and copies host->device and
//    device->host per Device) and Staging, the per-op mapping of pointers
//    to device memory, written over a copy API (the CUDA runtime in the
//    backend, a counting stand-in in tests/backend/test_cuda_host.cpp);
//  - the lazily synchronised host mirror of a device buffer (the parameter
//    arena, optimizer slots): its state machine over the same copy API;
//  - the read-back area where a step's host values wait for one copy, and
//    the pinned input ring (copy stream, events) over the same kind of API;
//  - the block cache of a GPU's tensor memory: freed blocks reused once
//    events say the GPU is past their last use, over an allocation and
//    event API;
//  - the cache of a cuDNN plan's last variant pack (its tensors' addresses);
//  - the launch queue of a stream: work queued with a signature of its
//    arguments, run at the next host wait as one CUDA graph when the same
//    signature ran before (BasicLaunchQueue, over a capture/launch API).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/pending.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::backend::cuda {

// ------------------------------------------------------------- environment

/// `value` of environment variable `var` as an integer in [lo, hi]: decimal
/// digits only (leading/trailing blanks allowed); anything else is a
/// ConfigError naming the variable and the value.
inline long long parse_env_integer(const char* var, const char* value, long long lo, long long hi) {
  const std::string s = value ? value : "";
  std::size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  const std::string t = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  bool digits = !t.empty();
  for (char c : t) digits = digits && c >= '0' && c <= '9';
  errno = 0;
  const long long v = digits ? std::strtoll(t.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || v < lo || v > hi)
    throw ConfigError(detail::concat(var, "=\"", s, "\": expected a whole number in [", lo, ", ", hi, "]"));
  return v;
}

/// Default largest cuDNN workspace of one algorithm.
inline constexpr std::size_t kDefaultWorkspaceBytes = std::size_t(512) << 20;

/// The workspace limit in bytes: CIFARNET_CUDA_WORKSPACE_MB's value (MiB) when
/// set (`value` not null), else 512 MiB.
inline std::size_t workspace_limit_bytes(const char* value) {
  if (!value) return kDefaultWorkspaceBytes;
  return std::size_t(parse_env_integer("CIFARNET_CUDA_WORKSPACE_MB", value, 0, 1LL << 30)) << 20;
}

/// The environment variables MPI launchers and Slurm set to a process's rank
/// on its node, in the order they are read.
inline const std::vector<const char*>& local_rank_variables() {
  static const std::vector<const char*> v = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                             "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
  return v;
}

/// Which GPU a process uses, and why (for logs).
struct DeviceChoice {
  int ordinal = 0;
  std::string reason;
};

/// The device of a process with `device_count` GPUs: CIFARNET_CUDA_DEVICE
/// when set (the user's choice wins; its range is checked when the device
/// is opened), else the first local-rank variable set, modulo the GPU count
/// (so the processes of a node spread over its GPUs), else 0. `env` reads a
/// variable (std::getenv, or a table in tests).
template <class Env>
DeviceChoice choose_device(int device_count, Env&& env) {
  if (const char* s = env("CIFARNET_CUDA_DEVICE"))
    return {int(parse_env_integer("CIFARNET_CUDA_DEVICE", s, 0, INT_MAX)), "CIFARNET_CUDA_DEVICE"};
  for (const char* var : local_rank_variables()) {
    if (const char* s = env(var)) {
      const long long rank = parse_env_integer(var, s, 0, INT_MAX);
      const int ordinal = device_count > 0 ? int(rank % device_count) : 0;
      return {ordinal, detail::concat("local rank ", rank, " (", var, ") of ", device_count, " GPU(s)")};
    }
  }
  return {0, "default"};
}

/// choose_device over the process's environment.
inline DeviceChoice choose_device(int device_count) {
  return choose_device(device_count, [](const char* v) -> const char* { return std::getenv(v); });
}

// ------------------------------------------------------- convolution math

/// How the CUDA backend may compute convolutions. Defaults: full fp32 math
/// (results agree with the CPU backends within fp32 rounding) and the
/// fastest algorithm even when it is not bit-reproducible.
struct ConvOptions {
  /// Let cuDNN use TF32 tensor cores on fp32 data (faster on Ampere and
  /// newer; about 1e-3 relative error instead of 1e-6).
  bool allow_tf32 = false;
  /// Only algorithms whose results are the same bits run after run.
  bool deterministic = false;
  /// Let cuDNN pick FFT and Winograd algorithms. Their transforms add
  /// rounding of their own (cuDNN documents them as less precise); off by
  /// default, as the CPU backend's Auto policy never trains with Winograd.
  bool allow_transforms = false;

  auto key() const { return std::make_tuple(allow_tf32, deterministic, allow_transforms); }
  bool operator==(const ConvOptions& o) const { return key() == o.key(); }
};

/// One engine configuration as the measurement ranks them (fastest first):
/// cuDNN's numerical and behaviour notes as flags.
struct AlgoCandidate {
  int algo = 0;                ///< index into the measured list
  bool ok = false;             ///< its plan was built and ran
  std::size_t memory = 0;      ///< workspace bytes it needs
  bool deterministic = false;  ///< no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool tensor_op = false;      ///< tensor-core (TF32) math on float data
  bool transform = false;      ///< an FFT or Winograd engine (see ConvOptions)
};

/// Whether a candidate may be chosen under `opts`, its workspace aside.
inline bool allowed(const AlgoCandidate& c, const ConvOptions& opts) {
  if (c.tensor_op && !opts.allow_tf32) return false;
  if (c.transform && !opts.allow_transforms) return false;
  if (opts.deterministic && !c.deterministic) return false;
  return true;
}

/// Index in `ranked` of the first (fastest) candidate that ran, fits `limit`
/// and obeys `opts`; -1 when none does.
inline int select_algorithm(const std::vector<AlgoCandidate>& ranked, std::size_t limit,
                            const ConvOptions& opts) {
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const AlgoCandidate& c = ranked[i];
    if (!c.ok || c.memory > limit || !allowed(c, opts)) continue;
    return int(i);
  }
  return -1;
}

/// ConvOptions from the environment: CIFARNET_CUDA_TF32=1 allows TF32,
/// CIFARNET_CUDA_DETERMINISTIC=1 asks for deterministic algorithms (0 or
/// unset: not; anything else is a ConfigError naming the variable).
template <class Env>
ConvOptions conv_options_from_env(Env&& env) {
  ConvOptions o;
  if (const char* s = env("CIFARNET_CUDA_TF32"))
    o.allow_tf32 = parse_env_integer("CIFARNET_CUDA_TF32", s, 0, 1);
  if (const char* s = env("CIFARNET_CUDA_DETERMINISTIC"))
    o.deterministic = parse_env_integer("CIFARNET_CUDA_DETERMINISTIC", s, 0, 1);
  return o;
}
inline ConvOptions conv_options_from_env() {
  return conv_options_from_env([](const char* v) -> const char* { return std::getenv(v); });
}

/// Whether a Device queues its stream work and replays repeated segments as
/// CUDA graphs (BasicLaunchQueue): CIFARNET_CUDA_GRAPHS=1; 0 or unset: not
/// (the default until the graphs have run on a GPU); anything else is a
/// ConfigError naming the variable.
template <class Env>
bool graphs_from_env(Env&& env) {
  const char* s = env("CIFARNET_CUDA_GRAPHS");
  return s && parse_env_integer("CIFARNET_CUDA_GRAPHS", s, 0, 1) == 1;
}
inline bool graphs_from_env() {
  return graphs_from_env([](const char* v) -> const char* { return std::getenv(v); });
}

/// One pass's chosen cuDNN engine: its global index and knob settings (the
/// graph API rebuilds an execution plan from them).
struct EngineChoice {
  std::int64_t engine = -1;
  std::vector<std::pair<int, std::int64_t>> knobs;  ///< (cudnnBackendKnobType_t, value)
  bool operator==(const EngineChoice& o) const { return engine == o.engine && knobs == o.knobs; }
  bool operator!=(const EngineChoice& o) const { return !(*this == o); }
};

/// The engines chosen for one convolution geometry.
struct ConvAlgorithms {
  EngineChoice fwd, bwd_data, bwd_filter;
};

/// What a cached choice depends on.
struct ConvAlgoKey {
  int device = 0;
  ConvGeom geom;
  ConvOptions opts;
  std::size_t workspace_limit = 0;

  auto key() const { return std::make_tuple(device, geom.key(), opts.key(), workspace_limit); }
  bool operator<(const ConvAlgoKey& o) const { return key() < o.key(); }
};

/// Process-wide cache of convolution algorithm choices: measure() runs once
/// per key, whatever the number of layers or op objects with that geometry.
/// Thread-safe (towers build their plans from threads of their own).
class ConvAlgoCache {
 public:
  static ConvAlgoCache& instance() {
    static ConvAlgoCache c;
    return c;
  }
  /// The cached choice for `k`, or measure()'s result, stored.
  template <class Measure>
  ConvAlgorithms get(const ConvAlgoKey& k, Measure&& measure) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = map_.find(k);
      if (it != map_.end()) return it->second;
    }
    // Measured outside the lock: a measurement takes milliseconds, and two
    // threads measuring one key store equal-quality choices.
    ConvAlgorithms a = measure();
    std::lock_guard<std::mutex> lock(mu_);
    ++measured_;
    return map_.emplace(k, a).first->second;
  }
  /// How many measurements ran (tests).
  std::size_t measured() const {
    std::lock_guard<std::mutex> lock(mu_);
    return measured_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    measured_ = 0;
  }

 private:
  mutable std::mutex mu_;
  std::map<ConvAlgoKey, ConvAlgorithms> map_;
  std::size_t measured_ = 0;
};

// ------------------------------------------------------------ device guard

/// Makes device `ordinal` current for a scope and restores the caller's
/// current device when the scope ends (also on an exception). `Get(int*)`
/// and `Set(int)` return 0 on success (cudaGetDevice / cudaSetDevice in the
/// backend; counters in tests). Setting skips the call when the device is
/// already current. A failure to switch throws BackendError; a failure to
/// switch back is ignored (a destructor does not throw).
template <class Api>
class BasicDeviceGuard {
 public:
  explicit BasicDeviceGuard(int ordinal) {
    if (Api::get(&previous_) != 0)
      throw BackendError(detail::concat("CUDA: cannot read the current device (for device ", ordinal, ")"));
    if (previous_ != ordinal) {
      if (Api::set(ordinal) != 0)
        throw BackendError(detail::concat("CUDA: cannot make device ", ordinal, " current"));
      restore_ = true;
    }
  }
  BasicDeviceGuard(const BasicDeviceGuard&) = delete;
  BasicDeviceGuard& operator=(const BasicDeviceGuard&) = delete;
  ~BasicDeviceGuard() {
    if (restore_) (void)Api::set(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// ------------------------------------------------------ PCIe traffic

/// Which way a copy crosses PCIe.
enum class CopyDirection { HostToDevice, DeviceToHost };

/// Bytes and copy calls a Device issued in each direction.
struct TransferCounts {
  std::uint64_t h2d_bytes = 0, d2h_bytes = 0;    ///< host->device, device->host
  std::uint64_t h2d_copies = 0, d2h_copies = 0;  ///< calls (cudaMemcpyAsync)
  std::uint64_t bytes() const { return h2d_bytes + d2h_bytes; }
  std::uint64_t copies() const { return h2d_copies + d2h_copies; }
  bool operator==(const TransferCounts& o) const {
    return h2d_bytes == o.h2d_bytes && d2h_bytes == o.d2h_bytes && h2d_copies == o.h2d_copies &&
           d2h_copies == o.d2h_copies;
  }
  bool operator!=(const TransferCounts& o) const { return !(*this == o); }
};

/// The PCIe traffic of one Device: every host<->device copy the backend
/// issues for it (Staging, to_host, the optimizers' slots, the arena mirror,
/// input batches, labels and losses) is added here before it is enqueued.
/// Relaxed atomics: a logging thread may read while the device's thread
/// copies.
class TransferCounter {
 public:
  void add(CopyDirection d, std::size_t bytes) noexcept {
    if (d == CopyDirection::HostToDevice) {
      h2d_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      h2d_copies_.fetch_add(1, std::memory_order_relaxed);
    } else {
      d2h_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      d2h_copies_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  /// The counts since construction or the last reset().
  TransferCounts read() const noexcept {
    TransferCounts c;
    c.h2d_bytes = h2d_bytes_.load(std::memory_order_relaxed);
    c.d2h_bytes = d2h_bytes_.load(std::memory_order_relaxed);
    c.h2d_copies = h2d_copies_.load(std::memory_order_relaxed);
    c.d2h_copies = d2h_copies_.load(std::memory_order_relaxed);
    return c;
  }
  /// Zeroes the counters and returns what they held.
  TransferCounts reset() noexcept {
    TransferCounts c;
    c.h2d_bytes = h2d_bytes_.exchange(0, std::memory_order_relaxed);
    c.d2h_bytes = d2h_bytes_.exchange(0, std::memory_order_relaxed);
    c.h2d_copies = h2d_copies_.exchange(0, std::memory_order_relaxed);
    c.d2h_copies = d2h_copies_.exchange(0, std::memory_order_relaxed);
    return c;
  }

 private:
  std::atomic<std::uint64_t> h2d_bytes_{0}, d2h_bytes_{0}, h2d_copies_{0}, d2h_copies_{0};
};

/// The one way the backend copies across PCIe: counts the copy in
/// dev.transfers(), then enqueues it on dev's stream with Api::copy (which
/// throws BackendError naming `what` on failure). `Api` is the CUDA runtime
/// (RuntimeCopyApi, backend/cuda/common.hpp) or a stand-in in tests; `D` a
/// Device<Cuda> or a stand-in with transfers().
template <class Api, class D>
void counted_copy(D& dev, void* dst, const void* src, std::size_t bytes, CopyDirection dir,
                  const char* what) {
  if (bytes == 0) return;
  dev.transfers().add(dir, bytes);
  Api::copy(dev, dst, src, bytes, dir, what);
}

// ---------------------------------------------------------------- staging

/// Maps the pointers of one op call to device pointers. A pointer the copy
/// API knows as device memory passes through (no copy); any other (a host
/// tensor) is staged: inputs are copied to a device buffer of dev before the
/// op runs, outputs are poisoned (every byte 0xFF, a NaN) and copied back by
/// finish(), which also waits for the stream. The same host pointer passed
/// twice in one call (in-place ReLU) maps to one device buffer. So models
/// whose tensors live on the device pay no copies, and host tensors still
/// work. One BasicStaging per op call: construct (it makes dev's GPU current
/// until it ends), map every pointer, enqueue the work, finish().
///
/// A host pointer inside one of dev's mirrored ranges (BasicMirrorSet: the
/// parameter arena of a device-resident model) maps to its device copy, with
/// no copy unless the host wrote that range since the device last read it.
///
/// Api: `Guard` (constructed from an ordinal), `is_device(const void*)`,
/// `copy(dev, dst, src, bytes, dir, what)`, `poison(dev, p, bytes)`. D:
/// `ordinal()`, `buffer(slot, n)` (device floats), `sync()`, `transfers()`,
/// `mirrors()` (a BasicMirrorSet<Api, D>), and `D::kStagingBase`.
template <class Api, class D>
class BasicStaging {
 public:
  explicit BasicStaging(D& dev) : guard_(dev.ordinal()), dev_(dev) {}
  BasicStaging(const BasicStaging&) = delete;
  BasicStaging& operator=(const BasicStaging&) = delete;

  /// A device pointer holding the `n` floats at `p` (read by the op).
  const float* in(const float* p, std::size_t n) { return map(const_cast<float*>(p), n, true, false); }
  /// A device pointer for the `n` floats the op writes to `p`.
  float* out(float* p, std::size_t n) { return map(p, n, false, true); }
  /// Read and written (an accumulator, or an in-place output).
  float* inout(float* p, std::size_t n) { return map(p, n, true, true); }
  /// How many host buffers this call staged (tests; 0 on a device-resident path).
  std::size_t staged() const { return count_; }

  /// Copies every staged output back to the host and, when there was one,
  /// waits for the stream (the host reads it next). An op whose outputs are
  /// all device memory returns without waiting: the ops queued on one
  /// stream run in order, and the host waits only where a value reaches it.
  void finish() {
    bool wrote = false;
    for (std::size_t i = 0; i < count_; ++i) {
      const Entry& e = entries_[i];
      if (e.write_back) {
        counted_copy<Api>(dev_, e.host, e.dev, e.n * sizeof(float), CopyDirection::DeviceToHost,
                          "copy of an op's output to the host");
        wrote = true;
      }
    }
    if (wrote) dev_.sync();
  }

 private:
  struct Entry {
    float* host;
    float* dev;
    std::size_t n;
    bool write_back;
    bool uploaded;
  };
  float* map(float* p, std::size_t n, bool read, bool write) {
    if (!p || n == 0) return p;
    if (float* d = dev_.mirrors().map(p, n, read, write)) return d;  // a device-resident arena
    if (Api::is_device(p)) return p;
    for (std::size_t i = 0; i < count_; ++i) {
      Entry& e = entries_[i];
      if (e.host == p) {  // the same host buffer twice in one call (in place)
        if (e.n < n) throw ConfigError("CUDA backend: one host buffer staged with two different sizes");
        if (read && !e.uploaded) upload(e);
        e.write_back = e.write_back || write;
        return e.dev;
      }
    }
    if (count_ == kMaxEntries) throw ConfigError("CUDA backend: an op staged more than 12 buffers");
    Entry e{p, dev_.buffer(D::kStagingBase + count_, n), n, write, false};
    if (read)
      upload(e);
    else  // poisoned: what the op does not write comes back as NaN
      Api::poison(dev_, e.dev, e.n * sizeof(float));
    entries_[count_++] = e;
    return e.dev;
  }
  void upload(Entry& e) {
    counted_copy<Api>(dev_, e.dev, e.host, e.n * sizeof(float), CopyDirection::HostToDevice,
                      "copy of an op's input to the device");
    e.uploaded = true;
  }
  typename Api::Guard guard_;
  D& dev_;
  // A fixed array: staging allocates nothing on the host in the step loop.
  static constexpr std::size_t kMaxEntries = 12;
  Entry entries_[kMaxEntries]{};
  std::size_t count_ = 0;
};

// ------------------------------------------------------------ host mirror

/// Which copy of a mirrored buffer is current.
enum class MirrorState {
  Clean,        ///< host and device hold the same values
  HostDirty,    ///< the host was written since the last upload: upload before the device reads
  DeviceDirty,  ///< the device was written since the last download: download before the host reads
};

inline const char* to_string(MirrorState s) {
  switch (s) {
    case MirrorState::Clean:
      return "clean";
    case MirrorState::HostDirty:
      return "host-dirty";
    case MirrorState::DeviceDirty:
      return "device-dirty";
  }
  return "?";
}

/// A device buffer of `n` floats with a host mirror synchronised lazily (the
/// dlib scheme): the device copy is the one the step computes on; the host
/// copy is read only when something on the host asks (checkpoints, summaries,
/// state_dict) and uploaded only after a host write. Each access says what it
/// does, and copies only when the other side is newer:
///
///   host_read()    DeviceDirty -> download, Clean      (else no copy)
///   host_write()   as host_read, then HostDirty
///   device_read()  HostDirty -> upload, Clean          (else no copy)
///   device_write() as device_read, then DeviceDirty
///
/// So a training loop that only steps on the device copies nothing, a
/// checkpoint every k steps downloads once per checkpoint, and a restore
/// (a host write) uploads once, before the next step. Non-owning: the two
/// buffers belong to the caller (DeviceBuffer and host memory in the
/// backend, vectors in tests). Copies go through counted_copy<Api> (so
/// dev.transfers() sees them); a download waits for dev's stream before the
/// host reads, and a host write waits for an upload still in flight.
template <class Api, class D>
class BasicMirror {
 public:
  BasicMirror() = default;
  /// `initial`: HostDirty when the values were made on the host (parameter
  /// initialisation), Clean when both copies already agree (both zeroed).
  BasicMirror(D& dev, float* device, float* host, std::size_t n, MirrorState initial)
      : dev_(&dev), device_(device), host_(host), n_(n), state_(initial) {}

  MirrorState state() const { return state_; }
  std::size_t size() const { return n_; }

  /// The host copy, current, for reading.
  const float* host_read() {
    if (state_ == MirrorState::DeviceDirty) {
      const typename Api::Guard guard(dev_->ordinal());  // callable from any thread's current device
      counted_copy<Api>(*dev_, host_, device_, n_ * sizeof(float), CopyDirection::DeviceToHost,
                        "download of a mirrored buffer to the host");
      dev_->sync();
      state_ = MirrorState::Clean;
      upload_in_flight_ = false;
    }
    return host_;
  }
  /// The host copy, current, which the caller may write (the device copy is
  /// refreshed from it before the device next reads).
  float* host_write() {
    host_read();
    if (upload_in_flight_) {  // the upload may still read the host copy
      const typename Api::Guard guard(dev_->ordinal());
      dev_->sync();
      upload_in_flight_ = false;
    }
    state_ = MirrorState::HostDirty;
    return host_;
  }
  /// The device copy, current, for a kernel that reads it.
  const float* device_read() { return sync_to_device(); }
  /// The device copy, current, for a kernel that writes it (the host copy is
  /// refreshed from it before the host next reads).
  float* device_write() {
    float* d = sync_to_device();
    state_ = MirrorState::DeviceDirty;
    return d;
  }

 private:
  float* sync_to_device() {
    if (state_ == MirrorState::HostDirty) {
      const typename Api::Guard guard(dev_->ordinal());
      counted_copy<Api>(*dev_, device_, host_, n_ * sizeof(float), CopyDirection::HostToDevice,
                        "upload of a mirrored buffer to the device");
      state_ = MirrorState::Clean;
      upload_in_flight_ = true;
    }
    return device_;
  }

  D* dev_ = nullptr;
  float* device_ = nullptr;
  float* host_ = nullptr;
  std::size_t n_ = 0;
  MirrorState state_ = MirrorState::Clean;
  bool upload_in_flight_ = false;
};

/// The mirrored host ranges of one device (a model's parameter arena:
/// values, gradients, state), each with its device copy and its BasicMirror.
/// Staging asks map() first: a host pointer inside a mirrored range resolves
/// to its device copy with no copy per op (the mirror's state machine copies
/// only when the host wrote it since), so ops on the arena pay nothing in
/// steady state. Non-owning: the owner keeps the host and device buffers
/// alive until clear().
template <class Api, class D>
class BasicMirrorSet {
 public:
  /// Mirrors [host, host + n) by [device, device + n), in state `initial`.
  void add(D& dev, float* host, float* device, std::size_t n, MirrorState initial) {
    if (!host || !device || n == 0) return;
    for (const Entry& e : entries_)
      if (host < e.host + e.n && e.host < host + n)
        throw ConfigError("CUDA backend: two mirrored host ranges overlap");
    entries_.push_back({host, device, n, BasicMirror<Api, D>(dev, device, host, n, initial)});
  }
  void clear() { entries_.clear(); }
  /// Forgets the range that starts at `host`, its host copy made current
  /// first (false: no such range).
  bool remove(const float* host) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->host == host) {
        it->mirror.host_read();
        entries_.erase(it);
        return true;
      }
    return false;
  }
  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }

  /// The device address of host range [p, p + n) when it lies in a mirrored
  /// range, current for an op that reads (`read`) and/or writes (`write`) it
  /// (a write marks the range device-dirty); null when p is in no mirrored
  /// range. A range that runs past the end of its mirror is a ConfigError.
  float* map(const float* p, std::size_t n, bool read, bool write) {
    Entry* e = find(p);
    if (!e) return nullptr;
    const std::size_t off = std::size_t(p - e->host);
    if (off + n > e->n)
      throw ConfigError(cifarnet::detail::concat("CUDA backend: ", n, " floats at offset ", off,
                                                 " run past the end of a mirrored buffer of ", e->n));
    float* d = write ? e->mirror.device_write() : const_cast<float*>(e->mirror.device_read());
    (void)read;  // reading or writing, the device copy is brought current first
    return d + off;
  }
  /// The mirror holding host pointer p, or null.
  BasicMirror<Api, D>* mirror_of(const float* p) {
    Entry* e = find(p);
    return e ? &e->mirror : nullptr;
  }
  /// Every host copy current for reading (downloads the device-dirty ones).
  void host_read_all() {
    for (Entry& e : entries_) e.mirror.host_read();
  }
  /// Every host copy current, and to be uploaded before the device next
  /// reads it (the caller writes the host copies).
  void host_write_all() {
    for (Entry& e : entries_) e.mirror.host_write();
  }

 private:
  struct Entry {
    float* host;
    float* device;
    std::size_t n;
    BasicMirror<Api, D> mirror;
  };
  Entry* find(const float* p) {
    for (Entry& e : entries_)
      if (p >= e.host && p < e.host + e.n) return &e;
    return nullptr;
  }
  std::vector<Entry> entries_;
};

// ------------------------------------------------------------- read-back

/// A device's ReadbackArea (core/pending.hpp): device room that ops reserve
/// for the values they compute for the host, and two host buffers (pinned
/// memory in the backend) the batches are fetched into, alternately. Per
/// training step the loss, the weight decay's term and the gradients'
/// finiteness wait here, and the first read brings all of them in one copy
/// with one wait (docs/SCALING.md, "PCIe traffic per step").
///
/// reserve(bytes) hands out 8-byte aligned room in the open batch; a
/// reservation that does not fit fetches the open batch first (its Pendings
/// stay readable: they are the last fetched batch) and grows the room when
/// a single reservation needs more. fetched(g) copies the open batch g (the
/// bytes reserved, counted in dev.transfers()), waits for dev's stream,
/// and opens g + 1; batch g stays readable until batch g + 2 is fetched.
///
/// Api: the copy API of counted_copy (Api::copy). HostBytes: host memory
/// (`HostBytes(n)`, data(), size()); DeviceBytes: device memory
/// (`DeviceBytes(ordinal, n)`, data(), size()). D: dev.ordinal(), sync(),
/// transfers().
template <class Api, class D, class HostBytes, class DeviceBytes>
class BasicReadback final : public ReadbackArea {
 public:
  explicit BasicReadback(D& dev) : dev_(&dev) {}
  BasicReadback(const BasicReadback&) = delete;
  BasicReadback& operator=(const BasicReadback&) = delete;

  /// Room for `bytes` in the open batch: its device address, the batch
  /// (generation) and the byte offset a Pending reads it at.
  struct Room {
    void* device;
    std::uint64_t generation;
    std::size_t offset;
  };
  Room reserve(std::size_t bytes) {
    const std::size_t need = (bytes + 7) / 8 * 8;
    if (used_ + need > capacity_ && used_ > 0) fetch();  // the open batch goes first
    if (need > capacity_) grow(need);
    Room r{static_cast<unsigned char*>(device_.data()) + used_, generation_, used_};
    used_ += need;
    return r;
  }

  const unsigned char* fetched(std::uint64_t g) override {
    if (g == generation_) fetch();
    if (g >= generation_ || generation_ > g + 2)
      throw Error(detail::concat("read-back: values of batch ", g, " were overwritten (batch ",
                                 generation_ - 1,
                                 " was fetched since); read a Pending before two more batches are fetched"));
    return static_cast<const unsigned char*>(host_[g % 2].data());
  }

  /// The batch values are reserved in now.
  std::uint64_t generation() const { return generation_; }
  /// Bytes reserved in the open batch.
  std::size_t used() const { return used_; }
  /// Batches fetched so far (each one copy and one wait).
  std::uint64_t fetches() const { return generation_; }

 private:
  void fetch() {
    auto& host = host_[generation_ % 2];
    counted_copy<Api>(*dev_, host.data(), device_.data(), used_, CopyDirection::DeviceToHost,
                      "copy of the step's values to the host");
    dev_->sync();
    used_ = 0;
    ++generation_;
  }
  void grow(std::size_t need) {  // only with nothing reserved: the device room holds nothing yet
    std::size_t cap = capacity_ ? capacity_ : kInitial;
    while (cap < need) cap *= 2;
    DeviceBytes d(dev_->ordinal(), cap);
    HostBytes h0(cap), h1(cap);
    if (capacity_) {  // the two batches fetched last stay readable: keep their bytes
      std::memcpy(h0.data(), host_[0].data(), capacity_);
      std::memcpy(h1.data(), host_[1].data(), capacity_);
    }
    device_ = std::move(d);
    host_[0] = std::move(h0);
    host_[1] = std::move(h1);
    capacity_ = cap;
  }

  static constexpr std::size_t kInitial = std::size_t(64) << 10;
  D* dev_;
  DeviceBytes device_;
  HostBytes host_[2];
  std::size_t capacity_ = 0, used_ = 0;
  std::uint64_t generation_ = 0;
};

// ------------------------------------------------------------- input ring

/// The way input batches reach the GPU: kSlots page-locked host buffers and
/// a copy stream. upload() copies a host batch into the next slot's pinned
/// buffer, enqueues the copy to the device on the copy stream (off the
/// compute stream: it can run while earlier compute work does) and makes
/// the compute stream, not the host, wait for it with an event. So the
/// host never waits for the GPU to upload; it waits only to reuse a pinned
/// buffer whose copy from kSlots uploads ago is still in flight.
///
/// The device buffers are the caller's (a model's input tensors, one per
/// slot): upload(src, bytes, dst) writes slot next()'s dst, after the
/// compute work queued before the previous upload (which read dst kSlots
/// uploads ago) has run. When pinned memory cannot be had (a locked-memory
/// limit), the slots fall back to pageable host memory and say so through
/// pinned(); the copies then stage through the driver but stay correct.
///
/// Api: `Stream` (made from an ordinal; the copy stream), `Event`,
/// `record(Event&, stream)`, `stream_wait(stream, Event&)`,
/// `host_wait(Event&)`, `copy_async(D&, stream, dst, src, bytes)` (after
/// this ring counts it in dev.transfers()), and `HostBytes` (`HostBytes(n)`,
/// data(), size(), pinned()). D: ordinal(), stream(), transfers().
template <class Api, class D>
class BasicInputRing {
 public:
  static constexpr std::size_t kSlots = 2;
  explicit BasicInputRing(D& dev) : dev_(&dev), copy_(dev.ordinal()) {}
  BasicInputRing(const BasicInputRing&) = delete;
  BasicInputRing& operator=(const BasicInputRing&) = delete;

  /// The slot the next upload uses (its device buffer is the `dst` to pass).
  std::size_t next() const { return next_; }
  /// Whether every slot made so far is page-locked.
  bool pinned() const {
    for (const auto& h : host_)
      if (h.size() && !h.pinned()) return false;
    return true;
  }
  /// Uploads so far.
  std::uint64_t uploads() const { return uploads_; }
  /// The copy stream (made on the first upload).
  const typename Api::Stream& copy_stream() const { return copy_; }

  /// `bytes` at host `src` to device `dst` (slot next()'s buffer) through
  /// slot next()'s pinned buffer, on the copy stream; the compute stream
  /// waits for it.
  void upload(const void* src, std::size_t bytes, void* dst) {
    const std::size_t j = next_;
    if (used_[j]) Api::host_wait(copied_[j]);  // the pinned buffer's last copy has left it
    if (host_[j].size() < bytes) host_[j] = typename Api::HostBytes(bytes);
    std::memcpy(host_[j].data(), src, bytes);
    if (uploads_ > 0) Api::record(consumed_[last_], dev_->stream());  // the previous slot's step is queued
    if (used_[j]) Api::stream_wait(copy_.get(), consumed_[j]);        // dst's last reader has run
    dev_->transfers().add(CopyDirection::HostToDevice, bytes);
    Api::copy_async(*dev_, copy_.get(), dst, host_[j].data(), bytes);
    Api::record(copied_[j], copy_.get());
    Api::stream_wait(dev_->stream(), copied_[j]);
    used_[j] = true;
    last_ = j;
    next_ = (j + 1) % kSlots;
    ++uploads_;
  }

 private:
  D* dev_;
  typename Api::Stream copy_;
  typename Api::HostBytes host_[kSlots];
  typename Api::Event copied_[kSlots], consumed_[kSlots];
  bool used_[kSlots] = {};
  std::size_t next_ = 0, last_ = 0;
  std::uint64_t uploads_ = 0;
};

/// The block cache of one GPU's tensor memory (DeviceTensorMemory,
/// backend/cuda/common.hpp), as PyTorch's caching allocator: a freed block
/// is kept for the next request of its size (rounded up to 512 bytes) so a
/// training loop reaches a steady state without cudaMalloc/cudaFree pairs.
/// A freed block may still be in use by work queued on a stream, so it is
/// handed out again only when the GPU has passed the point where it was
/// freed: deallocate records an event on every attached stream (each
/// Device's compute stream, its input copy stream), and allocate takes a
/// block of the size whose events have all completed (asked, never waited
/// for) or else makes a new one. Nothing waits for the device on the step's
/// path (it did: a device-wide synchronisation on every free). When the GPU
/// is out of memory, the cache waits for the pending blocks, frees every
/// cached one and tries once more. With no stream attached (every Device
/// gone) a free waits for the whole device first.
///
/// `Api`, the CUDA runtime (RuntimeTensorApi) or a stand-in in tests:
///   Stream                                  a stream handle (copyable, ==)
///   Event                                   movable; made lazily on use
///   record(Event&, Stream, int ordinal)     records it on the stream
///   done(Event&) -> bool                    completed? (never waits)
///   wait(Event&)                            waits for it on the host
///   sync_device(int ordinal)                waits for the whole device
///   try_malloc(int ordinal, size_t, std::string* why) -> void*  (null: failed, `why` says)
///   free(int ordinal, void*)
/// Thread-safe (one mutex).
template <class Api>
class BasicTensorCache {
 public:
  using Stream = typename Api::Stream;
  using Event = typename Api::Event;

  explicit BasicTensorCache(int ordinal) : ordinal_(ordinal) {}
  BasicTensorCache(const BasicTensorCache&) = delete;
  BasicTensorCache& operator=(const BasicTensorCache&) = delete;
  ~BasicTensorCache() { close(); }

  /// Streams whose queued work may use this GPU's tensors: a free records
  /// an event on each. A Device attaches its streams when it makes them and
  /// detaches them before destroying them.
  void attach(Stream s) {
    const std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(s);
  }
  void detach(Stream s) noexcept {
    const std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < streams_.size(); ++i)
      if (streams_[i] == s) {
        streams_.erase(streams_.begin() + std::ptrdiff_t(i));
        return;
      }
  }

  void* allocate(std::size_t bytes) {
    const std::size_t size = round(bytes);
    const std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < blocks_.size(); ++i) {  // freed longest ago first
      Block& b = blocks_[i];
      if (b.size != size || !finished(b)) continue;
      void* p = b.p;
      blocks_.erase(blocks_.begin() + std::ptrdiff_t(i));
      cached_ -= size;
      return p;
    }
    std::string why;
    void* p = Api::try_malloc(ordinal_, size, &why);
    if (!p) {  // out of memory: wait for the pending blocks and give every cached one back
      release_locked();
      p = Api::try_malloc(ordinal_, size, &why);
    }
    if (!p)
      throw BackendError(cifarnet::detail::concat("CUDA cudaMalloc of ", size, " bytes for a tensor on GPU ",
                                                  ordinal_, ": ", why));
    try {
      owned_[reinterpret_cast<std::uintptr_t>(p)] = reinterpret_cast<std::uintptr_t>(p) + size;
    } catch (...) {
      Api::free(ordinal_, p);
      throw;
    }
    ++mallocs_;
    return p;
  }

  /// Whether every attached stream is one of the `n` at `s` (a Device's
  /// own streams: no other stream can take a block it frees).
  bool streams_within(const Stream* s, std::size_t n) const {
    const std::lock_guard<std::mutex> lock(mu_);
    for (const Stream& a : streams_)
      if (std::find(s, s + n, a) == s + n) return false;
    return true;
  }

  /// Whether `p` points into a block this cache holds (handed out or
  /// cached): device memory, known without asking the driver.
  bool owns(const void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = owned_.upper_bound(a);
    if (it == owned_.begin()) return false;
    --it;
    return a < it->second;
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    const std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {  // the process is ending: no cache any more
      give_back(p);
      return;
    }
    const std::size_t size = round(bytes);
    try {
      Block b{p, size, {}};
      if (streams_.empty()) {
        Api::sync_device(ordinal_);  // no stream to mark: nothing left queued may touch it
      } else {
        for (const Stream& s : streams_) {
          b.events.push_back(spare_event());
          Api::record(b.events.back(), s, ordinal_);
        }
      }
      blocks_.push_back(std::move(b));
      cached_ += size;
    } catch (...) {  // no memory for the cache's node, or an event failed: the old, safe way
      Api::sync_device(ordinal_);
      give_back(p);
    }
  }

  /// Bytes held in freed blocks (pending or ready).
  std::size_t cached_bytes() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  /// Freed blocks whose events have not all completed yet (asked now).
  std::size_t pending_blocks() {
    const std::lock_guard<std::mutex> lock(mu_);
    std::size_t n = 0;
    for (Block& b : blocks_) n += finished(b) ? 0 : 1;
    return n;
  }
  /// Blocks made by try_malloc so far (tests: a steady state makes none).
  std::size_t mallocs() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return mallocs_;
  }
  /// Waits for the pending blocks and frees every cached one.
  void release_cached() {
    const std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }
  /// At exit, before the CUDA runtime's own teardown: frees the cache, and
  /// blocks freed later go straight back (no leak at exit, which
  /// compute-sanitizer's leak check would report).
  void close() noexcept {
    const std::lock_guard<std::mutex> lock(mu_);
    release_locked();
    closed_ = true;
  }

 private:
  struct Block {
    void* p;
    std::size_t size;
    std::vector<Event> events;  // one per stream attached when it was freed
  };
  static std::size_t round(std::size_t bytes) { return (bytes + 511) / 512 * 512; }
  /// Whether the GPU is past every event of b (those done go back to the
  /// spare events).
  bool finished(Block& b) {
    while (!b.events.empty() && Api::done(b.events.back())) {
      spare_.push_back(std::move(b.events.back()));
      b.events.pop_back();
    }
    return b.events.empty();
  }
  Event spare_event() {
    if (spare_.empty()) return Event();
    Event e = std::move(spare_.back());
    spare_.pop_back();
    return e;
  }
  void release_locked() noexcept {
    for (Block& b : blocks_) {
      for (Event& e : b.events) {
        try {
          if (!Api::done(e)) Api::wait(e);
        } catch (...) {  // a failed GPU: cudaFree below waits for it anyway
        }
      }
      give_back(b.p);
    }
    blocks_.clear();
    cached_ = 0;
  }

  void give_back(void* p) noexcept {
    owned_.erase(reinterpret_cast<std::uintptr_t>(p));
    Api::free(ordinal_, p);
  }

  int ordinal_;
  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::uintptr_t> owned_;  // every block held: begin -> end
  std::vector<Stream> streams_;
  std::vector<Block> blocks_;  // freed blocks, oldest first
  std::vector<Event> spare_;   // completed events, for the next frees
  std::size_t cached_ = 0, mallocs_ = 0;
  bool closed_ = false;
};

// ------------------------------------------------------------- step graphs

/// The words that say what one piece of stream work does, given the device
/// memory it reads: a kernel's handle, grid and argument bytes; a library
/// call's handle, plan and pointers. Two pieces of work with equal words do
/// the same thing, so a graph captured from one replays the other.
class LaunchSignature {
 public:
  LaunchSignature& add(const void* p) { return word(std::uint64_t(reinterpret_cast<std::uintptr_t>(p))); }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>>
  LaunchSignature& add(T v) {
    return bytes(&v, sizeof v);
  }
  /// `n` raw bytes (a kernel argument of any trivially copyable type), in
  /// words of 8 bytes, zero-padded.
  LaunchSignature& bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    word(n);
    for (std::size_t i = 0; i < n; i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, b + i, std::min<std::size_t>(8, n - i));
      word(w);
    }
    return *this;
  }
  const std::vector<std::uint64_t>& words() const { return w_; }
  void clear() { w_.clear(); }

 private:
  LaunchSignature& word(std::uint64_t w) {
    w_.push_back(w);
    return *this;
  }
  std::vector<std::uint64_t> w_;
};

/// What a launch queue did so far (logs, gpu_bench, tests).
struct LaunchQueueStats {
  std::uint64_t submitted = 0;       ///< work items queued
  std::uint64_t flushes = 0;         ///< non-empty segments run
  std::uint64_t eager_segments = 0;  ///< ... item by item on the stream
  std::uint64_t captures = 0;        ///< ... captured as a new graph (then launched)
  std::uint64_t replays = 0;         ///< ... as a graph captured before
  std::uint64_t replayed_items = 0;  ///< items that ran inside a replayed graph
  std::string disabled;              ///< why graphs are off for good ("" while on)
  std::string last_eager;            ///< why the last eager segment did not run as a graph
};

/// The launch queue of one stream: while graphs are on, stream work is
/// queued with its signature instead of being enqueued at once, and a flush
/// (the caller's, at every point where the host or another stream could
/// observe the stream: a wait, a copy, a direct use of the stream) runs the
/// queued segment:
///  - a segment seen before with the same signatures replays the graph
///    captured from it: one launch in place of one per item;
///  - a segment seen once before is captured (stream capture of its items)
///    into a graph, which is launched and kept;
///  - any other segment (first sight, fewer than kMinItems items, graphs off)
///    runs item by item, as without a queue.
/// A replay is taken only on equal signatures, word for word (a hash only
/// decides when to capture), so a changed pointer or scalar never replays a
/// stale graph; a kept graph keeps the items it was captured from (and what
/// they own) alive, so an address in a signature cannot be reused by another
/// object while a graph replays it. A capture that fails (a call that cannot be captured)
/// turns graphs off for good, with the reason, and the segment runs item by
/// item; so do kMaxMisses captures in a row that were never replayed (work
/// whose arguments change every step: nothing to gain).
///
/// `Api`, the CUDA runtime (RuntimeGraphApi) or a stand-in in tests:
///   Stream                         a stream handle (copyable)
///   Graph                          movable owner of an executable graph
///   begin_capture(Stream)          starts capturing the stream's work
///   end_capture(Stream) -> Graph   ends it, instantiated; BackendError
///                                  (capture invalidated, instantiation) says why
///   end_capture_noexcept(Stream)   ends it after an item threw, dropping it
///   launch(Graph&, Stream)
/// Items run with the stream as their argument; an item must not use the
/// queue. Not thread-safe (one per Device, used by its thread).
template <class Api>
class BasicLaunchQueue {
 public:
  using Stream = typename Api::Stream;
  using Graph = typename Api::Graph;
  using Work = std::function<void(Stream)>;
  static constexpr std::size_t kMinItems = 4;    ///< fewer: not worth a graph
  static constexpr std::size_t kMaxGraphs = 16;  ///< graphs kept (least recently used goes)
  static constexpr std::size_t kMaxSeen = 64;    ///< first sights remembered
  static constexpr int kMaxMisses = 8;           ///< captures in a row never replayed

  explicit BasicLaunchQueue(Stream s = Stream{}, bool on = false) : stream_(s), on_(on) {}
  BasicLaunchQueue(const BasicLaunchQueue&) = delete;
  BasicLaunchQueue& operator=(const BasicLaunchQueue&) = delete;

  void set_stream(Stream s) { stream_ = s; }
  /// Graphs on or off (what is queued runs first).
  void enable(bool on) {
    flush();
    on_ = on && stats_.disabled.empty();
  }
  bool enabled() const { return on_; }
  bool empty() const { return items_.empty(); }
  std::size_t queued() const { return items_.size(); }
  const LaunchQueueStats& stats() const { return stats_; }

  /// Queues `work` described by `sig` (`what` names it in reasons; a
  /// string literal), or runs it at once when graphs are off or a flush is
  /// running (its items are being run or captured: the work joins them).
  void submit(const char* what, const LaunchSignature& sig, Work work) {
    if (!on_ || flushing_) {
      work(stream_);
      return;
    }
    items_.push_back(Item{what, std::move(work)});
    words_.insert(words_.end(), sig.words().begin(), sig.words().end());
    ends_.push_back(words_.size());
    ++stats_.submitted;
  }

  /// Runs what is queued (see the class comment); the queue is empty after
  /// it, also when an item throws (the rest is dropped with it).
  void flush() {
    if (items_.empty() || flushing_) return;
    Flushing guard(*this);
    ++stats_.flushes;
    if (items_.size() < kMinItems)
      return eager(
          cifarnet::detail::concat("a segment of ", items_.size(), " items (a graph needs ", kMinItems, ")"));
    for (std::size_t i = 0; i < graphs_.size(); ++i)
      if (graphs_[i].words == words_ && graphs_[i].ends == ends_) return replay(i);
    const std::uint64_t h = hash(words_);
    if (!seen_.count(h)) {
      remember(h);
      return eager("first sight of the segment " + describe());
    }
    capture();
  }

  /// Turns graphs off for good (what is queued runs first, item by item).
  void disable(const std::string& why) {
    flush();
    stats_.disabled = why;
    on_ = false;
  }

  /// Graphs kept now.
  std::size_t graphs() const { return graphs_.size(); }
  /// Lets the kept graphs go, and what their items own (before the
  /// library handles those belong to are destroyed).
  void drop_graphs() noexcept { graphs_.clear(); }

 private:
  struct Item {
    const char* what;
    Work work;
  };
  struct Kept {
    std::vector<std::uint64_t> words;
    std::vector<std::size_t> ends;
    Graph graph;
    std::uint64_t used;
    std::vector<Item> items;  // what they own (a cuDNN plan, say) lives as long as the graph
  };
  struct Flushing {
    explicit Flushing(BasicLaunchQueue& q) : q_(q) { q_.flushing_ = true; }
    ~Flushing() {
      q_.flushing_ = false;
      q_.items_.clear();
      q_.words_.clear();
      q_.ends_.clear();
    }
    BasicLaunchQueue& q_;
  };

  static std::uint64_t hash(const std::vector<std::uint64_t>& w) {
    std::uint64_t h = 0;  // each word through splitmix64's finaliser, then combined
    for (std::uint64_t x : w) {
      x += 0x9e3779b97f4a7c15ull;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      x ^= x >> 31;
      h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return h;
  }
  void remember(std::uint64_t h) {
    if (seen_order_.size() == kMaxSeen) {
      seen_.erase(seen_order_.front());
      seen_order_.erase(seen_order_.begin());
    }
    seen_.insert(h);
    seen_order_.push_back(h);
  }
  std::string describe() const {
    return cifarnet::detail::concat("of ", items_.size(), " items from '", items_.front().what, "' to '",
                                    items_.back().what, "'");
  }
  void run_items() {
    for (Item& it : items_) it.work(stream_);
  }
  void eager(std::string why) {
    ++stats_.eager_segments;
    stats_.last_eager = std::move(why);
    run_items();
  }
  void replay(std::size_t i) {
    Kept& k = graphs_[i];
    Api::launch(k.graph, stream_);
    k.used = ++clock_;
    misses_ = 0;
    ++stats_.replays;
    stats_.replayed_items += items_.size();
  }
  void capture() {
    Graph g;
    try {
      Api::begin_capture(stream_);
      bool ended = false;
      try {
        run_items();
        ended = true;
        g = Api::end_capture(stream_);
      } catch (...) {
        if (!ended) (void)Api::end_capture_noexcept(stream_);
        throw;
      }
    } catch (const BackendError& e) {  // not capturable: off for good, this segment item by item
      stats_.disabled =
          cifarnet::detail::concat("the segment ", describe(), " could not be captured: ", e.what());
      on_ = false;
      return eager("graphs are off: " + stats_.disabled);
    }
    ++stats_.captures;
    Api::launch(g, stream_);
    if (graphs_.size() == kMaxGraphs) {
      std::size_t lru = 0;
      for (std::size_t i = 1; i < graphs_.size(); ++i)
        if (graphs_[i].used < graphs_[lru].used) lru = i;
      graphs_.erase(graphs_.begin() + std::ptrdiff_t(lru));
    }
    const std::string what = describe();
    graphs_.push_back(Kept{words_, ends_, std::move(g), ++clock_, std::move(items_)});
    if (++misses_ >= kMaxMisses) {
      stats_.disabled = cifarnet::detail::concat(kMaxMisses,
                                                 " graphs were captured with no replay in between: the "
                                                 "work's arguments change from step to step (the last "
                                                 "segment ",
                                                 what, ")");
      on_ = false;
      graphs_.clear();
    }
  }

  Stream stream_;
  bool on_;
  bool flushing_ = false;
  std::vector<Item> items_;
  std::vector<std::uint64_t> words_;
  std::vector<std::size_t> ends_;  // items_[i]'s words end at ends_[i]
  std::vector<Kept> graphs_;
  std::set<std::uint64_t> seen_;
  std::vector<std::uint64_t> seen_order_;
  std::uint64_t clock_ = 0;
  int misses_ = 0;
  LaunchQueueStats stats_;
};

/// The variant pack of a cuDNN execution plan's last call. cuDNN binds a
/// plan to its tensors' addresses and workspace through a finalized
/// descriptor, which takes a create, three attributes and a finalize to
/// build (host work on every call, ahead of the launch); a layer's tensors
/// stay put from step to step, so its op keeps the pack of the last call
/// and builds a new one only when an address changes. `Pack` is the
/// descriptor (GraphDesc) or a stand-in in tests.
template <class Pack>
class PackCache {
 public:
  /// The addresses a pack binds: x, w, y and the workspace.
  using Key = std::array<const void*, 4>;
  /// The pack for `key`: the cached one, or build()'s (kept when it returns).
  template <class Build>
  Pack& get(const Key& key, Build&& build) {
    if (!valid_ || key != key_) {
      valid_ = false;  // a build that throws leaves no pack
      pack_ = std::make_shared<Pack>(build());
      key_ = key;
      valid_ = true;
      ++builds_;
    }
    return *pack_;
  }
  /// The current pack, shared: work queued with it keeps it alive when a
  /// later call builds another (a launch queue runs it later).
  std::shared_ptr<Pack> shared() const { return valid_ ? pack_ : nullptr; }
  /// Packs built so far.
  std::size_t builds() const { return builds_; }

 private:
  std::shared_ptr<Pack> pack_;
  Key key_{};
  bool valid_ = false;
  std::size_t builds_ = 0;
};

}  // namespace cifarnet::backend::cuda
