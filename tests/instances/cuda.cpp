// The one explicit instantiation of each network of cuda.hpp.
#include "cuda.hpp"

template class cifarnet::Model<cifarnet::ResNetCifar<>, cifarnet::backend::Cuda>;
template class cifarnet::Model<cifarnet::Cifar10Cnn, cifarnet::backend::Cuda>;
