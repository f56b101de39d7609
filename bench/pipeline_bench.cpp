// pipeline_bench — images/s of the input pipeline alone on the real CIFAR-10
// training set, for the two recipes (ResNet: pad+crop+flip; tutorial CNN:
// crop+flip+brightness+contrast+standardization) with 0 (inline), 1 and 2
// worker threads; median of --reps runs of --batches batches each. Then the
// fraction of a simulated training step (a busy loop of --step-ms on the
// consumer thread) spent waiting on the queue.
//
//   pipeline_bench [--data-dir DIR] [--batches 200] [--reps 5] [--step-ms 20] [--prefetch 4]
// DIR defaults to ../shared/data/cifar-10-batches-bin next to the repository.
#include <cifarnet/data/recipes.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"

using namespace cifarnet::data;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Images/s of `batches` batches after one warm-up batch (fresh pipeline per rep).
template <class P>
std::vector<double> throughput(const std::shared_ptr<const Cifar10Binary>& src, std::size_t workers,
                               std::size_t batches, int reps, std::size_t prefetch) {
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    PipelineOptions o = recipes::resnet_train_options(static_cast<std::uint64_t>(r), 128);
    o.num_workers = workers;
    o.prefetch = prefetch;
    P p(src, o);
    Batch b;
    p.next(b);
    const auto t0 = Clock::now();
    std::size_t images = 0;
    for (std::size_t i = 0; i < batches; ++i) {
      p.next(b);
      images += b.size();
    }
    rates.push_back(static_cast<double>(images) / seconds_since(t0));
  }
  return rates;
}

void spin_for(double ms) {
  const auto t0 = Clock::now();
  volatile double sink = 0;
  while (seconds_since(t0) * 1e3 < ms) sink = sink + 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = (std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "shared" / "data" /
                     "cifar-10-batches-bin")
                        .lexically_normal()
                        .string();
  std::size_t batches = 200;
  int reps = 5;
  double step_ms = 20;
  std::size_t prefetch = 4;
  CLI::App app{"images/s of the input pipeline alone on the CIFAR-10 training set (docs/BENCHMARKS.md)"};
  app.add_option("--data-dir", dir, "Directory of the CIFAR-10 binary batches.")->capture_default_str();
  app.add_option("--batches", batches, "Batches per run.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--reps", reps, "Runs per figure (the median is shown).")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--step-ms", step_ms, "Simulated training step on the consumer thread, ms.")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--prefetch", prefetch, "Batches the pipeline keeps ready.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;
  try {
    auto t0 = Clock::now();
    auto src = std::make_shared<const Cifar10Binary>(dir, Split::train_all);
    std::printf("loaded %zu training images from %s in %.2f s\n", src->size(), dir.c_str(),
                seconds_since(t0));
    std::printf("hardware threads: %u; batch 128, prefetch %zu, %zu batches per run, median of %d runs\n",
                std::thread::hardware_concurrency(), prefetch, batches, reps);
    std::printf("%-28s %8s %14s %14s %14s\n", "recipe", "workers", "median img/s", "min img/s", "max img/s");
    for (std::size_t w : {0, 1, 2}) {
      const auto a = throughput<recipes::ResNetTrain>(src, w, batches, reps, prefetch);
      std::printf("%-28s %8zu %14.0f %14.0f %14.0f\n", "resnet (pad+crop+flip)", w, median(a),
                  *std::min_element(a.begin(), a.end()), *std::max_element(a.begin(), a.end()));
    }
    for (std::size_t w : {0, 1, 2}) {
      const auto a = throughput<recipes::TutorialTrain>(src, w, batches, reps, prefetch);
      std::printf("%-28s %8zu %14.0f %14.0f %14.0f\n", "tutorial (crop..standardize)", w, median(a),
                  *std::min_element(a.begin(), a.end()), *std::max_element(a.begin(), a.end()));
    }
    // Queue waiting during a simulated training step.
    for (std::size_t w : {1, 2}) {
      PipelineOptions o = recipes::resnet_train_options(1, 128);
      o.num_workers = w;
      recipes::ResNetTrain p(src, o);
      Batch b;
      p.next(b);  // start-up (first batch) excluded
      const double wait0 = p.wait_seconds();
      t0 = Clock::now();
      const std::size_t steps =
          std::max<std::size_t>(20, static_cast<std::size_t>(2000 / std::max(step_ms, 1.0)));
      for (std::size_t i = 0; i < steps; ++i) {
        p.next(b);
        spin_for(step_ms);
      }
      const double total = seconds_since(t0), waited = p.wait_seconds() - wait0;
      std::printf("resnet, %zu worker(s), %zu steps of %.1f ms: waited %.3f ms of %.1f ms (%.3f %%)\n", w,
                  steps, step_ms, waited * 1e3, total * 1e3, 100.0 * waited / total);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
