// cifarnet/optim/groups.hpp — parameter groups: several optimizers, each
// over its own selection of variables with its own learning-rate schedule
// and length, stepped together at every global step (PyTorch's
// param_groups; here the groups may differ in kind: the airbench recipe
// trains its filters with Muon and the rest with momentum SGD, each group
// with its own rate and weight decay, every rate decaying linearly).
//
//   optim::ParamGroups<float> groups(net.parameters());
//   groups.add("filters", optim::variables_to_train({"block*/weights"}),
//              std::make_unique<optim::Muon<float>>(P, muon_opts,
//              optim::variables_to_train({"block*/weights"})), optim::polynomial_decay(0.24, total));
//   groups.add("whiten_bias", bias, std::make_unique<Sgd>(P, bias, wd, sgd),
//              optim::polynomial_decay(0.053, 75), {75});   // 75 steps, then no gradient
//   ... forward, backward ...
//   groups.step(P, step);
//
// step(P, s) steps every group whose length has not run out (s < steps, or
// no length) with lr = its schedule(s), in the order the groups were added.
// A group with a length stops after its last step and then, with
// stop_gradients (the default), turns its variables' gradients off
// (Parameters::set_requires_grad), so backward skips the passes only they
// needed (the recipe's whitening bias: backward then ends at the first
// convolution group). A variable in two groups, a group without an
// optimizer or a negative length is a ConfigError naming the group.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/schedules.hpp"
#include "cifarnet/optim/select.hpp"

namespace cifarnet::optim {

/// How long a group trains.
struct GroupOptions {
  std::int64_t steps = 0;      ///< the group's last step is steps - 1; 0: every step
  bool stop_gradients = true;  ///< after its last step, set_requires_grad(false) on its variables
};

/// Optimizers over disjoint selections with their own schedules (see the file comment).
template <class T = float>
class ParamGroups {
 public:
  explicit ParamGroups(const Parameters<T>& params) : params_(&params) {}

  /// Adds group `name`: `opt` (constructed over the same selection) steps
  /// the variables `selection` resolves to with lr = schedule(step).
  /// Returns the optimizer, owned by the groups.
  template <class Opt>
  Opt& add(std::string name, const Selection& selection, std::unique_ptr<Opt> opt, Schedule schedule,
           GroupOptions o = {}) {
    if (!opt) throw ConfigError("ParamGroups: group '" + name + "' has no optimizer");
    if (o.steps < 0)
      throw ConfigError("ParamGroups: group '" + name + "' has a negative length (" +
                        std::to_string(o.steps) + " steps)");
    std::vector<std::size_t> ids = selection.resolve(*params_);
    for (const auto& g : groups_)
      for (const std::size_t id : ids)
        if (std::find(g.ids.begin(), g.ids.end(), id) != g.ids.end())
          throw ConfigError("ParamGroups: variable '" + params_->info(id).name + "' is in group '" + g.name +
                            "' and in group '" + name + "'");
    Opt& ref = *opt;
    groups_.push_back(Group{std::move(name), std::move(ids), std::make_unique<Holder<Opt>>(std::move(opt)),
                            std::move(schedule), o});
    return ref;
  }

  /// Steps every group still training at global step `step` (see the file comment).
  void step(Parameters<T>& params, std::int64_t step) {
    for (auto& g : groups_) {
      if (!g.active(step)) continue;
      g.opt->step(params, g.schedule(step));
      if (g.options.steps > 0 && step + 1 == g.options.steps && g.options.stop_gradients)
        for (const std::size_t id : g.ids) params.set_requires_grad(id, false);
    }
  }

  /// Group `name`'s learning rate at `step` (0 once its length has run out);
  /// ConfigError for an unknown name.
  double learning_rate(const std::string& name, std::int64_t step) const {
    const Group& g = find(name);
    return g.active(step) ? g.schedule(step) : 0.0;
  }
  /// The ids of group `name`'s variables, in registration order.
  const std::vector<std::size_t>& ids(const std::string& name) const { return find(name).ids; }
  std::size_t size() const { return groups_.size(); }

 private:
  struct Stepper {
    virtual ~Stepper() = default;
    virtual void step(Parameters<T>& params, double lr) = 0;
  };
  template <class Opt>
  struct Holder final : Stepper {
    explicit Holder(std::unique_ptr<Opt> o) : opt(std::move(o)) {}
    void step(Parameters<T>& params, double lr) override { opt->step(params, lr); }
    std::unique_ptr<Opt> opt;
  };
  struct Group {
    std::string name;
    std::vector<std::size_t> ids;
    std::unique_ptr<Stepper> opt;
    Schedule schedule;
    GroupOptions options;
    bool active(std::int64_t step) const { return options.steps == 0 || step < options.steps; }
  };
  const Group& find(const std::string& name) const {
    for (const auto& g : groups_)
      if (g.name == name) return g;
    throw ConfigError("ParamGroups: no group named '" + name + "'");
  }

  const Parameters<T>* params_;
  std::vector<Group> groups_;
};

}  // namespace cifarnet::optim
