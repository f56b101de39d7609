// cifarnet/distributed/nccl.hpp — gradient averaging across GPUs with NCCL
// (target cifarnet::cuda, built when CMake finds NCCL beside the CUDA
// toolkit; CIFARNET_WITH_NCCL is then defined). The MPI parts need
// cifarnet::mpi too (which defines CIFARNET_WITH_MPI).
//
//  - NcclGroup: one process driving several GPUs (the seed's towers): one
//    NCCL communicator per device (ncclCommInitAll), all_reduce_mean/_sum
//    over one buffer per device, issued as one NCCL group (closed by a guard
//    also when an enqueue throws). Its devices are its own, or borrowed.
//  - NcclTowerReducer: distributed::Towers' gradient sum over an NcclGroup
//    on the towers' own devices (Towers binds them: no second Device, stream
//    or cuDNN handle per GPU), for `--num-gpus N` in one process.
//  - NcclCommunicator: one GPU per process under mpirun; the NCCL unique id
//    goes from rank 0 to the others over MPI, then every all-reduce runs on
//    NCCL (NVLink/InfiniBand/sockets, whatever NCCL finds).
//  - NcclAllReduceMean: the optim::Chain gradient transform over an
//    NcclCommunicator, a drop-in for distributed::AllReduceMean.
//  - NcclOverlappedAllReduce: the same mean in buckets started during
//    backward on a stream of their own (a GradientSync, as PyTorch's DDP),
//    the NCCL counterpart of distributed::OverlappedAllReduce.
//
// Buffers may be device pointers (used in place) or host pointers (staged
// through the Device's buffers, as every CUDA op does). Fault behaviour: a
// collective that does not finish within the timeout (a dead or hung peer)
// aborts the communicator (ncclCommAbort) and throws DistributedError instead
// of hanging; NCCL's asynchronous errors are reported the same way. Any error
// of a group's enqueue, ncclGroupEnd or wait aborts every communicator of the
// group (ncclCommAbort), and later collectives on it throw.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/distributed/buckets.hpp"
#include "cifarnet/distributed/towers.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/optim/select.hpp"

#ifdef CIFARNET_WITH_MPI
#include "cifarnet/distributed/mpi.hpp"
#endif

namespace cifarnet::distributed {

namespace nccl_detail {

inline void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw DistributedError(
        cifarnet::detail::concat("NCCL ", what, ": ", ncclGetErrorString(r), " (", int(r), ")"));
}

/// Owns an ncclComm_t: destroyed when it goes, or aborted (and then left
/// alone) by abort().
struct Comm {
  ncclComm_t c = nullptr;
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& o) noexcept : c(std::exchange(o.c, nullptr)) {}
  ~Comm() {
    if (c) (void)ncclCommDestroy(c);
  }
  /// ncclCommAbort: frees the communicator without waiting for peers.
  void abort() noexcept {
    if (c) (void)ncclCommAbort(c);
    c = nullptr;
  }
};

/// An NCCL group opened for a scope: ncclGroupEnd runs once, by end() or, when
/// an exception leaves the scope first, by the destructor.
class GroupGuard {
 public:
  GroupGuard() { check(ncclGroupStart(), "ncclGroupStart"); }
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;
  void end() {
    open_ = false;
    check(ncclGroupEnd(), "ncclGroupEnd");
  }
  ~GroupGuard() {
    if (open_) (void)ncclGroupEnd();
  }

 private:
  bool open_ = true;
};

