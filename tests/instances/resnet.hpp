// The CIFAR ResNet (ResNetCifar<>) on the CPU backends, compiled once for
// every test (resnet_onednn.cpp, resnet_reference.cpp): a test that includes
// this header compiles none of the network's layers itself (nn/model.hpp says
// how extern templates work with Model). Measured with GCC 12 at -O3 on the
// 2-core EPYC: the towers tests on ResNet/oneDNN alone compiled in 46.5 s,
// 27.0 s with the network declared extern.
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>

extern template class cifarnet::Model<cifarnet::ResNetCifar<>, cifarnet::backend::OneDnn>;
extern template class cifarnet::Model<cifarnet::ResNetCifar<>, cifarnet::backend::Reference>;
