// cifarnet/io/save_load.hpp — saving and loading in one line each, to one
// safetensors file (io/safetensors.hpp; names as in docs/FORMATS.md):
//
//   io::save(net, "net.safetensors");              // parameters and BN statistics
//   io::load(net, "net.safetensors");              // strict: each parameter, nothing else
//   io::save(net, opt, "resume.safetensors");      // ... and the optimizer's slots
//   io::load(net, opt, "resume.safetensors");
//   io::save(trainer, "resume.safetensors");       // everything a Trainer checkpoints
//   io::load(trainer, "resume.safetensors");       // (global step, slots, RNGs, pipeline)
//
// A model is anything with parameters() (Model, distributed::Towers); a
// device-resident model is read through sync_parameters_to_host() and
// written through host_parameters(). An optimizer is anything with
// visit_state (optim::Momentum, Adam, a Chain, an EMA). A trainer is anything
// with state_dict() and load_state_dict() (train::Trainer, TrainerBase).
//
// Writes are atomic (write_safetensors: a temporary file, fsync, rename): a
// failed save throws IoError naming the file and leaves any file already at
// `path` as it was. Loads check the file, then every name and shape (and,
// for a model and an optimizer, every dtype) before they change anything;
// errors name the file. Strict loads (LoadOptions::strict, the default)
// refuse a file that lacks a parameter or slot and a file that holds a
// tensor nothing takes (a checkpoint of another network), naming them;
// strict = false loads what fits and reports the missing and the unexpected
// names in the LoadReport. Numbered checkpoints with rotation and crash
// recovery are CheckpointManager's (io/checkpoint_manager.hpp).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/io/safetensors.hpp"

