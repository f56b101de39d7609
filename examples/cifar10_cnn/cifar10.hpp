// examples/cifar10_cnn/cifar10.hpp — what cifar10_train and cifar10_eval
// share, as the tutorial's cifar10.py / cifar10_input.py do: the model type
// and its constants, the flags both programs take, loading CIFAR-10 (or the
// built-in synthetic set, labelled as such); the error convention is
// examples/common/run_main.hpp's.
//
// The model is the tutorial CNN (cifarnet/models/cifar10_cnn.hpp) on 24x24
// crops, on the oneDNN backend in NHWC (the faster layout on the CPUs we
// measured). Both programs build it with the same options, so a checkpoint
// written by one loads into the other.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>

#include "../common/cifar10_help.hpp"
#include "../common/run_main.hpp"
#include "network.hpp"

namespace cifar10 {

using namespace cifarnet;

// The tutorial's constants (cifar10.py).
inline constexpr double kMovingAverageDecay = 0.9999;    ///< MOVING_AVERAGE_DECAY
inline constexpr double kNumEpochsPerDecay = 350.0;      ///< NUM_EPOCHS_PER_DECAY
inline constexpr double kLearningRateDecayFactor = 0.1;  ///< LEARNING_RATE_DECAY_FACTOR
inline constexpr double kInitialLearningRate = 0.1;      ///< INITIAL_LEARNING_RATE
inline constexpr double kWeightDecay = 0.004;            ///< wd of local3/local4 weights
/// Size of the built-in synthetic sets (used when --data_dir is not given).
inline constexpr std::size_t kSyntheticTrain = 2560, kSyntheticTest = 500;

/// Where the data must be and how to get it (--data_dir errors, the synthetic fallback).
inline std::string how_to_get_data() {
  return examples::how_to_get_cifar10("--data_dir", /*tfrecords=*/false, "cifar10_train --download");
}

/// Flags both programs take.
struct CommonFlags {
  std::string data_dir;
  int batch_size = 128;
};

inline void add_common_flags(CLI::App& app, CommonFlags& f) {
  app.add_option("--data_dir", f.data_dir,
                 "Path to the CIFAR-10 data directory (cifar-10-batches-bin). Without it, a small built-in "
                 "synthetic set is used.");
  app.add_option("--batch_size", f.batch_size, "Number of images to process in a batch.")
      ->capture_default_str();
}

/// `will_download`: --data_dir need not exist yet (cifar10_train --download).
inline void validate_common(const CommonFlags& f, bool will_download = false) {
  if (f.batch_size <= 0)
    throw ConfigError("--batch_size must be positive, got " + std::to_string(f.batch_size));
  if (!will_download && !f.data_dir.empty() && !std::filesystem::is_directory(f.data_dir))
    throw IoError("--data_dir '" + f.data_dir + "' is not a directory.\n" + how_to_get_data());
}

/// A data set the programs read, and whether it is the synthetic stand-in.
struct Source {
  std::shared_ptr<const data::ImageSetSource> images;
  bool synthetic = false;
  std::string description;
};

/// `split` of CIFAR-10 from --data_dir (train_all = data_batch_1..5, the
/// tutorial's training set; eval = test_batch), or, without --data_dir, the
/// built-in synthetic set (training images with seed 1, test images with
/// seed 2, so both programs see the same sets). At most `max_examples`
/// examples are kept (0: all), in file order.
inline Source load(const CommonFlags& f, data::Split split, std::size_t max_examples = 0) {
  Source s;
  data::ImageSet set;
  if (f.data_dir.empty()) {
    const bool test = split == data::Split::eval;
    set = data::synthetic_cifar(test ? kSyntheticTest : kSyntheticTrain, test ? 2 : 1);
    s.synthetic = true;
    s.description = std::string("SYNTHETIC ") + (test ? "test" : "training") + " set";
  } else {
    // --data_dir itself, or its cifar-10-batches-bin/ (where --download unpacks).
    set = data::read_cifar10(data::cifar10_binary_dir(f.data_dir), split);
    s.description =
        std::string("CIFAR-10 ") + (split == data::Split::eval ? "test_batch.bin" : "data_batch_1..5.bin");
  }
  if (max_examples > 0 && max_examples < set.size()) {
    set.labels.resize(max_examples);
    set.pixels.resize(max_examples * set.geometry.size());
  }
  s.description += " (" + std::to_string(set.size()) + " images)";
  s.images = std::make_shared<data::ImageSetSource>(std::move(set));
  return s;
}

/// The note both programs print when they fall back to the synthetic set.
inline void explain_synthetic(std::ostream& out) {
  out << "No --data_dir given.\n"
      << how_to_get_data() << "Running on a small BUILT-IN SYNTHETIC data set instead (" << kSyntheticTrain
      << " training and " << kSyntheticTest
      << " test images of 10 made-up classes): its accuracy says nothing about CIFAR-10.\n";
}

}  // namespace cifar10
