#include <omp.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <immintrin.h>
// read-sum, copy, triad over sizes; 2 threads
int main() {
  for (size_t mb : {1, 4, 8, 16, 64, 256}) {
    size_t n = mb * 1024 * 1024 / 4;
    std::vector<float> a(n, 1.f), b(n, 2.f), c(n, 0.f);
    double best_r = 1e9, best_c = 1e9, best_t = 1e9;
    float sink = 0;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      float s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
      for (size_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(&a[i]);
        s += _mm512_reduce_add_ps(v);
      }
      sink += s;
      auto t1 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(&c[i], _mm512_loadu_ps(&a[i]));
      auto t2 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(
            &c[i], _mm512_fmadd_ps(_mm512_loadu_ps(&a[i]), _mm512_set1_ps(2.f), _mm512_loadu_ps(&b[i])));
      auto t3 = std::chrono::steady_clock::now();
      best_r = std::min(best_r, std::chrono::duration<double>(t1 - t0).count());
      best_c = std::min(best_c, std::chrono::duration<double>(t2 - t1).count());
      best_t = std::min(best_t, std::chrono::duration<double>(t3 - t2).count());
    }
    double B = n * 4.0;
    printf("%4zu MB: read %.1f GB/s  copy %.1f GB/s  triad %.1f GB/s (%g)\n", mb, B / best_r / 1e9,
           2 * B / best_c / 1e9, 3 * B / best_t / 1e9, sink + c[5]);
  }
}
