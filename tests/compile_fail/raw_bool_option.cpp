// Must NOT compile: a layer's on/off option given as a raw bool instead of
// its named value (layers/options.hpp): what `true` means is not in the type.
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
using BadConv = Conv2d<3, 4, 3, 1, Padding::Same, true>;                 // WithBias?
using BadBlock = Residual<Sequential<Conv2d<4, 4, 3>>, Identity, true>;  // FusedRelu?
int main() {
  Model<Sequential<BadConv, BadBlock>> m({3, 8, 8});
  return 0;
}
