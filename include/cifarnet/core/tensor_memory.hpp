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
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <unordered_map>

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

}  // namespace detail

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

/// The tensors' allocator: the current TensorMemory, else 64-byte aligned
/// host memory; frees each block through the memory that made it.
template <class T>
struct TensorAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};

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
    return static_cast<T*>(::operator new(bytes, kAlign));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (!p) return;
    if (TensorMemory* m = detail::TensorMemoryRegistry::instance().take(p)) {
      m->deallocate(p, n * sizeof(T));
      return;
    }
    ::operator delete(p, kAlign);
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
