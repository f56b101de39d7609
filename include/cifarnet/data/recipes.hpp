// cifarnet/data/recipes.hpp — the input pipelines of the two CIFAR-10
// programs the project ports, as named types plus their options (TF_SEMANTICS.md §2).
//
// ResNet (seed 000/002): train = pad to 40x40, random crop 32x32, random
// flip; shuffle buffer 40 % of an epoch + 3 batches; repeat forever; batch
// 128. Eval = no distortion, one pass, batch 100. The model scales x/128-1
// itself.
// Classic tutorial CNN (seed 001): train = random crop 24x24, flip,
// brightness +-63, contrast 0.2..1.8, per-image standardization; eval =
// central 24x24 crop + standardization.
// Each alias has a ...T<Source> form for other sources (e.g. TfRecordSource).
#pragma once

#include <cstdint>
#include <ratio>

#include "cifarnet/data/pipeline.hpp"
#include "cifarnet/data/sources.hpp"
#include "cifarnet/data/transforms.hpp"

namespace cifarnet {
namespace data {
namespace recipes {

template <class Source>
using ResNetTrainT = Pipeline<Source, PadCrop<4>, RandomFlipLR>;
template <class Source>
using ResNetEvalT = Pipeline<Source>;
template <class Source>
using TutorialTrainT = Pipeline<Source, RandomCrop<24, 24>, RandomFlipLR, RandomBrightness<63>,
                                RandomContrast<std::ratio<1, 5>, std::ratio<9, 5>>, Standardize>;
template <class Source>
using TutorialEvalT = Pipeline<Source, CentralCrop<24, 24>, Standardize>;

using ResNetTrain = ResNetTrainT<Cifar10Binary>;
using ResNetEval = ResNetEvalT<Cifar10Binary>;
using TutorialTrain = TutorialTrainT<Cifar10Binary>;
using TutorialEval = TutorialEvalT<Cifar10Binary>;

/// ResNet training: buffer shuffle (default size), forever, batch 128.
inline PipelineOptions resnet_train_options(std::uint64_t seed, std::size_t batch_size = 128) {
  PipelineOptions o;
  o.batch_size = batch_size;
  o.shuffle = ShuffleMode::buffer;
  o.shuffle_buffer = 0;
  o.epochs = 0;
  o.seed = seed;
  return o;
}
/// ResNet evaluation: file order, one epoch, batch 100, last batch kept.
inline PipelineOptions resnet_eval_options(std::size_t batch_size = 100) {
  PipelineOptions o;
  o.batch_size = batch_size;
  o.shuffle = ShuffleMode::none;
  o.epochs = 1;
  return o;
}
/// Tutorial training: shuffled (min_queue_examples = 40 % of the epoch, as
/// tf.train.shuffle_batch's buffer), forever, batch 128.
inline PipelineOptions tutorial_train_options(std::uint64_t seed, std::size_t batch_size = 128) {
  return resnet_train_options(seed, batch_size);
}
/// Tutorial evaluation: file order, one epoch, batch 128.
inline PipelineOptions tutorial_eval_options(std::size_t batch_size = 128) {
  return resnet_eval_options(batch_size);
}

}  // namespace recipes
}  // namespace data
}  // namespace cifarnet
