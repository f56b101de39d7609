// cifarnet/ops/ops.hpp — the op interfaces every backend implements.
//
// Each op is `template <class Backend, class T> struct X;`. The primary
// templates below only exist to fail with a readable message; backends
// specialize them in backend/<name>/. Ops are stateful: they cache whatever a
// backend builds per geometry (oneDNN primitives), so a layer holds one op
// object and calls it every step without re-creating anything.
//
// Conventions for every op:
//  - activation gradients (dx) are overwritten;
//  - parameter gradients (dw, db, dgamma, dbeta) are overwritten too: each
//    parameter belongs to exactly one layer, so no zeroing pass is needed;
//  - pointers are contiguous buffers in the geometry's data format; conv
//    weights are HWIO, dense weights (in, out).
//
// Ops:
//  Conv2d      forward(dev, g, x, w, b|nullptr, y)
//              backward_data(dev, g, dy, w, dx)
//              backward_weights(dev, g, x, dy, dw, db|nullptr)
//  BatchNorm   forward_train(dev, g, eps, x, gamma, beta, y, mean, var)   (var biased)
//              forward_infer(dev, g, eps, x, gamma, beta, mean, var, y)
//              backward(dev, g, eps, x, dy, gamma, mean, var, dx, dgamma, dbeta)
//  Pool2d      forward(dev, g, kind, training, x, y)
//              backward(dev, g, kind, x, y, dy, dx)
//  Lrn         forward(dev, g, p, training, x, y)
//              backward(dev, g, p, x, y, dy, dx)
//  Relu        forward(dev, n, x, y)      (x == y allowed)
//              backward(dev, n, y, dy, dx)  (uses the output; dy == dx allowed)
//  Dense       forward(dev, n, in, out, x, w, b|nullptr, y)
//              backward_data(dev, n, in, out, dy, w, dx)
//              backward_weights(dev, n, in, out, x, dy, dw, db|nullptr)
#pragma once

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace ops {

#define CIFARNET_OP_PRIMARY(Op)                                                                   \
  template <class B, class T>                                                                     \
  struct Op {                                                                                     \
    static_assert(detail::dependent_false<B, T>,                                                  \
                  "cifarnet: no " #Op                                                             \
                  " kernel for this backend and scalar. Include "                                 \
                  "<cifarnet/backend/reference.hpp> (any scalar), <cifarnet/backend/onednn.hpp> " \
                  "or <cifarnet/backend/cuda.hpp> (float only).");                                \
  };

CIFARNET_OP_PRIMARY(Conv2d)
CIFARNET_OP_PRIMARY(BatchNorm)
CIFARNET_OP_PRIMARY(Pool2d)
CIFARNET_OP_PRIMARY(Lrn)
CIFARNET_OP_PRIMARY(Relu)
CIFARNET_OP_PRIMARY(Dense)

#undef CIFARNET_OP_PRIMARY

}  // namespace ops
}  // namespace cifarnet
