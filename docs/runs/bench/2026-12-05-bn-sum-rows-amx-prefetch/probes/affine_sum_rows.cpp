// Probe: batch norm's pass with a residual sum (bn::affine_sum, NHWC, bf16 x
// and r, the sum's bf16 copy alone and its ReLU mask as bits: what the
// ResNet blocks' second batch norm runs in bf16) at ResNet-20's three stage
// shapes, batch 128, warm: the row loop as it was at 6e1c09a (copied here:
// each row stored as floats on the stack, then rounded to its bf16 copy and
// read by a 512-bit load for its mask) against the library's pass (since
// dcbcc9e: the rows in AVX-512 registers), and whether they give the same
// bits. Medians of 31 calls, 2 threads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cifarnet/backend/onednn/bn_kernels.hpp>

using namespace cifarnet;
namespace bn = cifarnet::backend::onednn::bn;
namespace host = cifarnet::backend::host;

static std::vector<char> evict(512u << 20);

// The median of 31 calls; cold: 512 MiB written before each (the tensors
// then come from memory, as in the training step).
template <class F>
double med(F&& f, bool cold) {
  std::vector<double> v;
  for (int r = 0; r < 31; ++r) {
    if (cold) {
#pragma omp parallel for
      for (std::size_t i = 0; i < evict.size(); i += 64) evict[i] = char(evict[i] + 1);
    }
    auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[15];
}

// 6e1c09a's loop for C known at compile time (bn_kernels.hpp, affine_sum).
template <std::size_t CC>
void old_affine_sum(const ChannelGeom& g, const std::uint16_t* x, const float* a, const float* b,
                    const std::uint16_t* r, bool relu, std::uint16_t* yb, std::uint16_t* mask) {
  bn::nhwc_rows_ab<CC>(g, a, b, [&](std::size_t q, const float* ac, const float* bc) {
    alignas(64) float tmp[CC];
    const std::size_t base = q * CC;
    bn::ahead(x + base);
    bn::ahead(r + base);
    if (relu)
      bn::affine_sum_row<CC, true>(CC, x + base, ac, bc, r + base, tmp);
    else
      bn::affine_sum_row<CC, false>(CC, x + base, ac, bc, r + base, tmp);
    host::store_bf16(tmp, yb + base, CC);
    for (std::size_t j = 0; j < CC / 16; ++j) mask[q * (CC / 16) + j] = host::positive_bits(tmp + 16 * j);
  });
}

int main() {
  for (auto [c, hw] : {std::pair<std::size_t, std::size_t>{16, 32}, {32, 16}, {64, 8}}) {
    const ChannelGeom g = ChannelGeom::make(DataFormat::NHWC, Shape{128, c, hw, hw});
    const std::size_t n = g.size();
    std::vector<std::uint16_t> x(n), r(n), y0(n), y1(n), m0(n / 16), m1(n / 16);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = host::bf16_bits(float((i * 7919) % 1000) / 500.f - 1.f);
      r[i] = host::bf16_bits(float((i * 104729) % 1000) / 700.f - 0.5f);
    }
    std::vector<float> a(c), b(c);
    for (std::size_t i = 0; i < c; ++i) {
      a[i] = 1.1f + 0.013f * float(i);
      b[i] = -0.05f + 0.0071f * float(i);
    }
    for (bool cold : {false, true}) {
      double t0 = 0, t1 = 0;
      bn::with_channels(g, [&](auto cc) {
        constexpr std::size_t CC = decltype(cc)::value;
        if constexpr (CC != 0 && CC % 16 == 0) {
          t0 = med(
              [&] {
                old_affine_sum<CC>(g, x.data(), a.data(), b.data(), r.data(), true, y0.data(), m0.data());
              },
              cold);
          t1 = med(
              [&] {
                bn::affine_sum<CC>(g, x.data(), a.data(), b.data(), r.data(), true, nullptr, y1.data(),
                                   m1.data());
              },
              cold);
        }
      });
      std::printf(
          "%zu channels %zux%zu, %s: 6e1c09a's loop %.3f ms, the library's %.3f ms (%.2fx), same bits: %s\n",
          c, hw, hw, cold ? "cold" : "warm", t0, t1, t0 / t1, y0 == y1 && m0 == m1 ? "yes" : "NO");
    }
  }
}
