// The one explicit instantiation of Vgg19Features<32> on the reference
// backend in double (vgg19.hpp).
#include "vgg19.hpp"

template class cifarnet::Model<cifarnet::Vgg19Features<32>, cifarnet::backend::Reference, double>;
