// cifarnet/core/pending.hpp — a value an op computed for the host that may
// still be on the op's device (Pending), and the device-side area such
// values wait in until one copy brings them all (ReadbackArea).
//
// A training step needs three numbers on the host: the loss, the weight
// decay's term and whether every gradient is finite. On a GPU each would
// cost a copy and a wait; as Pendings they cost one of each per step: the
// ops reserve room in the device's read-back area, write their partial sums
// there and return at once; the first get() copies everything reserved so
// far in one transfer, waits once, and every other Pending of that batch
// reads the host copy. On the CPU backends a Pending is just the number.
//
//   Pending loss = xent.loss_deferred(dev, n, k, logits, labels, dlogits);
//   Pending reg = chain.regularize_deferred(params);   // same read-back
//   double l = loss.get();                              // one copy, one wait
//   double r = reg.get();                               // no copy
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cifarnet {

/// Room on a device for values its ops write for the host, brought back in
/// one copy per batch (a generation): the CUDA backend's Readback. Values of
/// the batch still open are fetched by the first read; a fetched batch
/// stays readable until two more batches have been fetched.
class ReadbackArea {
 public:
  virtual ~ReadbackArea() = default;
  /// The host copy of generation `g`'s bytes: when g is the open batch it is
  /// fetched first (one copy of all of it, one wait). Throws Error when a
  /// later fetch has overwritten it.
  virtual const unsigned char* fetched(std::uint64_t g) = 0;
};

/// What a Pending's finish step needs besides the sum.
struct PendingArgs {
  double a = 0;                          ///< a scale (weight decay), or the row count (mean)
  std::size_t n = 0, k = 0;              ///< rows and classes (the loss's label check)
  const std::int32_t* labels = nullptr;  ///< host labels (the loss's label check)
};

/// Turns the sum of a Pending's doubles into its value. `tail` points just
/// past those doubles in the fetched bytes (data an op wrote after them,
/// such as the loss kernel's count of bad labels); it may throw.
using PendingFinish = double (*)(double sum, const unsigned char* tail, const PendingArgs& args);

/// A number, or `count` doubles at byte `offset` of a ReadbackArea's batch
/// `generation`, added in order and passed to a finish step. Copyable, no
/// allocation; get() may be called any number of times while the batch is
/// readable (see ReadbackArea).
class Pending {
 public:
  /// The value 0, ready.
  Pending() = default;
  /// `v`, ready (the CPU backends' results).
  static Pending ready(double v) {
    Pending p;
    p.value_ = v;
    return p;
  }
  /// Σ of `count` doubles at byte `offset` of `area`'s batch `generation`,
  /// then finish(Σ, tail, args) when finish is given.
  static Pending on(ReadbackArea& area, std::uint64_t generation, std::size_t offset, std::size_t count,
                    PendingFinish finish = nullptr, PendingArgs args = {}) {
    Pending p;
    p.area_ = &area;
    p.generation_ = generation;
    p.offset_ = offset;
    p.count_ = count;
    p.finish_ = finish;
    p.args_ = args;
    return p;
  }

  /// Whether the value is here without a read back.
  bool is_ready() const { return area_ == nullptr; }

  /// The value (fetching the batch on the first read of an open one).
  double get() const {
    if (!area_) return value_;
    const unsigned char* bytes = area_->fetched(generation_) + offset_;
    double s = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      double d;
      std::memcpy(&d, bytes + i * sizeof(double), sizeof d);
      s += d;
    }
    return finish_ ? finish_(s, bytes + count_ * sizeof(double), args_) : s;
  }

 private:
  double value_ = 0;
  ReadbackArea* area_ = nullptr;
  std::uint64_t generation_ = 0;
  std::size_t offset_ = 0, count_ = 0;
  PendingFinish finish_ = nullptr;
  PendingArgs args_;
};

}  // namespace cifarnet
