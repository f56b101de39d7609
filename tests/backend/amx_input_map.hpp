// What tests/backend/test_amx_conv.cpp and test_amx_wgrad.cpp share: their
// random bf16 data, and the input map of the own AMX kernels (amx::InputMap:
// a batch norm's scale, shift and ReLU, applied to its input where its
// output was never written) on the host, whose bits the kernels must give.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <cifarnet/backend/host/bf16.hpp>

namespace cifarnet::test {

/// bf16 bits of random values in steps of 1/64: non-negative ones in
/// [0, 1], or signed ones in [-1, 1] (exact in bf16; no denormal products).
inline std::vector<std::uint16_t> random_bf16(std::size_t count, bool non_negative, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(non_negative ? 0 : -64, 64);
  std::vector<std::uint16_t> v(count);
  for (auto& b : v) b = backend::host::bf16_bits(float(d(rng)) / 64.0f);
  return v;
}

/// A map's scale and shift for `channels` channels: bf16-exact steps around
/// 1 and 0, different per channel.
struct HostMap {
  std::vector<float> scale, shift;
  explicit HostMap(std::size_t channels) : scale(channels), shift(channels) {
    for (std::size_t c = 0; c < channels; ++c) {
      scale[c] = 0.75f + 0.03125f * float(c % 9);
      shift[c] = 0.0625f * float(int(c % 5) - 2);
    }
  }
  /// y (bf16 bits, channels innermost) through the map: one fused
  /// multiply-add in float, the ReLU, the rounding to nearest even (the
  /// kernels' VCVTNEPS2BF16 flushes denormals, which these values cannot
  /// produce).
  std::vector<std::uint16_t> apply(const std::vector<std::uint16_t>& y, bool relu) const {
    std::vector<std::uint16_t> x(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      const std::size_t c = i % scale.size();
      float v = std::fma(backend::host::bf16_to_float(y[i]), scale[c], shift[c]);
      if (relu) v = std::max(v, 0.0f);
      x[i] = backend::host::bf16_bits(v);
    }
    return x;
  }
};

}  // namespace cifarnet::test
