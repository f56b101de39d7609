// Must NOT compile: conv2 expects 8 input channels, conv1 produces 4.
#include <cifarnet/cifarnet.hpp>
using Bad = cifarnet::Sequential<cifarnet::Conv2d<3, 4, 3>, cifarnet::Conv2d<8, 8, 3>>;
int main() {
  cifarnet::Model<Bad> m({3, 8, 8});
  return 0;
}
