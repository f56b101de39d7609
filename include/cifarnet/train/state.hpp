// cifarnet/train/state.hpp — what a checkpoint holds, gathered from the
// pieces of a training run.
//
// A TrainingState collects "saveables": the model's parameter arena
// (parameters and BN statistics by name), optimizer slots and EMA shadows
// (anything with visit_state(f(name, data, shape))), RNG states, the input
// pipeline position and any user state, plus the global step. save() builds
// one StateDict; restore() loads every piece back and fails with a message
// naming the missing or mis-shaped entry, so a resumed run continues exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/data/batch.hpp"
#include "cifarnet/io/parameter_state.hpp"

namespace cifarnet::train {

/// One piece of checkpointed state.
class Saveable {
 public:
  virtual ~Saveable() = default;
  virtual void save(StateDict& dict) = 0;
  virtual void load(const StateDict& dict) = 0;
};

/// A Saveable from two functions.
class FunctionSaveable : public Saveable {
 public:
  FunctionSaveable(std::function<void(StateDict&)> s, std::function<void(const StateDict&)> l)
      : save_(std::move(s)), load_(std::move(l)) {}
  void save(StateDict& d) override { save_(d); }
  void load(const StateDict& d) override { load_(d); }

 private:
  std::function<void(StateDict&)> save_;
  std::function<void(const StateDict&)> load_;
};

/// Any object with visit_state(f(name, T* data, shape)): optimizers, gradient
/// transform chains, EMA (io::add_state / io::load_state; every slot is
/// required on load).
template <class S>
class SlotSaveable : public Saveable {
 public:
  explicit SlotSaveable(S& obj) : obj_(&obj) {}
  void save(StateDict& d) override { io::add_state(d, *obj_); }
  void load(const StateDict& d) override { io::load_state(*obj_, d); }

 private:
  S* obj_;
};

/// An Rng's state in the metadata as "rng/<name>".
class RngSaveable : public Saveable {
 public:
  RngSaveable(std::string name, Rng& rng) : name_(std::move(name)), rng_(&rng) {}
  void save(StateDict& d) override { io::set_rng_state(d, name_, rng_->state()); }
  void load(const StateDict& d) override {
    auto s = io::rng_state(d, name_);
    if (!s)
      throw DataError("checkpoint " + io::detail::source_of(d) + " has no RNG state 'rng/" + name_ + "'");
    rng_->set_state(*s);
  }

 private:
  std::string name_;
  Rng* rng_;
};

/// A batch stream's position (a data::Pipeline's) in the metadata as `key`
/// ("pipeline-position-v1 ..."), so that a resumed run reads exactly the
/// batches that would have followed. Loading a checkpoint without it is a
/// DataError naming the file and the key. The stream must outlive the
/// trainer; reseed() in place keeps it registered.
class StreamPositionSaveable : public Saveable {
 public:
  explicit StreamPositionSaveable(data::BatchStream& stream, std::string key = "pipeline/train")
      : stream_(&stream), key_(std::move(key)) {}
  void save(io::StateDict& d) override { d.metadata[key_] = stream_->position().to_string(); }
  void load(const io::StateDict& d) override {
    const auto it = d.metadata.find(key_);
    if (it == d.metadata.end())
      throw DataError("checkpoint " + io::detail::source_of(d) + " has no '" + key_ + "' position");
    stream_->restore(data::PipelinePosition::parse(it->second));
  }

 private:
  data::BatchStream* stream_;
  std::string key_;
};

/// The hook to checkpoint a pipeline: trainer.add_state(train::stream_position_saveable(pipe)).
inline std::shared_ptr<Saveable> stream_position_saveable(data::BatchStream& stream,
                                                          std::string key = "pipeline/train") {
  return std::make_shared<StreamPositionSaveable>(stream, std::move(key));
}

/// The parameters, BN statistics and global step of a run, plus any
/// registered saveables.
template <class T = float>
class TrainingState {
 public:
  explicit TrainingState(Parameters<T>& params) : params_(&params) {}

  void add(std::shared_ptr<Saveable> s) { extra_.push_back(std::move(s)); }
  template <class S>
  void add_slots(S& obj) {
    add(std::make_shared<SlotSaveable<S>>(obj));
  }
  void add_rng(const std::string& name, Rng& rng) { add(std::make_shared<RngSaveable>(name, rng)); }

  StateDict save(std::int64_t global_step) {
    StateDict d;
    io::add_parameters(d, *params_);
    io::set_global_step(d, global_step);
    for (auto& s : extra_) s->save(d);
    return d;
  }

  /// Loads everything back (strict: every parameter and slot must be there
  /// with its shape); returns the global step.
  std::int64_t restore(const StateDict& d) {
    io::LoadOptions o;
    o.strict = true;
    o.ignore_unexpected = true;  // slots, EMA shadows, global_step: the saveables below load theirs
    io::load_parameters(*params_, d, o);
    for (auto& s : extra_) s->load(d);
    const auto step = io::global_step(d);
    if (!step) throw DataError("checkpoint " + io::detail::source_of(d) + " has no 'global_step'");
    return *step;
  }

  Parameters<T>& parameters() { return *params_; }

 private:
  Parameters<T>* params_;
  std::vector<std::shared_ptr<Saveable>> extra_;
};

}  // namespace cifarnet::train
