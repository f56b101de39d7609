// Must not compile: a Chain has exactly one optimizer, its last stage.
#include <cifarnet/optim/optim.hpp>

namespace opt = cifarnet::optim;

int main() {
  cifarnet::Parameters<float> p;
  opt::Chain<opt::Momentum, opt::Adam> chain(p, opt::MomentumOptions(), opt::AdamOptions());
}
