// A small MPI program the fault test runs: rank 1 misbehaves while rank 0
// keeps all-reducing, as a training loop does.
//   fault_probe kill  — rank 1 dies (SIGKILL) after 3 all-reduces
//   fault_probe hang  — rank 1 stops calling collectives (sleeps 60 s)
// Rank 0 uses a 3 s collective timeout; on a DistributedError it prints the
// message and ends the job with MPI_Abort (what resnet_cifar10 does).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include <cifarnet/distributed/mpi.hpp>

namespace dist = cifarnet::distributed;

int main(int argc, char** argv) {
  dist::Environment env(&argc, &argv);
  if (argc != 2 || (std::strcmp(argv[1], "kill") != 0 && std::strcmp(argv[1], "hang") != 0)) {
    std::fprintf(stderr, "usage: distributed_fault_probe kill|hang\n");
    return 2;
  }
  const bool kill = std::strcmp(argv[1], "kill") == 0;
  try {
    dist::Communicator c(MPI_COMM_WORLD, 3.0);
    for (int step = 0; step < 1000; ++step) {
      if (c.rank() == 1 && step == 3) {
        if (kill) std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(60));
      }
      double v[256] = {1.0};
      c.sum(v, 256, "gradient all-reduce");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::printf("rank %d: finished without noticing the fault\n", c.rank());
    return 0;
  } catch (const cifarnet::Error& e) {
    std::fprintf(stderr, "distributed_fault_probe: %s\n", e.what());
    std::fflush(stderr);
    dist::Environment::abort_all(3);
  }
}
