// cifarnet/backend/host/stream_store.hpp — streaming (non-temporal) stores
// for the host passes that write a large tensor the step keeps for later.
//
// Why: such a pass (the batch norm pass that adds a residual block's sum
// and writes the block's output as its bf16 copy, read by the next block's
// convolution, its sum and the backward) writes into a buffer that was last
// touched a whole step ago, so none of its lines are in cache. A plain store
// first reads each line from memory (write-allocate), then writes it back
// when it is evicted; a streaming store (VMOVNTDQ) writes the line without
// reading it. Where the tensor is at least as large as the L2 caches of the
// threads writing it (streaming_threshold), it could not have stayed there
// for its next reader anyway. On a 2-core AMX Xeon (2 MiB of L2 a core),
// ResNet-20's stage-1 block outputs (4 MiB of bf16): the pass went from
// 0.68-0.75 to 0.40-0.50 ms in the bf16 training step, while the next
// convolution's forward, which now reads its input from memory, rose by
// 0.02-0.05 ms; the step 1.025x (ResNet-56 1.031x) as fast
// (docs/BENCHMARKS.md, 2026-12-05 22:04). In a probe at stage 2 (2 MiB)
// the pass gained 0.1 ms and its readers lost as much: below the
// threshold, plain stores.
//
// Not for buffers that every layer reuses (the convolutions' bf16 dy
// scratch): they are in cache, and streaming their stores made the batch
// norm's backward about 1.6x slower in a probe. A pass that reads back
// what it writes (bn::sum_into_dy_with_sums sums each block of the batch
// norm's dy it writes, and that dy buffer is the layer's own, cold) forms
// each block in a buffer on the stack, reads it there and streams a copy
// to the tensor: a load from a line still in the write-combining buffers
// would wait for them to drain.
//
// The same values, bit for bit: only where the stores go differs. Each
// thread ends its share with a store fence (SFENCE), so that its streaming
// stores are visible to the other threads after the parallel region ends.
// set_streaming_stores(false) or CIFARNET_STREAMING_STORES=0 (core/
// tensor_memory.hpp) turns them off.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/core/tensor_memory.hpp"

namespace cifarnet::backend::host {

/// The L2 cache of one core in bytes, as the C library reports it (1 MiB
/// where it does not say).
inline std::size_t l2_bytes_per_core() {
  static const std::size_t bytes = [] {
    long v = -1;
#if defined(_SC_LEVEL2_CACHE_SIZE)
    v = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return v > 0 ? std::size_t(v) : std::size_t(1) << 20;
  }();
  return bytes;
}

/// The size from which a pass run by `threads` threads streams its output:
/// their L2 caches together.
inline std::size_t streaming_threshold(int threads) {
  return l2_bytes_per_core() * std::size_t(threads > 1 ? threads : 1);
}

/// How many passes have streamed their output (tests, benchmarks).
inline std::atomic<std::size_t>& streamed_passes() {
  static std::atomic<std::size_t> n{0};
  return n;
}

/// Whether a pass run by `threads` threads that writes `bytes` from `out`
/// (a tensor the step keeps for later) streams them: streaming stores on,
/// the output at least streaming_threshold(threads), `out` 32-byte aligned,
/// and a build with AVX512-BF16 (the passes that stream round to bf16 with
/// it). Counts the pass when it does.
inline bool stream_output(std::size_t bytes, const void* out, int threads) {
#ifdef CIFARNET_HOST_BF16_AVX512
  if (!streaming_stores() || bytes < streaming_threshold(threads) ||
      reinterpret_cast<std::uintptr_t>(out) % 32 != 0)
    return false;
  streamed_passes().fetch_add(1, std::memory_order_relaxed);
  return true;
#else
  (void)bytes, (void)out, (void)threads;
  return false;
#endif
}

#ifdef CIFARNET_HOST_BF16_AVX512
/// 16 floats rounded to bf16 (VCVTNEPS2BF16, as store_bf16) and stored at
/// `out` (32-byte aligned) with a streaming store.
inline void stream16_bf16(__m512 v, std::uint16_t* out) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(out), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}
/// store_bf16 of n floats (a multiple of 8; `out` 16-byte aligned) with
/// streaming stores, eight floats a load as store_bf16 reads them.
inline void stream_bf16(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8)
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i),
                     reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(_mm256_loadu_ps(in + i))));
}
/// n bf16 values (a multiple of 16) copied from `from` (32-byte aligned,
/// in cache) to `to` (32-byte aligned) with streaming stores.
inline void stream_copy(const std::uint16_t* from, std::uint16_t* to, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i),
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(from + i)));
}
/// Makes this thread's streaming stores visible to the other threads once
/// they pass a barrier after it.
inline void stream_fence() { _mm_sfence(); }
#else
// Never called: stream_output is false without AVX512-BF16.
inline void stream_copy(const std::uint16_t*, std::uint16_t*, std::size_t) {}
inline void stream_fence() {}
#endif

}  // namespace cifarnet::backend::host
