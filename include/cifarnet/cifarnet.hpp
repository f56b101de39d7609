// cifarnet/cifarnet.hpp — the core: tensors, parameters, layers, containers,
// the model and the losses, with the reference backend. Include
// <cifarnet/backend/onednn.hpp> as well for oneDNN on CPU.
#pragma once

#include "cifarnet/backend/reference.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/layers.hpp"
#include "cifarnet/loss/losses.hpp"
#include "cifarnet/nn/model.hpp"
#include "cifarnet/nn/sequential.hpp"
