// examples/cifar10_speedrun — the airbench94 CIFAR-10 recipe (Muon, 8
// epochs; recipes/airbench.hpp) on the CPU, with the output of the PyTorch
// reference (the CPU port of airbench94_muon.py): a line per epoch, the
// final accuracy with test-time augmentation, the training seconds
// (whitening and steps, not data loading or evaluation).
//
//   cifar10_speedrun --data-dir ../shared/data/cifar-10-batches-bin --runs 3 --json runs.json
//
// Without --data-dir it trains on a small synthetic set (and says so): a
// smoke test of the program, not of the recipe.
//
//   cifar10_speedrun --explain-plan --precision bf16 --data-dir ...   # the step plans, then exit
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/data/cifar.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>

#include "../common/cifar10_help.hpp"
#include "../common/explain_plan.hpp"
#include "../common/run_main.hpp"
#include "speedrun.hpp"

using namespace cifarnet;

namespace {

struct Flags {
  std::string data_dir;
  int runs = 1;
  std::string precision = "fp32";
  std::uint64_t seed = 0;
  double epochs = 8;
  std::size_t subset = 0;
  std::size_t batch_size = 2000;
  int warmup_steps = 2;
  std::string progress = "auto";
  std::string json;
  bool explain_plan = false;
};

void validate(const Flags& f) {
  if (f.runs < 1) throw ConfigError("--runs must be at least 1, got " + std::to_string(f.runs));
  if (f.precision != "fp32" && f.precision != "bf16")
    throw ConfigError("--precision must be fp32 or bf16, got '" + f.precision + "'");
  if (!(f.epochs > 0) || !std::isfinite(f.epochs)) throw ConfigError("--epochs must be positive");
  if (f.batch_size == 0) throw ConfigError("--batch-size must be positive");
  if (f.progress != "auto" && f.progress != "on" && f.progress != "off")
    throw ConfigError("--progress must be auto, on or off, got '" + f.progress + "'");
  if (f.warmup_steps < 0)
    throw ConfigError("--warmup-steps must be >= 0, got " + std::to_string(f.warmup_steps));
}

/// The first n records of `set` (all when n is 0 or larger).
data::ImageSet first(data::ImageSet set, std::size_t n) {
  if (n == 0 || n >= set.size()) return set;
  set.labels.resize(n);
  set.pixels.resize(n * set.geometry.size());
  return set;
}

void print_row(const std::vector<std::string>& cols) {
  static const int widths[] = {5, 6, 11, 10, 8, 13, 8};
  std::string line;
  for (std::size_t i = 0; i < cols.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "|  %*s  ", widths[i], cols[i].c_str());
    line += buf;
  }
  std::cout << line << "|\n" << std::flush;
}

