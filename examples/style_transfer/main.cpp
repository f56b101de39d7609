// style_transfer — Gatys et al. neural style transfer as the TensorFlow seed
// does it (TF_SEMANTICS.md §6), on cifarnet: a frozen VGG-19 (weights from MatConvNet's
// imagenet-vgg-verydeep-19.mat), max-pools replaced by average pools, the
// content loss at conv4_2 and the style loss over conv1_1 ... conv5_1, and
// Adam (lr 2.0) optimizing the image itself for 300 iterations.
//
//   style_transfer --vgg-mat imagenet-vgg-verydeep-19.mat --content deadpool.jpg --style guernica.jpg
//   style_transfer --random-weights                     # no weights file: demo / timing only
//
// Like the seed, it prints step, image sum, loss and time after iterations
// 1-5, 10, 20 and then every 20; writes <out>/outputs/<iteration>.png (mean
// pixel added back, clipped to 0..255, 0-based iteration as the seed names
// them); TensorBoard summaries into <out>/graphs; and a checkpoint (image,
// Adam slots, global step) into <out>/checkpoints every 20 iterations. Run it
// again with the same --output-dir and it resumes from the latest checkpoint.
#include <CLI/CLI.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/image.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/vision/matconvnet.hpp>
#include <cifarnet/vision/style_transfer.hpp>
#include <cifarnet/vision/test_images.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "../common/run_main.hpp"

using namespace cifarnet;
using namespace cifarnet::vision;
namespace fs = std::filesystem;

