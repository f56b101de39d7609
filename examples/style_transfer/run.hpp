// examples/style_transfer/run.hpp — style_transfer's run with a VGG-19 of
// width divisor D (1: VGG-19, 16: the test-size net): the network, the
// weights, the optimization loop, the reports, summaries and checkpoints;
// and the network's step plans (--explain-plan).
// run.cpp instantiates it for VGG-19 (-O3) and run_test_size.cpp for the
// test-size net (-Og: it is for tests and smoke runs), apart from the
// command line (main.cpp), so that `-j2` builds the three side by side.
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/image.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/io/matconvnet.hpp>
#include <cifarnet/vision/style_transfer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../common/explain_plan.hpp"
#include "flags.hpp"

namespace style_transfer {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// The network of a run with width divisor D, before its weights: the
/// input gradient is the step's (the image is what trains).
template <int D>
using VggModel = cifarnet::Model<cifarnet::Vgg19Features<D>, cifarnet::backend::OneDnn, float>;
template <int D>
std::unique_ptr<VggModel<D>> make_net(const Flags& f) {
  using namespace cifarnet;
  NetOptions o = f.random_weights ? vgg19_random_options() : NetOptions{};
  if (f.precision == "bf16") o.with_conv_precision(ConvPrecision::BF16);
  return std::make_unique<VggModel<D>>(InputShape{3, f.opt.height, f.opt.width},
                                       parse_data_format(f.data_format), o, f.opt.seed,
                                       /*input_gradient=*/true);
}

/// --explain-plan: the Gatys step's plan (a training-mode forward and
/// backward of the one image with the weights frozen, as StyleTransfer sets
/// the model), then the content and style images' forward (Mode::Infer),
/// both batch 1. The plan needs no weight values: none are loaded.
template <int D>
int explain_net(const Flags& f) {
  const std::unique_ptr<VggModel<D>> net = make_net<D>(f);
  net->set_weight_gradients(false);  // as StyleTransfer's constructor: activation gradients only
  std::cout << examples::explain_step_plans(*net, 1, 1) << std::flush;
  return 0;
}

template <int D>
int run_net(const Flags& f, const cifarnet::Image& content, const cifarnet::Image& style) {
  using namespace cifarnet;
  using namespace cifarnet::vision;
  namespace fs = std::filesystem;
  using M = VggModel<D>;
  const std::unique_ptr<M> owned = make_net<D>(f);
  M& net = *owned;
  if (!f.random_weights) {
    io::load_vgg19_mat(net, f.vgg_mat);
    std::cout << "VGG-19 weights: " << f.vgg_mat << " (conv1_1 ... conv5_1"
              << (D > 1 ? ", channel counts / " + std::to_string(D) : std::string()) << ")\n";
  }
  if (f.precision == "bf16")
    std::cout << (backend::onednn::cpu_has_bf16_convolutions()
                      ? "--precision bf16: bf16 convolutions and Gram products (fp32 image, Adam and sums)\n"
                      : "--precision bf16 asked, but oneDNN has no bf16 kernels on this CPU (it needs "
                        "AVX-512): fp32\n");
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

/// The run of the test-size net, width / 16, and its plans (run_test_size.cpp).
int run_vgg19_test_size(const Flags& f, const cifarnet::Image& content, const cifarnet::Image& style);
int explain_vgg19_test_size(const Flags& f);

}  // namespace style_transfer
