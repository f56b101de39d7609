// cifarnet/backend/reference/common.hpp — indexing helpers for the reference
// kernels: logical (n, c, h, w) to a flat offset in either data format.
#pragma once

#include <cstddef>

#include "cifarnet/core/tensor.hpp"

namespace cifarnet {
namespace backend {
namespace ref {

/// Maps logical indices to offsets for one activation tensor.
struct Layout {
  DataFormat fmt;
  std::size_t c, h, w;
  std::size_t operator()(std::size_t n, std::size_t ci, std::size_t y, std::size_t x) const {
    return fmt == DataFormat::NCHW ? ((n * c + ci) * h + y) * w + x : ((n * h + y) * w + x) * c + ci;
  }
};

}  // namespace ref
}  // namespace backend
}  // namespace cifarnet
