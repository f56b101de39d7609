// examples/resnet_cifar10/network.hpp — the network a run trains, as the
// backends' translation units make it: onednn.cpp and cuda.cpp compile the
// network's forward and backward and nothing of the recipe, which run.cpp
// compiles once for every backend and drives through a recipes::Session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <cifarnet/core/tensor.hpp>
#include <cifarnet/nn/format_pick.hpp>
#include <cifarnet/nn/model.hpp>
#include <cifarnet/recipes/session.hpp>
#include <cifarnet/train/trainer.hpp>

namespace resnet_cifar10 {

using namespace cifarnet;

/// The images the model sees.
inline constexpr InputShape kInput{3, 32, 32};

/// What the flags say of the network: its depth, batch norm, precision,
/// layout and seed; on GPUs, how many, how the towers' gradients are summed
/// (--variable-strategy) and the cuDNN options.
struct NetworkSpec {
  int num_layers = 44;
  double bn_decay = 0.997, bn_epsilon = 1e-5;
  bool bf16 = false;      // bf16 convolutions (oneDNN)
  bool winograd = false;  // Winograd convolutions where the backend has them (oneDNN, fp32)
  DataFormat format = DataFormat::NHWC;
  std::uint64_t seed = 0;
  int num_gpus = 0;
  std::string variable_strategy = "CPU";
  bool deterministic = false, allow_tf32 = false;
};

/// The ResNet's options (onednn.cpp).
NetOptions network_options(const NetworkSpec& n);

/// The network of a run and its trainer (options `o`): on oneDNN
/// (onednn.cpp), on one GPU (cuda.cpp) or, with num_gpus N > 1, as N towers,
/// tower i on GPU i (cuda.cpp).
std::unique_ptr<recipes::Session> make_onednn_session(const NetworkSpec& n, const train::TrainerOptions& o);
std::unique_ptr<recipes::Session> make_cuda_session(const NetworkSpec& n, const train::TrainerOptions& o);
std::unique_ptr<recipes::Session> make_cuda_towers_session(const NetworkSpec& n,
                                                           const train::TrainerOptions& o);

/// `--data-format auto`: the faster layout for this network on the backend,
/// measured (pick_data_format; on GPUs, on the process's GPU).
FormatPick pick_onednn_format(const NetworkSpec& n);
FormatPick pick_cuda_format(const NetworkSpec& n);

/// --explain-plan: the step plans of the network the backend makes for `n`
/// (examples/common/explain_plan.hpp), a training step of `train_batch`
/// images and an evaluation forward of `eval_batch`; towers (num_gpus > 1)
/// are copies of one model, so the caller passes one tower's batches.
std::string explain_onednn_plan(const NetworkSpec& n, std::size_t train_batch, std::size_t eval_batch);
std::string explain_cuda_plan(const NetworkSpec& n, std::size_t train_batch, std::size_t eval_batch);

/// A backend of the program: what makes its network, what measures its
/// layouts, and what explains its step plans.
struct NetworkBackend {
  std::unique_ptr<recipes::Session> (*make)(const NetworkSpec&, const train::TrainerOptions&);
  FormatPick (*pick_format)(const NetworkSpec&);
  std::string (*explain)(const NetworkSpec&, std::size_t, std::size_t);
};

}  // namespace resnet_cifar10
