// cifarnet/vision/style_transfer.hpp — Gatys style transfer as the seed does
// it (TF_SEMANTICS.md §6): the losses over a frozen feature network, and the loop that
// optimizes the image with Adam, checkpointed and resumable.
//
// GatysLoss<M> binds a Model (any feature network with taps named like the
// content and style layers, e.g. Vgg19Features) to the content target P (the
// content image's activation at the content layer) and the style targets A
// (Gram matrices of the style image). evaluate(image, grad) runs the model
// once forward and, when grad is wanted, once backward with the loss
// gradients injected at the taps and the weights frozen, returning
// d(total)/d(image). Images passed in and out are always (1, H, W, 3)
// channels-last (TF's layout, and the checkpoint's), mean already
// subtracted; the model may use either data format. With the model's
// ConvPrecision::BF16 the Gram products of every step (G and dE/dF) run in
// bfloat16 too (vision/losses.hpp); the style targets A stay float.
//
// StyleTransfer<M> owns the image as a one-tensor arena "input/Variable"
// (the seed's TF variable name) and an Adam optimizer (TF semantics), and
// keeps the global step. state()/load_state() carry the image, the Adam
// slots ("input/Variable/Adam", "input/Variable/Adam_1", "beta1_power",
// "beta2_power") and "global_step", so a run restored from a checkpoint
// continues exactly where it stopped.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/core/image.hpp"
#include "cifarnet/io/checkpoint_manager.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/models/vgg19.hpp"
#include "cifarnet/nn/model.hpp"
#include "cifarnet/optim/adam.hpp"
#include "cifarnet/vision/losses.hpp"

namespace cifarnet::vision {

/// Everything the seed fixes, with its defaults (TF_SEMANTICS.md §6).
struct StyleTransferOptions {
  std::size_t height = 250, width = 333;
  std::int64_t iterations = 300;
  double learning_rate = 2.0;
  double noise_ratio = 0.6;  ///< initial image = ratio·U(−noise_range, noise_range) + (1 − ratio)·content
  double noise_range = 20.0;  ///< the seed's uniform(−20, 20)
  double content_weight = 0.01, style_weight = 1.0;
  double tv_weight = 0.0;  ///< total variation (not in the seed; 0 = off)
  std::string content_layer = "conv4_2";
  std::vector<std::string> style_layers{"conv1_1", "conv2_1", "conv3_1", "conv4_1", "conv5_1"};
  std::vector<double> style_layer_weights{0.5, 1.0, 1.5, 3.0, 4.0};
  std::array<float, 3> mean_pixel = kVgg19MeanPixel;
  std::uint64_t seed = 0;  ///< for the initial noise

  /// ConfigError naming the first bad option.
  void validate() const {
    auto bad = [](const char* opt, const std::string& why) {
      throw ConfigError(std::string("style transfer option '") + opt + "' " + why);
    };
    if (height == 0 || width == 0) bad("height/width", "must be positive");
    if (iterations < 0) bad("iterations", "must be >= 0");
    if (!(learning_rate > 0) || !std::isfinite(learning_rate)) bad("learning_rate", "must be finite and > 0");
    if (!(noise_ratio >= 0 && noise_ratio <= 1)) bad("noise_ratio", "must be in [0, 1]");
    if (!(noise_range >= 0) || !std::isfinite(noise_range)) bad("noise_range", "must be finite and >= 0");
    for (double w : {content_weight, style_weight, tv_weight})
      if (!(w >= 0) || !std::isfinite(w)) bad("content/style/tv weight", "must be finite and >= 0");
    if (content_layer.empty()) bad("content_layer", "must name a layer");
    if (style_layers.size() != style_layer_weights.size())
      bad("style_layer_weights", cifarnet::detail::concat("has ", style_layer_weights.size(), " weights for ",
                                                          style_layers.size(), " style layers"));
    for (double w : style_layer_weights)
      if (!std::isfinite(w)) bad("style_layer_weights", "must be finite");
  }
};

/// The parts of the total loss.
struct LossParts {
  double content = 0, style = 0, tv = 0;
  double total = 0;  ///< content_weight·content + style_weight·style + tv_weight·tv
};

/// The seed's reporting interval: 1 for the first 5 iterations, 10 until
/// iteration 20, then 20 (0-based iteration index).
inline std::int64_t seed_skip_step(std::int64_t index) { return index < 5 ? 1 : index < 20 ? 10 : 20; }
/// True when the seed prints, saves outputs/<index>.png and writes summaries
/// after iteration `index`: (index + 1) % skip_step == 0.
inline bool seed_reports(std::int64_t index) { return (index + 1) % seed_skip_step(index) == 0; }

/// The content and style losses over a frozen feature network.
template <class M>
class GatysLoss {
 public:
  using T = typename M::Scalar;
  using B = typename M::Backend;

