// cifarnet/backend/onednn/batch_norm.hpp — batch normalization on the oneDNN
// backend (float), per channel over (n, h, w), with separate scale (gamma)
// and shift (beta).
//
// Training forward and backward are the project's own kernels
// (onednn/bn_kernels.hpp): their per-channel sums are blocked, float blocks
// added into double totals, because oneDNN 2.6's primitives sum in float and
// lost two to three digits of the gradients at training size
// (docs/NUMERICS.md). The inference forward (no
// reduction) is oneDNN's batch_normalization_forward with use_global_stats,
// cached per (geometry, epsilon, relu).
//
// With relu = true the ReLU that follows is fused: forward writes
// max(bn(x), 0) and keeps bn's per-channel a, b (bn(x) = x a + b); backward
// takes the gradient of the ReLU's output (dy) and applies the ReLU's mask
// itself, recomputed from x, a and b in its passes (the forward's own test,
// so the same mask, without storing a byte per element), so a fused
// backward must follow the training forward of the same geometry.
//
// With BnActivation::Gelu the exact GELU follows in the same passes: the
// forward writes gelu(bn(x)) and keeps bn's per-channel a, b (bn(x) = x a +
// b); the backward recomputes bn(x) from x, a and b in the pass of its sums
// (no pre-activation tensor is stored). Inference computes a, b from the
// moving statistics and runs the same GELU kernel (oneDNN 2.6's batch norm
// has no GELU post-op).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cifarnet/backend/onednn/bn_kernels.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Batch normalization on the oneDNN backend (float): own training kernels
/// with blocked float/double sums, oneDNN inference primitives cached per
/// geometry.
template <class T>
struct BatchNorm<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(BatchNorm, T);
  using Dev = Device<backend::OneDnn>;
  /// forward_train / forward_infer / backward take `relu` (fused ReLU) or a
  /// BnActivation (ReLU or GELU).
  static constexpr bool fuses_relu = true;

  /// y = gamma (x - mean) / sqrt(var + eps) + beta with the batch statistics,
  /// which are returned in mean and var (biased variance).
  /// With `relu`, y = max(bn(x), 0) (fused).
  /// With `y_bf16`, y is also written there as bfloat16 bits in the same
  /// pass (the input of a bf16 convolution: Conv2d::set_bf16_input).
  CIFARNET_OUTLINE void forward_train(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                      const float* gamma, const float* beta, float* y, float* mean,
                                      float* var, bool relu = false, std::uint16_t* y_bf16 = nullptr) {
    train_forward(dev, g, eps, x, gamma, beta, y, mean, var, relu ? BnActivation::Relu : BnActivation::None,
                  static_cast<const float*>(nullptr), false, y_bf16);
  }
  /// The same with the activation `act` applied in the same pass (and the
  /// bf16 copy of its output with `y_bf16`; y null: that copy alone, where
  /// writes_bf16_only(g), the GELU's too).
  CIFARNET_OUTLINE void forward_train(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                      const float* gamma, const float* beta, float* y, float* mean,
                                      float* var, BnActivation act, std::uint16_t* y_bf16 = nullptr) {
    train_forward(dev, g, eps, x, gamma, beta, y, mean, var, act, static_cast<const float*>(nullptr), false,
                  y_bf16);
  }
  /// The training forward (no activation, or the fused ReLU) of x given as
  /// bfloat16 bits: the bf16 output of the convolution in front of it
  /// (ConvBatchNorm), widened exactly; the statistics and y as for float x
  /// holding the same values.
  CIFARNET_OUTLINE void forward_train(Dev& dev, const ChannelGeom& g, double eps, const std::uint16_t* x,
                                      const float* gamma, const float* beta, float* y, float* mean,
                                      float* var, bool relu, std::uint16_t* y_bf16 = nullptr) {
    train_forward(dev, g, eps, x, gamma, beta, y, mean, var, relu ? BnActivation::Relu : BnActivation::None,
                  static_cast<const float*>(nullptr), false, y_bf16);
  }
  /// The same with the activation `act` (the GELU: where writes_bf16_only(g);
  /// x then a max pool's bf16 output, pool_bf16_output_to_bn).
  CIFARNET_OUTLINE void forward_train(Dev& dev, const ChannelGeom& g, double eps, const std::uint16_t* x,
                                      const float* gamma, const float* beta, float* y, float* mean,
                                      float* var, BnActivation act, std::uint16_t* y_bf16 = nullptr) {
    train_forward(dev, g, eps, x, gamma, beta, y, mean, var, act, static_cast<const float*>(nullptr), false,
                  y_bf16);
  }

  /// Whether forward_train with a y_bf16 can leave y out (y == nullptr: the
  /// bf16 copy alone, for a next layer that reads nothing else; with or
  /// without the ReLU or GELU): NHWC at ResNet's and airbench's channel
  /// counts.
  CIFARNET_OUTLINE static bool writes_bf16_only(const ChannelGeom& g) {
    return backend::onednn::bn::bf16_only(g);
  }

  /// Whether a bf16 copy of y (y_bf16 above) can feed a bf16 convolution on
  /// this CPU (oneDNN has bf16 convolution kernels here).
  CIFARNET_OUTLINE static bool bf16_copies_useful() { return backend::onednn::cpu_has_bf16_convolutions(); }

  /// The training forward (no activation of its own; x float or bfloat16
  /// bits) with a residual branch added in the same pass: y = bn(x) + r,
  /// then max(., 0) with `relu` (NaN propagates, as Eltwise::add). The
  /// same float operations as forward_train and Eltwise::add after it; the
  /// backward is forward_train's without activation (the sum's ReLU mask is
  /// the caller's, from y).
  /// With `relu_mask` (where writes_sum_mask(g)), the ReLU's mask y > 0 is
  /// also written there as bits (host/mask_bits.hpp: one word per 16
  /// elements), for the backward's Eltwise::add_masked_bits.
  /// r is float or bfloat16 bits (widened exactly: a residual stream kept
  /// in bf16), and y may be null where y_bf16 is given and
  /// writes_bf16_only(g): the sum then goes out as its bf16 copy alone
  /// (and the mask).
  template <class X, class R>
  CIFARNET_OUTLINE void forward_train_sum(Dev& dev, const ChannelGeom& g, double eps, const X* x,
                                          const float* gamma, const float* beta, const R* r, bool relu,
                                          float* y, float* mean, float* var, std::uint16_t* y_bf16 = nullptr,
                                          std::uint16_t* relu_mask = nullptr) {
    static_assert(std::is_same_v<X, float> || std::is_same_v<X, std::uint16_t>,
                  "BatchNorm::forward_train_sum: x is float or bfloat16 bits (std::uint16_t)");
    static_assert(std::is_same_v<R, float> || std::is_same_v<R, std::uint16_t>,
                  "BatchNorm::forward_train_sum: r is float or bfloat16 bits (std::uint16_t)");
    static constexpr const char* op = "BatchNorm forward_train (with a sum)";
    backend::onednn::require(op, {{r, "r"}});
    if (relu_mask && (!relu || !writes_sum_mask(g)))
      throw ConfigError(detail::concat(op,
                                       ": a ReLU mask as bits needs the sum's ReLU and NHWC with 16, 32, 64 ",
                                       "or 256 channels (", backend::onednn::describe(g), ")"));
    train_forward(dev, g, eps, x, gamma, beta, y, mean, var, BnActivation::None, r, relu, y_bf16, relu_mask);
  }
  /// Whether forward_train_sum can write the sum's ReLU mask as bits.
  CIFARNET_OUTLINE static bool writes_sum_mask(const ChannelGeom& g) {
    return backend::onednn::bn::sum_mask(g);
  }

  /// y = gamma (x - mean) / sqrt(var + eps) + beta with the given statistics.
  /// With `relu`, y = max(bn(x), 0) (fused).
  CIFARNET_OUTLINE void forward_infer(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                      const float* gamma, const float* beta, const float* mean,
                                      const float* var, float* y, bool relu = false) {
    forward_infer(dev, g, eps, x, gamma, beta, mean, var, y, relu ? BnActivation::Relu : BnActivation::None);
  }
  /// The same with the activation `act` applied in the same pass.
  CIFARNET_OUTLINE void forward_infer(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                      const float* gamma, const float* beta, const float* mean,
                                      const float* var, float* y, BnActivation act) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm forward_infer";
    on::check_geometry(g, op);
    on::require(op, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {mean, "mean"}, {var, "var"}, {y, "y"}});
    if (act == BnActivation::Gelu) {  // a, b as the training forward forms them, then the GELU kernel
      infer_ab_.resize(2 * g.c);
      float *a = infer_ab_.data(), *b = a + g.c;
      for (std::size_t c = 0; c < g.c; ++c)
        backend::onednn::bn::scale_shift(double(gamma[c]), double(beta[c]), double(mean[c]), double(var[c]),
                                         eps, a[c], b[c]);
      backend::onednn::bn::affine_gelu(g, x, a, b, y);
      return;
    }
    const bool relu = act == BnActivation::Relu;
    on::guarded(op, [&] {
      State& s = state(dev, g, eps, relu);
      dnnl::primitive& p = s.infer(cache_, dev.engine);
      p.execute(dev.stream, {{DNNL_ARG_SRC, on::bind(s.x, x)},
                             {DNNL_ARG_SCALE, on::bind(s.gamma, gamma)},
                             {DNNL_ARG_SHIFT, on::bind(s.beta, beta)},
                             {DNNL_ARG_MEAN, on::bind(s.mean, mean)},
                             {DNNL_ARG_VARIANCE, on::bind(s.var, var)},
                             {DNNL_ARG_DST, on::bind(s.y, y)}});
      dev.stream.wait();
    });
  }

  /// dx, dgamma, dbeta of the training-mode forward, given the statistics it
  /// returned (all three overwritten). With `relu`, dy is the gradient of
  /// the fused ReLU's output and the last forward_train(relu = true) of this
  /// geometry supplies the a, b its mask is recomputed from.
  CIFARNET_OUTLINE void backward(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* dy,
                                 const float* gamma, const float* mean, const float* var, float* dx,
                                 float* dgamma, float* dbeta, bool relu = false) {
    backward(dev, g, eps, x, dy, gamma, mean, var, dx, dgamma, dbeta,
             relu ? BnActivation::Relu : BnActivation::None);
  }
  /// The same for a forward with the activation `act`: dy is the gradient of
  /// act's output, and the last forward_train of this geometry must have
  /// used the same act (its a, b are used here).
  CIFARNET_OUTLINE void backward(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* dy,
                                 const float* gamma, const float* mean, const float* var, float* dx,
                                 float* dgamma, float* dbeta, BnActivation act) {
    backend::onednn::require("BatchNorm backward", {{dx, "dx"}});
    run_backward(dev, g, eps, x, dy, gamma, mean, var, dx, nullptr, dgamma, dbeta, act);
  }
  /// backward() (no activation, or the fused ReLU) of a forward_train whose
  /// x was bfloat16 bits (the same bits here).
  CIFARNET_OUTLINE void backward(Dev& dev, const ChannelGeom& g, double eps, const std::uint16_t* x,
                                 const float* dy, const float* gamma, const float* mean, const float* var,
                                 float* dx, float* dgamma, float* dbeta, bool relu) {
    backward(dev, g, eps, x, dy, gamma, mean, var, dx, dgamma, dbeta,
             relu ? BnActivation::Relu : BnActivation::None);
  }
  /// The same with the activation `act` (the GELU: where
  /// writes_bf16_only(g)).
  CIFARNET_OUTLINE void backward(Dev& dev, const ChannelGeom& g, double eps, const std::uint16_t* x,
                                 const float* dy, const float* gamma, const float* mean, const float* var,
                                 float* dx, float* dgamma, float* dbeta, BnActivation act) {
    backend::onednn::require("BatchNorm backward", {{dx, "dx"}});
    run_backward(dev, g, eps, x, dy, gamma, mean, var, dx, nullptr, dgamma, dbeta, act);
  }
  /// backward() (no activation, or the fused ReLU; x float or bfloat16
  /// bits, as its forward_train had it) with dx written as bfloat16 bits into
  /// dx_bf16 (host::store_bf16's rounding) instead of a float tensor: the
  /// output gradient of the bf16 convolution in front of this batch norm,
  /// handed over without a float copy (ops::Conv2d::bf16_dy). dy may be
  /// bfloat16 bits too (where writes_bf16_only(g)): the input gradient of
  /// the bf16 convolution after this batch norm, as that convolution wrote
  /// it (ops::Conv2d::backward_bf16_dy with a bf16 dx).
  template <class X, class DY>
  CIFARNET_OUTLINE void backward_bf16(Dev& dev, const ChannelGeom& g, double eps, const X* x, const DY* dy,
                                      const float* gamma, const float* mean, const float* var,
                                      std::uint16_t* dx_bf16, float* dgamma, float* dbeta, bool relu) {
    static_assert(std::is_same_v<X, float> || std::is_same_v<X, std::uint16_t>,
                  "BatchNorm::backward_bf16: x is float or bfloat16 bits (std::uint16_t)");
    static_assert(std::is_same_v<DY, float> || std::is_same_v<DY, std::uint16_t>,
                  "BatchNorm::backward_bf16: dy is float or bfloat16 bits (std::uint16_t)");
    if (std::is_same_v<DY, std::uint16_t> && !writes_bf16_only(g))
      throw ConfigError(
          detail::concat("BatchNorm backward (bf16 dy): NHWC with 16, 32, 64 or 256 channels "
                         "only (",
                         backend::onednn::describe(g), ")"));
    backend::onednn::require("BatchNorm backward (bf16 dx)", {{dx_bf16, "dx_bf16"}});
    run_backward(dev, g, eps, x, dy, gamma, mean, var, nullptr, dx_bf16, dgamma, dbeta,
                 relu ? BnActivation::Relu : BnActivation::None);
  }

  /// backward() (no activation, or the fused ReLU; x float or bfloat16
  /// bits, as its forward_train had it) with dy given as bfloat16 bits
  /// (where writes_bf16_only(g)) and dx written as float: a batch norm whose
  /// dy a bf16 gradient sum wrote as bits, in front of a float convolution
  /// backward (ResNet's stem, whose 3 input channels keep its weight
  /// gradient float).
  template <class X>
  CIFARNET_OUTLINE void backward_bits_dy(Dev& dev, const ChannelGeom& g, double eps, const X* x,
                                         const std::uint16_t* dy, const float* gamma, const float* mean,
                                         const float* var, float* dx, float* dgamma, float* dbeta,
                                         bool relu) {
    static_assert(std::is_same_v<X, float> || std::is_same_v<X, std::uint16_t>,
                  "BatchNorm::backward_bits_dy: x is float or bfloat16 bits (std::uint16_t)");
    if (!writes_bf16_only(g))
      throw ConfigError(detail::concat(
          "BatchNorm backward (bf16 dy, float dx): NHWC with 16, 32, 64 or 256 channels only (",
          backend::onednn::describe(g), ")"));
    backend::onednn::require("BatchNorm backward (bf16 dy)", {{dx, "dx"}});
    run_backward(dev, g, eps, x, dy, gamma, mean, var, dx, nullptr, dgamma, dbeta,
                 relu ? BnActivation::Relu : BnActivation::None);
  }

  /// backward() with the fused GELU (float dy; x float, or bfloat16 bits
  /// where writes_bf16_only(g), as its forward_train had it) and dx written
  /// as bfloat16 bits into dx_bf16 (host::store_bf16's rounding): the output
  /// gradient of the bf16 convolution in front of this batch norm
  /// (bn_bf16_dx_to_standalone_conv). `u` (g.size() floats) receives
  /// dy gelu'(z) in the pass of the sums, read by the pass of dx.
  template <class X>
  CIFARNET_OUTLINE void backward_bf16_gelu(Dev& dev, const ChannelGeom& g, double eps, const X* x,
                                           const float* dy, const float* gamma, const float* mean,
                                           const float* var, float* u, std::uint16_t* dx_bf16, float* dgamma,
                                           float* dbeta) {
    backend::onednn::require("BatchNorm backward (GELU, bf16 dx)", {{u, "u"}, {dx_bf16, "dx_bf16"}});
    run_backward(dev, g, eps, x, dy, gamma, mean, var, u, dx_bf16, dgamma, dbeta, BnActivation::Gelu);
  }

  /// backward() (no activation, or the fused ReLU; float x and dy) in two
  /// parts: backward_sums (the pass of the sums: dgamma, dbeta and the
  /// coefficients of dx), then backward_images for ranges of images, each
  /// writing those images' dx into a caller's buffer: a range of dx handed
  /// to the convolution's backward while it is in cache (ConvBatchNorm).
  /// The same operations as backward(), so the same bits.
  CIFARNET_OUTLINE void backward_sums(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                      const float* dy, const float* gamma, const float* mean,
                                      const float* var, float* dgamma, float* dbeta, bool relu) {
    namespace on = backend::onednn;
    (void)dev;
    check_backward("BatchNorm backward_sums", g, x, dy, gamma, mean, var, dgamma, dbeta,
                   relu ? BnActivation::Relu : BnActivation::None);
    on::bn::backward_sums(g, eps, x, dy, gamma, mean, var, dgamma, dbeta, relu ? relu_ab_.data() : nullptr,
                          scratch_);
    sums_of_ = {x, dy, g, relu};
  }
  /// backward_sums with the sums taken by the convolution that read this
  /// batch norm's output, in its own kernels' epilogue (bn::GradEpilogue,
  /// over this x, dy and mean: 2 g.c values): the same state after it.
  CIFARNET_OUTLINE void backward_sums_given(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                            const float* dy, const float* gamma, const float* mean,
                                            const float* var, float* dgamma, float* dbeta, bool relu,
                                            const double* sums) {
    namespace on = backend::onednn;
    (void)dev;
    check_backward("BatchNorm backward_sums_given", g, x, dy, gamma, mean, var, dgamma, dbeta,
                   relu ? BnActivation::Relu : BnActivation::None);
    on::require("BatchNorm backward_sums_given", {{sums, "sums"}});
    on::bn::backward_sums_given(g, eps, sums, gamma, var, dgamma, dbeta, scratch_);
    sums_of_ = {x, dy, g, relu};
  }
  /// The batch statistics of x (2 n: the means, then the biased variances,
  /// in double; n channels), taken by the convolution that wrote x in its
  /// own kernels' epilogue (ops::Conv2d::forward_stats): the next training
  /// forward of this x, if it has n channels, uses them instead of its own
  /// pass over x for them; any training forward forgets them. The buffer
  /// must hold them until then.
  CIFARNET_OUTLINE void give_statistics(const float* x, std::size_t n, const double* stats) {
    given_ = {x, n, stats};
  }
  /// A training forward with the fused ReLU whose output is not written
  /// (ConvBatchNorm's deferred output): the statistics (those given, or a
  /// pass over x), then the coefficients alone, which norm_map() hands to
  /// the convolution that computes each image of y in its own kernels'
  /// prologue. The backward is forward_train's.
  CIFARNET_OUTLINE void forward_train_deferred(Dev& dev, const ChannelGeom& g, double eps, const float* x,
                                               const float* gamma, const float* beta, float* mean,
                                               float* var) {
    train_deferred(dev, g, eps, x, gamma, beta, mean, var, "BatchNorm forward_train_deferred");
  }
  /// forward_train_deferred of x given as bfloat16 bits (the bf16 output
  /// of the convolution in front of it), whose output the next convolution
  /// computes from the bits and the coefficients (ops::Conv2d::
  /// forward_bf16_mapped); the statistics as forward_train's of those bits.
  CIFARNET_OUTLINE void forward_train_deferred(Dev& dev, const ChannelGeom& g, double eps,
                                               const std::uint16_t* x, const float* gamma, const float* beta,
                                               float* mean, float* var) {
    train_deferred(dev, g, eps, x, gamma, beta, mean, var, "BatchNorm forward_train_deferred (bf16 x)");
  }
  /// The map of forward_train_deferred's output y of x (ops::BnNormMap),
  /// valid until this op's next training forward.
  CIFARNET_OUTLINE ops::BnNormMap<float> norm_map(const ChannelGeom& g, const float* x) const {
    const float* ab = relu_coefficients(g);
    if (!ab)
      throw ConfigError(detail::concat("BatchNorm norm_map: no training forward with the fused ReLU of ",
                                       backend::onednn::describe(g)));
    return {x, ab, ab + g.c, true};
  }
  /// backward_sums' two sums over g's images of dy (at those images, as x),
  /// with relu_ab (a then b, or null) for the ReLU's mask and `mean` as the
  /// shift, added into `sums` (2 g.c): a range of an earlier batch norm's
  /// dy at a time, while it is in cache (ConvBatchNorm's ranges, plan::BnSums),
  /// its sums then given (backward_sums_given). Blocked float sums into
  /// double as backward_sums; the ranges' totals added in range order.
  CIFARNET_OUTLINE void add_backward_sums(Dev& dev, const ChannelGeom& g, const float* x, const float* dy,
                                          const float* relu_ab, const float* mean, double* sums) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm add_backward_sums";
    on::check_geometry(g, op);
    on::require(op, {{x, "x"}, {dy, "dy"}, {mean, "mean"}, {sums, "sums"}});
    (void)dev;  // range_scratch_ only: a backward's state in scratch_ stays as it is
    on::bn::with_channels(g, [&](auto cc) {
      on::bn::channel_sums<on::bn::SumKind::Grad, decltype(cc)::value, float, float>(g, x, dy, relu_ab, mean,
                                                                                     range_scratch_);
    });
    for (std::size_t j = 0; j < 2 * g.c; ++j) sums[j] += range_scratch_.sums[j];
  }
  /// The fused ReLU's a then b (2 g.c) of the last training forward of
  /// geometry `g` with the ReLU, or null: what a GradEpilogue recomputes the
  /// ReLU's mask from.
  CIFARNET_OUTLINE const float* relu_coefficients(const ChannelGeom& g) const {
    return act_ == BnActivation::Relu && act_geom_ && *act_geom_ == g && relu_ab_.size() == 2 * g.c
               ? relu_ab_.data()
               : nullptr;
  }
  /// dx of images [i0, i1) into `dx_images` (their size), after
  /// backward_sums of the same x, dy, geometry and activation.
  CIFARNET_OUTLINE void backward_images(Dev& dev, const ChannelGeom& g, const float* x, const float* dy,
                                        const float* mean, std::size_t i0, std::size_t i1, float* dx_images,
                                        bool relu) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm backward_images";
    on::require(op, {{dx_images, "dx_images"}, {mean, "mean"}});
    (void)dev;
    if (!sums_of_.g || sums_of_.x != x || sums_of_.dy != dy || *sums_of_.g != g || sums_of_.relu != relu ||
        i1 <= i0 || i1 > g.n)
      throw ConfigError(
          detail::concat(op, ": images [", i0, ", ", i1, ") of a backward whose sums were not ",
                         "taken first (backward_sums of this x, dy and geometry: ", on::describe(g), ")"));
    on::bn::input_gradient_images(g, x, dy, relu ? relu_ab_.data() : nullptr, mean, scratch_, i0, i1,
                                  dx_images);
  }

  /// backward_images' map after backward_sums of the same x, dy, geometry
  /// and activation: dx = A dyr + B (x - mean) + D per channel, for a
  /// convolution that applies it to an image at a time in its own kernels'
  /// prologue (ops::Conv2d::backward_images_bn). Valid until the next
  /// backward or training forward of this op.
  CIFARNET_OUTLINE backend::onednn::bn::GradMap grad_map(Dev& dev, const ChannelGeom& g, const float* x,
                                                         const float* dy, const float* mean,
                                                         bool relu) const {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm grad_map";
    on::require(op, {{mean, "mean"}});
    (void)dev;
    if (!sums_of_.g || sums_of_.x != x || sums_of_.dy != dy || *sums_of_.g != g || sums_of_.relu != relu)
      throw ConfigError(detail::concat(op, ": the map of a backward whose sums were not taken first ",
                                       "(backward_sums of this x, dy and geometry: ", on::describe(g), ")"));
    const float* A = scratch_.coef.data();
    return {x, dy, relu ? relu_ab_.data() : nullptr, mean, A, A + g.c, A + 2 * g.c};
  }

  /// dy = a + b (where the mask bit is set; `mask` null: everywhere) as
  /// bfloat16 bits, a and b float or bits: two parts of this batch norm's
  /// output gradient (a residual block's backward sum through its ReLU's
  /// mask bits, or the gradients of the output's several readers), summed
  /// in one pass that also takes this batch norm's backward sums over those
  /// bits (x float or bits as its training forward had it, its fused ReLU
  /// with `relu`, `mean` its batch mean). The next backward of this
  /// geometry and activation with dy at that address, as bits, uses them
  /// instead of its own pass over x and dy (the same bits,
  /// bn::sum_into_dy_with_sums); any other backward or training forward
  /// forgets them. NHWC at 16, 32, 64 or 256 channels (writes_bf16_only).
  template <class A, class Bv, class X>
  CIFARNET_OUTLINE void sum_into_dy(Dev& dev, const ChannelGeom& g, const A* a, const Bv* b,
                                    const std::uint16_t* mask, std::uint16_t* dy, const X* x,
                                    const float* mean, bool relu) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm sum_into_dy";
    (void)dev;
    on::check_geometry(g, op);
    if (!writes_bf16_only(g))
      throw ConfigError(
          detail::concat(op, ": NHWC with 16, 32, 64 or 256 channels only (", on::describe(g), ")"));
    on::require(op, {{a, "a"}, {b, "b"}, {dy, "dy"}, {x, "x"}, {mean, "mean"}});
    const BnActivation act = relu ? BnActivation::Relu : BnActivation::None;
    check_activation(g, act, op);
    dy_sums_.dy = nullptr;
    on::bn::with_channels(g, [&](auto cc) {
      if constexpr (decltype(cc)::value != 0)
        on::bn::sum_into_dy_with_sums<decltype(cc)::value>(
            g, a, b, mask, dy, x, relu ? relu_ab_.data() : nullptr, mean, dy_sums_.scratch);
    });
    dy_sums_.dy = dy;
    dy_sums_.x = x;
    dy_sums_.g = g;
    dy_sums_.act = act;
  }
  /// Whether backward_into_weight_gradient takes `g` with a convolution of
  /// `cin` input channels in front (bn::wgrad_in_input_gradient: AVX-512,
  /// NHWC, 16 channels, 1 to 4 input channels, width up to 512).
  static bool weight_gradient_in_backward(const ChannelGeom& g, std::size_t cin) {
    return backend::onednn::bn::wgrad_in_input_gradient(g, cin);
  }
  /// backward() (no activation, or the fused ReLU; x float or bits as its
  /// training forward had it; dy float or bits) with dx not stored: it is
  /// the output gradient of the 3x3 stride-1 padding-1 convolution in front
  /// of this batch norm, whose weight gradient `dw` (HWIO, cin x 16, float)
  /// this computes in the pass of dx from that convolution's float NHWC
  /// input `conv_x` (bn::input_gradient_into_weight_gradient; where
  /// weight_gradient_in_backward(g, cin)). sum_into_dy's sums are used as
  /// backward's are.
  template <class X, class DY>
  CIFARNET_OUTLINE void backward_into_weight_gradient(Dev& dev, const ChannelGeom& g, double eps, const X* x,
                                                      const DY* dy, const float* gamma, const float* mean,
                                                      const float* var, float* dgamma, float* dbeta,
                                                      bool relu, const float* conv_x, std::size_t cin,
                                                      float* dw) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm backward_into_weight_gradient";
    (void)dev;
    const BnActivation act = relu ? BnActivation::Relu : BnActivation::None;
    check_backward(op, g, x, dy, gamma, mean, var, dgamma, dbeta, act);
    on::require(op, {{conv_x, "conv_x"}, {dw, "dw"}});
    if (!weight_gradient_in_backward(g, cin))
      throw ConfigError(detail::concat(op,
                                       ": NHWC, 16 channels, 1 to 4 input channels, a width up to 512, on "
                                       "a CPU build with AVX-512 (",
                                       on::describe(g), ", ", cin, " input channels)"));
    sums_of_.g.reset();
    const double* given = take_dy_sums(g, x, dy, act);
