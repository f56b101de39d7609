// Fuzz target: the MatConvNet .mat walker (io/matconvnet.hpp, through
// matio): list_matconvnet and read_vgg19_mat on a file holding the input.
// matio itself is Debian's build (not instrumented, so libFuzzer sees only
// cifarnet's side of the walk); a crash inside it still shows.
#include <string>
#include <vector>

#include "cifarnet/io/matconvnet.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(matconvnet) {
  fuzz::TempFile f(data, size, ".mat");
  fuzz::ignore_errors([&] {
    for (const auto& l : io::list_matconvnet(f.path())) FUZZ_CHECK(l.index >= 0);
  });
  fuzz::ignore_errors([&] {
    for (const auto& w : io::read_vgg19_mat(f.path(), {"conv1_1", "conv1_2"}))
      FUZZ_CHECK(w.weights.size() == w.shape[0] * w.shape[1] * w.shape[2] * w.shape[3] &&
                 w.bias.size() == w.shape[3]);
  });
  return 0;
}