  /// Checks that the model takes (3, height, width) and has every layer as a
  /// tap (ConfigError naming the missing one), then freezes its weights.
  GatysLoss(M& model, StyleTransferOptions options) : model_(model), opt_(std::move(options)) {
    opt_.validate();
    const Shape in = model_.input_shape();
    if (in.c != 3 || in.h != opt_.height || in.w != opt_.width)
      throw ShapeError(cifarnet::detail::concat("GatysLoss: the model takes ", in.str(), " but the image is ",
                                                opt_.height, "x", opt_.width, "x3"));
    const auto taps = model_.tap_names();
    auto need = [&](const std::string& layer, const char* role) {
      if (std::find(taps.begin(), taps.end(), layer) == taps.end()) {
        std::string list;
        for (const auto& t : taps) list += (list.empty() ? "" : ", ") + t;
        throw ConfigError(cifarnet::detail::concat(role, " layer '", layer,
                                                   "' is not a tap of the network (taps: ", list, ")"));
      }
    };
    need(opt_.content_layer, "content");
    for (const auto& l : opt_.style_layers) need(l, "style");
    model_.set_weight_gradients(false);
    x_ = make_tensor<T>(model_.input_shape(1), model_.format());
    targets_.resize(opt_.style_layers.size());
  }

  const StyleTransferOptions& options() const { return opt_; }
  std::size_t image_size() const { return opt_.height * opt_.width * 3; }

  /// P: the content image's activation at the content layer. `content` is
  /// (1, H, W, 3) channels-last, mean subtracted.
  void set_content(const T* content) {
    forward(content, Mode::Infer);
    content_target_ = model_.activation(opt_.content_layer);
    has_content_ = true;
  }
  /// A: the style image's Gram matrices at the style layers.
  void set_style(const T* style) {
    forward(style, Mode::Infer);
    for (std::size_t i = 0; i < opt_.style_layers.size(); ++i)
      targets_[i] =
          make_gram_target<B>(model_.activation(opt_.style_layers[i]), model_.format(), &model_.device());
    has_style_ = true;
  }

  /// The losses at `image` ((1, H, W, 3) channels-last). With `grad`,
  /// overwrites it with d(total)/d(image) (same layout): one forward and one
  /// frozen-weights backward. Without, forward only.
  LossParts evaluate(const T* image, T* grad = nullptr) {
    if (!has_content_ || !has_style_) throw Error("GatysLoss::evaluate: set_content and set_style first");
    const bool backward = grad != nullptr;
    forward(image, backward ? Mode::Train : Mode::Infer);
    model_.clear_tap_gradients();
    // Each involved tap's gradient: the first loss at a tap writes it, later
    // ones (layers may repeat: content = a style layer) add to it.
    std::vector<T*> tg(opt_.style_layers.size() + 1, nullptr);
    std::vector<bool> first(tg.size(), true);
    if (backward) {
      tg[0] = model_.tap_gradient(opt_.content_layer).data();
      for (std::size_t i = 0; i < opt_.style_layers.size(); ++i) {
        tg[i + 1] = model_.tap_gradient(opt_.style_layers[i]).data();
        for (std::size_t j = 0; j <= i; ++j) first[i + 1] = first[i + 1] && tg[j] != tg[i + 1];
      }
    }
    LossParts p;
    p.content =
        content_loss(model_.activation(opt_.content_layer), content_target_, tg[0], opt_.content_weight,
                     /*add=*/!first[0]);
    for (std::size_t i = 0; i < opt_.style_layers.size(); ++i) {
      const double w = opt_.style_layer_weights[i];
      p.style +=
          w * style_layer_loss<B>(model_.activation(opt_.style_layers[i]), model_.format(), targets_[i],
                                  work_, tg[i + 1], opt_.style_weight * w, &model_.device(),
                                  model_.options().conv_precision, /*add=*/!first[i + 1]);
    }
    if (backward) {
      const Shape out = model_.output_shape(1);
      if (shape_of(dy_, model_.format()) != out || dy_.dimension() != 4)
        dy_ = make_tensor<T>(out, model_.format());
      std::fill(dy_.begin(), dy_.end(), T(0));
      const Tensor<T>& dx = model_.backward(dy_);
      from_model_layout(dx, grad);
    }
    if (opt_.tv_weight > 0)
      p.tv = total_variation(image, opt_.height, opt_.width, std::size_t(3), grad, opt_.tv_weight);
    p.total = opt_.content_weight * p.content + opt_.style_weight * p.style + opt_.tv_weight * p.tv;
    return p;
  }

