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

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
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

/// Options of load_parameters (and io::load, io/save_load.hpp).
struct LoadOptions {
  /// true: every parameter must be in the dict, and every tensor of the dict
  /// under the prefix must be a parameter (or other_state); a DataError names
  /// the missing and the unexpected ones. false: missing parameters keep their
  /// values, unexpected tensors are not loaded, and the report lists both.
  bool strict = true;
  std::string prefix;  ///< the tensors' names are prefix + parameter name
  /// Full names of tensors that are not parameters but state loaded on its own
  /// (an optimizer's slots, io::load(model, optimizer, path) fills it): neither
  /// loaded nor unexpected.
  std::set<std::string> other_state;
  /// true: every tensor that is not a parameter is taken as other state, so
  /// nothing is unexpected: the dict is a whole training state whose other
  /// parts their owners load and check (Trainer::load_state_dict, a parameter
  /// server's initial state).
  bool ignore_unexpected = false;
};

/// What a load or warm start did.
struct LoadReport {
  std::vector<std::pair<std::string, std::string>> loaded;  ///< (parameter, tensor) pairs
  std::vector<std::string> missing;                         ///< parameters (or slots) left as they were
  /// Tensors of the dict that name no parameter (nor other state), not loaded
  /// (load_parameters; a warm start selects a subset and leaves it empty).
  std::vector<std::string> unexpected;
};

namespace detail {
inline std::string shape_str(const std::vector<std::size_t>& s) { return TensorData::shape_string(s); }

inline bool is_floating(Dtype d) {
  return d == Dtype::F16 || d == Dtype::BF16 || d == Dtype::F32 || d == Dtype::F64;
}

/// Checks that tensor `t` fits parameter `id`: equal shape, a floating dtype.
template <class T>
void check_tensor(const Parameters<T>& params, std::size_t id, const TensorData& t,
                  const std::string& tensor_name, const StateDict& dict) {
  const ParamInfo& info = params.info(id);
  if (t.shape != info.shape)
    throw ShapeError(cifarnet::detail::concat("parameter '", info.name, "' has shape ", shape_str(info.shape),
                                              " but tensor '", tensor_name, "' in ", source_of(dict),
                                              " has shape ", shape_str(t.shape)));
  if (!is_floating(t.dtype))
    throw DataError(cifarnet::detail::concat("parameter '", info.name, "': tensor '", tensor_name, "' in ",
                                             source_of(dict), " has dtype ", dtype_name(t.dtype),
                                             ", expected a floating type"));
}

/// Copies tensor `t` into parameter `id`, checking shape and dtype.
template <class T>
void assign_tensor(Parameters<T>& params, std::size_t id, const TensorData& t, const std::string& tensor_name,
                   const StateDict& dict) {
  check_tensor(params, id, t, tensor_name, dict);
  const std::vector<T> v = t.to_floating<T>();
  std::copy(v.begin(), v.end(), params.value(id));
}

/// A checked load of parameters, not yet applied: what load_parameters
/// writes once everything checked out.
struct ParameterPlan {
  LoadReport report;
  std::vector<std::pair<std::size_t, const TensorData*>> assign;  ///< parameter id, its tensor
};

/// Everything load_parameters checks, without writing: the missing and the
/// unexpected tensors (a DataError naming them under strict), then each
/// found tensor's shape and dtype (ShapeError / DataError naming it).
template <class T>
ParameterPlan plan_parameters(const Parameters<T>& params, const StateDict& dict, const LoadOptions& opt) {
  ParameterPlan plan;
  LoadReport& r = plan.report;
  for (std::size_t id = 0; id < params.count(); ++id) {
    const ParamInfo& info = params.info(id);
    if (const TensorData* t = dict.find(opt.prefix + info.name))
      plan.assign.emplace_back(id, t);
    else
      r.missing.push_back(info.name);
  }
  if (!opt.ignore_unexpected)
    for (const auto& [name, t] : dict) {
      if (name.compare(0, opt.prefix.size(), opt.prefix) != 0) continue;  // outside the prefix
      if (params.find(name.substr(opt.prefix.size())) || opt.other_state.count(name)) continue;
      r.unexpected.push_back(name);
    }
  if (opt.strict && (!r.missing.empty() || !r.unexpected.empty())) {
    std::string what = source_of(dict);
    if (!r.missing.empty()) {
      std::string list;
      for (const auto& m : r.missing)
        list += cifarnet::detail::concat(list.empty() ? "" : ", ", "'", opt.prefix + m, "' ",
                                         shape_str(params.info(*params.find(m)).shape));
      what += cifarnet::detail::concat(" is missing ", r.missing.size(), " parameter",
                                       r.missing.size() == 1 ? "" : "s", ": ", list);
    }
    if (!r.unexpected.empty()) {
      std::string list;
      for (const auto& u : r.unexpected)
        list += cifarnet::detail::concat(list.empty() ? "" : ", ", "'", u, "' ", shape_str(dict.at(u).shape));
      what += cifarnet::detail::concat(r.missing.empty() ? " has " : "; it has ", r.unexpected.size(),
                                       " unexpected tensor", r.unexpected.size() == 1 ? "" : "s",
                                       " (no parameter", opt.other_state.empty() ? "" : " or other state",
                                       " has that name): ", list,
                                       " (strict = false loads the rest and reports them)");
    }
    throw DataError(what);
  }
  for (const auto& [id, t] : plan.assign)
    check_tensor(params, id, *t, opt.prefix + params.info(id).name, dict);
  return plan;
}

/// Writes a checked plan (nothing left to fail).
template <class T>
LoadReport apply_parameters(Parameters<T>& params, ParameterPlan plan, const LoadOptions& opt) {
  for (const auto& a : plan.assign) {
    const std::size_t id = a.first;
    const TensorData& t = *a.second;
    const std::string name = opt.prefix + params.info(id).name;
    const std::vector<T> v = t.to_floating<T>();
    std::copy(v.begin(), v.end(), params.value(id));
    plan.report.loaded.emplace_back(params.info(id).name, name);
  }
  return std::move(plan.report);
}
}  // namespace detail

