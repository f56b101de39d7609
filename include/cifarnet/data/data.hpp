// cifarnet/data/data.hpp — everything of the data area in one include:
// CIFAR-10/100 binary readers, TFRecord + tf.train.Example I/O,
// TensorFlow-exact augmentation, and the prefetching input pipeline with
// its two ready recipes. See docs/DATA.md.
#pragma once

#include "cifarnet/data/augment.hpp"
#include "cifarnet/data/cifar.hpp"
#include "cifarnet/data/example.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/data/in_memory.hpp"
#include "cifarnet/data/pipeline.hpp"
#include "cifarnet/data/recipes.hpp"
#include "cifarnet/data/sources.hpp"
#include "cifarnet/data/tfrecord.hpp"
#include "cifarnet/data/transforms.hpp"
#include "cifarnet/data/tta.hpp"