/// The progress bar of the current epoch on stderr ("\r" redraws it; the
/// epoch's row erases it).
void draw_progress(const recipes::AirbenchProgress& p) {
  constexpr int kWidth = 30;
  const int done = p.steps > 0 ? int(kWidth * p.step / p.steps) : kWidth;
  std::string bar(std::size_t(done), '#');
  bar.append(std::size_t(kWidth - done), '.');
  std::fprintf(stderr, "\r  epoch %d [%s] %lld/%lld steps", p.epoch, bar.c_str(),
               static_cast<long long>(p.step), static_cast<long long>(p.steps));
  std::fflush(stderr);
}
void erase_progress() {
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// The synthetic smoke test's sets without --data-dir (training, test images).
constexpr std::size_t kSyntheticTrain = 2000, kSyntheticTest = 500;

/// The recipe's options from the flags; without --data-dir, the smoke
/// test's: at most 2 epochs, batches of at most 500.
recipes::AirbenchOptions recipe_options(const Flags& f) {
  recipes::AirbenchOptions opts;
  opts.epochs = f.epochs;
  opts.batch_size = f.batch_size;
  opts.warmup_steps = f.warmup_steps;
  opts.conv_precision = f.precision == "bf16" ? ConvPrecision::BF16 : ConvPrecision::F32;
  if (f.data_dir.empty()) {
    opts.epochs = std::min(opts.epochs, 2.0);
    opts.batch_size = std::min<std::size_t>(opts.batch_size, 500);
  }
  return opts;
}

/// --explain-plan: the step plans of the network at the batches run() would
/// train and evaluate with (reads no data).
int explain(const Flags& f) {
  validate(f);
  const recipes::AirbenchOptions opts = recipe_options(f);
  const std::size_t eval_batch =
      f.data_dir.empty() ? std::min(speedrun::kEvalBatch, kSyntheticTest) : speedrun::kEvalBatch;
  std::cout << "cifarnet airbench94 | " << backend::device_description(backend::OneDnn{}) << " | precision "
            << f.precision << " | the step plans of a training batch of " << opts.batch_size
            << " and an evaluation batch of " << eval_batch
            << (f.data_dir.empty() ? " (no --data-dir: the synthetic smoke test's; with --data-dir the "
                                     "recipe's --batch-size and evaluation batch of 2000)"
                                   : "")
            << "\n\n"
            << speedrun::explain_onednn(opts, eval_batch) << std::flush;
  return 0;
}

int run(const Flags& f) {
  if (f.explain_plan) return explain(f);
  validate(f);
  data::ImageSet train_set, test_set;
  recipes::AirbenchOptions opts = recipe_options(f);
  if (f.data_dir.empty()) {
    std::cout
        << "no --data-dir: a smoke test of the program on a small synthetic set (2,000 training and 500 "
           "test images, batches of "
        << opts.batch_size << ", " << opts.epochs << " epochs), not the recipe's result\n";
    train_set = data::synthetic_cifar(kSyntheticTrain, 1);
    test_set = data::synthetic_cifar(kSyntheticTest, 2);
  } else {
    const std::string dir = data::cifar10_binary_dir(f.data_dir);
    train_set = data::read_cifar10(dir, data::Split::train_all);
    test_set = data::read_cifar10(dir, data::Split::eval);
  }
  train_set = first(std::move(train_set), f.subset);
  const data::InMemoryDataset train = recipes::airbench_dataset(train_set);
  const data::InMemoryDataset test = recipes::airbench_dataset(test_set);

  std::cout << "cifarnet airbench94 | " << backend::device_description(backend::OneDnn{}) << " | precision "
            << f.precision << " | epochs " << opts.epochs << " | train " << train.size() << " | test "
            << test.size() << "\n";

  nlohmann::json records = nlohmann::json::array();
  std::vector<double> accs;
  print_row({"run", "epoch", "train_loss", "train_acc", "val_acc", "time_seconds", "img/s"});
  for (int r = 0; r < f.runs; ++r) {
    opts.seed = f.seed + std::uint64_t(r);
    double elapsed = 0;
    const bool bar = f.progress == "on" || (f.progress == "auto" && isatty(STDERR_FILENO));
    std::function<void(const recipes::AirbenchProgress&)> on_step;
    if (bar) on_step = draw_progress;
    const auto res = speedrun::train_onednn(
        train, test, opts,
        [&](const recipes::AirbenchEpoch& e) {
          if (bar) erase_progress();
          elapsed += e.seconds;
          print_row({e.epoch == 1 ? std::to_string(r) : "", std::to_string(e.epoch), fixed(e.train_loss, 4),
                     fixed(e.train_acc, 4), fixed(e.val_acc, 4), fixed(elapsed, 2),
                     fixed(e.images_per_second, 1)});
        },
        on_step);
    print_row({"", "eval", "", "", fixed(res.val_acc, 4), fixed(res.train_seconds, 2), ""});
    std::cout << "RUN " << r << " tta_val_acc=" << fixed(res.tta_val_acc, 4)
              << " val_acc=" << fixed(res.val_acc, 4) << " train_seconds=" << fixed(res.train_seconds, 2)
              << " tta_seconds=" << fixed(res.tta_seconds, 2)
              << " warmup_seconds=" << fixed(res.warmup_seconds, 2) << " images_per_second="
              << fixed(double(res.steps) * double(opts.batch_size) / res.train_seconds, 1) << "\n";
    accs.push_back(res.tta_val_acc);
    records.push_back({{"run", r},
                       {"seed", opts.seed},
                       {"tta_val_acc", res.tta_val_acc},
                       {"val_acc", res.val_acc},
                       {"train_seconds", res.train_seconds},
                       {"tta_seconds", res.tta_seconds},
                       {"warmup_seconds", res.warmup_seconds},
                       {"steps", res.steps},
                       {"precision", f.precision},
                       {"epochs", opts.epochs}});
    if (!f.json.empty()) {
      std::ofstream out(f.json);
      out << records.dump(1) << "\n";
      if (!out) throw IoError("cannot write " + f.json);
    }
  }
  double mean = 0, var = 0;
  for (double a : accs) mean += a;
  mean /= double(accs.size());
  for (double a : accs) var += (a - mean) * (a - mean);
  if (accs.size() > 1)
    std::cout << "Mean: " << fixed(mean, 4)
              << "    Std: " << fixed(std::sqrt(var / double(accs.size() - 1)), 4) << "\n";
  double secs = 0;
  for (const auto& rec : records) secs += rec["train_seconds"].get<double>();
  std::cout << "RESULT tta_val_acc=" << fixed(mean, 4)
            << " train_seconds=" << fixed(secs / double(accs.size()), 2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"The airbench94 CIFAR-10 recipe (Muon, 8 epochs) on cifarnet's oneDNN backend."};
  app.add_option("--data-dir", f.data_dir,
                 "CIFAR-10 binary directory (data_batch_1..5.bin, test_batch.bin); empty: a small synthetic "
                 "set.\n" +
                     examples::how_to_get_cifar10("--data-dir", false, "cifar10_train --download"));
  app.add_option("--runs", f.runs, "Training runs (seeds seed, seed + 1, ...); mean and std at the end.")
      ->capture_default_str();
  app.add_option("--precision", f.precision, "fp32, or bf16: convolutions in bfloat16 (fp32 weights).")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the first run (initial weights, batches, augmentation).")
      ->capture_default_str();
  app.add_option("--epochs", f.epochs, "Training epochs (the recipe: 8).")->capture_default_str();
  app.add_option("--subset", f.subset, "Train on the first N training images only (0: all).")
      ->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "Batch size (the recipe: 2000).")->capture_default_str();
  app.add_option("--warmup-steps", f.warmup_steps,
                 "Untimed forward+backward passes of one batch before the clock starts (the reference's "
                 "short warm-up); 0: none.")
      ->capture_default_str();
  app.add_option("--progress", f.progress,
                 "A progress bar per epoch on stderr: auto (when stderr is a terminal), on or off.")
      ->capture_default_str();
  app.add_option("--json", f.json, "Write a JSON list of per-run results to this file.");
  app.add_flag("--explain-plan", f.explain_plan,
               examples::explain_plan_help("the evaluation's forward") +
                   " The network is built as the run builds it (--precision; the batches it trains and "
                   "evaluates on: --batch-size and 2000 with --data-dir, the smoke test's without).");
  return examples::parse_and_run(app, argc, argv, "cifar10_speedrun", [&] { return run(f); });
}
