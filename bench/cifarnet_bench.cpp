// bench/cifarnet_bench.cpp — images/s of cifarnet's training and inference
// steps, with the same protocol as ../shared/bench/peer_torch.py: warm-up
// steps untimed, then R repetitions of S consecutive steps each; the
// per-step time of a repetition is its block time / S; median, min and max
// over repetitions. Inputs are random pixels in [0, 255) (the CNN: randn, as
// after per-image standardization) and random labels.
//
//   OMP_NUM_THREADS=2 build/bench/cifarnet_bench [--only resnet20,tfcnn,...] [--formats nhwc,nchw]
//       [--reps 5] [--steps 4] [--warmup 3] [--json out.json] [--profile 0|1]
//       [--conv-algorithm auto|direct|winograd] [--precision fp32|bf16] [--explain]
//       [--infer-batch 100] [--plan-executor 1|0] [--plan-training 0|1] [--rules-off a,b|all]
//       [--huge-pages 1|0] [--streaming-stores 1|0]
//
// --precision bf16 runs every convolution in bf16 (NetOptions::conv_precision:
// bf16 inputs, weights and output gradients, float accumulation, output and
// master weights; everything else float).
//
// --profile 1 (the default) follows each training benchmark with a per-layer
// profile (nn/profile.hpp) of --steps more steps: forward and backward ms per
// step of every layer, the loss and optimizer, totals per layer kind, and the
// share of the step that is not a convolution. The last line is the process's
// peak resident set size (getrusage), so run one benchmark per process to
// read a benchmark's own peak.
//
// --explain prints each benchmark's step plan (Model::explain_plan: its
// nodes, where each fusion rule fired and why it did not elsewhere) before
// timing it, for the model, mode, layout and precision it times, and after
// a training benchmark's timed steps the training executor's line again
// (with the gradient buffers its last backward took from lifetimes).
//
// Benchmarks: resnet20, resnet44, resnet56 (training, batch 128: forward,
// cross-entropy, backward, weight decay 2e-4, momentum 0.9), tfcnn (the tutorial
// CNN, 24x24, plain SGD), airbench (the airbench94 network of
// examples/cifar10_speedrun, batch 500, its BN settings; momentum in place of
// its Muon, which bench/peak's matmul rates bound), infer20, infer56
// (Mode::Infer, batch 100, or --infer-batch: 1 for latency; through the plan
// executor unless --plan-executor 0, so that one binary times both).
// --plan-training 1 runs the training benchmarks through the training
// executor (NetOptions::plan_training, nn/train_executor.hpp, the default);
// 0 through the layer tree, every layer on its own (no fusion between
// layers). --rules-off names fusion rules (nn/plan_rules.hpp) to turn off
// (NetOptions::rules_off; all: every one): what one rule is worth is the
// ratio of two runs. --huge-pages 0 allocates host tensors without the
// transparent huge page advice (cifarnet::set_huge_pages, core/
// tensor_memory.hpp), so that one binary times both; the line after the
// results says how many blocks the kernel took the advice for.
// --streaming-stores 0 turns off the streaming stores of the host passes that
// write a large tensor kept for later (cifarnet::set_streaming_stores,
// backend/host/stream_store.hpp); the line after that says how many passes
// streamed and from which size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <omp.h>
#include <sys/resource.h>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/airbench.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>

#include "cli.hpp"

using namespace cifarnet;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  std::string name, format;
  std::size_t batch = 0;
  double median = 0, min = 0, max = 0;  // seconds per step
};