#if defined(__AVX512F__)
    on::bn::backward_into_weight_gradient(g, eps, x, dy, gamma, mean, var, dgamma, dbeta,
                                          relu ? relu_ab_.data() : nullptr, scratch_, conv_x, cin, dw, given);
#else
    (void)given;
#endif
  }

  /// Backward passes that used the sums of sum_into_dy (tests, and the
  /// layer's check that what it was given was used).
  CIFARNET_OUTLINE std::size_t dy_sums_used() const { return dy_sums_used_; }

  /// Training forwards that used statistics given (give_statistics; tests).
  CIFARNET_OUTLINE std::size_t statistics_given() const { return statistics_given_; }
  /// Geometries whose primitives are cached now.
  CIFARNET_OUTLINE std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives built so far.
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  template <class X, class R = float>
  void train_forward(Dev& dev, const ChannelGeom& g, double eps, const X* x, const float* gamma,
                     const float* beta, float* y, float* mean, float* var, BnActivation act,
                     const R* sum = nullptr, bool sum_relu = false, std::uint16_t* y_bf16 = nullptr,
                     std::uint16_t* sum_mask = nullptr) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm forward_train";
    on::check_geometry(g, op);
    if (!std::is_same_v<X, float> && act == BnActivation::Gelu && !writes_bf16_only(g))
      throw ConfigError(detail::concat(op,
                                       ": the fused GELU takes bf16 x only in NHWC at 16, 32, 64 or 256 "
                                       "channels (",
                                       on::describe(g), ")"));
    on::require(op, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {mean, "mean"}, {var, "var"}});
    if (!y && !(y_bf16 && writes_bf16_only(g)))
      throw ConfigError(detail::concat(op,
                                       ": y is null, and only a bf16 copy of an NHWC output of 16, 32, 64 "
                                       "or 256 channels may stand alone (",
                                       on::describe(g), ")"));
    (void)dev;
    float* m = nullptr;
    float* ab = nullptr;
    if (act == BnActivation::Relu) {
      relu_ab_.resize(2 * g.c);
      m = relu_ab_.data();
    } else if (act == BnActivation::Gelu) {
      gelu_ab_.resize(2 * g.c);
      ab = gelu_ab_.data();
    }
    act_geom_ = g;
    act_ = act;
    sums_of_.g.reset();  // the coefficients in scratch_ are overwritten
    dy_sums_.dy = nullptr;
    const double* stats = take_given(g, x);
    backend::onednn::bn::forward_train(g, eps, x, gamma, beta, y, mean, var, m, scratch_, ab, sum, sum_relu,
                                       y_bf16, sum_mask, stats);
  }

  // forward_train_deferred for float or bf16 x.
  template <class X>
  void train_deferred(Dev& dev, const ChannelGeom& g, double eps, const X* x, const float* gamma,
                      const float* beta, float* mean, float* var, const char* op) {
    namespace on = backend::onednn;
    on::check_geometry(g, op);
    on::require(op, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {mean, "mean"}, {var, "var"}});
    (void)dev;
    relu_ab_.resize(2 * g.c);
    act_geom_ = g;
    act_ = BnActivation::Relu;
    sums_of_.g.reset();
    dy_sums_.dy = nullptr;
    const double* stats = take_given(g, x);
    on::bn::forward_train<X, float>(g, eps, x, gamma, beta, nullptr, mean, var, relu_ab_.data(), scratch_,
                                    nullptr, nullptr, false, nullptr, nullptr, stats, true);
  }

  // backward: dx as float (dx) or as bfloat16 bits (dx_bf16; not with the
  // GELU, which keeps its u = dy gelu'(z) in dx); x float, or bfloat16 bits
  // without the GELU.
  template <class X, class DY>
  void run_backward(Dev& dev, const ChannelGeom& g, double eps, const X* x, const DY* dy, const float* gamma,
                    const float* mean, const float* var, float* dx, std::uint16_t* dx_bf16, float* dgamma,
                    float* dbeta, BnActivation act) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm backward";
    (void)dev;
    check_backward(op, g, x, dy, gamma, mean, var, dgamma, dbeta, act);
    if (act == BnActivation::Gelu &&
        (!dx || !std::is_same_v<DY, float> || (!std::is_same_v<X, float> && !writes_bf16_only(g))))
      throw ConfigError(detail::concat(op,
                                       ": the fused GELU takes float dy and a float dx, and x as bf16 bits "
                                       "only in NHWC at 16, 32, 64 or 256 channels (",
                                       on::describe(g), ")"));
    sums_of_.g.reset();
    const double* given = take_dy_sums(g, x, dy, act);
    backend::onednn::bn::backward(g, eps, x, dy, gamma, mean, var, dx, dgamma, dbeta,
                                  act == BnActivation::Relu ? relu_ab_.data() : nullptr, scratch_,
                                  act == BnActivation::Gelu ? gelu_ab_.data() : nullptr, dx_bf16, given);
  }

  // sum_into_dy's sums, for a backward of this dy (bits) only, once: the
  // sums, or null (forgotten either way).
  template <class X, class DY>
  const double* take_dy_sums(const ChannelGeom& g, const X* x, const DY* dy, BnActivation act) {
    const bool given = std::is_same_v<DY, std::uint16_t> && dy_sums_.dy != nullptr &&
                       static_cast<const void*>(dy_sums_.dy) == static_cast<const void*>(dy) &&
                       dy_sums_.x == static_cast<const void*>(x) && dy_sums_.g == g && dy_sums_.act == act &&
                       act != BnActivation::Gelu;
    dy_sums_.dy = nullptr;
    dy_sums_used_ += given;
    return given ? dy_sums_.scratch.sums.data() : nullptr;
  }

  // A backward's geometry, operands and activation (check_activation).
  template <class X, class DY>
  void check_backward(const char* op, const ChannelGeom& g, const X* x, const DY* dy, const float* gamma,
                      const float* mean, const float* var, const float* dgamma, const float* dbeta,
                      BnActivation act) const {
    namespace on = backend::onednn;
    on::check_geometry(g, op);
    on::require(op, {{x, "x"},
                     {dy, "dy"},
                     {gamma, "gamma"},
                     {mean, "mean"},
                     {var, "var"},
                     {dgamma, "dgamma"},
                     {dbeta, "dbeta"}});
    check_activation(g, act, op);
  }

  // A fused activation's backward needs the training forward that used it
  // on this geometry (its a and b).
  CIFARNET_OUTLINE void check_activation(const ChannelGeom& g, BnActivation act, const char* op) const {
    if (act != BnActivation::None && (!act_geom_ || *act_geom_ != g || act_ != act))
      throw ConfigError(detail::concat(op, ": fused ", act == BnActivation::Relu ? "ReLU" : "GELU",
                                       " backward without a training forward with it (",
                                       backend::onednn::describe(g), ")"));
  }
  struct State;
  using Key = std::tuple<decltype(ChannelGeom{}.key()), double, bool>;
  using Cache = backend::onednn::PrimitiveCache<Key, State>;

  struct State {
    dnnl::memory::desc data, stat;
    float eps;
    bool relu;  // fuse_norm_relu
    dnnl::memory x, y, gamma, beta, mean, var;
    std::optional<dnnl::primitive> infer_p;

    CIFARNET_OUTLINE State(const ChannelGeom& g, double epsilon, bool fuse_relu, const dnnl::engine& eng)
        : eps(float(epsilon)), relu(fuse_relu) {
      namespace on = backend::onednn;
      data = on::act_desc(g.fmt, g.n, g.c, g.h, g.w);
      stat = on::vec_desc(g.c);
      x = on::user_memory(data, eng);
      y = on::user_memory(data, eng);
      for (dnnl::memory* m : {&gamma, &beta, &mean, &var}) *m = on::user_memory(stat, eng);
    }

    CIFARNET_OUTLINE dnnl::primitive& infer(Cache& c, const dnnl::engine& eng) {
      if (!infer_p) {
        using bf = dnnl::batch_normalization_forward;
        auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift |
                     dnnl::normalization_flags::use_global_stats;
        if (relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
        bf::primitive_desc pd(bf::desc(dnnl::prop_kind::forward_inference, data, eps, flags), eng);
        infer_p = c.template build<bf>(pd);
      }
      return *infer_p;
    }
  };

  CIFARNET_OUTLINE State& state(Dev& dev, const ChannelGeom& g, double eps, bool relu) {
    return cache_.get(dev.engine, Key{g.key(), eps, relu}, [&] { return State(g, eps, relu, dev.engine); });
  }

  Cache cache_;
  std::vector<float> relu_ab_;                  // the fused ReLU's a, b (2C) of the last training forward
  std::vector<float> gelu_ab_;                  // the fused GELU's a, b (2C) of the last training forward
  std::vector<float> infer_ab_;                 // the same for inference, from the moving statistics
  std::optional<ChannelGeom> act_geom_;         // the last training forward's geometry
  BnActivation act_ = BnActivation::None;       // and its activation
  backend::onednn::bn::Scratch scratch_;        // the kernels' buffers, kept between calls
  backend::onednn::bn::Scratch range_scratch_;  // add_backward_sums' (scratch_ keeps a backward's state)
  // The statistics given for x (give_statistics), or null; forgotten either way.
  CIFARNET_OUTLINE const double* take_given(const ChannelGeom& g, const void* x) {
    const Given given = std::exchange(given_, Given{});
    const double* stats = given.x != nullptr && given.x == x && given.c == g.c ? given.stats : nullptr;
    statistics_given_ += stats != nullptr;
    return stats;
  }
  struct Given {  // give_statistics, for the next training forward
    const void* x = nullptr;
    std::size_t c = 0;
    const double* stats = nullptr;
  } given_;
  std::size_t statistics_given_ = 0;
  struct DySums {  // sum_into_dy's: the dy it wrote and the sums over it
    const std::uint16_t* dy = nullptr;
    const void* x = nullptr;
    ChannelGeom g;
    BnActivation act = BnActivation::None;
    backend::onednn::bn::Scratch scratch;
  } dy_sums_;
  std::size_t dy_sums_used_ = 0;
  struct SumsOf {  // what the last backward_sums summed
    const float* x = nullptr;
    const float* dy = nullptr;
    std::optional<ChannelGeom> g;
    bool relu = false;
  } sums_of_;
};

}  // namespace ops
}  // namespace cifarnet
