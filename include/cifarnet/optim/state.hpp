// cifarnet/optim/state.hpp — saving and restoring optimizer, transform and
// EMA state by name.
//
// Every stateful object in cifarnet/optim has
//   template <class F> void visit_state(F&& f);
// calling f(const std::string& name, T* data, const std::vector<std::size_t>& shape)
// once per state tensor, with TensorFlow's names: "<param>/Momentum",
// "<param>/Adam", "<param>/Adam_1", "beta1_power", "beta2_power",
// "<param>/ExponentialMovingAverage" (an empty shape is a scalar). Writing
// through `data` restores state. state_dict()/load_state_dict() below turn
// that into a name -> values map, the form checkpoint code stores. Loading
// checks every name and size first and changes nothing when one is wrong.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet::optim {

inline std::size_t shape_elements(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// Copies every state tensor of `obj` into a name -> values map.
template <class S>
std::map<std::string, std::vector<typename S::Scalar>> state_dict(S& obj) {
  using T = typename S::Scalar;
  std::map<std::string, std::vector<T>> out;
  obj.visit_state([&](const std::string& name, T* data, const std::vector<std::size_t>& shape) {
    out[name] = std::vector<T>(data, data + shape_elements(shape));
  });
  return out;
}

/// Restores every state tensor of `obj` from `values` (extra entries are
/// ignored). A missing name or a size mismatch throws (ConfigError /
/// ShapeError naming the tensor) before anything is written.
template <class S>
void load_state_dict(S& obj, const std::map<std::string, std::vector<typename S::Scalar>>& values) {
  using T = typename S::Scalar;
  std::vector<std::pair<T*, const std::vector<T>*>> plan;
  obj.visit_state([&](const std::string& name, T* data, const std::vector<std::size_t>& shape) {
    auto it = values.find(name);
    if (it == values.end())
      throw ConfigError("optimizer state '" + name + "' is missing from the values to load");
    const std::size_t n = shape_elements(shape);
    if (it->second.size() != n)
      throw ShapeError("optimizer state '" + name + "' has " + std::to_string(n) +
                       " elements, the values to load have " + std::to_string(it->second.size()));
    plan.emplace_back(data, &it->second);
  });
  for (auto& [dst, src] : plan) std::copy(src->begin(), src->end(), dst);
}

namespace detail {
/// The learning rate as the parameter type, after checking it (TF casts the
/// learning rate to the variable's dtype the same way).
template <class T>
T checked_lr(double lr, const std::string& who) {
  if (!std::isfinite(lr) || lr < 0)
    throw ConfigError(who + ": learning rate must be finite and >= 0, got " + std::to_string(lr));
  return T(lr);
}

/// Throws ConfigError("<who>: option '<option>' <what>, got <v>") unless ok.
inline void require(bool ok, const std::string& who, const std::string& option, const std::string& what,
                    double v) {
  if (!ok) {
    std::string got = std::isnan(v) ? "nan" : std::to_string(v);
    throw ConfigError(who + ": option '" + option + "' " + what + ", got " + got);
  }
}
}  // namespace detail

}  // namespace cifarnet::optim