/// Waits for `stream` to finish the collective `what` on `comm`, polling;
/// past `timeout` seconds, or on an asynchronous NCCL error, throws
/// DistributedError (the caller aborts the communicators).
inline void wait(cudaStream_t stream, ncclComm_t comm, double timeout, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) backend::cuda::check(q, what);
    ncclResult_t async = ncclSuccess;
    check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      throw DistributedError(cifarnet::detail::concat("NCCL ", what, ": ", ncclGetErrorString(async),
                                                      " (a peer failed); the communicator was aborted"));
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout) {
      throw DistributedError(
          cifarnet::detail::concat("NCCL ", what, ": not finished after ", timeout,
                                   " s (a peer died or hangs); the communicator was aborted"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// Aborts every communicator of `comms` (after an error of one collective).
inline void abort_all(std::vector<Comm>& comms) noexcept {
  for (Comm& c : comms) c.abort();
}

}  // namespace nccl_detail

/// One process, several GPUs (devices 0..n-1, or the given list): one NCCL
/// communicator per GPU, and per GPU one Device (stream, handles): its own,
/// or borrowed from the caller (the towers' devices, which must outlive it).
class NcclGroup {
 public:
  using Dev = Device<backend::Cuda>;
  explicit NcclGroup(int n, double timeout_seconds = 600) : NcclGroup(first_devices(n), timeout_seconds) {}
  /// Opens a Device of its own on each GPU of `devices`.
  NcclGroup(std::vector<int> devices, double timeout_seconds) : timeout_(timeout_seconds) {
    if (devices.empty()) throw ConfigError("NcclGroup: no devices");
    for (int d : devices) {
      owned_.push_back(std::make_unique<Dev>(d));
      devices_.push_back(owned_.back().get());
    }
    init_comms();
  }
  /// Uses the caller's devices (one per GPU, distinct GPUs).
  NcclGroup(std::vector<Dev*> devices, double timeout_seconds)
      : timeout_(timeout_seconds), devices_(std::move(devices)) {
    if (devices_.empty()) throw ConfigError("NcclGroup: no devices");
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      if (!devices_[i]) throw ConfigError("NcclGroup: a null device");
      for (std::size_t j = 0; j < i; ++j)
        if (devices_[j]->ordinal() == devices_[i]->ordinal())
          throw ConfigError(cifarnet::detail::concat("NcclGroup: GPU ", devices_[i]->ordinal(),
                                                     " given twice (one device per GPU)"));
    }
    init_comms();
  }

  std::size_t size() const { return devices_.size(); }
  Dev& device(std::size_t i) { return *devices_.at(i); }

  /// buffers[i] (n floats, on device i or on the host) becomes the mean of
  /// all the buffers, on every device.
  void all_reduce_mean(const std::vector<float*>& buffers, std::size_t n) {
    all_reduce(buffers, n, ncclAvg, "NcclGroup::all_reduce_mean");
  }
  /// buffers[i] becomes the sum of all the buffers (towers' gradients of one
  /// batch loss). Fewer buffers than devices use the first devices only.
  void all_reduce_sum(const std::vector<float*>& buffers, std::size_t n) {
    all_reduce(buffers, n, ncclSum, "NcclGroup::all_reduce_sum");
  }
  /// buffers[0]'s n floats into every other buffer (ncclBroadcast from the
  /// first device: the towers' variables from tower 0). Buffers in a
  /// device-resident arena are used in place on their GPUs; fewer buffers
  /// than devices use the first devices only.
  void broadcast(const std::vector<float*>& buffers, std::size_t n) {
    collective(buffers, n, "NcclGroup::broadcast", false,
               [](float* d, std::size_t k, ncclComm_t c, cudaStream_t st) {
                 nccl_detail::check(ncclBroadcast(d, d, k, ncclFloat, 0, c, st), "ncclBroadcast");
               });
  }

 private:
  void init_comms() {
    std::vector<int> ids;
    for (Dev* d : devices_) ids.push_back(d->ordinal());
    std::vector<ncclComm_t> raw(ids.size());
    nccl_detail::check(ncclCommInitAll(raw.data(), int(raw.size()), ids.data()), "ncclCommInitAll");
    for (ncclComm_t c : raw) {
      comms_.emplace_back();
      comms_.back().c = c;
    }
  }

  void all_reduce(const std::vector<float*>& buffers, std::size_t n, ncclRedOp_t op, const char* what) {
    if (op == ncclAvg && buffers.size() != devices_.size())
      throw ConfigError(
          cifarnet::detail::concat(what, ": ", buffers.size(), " buffers for ", devices_.size(), " devices"));
    collective(buffers, n, what, true, [op](float* d, std::size_t k, ncclComm_t c, cudaStream_t st) {
      nccl_detail::check(ncclAllReduce(d, d, k, ncclFloat, op, c, st), "ncclAllReduce");
    });
  }

  // One collective over buffers[i] on device i: each buffer mapped to its
  // device (staged when it is host memory; a resident arena's in place),
  // enqueue(buffer, n, comm, stream) per device inside one NCCL group,
  // waited for with the timeout. `reads_all`: every buffer is read (an
  // all-reduce); else only the first (a broadcast: the others are written).
  template <class Enqueue>
  void collective(const std::vector<float*>& buffers, std::size_t n, const char* what, bool reads_all,
                  Enqueue&& enqueue) {
    if (aborted_)
      throw DistributedError(cifarnet::detail::concat(what,
                                                      ": the group's communicators were aborted after an "
                                                      "earlier NCCL error"));
    if (buffers.empty() || buffers.size() > devices_.size())
      throw ConfigError(
          cifarnet::detail::concat(what, ": ", buffers.size(), " buffers for ", devices_.size(), " devices"));
    if (buffers.size() < devices_.size() && !sub_comms_.count(buffers.size())) {
      // A partial batch fills fewer towers: a communicator of the first ones.
      std::vector<int> ids;
      for (std::size_t i = 0; i < buffers.size(); ++i) ids.push_back(devices_[i]->ordinal());
      std::vector<ncclComm_t> raw(ids.size());
      nccl_detail::check(ncclCommInitAll(raw.data(), int(raw.size()), ids.data()), "ncclCommInitAll");
      auto& v = sub_comms_[buffers.size()];
      for (ncclComm_t c : raw) {
        v.emplace_back();
        v.back().c = c;
      }
    }
    auto& comms = buffers.size() == devices_.size() ? comms_ : sub_comms_[buffers.size()];
    std::vector<float*> dev(buffers.size());
    std::vector<std::unique_ptr<backend::cuda::Staging>> staged;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const backend::cuda::DeviceGuard guard(devices_[i]->ordinal());
      staged.push_back(std::make_unique<backend::cuda::Staging>(*devices_[i]));
      dev[i] = reads_all || i == 0 ? staged.back()->inout(buffers[i], n) : staged.back()->out(buffers[i], n);
    }
    try {
      {
        nccl_detail::GroupGuard group;  // ncclGroupEnd also when an enqueue throws
        for (std::size_t i = 0; i < buffers.size(); ++i)
          enqueue(dev[i], n, comms[i].c, devices_[i]->stream());
        group.end();
      }
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        const backend::cuda::DeviceGuard guard(devices_[i]->ordinal());
        nccl_detail::wait(devices_[i]->stream(), comms[i].c, timeout_, what);
      }
    } catch (...) {
      // A failed or hung collective leaves the communicators unusable: abort
      // them all (a destroy would wait for the peers) and refuse later calls.
      nccl_detail::abort_all(comms_);
      for (auto& kv : sub_comms_) nccl_detail::abort_all(kv.second);
      aborted_ = true;
      throw;
    }
    for (std::size_t i = 0; i < staged.size(); ++i) {
      const backend::cuda::DeviceGuard guard(devices_[i]->ordinal());
      staged[i]->finish();
    }
  }

  static std::vector<int> first_devices(int n) {
    const int present = backend::cuda::device_count();
    if (n <= 0 || n > present)
      throw BackendError(
          cifarnet::detail::concat("NcclGroup: ", n, " GPUs requested, ", present, " present",
                                   present == 0 ? " (" + backend::cuda::no_device_reason() + ")" : ""));
    std::vector<int> d(std::size_t(n), 0);
    for (int i = 0; i < n; ++i) d[std::size_t(i)] = i;
    return d;
  }
  double timeout_;
  std::vector<std::unique_ptr<Dev>> owned_;
  std::vector<Dev*> devices_;
  std::vector<nccl_detail::Comm> comms_;
  bool aborted_ = false;
  std::map<std::size_t, std::vector<nccl_detail::Comm>> sub_comms_;
};

