#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <sys/mman.h>
static void* alloc(size_t b) {
  void* p = aligned_alloc(2 << 20, b);
  madvise(p, b, MADV_HUGEPAGE);
  memset(p, 1, b);
  return p;
}
int main() {
  const size_t N = 128 * 32 * 32 * 16;  // elements bf16
  auto *a = (uint16_t*)alloc(N * 2), *b = (uint16_t*)alloc(N * 2), *c = (uint16_t*)alloc(N * 2);
  std::vector<uint16_t*> junk;  // evict by touching 64MB
  auto* big = (char*)alloc(256 << 20);
  auto evict = [&] {
#pragma omp parallel for
    for (size_t i = 0; i < (256u << 20); i += 64) big[i]++;
  };
  auto time = [&](const char* name, auto f) {
    std::vector<double> v;
    for (int r = 0; r < 9; r++) {
      evict();
      auto t0 = std::chrono::steady_clock::now();
      f();
      auto t1 = std::chrono::steady_clock::now();
      v.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(v.begin(), v.end());
    printf("%-28s cold %.3f ms\n", name, v[4]);
    v.clear();
    for (int r = 0; r < 9; r++) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      auto t1 = std::chrono::steady_clock::now();
      v.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(v.begin(), v.end());
    printf("%-28s warm %.3f ms\n", name, v[4]);
  };
  time("read 4MB", [&] {
    int tot = 0;
#pragma omp parallel reduction(+ : tot)
    {
      __m512i s = _mm512_setzero_si512();
#pragma omp for
      for (size_t i = 0; i < N; i += 32) s = _mm512_or_si512(s, _mm512_load_si512(a + i));
      tot += _mm512_reduce_or_epi32(s);
    }
    if (tot == 7) puts("");
  });
  time("write 4MB", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32) _mm512_store_si512(c + i, _mm512_set1_epi16(3));
  });
  time("write 4MB nt", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32) _mm512_stream_si512((__m512i*)(c + i), _mm512_set1_epi16(3));
  });
  time("read 8MB write 4MB", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32)
      _mm512_store_si512(c + i, _mm512_add_epi16(_mm512_load_si512(a + i), _mm512_load_si512(b + i)));
  });
  time("read 4MB write 4MB", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32)
      _mm512_store_si512(c + i, _mm512_add_epi16(_mm512_load_si512(a + i), _mm512_set1_epi16(1)));
  });
  time("read 8MB write 4MB nt", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32)
      _mm512_stream_si512((__m512i*)(c + i),
                          _mm512_add_epi16(_mm512_load_si512(a + i), _mm512_load_si512(b + i)));
  });
  time("nt write then read", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32) _mm512_stream_si512((__m512i*)(c + i), _mm512_set1_epi16(3));
    int tot = 0;
#pragma omp parallel reduction(+ : tot)
    {
      __m512i s = _mm512_setzero_si512();
#pragma omp for
      for (size_t i = 0; i < N; i += 32) s = _mm512_or_si512(s, _mm512_load_si512(c + i));
      tot += _mm512_reduce_or_epi32(s);
    }
    if (tot == 7) puts("");
  });
  time("write then read", [&] {
#pragma omp parallel for
    for (size_t i = 0; i < N; i += 32) _mm512_store_si512((__m512i*)(c + i), _mm512_set1_epi16(3));
    int tot = 0;
#pragma omp parallel reduction(+ : tot)
    {
      __m512i s = _mm512_setzero_si512();
#pragma omp for
      for (size_t i = 0; i < N; i += 32) s = _mm512_or_si512(s, _mm512_load_si512(c + i));
      tot += _mm512_reduce_or_epi32(s);
    }
    if (tot == 7) puts("");
  });
  auto* d = (uint16_t*)alloc(N * 2);
  for (int nt = 0; nt < 2; ++nt)
    time(nt ? "chain nt" : "chain regular", [&] {
#pragma omp parallel for
      for (size_t i = 0; i < N; i += 32) {
        __m512i v = _mm512_add_epi16(_mm512_load_si512(a + i), _mm512_load_si512(b + i));
        if (nt)
          _mm512_stream_si512((__m512i*)(c + i), v);
        else
          _mm512_store_si512(c + i, v);
      }
#pragma omp parallel for
      for (size_t i = 0; i < N; i += 32)
        _mm512_store_si512(d + i, _mm512_add_epi16(_mm512_load_si512(c + i), _mm512_set1_epi16(1)));
    });
}
