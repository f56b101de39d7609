// Must NOT compile: inside the second stage (the network's 2nd layer), the
// third layer expects 32 input channels but the first gives 16 (the ReLU
// between them keeps the count): position 2, 3 against 2, 1.
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
using Stage2 = Sequential<Conv2d<16, 16, 3>, ReLU, Conv2d<32, 32, 3>>;
using Bad = Sequential<Conv2d<3, 16, 3>, Stage2>;
int main() {
  Model<Bad> m({3, 8, 8});
  return 0;
}
