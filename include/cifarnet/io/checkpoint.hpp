// cifarnet/io/checkpoint.hpp — everything about checkpoints in one include:
//   io/checkpoint_index.hpp    the `checkpoint` index file (TF's text format)
//   io/checkpoint_manager.hpp  CheckpointManager: numbered files, rotation,
//                              atomic writes, restore of the newest valid one
//   io/parameter_state.hpp     parameters, optimizer slots, step and RNG
//                              <-> StateDict (strict restore)
//   io/warm_start.hpp          TF-Slim's assign_from_checkpoint / _from_values
//   io/save_load.hpp           io::save / io::load: a model, a model and its
//                              optimizer, or a trainer, in one file
// Code that needs one of them includes that one.
#pragma once

#include "cifarnet/io/checkpoint_index.hpp"
#include "cifarnet/io/checkpoint_manager.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/io/save_load.hpp"
#include "cifarnet/io/warm_start.hpp"
