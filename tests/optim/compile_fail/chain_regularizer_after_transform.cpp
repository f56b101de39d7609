// Must not compile: weight decay is part of the loss, so it runs before the
// gradient transforms (clipping sees its gradient), never after them.
#include <cifarnet/optim/optim.hpp>

namespace opt = cifarnet::optim;

int main() {
  cifarnet::Parameters<float> p;
  opt::Chain<opt::ClipByGlobalNorm, opt::WeightDecay, opt::Momentum> chain(
      p, opt::ClipByGlobalNormOptions(1.0), opt::WeightDecayOptions(2e-4), opt::MomentumOptions());
}
