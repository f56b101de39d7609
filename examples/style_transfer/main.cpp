// style_transfer — Gatys et al. neural style transfer as the TensorFlow seed
// does it (TF_SEMANTICS.md §6), on cifarnet: a frozen VGG-19 (weights from MatConvNet's
// imagenet-vgg-verydeep-19.mat), max-pools replaced by average pools, the
// content loss at conv4_2 and the style loss over conv1_1 ... conv5_1, and
// Adam (lr 2.0) optimizing the image itself for 300 iterations.
//
//   style_transfer --vgg-mat imagenet-vgg-verydeep-19.mat --content deadpool.jpg --style guernica.jpg
//   style_transfer --random-weights                     # no weights file: demo / timing only
//   style_transfer --explain-plan                       # the step plans, then exit (no weights needed)
//
// Like the seed, it prints step, image sum, loss and time after iterations
// 1-5, 10, 20 and then every 20; writes <out>/outputs/<iteration>.png (mean
// pixel added back, clipped to 0..255, 0-based iteration as the seed names
// them); TensorBoard summaries into <out>/graphs; and a checkpoint (image,
// Adam slots, global step) into <out>/checkpoints every 20 iterations. Run it
// again with the same --output-dir and it resumes from the latest checkpoint.
#include <CLI/CLI.hpp>

#include <cifarnet/core/error.hpp>
#include <cifarnet/io/image.hpp>
#include <cifarnet/io/matconvnet.hpp>
#include <cifarnet/vision/style_transfer.hpp>
#include <cifarnet/demo/images.hpp>

#include <filesystem>
#include <iostream>
#include <string>

#include "flags.hpp"

#include "../common/explain_plan.hpp"
#include "../common/run_main.hpp"

using namespace cifarnet;
using namespace cifarnet::vision;
namespace fs = std::filesystem;

