// Must not compile: a Chain ends with its optimizer, not with a transform.
#include <cifarnet/optim/optim.hpp>

namespace opt = cifarnet::optim;

int main() {
  cifarnet::Parameters<float> p;
  opt::Chain<opt::Momentum, opt::ClipByGlobalNorm> chain(p, opt::MomentumOptions(),
                                                         opt::ClipByGlobalNormOptions(1.0));
}
