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
//  Gelu        forward(dev, n, x, y)      exact erf form y = x·Φ(x) (x == y allowed)
//              backward(dev, n, x, dy, dx)  (uses the input; dy == dx allowed)
//  Dense       forward(dev, n, in, out, x, w, b|nullptr, y)
//              backward_data(dev, n, in, out, dy, w, dx)
//              backward_weights(dev, n, in, out, x, dy, dw, db|nullptr)
//  Gemm        run(dev, ta, tb, m, n, k, alpha, a, b, beta, c)   row-major
//                  C (m×n) = alpha·op(A)·op(B) + beta·C, op(A) m×k (A stored k×m when ta),
//                  op(B) k×n (B stored n×k when tb); beta = 0 ignores C's contents
//              run_bf16(same arguments)   A and B rounded to bfloat16, products summed
//                  in float (reference: in T; oneDNN: its bf16 matmul where the CPU has bf16
//                  kernels, else run()); optional: a backend without it runs run()
//  Eltwise     add(dev, n, a, b, y, relu)   y = a + b, then max(., 0) when relu
//                                           (y may alias a or b; NaN propagates)
//              add_masked(dev, n, a, b, m, y)   y = a + b where m > 0, else 0: a sum's
//                                           gradient through the ReLU whose output is m
//                                           (y may alias a or b; NaN in a + b propagates)
//              affine(dev, n, x, a, b, y)   y = x·a + b with scalars a, b (x == y allowed)
//              (oneDNN also: add_masked_bits, add_pooled and add_pooled_bits — a sum whose
//              other branch is an average pool's backward of a channel-padded gradient,
//              formed on the fly; the latter with a and y float or bf16 bits)
//  ChannelPad  forward(dev, g, before, after, x, y)   g: the input's geometry; y has
//                                           before + g.c + after channels, the new ones zero
//              backward(dev, g, before, after, dy, dx)
//  GlobalAvgPool forward(dev, g, x, y)      y (n, c): the mean of each channel over h·w
//              backward(dev, g, dy, dx)     dx = dy / (h·w) broadcast over h·w
//  SoftmaxCrossEntropy                      logits z: n rows of k (row-major), labels int32
//              loss(dev, n, k, z, labels, dz|nullptr) -> double: the mean sparse softmax
//                  cross-entropy; dz = d(mean)/dz; DataError for a label outside [0, k)
//              softmax(dev, n, k, z, p)     row-wise probabilities
//              argmax(dev, n, k, z, out)    int32 index of each row's largest logit
//              in_top1(dev, n, k, z, labels, hits)   TF's in_top_k(1): uint8 0/1 per row
//  BnStats     update_moving(dev, c, decay, bessel, mean, var, moving_mean, moving_var)
//                  moving = decay·moving + (1 − decay)·batch (var × bessel), in double
//              fold(dev, rows, c, eps, w, gamma, beta, mean, var, folded_w, folded_b)
//                  conv+BN folding: s = γ/√(var+ε), w'[r, o] = w[r, o]·s[o], b' = β − mean·s
//  SyncBatchNorm statistics(dev, g, x, reducer, mean, var) -> double: global batch
//                  mean and biased variance over every replica; returns the global count
//              backward(dev, g, eps, x, dy, gamma, mean, var, reducer, dx, dgamma, dbeta)
//                  (collective: every replica calls both at the same points)
//  Arena       flat passes over the parameter arena (core/arena.hpp, ArenaKernels
//              lists them): sgd, momentum, adam, ema, scale, scale_div, fill, copy,
//              swap, sum_squares, all_finite, find_non_finite, weight_decay — each
//              (dev, runs, pointers..., scalars); the optimizers, transforms, EMA
//              and the Trainer run through them (a Model installs its backend's)
//
// Which backend implements each op how: docs/ARCHITECTURE.md.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/arena.hpp"
#include "cifarnet/core/compiled.hpp"
#include "cifarnet/core/cross_replica.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace ops {

/// The activation a backend's BatchNorm applies in its own passes
/// (backend_traits<B>::fused_relu, fused_gelu): the forward writes act(bn(x))
/// and the backward takes the gradient of that output.
enum class BnActivation { None, Relu, Gelu };