 private:
  void forward(const T* image, Mode mode) {
    const std::size_t H = opt_.height, W = opt_.width;
    if (model_.format() == DataFormat::NHWC) {
      std::copy(image, image + image_size(), x_.data());
    } else {
      T* x = x_.data();
      for (std::size_t y = 0; y < H; ++y)
        for (std::size_t xx = 0; xx < W; ++xx)
          for (std::size_t c = 0; c < 3; ++c) x[(c * H + y) * W + xx] = image[(y * W + xx) * 3 + c];
    }
    model_.forward(x_, mode);
  }
  void from_model_layout(const Tensor<T>& dx, T* grad) const {
    const std::size_t H = opt_.height, W = opt_.width;
    if (dx.size() != image_size()) throw Error("GatysLoss: the model returned no input gradient");
    const T* d = dx.data();
    if (model_.format() == DataFormat::NHWC) {
      std::copy(d, d + image_size(), grad);
    } else {
      for (std::size_t y = 0; y < H; ++y)
        for (std::size_t xx = 0; xx < W; ++xx)
          for (std::size_t c = 0; c < 3; ++c) grad[(y * W + xx) * 3 + c] = d[(c * H + y) * W + xx];
    }
  }

  M& model_;
  StyleTransferOptions opt_;
  Tensor<T> x_, dy_, content_target_;
  std::vector<GramTarget<T>> targets_;
  std::vector<T> work_;
  bool has_content_ = false, has_style_ = false;
};

/// The style-transfer loop's state: the image, Adam, the global step.
template <class M>
class StyleTransfer {
 public:
  using T = typename M::Scalar;
  static constexpr const char* kImageName = "input/Variable";

  /// `content` and `style` are H x W x 3 images with values in [0, 255] (fit
  /// them to the options' size first, e.g. io::fit); the mean pixel is
  /// subtracted here. The image starts as the seed's noise mix.
  StyleTransfer(M& model, const StyleTransferOptions& options, const Image& content, const Image& style)
      : loss_(model, options), opt_(loss_.options()) {
    const std::vector<T> c = centred(content, "content"), s = centred(style, "style");
    loss_.set_content(c.data());
    loss_.set_style(s.data());
    ParamSpec spec;
    spec.name = kImageName;
    spec.shape = {1, opt_.height, opt_.width, 3};
    image_.add(spec);
    image_.allocate();
    adam_.emplace(image_);
    // Initial image: noise_ratio·U(−r, r) + (1 − noise_ratio)·content.
    Rng rng(opt_.seed);
    T* x = image_.value(0);
    for (std::size_t i = 0; i < c.size(); ++i)
      x[i] = T(opt_.noise_ratio * rng.uniform(-opt_.noise_range, opt_.noise_range) +
               (1.0 - opt_.noise_ratio) * double(c[i]));
  }

  StyleTransfer(const StyleTransfer&) = delete;
  StyleTransfer& operator=(const StyleTransfer&) = delete;