/// distributed::Towers' gradient sum over NCCL, one GPU per tower:
/// `Towers<Model<Net, backend::Cuda>>(n, ..., [](std::size_t i)
/// { return std::make_unique<Device<backend::Cuda>>(int(i)); },
/// std::make_unique<NcclTowerReducer>(n))`. The Towers bind their devices
/// (bind(): the group runs on the towers' streams, no second Device per
/// GPU); used outside Towers, the first sum() opens GPUs 0..gpus-1 itself.
class NcclTowerReducer final : public DeviceTowerReducer<backend::Cuda, float> {
 public:
  explicit NcclTowerReducer(int gpus, double timeout_seconds = 600) : gpus_(gpus), timeout_(timeout_seconds) {
    if (gpus <= 0) throw ConfigError(cifarnet::detail::concat("NcclTowerReducer: ", gpus, " GPUs"));
  }
  void bind(const std::vector<Device<backend::Cuda>*>& devices) override {
    if (devices.size() != std::size_t(gpus_))
      throw ConfigError(cifarnet::detail::concat("NcclTowerReducer: made for ", gpus_, " GPUs, bound to ",
                                                 devices.size(), " towers"));
    group_ = std::make_unique<NcclGroup>(devices, timeout_);
  }
  void sum(const std::vector<float*>& buffers, std::size_t n) override { group().all_reduce_sum(buffers, n); }
  void broadcast(const std::vector<float*>& buffers, std::size_t n) override {
    group().broadcast(buffers, n);
  }
  const char* name() const override { return "NCCL"; }
  NcclGroup& group() {
    if (!group_) group_ = std::make_unique<NcclGroup>(gpus_, timeout_);
    return *group_;
  }

