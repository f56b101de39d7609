// cifarnet/backend/cuda/common.hpp — what every CUDA op shares: error
// translation (CUDA runtime, cuDNN, cuBLAS → cifarnet::BackendError), RAII
// device memory (DeviceBuffer) and cuDNN descriptors, the device (one CUDA
// stream with its cuDNN and cuBLAS handles and a grow-only workspace pool),
// and Staging, which lets an op take either device pointers or host pointers
// (BasicStaging of host_config.hpp over the CUDA runtime).
//
// Pointers: ops follow the interfaces of ops/ops.hpp. A pointer into a range
// the Device mirrors (a device-resident parameter arena, Model::
// set_device_resident) maps to its device copy; a pointer that CUDA knows as
// device or managed memory (a model's activations and gradients: Device::
// tensor_memory) is used in place; any other pointer (an input batch, a
// host tensor of the staged debugging path) is staged: copied to a device buffer
// owned by the Device before the op runs (inputs) and copied back when it ends
// (outputs). The same host pointer passed twice in one call (in-place ReLU)
// maps to the same device buffer. So every model of the library runs on the
// CUDA backend unchanged, and code that keeps its tensors on the device pays
// no copies.
//
// PCIe traffic: every host<->device copy goes through counted_copy, so
// Device::transfers() reports the bytes and copies of each direction.
//
// Staged outputs are poisoned (every byte 0xFF, a NaN) before the op runs, so
// an op that leaves part of its output unwritten returns NaN there instead
// of whatever an earlier op left in the staging buffer.
//
// Devices: every op makes the model's GPU current for its duration with a
// scoped guard (DeviceGuard) and restores the caller's current device after,
// so a model built on GPU 1 runs and allocates on GPU 1 whatever device the
// calling thread had current. Device buffers are allocated under the same
// guard.
//
// Invariants (as the oneDNN backend): descriptors and algorithm choices are
// built once per geometry and reused. Every op of a model runs on the
// model's one stream, so ops see each other's results in order; an op waits
// for the stream before it returns only when a value reaches the host (a
// staged output copied back, a loss, a sum), so a step on device tensors
// queues its ops and the host waits once for the loss. An op object is
// stateful and not thread-safe: one per layer, used by one thread.
//
// Only host APIs of the CUDA runtime, cuDNN and cuBLAS are used, so this
// backend compiles with any C++17 compiler (no nvcc needed in user code).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/cuda/device_query.hpp"
#include "cifarnet/backend/cuda/host_config.hpp"
#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor_memory.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace backend {
namespace cuda {

// ------------------------------------------------------------------ errors

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "unknown cuBLAS status";
  }
}

/// Throws BackendError naming `what` and the CUDA runtime error.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw BackendError(
        detail::concat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}
/// Throws BackendError naming `what`, the cuDNN status and cuDNN's own
/// message for it (cudnnGetLastErrorString: which attribute or dimension a
/// graph descriptor refused, say), when it has one.
inline void check(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char detail_msg[512] = {0};
  cudnnGetLastErrorString(detail_msg, sizeof detail_msg);
  throw BackendError(detail::concat("cuDNN ", what, ": ", cudnnGetErrorString(s), detail_msg[0] ? " (" : "",
                                    detail_msg, detail_msg[0] ? ")" : ""));
}
/// Throws BackendError naming `what` and the cuBLAS status.
inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw BackendError(detail::concat("cuBLAS ", what, ": ", cublas_status_name(s)));
}

/// int for cuDNN/cuBLAS arguments; throws ShapeError past INT_MAX.
inline int to_int(std::size_t v, const char* what) {
  if (v > std::size_t(INT_MAX))
    throw ShapeError(detail::concat("CUDA backend: ", what, " = ", v, " exceeds INT_MAX"));
  return int(v);
}

// ------------------------------------------------------------ device guard

