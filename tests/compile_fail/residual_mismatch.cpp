// Must NOT compile: the block (the network's 2nd layer) has a body that maps
// 4 -> 8 channels, and its identity shortcut keeps 4.
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
using Bad = Sequential<Conv2d<3, 4, 3>, Residual<Sequential<Conv2d<4, 8, 3>>>>;
int main() {
  Model<Bad> m({3, 8, 8});
  return 0;
}
