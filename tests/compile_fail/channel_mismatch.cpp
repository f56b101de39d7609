// Must NOT compile: the second convolution (the network's 5th layer) expects
// 32 input channels, but 16 reach it (from the batch norm, 3rd; the pool
// between them keeps the count).
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
using Bad = Sequential<Rescale<std::ratio<1, 128>, std::ratio<-1>>, Conv2d<3, 16, 3>, BatchNorm2d<16>,
                       MaxPool2d<2, 2>, Conv2d<32, 32, 3>>;
int main() {
  Model<Bad> m({3, 8, 8});
  return 0;
}
