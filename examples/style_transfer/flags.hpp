// style_transfer's flags. The program is two translation units, so that
// `-j2` builds them side by side: main.cpp (the command line, the input
// images, the .mat checks) and run.cpp (the network and the optimization).
#pragma once

#include <cifarnet/data/image.hpp>
#include <cifarnet/io/matconvnet.hpp>
#include <cifarnet/vision/style_transfer.hpp>

#include <cstddef>
#include <string>

namespace style_transfer {

struct Flags {
  std::string content, style, output_dir = "style_transfer_out", vgg_mat = cifarnet::kVgg19MatFile;
  std::string data_format = "channels_last", resize = "area", make_test_mat, precision = "fp32";
  bool random_weights = false, fresh = false, explain_plan = false;
  int width_divisor = 1;
  std::size_t keep_checkpoints = 5;
  cifarnet::vision::StyleTransferOptions opt;
};

/// Runs style transfer with the VGG-19 of width divisor `divisor` (1, or 16:
/// the test-size net) from `content` to `style` (run.cpp).
int run_vgg19(int divisor, const Flags& f, const cifarnet::Image& content, const cifarnet::Image& style);

/// --explain-plan: the step plans of the VGG-19 of width divisor `divisor`
/// as run_vgg19 builds it, before (and without) its weights (run.cpp).
int explain_vgg19(int divisor, const Flags& f);

}  // namespace style_transfer
