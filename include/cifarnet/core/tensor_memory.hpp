// cifarnet/core/tensor_memory.hpp — where a tensor's elements live.
//
// Every Tensor<T> (and Buffer<T>) allocates through TensorAllocator<T>. By
// default that is host memory (64-byte aligned). A backend whose memory is
// not the host's (the CUDA backend) gives a TensorMemory, and a model makes
// it current on its thread while it runs its layers (TensorMemoryScope): the
// buffers its layers size in forward and backward are then device memory,
// which only the backend's ops read and write (docs/ARCHITECTURE.md,
// "Storage"). A tensor made outside such a scope is host memory, wherever
// it is resized later; each allocation is freed by the memory that made it.
//
// The allocator is stateless (all compare equal), so tensors move, swap and
// copy as before; a copy made outside a scope is a host tensor, and the
// host copies elements only from host tensors (the CUDA model hands back
// host copies of its outputs: nn/model.hpp).
//
// Host blocks of 2 MiB or more start on a 2 MiB boundary, and on Linux their
// whole 2 MiB extents are advised as transparent huge pages (madvise
// MADV_HUGEPAGE; Debian's kernels back only advised memory so): a training
// step streams its activations and gradients through memory several
// megabytes at a time, and on 4 KiB pages every pass over a tensor misses
// the TLB once a page and its prefetches stop at each page's end. On a
// 2-core AMX Xeon, ResNet-20/56 training 1.02-1.11x as fast with the
// advice as without (docs/BENCHMARKS.md, 2026-12-05 09:21). set_huge_pages(false) or the
// environment's CIFARNET_HUGE_PAGES=0 turns the advice off (the alignment
// stays: it depends on the size alone, so a block is freed as it was made);
// any other value of it is a ConfigError naming it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cifarnet/core/error.hpp"

namespace cifarnet {

/// A memory resource for tensors (a backend's device memory).
class TensorMemory {
 public:
  virtual ~TensorMemory() = default;
  /// `bytes` of storage (throws on failure; never returns null for bytes > 0).
  virtual void* allocate(std::size_t bytes) = 0;
  /// Frees what allocate() returned.
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
};

namespace detail {

/// Which memory made each live allocation that is not host memory.
class TensorMemoryRegistry {
 public:
  static TensorMemoryRegistry& instance() {
    static TensorMemoryRegistry* r = new TensorMemoryRegistry;  // outlives every static tensor
    return *r;
  }
  void add(void* p, TensorMemory* m) {
    const std::lock_guard<std::mutex> lock(mu_);
    owners_[p] = m;
    live_.store(owners_.size(), std::memory_order_release);
  }
  /// The memory that made `p` (and forgets it), or null for host memory.
  TensorMemory* take(void* p) noexcept {
    if (live_.load(std::memory_order_acquire) == 0) return nullptr;  // host-only programs: no lock
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = owners_.find(p);
    if (it == owners_.end()) return nullptr;
    TensorMemory* m = it->second;
    owners_.erase(it);
    live_.store(owners_.size(), std::memory_order_release);
    return m;
  }
  /// Live allocations made by some TensorMemory (tests).
  std::size_t live() const { return live_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::unordered_map<void*, TensorMemory*> owners_;
  std::atomic<std::size_t> live_{0};
};

inline TensorMemory*& current_tensor_memory() {
  thread_local TensorMemory* m = nullptr;
  return m;
}

/// A transparent huge page's size, and the host block size from which
/// blocks start on its boundary (and have their whole extents advised).
inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

/// An on/off switch from the environment variable `name` whose value is
/// `value`: unset (null) or 1: on, 0: off (blanks around it allowed);
/// anything else is a ConfigError naming the variable and what 0 means.
inline bool env_switch(const char* name, const char* value, const char* off_means) {
  if (!value) return true;
  const std::string s = value;
  const std::size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  const std::string t = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  if (t == "0" || t == "1") return t == "1";
  throw ConfigError(concat(name, "=\"", s, "\": expected 0 (", off_means, ") or 1"));
}

/// CIFARNET_HUGE_PAGES's value (env_switch): unset or 1: the advice, 0:
/// none; anything else is a ConfigError, thrown by the first host
/// allocation.
inline bool huge_pages_from_env(const char* value) {
  return env_switch("CIFARNET_HUGE_PAGES", value, "no huge-page advice");
}

/// CIFARNET_STREAMING_STORES's value (env_switch): unset or 1: the host
/// passes that write a large tensor kept for later may use streaming
/// stores (backend/host/stream_store.hpp), 0: plain stores only; anything
/// else is a ConfigError, thrown by the first pass that asks.
inline bool streaming_stores_from_env(const char* value) {
  return env_switch("CIFARNET_STREAMING_STORES", value, "plain stores only");
}
/// Whether those passes may stream: as the environment says (read once),
/// until set_streaming_stores() says otherwise.
inline std::atomic<bool>& streaming_stores_on() {
  static std::atomic<bool> on{streaming_stores_from_env(std::getenv("CIFARNET_STREAMING_STORES"))};
  return on;
}

/// Whether host blocks get the huge-page advice: as the environment says
/// (huge_pages_from_env, read once), until set_huge_pages() says otherwise.
inline std::atomic<bool>& huge_pages_on() {
  static std::atomic<bool> on{huge_pages_from_env(std::getenv("CIFARNET_HUGE_PAGES"))};
  return on;
}
/// How many host blocks the kernel took the advice for (tests, benchmarks).
inline std::atomic<std::size_t>& huge_page_advised() {
  static std::atomic<std::size_t> n{0};
  return n;
}

/// The alignment of a host block of `bytes`.
constexpr std::align_val_t host_alignment(std::size_t bytes) {
  return std::align_val_t{bytes >= kHugePageBytes ? kHugePageBytes : std::size_t(64)};
}

/// `bytes` of host memory (host_alignment), its whole 2 MiB extents advised
/// as huge pages where huge_pages_on(). The advice is a hint: where the
/// kernel has no transparent huge pages it is refused and nothing changes.
inline void* host_allocate(std::size_t bytes) {
  const bool on = huge_pages_on().load(std::memory_order_relaxed);  // first: a bad variable throws here
  const bool advise = on && bytes >= kHugePageBytes;
  void* p = ::operator new(bytes, host_alignment(bytes));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (advise && ::madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE) == 0)
    huge_page_advised().fetch_add(1, std::memory_order_relaxed);
#else
  (void)advise;
#endif
  return p;
}
inline void host_deallocate(void* p, std::size_t bytes) noexcept {
  ::operator delete(p, host_alignment(bytes));
}
/// A unique_ptr deleter for a host_allocate block of `bytes`.
struct HostFree {
  std::size_t bytes = 0;
  void operator()(void* p) const noexcept { host_deallocate(p, bytes); }
};
/// `bytes` of host memory (host_allocate) owned by a unique_ptr.
template <class T>
std::unique_ptr<T, HostFree> host_unique(std::size_t bytes) {
  return std::unique_ptr<T, HostFree>(static_cast<T*>(host_allocate(bytes)), HostFree{bytes});
}

}  // namespace detail

/// Whether host tensors of 2 MiB or more are advised as transparent huge
/// pages from now on (the default: yes, unless CIFARNET_HUGE_PAGES=0).
/// Blocks already allocated keep what they had.
inline void set_huge_pages(bool on) { detail::huge_pages_on().store(on, std::memory_order_relaxed); }
/// Whether the advice is on (set_huge_pages).
inline bool huge_pages() { return detail::huge_pages_on().load(std::memory_order_relaxed); }

/// Whether the host passes that write a tensor the step keeps for later
/// (a residual block's output) and that is at least as large as the L2
/// caches of the threads writing it use streaming stores from now on (the
/// default: yes, unless CIFARNET_STREAMING_STORES=0): the same values,
/// written without first reading each line from memory
/// (backend/host/stream_store.hpp).
inline void set_streaming_stores(bool on) {
  detail::streaming_stores_on().store(on, std::memory_order_relaxed);
}
/// Whether streaming stores are on (set_streaming_stores).
inline bool streaming_stores() { return detail::streaming_stores_on().load(std::memory_order_relaxed); }

/// Makes `m` the memory of the tensors this thread allocates until the scope
/// ends (null: host memory), then restores the previous one. Scopes nest.
class TensorMemoryScope {
 public:
  explicit TensorMemoryScope(TensorMemory* m) : saved_(detail::current_tensor_memory()) {
    detail::current_tensor_memory() = m;
  }
  ~TensorMemoryScope() { detail::current_tensor_memory() = saved_; }
  TensorMemoryScope(const TensorMemoryScope&) = delete;
  TensorMemoryScope& operator=(const TensorMemoryScope&) = delete;