struct Protocol {
  int warmup = 3, reps = 5, steps = 4, infer_steps = 10;
  bool profile = true;
  ConvAlgorithm alg = ConvAlgorithm::Auto;                          // --conv-algorithm
  ConvPrecision prec = ConvPrecision::F32;                          // --precision
  std::size_t chunk_kib = NetOptions{}.conv_bn_chunk_bytes / 1024;  // --conv-bn-chunk-kib
  bool direct = NetOptions{}.direct_conv_bn;                        // --direct-conv-bn
  bool explain = false;                                             // --explain
  std::size_t infer_batch = 100;                                    // --infer-batch
  bool executor = NetOptions{}.plan_executor;                       // --plan-executor
  bool training_executor = NetOptions{}.plan_training;              // --plan-training
  std::vector<std::string> rules_off;                               // --rules-off
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Prints a per-layer profile of `steps` steps: ms per step forward / backward,
// totals per kind, and the non-convolution share of the whole step.
void print_profile(const std::string& name, const Profiler& prof, int steps, double step_seconds) {
  std::printf("  profile of %s (%d steps, ms per step; wall step %.2f ms)\n", name.c_str(), steps,
              step_seconds * 1e3);
  std::printf("    %-32s %-8s %8s %8s\n", "layer", "kind", "fwd", "bwd");
  std::vector<std::pair<std::string, std::pair<double, double>>> kinds;
  double total = 0, conv = 0;
  for (const auto& e : prof.entries()) {
    const double f = e.forward * 1e3 / steps, b = e.backward * 1e3 / steps;
    std::printf("    %-32s %-8s %8.3f %8.3f\n", e.name.c_str(), e.kind.c_str(), f, b);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == e.kind; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), {e.kind, {0.0, 0.0}});
    it->second.first += f;
    it->second.second += b;
    total += f + b;
    if (e.kind == "conv" || e.kind == "conv_bn") conv += f + b;  // conv_bn: inference's folded conv + BN
  }
  std::printf("    per kind:");
  for (const auto& [k, fb] : kinds) std::printf("  %s %.2f+%.2f", k.c_str(), fb.first, fb.second);
  const double step_ms = step_seconds * 1e3;
  std::printf(
      "\n    booked %.2f ms of %.2f ms; convolutions (conv, conv_bn) %.2f ms = %.1f %%, "
      "everything else %.1f %% of the step\n",
      total, step_ms, conv, 100.0 * conv / step_ms, 100.0 * (step_ms - conv) / step_ms);
  std::fflush(stdout);
}

// --explain: the step plan of benchmark `name` (Model::explain_plan) before it is timed.
template <class M>
void print_plan(const std::string& name, DataFormat fmt, M& net, Mode mode, std::size_t batch) {
  std::printf("plan of %s %s:\n%s\n", name.c_str(), fmt == DataFormat::NHWC ? "nhwc" : "nchw",
              net.explain_plan(mode, batch).c_str());
  std::fflush(stdout);
}

Result time_steps(const std::string& name, DataFormat fmt, std::size_t batch, int steps, const Protocol& p,
                  const std::function<void()>& step) {
  for (int i = 0; i < p.warmup; ++i) step();
  std::vector<double> per;
  for (int r = 0; r < p.reps; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) step();
    per.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / steps);
  }
  std::sort(per.begin(), per.end());
  Result res;
  res.name = name;
  res.format = fmt == DataFormat::NHWC ? "nhwc" : "nchw";
  res.batch = batch;
  res.median = per[per.size() / 2];
  res.min = per.front();
  res.max = per.back();
  std::printf("%-10s %-5s batch %3zu  %8.1f img/s  [%.1f - %.1f]  (%.2f ms/step)\n", name.c_str(),
              res.format.c_str(), batch, double(batch) / res.median, double(batch) / res.max,
              double(batch) / res.min, res.median * 1e3);
  std::fflush(stdout);
  return res;
}

template <class Net>
Result train_bench(const std::string& name, DataFormat fmt, InputShape in, NetOptions opts, std::size_t batch,
                   bool momentum_wd, bool randn, const Protocol& p) {
  Model<Net, backend::OneDnn> net(in, fmt,
                                  opts.with_conv_algorithm(p.alg)
                                      .with_conv_precision(p.prec)
                                      .with_conv_bn_chunk_bytes(p.chunk_kib * 1024)
                                      .with_direct_conv_bn(p.direct)
                                      .with_plan_training(p.training_executor)
                                      .with_rules_off(p.rules_off),
                                  1);
  if (p.explain) print_plan(name, fmt, net, Mode::Train, batch);
  Rng rng(2);
  Tensor<float> x = make_tensor<float>({batch, in.c, in.h, in.w}, fmt);
  for (auto& v : x) v = randn ? float(rng.normal()) : float(rng.uniform(0, 255));
  std::vector<std::int32_t> y(batch);
  for (auto& l : y) l = std::int32_t(rng.uniform_int(10));
  optim::Chain<optim::WeightDecay, optim::Momentum> mom(net.parameters(), optim::WeightDecayOptions(2e-4),
                                                        optim::MomentumOptions().momentum(0.9));
  optim::GradientDescent<float> sgd(net.parameters());
  Tensor<float> d;
  Profiler prof;
  auto step = [&] {
    const Tensor<float>& logits = net.forward(x, Mode::Train);
    auto t0 = Clock::now();
    softmax_cross_entropy(logits, y, &d);
    prof.add("loss", "loss", false, seconds_since(t0));
    net.backward(d);
    t0 = Clock::now();
    if (momentum_wd) {
      mom.step(net.parameters(), 0.1);  // weight decay, then momentum
    } else {
      sgd.step(net.parameters(), 0.1);
    }
    prof.add("optimizer", "optim", false, seconds_since(t0));
  };
  Result r = time_steps(name, fmt, batch, p.steps, p, step);
  // --explain: the executor's line again, now with the gradient buffers
  // its last backward took from lifetimes
  if (p.explain)
    if (const auto* e = net.train_executor(batch))
      std::printf("after the timed steps, %s\n", e->describe().c_str());
  if (p.profile) {
    prof.clear();
    net.set_profiler(&prof);
    const auto t0 = Clock::now();
    for (int s = 0; s < p.steps; ++s) step();
    const double per = seconds_since(t0) / p.steps;
    net.set_profiler(nullptr);
    print_profile(name + " " + r.format, prof, p.steps, per);
  }
  return r;
}

