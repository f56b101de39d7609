// examples/style_transfer/run_test_size.cpp — the run on the test-size net
// (VGG-19 with channel counts / 16, run.hpp), for tests and smoke runs.
#include "run.hpp"

namespace style_transfer {

int run_vgg19_test_size(const Flags& f, const cifarnet::Image& content, const cifarnet::Image& style) {
  return run_net<16>(f, content, style);
}

int explain_vgg19_test_size(const Flags& f) { return explain_net<16>(f); }

}  // namespace style_transfer