  /// One Adam iteration; returns the losses at the image before the update.
  LossParts step() {
    image_.zero_grad();
    const LossParts p = loss_.evaluate(image_.value(0), image_.grad(0));
    if (!std::isfinite(p.total))
      throw NumericsError(
          cifarnet::detail::concat("style transfer diverged at step ", step_, ": total loss = ", p.total));
    adam_->step(image_, opt_.learning_rate);
    ++step_;
    return p;
  }

  /// The losses at the current image (forward only).
  LossParts loss() { return loss_.evaluate(image_.value(0)); }

  /// The current image with the mean pixel added back (H x W x 3, not clipped).
  Image image() const {
    Image out(opt_.height, opt_.width, 3);
    const T* x = image_.value(0);
    for (std::size_t i = 0; i < out.data.size(); ++i)
      out.data[i] = float(double(x[i]) + opt_.mean_pixel[i % 3]);
    return out;
  }
  /// Σ of image() (the seed prints it as "Sum").
  double image_sum() const {
    const T* x = image_.value(0);
    double s = 0;
    for (std::size_t i = 0; i < image_size(); ++i) s += double(x[i]) + double(opt_.mean_pixel[i % 3]);
    return s;
  }

  /// Iterations done (TF's global_step).
  std::int64_t global_step() const { return step_; }
  const StyleTransferOptions& options() const { return opt_; }
  Parameters<T>& image_parameters() { return image_; }
  GatysLoss<M>& loss_function() { return loss_; }

  /// The image, the Adam slots and "global_step", by TF's names.
  StateDict state() {
    StateDict d;
    io::add_parameters(d, image_);
    io::add_state(d, *adam_);
    io::set_global_step(d, step_);
    d.metadata["style_transfer/height"] = std::to_string(opt_.height);
    d.metadata["style_transfer/width"] = std::to_string(opt_.width);
    return d;
  }
  /// Restores what state() saved; DataError/ShapeError naming the tensor
  /// when it does not fit (nothing is changed then).
  void load_state(const StateDict& d) {
    const auto step = io::global_step(d);
    if (!step) throw DataError(io::detail::source_of(d) + " has no global_step");
    if (*step < 0)
      throw DataError(cifarnet::detail::concat(io::detail::source_of(d), ": global_step ", *step, " < 0"));
    // Check the Adam slots before the image is overwritten.
    optim::Adam<T> probe(image_);
    io::load_state(probe, d);
    io::LoadOptions o;
    o.ignore_unexpected = true;  // the Adam slots and global_step, loaded apart
    io::load_parameters(image_, d, o);
    io::load_state(*adam_, d);
    step_ = *step;
  }

  /// Saves a checkpoint under the current global step; returns its path.
  std::string save(io::CheckpointManager& manager) { return manager.save(step_, state()); }
  /// Restores the newest readable checkpoint of `manager`; false when there is none.
  bool restore_latest(const io::CheckpointManager& manager, std::vector<std::string>* warnings = nullptr) {
    auto r = manager.restore_latest();
    if (!r) return false;
    load_state(r->dict);
    if (warnings) *warnings = r->warnings;
    return true;
  }

 private:
  std::size_t image_size() const { return opt_.height * opt_.width * 3; }
  std::vector<T> centred(const Image& img, const char* what) const {
    if (img.height != opt_.height || img.width != opt_.width || img.channels != 3 ||
        img.data.size() != image_size())
      throw ShapeError(cifarnet::detail::concat("style transfer: the ", what, " image is ", img.height, "x",
                                                img.width, "x", img.channels, ", expected ", opt_.height, "x",
                                                opt_.width, "x3 (fit it first)"));
    std::vector<T> out(image_size());
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = T(double(img.data[i]) - double(opt_.mean_pixel[i % 3]));
    return out;
  }

  GatysLoss<M> loss_;
  const StyleTransferOptions& opt_;
  Parameters<T> image_;
  std::optional<optim::Adam<T>> adam_;
  std::int64_t step_ = 0;
};

}  // namespace cifarnet::vision