template <class Net>
Result infer_bench(const std::string& name, DataFormat fmt, NetOptions opts, std::size_t batch,
                   const Protocol& p) {
  Model<Net, backend::OneDnn> net({3, 32, 32}, fmt,
                                  opts.with_conv_algorithm(p.alg)
                                      .with_conv_precision(p.prec)
                                      .with_plan_executor(p.executor)
                                      .with_rules_off(p.rules_off),
                                  1);
  if (p.explain) print_plan(name, fmt, net, Mode::Infer, batch);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({batch, 3, 32, 32}, fmt);
  for (auto& v : x) v = float(rng.uniform(0, 255));
  Result r = time_steps(name, fmt, batch, p.infer_steps, p, [&] { net.forward(x, Mode::Infer); });
  if (p.profile) {
    Profiler prof;
    net.set_profiler(&prof);
    const auto t0 = Clock::now();
    for (int s = 0; s < p.infer_steps; ++s) net.forward(x, Mode::Infer);
    const double per = seconds_since(t0) / p.infer_steps;
    net.set_profiler(nullptr);
    print_profile(name + " " + r.format, prof, p.infer_steps, per);
  }
  return r;
}

/// The benchmarks of --only in each of --formats; ConfigError for an unknown
/// benchmark or format (checked before any runs).
int run(const Protocol& p, const std::string& only, const std::string& formats, const std::string& json) {
  for (const auto& f : bench_cli::split_list(formats)) parse_data_format(f);
  for (const auto& b : bench_cli::split_list(only))
    if (b != "resnet20" && b != "resnet44" && b != "resnet56" && b != "tfcnn" && b != "airbench" &&
        b != "infer20" && b != "infer56")
      throw ConfigError("--only: unknown benchmark '" + b + "'");
  std::printf(
      "cifarnet_bench: %d OpenMP threads, oneDNN %s, %d reps x %d steps after %d warm-up, %s "
      "convolutions\n",
      omp_get_max_threads(), backend::onednn::version_string().c_str(), p.reps, p.steps, p.warmup,
      to_string(p.prec));
  std::vector<Result> results;
  for (const auto& f : bench_cli::split_list(formats)) {
    const DataFormat fmt = parse_data_format(f);
    for (const auto& b : bench_cli::split_list(only)) {
      if (b == "resnet20")
        results.push_back(
            train_bench<ResNetCifar<>>(b, fmt, {3, 32, 32}, resnet_options(20), 128, true, false, p));
      else if (b == "resnet44")
        results.push_back(
            train_bench<ResNetCifar<>>(b, fmt, {3, 32, 32}, resnet_options(44), 128, true, false, p));
      else if (b == "resnet56")
        results.push_back(
            train_bench<ResNetCifar<>>(b, fmt, {3, 32, 32}, resnet_options(56), 128, true, false, p));
      else if (b == "tfcnn")
        results.push_back(
            train_bench<Cifar10Cnn>(b, fmt, {3, 24, 24}, cifar10_cnn_options(), 128, false, true, p));
      else if (b == "airbench")
        results.push_back(
            train_bench<Airbench94>(b, fmt, {3, 32, 32}, airbench_options(), 500, true, false, p));
      else if (b == "infer20")
        results.push_back(infer_bench<ResNetCifar<>>(b, fmt, resnet_options(20), p.infer_batch, p));
      else if (b == "infer56")
        results.push_back(infer_bench<ResNetCifar<>>(b, fmt, resnet_options(56), p.infer_batch, p));
      else
        throw ConfigError("--only: unknown benchmark '" + b + "'");
    }
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("peak resident set size: %.1f MiB\n", double(ru.ru_maxrss) / 1024.0);
  std::printf("huge pages: %s, %zu host blocks advised\n", huge_pages() ? "on" : "off",
              detail::huge_page_advised().load());
  std::printf("streaming stores: %s, %zu passes streamed their output (from %zu KiB)\n",
              streaming_stores() ? "on" : "off", backend::host::streamed_passes().load(),
              backend::host::streaming_threshold(omp_get_max_threads()) >> 10);
  if (!json.empty()) {
    std::ofstream o(json);
    o << "[\n";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      o << "  {\"name\": \"" << r.name << "\", \"format\": \"" << r.format << "\", \"batch\": " << r.batch
        << ", \"median_s\": " << r.median << ", \"min_s\": " << r.min << ", \"max_s\": " << r.max << "}"
        << (i + 1 < results.size() ? ",\n" : "\n");
    }
    o << "]\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only = "resnet20,resnet56,tfcnn,infer20,infer56", formats = "nhwc,nchw", json;
  Protocol p;
  int profile = 1;
  CLI::App app{"images/s of cifarnet's training and inference steps (docs/BENCHMARKS.md)"};
  app.add_option(
         "--only", only,
         "Comma-separated benchmarks: resnet20, resnet44, resnet56, tfcnn, airbench, infer20, infer56.")
      ->capture_default_str();
  app.add_option("--formats", formats, "Comma-separated data formats: nhwc, nchw.")->capture_default_str();
  app.add_option("--reps", p.reps, "Timed repetitions.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--steps", p.steps, "Steps per repetition.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--warmup", p.warmup, "Untimed warm-up steps.")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--json", json, "Also write the results to this JSON file.");
  app.add_option("--infer-batch", p.infer_batch, "Images per inference step (infer20, infer56; 1: latency).")
      ->check(CLI::Range(std::size_t(1), std::size_t(100000)))
      ->capture_default_str();
  int executor = p.executor ? 1 : 0;
  app.add_option("--plan-executor", executor,
                 "1: inference through the plan executor (NetOptions::plan_executor); 0: the layers run "
                 "themselves.")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  int training_executor = p.training_executor ? 1 : 0;
  app.add_option("--plan-training", training_executor,
                 "1: training through the training executor (NetOptions::plan_training); 0: the layer tree, "
                 "every layer on its own (no fusion between layers).")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  std::vector<std::string> rule_choices{"all"};
  for (const plan::RuleInfo& r : plan::rules()) rule_choices.push_back(r.name);
  app.add_option("--rules-off", p.rules_off,
                 "Fusion rules to turn off, comma-separated (NetOptions::rules_off; all: every one).")
      ->delimiter(',')
      ->check(CLI::IsMember(rule_choices));
  app.add_option("--profile", profile, "1: a per-layer profile after each training benchmark; 0: none.")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  app.add_option("--conv-bn-chunk-kib", p.chunk_kib,
                 "KiB per range of images in ConvBatchNorm's float backward "
                 "(NetOptions::conv_bn_chunk_bytes); 0: whole batches.")
      ->check(CLI::Range(std::size_t(0), std::size_t(1) << 30))
      ->capture_default_str();
  int direct = p.direct ? 1 : 0;
  app.add_option("--direct-conv-bn", direct,
                 "1: ConvBatchNorm's float backward in the oneDNN backend's own kernels where they take the "
                 "geometry (NetOptions::direct_conv_bn); 0: oneDNN's kernels.")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  app.add_flag("--explain", p.explain,
               "Print each benchmark's step plan before timing it: its nodes, which fusion rules fired "
               "where and why the others did not (Model::explain_plan).");
  int huge = -1;  // not given: the library's default (on, unless CIFARNET_HUGE_PAGES=0)
  app.add_option("--huge-pages", huge,
                 "1: host tensors of 2 MiB or more advised as transparent huge pages "
                 "(cifarnet::set_huge_pages); 0: not. Default: the library's (on, unless the environment "
                 "says CIFARNET_HUGE_PAGES=0).")
      ->check(CLI::IsMember({0, 1}));
  int streaming = -1;  // not given: the library's default (on, unless CIFARNET_STREAMING_STORES=0)
  app.add_option("--streaming-stores", streaming,
                 "1: the host passes that write a large tensor kept for later may use streaming stores "
                 "(cifarnet::set_streaming_stores); 0: plain stores only. Default: the library's (on, unless "
                 "the environment says CIFARNET_STREAMING_STORES=0).")
      ->check(CLI::IsMember({0, 1}));
  bench_cli::add_conv_flags(app, p.alg, p.prec);
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;

  p.profile = profile != 0;
  p.direct = direct != 0;
  p.executor = executor != 0;
  p.training_executor = training_executor != 0;
  try {
    if (huge >= 0) set_huge_pages(huge != 0);
    (void)huge_pages();  // a bad CIFARNET_HUGE_PAGES is a ConfigError here, not at the first tensor
    if (streaming >= 0) set_streaming_stores(streaming != 0);
    (void)streaming_stores();  // likewise CIFARNET_STREAMING_STORES
    return run(p, only, formats, json);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "cifarnet_bench: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "cifarnet_bench: %s\n", e.what());
    return 1;
  }
}
