// cifarnet/io/parameter_state.hpp — the glue between a StateDict
// (core/state_dict.hpp) and the training state: parameters by their
// hierarchical name (add_parameters / load_parameters, strict restore),
// optimizer, transform and EMA slots (add_state / load_state), the global
// step ("global_step", I64 scalar) and RNG states ("rng/<name>" metadata).
// No file format here: io/safetensors.hpp reads and writes the dicts, and
// io/checkpoint_manager.hpp manages the files.
//
// Naming (docs/FORMATS.md): parameters by their hierarchical name, optimizer
// slots as "<param>/Momentum", "<param>/Adam", "<param>/Adam_1", EMA shadows
// as "<param>/ExponentialMovingAverage", the step as the I64 scalar
// "global_step"; RNG states ("rng/<name>") and the data pipeline position
// ("pipeline/<name>") in the metadata.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/state_dict.hpp"

namespace cifarnet::io {

namespace detail {
/// "'path'" of a dict read from a file, else "state dict" (for messages).
inline std::string source_of(const StateDict& d) {
  return d.source.empty() ? "state dict" : "'" + d.source + "'";
}
}  // namespace detail

/// Stores the global step as the I64 scalar tensor "global_step" (TF's name).
inline void set_global_step(StateDict& dict, std::int64_t step) {
  dict.set("global_step", TensorData::scalar<std::int64_t>(step));
}
/// The "global_step" tensor (I64 or I32 scalar); nullopt when absent.
inline std::optional<std::int64_t> global_step(const StateDict& dict) {
  const TensorData* t = dict.find("global_step");
  if (!t) return std::nullopt;
  if (t->numel() != 1 || (t->dtype != Dtype::I64 && t->dtype != Dtype::I32))
    throw DataError(cifarnet::detail::concat(detail::source_of(dict), ": global_step is ",
                                             dtype_name(t->dtype), " of shape ",
                                             TensorData::shape_string(t->shape), ", expected an I64 scalar"));
  return t->dtype == Dtype::I64 ? t->item<std::int64_t>() : t->item<std::int32_t>();
}

/// Stores an Rng's state in the metadata as "rng/<name>" = four 16-digit hex words.
inline void set_rng_state(StateDict& dict, const std::string& name, const Rng::State& s) {
  std::string v;
  for (std::size_t i = 0; i < s.size(); ++i) v += (i ? " " : "") + cifarnet::detail::to_hex(s[i], 16);
  dict.metadata["rng/" + name] = v;
}
/// The Rng state saved by set_rng_state; nullopt when absent, DataError when malformed.
inline std::optional<Rng::State> rng_state(const StateDict& dict, const std::string& name) {
  auto it = dict.metadata.find("rng/" + name);
  if (it == dict.metadata.end()) return std::nullopt;
  const std::string& v = it->second;
  Rng::State s{};
  bool ok = v.size() == 4 * 16 + 3;
  for (std::size_t w = 0; ok && w < 4; ++w) {
    const auto x = cifarnet::detail::parse_hex(std::string_view(v).substr(w * 17, 16), 16);
    ok = x.has_value() && (w == 3 || v[w * 17 + 16] == ' ');
    s[w] = x.value_or(0);
  }
  if (!ok)
    throw DataError(cifarnet::detail::concat(detail::source_of(dict), ": metadata 'rng/", name, "' = '", v,
                                             "' is not four 16-digit lowercase hex words"));
  return s;
}

/// Adds every parameter (trainable and state) to `dict` under its
/// hierarchical name (prefixed by `prefix`), dtype of T, TF shape order.
template <class T>
void add_parameters(StateDict& dict, const Parameters<T>& params, const std::string& prefix = "") {
  if (!params.allocated()) throw Error("add_parameters: the parameter arena is not allocated yet");
  params.for_each([&](const ParamInfo& info, const T* value, const T*) {
    dict.set(prefix + info.name, TensorData::from<T>(info.shape, value));
  });
}

/// Options of load_parameters.
struct LoadOptions {
  /// true: every parameter must be in the dict (a resume). false: missing
  /// ones keep their values and are listed in the report.
  bool strict = true;
  std::string prefix;  ///< the tensors' names are prefix + parameter name
};

/// What a load or warm start did.
struct LoadReport {
  std::vector<std::pair<std::string, std::string>> loaded;  ///< (parameter, tensor) pairs
  std::vector<std::string> missing;                         ///< parameters left as they were
};

namespace detail {
inline std::string shape_str(const std::vector<std::size_t>& s) { return TensorData::shape_string(s); }

/// Copies tensor `t` into parameter `id`, checking shape and dtype.
template <class T>
void assign_tensor(Parameters<T>& params, std::size_t id, const TensorData& t, const std::string& tensor_name,
                   const StateDict& dict) {
  const ParamInfo& info = params.info(id);
  if (t.shape != info.shape)
    throw ShapeError(cifarnet::detail::concat("parameter '", info.name, "' has shape ", shape_str(info.shape),
                                              " but tensor '", tensor_name, "' in ", source_of(dict),
                                              " has shape ", shape_str(t.shape)));
  std::vector<T> v;
  try {
    v = t.to_floating<T>();
  } catch (const Error&) {
    throw DataError(cifarnet::detail::concat("parameter '", info.name, "': tensor '", tensor_name, "' in ",
                                             source_of(dict), " has dtype ", dtype_name(t.dtype),
                                             ", expected a floating type"));
  }
  std::copy(v.begin(), v.end(), params.value(id));
}
}  // namespace detail

/// Restores parameters from `dict` (a resume): each parameter from the
/// tensor named prefix + its name, shapes equal, floating dtypes converted
/// to T. Strict mode throws DataError naming every missing parameter.
/// Tensors that are not parameters (optimizer slots, global_step) are ignored.
template <class T>
LoadReport load_parameters(Parameters<T>& params, const StateDict& dict, const LoadOptions& opt = {}) {
  if (!params.allocated()) throw Error("load_parameters: the parameter arena is not allocated yet");
  LoadReport r;
  for (std::size_t id = 0; id < params.count(); ++id) {
    const ParamInfo& info = params.info(id);
    const std::string name = opt.prefix + info.name;
    if (!dict.find(name)) r.missing.push_back(info.name);
  }
  if (opt.strict && !r.missing.empty()) {
    std::string list;
    for (const auto& m : r.missing) {
      const ParamInfo& info = params.info(params.id(m));
      list += cifarnet::detail::concat(list.empty() ? "" : ", ", "'", opt.prefix + m, "' ",
                                       detail::shape_str(info.shape));
    }
    throw DataError(cifarnet::detail::concat(detail::source_of(dict), " is missing ", r.missing.size(),
                                             " parameter", r.missing.size() == 1 ? "" : "s", ": ", list));
  }
  for (std::size_t id = 0; id < params.count(); ++id) {
    const std::string name = opt.prefix + params.info(id).name;
    if (const TensorData* t = dict.find(name)) {
      detail::assign_tensor(params, id, *t, name, dict);
      r.loaded.emplace_back(params.info(id).name, name);
    }
  }
  return r;
}

/// Adds every state tensor of `obj` (an optimizer, a gradient transform, an
/// EMA: anything with visit_state(f) calling f(name, T* data, shape), see
/// optim/state.hpp) under prefix + its name, e.g. "conv1/weights/Momentum".
template <class S>
void add_state(StateDict& dict, S& obj, const std::string& prefix = "") {
  obj.visit_state([&](const std::string& name, auto* data, const std::vector<std::size_t>& shape) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
    dict.set(prefix + name, TensorData::from<T>(shape, data));
  });
}