 private:
  int gpus_;
  double timeout_;
  std::unique_ptr<NcclGroup> group_;
};

#ifdef CIFARNET_WITH_MPI
/// One GPU per MPI process: an NCCL communicator over the processes of
/// `mpi`, bootstrapped by broadcasting rank 0's unique id over MPI.
class NcclCommunicator {
 public:
  NcclCommunicator(Communicator& mpi, Device<backend::Cuda>& dev, double timeout_seconds = 600)
      : dev_(&dev), rank_(mpi.rank()), size_(mpi.size()), timeout_(timeout_seconds) {
    ncclUniqueId id{};
    if (rank_ == 0) nccl_detail::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<std::uint8_t> bytes(reinterpret_cast<std::uint8_t*>(&id),
                                    reinterpret_cast<std::uint8_t*>(&id) + sizeof(id));
    mpi.broadcast(bytes, 0, "NCCL unique id");
    if (bytes.size() != sizeof(id)) throw DistributedError("NCCL unique id: wrong size from rank 0");
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<std::uint8_t*>(&id));
    const backend::cuda::DeviceGuard guard(dev.ordinal());
    nccl_detail::check(ncclCommInitRank(&comm_.c, size_, id, rank_), "ncclCommInitRank");
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  Device<backend::Cuda>& device() const { return *dev_; }