namespace cifarnet::io {

namespace detail {
template <class M, class = void>
struct has_parameters : std::false_type {};
template <class M>
struct has_parameters<M, std::void_t<decltype(std::declval<M&>().parameters())>> : std::true_type {};

template <class M, class = void>
struct has_state_dict : std::false_type {};
template <class M>
struct has_state_dict<
    M, std::void_t<decltype(std::declval<M&>().state_dict()),
                   decltype(std::declval<M&>().load_state_dict(std::declval<const StateDict&>()))>>
    : std::true_type {};

template <class M, class = void>
struct has_host_arena : std::false_type {};
template <class M>
struct has_host_arena<M, std::void_t<decltype(std::declval<M&>().sync_parameters_to_host()),
                                     decltype(std::declval<M&>().host_parameters())>> : std::true_type {};

/// A model (not a trainer): io::save(model, ...) and io::load(model, ...).
template <class M>
inline constexpr bool is_model_v = has_parameters<M>::value && !has_state_dict<M>::value;

/// The model's parameters, current on the host for reading.
template <class M>
decltype(auto) parameters_to_read(M& m) {
  if constexpr (has_host_arena<M>::value)
    return m.sync_parameters_to_host();
  else
    return std::as_const(m.parameters());
}
/// The model's parameters on the host for writing (a device-resident model
/// uploads them before its next op).
template <class M>
decltype(auto) parameters_to_write(M& m) {
  if constexpr (has_host_arena<M>::value)
    return m.host_parameters();
  else
    return m.parameters();
}

/// The names `obj`'s visit_state gives, each after `prefix`.
template <class S>
std::set<std::string> state_names(S& obj, const std::string& prefix) {
  std::set<std::string> names;
  obj.visit_state(
      [&](const std::string& name, auto*, const std::vector<std::size_t>&) { names.insert(prefix + name); });
  return names;
}
}  // namespace detail

/// Writes the model's parameters (trainable ones and state such as batch
/// norm's moving statistics) to `path`, atomically.
template <class Model, std::enable_if_t<detail::is_model_v<Model>, int> = 0>
void save(Model& model, const std::string& path, const WriteOptions& write = {}) {
  StateDict d;
  add_parameters(d, detail::parameters_to_read(model));
  write_safetensors(path, d, write);
}

/// Loads what save(model, path) wrote into `model`; see LoadOptions for
/// strict and lenient loads. Nothing changes when it throws.
template <class Model, std::enable_if_t<detail::is_model_v<Model>, int> = 0>
LoadReport load(Model& model, const std::string& path, const LoadOptions& options = {},
                const ReadOptions& read = {}) {
  const StateDict d = read_safetensors(path, read);
  return load_parameters(detail::parameters_to_write(model), d, options);
}

/// Writes the model's parameters and the optimizer's state (its slots, by
/// their TF names: "<param>/Momentum", ...) to `path`, atomically: what a
/// hand-written training loop needs to resume (its step count is its own).
template <class Model, class Optimizer, std::enable_if_t<detail::is_model_v<Model>, int> = 0>
void save(Model& model, Optimizer& optimizer, const std::string& path, const WriteOptions& write = {}) {
  StateDict d;
  add_parameters(d, detail::parameters_to_read(model));
  add_state(d, optimizer);
  write_safetensors(path, d, write);
}

/// Loads what save(model, optimizer, path) wrote. Strict: every parameter
/// and slot must be there and nothing else; strict = false: what is missing
/// (parameters and slots) keeps its value and is listed in
/// LoadReport::missing, tensors of neither in LoadReport::unexpected.
/// options.prefix applies to the slots too. Nothing changes when it throws.
template <class Model, class Optimizer, std::enable_if_t<detail::is_model_v<Model>, int> = 0>
LoadReport load(Model& model, Optimizer& optimizer, const std::string& path, const LoadOptions& options = {},
                const ReadOptions& read = {}) {
  const StateDict d = read_safetensors(path, read);
  LoadOptions o = options;
  const std::set<std::string> slots = detail::state_names(optimizer, o.prefix);
  o.other_state.insert(slots.begin(), slots.end());
  auto& params = detail::parameters_to_write(model);
  detail::ParameterPlan plan = detail::plan_parameters(std::as_const(params), d, o);
  std::vector<std::string> missing_slots;
  check_state(optimizer, d, o.prefix, o.strict ? nullptr : &missing_slots);
  LoadReport r = detail::apply_parameters(params, std::move(plan), o);
  std::vector<std::string> listed;  // the same names as missing_slots
  load_state(optimizer, d, o.prefix, o.strict ? nullptr : &listed);
  r.missing.insert(r.missing.end(), missing_slots.begin(), missing_slots.end());
  return r;
}

/// Writes everything the trainer checkpoints (its state_dict(): parameters,
/// the optimizer's slots, global_step, registered EMAs, RNGs and pipeline
/// positions) to `path`, atomically.
template <class Trainer, std::enable_if_t<detail::has_state_dict<Trainer>::value, int> = 0>
void save(Trainer& trainer, const std::string& path, const WriteOptions& write = {}) {
  write_safetensors(path, trainer.state_dict(), write);
}

/// Resumes the trainer from what save(trainer, path) wrote; returns the
/// global step. Always strict: the file must hold every tensor the trainer
/// saves (its state_dict()) with its shape, and no other tensor; a DataError
/// (ShapeError) names the missing and the unexpected ones (the mis-shapen
/// one) before anything changes. The trainer's load_state_dict then loads
/// it (and checks dtypes, RNG states and pipeline positions). A lenient
/// resume that ignores tensors it does not use:
/// trainer.load_state_dict(read_safetensors(path)).
template <class Trainer, std::enable_if_t<detail::has_state_dict<Trainer>::value, int> = 0>
std::int64_t load(Trainer& trainer, const std::string& path, const ReadOptions& read = {}) {
  const StateDict d = read_safetensors(path, read);
  const StateDict mine = trainer.state_dict();
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : mine) {
    const TensorData* f = d.find(name);
    if (!f) {
      missing.push_back(cifarnet::detail::concat("'", name, "' ", detail::shape_str(t.shape)));
    } else if (f->shape != t.shape) {
      throw ShapeError(cifarnet::detail::concat(
          "the trainer's '", name, "' has shape ", detail::shape_str(t.shape), " but tensor '", name, "' in ",
          detail::source_of(d), " has shape ", detail::shape_str(f->shape)));
    }
  }
  for (const auto& [name, t] : d)
    if (!mine.contains(name))
      unexpected.push_back(cifarnet::detail::concat("'", name, "' ", detail::shape_str(t.shape)));
  if (!missing.empty() || !unexpected.empty()) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    std::string what = detail::source_of(d);
    if (!missing.empty())
      what += cifarnet::detail::concat(" is missing ", missing.size(), " tensor",
                                       missing.size() == 1 ? "" : "s", " the trainer saves: ", join(missing));
    if (!unexpected.empty())
      what += cifarnet::detail::concat(missing.empty() ? " has " : "; it has ", unexpected.size(),
                                       " unexpected tensor", unexpected.size() == 1 ? "" : "s",
                                       " (the trainer saves none of that name): ", join(unexpected));
    throw DataError(what);
  }
  return trainer.load_state_dict(d);
}

}  // namespace cifarnet::io
