// Every layer's backward pass against central finite differences, in double on
// the reference backend, for several shapes, strides, paddings and both data
// formats.
#include "nn/gradcheck.hpp"

#include <cifarnet/models/resnet.hpp>

using namespace cifarnet;
using test::gradcheck;
using test::GradCheckOptions;

namespace {
const DataFormat kFormats[] = {DataFormat::NCHW, DataFormat::NHWC};
}

TEST_CASE("Conv2d gradients match finite differences", "[nn][grad][conv]") {
  for (auto fmt : kFormats) {
    INFO("format " << to_string(fmt));
    gradcheck<Sequential<Conv2d<3, 4, 3, 1, Padding::Same, WithBias>>>({3, 7, 6}, 2, fmt);
    gradcheck<Sequential<Conv2d<2, 3, 3, 2, Padding::Same>>>({2, 7, 8}, 2, fmt);  // asymmetric SAME pads
    gradcheck<Sequential<Conv2d<2, 3, 3, 2, Padding::Explicit>>>({2, 8, 7}, 1, fmt);
    gradcheck<Sequential<Conv2d<3, 2, 5, 1, Padding::Valid, WithBias>>>({3, 7, 7}, 2, fmt);
    gradcheck<Sequential<Conv2d<4, 3, 1, 2, Padding::Same>>>({4, 5, 5}, 3, fmt);
    gradcheck<Sequential<Conv2d<0, 3, 2, 2, Padding::Same, WithBias>>>({2, 5, 6}, 1, fmt);
  }
}

TEST_CASE("BatchNorm2d gradients match finite differences in training mode", "[nn][grad][bn]") {
  for (auto fmt : kFormats) {
    INFO("format " << to_string(fmt));
    gradcheck<Sequential<BatchNorm2d<3>>>({3, 4, 5}, 3, fmt);
    gradcheck<Sequential<Conv2d<2, 3, 3>, BatchNorm2d<3>>>({2, 5, 4}, 2, fmt);
  }
}

TEST_CASE("ReLU, pooling, LRN, dense and shape layers match finite differences", "[nn][grad]") {
  for (auto fmt : kFormats) {
    INFO("format " << to_string(fmt));
    gradcheck<Sequential<ReLU>>({3, 4, 4}, 2, fmt);
    gradcheck<Sequential<MaxPool2d<3, 2>>>({2, 7, 6}, 2, fmt);
    gradcheck<Sequential<MaxPool2d<2, 2, Padding::Valid>>>({2, 6, 6}, 1, fmt);
    gradcheck<Sequential<AvgPool2d<3, 2>>>({2, 7, 8}, 2, fmt);  // padding excluded from the mean
    gradcheck<Sequential<AvgPool2d<2, 2>>>({3, 5, 5}, 1, fmt);
    gradcheck<Sequential<Lrn<2, std::ratio<2>, std::ratio<1, 10>, std::ratio<3, 4>>>>({7, 3, 2}, 2, fmt);
    gradcheck<Sequential<TutorialLrn>>({12, 2, 2}, 1, fmt);
    gradcheck<Sequential<Flatten, Dense<0, 5>>>({3, 2, 3}, 3, fmt);
    gradcheck<Sequential<GlobalAvgPool, Dense<4, 3, NoBias>>>({4, 3, 3}, 2, fmt);
    gradcheck<Sequential<ChannelPad<2, 1>>>({3, 3, 2}, 2, fmt);
    gradcheck<Sequential<Rescale<std::ratio<1, 128>, std::ratio<-1>>>>({2, 3, 3}, 1, fmt);
  }
}

TEST_CASE("Residual blocks and a whole small ResNet match finite differences", "[nn][grad][resnet]") {
  for (auto fmt : kFormats) {
    INFO("format " << to_string(fmt));
    gradcheck<resnet::BlockV1<3, 3, 1>>({3, 5, 5}, 2, fmt);
    gradcheck<resnet::BlockV1<2, 4, 2>>({2, 6, 5}, 2, fmt);
    GradCheckOptions o;
    o.max_checks_per_tensor = 8;
    gradcheck<ResNetCifar<5>>({3, 8, 8}, 2, fmt, resnet_options(8), 3, o);
  }
}
