// The one explicit instantiation of Vgg19Features<32> on oneDNN in float
// (vgg19.hpp).
#include "vgg19.hpp"

template class cifarnet::Model<cifarnet::Vgg19Features<32>, cifarnet::backend::OneDnn, float>;