 private:
  TensorMemory* saved_;
};

/// The memory tensors allocated now on this thread come from (null: host).
inline TensorMemory* current_tensor_memory() { return detail::current_tensor_memory(); }

/// Host memory always (detail::host_allocate: 2 MiB-aligned and advised as
/// huge pages from 2 MiB), whatever memory is current: the backends' own
/// host buffers (bf16 activations and gradients, mask bits) through
/// HostVector.
template <class T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <class U>
  HostAllocator(const HostAllocator<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator
  T* allocate(std::size_t n) { return static_cast<T*>(detail::host_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept {
    if (p) detail::host_deallocate(p, n * sizeof(T));
  }
  template <class U>
  bool operator==(const HostAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const HostAllocator<U>&) const noexcept {
    return false;
  }
};
/// A std::vector in host memory from HostAllocator.
template <class T>
using HostVector = std::vector<T, HostAllocator<T>>;

/// The tensors' allocator: the current TensorMemory, else host memory
/// (64-byte aligned; 2 MiB-aligned and advised as huge pages from 2 MiB:
/// detail::host_allocate); frees each block through the memory that made it.
template <class T>
struct TensorAllocator {
  using value_type = T;

  TensorAllocator() = default;
  template <class U>
  TensorAllocator(const TensorAllocator<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (TensorMemory* m = detail::current_tensor_memory(); m && bytes > 0) {
      void* p = m->allocate(bytes);
      try {
        detail::TensorMemoryRegistry::instance().add(p, m);
      } catch (...) {
        m->deallocate(p, bytes);
        throw;
      }
      return static_cast<T*>(p);
    }
    return static_cast<T*>(detail::host_allocate(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (!p) return;
    if (TensorMemory* m = detail::TensorMemoryRegistry::instance().take(p)) {
      m->deallocate(p, n * sizeof(T));
      return;
    }
    detail::host_deallocate(p, n * sizeof(T));
  }
  template <class U>
  bool operator==(const TensorAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const TensorAllocator<U>&) const noexcept {
    return false;
  }
};

}  // namespace cifarnet