/// A batch norm's training output given as its map instead of stored: y =
/// x a + b per channel (then max(., 0) with `relu`), x the batch norm's
/// input (at the first image of the images meant), a and b its
/// coefficients. A convolution that reads y computes each image of it in
/// its own kernels' prologue (oneDNN;
/// ConvBatchNorm's deferred output, layers/conv_bn.hpp).
template <class T>
struct BnNormMap {
  const T* x = nullptr;
  const T* a = nullptr;
  const T* b = nullptr;
  bool relu = false;
};

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
CIFARNET_OP_PRIMARY(Gelu)
CIFARNET_OP_PRIMARY(Dense)
CIFARNET_OP_PRIMARY(Gemm)
CIFARNET_OP_PRIMARY(Eltwise)
CIFARNET_OP_PRIMARY(ChannelPad)
CIFARNET_OP_PRIMARY(GlobalAvgPool)
CIFARNET_OP_PRIMARY(SoftmaxCrossEntropy)
CIFARNET_OP_PRIMARY(BnStats)
CIFARNET_OP_PRIMARY(SyncBatchNorm)
CIFARNET_OP_PRIMARY(Arena)

#undef CIFARNET_OP_PRIMARY

/// The plan executor's inference convolution (nn/executor.hpp):
///   forward(dev, g, x, x_bf16, w, b|nullptr, version, bf16, s|nullptr, s_bf16, y, y_bf16, relu, own,
///           winograd)
///     y = [max(., 0)](conv(x, w) + b [+ s]): s the residual sum's other
///     term (s == y: y holds it on entry); x, s and y float or (x_bf16,
///     s_bf16, y_bf16) bf16 bits; w HWIO float, `version` as
///     Parameters::version (0: changed); `bf16`: bf16 products with float
///     accumulation where bf16_storage(); `own`: in the backend's own
///     kernels (where own_kernel_why_not(g, bf16) is empty); `winograd`:
///     in the backend's own Winograd kernels (where winograd_why_not(g,
///     bf16) is empty).
///   own_kernel_why_not(g, bf16): why the own kernels do not run g (the
///     rule conv_epilogue_in_registers asks), empty where they do.
///   winograd_why_not(g, bf16): the same for the own Winograd kernels (the
///     rule conv_winograd_epilogue asks).
/// `supported` says whether a backend has it: where it does not (this
/// primary template), a Model runs inference through its layers instead.
template <class B, class T>
struct ConvEpilogue {
  static constexpr bool supported = false;
  static bool bf16_storage() { return false; }
  static std::string own_kernel_why_not(const ConvGeom&, bool) { return "no own kernels on this backend"; }
  static std::string winograd_why_not(const ConvGeom&, bool) {
    return "no own Winograd kernels on this backend";
  }
  template <class... A>
  [[noreturn]] void forward(A&&...) {
    throw ConfigError("ops::ConvEpilogue: this backend has no inference convolution epilogue");
  }
};

/// Does ops::Arena A take optimizer state onto its device (adopt_state)?
template <class A, class D, class T, class = void>
struct has_adopt_state : std::false_type {};
template <class A, class D, class T>
struct has_adopt_state<A, D, T,
                       std::void_t<decltype(std::declval<A&>().adopt_state(
                           std::declval<D&>(), std::declval<T*>(), std::size_t(0)))>> : std::true_type {};

/// Does ops::Arena A decay several ranges with one read back (weight_decay_ranges)?
template <class A, class D, class T, class = void>
struct has_weight_decay_ranges : std::false_type {};
template <class A, class D, class T>
struct has_weight_decay_ranges<
    A, D, T,
    std::void_t<decltype(std::declval<A&>().weight_decay_ranges(
        std::declval<D&>(), std::declval<const std::vector<std::pair<std::size_t, std::size_t>>&>(),
        std::declval<T*>(), std::declval<const T*>(), std::declval<T>()))>> : std::true_type {};

/// Does ops::Arena A leave its sums on its device until read (the *_deferred passes)?
template <class A, class D, class T, class = void>
struct has_deferred_sums : std::false_type {};
template <class A, class D, class T>
struct has_deferred_sums<
    A, D, T,
    std::void_t<decltype(std::declval<A&>().finite_deferred(
        std::declval<D&>(), std::declval<const ArenaRuns&>(), std::declval<const T*>()))>> : std::true_type {
};

