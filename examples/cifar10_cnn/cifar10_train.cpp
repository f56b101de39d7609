// examples/cifar10_cnn/cifar10_train.cpp — the classic TensorFlow CIFAR-10
// tutorial's cifar10_train.py on cifarnet (TF_SEMANTICS.md §4).
//
// Trains the tutorial CNN on 24x24 distorted crops of data_batch_1..5 (random
// crop, flip, brightness, contrast, per-image standardization), batch 128,
// with plain gradient descent: lr 0.1 decayed x0.1 every 350 epochs
// (staircase), cross-entropy + 0.004 * l2 of the local3/local4 weights. After
// every step the exponential moving average (0.9999, num_updates = global
// step) of every weight is updated; cifar10_eval evaluates those averages.
// Every --log_frequency steps it prints the tutorial's line
//   2017-08-04 10:32:05.123456: step 10, loss = 4.58 (352.1 examples/sec; 0.364 sec/batch)
// every 100 steps it writes TensorBoard summaries (raw losses and their 0.9
// moving averages, learning rate, histograms of weights and gradients), and
// it saves a checkpoint into --train_dir every 1,000 steps and at the end.
// Unlike the tutorial, which deletes --train_dir, it resumes from the latest
// checkpoint there (weights, averages, global step and input position).
//
//   cifar10_train --data_dir ../shared/data/cifar-10-batches-bin --train_dir runs/cnn --max_steps 100000
//   cifar10_train --train_dir /tmp/cnn_demo --max_steps 300      # built-in synthetic data
//   cifar10_train --download --data_dir /tmp/cifar10_data --train_dir runs/cnn  # the tutorial's way
//   cifar10_train --explain_plan      # the step plans (nodes, fusion rules), then exit
#include <iostream>
#include <string>

#include "../common/explain_plan.hpp"
#include "train_loop.hpp"

using namespace cifarnet;

int main(int argc, char** argv) {
  cifar10::TrainFlags f;
  CLI::App app{
      "Trains the classic TensorFlow CIFAR-10 tutorial CNN (cifar10_train.py, see TF_SEMANTICS.md §4)"};
  cifar10::add_train_flags(app, f);
  bool explain_plan = false;
  app.add_flag(
      "--explain_plan", explain_plan,
      examples::explain_plan_help("the inference forward (cifar10_eval's, at the same --batch_size)") +
          " The model is built as training builds it, at --batch_size.");
  return examples::parse_and_run(app, argc, argv, "cifar10_train", [&] {
    cifar10::validate_train(f);
    if (explain_plan) {
      std::cout << "Tutorial CNN: the step plans of a training batch of " << f.batch_size
                << " and an inference batch of " << f.batch_size << "\n\n"
                << cifar10::explain_cpu_plan(cifar10_cnn_options(), f.seed, std::size_t(f.batch_size),
                                             std::size_t(f.batch_size))
                << std::flush;
      return 0;
    }
    if (f.log_device_placement) cifar10::log_cpu_placement(std::cout);
    const auto net = cifar10::make_cpu_session(0, cifar10_cnn_options(), f.seed, cifar10::trainer_options(f));
    return cifar10::train(f, *net, std::size_t(f.batch_size), "Tutorial CNN");
  });
}
