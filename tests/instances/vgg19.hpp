// The VGG-19 feature network the style-transfer tests use (a narrow one,
// Vgg19Features<32>: channels / 32) on the reference backend in double and on
// oneDNN in float, each compiled once for every test (vgg19_reference.cpp,
// vgg19_onednn.cpp); see resnet.hpp.
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/nn/model.hpp>

extern template class cifarnet::Model<cifarnet::Vgg19Features<32>, cifarnet::backend::Reference, double>;
extern template class cifarnet::Model<cifarnet::Vgg19Features<32>, cifarnet::backend::OneDnn, float>;