namespace {

struct Flags {
  std::string content, style, output_dir = "style_transfer_out", vgg_mat = kVgg19MatFile;
  std::string data_format = "channels_last", resize = "area", make_test_mat;
  bool random_weights = false, fresh = false;
  int width_divisor = 1;
  std::size_t keep_checkpoints = 5;
  StyleTransferOptions opt;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The content or style image: the file fitted to H x W, or a built-in one (saved next to the outputs).
data::Image input_image(const std::string& path, bool content, const Flags& f) {
  const std::size_t H = f.opt.height, W = f.opt.width;
  const char* what = content ? "content" : "style";
  if (!path.empty()) {
    data::Image img = io::load_image(path, 3);
    std::cout << what << " image: " << path << " (" << img.height << "x" << img.width << ", fitted to " << H
              << "x" << W << ")\n";
    return io::fit(img, H, W, f.resize == "area" ? io::ResizeFilter::Area : io::ResizeFilter::Bilinear);
  }
  data::Image img = content ? builtin_content_image(H, W) : builtin_style_image(H, W);
  const std::string saved = f.output_dir + "/" + what + "_builtin.png";
  io::save_png(saved, io::to_uint8(img));
  std::cout << what << " image: BUILT-IN "
            << (content ? "landscape (sky, sun, hills, a house)" : "swirl pattern") << ", generated at " << H
            << "x" << W << " (saved as " << saved << ")\n";
  return img;
}

template <int D>
int run_net(const Flags& f, const data::Image& content, const data::Image& style) {
  using Net = Vgg19Features<D>;
  using M = Model<Net, backend::OneDnn, float>;
  const DataFormat fmt = parse_data_format(f.data_format);
  M net({3, f.opt.height, f.opt.width}, fmt, f.random_weights ? vgg19_random_options() : NetOptions{},
        f.opt.seed,
        /*input_gradient=*/true);
  if (!f.random_weights) {
    load_vgg19_mat(net, f.vgg_mat);
    std::cout << "VGG-19 weights: " << f.vgg_mat << " (conv1_1 ... conv5_1"
              << (D > 1 ? ", channel counts / " + std::to_string(D) : std::string()) << ")\n";
  }
  StyleTransfer<M> st(net, f.opt, content, style);

  io::CheckpointManager ckpt(f.output_dir + "/checkpoints", f.keep_checkpoints);
  if (!f.fresh) {
    std::vector<std::string> warnings;
    if (st.restore_latest(ckpt, &warnings)) {
      for (const auto& w : warnings) std::cout << "warning: " << w << "\n";
      std::cout << "resumed from " << *ckpt.latest() << " at step " << st.global_step() << "\n";
    }
  }
  io::EventWriter events(f.output_dir + "/graphs");
  fs::create_directories(f.output_dir + "/outputs");

  std::vector<double> per_step;
  Clock::time_point start = Clock::now();
  std::int64_t saved_at = st.global_step();
  for (std::int64_t index = st.global_step(); index < f.opt.iterations; ++index) {
    const Clock::time_point t = Clock::now();
    st.step();
    per_step.push_back(seconds_since(t));
    if (seed_reports(index)) {
      // As the seed: the loss and the image after this iteration's update.
      const LossParts p = st.loss();
      std::printf("Step %lld\n   Sum: %5.1f\n   Loss: %5.1f\n   Time: %g\n",
                  static_cast<long long>(index + 1), st.image_sum(), p.total, seconds_since(start));
      std::printf("   (content %.4g x %g, style %.4g x %g%s)\n", p.content, f.opt.content_weight, p.style,
                  f.opt.style_weight, f.opt.tv_weight > 0 ? (", tv " + std::to_string(p.tv)).c_str() : "");
      std::fflush(stdout);
      const io::Image8 img = io::to_uint8(st.image(), io::ToByte::Truncate);  // np.clip + astype('uint8')
      io::save_png(f.output_dir + "/outputs/" + std::to_string(index) + ".png", img);
      events.add_scalar("summaries/content loss", p.content, index);
      events.add_scalar("summaries/style loss", p.style, index);
      events.add_scalar("summaries/total loss", p.total, index);
      events.add_histogram("summaries/histogram content loss", &p.content, 1, index);
      events.add_histogram("summaries/histogram style loss", &p.style, 1, index);
      events.add_histogram("summaries/histogram total loss", &p.total, 1, index);
      events.add_image("summaries/generated image", img.pixels.data(), int(img.height), int(img.width), 3,
                       index);
      if ((index + 1) % 20 == 0) {
        st.save(ckpt);
        saved_at = st.global_step();
      }
      start = Clock::now();
    }
  }
  if (st.global_step() != saved_at) st.save(ckpt);  // a run not ending on a multiple of 20
  events.flush();
  if (!per_step.empty()) {
    std::vector<double> s = per_step;
    std::nth_element(s.begin(), s.begin() + long(s.size() / 2), s.end());
    std::printf(
        "done: step %lld, %zu iterations this run, median %.3f s per iteration (forward + backward + Adam)\n",
        static_cast<long long>(st.global_step()), per_step.size(), s[s.size() / 2]);
  }
  return 0;
}

int run(Flags f) {
  if (!f.make_test_mat.empty()) {
    write_matconvnet(f.make_test_mat, random_vgg19_layers(16, f.opt.seed));
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
    // The divisor follows the file: conv1_1 has 64 / D output channels.
    const auto conv1 = read_vgg19_mat(f.vgg_mat, {"conv1_1"});
    const std::size_t c1 = conv1.front().shape[3];
    if (c1 == 0 || 64 % c1 != 0)
      throw ConfigError("'" + f.vgg_mat + "': conv1_1 has " + std::to_string(c1) +
                        " output channels; VGG-19 has 64 (or 64 / D for a narrow test net)");
    divisor = int(64 / c1);
    if (divisor == 1 && size != kVgg19MatBytes)
      std::cout << "note: '" << f.vgg_mat << "' is " << size << " bytes; the published file is "
                << kVgg19MatBytes << " bytes\n";
  }
  const data::Image content = input_image(f.content, true, f), style = input_image(f.style, false, f);
  std::cout << "image " << f.opt.height << "x" << f.opt.width << ", " << f.opt.iterations
            << " iterations, Adam lr " << f.opt.learning_rate << ", noise ratio " << f.opt.noise_ratio
            << ", weights content " << f.opt.content_weight << " / style " << f.opt.style_weight
            << ", output in " << f.output_dir << "\n";
  switch (divisor) {
    case 1:
      return run_net<1>(f, content, style);
    case 16:
      return run_net<16>(f, content, style);
    default:
      throw ConfigError("width divisor " + std::to_string(divisor) +
                        " is not built into this program (1 = VGG-19, 16 = the test-size net)");
  }
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
  return examples::parse_and_run(app, argc, argv, "style_transfer", [&] { return run(f); });
}
