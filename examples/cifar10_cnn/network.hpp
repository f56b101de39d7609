// examples/cifar10_cnn/network.hpp — the tutorial CNN as the programs get it:
// a recipes::Session made in the backend's translation unit (cnn_onednn.cpp,
// multi_gpu_cuda.cpp), so the programs' flags, data, loop, checkpoints and
// summaries compile once, typed on no network (docs/ARCHITECTURE.md,
// "Compile time").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <cifarnet/core/tensor.hpp>
#include <cifarnet/nn/context.hpp>
#include <cifarnet/nn/model.hpp>
#include <cifarnet/recipes/session.hpp>
#include <cifarnet/train/trainer.hpp>

namespace cifar10 {

using namespace cifarnet;

/// The tensor layout of the model and the batches.
inline constexpr DataFormat kFormat = DataFormat::NHWC;
/// The input the model sees: 24x24 crops of the 32x32 images (IMAGE_SIZE).
inline constexpr InputShape kInput{3, 24, 24};

/// The tutorial CNN on the oneDNN CPU backend (cnn_onednn.cpp) with a
/// trainer of options `o`: one model when `towers` is 0, else `towers`
/// towers sharing one set of variables.
std::unique_ptr<recipes::Session> make_cpu_session(std::size_t towers, const NetOptions& options,
                                                   std::uint64_t seed, const train::TrainerOptions& o);

/// cifar10_train --explain_plan: the step plans of the model make_cpu_session
/// makes (examples/common/explain_plan.hpp), a training step of
/// `train_batch` images and an inference forward of `infer_batch`.
std::string explain_cpu_plan(const NetOptions& options, std::uint64_t seed, std::size_t train_batch,
                             std::size_t infer_batch);

}  // namespace cifar10
