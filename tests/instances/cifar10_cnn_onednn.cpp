// The one explicit instantiation of Cifar10Cnn on oneDNN (cifar10_cnn.hpp).
#include "cifar10_cnn.hpp"

template class cifarnet::Model<cifarnet::Cifar10Cnn, cifarnet::backend::OneDnn>;
