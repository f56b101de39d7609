// The tutorial CNN (Cifar10Cnn) on oneDNN, compiled once for every test
// (cifar10_cnn_onednn.cpp); see resnet.hpp.
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/nn/model.hpp>

extern template class cifarnet::Model<cifarnet::Cifar10Cnn, cifarnet::backend::OneDnn>;
