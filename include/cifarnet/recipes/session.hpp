// cifarnet/recipes/session.hpp — a network and its trainer behind an
// interface, so the code that drives a run does not depend on the network's
// type.
//
// A run's recipe (data, checkpoints, hooks, evaluation, the distribution
// strategy) is the same for every backend and for towers; only the
// network's forward and backward differ. With the network behind a Session,
// that recipe compiles once per program, not once per backend: a program
// makes its Session in one translation unit per backend and drives it from
// another (examples/resnet_cifar10: main.cpp, run.cpp, onednn.cpp, cuda.cpp).
//
//   // onednn.cpp: the network's code for this backend
//   std::unique_ptr<recipes::Session> make_session(train::TrainerOptions o) {
//     return recipes::make_session(std::make_unique<Model<ResNetCifar<>, backend::OneDnn>>(...), o);
//   }
//   // run.cpp: the recipe, typed on nothing
//   auto s = make_session(options);
//   s->trainer().restore_latest(manager);
//   s->trainer().run(pipeline);
//   const train::EvalResult r = s->evaluate(eval_pipeline);
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "cifarnet/data/batch.hpp"
#include "cifarnet/core/cross_replica.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/recipes/devices.hpp"
#include "cifarnet/train/trainer.hpp"

namespace cifarnet::recipes {

/// A network (one model, or towers) and its Trainer, seen without their types.
class Session {
 public:
  virtual ~Session() = default;
  /// The trainer: its loop, optimizer, state, hooks and checkpoints.
  virtual train::TrainerBase& trainer() = 0;
  /// Precision@1 and mean loss over the batches of `stream` until it ends
  /// (Mode::Infer: BN's moving statistics).
  virtual train::EvalResult evaluate(data::BatchStream& stream) = 0;
  /// The number of towers (0: one model, not towers).
  virtual std::size_t towers() const = 0;
  /// What sums the towers' gradients ("" for one model).
  virtual std::string tower_reducer() const = 0;
  /// --log-device-placement's line (describe_device of the backend).
  virtual std::string device() const = 0;
  /// Synchronized batch norm's reducer for one model (Model::set_cross_replica);
  /// a ConfigError for towers, which never run under mpirun.
  virtual void set_cross_replica(CrossReplicaSum* reducer) = 0;
  /// Keeps one model's parameter arena (and the optimizer slots made after
  /// this call) on its GPU for the whole step (Model::set_device_resident;
  /// the Trainer brings the host copy current for checkpoints and
  /// summaries). For a single process: a gradient all-reduce between
  /// processes reads the host arena. A no-op for towers and the CPU backends.
  virtual void set_device_resident(bool on) = 0;
  /// The activation the network's Tap named `tap` saw in its last forward
  /// (Model::activation: host memory, valid until the next forward), e.g.
  /// for the CIFAR-10 tutorial's activation summaries. Null for a network
  /// that cannot show one (towers); an Error when the model has no such tap
  /// or has not run forward yet.
  virtual const Tensor<float>* activation(const std::string& tap) = 0;
};

namespace detail {
template <class Net, class = void>
struct has_activation : std::false_type {};
template <class Net>
struct has_activation<
    Net, std::void_t<decltype(std::declval<Net&>().activation(std::declval<const std::string&>()))>>
    : std::true_type {};
}  // namespace detail

/// The Session of `net` (a Model or distributed::Towers), with a trainer of options `opts`.
template <class Net>
class SessionOf final : public Session {
 public:
  SessionOf(std::unique_ptr<Net> net, train::TrainerOptions opts)
      : net_(std::move(net)), trainer_(*net_, std::move(opts)) {}

  train::TrainerBase& trainer() override { return trainer_; }
  train::EvalResult evaluate(data::BatchStream& stream) override { return train::evaluate(*net_, stream); }
  std::size_t towers() const override {
    if constexpr (is_towers<Net>::value)
      return net_->size();
    else
      return 0;
  }
  std::string tower_reducer() const override {
    if constexpr (is_towers<Net>::value)
      return net_->reducer().name();
    else
      return "";
  }
  std::string device() const override { return describe_device<typename Net::Backend>(); }
  void set_cross_replica([[maybe_unused]] CrossReplicaSum* reducer) override {
    if constexpr (is_towers<Net>::value)
      throw ConfigError("synchronized batch norm is for one model per process, not towers");
    else
      net_->set_cross_replica(reducer);
  }
  void set_device_resident([[maybe_unused]] bool on) override {
    if constexpr (train::detail::has_device_arena<Net>::value) net_->set_device_resident(on);
  }
  const Tensor<float>* activation([[maybe_unused]] const std::string& tap) override {
    if constexpr (detail::has_activation<Net>::value)
      return &net_->activation(tap);
    else
      return nullptr;
  }

 private:
  std::unique_ptr<Net> net_;
  train::Trainer<Net> trainer_;
};

/// `net` and a trainer of options `opts` as a Session.
template <class Net>
std::unique_ptr<Session> make_session(std::unique_ptr<Net> net, train::TrainerOptions opts) {
  return std::make_unique<SessionOf<Net>>(std::move(net), std::move(opts));
}

}  // namespace cifarnet::recipes
