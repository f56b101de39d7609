// examples/train_demo — the training machinery end to end on a small network:
// momentum SGD + piecewise-constant learning rate + global-norm gradient
// clipping + an exponential moving average of the weights, checkpoints and
// TensorBoard events, and exact resume after a crash.
//
//   train_demo --job-dir runs/demo --steps 200                 # trains, or resumes where it stopped
//   train_demo --job-dir runs/demo --steps 200 --crash-at 130  # dies (SIGKILL) after step 130
//
// Run the second command, then the first: the final checkpoint is identical,
// byte for byte, to that of a run that was never interrupted (the test
// tests/train/demo_resume.sh does exactly this). The data are the built-in
// synthetic CIFAR-shaped set.
//
// Crash consistency (docs/RELIABILITY.md): tests/reliability/kill_harness
// kills it with SIGKILL at random moments and checks every restart. A
// checkpoint that cannot be written (disk full, `ulimit -f`) stops training
// with exit status 1 and the previous checkpoint intact, or, with
// --on-checkpoint-error continue, trains on and retries at the next one.
// Test-only environment variable: CIFARNET_TEST_SLOW_CHECKPOINT_MS=<ms>
// stretches every checkpoint write to about that long (sleeps between the
// pieces written to the temporary file), so that kills land inside writes.
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/recipes/session.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

using namespace cifarnet;

namespace train_demo {
/// The demo's ResNet-8 on oneDNN and a trainer to `steps` (network.cpp).
std::unique_ptr<cifarnet::recipes::Session> make_session(std::int64_t steps);
}  // namespace train_demo

int main(int argc, char** argv) {
  std::string job_dir;
  std::int64_t steps = 200, crash_at = 0, checkpoint_every = 50;
  int batch = 32, keep = 5, eval_examples = 500;
  std::string on_error = "stop";
  CLI::App app{"cifarnet training-machinery demo (synthetic data)"};
  app.add_option("--job-dir", job_dir, "Checkpoints and events go here; rerunning resumes.")->required();
  app.add_option("--steps", steps, "Train until this global step.")->capture_default_str();
  app.add_option("--crash-at", crash_at, "Kill the process (SIGKILL) right after this step (0: never).");
  app.add_option("--checkpoint-every", checkpoint_every, "Checkpoint every N steps.")->capture_default_str();
  app.add_option("--batch-size", batch, "Batch size.")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--keep-checkpoints", keep, "How many checkpoints to keep (0: all).")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-examples", eval_examples, "Synthetic images to evaluate at the end (0: skip).")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--on-checkpoint-error", on_error,
                 "A checkpoint that cannot be written (disk full...): 'stop' training (exit status 1, the "
                 "previous checkpoint intact) or 'continue' and retry at the next checkpoint.")
      ->capture_default_str()
      ->check(CLI::IsMember({"stop", "continue"}));
  CLI11_PARSE(app, argc, argv);
  // Writes beyond a file-size limit (ulimit -f) must fail with EFBIG, which
  // becomes an IoError, instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    // A ResNet-8 on synthetic 32x32 images (network.cpp), and its trainer.
    const std::unique_ptr<recipes::Session> net = train_demo::make_session(steps);
    train::TrainerBase& trainer = net->trainer();

    // Recipe as one type: weight decay 2e-4 on every trainable parameter,
    // clip the global norm at 2, then momentum 0.9.
    using Optimizer = optim::Chain<optim::WeightDecay, optim::ClipByGlobalNorm, optim::Momentum>;
    Optimizer opt(trainer.parameters(), optim::WeightDecayOptions(2e-4), optim::ClipByGlobalNormOptions(2.0),
                  optim::MomentumOptions().momentum(0.9));
    const auto lr = optim::piecewise_constant({steps / 2, steps * 3 / 4}, {0.1, 0.01, 0.001});
    optim::ExponentialMovingAverage<float> ema(trainer.parameters(),
                                               optim::ExponentialMovingAverageOptions(0.99));

    // Input pipeline: pad-crop-flip, shuffled, deterministic under its seed.
    using Pipe = data::Pipeline<data::ImageSetSource, data::PadCrop<4>, data::RandomFlipLR>;
    data::PipelineOptions po = data::recipes::resnet_train_options(/*seed=*/11, std::size_t(batch));
    po.num_workers = 1;
    Pipe pipe(data::ImageSetSource(data::synthetic_cifar(1024, 3)), po);

    trainer.set_optimizer(opt, lr);
    trainer.add_update([&](Parameters<float>& p, std::int64_t step) { ema.apply(p, step); });
    trainer.add_state_slots(ema);
    trainer.add_state(train::stream_position_saveable(pipe));

    io::CheckpointOptions co;
    co.max_to_keep = std::size_t(keep);
    if (const char* slow = std::getenv("CIFARNET_TEST_SLOW_CHECKPOINT_MS")) {
      const auto total = std::chrono::duration<double, std::milli>(std::atof(slow));
      // Sleeps in proportion to each piece's size: a whole file takes `total`.
      co.write.progress = [total, last = std::uint64_t(0)](std::uint64_t written,
                                                           std::uint64_t size) mutable {
        std::this_thread::sleep_for(total * (double(written - last) / double(size)));
        last = written < size ? written : 0;
      };
    }
    io::CheckpointManager mgr(job_dir, co);
    for (const auto& w : mgr.warnings()) std::cout << "WARNING: " << w << "\n";
    trainer.set_checkpoint_error_policy(train::parse_checkpoint_error_policy(on_error), &std::cout);
    if (!trainer.restore_latest(mgr, &std::cout))
      std::cout << "Starting from step 0 (no checkpoint in " << job_dir << ")\n";
    std::cout << std::flush;
    io::EventWriter events(job_dir);
    trainer.add_hook(std::make_shared<train::LoggingHook>(25));
    trainer.add_hook(std::make_shared<train::SummaryHook>(events, 10, 50));
    trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, checkpoint_every));
    if (crash_at > 0)
      trainer.add_hook(
          std::make_shared<train::LambdaHook>([&](train::TrainerBase&, const train::StepResult& r) {
            if (r.step != crash_at) return;
            std::cout << "crashing after step " << r.step << " (SIGKILL)" << std::endl;
            std::raise(SIGKILL);
          }));

    trainer.run(pipe);

    if (eval_examples == 0) {
      std::cout << "[synthetic data] step " << trainer.global_step() << "\n";
      return 0;
    }
    // Evaluate with the averaged weights on fresh synthetic images.
    data::PipelineOptions eo = data::recipes::resnet_eval_options(100);
    data::Pipeline<data::ImageSetSource> eval_pipe(
        data::ImageSetSource(data::synthetic_cifar(std::size_t(eval_examples), 4)), eo);
    train::EvalResult r;
    {
      auto averaged = ema.swap_in(trainer.parameters());
      r = net->evaluate(eval_pipe);
    }
    std::cout << "[synthetic data] step " << trainer.global_step()
              << ": accuracy with EMA weights = " << r.precision() << "\n";
    return 0;
  } catch (const io::CheckpointSaveError& e) {
    std::cerr << "train_demo: " << e.what() << "\ntrain_demo: stopped: the checkpoint of step " << e.step()
              << " could not be saved (--on-checkpoint-error " << on_error << "); "
              << (e.previous() ? "rerun to resume from step " + std::to_string(e.previous()->step)
                               : std::string("no checkpoint was saved"))
              << "\n";
    return 1;
  } catch (const Error& e) {
    std::cerr << "train_demo: " << e.what() << "\n";
    return 1;
  }
}
