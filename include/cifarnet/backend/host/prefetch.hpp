// cifarnet/backend/host/prefetch.hpp — software prefetch for the host
// passes that stream activations front to back.
//
// A pass of batch normalization or of the residual sum reads a few
// tensors of a ResNet stage (4-8 MB each at batch 128) once, in order. The
// tensors saved by the forward come back from DRAM in the backward, and
// there the hardware prefetcher alone left these loops at about half the
// bandwidth of a plain read of the same bytes (a 128x32x32x16 bf16 channel
// sum with the caches flushed, 2-core Xeon with AMX: 12 against 26 GB/s, 22
// with this prefetch; docs/runs/bench/2026-11-27-bn-prefetch-probe/).
// Asking for the line kAheadBytes ahead of the element being read keeps
// enough requests in flight; it changes no result.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cifarnet::backend::host {

/// How far ahead of the current element the passes prefetch.
inline constexpr std::size_t kAheadBytes = 2048;

/// Prefetch (for reading) the cache line kAheadBytes past p. A hint: an
/// address past the end of the tensor is not dereferenced (and is formed
/// in integer arithmetic, not as a pointer past the end).
inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + kAheadBytes), 0, 3);
}

/// prefetch_ahead for every cache line of [p, p + bytes): a block about to
/// be read (a row, a block of pixels) asks for the block kAheadBytes past it.
inline void prefetch_lines_ahead(const void* p, std::size_t bytes) {
  for (std::size_t b = 0; b < bytes; b += 64) prefetch_ahead(static_cast<const char*>(p) + b);
}

}  // namespace cifarnet::backend::host
