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
//    written over two functions so a CPU test can drive it.
#pragma once

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
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

/// One algorithm as cuDNN's measurement reports it (fastest first).
struct AlgoCandidate {
  int algo = 0;
  bool ok = false;             ///< status == CUDNN_STATUS_SUCCESS
  std::size_t memory = 0;      ///< workspace bytes it needs
  bool deterministic = false;  ///< determinism == CUDNN_DETERMINISTIC
  bool tensor_op = false;      ///< it ran with tensor-core (TF32) math
  bool transform = false;      ///< an FFT or Winograd algorithm (see ConvOptions)
};

/// Index in `ranked` of the first (fastest) candidate that ran, fits `limit`
/// and obeys `opts`; -1 when none does.
inline int select_algorithm(const std::vector<AlgoCandidate>& ranked, std::size_t limit,
                            const ConvOptions& opts) {
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const AlgoCandidate& c = ranked[i];
    if (!c.ok || c.memory > limit) continue;
    if (c.tensor_op && !opts.allow_tf32) continue;
    if (c.transform && !opts.allow_transforms) continue;
    if (opts.deterministic && !c.deterministic) continue;
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

/// The algorithms chosen for one convolution geometry (cuDNN enum values).
struct ConvAlgorithms {
  int fwd = 0, bwd_data = 0, bwd_filter = 0;
  bool fwd_tensor_op = false, bwd_data_tensor_op = false, bwd_filter_tensor_op = false;
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

}  // namespace cifarnet::backend::cuda
