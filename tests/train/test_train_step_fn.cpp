// TF-Slim's train_step_fn (TrainerOptions::train_step_fn): a function that
// wraps or replaces the default step (TrainerBase::train_step) and returns
// the step's result and should_stop.
#include "trainer_support.hpp"

#include <memory>
#include <stdexcept>
#include <vector>

using namespace trainer_test;

namespace {
/// The global steps the hooks saw.
std::shared_ptr<train::LambdaHook> record(std::vector<std::int64_t>& steps) {
  return std::make_shared<train::LambdaHook>(
      [&steps](train::TrainerBase&, const train::StepResult& r) { steps.push_back(r.step); });
}
}  // namespace

TEST_CASE("train_step_fn wrapping the default step trains exactly as without it", "[train][train_step_fn]") {
  Run plain(8);
  plain.go();
  int calls = 0;
  Run wrapped(train::TrainerOptions().max_steps(8).train_step_fn(
      [&calls](train::TrainerBase& t, const train::Batch& b) {
        ++calls;
        return t.train_step(b);
      }));
  std::vector<std::int64_t> steps;
  wrapped.trainer.add_hook(record(steps));
  CHECK(wrapped.go() == 8);
  CHECK(calls == 8);
  CHECK(steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK((plain.net.parameters().values() == wrapped.net.parameters().values()).all());
}

TEST_CASE("train_step_fn's should_stop ends training after that step's hooks", "[train][train_step_fn]") {
  int calls = 0;
  Run r(train::TrainerOptions().max_steps(20).train_step_fn(
      [&calls](train::TrainerBase& t, const train::Batch& b) {
        train::TrainStepOutput out = t.train_step(b);
        out.should_stop = ++calls == 5;  // its own stopping rule
        return out;
      }));
  std::vector<std::int64_t> steps;
  r.trainer.add_hook(record(steps));
  CHECK(r.go() == 5);
  CHECK(calls == 5);
  CHECK(steps.size() == 5);  // the stopping step's hooks ran
  CHECK(r.trainer.stop_requested());
}

TEST_CASE("The default train_step says should_stop at max_steps, not before", "[train][train_step_fn]") {
  Run r(3);
  std::vector<bool> stops;
  for (int i = 0; i < 3; ++i) stops.push_back(r.trainer.train_step(r.src.next()).should_stop);
  CHECK(stops == std::vector<bool>{false, false, true});
  CHECK(r.trainer.global_step() == 3);
}

TEST_CASE("train_step_fn may replace the step: two updates per batch, or none", "[train][train_step_fn]") {
  // Two default steps on each batch: max_steps 6 is reached after 3 batches.
  int calls = 0;
  Run twice(train::TrainerOptions().max_steps(6).train_step_fn(
      [&calls](train::TrainerBase& t, const train::Batch& b) {
        ++calls;
        t.train_step(b);
        return t.train_step(b);
      }));
  CHECK(twice.go() == 6);
  CHECK(calls == 3);
  CHECK(twice.src.calls == 3);

  // A function that skips every other batch without updating: the global
  // step advances on half of the calls, the skipped ones' results reach the
  // hooks as the function made them.
  int seen = 0;
  Run skip(train::TrainerOptions().max_steps(4).train_step_fn(
      [&seen](train::TrainerBase& t, const train::Batch& b) {
        if (seen++ % 2 == 1) {
          train::TrainStepOutput out;
          out.result.step = t.global_step();
          return out;
        }
        return t.train_step(b);
      }));
  std::vector<std::int64_t> steps;
  skip.trainer.add_hook(record(steps));
  CHECK(skip.go() == 4);
  CHECK(seen == 7);
  CHECK(steps == std::vector<std::int64_t>{1, 1, 2, 2, 3, 3, 4});
}

TEST_CASE("An exception from train_step_fn ends run() with it", "[train][train_step_fn]") {
  int calls = 0;
  Run r(train::TrainerOptions().max_steps(10).train_step_fn(
      [&calls](train::TrainerBase& t, const train::Batch& b) {
        if (++calls == 3) throw std::runtime_error("step function failed");
        return t.train_step(b);
      }));
  CHECK_THROWS_WITH(r.go(), "step function failed");
  CHECK(r.trainer.global_step() == 2);
}
