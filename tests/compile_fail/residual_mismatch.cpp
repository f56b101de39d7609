// Must NOT compile: the body maps 4 -> 8 channels, the identity shortcut keeps 4.
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
using Bad = Residual<Sequential<Conv2d<4, 8, 3>>>;
int main() {
  Model<Bad> m({4, 8, 8});
  return 0;
}
