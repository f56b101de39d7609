// cifarnet/optim/optim.hpp — everything for training updates: optimizers
// (GradientDescent, Momentum, Adam, Muon), gradient transforms (weight decay,
// clipping, multipliers, check_numerics, variables_to_train), Chain, learning-rate
// schedules and exponential moving averages, all with TensorFlow 1.x
// semantics. See docs/OPTIM.md for a tour.
#pragma once

#include "cifarnet/optim/adam.hpp"
#include "cifarnet/optim/chain.hpp"
#include "cifarnet/optim/ema.hpp"
#include "cifarnet/optim/groups.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/momentum.hpp"
#include "cifarnet/optim/muon.hpp"
#include "cifarnet/optim/schedules.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/sgd.hpp"
#include "cifarnet/optim/state.hpp"
#include "cifarnet/optim/transforms.hpp"
#include "cifarnet/optim/weight_decay.hpp"
