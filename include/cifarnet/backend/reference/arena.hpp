// cifarnet/backend/reference/arena.hpp — the reference backend's flat-arena
// kernels (the host kernels of backend/host/arena.hpp, any scalar), and the
// kernels of a Parameters that no Model owns (tests, tools): the same.
#pragma once

#include "cifarnet/backend/host/arena.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Arena<backend::Reference, T> : backend::host::ArenaOp<T> {};

}  // namespace ops

/// The arena kernels a Parameters uses when no Model installed its backend's.
template <class T>
ArenaKernels<T>& default_arena_kernels() {
  static Device<backend::Reference> device;
  static ops::BackendArenaKernels<backend::Reference, T> kernels(device);
  return kernels;
}

}  // namespace cifarnet