namespace {

using style_transfer::Flags;

/// The content or style image: the file fitted to H x W, or a built-in one (saved next to the outputs).
cifarnet::Image input_image(const std::string& path, bool content, const Flags& f) {
  const std::size_t H = f.opt.height, W = f.opt.width;
  const char* what = content ? "content" : "style";
  if (!path.empty()) {
    cifarnet::Image img = io::load_image(path, 3);
    std::cout << what << " image: " << path << " (" << img.height << "x" << img.width << ", fitted to " << H
              << "x" << W << ")\n";
    return io::fit(img, H, W, f.resize == "area" ? io::ResizeFilter::Area : io::ResizeFilter::Bilinear);
  }
  cifarnet::Image img = content ? builtin_content_image(H, W) : builtin_style_image(H, W);
  const std::string saved = f.output_dir + "/" + what + "_builtin.png";
  io::save_png(saved, io::to_uint8(img));
  std::cout << what << " image: BUILT-IN "
            << (content ? "landscape (sky, sun, hills, a house)" : "swirl pattern") << ", generated at " << H
            << "x" << W << " (saved as " << saved << ")\n";
  return img;
}

/// The width divisor of the network in `f.vgg_mat`: conv1_1 has 64 / D
/// output channels (reads that layer alone).
int divisor_of_mat(const Flags& f) {
  const auto conv1 = io::read_vgg19_mat(f.vgg_mat, {"conv1_1"});
  const std::size_t c1 = conv1.front().shape[3];
  if (c1 == 0 || 64 % c1 != 0)
    throw ConfigError("'" + f.vgg_mat + "': conv1_1 has " + std::to_string(c1) +
                      " output channels; VGG-19 has 64 (or 64 / D for a narrow test net)");
  return int(64 / c1);
}

/// --explain-plan: the network's step plans, built as the run builds it but
/// without loading its weights (the plan needs none): the width from the
/// .mat file when there is one (its conv1_1 alone is read), else from
/// --width-divisor. No image is read, nothing is written.
int explain(const Flags& f) {
  int divisor = f.width_divisor;
  std::string weights = "--random-weights";
  if (!f.random_weights) {
    if (fs::exists(f.vgg_mat)) {
      divisor = divisor_of_mat(f);
      weights = "the width of '" + f.vgg_mat + "' (its weights are not loaded: the plan needs none)";
    } else {
      weights = "'" + f.vgg_mat + "' not found: the width of --width-divisor (the plan needs no weights)";
    }
  }
  std::cout << "VGG-19" << (divisor > 1 ? " with channel counts / " + std::to_string(divisor) : std::string())
            << " (" << weights << "), image " << f.opt.height << "x" << f.opt.width << ", " << f.data_format
            << ": the step plans of the Gatys step (training mode, the weights frozen: the gradient is the "
               "image's) and of the content and style images' forward\n\n";
  return style_transfer::explain_vgg19(divisor, f);
}

int run(Flags f) {
  if (f.explain_plan) {
    f.opt.validate();
    return explain(f);
  }
  if (!f.make_test_mat.empty()) {
    io::write_matconvnet(f.make_test_mat, io::random_vgg19_layers(16, f.opt.seed));
    std::cout
        << "wrote " << f.make_test_mat
        << ": imagenet-vgg-verydeep-19.mat's 43 layers with RANDOM conv weights, channel counts / 16 (a "
           "test-size file; use it with --vgg-mat)\n";
    return 0;
  }
  f.opt.validate();
  fs::create_directories(f.output_dir);
  int divisor = f.width_divisor;
  if (f.random_weights) {
    std::cout
        << "\n*** --random-weights: VGG-19-SHAPED RANDOM WEIGHTS (He-normal), NOT THE TRAINED NETWORK ***\n"
        << "*** Good for timing and for trying the program; the images will not show a real style. ***\n\n";
  } else {
    if (!fs::exists(f.vgg_mat)) {
      std::cerr << "style_transfer: the VGG-19 weights file '" << f.vgg_mat << "' is missing.\n"
                << "  Download imagenet-vgg-verydeep-19.mat (MatConvNet, " << kVgg19MatBytes
                << " bytes) from\n    " << kVgg19MatUrl << "\n"
                << "  and pass its path with --vgg-mat, or run with --random-weights (VGG-19-shaped random "
                   "weights,\n"
                << "  for timing and demos only).\n";
      return 2;
    }
    const auto size = fs::file_size(f.vgg_mat);
    divisor = divisor_of_mat(f);  // the divisor follows the file
    if (divisor == 1 && size != kVgg19MatBytes)
      std::cout << "note: '" << f.vgg_mat << "' is " << size << " bytes; the published file is "
                << kVgg19MatBytes << " bytes\n";
  }
  const cifarnet::Image content = input_image(f.content, true, f), style = input_image(f.style, false, f);
  std::cout << "image " << f.opt.height << "x" << f.opt.width << ", " << f.opt.iterations
            << " iterations, Adam lr " << f.opt.learning_rate << ", noise ratio " << f.opt.noise_ratio
            << ", weights content " << f.opt.content_weight << " / style " << f.opt.style_weight
            << ", output in " << f.output_dir << "\n";
  return style_transfer::run_vgg19(divisor, f, content, style);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  StyleTransferOptions& o = f.opt;
  CLI::App app{
      "Neural style transfer with a frozen VGG-19 (the TensorFlow seed of TF_SEMANTICS.md §6) on cifarnet"};
  app.add_option("--content", f.content, "Content image (JPEG, PNG, BMP). Default: a built-in landscape.");
  app.add_option("--style", f.style, "Style image. Default: a built-in swirl pattern.");
  app.add_option("--output-dir", f.output_dir, "Where outputs/, checkpoints/ and graphs/ go.")
      ->capture_default_str();
  app.add_option("--vgg-mat", f.vgg_mat,
                 "MatConvNet imagenet-vgg-verydeep-19.mat (or a narrow file of the same form).")
      ->capture_default_str();
  app.add_flag("--random-weights", f.random_weights,
               "Use VGG-19-shaped random weights instead of the .mat file (timing, demos).");
  app.add_option(
         "--width-divisor", f.width_divisor,
         "With --random-weights: channel counts / D (1 = VGG-19, 16 = the test-size net). With a .mat file "
         "the file decides.")
      ->check(CLI::IsMember({1, 16}))
      ->capture_default_str();
  app.add_option("--height", o.height, "Image height.")->capture_default_str();
  app.add_option("--width", o.width, "Image width.")->capture_default_str();
  app.add_option("--iterations", o.iterations, "Adam iterations.")->capture_default_str();
  app.add_option("--learning-rate", o.learning_rate, "Adam learning rate.")->capture_default_str();
  app.add_option("--noise-ratio", o.noise_ratio,
                 "Initial image = ratio * U(-20, 20) + (1 - ratio) * content.")
      ->capture_default_str();
  app.add_option("--content-weight", o.content_weight, "Weight of the content loss.")->capture_default_str();
  app.add_option("--style-weight", o.style_weight, "Weight of the style loss.")->capture_default_str();
  app.add_option("--tv-weight", o.tv_weight, "Weight of a total-variation loss (not in the seed; 0 = off).")
      ->capture_default_str();
  app.add_option("--content-layer", o.content_layer, "Content layer.")->capture_default_str();
  app.add_option("--style-layers", o.style_layers, "Style layers, comma separated.")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--style-layer-weights", o.style_layer_weights,
                 "One weight per style layer, comma separated.")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initial noise (and of --random-weights).")
      ->capture_default_str();
  app.add_option("--precision", f.precision,
                 "Arithmetic of the convolutions and the Gram products: fp32, or bf16 (bf16 factors with "
                 "fp32 accumulation; the image, Adam and the losses' sums stay fp32; needs AVX-512, fp32 "
                 "elsewhere).")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--data-format", f.data_format, "channels_last (NHWC) or channels_first (NCHW) activations.")
      ->check(CLI::IsMember({"channels_last", "channels_first"}))
      ->capture_default_str();
  app.add_option("--resize", f.resize, "Filter fitting the input images to height x width: area or bilinear.")
      ->check(CLI::IsMember({"area", "bilinear"}))
      ->capture_default_str();
  app.add_option("--make-test-mat", f.make_test_mat,
                 "Write a test-size .mat file (VGG-19's structure, random weights, channels / 16) and exit.");
  app.add_flag("--fresh", f.fresh, "Ignore existing checkpoints (the seed always resumes).");
  app.add_option("--keep-checkpoints", f.keep_checkpoints, "Checkpoints to keep.")->capture_default_str();
  app.add_flag("--explain-plan", f.explain_plan,
               examples::explain_plan_help("the content and style images' forward") +
                   " The Gatys step is a training-mode forward and backward of one image with the weights "
                   "frozen. The network is built as the run builds it (--height, --width, --data-format; "
                   "its width from the --vgg-mat file when it exists, else --width-divisor) and its plan "
                   "printed before any weights are loaded: none are needed.");
  return examples::parse_and_run(app, argc, argv, "style_transfer", [&] { return run(f); });
}
