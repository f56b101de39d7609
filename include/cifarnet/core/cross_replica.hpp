// cifarnet/core/cross_replica.hpp — the one interface through which
// synchronized batch norm reaches the other replicas of a data-parallel run.
#pragma once

#include <cstddef>

namespace cifarnet {

/// Sums values over the replicas of a data-parallel run, in place; every
/// replica calls it at the same points with the same count. Synchronized batch
/// norm (ops::SyncBatchNorm) calls it when RunContext::cross_replica
/// is set; distributed/data_parallel.hpp implements it over MPI. The rest of
/// the library never depends on MPI.
class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  /// Replaces values[0, n) by their sums over all replicas (same order everywhere).
  virtual void sum(double* values, std::size_t n) = 0;
};

}  // namespace cifarnet