/// Restores parameters from `dict` (a resume, a saved model): each parameter
/// from the tensor named prefix + its name, shapes equal, floating dtypes
/// converted to T. Strict mode (the default) throws DataError naming every
/// missing parameter and every unexpected tensor (one under the prefix that
/// names no parameter and is not in other_state); a dict that also holds
/// other state loaded elsewhere (a Trainer's checkpoint: optimizer slots,
/// global_step) says so with other_state or ignore_unexpected. Everything is
/// checked before anything is written.
template <class T>
LoadReport load_parameters(Parameters<T>& params, const StateDict& dict, const LoadOptions& opt = {}) {
  if (!params.allocated()) throw Error("load_parameters: the parameter arena is not allocated yet");
  return detail::apply_parameters(params, detail::plan_parameters(std::as_const(params), dict, opt), opt);
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

namespace detail {
/// load_state's passes: 0 checks, 1 writes (after a 0 that passed).
template <class S>
void state_passes(S& obj, const StateDict& dict, const std::string& prefix, std::vector<std::string>* missing,
                  int first, int last) {
  for (int pass = first; pass <= last; ++pass) {
    obj.visit_state([&](const std::string& name, auto* data, const std::vector<std::size_t>& shape) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
      const TensorData* t = dict.find(prefix + name);
      if (!t) {
        if (missing) {
          if (pass == first) missing->push_back(prefix + name);
          return;
        }
        throw DataError(cifarnet::detail::concat(source_of(dict), " has no state tensor '", prefix + name,
                                                 "' ", shape_str(shape)));
      }
      if (t->shape != shape)
        throw ShapeError(cifarnet::detail::concat("state '", name, "' has shape ", shape_str(shape),
                                                  " but tensor '", prefix + name, "' in ", source_of(dict),
                                                  " has shape ", shape_str(t->shape)));
      std::vector<T> v;
      if constexpr (std::is_floating_point_v<T>) {
        if (!is_floating(t->dtype))
          throw DataError(cifarnet::detail::concat("state '", name, "': tensor '", prefix + name, "' in ",
                                                   source_of(dict), " has dtype ", dtype_name(t->dtype),
                                                   ", expected a floating type"));
        if (pass == 1) v = t->to_floating<T>();
      } else {
        if (t->dtype != dtype_of<T>())
          throw DataError(cifarnet::detail::concat("state '", name, "': tensor '", prefix + name, "' in ",
                                                   source_of(dict), " has dtype ", dtype_name(t->dtype),
                                                   ", expected ", dtype_name(dtype_of<T>())));
        if (pass == 1) v = t->values<T>();
      }
      if (pass == 1) std::copy(v.begin(), v.end(), data);
    });
  }
}
}  // namespace detail

/// Restores what add_state saved: every state tensor of `obj` must be in
/// `dict` with its shape (DataError / ShapeError naming it otherwise);
/// floating dtypes convert. Everything is checked before anything is written.
/// With `missing` non-null, a state tensor absent from `dict` keeps its value
/// and its name is appended to *missing instead (a lenient load).
template <class S>
void load_state(S& obj, const StateDict& dict, const std::string& prefix = "",
                std::vector<std::string>* missing = nullptr) {
  detail::state_passes(obj, dict, prefix, missing, 0, 1);
}

/// What load_state checks, writing nothing: throws what it would throw.
template <class S>
void check_state(S& obj, const StateDict& dict, const std::string& prefix = "",
                 std::vector<std::string>* missing = nullptr) {
  detail::state_passes(obj, dict, prefix, missing, 0, 0);
}

}  // namespace cifarnet::io