  /// Enqueues the mean over the processes of the `n` floats at device
  /// pointer `d`, in place, on `stream` (a DistributedError aborts the
  /// communicator).
  void start_mean(float* d, std::size_t n, cudaStream_t stream) {
    if (!comm_.c)
      throw DistributedError("NCCL gradient all-reduce: the communicator was aborted after an earlier error");
    try {
      nccl_detail::check(ncclAllReduce(d, d, n, ncclFloat, ncclAvg, comm_.c, stream), "ncclAllReduce");
    } catch (...) {
      comm_.abort();
      throw;
    }
  }
  /// Waits for `stream`'s collectives within the deadline (a dead or hung
  /// peer: the communicator is aborted and DistributedError names `what`).
  void wait(cudaStream_t stream, const char* what) {
    if (!comm_.c) throw DistributedError("NCCL: the communicator was aborted after an earlier error");
    try {
      nccl_detail::wait(stream, comm_.c, timeout_, what);
    } catch (...) {
      comm_.abort();
      throw;
    }
  }

  /// data (n floats, device or host) becomes its mean over the processes.
  void all_reduce_mean(float* data, std::size_t n) {
    if (!comm_.c)
      throw DistributedError("NCCL gradient all-reduce: the communicator was aborted after an earlier error");
    backend::cuda::Staging st(*dev_);
    float* d = st.inout(data, n);
    try {
      nccl_detail::check(ncclAllReduce(d, d, n, ncclFloat, ncclAvg, comm_.c, dev_->stream()),
                         "ncclAllReduce");
      nccl_detail::wait(dev_->stream(), comm_.c, timeout_, "gradient all-reduce");
    } catch (...) {
      comm_.abort();  // peers may be gone: never ncclCommDestroy (it would wait)
      throw;
    }
    st.finish();
  }

 private:
  Device<backend::Cuda>* dev_;
  int rank_, size_;
  double timeout_;
  nccl_detail::Comm comm_;
};

/// Options of NcclAllReduceMean: the communicator.
class NcclAllReduceOptions {
 public:
  explicit NcclAllReduceOptions(NcclCommunicator& comm) : comm_(&comm) {}
  NcclCommunicator& comm() const { return *comm_; }

 private:
  NcclCommunicator* comm_;
};

/// Gradient transform (optim::Chain stage) averaging every gradient over the
/// processes with NCCL, in one all-reduce (NCCL pipelines it internally).
/// Stateless; a drop-in for AllReduceMean.
template <class T>
class NcclAllReduceMean {
  static_assert(std::is_same_v<T, float>, "NcclAllReduceMean: gradients must be float");

 public:
  using Scalar = T;
  using Options = NcclAllReduceOptions;
  static constexpr bool is_optimizer = false;

  NcclAllReduceMean(const Parameters<T>&, Options opts, const optim::Selection& = optim::Selection::all())
      : opts_(opts) {}
  void apply(Parameters<T>& params) {
    if (opts_.comm().size() == 1) return;
    opts_.comm().all_reduce_mean(params.grads().data(), std::size_t(params.grads().size()));
  }
  template <class F>
  void visit_state(F&&) {}
  const Options& options() const { return opts_; }

 private:
  Options opts_;
};
/// The gradient mean over NCCL overlapped with backward: a GradientSync for
/// Trainer::set_gradient_sync, used with the plain optimizer (no
/// NcclAllReduceMean in the chain), on a device-resident model
/// (Model::set_device_resident: the gradients are device memory). The
/// buckets are OverlappedAllReduce's (GradientBuckets: fixed-size chunks of
/// the gradient buffer, last parameters first). Each bucket, once backward
/// has made all of it final, is averaged in place (ncclAvg) on a stream of
/// its own, after an event on the compute stream says the kernels that wrote
/// it have run; so the last layers' gradients travel while backward computes
/// the earlier ones, as in PyTorch's DDP. finish() starts the rest and waits
/// for the NCCL stream within the communicator's deadline (a dead peer ends
/// the step with DistributedError, never a hang); the compute stream's next
/// work follows it. One rank: a no-op. Not thread-safe.
template <class T>
class NcclOverlappedAllReduce : public GradientSync {
  static_assert(std::is_same_v<T, float>, "NcclOverlappedAllReduce: gradients must be float");

