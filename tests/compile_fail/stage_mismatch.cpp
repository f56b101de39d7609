// Must NOT compile: in the block that stage2 (the network's 3rd layer)
// repeats, the body's batch norm expects 32 channels and the convolution
// before it gives 16. Named and Repeat add no position, Residual counts its
// body as 1: the batch norm is at 3, 2, 1, 2 and the convolution at 3, 2, 1, 1.
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
CIFARNET_NAME(stage1);
CIFARNET_NAME(stage2);
using Good = Residual<Sequential<Conv2d<16, 16, 3>, BatchNorm2d<16>, ReLU, Conv2d<16, 16, 3>>>;
using Block = Residual<Sequential<Conv2d<16, 16, 3>, BatchNorm2d<32>, ReLU, Conv2d<16, 16, 3>>>;
using Bad = Sequential<Conv2d<3, 16, 3>, Named<stage1, Sequential<Good, Repeat<Good>>>,
                       Named<stage2, Sequential<Good, Repeat<Block>>>>;
int main() {
  Model<Bad> m({3, 8, 8});
  return 0;
}