/// The ArenaKernels of backend B on `dev` (what a Model installs into its
/// Parameters): ops::Arena<B, T> behind the type-erased interface.
template <class B, class T>
class BackendArenaKernels final : public ArenaKernels<T> {
 public:
  CIFARNET_OUTLINE explicit BackendArenaKernels(Device<B>& dev) : dev_(&dev) {}
  CIFARNET_OUTLINE void sgd(const ArenaRuns& r, T* var, const T* g, T lr) override {
    op_.sgd(*dev_, r, var, g, lr);
  }
  CIFARNET_OUTLINE void momentum(const ArenaRuns& r, T* var, T* acc, const T* g, T lr, T m,
                                 bool nesterov) override {
    op_.momentum(*dev_, r, var, acc, g, lr, m, nesterov);
  }
  CIFARNET_OUTLINE void adam(const ArenaRuns& r, T* var, T* m, T* v, const T* g, T alpha, T omb1, T omb2,
                             T eps) override {
    op_.adam(*dev_, r, var, m, v, g, alpha, omb1, omb2, eps);
  }
  CIFARNET_OUTLINE void ema(const ArenaRuns& r, T* shadow, const T* value, T omd) override {
    op_.ema(*dev_, r, shadow, value, omd);
  }
  CIFARNET_OUTLINE void scale(const ArenaRuns& r, T* x, T s) override { op_.scale(*dev_, r, x, s); }
  CIFARNET_OUTLINE void scale_div(const ArenaRuns& r, T* x, T a, T b) override {
    op_.scale_div(*dev_, r, x, a, b);
  }
  CIFARNET_OUTLINE void fill(const ArenaRuns& r, T* x, T value) override { op_.fill(*dev_, r, x, value); }
  CIFARNET_OUTLINE void copy(const ArenaRuns& r, const T* src, T* dst) override {
    op_.copy(*dev_, r, src, dst);
  }
  CIFARNET_OUTLINE void swap(const ArenaRuns& r, T* a, T* b) override { op_.swap(*dev_, r, a, b); }
  CIFARNET_OUTLINE double sum_squares(const ArenaRuns& r, const T* x) override {
    return op_.sum_squares(*dev_, r, x);
  }
  CIFARNET_OUTLINE bool all_finite(const ArenaRuns& r, const T* x) override {
    return op_.all_finite(*dev_, r, x);
  }
  CIFARNET_OUTLINE NonFinite find_non_finite(const ArenaRuns& r, const T* x) override {
    return op_.find_non_finite(*dev_, r, x);
  }
  CIFARNET_OUTLINE double weight_decay(std::size_t begin, std::size_t end, T* g, const T* v, T wd) override {
    return op_.weight_decay(*dev_, begin, end, g, v, wd);
  }
  CIFARNET_OUTLINE double weight_decay_ranges(const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                              T* g, const T* v, T wd) override {
    if constexpr (has_weight_decay_ranges<Arena<B, T>, Device<B>, T>::value)
      return op_.weight_decay_ranges(*dev_, ranges, g, v, wd);
    else
      return ArenaKernels<T>::weight_decay_ranges(ranges, g, v, wd);
  }
  CIFARNET_OUTLINE Pending sum_squares_deferred(const ArenaRuns& r, const T* x) override {
    if constexpr (has_deferred_sums<Arena<B, T>, Device<B>, T>::value)
      return op_.sum_squares_deferred(*dev_, r, x);
    else
      return ArenaKernels<T>::sum_squares_deferred(r, x);
  }
  CIFARNET_OUTLINE Pending finite_deferred(const ArenaRuns& r, const T* x) override {
    if constexpr (has_deferred_sums<Arena<B, T>, Device<B>, T>::value)
      return op_.finite_deferred(*dev_, r, x);
    else
      return ArenaKernels<T>::finite_deferred(r, x);
  }
  CIFARNET_OUTLINE Pending
  weight_decay_ranges_deferred(const std::vector<std::pair<std::size_t, std::size_t>>& ranges, T* g,
                               const T* v, T wd, PendingFinish finish, const PendingArgs& args) override {
    if constexpr (has_deferred_sums<Arena<B, T>, Device<B>, T>::value)
      return op_.weight_decay_ranges_deferred(*dev_, ranges, g, v, wd, finish, args);
    else
      return ArenaKernels<T>::weight_decay_ranges_deferred(ranges, g, v, wd, finish, args);
  }
  CIFARNET_OUTLINE std::shared_ptr<void> adopt_state(T* p, std::size_t n) override {
    if constexpr (has_adopt_state<Arena<B, T>, Device<B>, T>::value)
      return op_.adopt_state(*dev_, p, n);
    else
      return ArenaKernels<T>::adopt_state(p, n);
  }

 private:
  Device<B>* dev_;
  Arena<B, T> op_;
};

}  // namespace ops
}  // namespace cifarnet
