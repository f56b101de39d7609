// examples/style_transfer/run.cpp — the run on VGG-19 (run.hpp), and the
// choice of the width by its divisor.
#include "run.hpp"

namespace style_transfer {

int run_vgg19(int divisor, const Flags& f, const cifarnet::Image& content, const cifarnet::Image& style) {
  switch (divisor) {
    case 1:
      return run_net<1>(f, content, style);
    case 16:
      return run_vgg19_test_size(f, content, style);
    default:
      throw cifarnet::ConfigError("width divisor " + std::to_string(divisor) +
                                  " is not built into this program (1 = VGG-19, 16 = the test-size net)");
  }
}

int explain_vgg19(int divisor, const Flags& f) {
  switch (divisor) {
    case 1:
      return explain_net<1>(f);
    case 16:
      return explain_vgg19_test_size(f);
    default:
      throw cifarnet::ConfigError("width divisor " + std::to_string(divisor) +
                                  " is not built into this program (1 = VGG-19, 16 = the test-size net)");
  }
}

}  // namespace style_transfer
