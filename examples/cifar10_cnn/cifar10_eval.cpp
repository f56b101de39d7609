// examples/cifar10_cnn/cifar10_eval.cpp — the classic TensorFlow CIFAR-10
// tutorial's cifar10_eval.py on cifarnet (TF_SEMANTICS.md §4).
//
// Loads the latest checkpoint of --checkpoint_dir with the moving averages of
// the weights in place of the weights (the tutorial's
// ExponentialMovingAverage.variables_to_restore(): every parameter from its
// "<param>/ExponentialMovingAverage" tensor), computes precision@1 over the
// first --num_examples images of the test set (or of the training set with
// --eval_data train_eval), on central 24x24 crops with per-image
// standardization, prints
//   2017-08-04 10:40:11.034518: precision @ 1 = 0.862
// and writes the summary "Precision @ 1" at the checkpoint's global step into
// --eval_dir. With --run_once it evaluates once; otherwise it checks for a
// new checkpoint every --eval_interval_secs seconds and evaluates each new
// one, until interrupted.
//
//   cifar10_eval --data_dir ../shared/data/cifar-10-batches-bin --checkpoint_dir runs/cnn --run_once
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/optim/ema.hpp>
#include <cifarnet/recipes/session.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

#include "cifar10.hpp"

namespace fs = std::filesystem;
using namespace cifarnet;

namespace {

struct Flags : cifar10::CommonFlags {
  std::string eval_dir = "/tmp/cifar10_eval";
  std::string eval_data = "test";
  std::string checkpoint_dir = "/tmp/cifar10_train";
  double eval_interval_secs = 60 * 5;
  std::int64_t num_examples = 10000;
  bool run_once = false;
};

void validate(const Flags& f) {
  cifar10::validate_common(f);
  if (f.num_examples <= 0)
    throw ConfigError("--num_examples must be positive, got " + std::to_string(f.num_examples));
  if (!(f.eval_interval_secs >= 0))
    throw ConfigError("--eval_interval_secs must be >= 0, got " + std::to_string(f.eval_interval_secs));
}

/// Evaluates the newest checkpoint unless it is `last` (the one evaluated
/// before). Returns the path evaluated, `last` when there was nothing new, or
/// "" when the directory holds no checkpoint.
std::string eval_once(const Flags& f, recipes::Session& net, optim::ExponentialMovingAverage<float>& ema,
                      const cifar10::Source& src, io::EventWriter& events, const std::string& last) {
  if (!fs::is_directory(f.checkpoint_dir)) return "";
  io::CheckpointManager mgr(f.checkpoint_dir);
  for (const auto& w : mgr.warnings()) std::cout << "WARNING: " << w << "\n";
  const auto latest = mgr.latest();
  if (!latest) return "";
  if (*latest == last) return last;
  const auto r = mgr.restore_latest();
  for (const auto& w : r->warnings) std::cout << "WARNING: " << w << "\n";
  if (r->checkpoint.path == last) return last;
  // variables_to_restore(): each weight from its moving average.
  try {
    io::load_state(ema, r->dict);
  } catch (const DataError& e) {
    throw DataError(std::string(e.what()) +
                    " (cifar10_eval reads the moving averages that cifar10_train saves with every weight)");
  }
  ema.copy_to(net.trainer().parameters());
  const auto step = io::global_step(r->dict);
  if (!step) throw DataError("checkpoint '" + r->checkpoint.path + "' has no 'global_step'");

  data::PipelineOptions eo = data::recipes::tutorial_eval_options(std::size_t(f.batch_size));
  eo.format = cifar10::kFormat;
  eo.num_workers = 1;
  data::recipes::TutorialEvalT<data::ImageSetSource> pipe(src.images, eo);
  const auto t0 = std::chrono::steady_clock::now();
  const train::EvalResult e = net.evaluate(pipe);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: precision @ 1 = %.3f (%zu/%zu correct; %s, global step %lld; %.1f s)\n",
              train::datetime_now().c_str(), e.precision(), e.correct, e.total, r->checkpoint.path.c_str(),
              static_cast<long long>(*step), secs);
  std::fflush(stdout);
  events.add_scalar("Precision @ 1", e.precision(), *step);
  events.flush();
  return r->checkpoint.path;
}

int evaluate(const Flags& f) {
  validate(f);
  if (f.data_dir.empty()) cifar10::explain_synthetic(std::cout);
  const data::Split split = f.eval_data == "test" ? data::Split::eval : data::Split::train_all;
  const cifar10::Source src = cifar10::load(f, split, std::size_t(f.num_examples));
  if (src.images->size() < std::size_t(f.num_examples))
    std::cout << "note: --num_examples " << f.num_examples << " is more than the set holds; evaluating all "
              << src.images->size() << " images\n";
  std::cout << "Evaluating the moving averages of the weights on " << src.description << "\n";

  const auto net = cifar10::make_cpu_session(0, cifar10_cnn_options(), 0, train::TrainerOptions());
  optim::ExponentialMovingAverage<float> ema(
      net->trainer().parameters(), optim::ExponentialMovingAverageOptions(cifar10::kMovingAverageDecay));
  io::EventWriter events(f.eval_dir);
  std::string last;
  for (;;) {
    const std::string evaluated = eval_once(f, *net, ema, src, events, last);
    if (evaluated.empty()) {
      std::cout << "No checkpoint file found in '" << f.checkpoint_dir << "'\n" << std::flush;
      if (f.run_once) return 1;
    }
    if (f.run_once) return 0;
    last = evaluated.empty() ? last : evaluated;
    std::this_thread::sleep_for(std::chrono::duration<double>(f.eval_interval_secs));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "Evaluates the classic TensorFlow CIFAR-10 tutorial CNN (cifar10_eval.py, see TF_SEMANTICS.md §4)"};
  app.add_option("--eval_dir", f.eval_dir, "Directory where to write event logs.")->capture_default_str();
  app.add_option("--eval_data", f.eval_data, "Either 'test' or 'train_eval'.")
      ->check(CLI::IsMember({"test", "train_eval"}))
      ->capture_default_str();
  app.add_option("--checkpoint_dir", f.checkpoint_dir, "Directory where to read model checkpoints.")
      ->capture_default_str();
  app.add_option("--eval_interval_secs", f.eval_interval_secs, "How often to run the eval.")
      ->capture_default_str();
  app.add_option("--num_examples", f.num_examples, "Number of examples to run.")->capture_default_str();
  app.add_flag("--run_once", f.run_once, "Whether to run eval only once.");
  cifar10::add_common_flags(app, f);
  return examples::parse_and_run(app, argc, argv, "cifar10_eval", [&] { return evaluate(f); });
}
