// The Catch2 main of the distributed tests: runs under `mpirun -np 2`, every
// rank runs every test case in the same order (collectives must match), and
// the job fails when any rank fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>

#include <cifarnet/distributed/mpi.hpp>

int main(int argc, char** argv) {
  cifarnet::distributed::Environment env(&argc, &argv);
  int rc = 0;
  {
    Catch::Session session;
    rc = session.run(argc, argv);
  }
  int worst = std::min(rc, 255);
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
