// tests/recipe_golden.hpp — reads the goldens of tests/fixtures/recipe/
// (written once by scripts/recipe_goldens/make_recipe_goldens.py with
// PyTorch and NumPy; no test runs Python) and converts PyTorch's OIHW
// filters to cifarnet's HWIO.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <cifarnet/core/error.hpp>
#include <cifarnet/io/safetensors.hpp>

namespace cifarnet::test {

/// tests/fixtures/recipe/<file>; Error naming the file when it is missing or
/// was not written by make_recipe_goldens.py.
inline io::StateDict recipe_golden(const std::string& file) {
  io::StateDict d = io::read_safetensors(std::string(CIFARNET_SOURCE_DIR) + "/tests/fixtures/recipe/" + file);
  if (!d.metadata.count("recipe_goldens"))
    throw Error(file + ": no \"recipe_goldens\" metadata entry (not written by make_recipe_goldens.py)");
  return d;
}

/// The tensor `name` as doubles.
inline std::vector<double> golden_values(const io::StateDict& d, const std::string& name) {
  return d.at(name).to_floating<double>();
}

/// OIHW (PyTorch) → HWIO (cifarnet) for a filter of shape (o, i, h, w).
template <class T>
std::vector<T> oihw_to_hwio(const std::vector<double>& v, std::size_t o, std::size_t i, std::size_t h,
                            std::size_t w) {
  std::vector<T> out(v.size());
  for (std::size_t a = 0; a < o; ++a)
    for (std::size_t b = 0; b < i; ++b)
      for (std::size_t y = 0; y < h; ++y)
        for (std::size_t x = 0; x < w; ++x)
          out[((y * w + x) * i + b) * o + a] = T(v[((a * i + b) * h + y) * w + x]);
  return out;
}

/// max |got − want| / max |want|: the worst error relative to the tensor's scale.
template <class A, class B>
double scaled_max_error(const std::vector<A>& got, const std::vector<B>& want) {
  if (got.size() != want.size()) return HUGE_VAL;
  double e = 0, m = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(double(got[i]) - double(want[i]));
    e = std::isnan(d) ? HUGE_VAL : std::max(e, d);
    m = std::max(m, std::abs(double(want[i])));
  }
  return m > 0 ? e / m : e;
}

}  // namespace cifarnet::test
