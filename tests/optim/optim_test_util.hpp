// Shared helpers of the optim tests: small hand-filled arenas, TF golden
// values (tests/data/optim/golden.json, made by make_golden.py), and
// distances in units in the last place.
#pragma once

#include <nlohmann/json.hpp>

#include <cifarnet/core/params.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace optim_test {

using cifarnet::Parameters;

/// The golden file, parsed once.
inline const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(CIFARNET_TEST_DATA_DIR) + "/optim/golden.json");
    if (!in) throw std::runtime_error("cannot open tests/data/optim/golden.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

template <class T>
const char* dtype_name() {
  return sizeof(T) == 4 ? "float32" : "float64";
}

/// Distance between two finite values in units in the last place of T.
template <class T>
std::int64_t ulps(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  I ia, ib;
  std::memcpy(&ia, &a, sizeof(T));
  std::memcpy(&ib, &b, sizeof(T));
  // map the sign-magnitude order onto a monotonic integer line
  auto key = [](I x) -> std::int64_t {
    return x < 0 ? std::int64_t(std::numeric_limits<I>::min()) - std::int64_t(x) : std::int64_t(x);
  };
  const std::int64_t d = key(ia) - key(ib);
  return d < 0 ? -d : d;
}

/// The arena of the golden runs: "layer/weights" (2, 3), "layer/biases" (2),
/// and a non-trainable "layer/moving_mean" (2) between them.
template <class T>
Parameters<T> golden_arena() {
  Parameters<T> p;
  p.add({"layer/weights", {2, 3}});
  p.add({"layer/moving_mean", {2}, false});
  p.add({"layer/biases", {2}});
  p.allocate();
  const auto& in = golden()["inputs"];
  std::size_t k = 0;
  for (const auto& row : in["var0"])
    for (const auto& x : row) p.value(0)[k++] = T(x.get<double>());
  for (std::size_t i = 0; i < 2; ++i) p.value(2)[i] = T(in["var1"][i].get<double>());
  p.value(1)[0] = T(0.5);
  p.value(1)[1] = T(-0.25);
  return p;
}

/// Loads step `s`'s golden gradients into the arena.
template <class T>
void golden_grads(Parameters<T>& p, std::size_t s) {
  const auto& g = golden()["inputs"]["grads"][s];
  std::size_t k = 0;
  for (const auto& row : g[0])
    for (const auto& x : row) p.grad(0)[k++] = T(x.get<double>());
  for (std::size_t i = 0; i < 2; ++i) p.grad(2)[i] = T(g[1][i].get<double>());
}

template <class T>
std::vector<T> as_vector(const nlohmann::json& a) {
  std::vector<T> out;
  for (const auto& x : a) out.push_back(T(x.get<double>()));
  return out;
}

template <class T>
std::vector<T> copy_of(const T* p, std::size_t n) {
  return std::vector<T>(p, p + n);
}

/// Bitwise equality of two buffers (NaN == NaN when the bits agree).
template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

}  // namespace optim_test
