// The one explicit instantiation of ResNetCifar<> on oneDNN (resnet.hpp).
#include "resnet.hpp"

template class cifarnet::Model<cifarnet::ResNetCifar<>, cifarnet::backend::OneDnn>;
