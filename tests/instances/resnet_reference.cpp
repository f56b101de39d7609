// The one explicit instantiation of ResNetCifar<> on the reference backend
// (resnet.hpp).
#include "resnet.hpp"

template class cifarnet::Model<cifarnet::ResNetCifar<>, cifarnet::backend::Reference>;