/// cudaGetDevice / cudaSetDevice for BasicDeviceGuard (0 on success).
struct RuntimeDeviceApi {
  static int get(int* d) {
    if (cudaGetDevice(d) == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return 1;
  }
  static int set(int d) {
    if (cudaSetDevice(d) == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return 1;
  }
};

/// Makes a device current for a scope, restoring the caller's after.
using DeviceGuard = BasicDeviceGuard<RuntimeDeviceApi>;

/// f() with device `ordinal` current (then the caller's again), for
/// destructors: never throws; a failed switch runs f() on the current device.
template <class F>
void on_device_noexcept(int ordinal, F&& f) noexcept {
  int previous = -1;
  if (ordinal < 0 || cudaGetDevice(&previous) != cudaSuccess) {
    (void)cudaGetLastError();
    f();
    return;
  }
  const bool switched = previous != ordinal && cudaSetDevice(ordinal) == cudaSuccess;
  (void)cudaGetLastError();
  f();
  if (switched) (void)cudaSetDevice(previous);
}

// ------------------------------------------------------------------ memory

/// Device memory for `n` elements of T, owned (cudaMalloc / cudaFree); move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// `n` elements on the calling thread's current device.
  explicit DeviceBuffer(std::size_t n) { resize(n); }
  /// `n` elements on device `ordinal` (made current while allocating; the
  /// caller's current device is restored); later growth stays on it.
  DeviceBuffer(int ordinal, std::size_t n) : ordinal_(ordinal) { resize(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), ordinal_(o.ordinal_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      ordinal_ = o.ordinal_;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  /// Grows to at least `n` elements (contents lost when it grows; never shrinks).
  void reserve(std::size_t n) {
    if (n <= n_) return;
    resize(n);
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  void resize(std::size_t n) {
    release();
    if (n == 0) return;
    void* p = nullptr;
    cudaError_t e = cudaSuccess;
    if (ordinal_ >= 0) {
      const DeviceGuard guard(ordinal_);
      e = cudaMalloc(&p, n * sizeof(T));
    } else {
      e = cudaMalloc(&p, n * sizeof(T));
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw BackendError(detail::concat("CUDA cudaMalloc of ", n * sizeof(T), " bytes: ", cudaGetErrorName(e),
                                        " (", cudaGetErrorString(e), ")"));
    }
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  void release() noexcept {
    if (p_) on_device_noexcept(ordinal_, [&] { (void)cudaFree(p_); });
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
  int ordinal_ = -1;  ///< the device it lives on; -1: the current one at allocation
};

/// Page-locked host memory (cudaHostAlloc): what the device copies into and
/// out of asynchronously (the read-back area, the input ring). Move-only.
class PinnedBytes {
 public:
  PinnedBytes() = default;
  explicit PinnedBytes(std::size_t n) {
    if (n == 0) return;
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);  // pinned for every device's copies
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw BackendError(detail::concat("CUDA cudaHostAlloc of ", n, " bytes: ", cudaGetErrorName(e), " (",
                                        cudaGetErrorString(e), ")"));
    }
    p_ = static_cast<unsigned char*>(p);
    n_ = n;
  }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  PinnedBytes(PinnedBytes&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBytes& operator=(PinnedBytes&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~PinnedBytes() { release(); }
  unsigned char* data() { return p_; }
  const unsigned char* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  void release() noexcept {
    if (p_) (void)cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  unsigned char* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Attaches / detaches a stream to GPU `ordinal`'s tensor memory (its
/// frees then mark that stream; defined after DeviceTensorMemory).
inline void attach_tensor_stream(int ordinal, cudaStream_t s);
inline void detach_tensor_stream(int ordinal, cudaStream_t s) noexcept;

/// A cudaEvent_t without timing, made on first get() on the calling
/// thread's current device; movable.
class RuntimeEvent {
 public:
  RuntimeEvent() = default;
  RuntimeEvent(const RuntimeEvent&) = delete;
  RuntimeEvent& operator=(const RuntimeEvent&) = delete;
  RuntimeEvent(RuntimeEvent&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  RuntimeEvent& operator=(RuntimeEvent&& o) noexcept {
    if (this != &o) {
      if (e_) (void)cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~RuntimeEvent() {
    if (e_) (void)cudaEventDestroy(e_);
  }
  cudaEvent_t get() {
    if (!e_) check(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreate");
    return e_;
  }
  /// The event, null when never made.
  cudaEvent_t made() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

/// A non-blocking stream on GPU `ordinal`, made on first use (`what` names
/// it in errors); `attach`: attached to the GPU's tensor memory while it
/// lives, for a stream whose work uses tensors (BasicTensorCache::attach).
class LazyStream {
 public:
  LazyStream(int ordinal, bool attach, const char* what) : ordinal_(ordinal), attach_(attach), what_(what) {}
  LazyStream(const LazyStream&) = delete;
  LazyStream& operator=(const LazyStream&) = delete;
  ~LazyStream() {
    if (!s_) return;
    if (attach_) detach_tensor_stream(ordinal_, s_);
    on_device_noexcept(ordinal_, [&] { (void)cudaStreamDestroy(s_); });
  }
  cudaStream_t get() {
    if (!s_) {
      const DeviceGuard guard(ordinal_);
      check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), what_);
      try {
        if (attach_) attach_tensor_stream(ordinal_, s_);
      } catch (...) {
        (void)cudaStreamDestroy(s_);
        s_ = nullptr;
        throw;
      }
    }
    return s_;
  }
  /// The stream if made, else null (makes nothing).
  cudaStream_t made() const { return s_; }

 private:
  int ordinal_;
  bool attach_;
  const char* what_;
  cudaStream_t s_ = nullptr;
};

/// The CUDA runtime as BasicInputRing's API: a copy stream and events,
/// both made on first use on the ring's device, and host memory that is
/// page-locked when it can be (else pageable, pinned() false).
struct RuntimeRingApi {
  /// The copy stream: it writes the model's input tensors (attached).
  class Stream : public LazyStream {
   public:
    explicit Stream(int ordinal) : LazyStream(ordinal, true, "cudaStreamCreate (the input copy stream)") {}
  };
  using Event = RuntimeEvent;  // made on the ring's device: its caller holds a guard
  class HostBytes {
   public:
    HostBytes() = default;
    explicit HostBytes(std::size_t n) {
      try {
        pinned_ = PinnedBytes(n);
      } catch (const BackendError&) {  // no page-locked memory to be had: pageable, still correct
        pageable_.resize(n);
      }
    }
    unsigned char* data() { return pinned_.size() ? pinned_.data() : pageable_.data(); }
    std::size_t size() const { return pinned_.size() ? pinned_.size() : pageable_.size(); }
    bool pinned() const { return pinned_.size() > 0; }

   private:
    PinnedBytes pinned_;
    std::vector<unsigned char> pageable_;
  };
  static void record(Event& e, cudaStream_t s) { check(cudaEventRecord(e.get(), s), "cudaEventRecord"); }
  static void stream_wait(cudaStream_t s, Event& e) {
    check(cudaStreamWaitEvent(s, e.get(), 0), "cudaStreamWaitEvent");
  }
  static void host_wait(Event& e) { check(cudaEventSynchronize(e.get()), "cudaEventSynchronize"); }
  template <class D>
  static void copy_async(D&, cudaStream_t s, void* dst, const void* src, std::size_t bytes) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s),
          "copy of an input batch to the device");
  }
};

/// The CUDA runtime as BasicTensorCache's API (backend/cuda/host_config.hpp).
struct RuntimeTensorApi {
  using Stream = cudaStream_t;
  using Event = RuntimeEvent;
  static void record(Event& e, Stream s, int ordinal) {
    const DeviceGuard guard(ordinal);  // the event is made on the stream's GPU
    check(cudaEventRecord(e.get(), s), "cudaEventRecord (a freed tensor)");
  }
  /// cudaEventQuery: not ready is false; an error (a failed GPU) counts as
  /// done, and is left for the next call that checks.
  static bool done(Event& e) {
    if (!e.made()) return true;
    const cudaError_t r = cudaEventQuery(e.made());
    if (r == cudaErrorNotReady) return false;
    if (r != cudaSuccess) (void)cudaGetLastError();
    return true;
  }
  static void wait(Event& e) {
    if (e.made()) check(cudaEventSynchronize(e.made()), "cudaEventSynchronize (a freed tensor)");
  }
  static void sync_device(int ordinal) noexcept {
    on_device_noexcept(ordinal, [&] { (void)cudaDeviceSynchronize(); });
  }
  static void* try_malloc(int ordinal, std::size_t bytes, std::string* why) {
    const DeviceGuard guard(ordinal);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();
    if (why) *why = detail::concat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    return nullptr;
  }
  static void free(int ordinal, void* p) noexcept {
    on_device_noexcept(ordinal, [&] { (void)cudaFree(p); });
  }
};

/// Tensors in one GPU's memory: the TensorMemory a CUDA model's layers
/// allocate from (core/tensor_memory.hpp), over BasicTensorCache: freed
/// blocks are kept per size and reused once events on the GPU's attached
/// streams show it is past their last use (no device-wide wait on a free);
/// two models on one GPU run on two streams, and both are attached.
class DeviceTensorMemory final : public TensorMemory {
 public:
  explicit DeviceTensorMemory(int ordinal) : cache_(ordinal) {}
  void* allocate(std::size_t bytes) override { return cache_.allocate(bytes); }
  /// A free first runs the work a Device queued (its launch queue: the
  /// queued work may still use the block, and the block's events must come
  /// after that work on the stream).
  void deallocate(void* p, std::size_t bytes) noexcept override {
    if (p) run_queued();
    cache_.deallocate(p, bytes);
  }
  /// `flush` runs the queued work of the Device whose stream is `s` (it
  /// queues while CUDA graphs are on); cleared by set_flusher(s, {}).
  void set_flusher(cudaStream_t s, std::function<void()> flush) {
    const std::lock_guard<std::mutex> lock(flush_mu_);
    for (auto it = flushers_.begin(); it != flushers_.end(); ++it)
      if (it->first == s) {
        flushers_.erase(it);
        break;
      }
    if (flush) flushers_.emplace_back(s, std::move(flush));
  }
  /// Whether the attached streams are all among the `n` at `s`.
  bool streams_within(const cudaStream_t* s, std::size_t n) const { return cache_.streams_within(s, n); }
  /// A stream whose work may use this GPU's tensors (BasicTensorCache::attach).
  void attach(cudaStream_t s) { cache_.attach(s); }
  void detach(cudaStream_t s) noexcept { cache_.detach(s); }
  /// Bytes held in freed blocks, ready for reuse or pending.
  std::size_t cached_bytes() const { return cache_.cached_bytes(); }
  /// Waits for the pending blocks and frees every cached one (cudaFree).
  void release_cached() {
    run_queued();
    cache_.release_cached();
  }
  /// At exit: frees the cache; blocks freed later go straight back.
  void close() noexcept { cache_.close(); }
  /// Whether `p` points into one of its blocks (no driver query).
  bool owns(const void* p) const { return cache_.owns(p); }

 private:
  void run_queued() noexcept {
    const std::lock_guard<std::mutex> lock(flush_mu_);
    for (auto& f : flushers_) {
      try {
        f.second();
      } catch (...) {  // the queued work failed: its op reports it; nothing may still use the block
        (void)cudaDeviceSynchronize();
      }
    }
  }
  BasicTensorCache<RuntimeTensorApi> cache_;
  std::mutex flush_mu_;
  std::vector<std::pair<cudaStream_t, std::function<void()>>> flushers_;
};

/// The CUDA runtime as BasicLaunchQueue's API: stream capture (thread-local
/// mode: another thread's calls do not end it) into a graph, instantiated,
/// and its launch.
struct RuntimeGraphApi {
  using Stream = cudaStream_t;
  class Graph {
   public:
    Graph() = default;
    explicit Graph(cudaGraphExec_t e) : e_(e) {}
    Graph(Graph&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
    Graph& operator=(Graph&& o) noexcept {
      if (this != &o) {
        reset();
        e_ = o.e_;
        o.e_ = nullptr;
      }
      return *this;
    }
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph() { reset(); }
    cudaGraphExec_t get() const { return e_; }

   private:
    void reset() noexcept {
      if (e_) (void)cudaGraphExecDestroy(e_);
      e_ = nullptr;
    }
    cudaGraphExec_t e_ = nullptr;
  };
  static void begin_capture(cudaStream_t s) {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  }
  static Graph end_capture(cudaStream_t s) {
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // a capture error is not sticky: clear it for the eager run
      if (g) (void)cudaGraphDestroy(g);
      check(e, "cudaStreamEndCapture");
    }
    cudaGraphExec_t x = nullptr;
    const cudaError_t i = cudaGraphInstantiate(&x, g, 0);
    (void)cudaGraphDestroy(g);
    check(i, "cudaGraphInstantiate");
    return Graph(x);
  }
  static void end_capture_noexcept(cudaStream_t s) noexcept {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(s, &g);
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
  }
  static void launch(Graph& g, cudaStream_t s) { check(cudaGraphLaunch(g.get(), s), "cudaGraphLaunch"); }
};
using LaunchQueue = BasicLaunchQueue<RuntimeGraphApi>;

namespace memory_detail {
/// Every GPU's tensor memory, by ordinal, with the mutex that guards the map.
struct TensorMemories {
  std::mutex mu;
  std::map<int, std::unique_ptr<DeviceTensorMemory>> all;
};
inline TensorMemories& tensor_memories() {
  static auto* m = new TensorMemories;  // never freed: it outlives every tensor
  return *m;
}
}  // namespace memory_detail

/// GPU `ordinal`'s tensor memory: one per GPU for the whole process (it
/// outlives every tensor, static ones included).
inline DeviceTensorMemory& device_tensor_memory(int ordinal) {
  auto& t = memory_detail::tensor_memories();
  const std::lock_guard<std::mutex> lock(t.mu);
  if (t.all.empty())  // registered after the CUDA runtime's own exit handler, so it runs before it
    std::atexit([] {
      auto& m = memory_detail::tensor_memories();
      const std::lock_guard<std::mutex> l(m.mu);
      for (auto& [ordinal, memory] : m.all) memory->close();
    });
  auto& m = t.all[ordinal];
  if (!m) m = std::make_unique<DeviceTensorMemory>(ordinal);
  return *m;
}

/// Whether `p` points into a block of some GPU's tensor memory.
inline bool in_tensor_memory(const void* p) {
  auto& t = memory_detail::tensor_memories();
  const std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [ordinal, memory] : t.all)
    if (memory->owns(p)) return true;
  return false;
}

inline void attach_tensor_stream(int ordinal, cudaStream_t s) { device_tensor_memory(ordinal).attach(s); }
inline void detach_tensor_stream(int ordinal, cudaStream_t s) noexcept {
  try {
    device_tensor_memory(ordinal).detach(s);
  } catch (...) {  // no memory for the map's node: it was never attached
  }
}

/// True if CUDA can dereference `p` on the device (device or managed memory).
/// The backend's own tensors (the pointers most ops see) are known from the
/// tensor memory's blocks without asking the driver.
inline bool is_device_pointer(const void* p) {
  if (!p) return false;
  if (in_tensor_memory(p)) return true;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// ------------------------------------------------------------- descriptors

/// RAII wrapper of a cuDNN descriptor type (create on construction, destroy
/// on destruction); move-only.
template <class H, cudnnStatus_t (*Create)(H*), cudnnStatus_t (*Destroy)(H)>
class Descriptor {
 public:
  Descriptor() { check(Create(&h_), "create descriptor"); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor(Descriptor&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    if (this != &o) {
      if (h_) (void)Destroy(h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  ~Descriptor() {
    if (h_) (void)Destroy(h_);
  }
  operator H() const { return h_; }  // NOLINT: passes straight to cuDNN calls

 private:
  H h_ = nullptr;
};

using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using LrnDesc = Descriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

/// Sets `d` to a float tensor of logical dims (n, c, h, w) with explicit strides.
inline void set_strided(TensorDesc& d, std::size_t n, std::size_t c, std::size_t h, std::size_t w,
                        std::size_t sn, std::size_t sc, std::size_t sh, std::size_t sw) {
  check(cudnnSetTensor4dDescriptorEx(d, CUDNN_DATA_FLOAT, to_int(n, "n"), to_int(c, "c"), to_int(h, "h"),
                                     to_int(w, "w"), to_int(sn, "stride"), to_int(sc, "stride"),
                                     to_int(sh, "stride"), to_int(sw, "stride")),
        "cudnnSetTensor4dDescriptorEx");
}

/// Sets `d` to a packed float activation (n, c, h, w) laid out in format `f`.
/// `row` is the padded row pitch and `plane` the padded map (h_alloc x w_alloc)
/// when the tensor is a view into a larger padded buffer.
inline void set_activation(TensorDesc& d, DataFormat f, std::size_t n, std::size_t c, std::size_t h,
                           std::size_t w, std::size_t h_alloc = 0, std::size_t w_alloc = 0) {
  const std::size_t H = h_alloc ? h_alloc : h, W = w_alloc ? w_alloc : w;
  if (f == DataFormat::NCHW)
    set_strided(d, n, c, h, w, c * H * W, H * W, W, 1);
  else
    set_strided(d, n, c, h, w, H * W * c, 1, W * c, c);
}

/// Offset (elements) of pixel (top, left) of a (c, H, W) map in format `f`.
inline std::size_t pixel_offset(DataFormat f, std::size_t c, std::size_t W, std::size_t top,
                                std::size_t left) {
  return f == DataFormat::NCHW ? top * W + left : (top * W + left) * c;
}

/// Whether a geometry's padding differs before and after (TF SAME with a
/// stride or an even kernel, the ResNet's explicit padding). cuDNN's
/// convolution pads symmetrically, so Conv2d convolves an explicitly padded
/// copy of such an input with no padding of its own (PaddedInput; the
/// graph's shape: conv_shape in backend/cuda/graph.hpp). Pooling needs
/// none: its kernels clip each window to the input.
inline bool asymmetric_padding(const ConvGeom& g) { return g.pt != g.pb || g.pl != g.pr; }

/// The padded copy's geometry (pad_copy and unpad, backend/cuda/kernels.hpp,
/// fill and read it).
struct PaddedInput {
  bool on = false;           ///< asymmetric_padding(g): the op reads the copy
  std::size_t size = 0;      ///< elements of the padded copy
  std::size_t interior = 0;  ///< offset of the input's first pixel in the copy
  TensorDesc whole;          ///< the padded copy
  TensorDesc inside;         ///< the input's place inside the copy

  /// Sets the copy up for `g` with `c` channels (nothing when the padding
  /// is symmetric).
  void setup(const ConvGeom& g, std::size_t c) {
    on = asymmetric_padding(g);
    if (!on) return;
    const std::size_t ph = g.ih + g.pt + g.pb, pw = g.iw + g.pl + g.pr;
    size = g.n * c * ph * pw;
    interior = pixel_offset(g.fmt, c, pw, g.pt, g.pl);
    set_activation(whole, g.fmt, g.n, c, ph, pw);
    set_activation(inside, g.fmt, g.n, c, g.ih, g.iw, ph, pw);
  }
};

/// The CUDA runtime as the copy API of BasicStaging, BasicMirror and
/// counted_copy (defined after Device<Cuda>).
struct RuntimeCopyApi {
  using Guard = DeviceGuard;
  static bool is_device(const void* p) { return is_device_pointer(p); }
  static void copy(Device<Cuda>& dev, void* dst, const void* src, std::size_t bytes, CopyDirection dir,
                   const char* what);
  static void poison(Device<Cuda>& dev, void* p, std::size_t bytes);
};

/// The mirrored host ranges of a Device<Cuda> (its model's parameter arena
/// when device-resident).
using MirrorSet = BasicMirrorSet<RuntimeCopyApi, Device<Cuda>>;

/// The input ring of a Device<Cuda>: pinned slots, a copy stream, events.
using InputRing = BasicInputRing<RuntimeRingApi, Device<Cuda>>;

/// The read-back area of a Device<Cuda>: device room, two pinned host buffers.
using Readback = BasicReadback<RuntimeCopyApi, Device<Cuda>, PinnedBytes, DeviceBuffer<unsigned char>>;

}  // namespace cuda
}  // namespace backend

/// The CUDA device: one stream with its cuDNN and cuBLAS handles, and
/// grow-only device buffers shared by every op of one model (workspace and
/// staging), with the convolution options of the model's ops.
///
/// Which GPU: the ordinal given, or by default CIFARNET_CUDA_DEVICE when set,
/// else the process's MPI/Slurm local rank modulo the GPUs present, else 0
/// (backend/cuda/host_config.hpp, choose_device). The constructor, like
/// every op, restores the calling thread's current device when it returns.
/// Throws BackendError when no GPU is usable (the message says why), and
/// ConfigError when CIFARNET_CUDA_DEVICE or CIFARNET_CUDA_WORKSPACE_MB is not
/// a number.
template <>
struct Device<backend::Cuda> {
  using ConvOptions = backend::cuda::ConvOptions;
  /// The process's GPU (see above), with ConvOptions from the environment
  /// (CIFARNET_CUDA_TF32, CIFARNET_CUDA_DETERMINISTIC; defaults: unset).
  Device() : Device(default_ordinal()) {}
  /// GPU `ordinal`, with ConvOptions from the environment.
  explicit Device(int ordinal) : Device(ordinal, backend::cuda::conv_options_from_env()) {}
  Device(int ordinal, ConvOptions conv)
      : ordinal_(ordinal),
        conv_(conv),
        workspace_limit_(backend::cuda::workspace_limit_bytes(std::getenv("CIFARNET_CUDA_WORKSPACE_MB"))) {
    namespace cu = backend::cuda;
    const int n = cu::device_count();
    if (n == 0) throw BackendError("CUDA backend: no usable GPU (" + cu::no_device_reason() + ")");
    if (ordinal < 0 || ordinal >= n)
      throw BackendError(detail::concat("CUDA backend: device ", ordinal, " requested, ", n, " present"));
    const cu::DeviceGuard guard(ordinal);
    cu::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    try {
      cu::attach_tensor_stream(ordinal, stream_);  // this model's tensors are used on it
      cu::check(cudnnCreate(&cudnn_), "cudnnCreate");
      cu::check(cudnnSetStream(cudnn_, stream_), "cudnnSetStream");
      cu::check(cublasCreate(&cublas_), "cublasCreate");
      cu::check(cublasSetStream(cublas_, stream_), "cublasSetStream");
      // Full fp32 products (no TF32), so results agree with the CPU backends.
      cu::check(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
      cu::check(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
      queue_.set_stream(stream_);
      if (cu::graphs_from_env()) set_graphs(true);
    } catch (...) {
      destroy();
      throw;
    }
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { destroy(); }

  int ordinal() const { return ordinal_; }
  /// Makes this GPU the calling thread's current device (CUDA keeps it per
  /// thread; towers run each GPU from a thread of its own). Ops do not need
  /// it: each makes its device current for its own duration.
  void make_current() const { backend::cuda::check(cudaSetDevice(ordinal_), "cudaSetDevice"); }
  /// How convolutions may compute (TF32 opt-in, deterministic algorithms).
  /// Set it before the first op: choices already made for a geometry stay.
  const ConvOptions& conv_options() const { return conv_; }
  void set_conv_options(const ConvOptions& o) { conv_ = o; }
  /// The compute stream, for work enqueued on it directly: what the
  /// launch queue holds runs first (so the direct work follows it).
  cudaStream_t stream() const {
    run_queued();
    return stream_;
  }
  /// The cuDNN and cuBLAS handles (bound to the stream), for direct calls:
  /// the launch queue runs first.
  cudnnHandle_t cudnn() const {
    run_queued();
    return cudnn_;
  }
  cublasHandle_t cublas() const {
    run_queued();
    return cublas_;
  }

  /// CUDA graphs: while on, stream work submitted through submit() (the
  /// backend's kernels, cuDNN's convolutions) is queued with its signature,
  /// and every direct use of the stream, a wait or a tensor's free first
  /// runs the queue, a repeated segment as one graph (backend/cuda/
  /// host_config.hpp, BasicLaunchQueue). Off by default; on from
  /// CIFARNET_CUDA_GRAPHS=1 or set_graphs(true). Graphs need this Device to
  /// be the only user of its GPU's tensor memory (no second Device on it):
  /// otherwise work runs as it is submitted.
  void set_graphs(bool on) {
    run_queued();
    queue_.enable(on);
    if (queue_.enabled())
      tensor_memory().set_flusher(stream_, [this] {
        try {
          run_queued();
        } catch (...) {  // a tensor's free cannot throw: the next use of this Device does
          deferred_error_ = std::current_exception();
        }
      });
    else
      tensor_memory().set_flusher(stream_, {});
  }
  bool graphs() const { return queue_.enabled(); }
  /// What the launch queue did (segments replayed, captured, run item by
  /// item, and why graphs went off if they did).
  const backend::cuda::LaunchQueueStats& graph_stats() const { return queue_.stats(); }
  /// Enqueues `work(stream)` on the compute stream, or queues it while
  /// graphs are on; `sig` must say everything that decides what it does
  /// (backend/cuda/host_config.hpp, LaunchSignature); `what` names it (a
  /// string literal). `work` may use queued_cudnn() and nothing that runs
  /// the queue.
  template <class F>
  void submit(const char* what, const backend::cuda::LaunchSignature& sig, F&& work) {
    if (!queue_.enabled() || (queue_.empty() && !sole_user())) {  // (another stream could take a freed block)
      const backend::cuda::DeviceGuard guard(ordinal_);
      work(stream());
      return;
    }
    queue_.submit(what, sig, std::forward<F>(work));
  }
  /// The cuDNN handle for work passed to submit() (no queue run).
  cudnnHandle_t queued_cudnn() const { return cudnn_; }
  /// Runs what the launch queue holds (a replayed or captured graph, or
  /// item by item), on this GPU.
  void run_queued() const {
    if (deferred_error_) std::rethrow_exception(std::exchange(deferred_error_, nullptr));
    if (queue_.empty()) return;
    const backend::cuda::DeviceGuard guard(ordinal_);
    queue_.flush();
  }

  /// Device buffer `slot` with at least `n` floats; valid until the next call
  /// for the same slot with a larger size. Slots below kStagingBase are op
  /// temporaries (workspace, padded copies, transposed weights); staging uses
  /// the slots from kStagingBase up.
  float* buffer(std::size_t slot, std::size_t n) {
    if (slot < buffers_.size() && buffers_[slot].size() < (n ? n : 1))
      run_queued();  // queued work may use the buffer that a larger one replaces
    if (slot >= buffers_.size()) {
      buffers_.reserve(slot + 1);
      while (buffers_.size() <= slot) buffers_.emplace_back(ordinal_, 0);
    }
    buffers_[slot].reserve(n ? n : 1);  // allocates on this device (DeviceBuffer's guard)
    return buffers_[slot].data();
  }
  /// A byte workspace of at least `bytes` (cuDNN algorithms).
  void* workspace(std::size_t bytes) {
    return buffer(kWorkspace, (bytes + sizeof(float) - 1) / sizeof(float));
  }

  /// Keeps host buffer [host, host + n) on this GPU: a device copy is
  /// allocated and every op reaching the range through Staging uses it in
  /// place, synchronised lazily with the host copy (BasicMirror; the host
  /// copy holds the values: it is uploaded before the first op reads it).
  /// Used by Model for a device-resident parameter arena; clear_mirrors()
  /// drops them.
  void mirror(float* host, std::size_t n) {
    if (!host || n == 0) return;
    backend::cuda::DeviceBuffer<float> d(ordinal_, n);
    float* dp = d.data();
    mirrors_.add(*this, host, dp, n, backend::cuda::MirrorState::HostDirty);  // throws on an overlap
    mirror_buffers_[host] = std::move(d);
  }
  /// Stops mirroring the range that starts at `host` (its host copy made
  /// current first) and frees the device copy; nothing when not mirrored.
  void unmirror(const float* host) {
    if (!mirrors_.remove(host)) return;
    backend::cuda::on_device_noexcept(ordinal_, [&] { mirror_buffers_.erase(host); });
  }
  void clear_mirrors() {
    mirrors_.clear();
    backend::cuda::on_device_noexcept(ordinal_, [&] { mirror_buffers_.clear(); });
  }
  /// Expires when this device goes (a handle that outlives it then does nothing).
  std::weak_ptr<const int> life() const { return life_; }
  backend::cuda::MirrorSet& mirrors() { return mirrors_; }

  /// Where ops leave the values they compute for the host (the loss, the
  /// weight decay's term, the numerics check's sum) until one copy brings
  /// them all: core/pending.hpp, BasicReadback.
  backend::cuda::Readback& readback() { return readback_; }
  /// The read-back area of the calls that return their value at once
  /// (evaluation's loss, a clipping norm): kept apart so that they do not
  /// fetch the deferred area's batch early, and a step's Pendings (say
  /// optim::WeightDecay::loss()) stay readable after an evaluation.
  backend::cuda::Readback& readback_now() { return readback_now_; }
  /// How input batches reach this GPU: pinned slots on a copy stream
  /// (BasicInputRing). Model uploads a host input batch through it into
  /// its own device input tensors.
  backend::cuda::InputRing& input_ring() { return input_ring_; }
  /// Device room for `n` bytes of input ring slot `slot` (byte batches;
  /// grow-only, one buffer per slot so the ring's ordering covers it).
  unsigned char* input_bytes(std::size_t slot, std::size_t n) {
    auto& b = input_bytes_.at(slot);
    if (b.size() < n) {
      run_queued();  // queued work may read the buffer this one replaces
      b = backend::cuda::DeviceBuffer<unsigned char>(ordinal_, n);
    }
    return b.data();
  }

  /// The PCIe traffic this device's ops issued (bytes and copies each way);
  /// read() it, or reset() it (which returns the counts) around a step.
  backend::cuda::TransferCounter& transfers() { return transfers_; }
  const backend::cuda::TransferCounter& transfers() const { return transfers_; }

  /// Whether `p` is device memory (a tensor of this backend) rather than host memory.
  static bool is_device_memory(const void* p) { return backend::cuda::is_device_pointer(p); }

  /// Waits for everything queued on the stream.
  void sync() { backend::cuda::check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

  /// The memory of this GPU's tensors: a model's layers allocate their
  /// activations and gradients from it (Model, TensorMemoryScope).
  backend::cuda::DeviceTensorMemory& tensor_memory() { return backend::cuda::device_tensor_memory(ordinal_); }
  /// The `n` floats at `src` (device memory, or the host) into host `dst`,
  /// after everything queued before; counted, and waited for.
  void download(float* dst, const float* src, std::size_t n) {
    namespace cu = backend::cuda;
    if (n == 0) return;
    if (!cu::is_device_pointer(src)) {
      std::copy(src, src + n, dst);
      return;
    }
    const cu::DeviceGuard guard(ordinal_);
    cu::counted_copy<cu::RuntimeCopyApi>(*this, dst, src, n * sizeof(float), cu::CopyDirection::DeviceToHost,
                                         "copy of a model's output to the host");
    sync();
  }

  static constexpr std::size_t kWorkspace = 0;
  static constexpr std::size_t kStagingBase = 8;
  /// Largest workspace an algorithm may ask for (bytes): 512 MiB, or
  /// CIFARNET_CUDA_WORKSPACE_MB (read when the device was made).
  std::size_t workspace_limit() const { return workspace_limit_; }

 private:
  static int default_ordinal() { return backend::cuda::choose_device(backend::cuda::device_count()).ordinal; }
  /// Whether this Device's streams are the only ones on its GPU's tensor memory.
  bool sole_user() {
    const cudaStream_t mine[2] = {stream_, input_ring_.copy_stream().made()};
    return tensor_memory().streams_within(mine, 2);
  }
  void destroy() noexcept {
    try {
      run_queued();
    } catch (...) {  // a failed launch: nothing more to run
    }
    if (stream_)
      backend::cuda::on_device_noexcept(ordinal_, [&] { tensor_memory().set_flusher(stream_, {}); });
    backend::cuda::on_device_noexcept(ordinal_, [&] {  // the handles were made on this GPU
      queue_.drop_graphs();                            // their items hold cuDNN plans made with cudnn_
      if (cublas_) (void)cublasDestroy(cublas_);
      if (cudnn_) (void)cudnnDestroy(cudnn_);
      buffers_.clear();
      mirrors_.clear();
      mirror_buffers_.clear();
      if (stream_) {
        backend::cuda::detach_tensor_stream(ordinal_, stream_);
        (void)cudaStreamDestroy(stream_);
      }
    });
    cublas_ = nullptr;
    cudnn_ = nullptr;
    stream_ = nullptr;
  }

  int ordinal_ = 0;
  ConvOptions conv_;
  std::size_t workspace_limit_;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  mutable backend::cuda::LaunchQueue queue_;
  mutable std::exception_ptr deferred_error_;  ///< a queued launch that failed when a free ran the queue
  std::vector<backend::cuda::DeviceBuffer<float>> buffers_;
  backend::cuda::TransferCounter transfers_;
  backend::cuda::MirrorSet mirrors_;
  std::map<const float*, backend::cuda::DeviceBuffer<float>> mirror_buffers_;  // the mirrors' device copies
  backend::cuda::Readback readback_{*this}, readback_now_{*this};
  backend::cuda::InputRing input_ring_{*this};
  std::array<backend::cuda::DeviceBuffer<unsigned char>, backend::cuda::InputRing::kSlots> input_bytes_;
  std::shared_ptr<const int> life_ = std::make_shared<const int>(0);
};

namespace backend {
namespace cuda {

using Dev = Device<Cuda>;

inline void RuntimeCopyApi::copy(Dev& dev, void* dst, const void* src, std::size_t bytes, CopyDirection dir,
                                 const char* what) {
  check(cudaMemcpyAsync(dst, src, bytes,
                        dir == CopyDirection::HostToDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                        dev.stream()),
        what);
}
inline void RuntimeCopyApi::poison(Dev& dev, void* p, std::size_t bytes) {
  check(cudaMemsetAsync(p, 0xFF, bytes, dev.stream()), "poison of a staged output");
}

/// Staging over the CUDA runtime (see BasicStaging, backend/cuda/host_config.hpp).
using Staging = BasicStaging<RuntimeCopyApi, Dev>;

/// `bytes` from host `src` to device `dst` on dev's stream, counted.
inline void copy_to_device(Dev& dev, void* dst, const void* src, std::size_t bytes, const char* what) {
  counted_copy<RuntimeCopyApi>(dev, dst, src, bytes, CopyDirection::HostToDevice, what);
}
/// `bytes` from device `src` to host `dst` on dev's stream, counted.
inline void copy_to_host(Dev& dev, void* dst, const void* src, std::size_t bytes, const char* what) {
  counted_copy<RuntimeCopyApi>(dev, dst, src, bytes, CopyDirection::DeviceToHost, what);
}

/// Host copy of `n` floats at `p` (device or host pointer) into `h`, for
/// small per-channel vectors an op needs on the host (h keeps its capacity).
inline void to_host(Dev& dev, const float* p, std::size_t n, std::vector<float>& h) {
  h.resize(n);
  if (const float* d = dev.mirrors().map(p, n, true, false)) {  // a device-resident arena: its device copy
    const DeviceGuard guard(dev.ordinal());
    copy_to_host(dev, h.data(), d, n * sizeof(float), "copy to the host");
    dev.sync();
  } else if (is_device_pointer(p)) {
    const DeviceGuard guard(dev.ordinal());
    copy_to_host(dev, h.data(), p, n * sizeof(float), "copy to the host");
    dev.sync();
  } else {
    std::copy(p, p + n, h.begin());
  }
}

/// Writes the `n` host floats `h` to `p`, wherever p lives: a mirrored range
/// (its device copy, which becomes the current one), device memory, or the
/// host. Waits for the copy.
inline void from_host(Dev& dev, const float* h, std::size_t n, float* p) {
  if (n == 0) return;
  if (float* d = dev.mirrors().map(p, n, false, true)) {
    const DeviceGuard guard(dev.ordinal());
    copy_to_device(dev, d, h, n * sizeof(float), "copy to the device");
    dev.sync();
  } else if (is_device_pointer(p)) {
    const DeviceGuard guard(dev.ordinal());
    copy_to_device(dev, p, h, n * sizeof(float), "copy to the device");
    dev.sync();
  } else {
    std::copy(h, h + n, p);
  }
}

/// cuDNN's float scaling factors.
inline const float kOne = 1.0f;
inline const float kZero = 0.0f;

}  // namespace cuda

/// --log-device-placement's line on the CUDA backend (recipes::describe_device).
inline std::string device_description(Cuda) {
  return "device: GPU " + std::to_string(Device<Cuda>().ordinal()) + " (CUDA backend, cuDNN " +
         std::to_string(cudnnGetVersion()) + ")";
}

/// Adds reproducible algorithms only / TF32 allowed to `d`'s cuDNN
/// convolution options (recipes::set_cuda_conv_options).
inline void add_conv_options(Device<Cuda>& d, bool deterministic, bool allow_tf32) {
  cuda::ConvOptions co = d.conv_options();  // CIFARNET_CUDA_TF32 / _DETERMINISTIC, or defaults
  co.deterministic = co.deterministic || deterministic;
  co.allow_tf32 = co.allow_tf32 || allow_tf32;
  d.set_conv_options(co);
}

}  // namespace backend
}  // namespace cifarnet
