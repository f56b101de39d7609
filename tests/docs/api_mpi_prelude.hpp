// What docs/API.md's "```cpp mpi" fragments take as given, besides
// api_prelude.hpp's names: the program's arguments, a communicator, a
// trainer of the ResNet, a checkpoint manager, a step's batch function and
// an optimizer chain without the all-reduce. Compiled with cifarnet::mpi.
#pragma once

#include <cifarnet/distributed/data_parallel.hpp>
#include <cifarnet/distributed/parameter_server.hpp>
#include <cifarnet/io/checkpoint_manager.hpp>
#include <cifarnet/train/hooks.hpp>

#include <functional>

#include "api_prelude.hpp"

namespace dist = cifarnet::distributed;

extern int argc;
extern char** argv;
extern dist::Communicator comm;
extern train::Trainer<DocsResNet> trainer;
extern io::CheckpointManager manager;
extern optim::Chain<optim::WeightDecay, optim::Momentum> decay_momentum;
extern std::function<const data::Batch&()> next;
