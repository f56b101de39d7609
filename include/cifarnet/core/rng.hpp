// cifarnet/core/rng.hpp — the library's random number generator.
//
// xoshiro256** seeded through splitmix64: small (four 64-bit words of state,
// saved in checkpoints as-is), fast, and identical on every platform, unlike
// std:: distributions whose output is implementation-defined. Every random
// draw in cifarnet (initializers, augmentation, shuffling, noise) goes
// through this type, so a seed fixes a whole run.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cifarnet {

class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  explicit Rng(std::uint64_t seed = 0x5eed) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    std::uint64_t x = seed;
    for (auto& w : s_) w = splitmix64(x);
  }

  /// An independent generator for sub-stream `stream` (a worker, a layer):
  /// the same (seed, stream) always gives the same sequence.
  static Rng stream(std::uint64_t seed, std::uint64_t stream) {
    std::uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (stream + 1));
    return Rng(splitmix64(x));
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform float in [0, 1) with 24 random bits.
  float uniformf() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

  /// Uniform integer in [0, n) without modulo bias (n > 0).
  std::uint64_t uniform_int(std::uint64_t n) {
    const std::uint64_t limit =
        std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
    std::uint64_t r;
    do r = next_u64();
    while (r >= limit);
    return r % n;
  }

  /// Standard normal (Box-Muller; one draw per call, no cached value, so the
  /// state alone determines the sequence).
  double normal() {
    double u1;
    do u1 = uniform();
    while (u1 <= 0.0);
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  /// TensorFlow's truncated normal: values beyond two standard deviations
  /// are drawn again.
  double truncated_normal(double mean, double stddev) {
    double z;
    do z = normal();
    while (std::fabs(z) > 2.0);
    return mean + stddev * z;
  }

  bool bernoulli(double p = 0.5) { return uniform() < p; }

  const State& state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  State s_{};
};

}  // namespace cifarnet
