// cifarnet/io/warm_start.hpp — TF-Slim's warm starts: assign_from_checkpoint
// (a selected, renamed subset of the parameters from a StateDict or a
// safetensors file, with shape checks) and assign_from_values (parameters
// from an in-memory map).
#pragma once

#include <cstddef>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/name_pattern.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/io/safetensors.hpp"

namespace cifarnet::io {

/// A name pattern: a glob ('*', '?', see core/names.hpp), an exact name or
/// an ECMAScript regular expression matched against the whole name
/// (core/name_pattern.hpp, shared with the optimizers' optim::Pattern).
using NamePattern = cifarnet::NamePattern;

/// Options of assign_from_checkpoint (TF-Slim's warm start).
struct WarmStartOptions {
  std::vector<NamePattern> include = {"*"};  ///< parameters to restore (model names)
  std::vector<NamePattern> exclude;          ///< minus these
  /// model-name prefix -> checkpoint-name prefix; the first matching entry
  /// renames ("resnet/" -> "old_net/" reads "old_net/conv1/weights" into
  /// "resnet/conv1/weights"). Unmatched names are looked up unchanged.
  std::vector<std::pair<std::string, std::string>> prefix_map;
  /// TF-Slim's ignore_missing_vars: selected parameters absent from the
  /// checkpoint are reported instead of being an error.
  bool ignore_missing = false;
};

/// TF-Slim's assign_from_checkpoint: restores the selected subset of
/// parameters from `dict`, with shape checks (ShapeError naming the parameter
/// and both shapes). A selection matching no parameter is a ConfigError; a
/// selected parameter missing from the checkpoint is a DataError unless
/// ignore_missing.
template <class T>
LoadReport assign_from_checkpoint(Parameters<T>& params, const StateDict& dict, const WarmStartOptions& opt) {
  if (!params.allocated()) throw Error("assign_from_checkpoint: the parameter arena is not allocated yet");
  std::vector<std::pair<std::size_t, std::string>> plan;
  LoadReport r;
  for (std::size_t id = 0; id < params.count(); ++id) {
    const std::string& name = params.info(id).name;
    bool in = false;
    for (const auto& p : opt.include) in = in || p.matches(name);
    for (const auto& p : opt.exclude) in = in && !p.matches(name);
    if (!in) continue;
    std::string ckpt_name = name;
    for (const auto& [from, to] : opt.prefix_map)
      if (name.compare(0, from.size(), from) == 0) {
        ckpt_name = to + name.substr(from.size());
        break;
      }
    if (!dict.find(ckpt_name)) {
      if (!opt.ignore_missing)
        throw DataError(cifarnet::detail::concat(
            "warm start: ", detail::source_of(dict), " has no tensor '", ckpt_name, "' for parameter '", name,
            "' ", detail::shape_str(params.info(id).shape), " (set ignore_missing to skip it)"));
      r.missing.push_back(name);
      continue;
    }
    plan.emplace_back(id, ckpt_name);
  }
  if (plan.empty() && r.missing.empty()) {
    std::string pats;
    for (const auto& p : opt.include) pats += (pats.empty() ? "" : ", ") + p.text();
    throw ConfigError("warm start: the include patterns [" + pats + "] select no parameter");
  }
  // Check every shape before changing anything, so a mismatch leaves the model as it was.
  for (const auto& [id, ckpt_name] : plan) {
    const TensorData& t = dict.at(ckpt_name);
    if (t.shape != params.info(id).shape)
      throw ShapeError(cifarnet::detail::concat("warm start: parameter '", params.info(id).name,
                                                "' has shape ", detail::shape_str(params.info(id).shape),
                                                " but tensor '", ckpt_name, "' in ", detail::source_of(dict),
                                                " has shape ", detail::shape_str(t.shape)));
  }
  for (const auto& [id, ckpt_name] : plan) {
    detail::assign_tensor(params, id, dict.at(ckpt_name), ckpt_name, dict);
    r.loaded.emplace_back(params.info(id).name, ckpt_name);
  }
  return r;
}

/// As above, reading the checkpoint file first.
template <class T>
LoadReport assign_from_checkpoint(Parameters<T>& params, const std::string& path, const WarmStartOptions& opt,
                                  const ReadOptions& read = {}) {
  return assign_from_checkpoint(params, read_safetensors(path, read), opt);
}

namespace detail {
template <class V, class = void>
struct has_shape : std::false_type {};
template <class V>
struct has_shape<V, std::void_t<decltype(std::declval<const V&>().shape())>> : std::true_type {};
}  // namespace detail

/// TF-Slim's assign_from_values: sets parameters from an in-memory map
/// name -> values. Values are either shaped containers (xt::xarray,
/// xt::xtensor: anything with shape() and row-major begin()/end()), whose
/// shape must equal the parameter's, or flat std::vector-like ranges whose
/// length must equal its element count. Unknown names are an Error naming
/// them; nothing is changed unless every entry checks out.
template <class T, class Map>
std::vector<std::string> assign_from_values(Parameters<T>& params, const Map& values) {
  if (!params.allocated()) throw Error("assign_from_values: the parameter arena is not allocated yet");
  std::vector<std::string> assigned;
  for (const auto& [name, v] : values) {
    const auto id = params.find(name);
    if (!id) throw Error("assign_from_values: no parameter named '" + std::string(name) + "'");
    const ParamInfo& info = params.info(*id);
    using V = std::decay_t<decltype(v)>;
    if constexpr (detail::has_shape<V>::value) {
      std::vector<std::size_t> shape(v.shape().begin(), v.shape().end());
      if (shape != info.shape)
        throw ShapeError(cifarnet::detail::concat("assign_from_values: parameter '", info.name,
                                                  "' has shape ", detail::shape_str(info.shape),
                                                  " but the value has shape ", detail::shape_str(shape)));
    } else {
      const auto n = static_cast<std::size_t>(std::distance(std::begin(v), std::end(v)));
      if (n != info.size)
        throw ShapeError(cifarnet::detail::concat(
            "assign_from_values: parameter '", info.name, "' has shape ", detail::shape_str(info.shape), " (",
            info.size, " elements) but the value has ", n, " elements"));
    }
  }
  for (const auto& [name, v] : values) {
    const std::size_t id = *params.find(name);
    T* dst = params.value(id);
    for (auto it = std::begin(v); it != std::end(v); ++it) *dst++ = static_cast<T>(*it);
    assigned.push_back(name);
  }
  return assigned;
}

}  // namespace cifarnet::io
