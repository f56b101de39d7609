// Probe: the memory rate of a bf16 pass that reads two arrays and writes
// one (a = b + c, AVX-512, 2 threads), per array size, warm (the same
// arrays again) and after 256 MiB were written in between.
#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
// a = b + c (bf16 -> f32 add -> bf16), n elements, 2 threads; also read-only sum
int main() {
  for (size_t mb : {1, 2, 4, 8, 16, 32, 64, 128}) {
    size_t n = mb * 1024 * 1024 / 2;  // bf16 elements per array
    uint16_t* a = (uint16_t*)aligned_alloc(64, n * 2);
    uint16_t* b = (uint16_t*)aligned_alloc(64, n * 2);
    uint16_t* c = (uint16_t*)aligned_alloc(64, n * 2);
    memset(a, 0, n * 2);
    for (size_t i = 0; i < n; ++i) {
      b[i] = 0x3f80;
      c[i] = 0x3f80;
    }
    auto run = [&] {
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i += 32) {
        __m512 b0 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((__m256i*)(b + i))), 16));
        __m512 b1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((__m256i*)(b + i + 16))), 16));
        __m512 c0 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((__m256i*)(c + i))), 16));
        __m512 c1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((__m256i*)(c + i + 16))), 16));
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_add_ps(b1, c1), _mm512_add_ps(b0, c0));
        _mm512_store_si512((__m512i*)(a + i), (__m512i)r);
      }
    };
    // cold-ish: touch a 256MB buffer in between
    static std::vector<char> evict(256u << 20);
    std::vector<double> warm, cold;
    for (int r = 0; r < 9; ++r) {
      run();
      auto t0 = std::chrono::steady_clock::now();
      run();
      warm.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    for (int r = 0; r < 7; ++r) {
      memset(evict.data(), r, evict.size());
      auto t0 = std::chrono::steady_clock::now();
      run();
      cold.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(warm.begin(), warm.end());
    std::sort(cold.begin(), cold.end());
    double bytes = 3.0 * n * 2;
    printf("%4zu MB/array: warm %.3f ms %.1f GB/s   after eviction %.3f ms %.1f GB/s\n", mb, warm[4] * 1e3,
           bytes / warm[4] / 1e9, cold[3] * 1e3, bytes / cold[3] / 1e9);
    free(a);
    free(b);
    free(c);
  }
}
