// What docs/API.md's "```cpp cuda" fragments take as given, besides
// api_prelude.hpp's names: the network's options and seed, the number of
// GPUs and of steps. Compiled with cifarnet::cuda (and NCCL).
#pragma once

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/distributed/nccl.hpp>
#include <cifarnet/distributed/towers.hpp>

#include <cstddef>
#include <cstdint>

#include "api_prelude.hpp"

extern NetOptions opts;
extern std::uint64_t seed;
extern std::size_t n;
extern std::int64_t steps;
