// Times distributed::AllReduceMean on a ResNet's real gradient buffer (and a
// one-element sum for the latency), `reps` times, and prints the median and
// the bus bandwidth ring all-reduce would need for it. Built and run by
// bench/mpi_scaling.sh; bench/CMakeLists.txt builds it when MPI is found.
//   mpirun -np 2 mpi_allreduce_bench 20 1048576 50
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/distributed/data_parallel.hpp>
#include <cifarnet/models/resnet.hpp>

#include "../cli.hpp"

using namespace cifarnet;

int main(int argc, char** argv) {
  distributed::Environment env(&argc, &argv);
  int depth = 20, reps = 50;
  std::size_t bucket = std::size_t(1) << 20;
  CLI::App app{"distributed::AllReduceMean on a ResNet's gradient buffer: median time and bus bandwidth"};
  app.add_option("depth", depth, "ResNet depth (6n+2).")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("bucket", bucket, "All-reduce bucket size, bytes.")
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 40))
      ->capture_default_str();
  app.add_option("reps", reps, "Timed repetitions.")->check(CLI::Range(1, 1000000))->capture_default_str();
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;
  distributed::Communicator comm;
  Model<ResNetCifar<>, backend::OneDnn> net({3, 32, 32}, DataFormat::NHWC, resnet_options(depth), 1);
  auto& P = net.parameters();
  P.grads().setConstant(1.0f);
  distributed::AllReduceMean<float> ar(P, distributed::AllReduceOptions(comm).bucket_bytes(bucket));
  std::vector<double> t, lat;
  for (int i = 0; i < reps + 3; ++i) {
    comm.barrier();
    ar.apply(P);
    if (i >= 3) t.push_back(ar.last_seconds());
    comm.barrier();
    double x = 1;
    const auto t0 = std::chrono::steady_clock::now();
    comm.sum(&x, 1);
    if (i >= 3) lat.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  std::sort(lat.begin(), lat.end());
  const double bytes = double(P.grads().size()) * 4;
  if (comm.is_chief())
    std::printf(
        "ResNet-%d: %zu trainable parameters, %.0f gradient bytes, %zu bucket(s) of %zu bytes, %d ranks: "
        "all-reduce median %.3f ms (min %.3f), 1-element all-reduce median %.1f us; "
        "algorithm bandwidth %.2f GB/s\n",
        depth, P.num_trainable(), bytes, ar.buckets(), bucket, comm.size(), t[t.size() / 2] * 1e3, t[0] * 1e3,
        lat[lat.size() / 2] * 1e6, bytes / t[t.size() / 2] / 1e9);
  return 0;
}