 public:
  NcclOverlappedAllReduce(Parameters<T>& params, NcclCommunicator& comm,
                          std::size_t bucket_bytes = std::size_t(1) << 20)
      : params_(&params),
        comm_(&comm),
        buckets_(init(params, bucket_bytes)),
        stream_(comm.device().ordinal(), false, "cudaStreamCreate (the gradient all-reduce's stream)"),
        ready_() {}
  NcclOverlappedAllReduce(const NcclOverlappedAllReduce&) = delete;
  NcclOverlappedAllReduce& operator=(const NcclOverlappedAllReduce&) = delete;

  void begin() override {
    if (comm_->size() == 1) return;
    if (std::size_t(params_->grads().size()) != buckets_.size())
      throw DistributedError(
          cifarnet::detail::concat("NcclOverlappedAllReduce: the gradient buffer changed size (",
                                   buckets_.size(), " -> ", params_->grads().size(), " elements)"));
    // Backward writes the gradients on the device: their device copy.
    grads_ = comm_->device().mirrors().map(params_->grads().data(), buckets_.size(), false, true);
    if (!grads_)
      throw ConfigError(
          "NcclOverlappedAllReduce: the gradients are host memory; it needs a device-resident model "
          "(Model::set_device_resident(true)), or use NcclAllReduceMean");
    buckets_.begin();
  }

  void ready_from(std::size_t first_param) override {
    if (comm_->size() == 1 || !grads_) return;
    buckets_.ready_from(first_param, [&](std::size_t b, std::size_t e) { start(b, e); });
  }

  void finish() override {
    if (comm_->size() == 1) return;
    if (!grads_) throw DistributedError("NcclOverlappedAllReduce: finish() without begin()");
    buckets_.rest([&](std::size_t b, std::size_t e) { start(b, e); });
    const backend::cuda::DeviceGuard guard(comm_->device().ordinal());
    comm_->wait(stream_.get(), "gradient all-reduce");
    grads_ = nullptr;
  }

  /// Number of all-reduce calls per step.
  std::size_t buckets() const { return buckets_.count(); }
  /// Buckets the last step started while backward still had gradients to compute.
  std::size_t last_early_buckets() const { return buckets_.early(); }

 private:
  static GradientBuckets init(const Parameters<T>& params, std::size_t bucket_bytes) {
    if (bucket_bytes < 4096)
      throw ConfigError(cifarnet::detail::concat("NcclOverlappedAllReduce: bucket_bytes = ", bucket_bytes,
                                                 " (at least 4096)"));
    if (!params.allocated())
      throw ConfigError("NcclOverlappedAllReduce: the model's parameters are not allocated yet");
    return GradientBuckets(params.infos(), std::size_t(params.grads().size()), bucket_bytes / sizeof(T));
  }
  /// Bucket [b, e) is final on the compute stream: the NCCL stream waits for
  /// the work queued there so far, then averages it.
  void start(std::size_t b, std::size_t e) {
    Device<backend::Cuda>& dev = comm_->device();
    const backend::cuda::DeviceGuard guard(dev.ordinal());
    backend::cuda::RuntimeRingApi::record(ready_, dev.stream());  // (runs a CUDA graph queue first)
    backend::cuda::RuntimeRingApi::stream_wait(stream_.get(), ready_);
    comm_->start_mean(grads_ + b, e - b, stream_.get());
  }

  Parameters<T>* params_;
  NcclCommunicator* comm_;
  GradientBuckets buckets_;
  // Not attached to the tensor memory: it touches only the gradient arena's device copy.
  backend::cuda::LazyStream stream_;
  backend::cuda::RuntimeEvent ready_;
  float* grads_ = nullptr;
};
#endif  // CIFARNET_WITH_MPI

}  // namespace cifarnet::distributed