/// Restores what add_state saved: every state tensor of `obj` must be in
/// `dict` with its shape (DataError / ShapeError naming it otherwise);
/// floating dtypes convert. Everything is checked before anything is written.
template <class S>
void load_state(S& obj, const StateDict& dict, const std::string& prefix = "") {
  for (int pass = 0; pass < 2; ++pass) {
    obj.visit_state([&](const std::string& name, auto* data, const std::vector<std::size_t>& shape) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
      const TensorData* t = dict.find(prefix + name);
      if (!t)
        throw DataError(cifarnet::detail::concat(detail::source_of(dict), " has no state tensor '",
                                                 prefix + name, "' ", detail::shape_str(shape)));
      if (t->shape != shape)
        throw ShapeError(cifarnet::detail::concat(
            "state '", name, "' has shape ", detail::shape_str(shape), " but tensor '", prefix + name,
            "' in ", detail::source_of(dict), " has shape ", detail::shape_str(t->shape)));
      std::vector<T> v;
      if constexpr (std::is_floating_point_v<T>) {
        if (t->dtype != Dtype::F16 && t->dtype != Dtype::BF16 && t->dtype != Dtype::F32 &&
            t->dtype != Dtype::F64)
          throw DataError(cifarnet::detail::concat("state '", name, "': tensor '", prefix + name, "' in ",
                                                   detail::source_of(dict), " has dtype ",
                                                   dtype_name(t->dtype), ", expected a floating type"));
        v = t->to_floating<T>();
      } else {
        if (t->dtype != dtype_of<T>())
          throw DataError(cifarnet::detail::concat(
              "state '", name, "': tensor '", prefix + name, "' in ", detail::source_of(dict), " has dtype ",
              dtype_name(t->dtype), ", expected ", dtype_name(dtype_of<T>())));
        v = t->values<T>();
      }
      if (pass == 1) std::copy(v.begin(), v.end(), data);
    });
  }
}

}  // namespace cifarnet::io
