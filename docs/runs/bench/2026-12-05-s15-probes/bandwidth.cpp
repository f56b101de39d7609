// Read and copy bandwidth of a buffer of each size, 2 threads by default:
// a plain copy (stores that read each line first), a copy with streaming
// stores, a read; medians of 12 of 15 passes (the first 3 warm it).
#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
// copy a -> b (plain and streaming stores), read-only sum, for sizes
int main() {
  for (size_t mb : {4, 16, 64, 128, 256, 1024}) {
    size_t n = mb << 20;  // bytes
    char* a = (char*)aligned_alloc(64, n);
    char* b = (char*)aligned_alloc(64, n);
    for (size_t i = 0; i < n; ++i) a[i] = char(i), b[i] = 0;
    auto run = [&](int mode) {
      std::vector<double> ts;
      for (int r = 0; r < 15; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        float acc = 0;
#pragma omp parallel reduction(+ : acc)
        {
          int t = omp_get_thread_num(), nt = omp_get_num_threads();
          size_t lo = n / 64 * t / nt * 64, hi = n / 64 * (t + 1) / nt * 64;
          __m512 s = _mm512_setzero_ps();
          for (size_t i = lo; i < hi; i += 64) {
            __m512 v = _mm512_load_ps((float*)(a + i));
            if (mode == 0)
              _mm512_store_ps((float*)(b + i), v);
            else if (mode == 1)
              _mm512_stream_ps((float*)(b + i), v);
            else
              s = _mm512_add_ps(s, v);
          }
          acc += _mm512_reduce_add_ps(s);
        }
        auto t1 = std::chrono::steady_clock::now();
        if (r >= 3) ts.push_back(std::chrono::duration<double>(t1 - t0).count());
        if (acc == 12345.f) std::printf("x");
      }
      std::sort(ts.begin(), ts.end());
      return ts[ts.size() / 2];
    };
    double c = run(0), s = run(1), rd = run(2);
    std::printf("%3zu MB: copy %.1f GB/s (read+write bytes), stream-copy %.1f GB/s, read %.1f GB/s\n", mb,
                2 * n / c / 1e9, 2 * n / s / 1e9, n / rd / 1e9);
    free(a);
    free(b);
  }
}
