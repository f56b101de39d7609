// The CIFAR ResNet and the tutorial CNN on the CUDA backend, compiled once
// for the CUDA tests (cuda.cpp); see resnet.hpp.
#pragma once

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>

extern template class cifarnet::Model<cifarnet::ResNetCifar<>, cifarnet::backend::Cuda>;
extern template class cifarnet::Model<cifarnet::Cifar10Cnn, cifarnet::backend::Cuda>;
