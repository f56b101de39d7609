// The forward and backward passes of Conv2d, Pool2d, Lrn and BatchNorm
// against TensorFlow's own outputs (tests/fixtures/tf/ops.safetensors, made
// by scripts/tf_goldens/make_tf_goldens.py with TF's Eigen CPU kernels),
// on the reference backend (float and double) and on oneDNN, in NHWC (TF's
// layout) and NCHW (the inputs transposed, the outputs transposed back).
// docs/TF_SEMANTICS.md lists what each case checks.
//
// Tolerances (tf_golden.hpp's per-element relative error): max pooling's
// forward is exact (a max picks an input); every other float output within
// 1e-5 (max pooling's backward too: where windows overlap, an input's
// gradient is a sum of routed dy values, added in an order of the kernel's).
#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>

#include "tf_golden.hpp"

using namespace cifarnet;
using namespace cifarnet::test;

namespace {

constexpr double kFloatTol = 1e-5;

const TfGoldens& goldens() {
  static const TfGoldens g("ops.safetensors");
  return g;
}

/// Backend B computing in scalar T: its device and a name for messages.
template <class B, class T>
struct Side {
  using Backend = B;
  using Scalar = T;
};

template <class T>
std::string side_name() {
  if constexpr (std::is_same_v<typename T::Backend, backend::OneDnn>) return "oneDNN float";
  if constexpr (std::is_same_v<typename T::Scalar, double>) return "reference double";
  return "reference float";
}

/// Calls f(nhwc, in_fmt): each element's index in NHWC (TF's layout) and in
/// the format's layout.
template <class F>
void each_index(const Shape& s, DataFormat fmt, F&& f) {
  for (std::size_t n = 0; n < s.n; ++n)
    for (std::size_t y = 0; y < s.h; ++y)
      for (std::size_t x = 0; x < s.w; ++x)
        for (std::size_t c = 0; c < s.c; ++c) {
          const std::size_t nhwc = ((n * s.h + y) * s.w + x) * s.c + c;
          f(nhwc, fmt == DataFormat::NHWC ? nhwc : ((n * s.c + c) * s.h + y) * s.w + x);
        }
}

/// NHWC values -> the format's layout, as T.
template <class T>
std::vector<T> to_format(const std::vector<float>& nhwc, const Shape& s, DataFormat fmt) {
  std::vector<T> out(nhwc.size());
  each_index(s, fmt, [&](std::size_t i, std::size_t j) { out[j] = T(nhwc[i]); });
  return out;
}

/// The format's layout -> NHWC, as double.
template <class T>
std::vector<double> to_nhwc(const std::vector<T>& v, const Shape& s, DataFormat fmt) {
  std::vector<double> out(v.size());
  each_index(s, fmt, [&](std::size_t i, std::size_t j) { out[i] = double(v[j]); });
  return out;
}

template <class T>
std::vector<T> cast(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}
template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

/// Output buffers start as NaN, so anything an op leaves unwritten fails.
template <class T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

/// The NHWC shape of a golden tensor as a Shape {n, c, h, w}.
Shape nhwc_shape(const std::string& tensor) {
  const auto& s = goldens().shape(tensor);
  if (s.size() != 4) throw Error(goldens().path() + ": tensor '" + tensor + "' is not 4-D");
  return {s[0], s[3], s[1], s[2]};
}

/// The cases of `op`; at least `min` of them, so an emptied fixture fails.
std::vector<std::string> cases_of(const std::string& op, std::size_t min) {
  auto c = goldens().cases(op);
  INFO(goldens().path() << " (TensorFlow " << goldens().tf_version() << "): cases of " << op);
  REQUIRE(c.size() >= min);
  return c;
}

const DataFormat kFormats[] = {DataFormat::NHWC, DataFormat::NCHW};

/// "<side>, <format>, case <name> <parameters>", for messages.
template <class S>
std::string describe(const std::string& name, DataFormat fmt) {
  return side_name<S>() + ", " + to_string(fmt) + ", case " + name + " " + goldens().params(name).dump();
}

}  // namespace

#define GOLDEN_SIDES \
  (Side<backend::Reference, float>), (Side<backend::Reference, double>), (Side<backend::OneDnn, float>)

TEMPLATE_TEST_CASE("Conv2d SAME (strides 1 and 2, even and odd sizes) and Explicit match TensorFlow",
                   "[backend][tf_golden][conv]", GOLDEN_SIDES) {
  using B = typename TestType::Backend;
  using T = typename TestType::Scalar;
  Device<B> dev;
  ops::Conv2d<B, T> op;
  for (const std::string& name : cases_of("conv2d", 8))
    for (DataFormat fmt : kFormats) {
      const auto& p = goldens().params(name);
      INFO(describe<TestType>(name, fmt));
      const Shape xs = nhwc_shape(name + "/x"), ys = nhwc_shape(name + "/y");
      const std::size_t k = p.at("kernel"), s = p.at("stride");
      const Padding pad = p.at("padding") == "SAME" ? Padding::Same : Padding::Explicit;
      const ConvGeom g = ConvGeom::make(fmt, xs, ys.c, k, s, pad);
      REQUIRE(g.out_shape() == ys);  // TF's output size is ours
      const auto x = to_format<T>(goldens().f32(name + "/x"), xs, fmt);
      const auto dy = to_format<T>(goldens().f32(name + "/dy"), ys, fmt);
      const auto w = cast<T>(goldens().f32(name + "/w")), b = cast<T>(goldens().f32(name + "/b"));
      auto y = poisoned<T>(ys.size()), dx = poisoned<T>(xs.size()), dw = poisoned<T>(w.size()),
           db = poisoned<T>(b.size());
      op.forward(dev, g, x.data(), w.data(), b.data(), y.data());
      op.backward_data(dev, g, dy.data(), w.data(), dx.data());
      op.backward_weights(dev, g, x.data(), dy.data(), dw.data(), db.data());
      CHECK_TF_CLOSE("y", to_nhwc(y, ys, fmt), goldens().f32(name + "/y"), kFloatTol);
      CHECK_TF_CLOSE("dx", to_nhwc(dx, xs, fmt), goldens().f32(name + "/dx"), kFloatTol);
      CHECK_TF_CLOSE("dw", widen(dw), goldens().f32(name + "/dw"), kFloatTol);
      CHECK_TF_CLOSE("db", widen(db), goldens().f32(name + "/db"), kFloatTol);
    }
}

TEMPLATE_TEST_CASE("Max and average pooling SAME (3x3/2, 2x2/2, 3x3/1) match TensorFlow, padding excluded",
                   "[backend][tf_golden][pool]", GOLDEN_SIDES) {
  using B = typename TestType::Backend;
  using T = typename TestType::Scalar;
  Device<B> dev;
  ops::Pool2d<B, T> op;
  for (const char* op_name : {"max_pool", "avg_pool"})
    for (const std::string& name : cases_of(op_name, 4))
      for (DataFormat fmt : kFormats) {
        const auto& p = goldens().params(name);
        INFO(describe<TestType>(name, fmt));
        const bool is_max = std::string(op_name) == "max_pool";
        const PoolKind kind = is_max ? PoolKind::Max : PoolKind::Avg;
        // Max pooling picks an input: exact forward.
        const double y_tol = is_max ? 0.0 : kFloatTol;
        const Shape xs = nhwc_shape(name + "/x"), ys = nhwc_shape(name + "/y");
        const ConvGeom g = ConvGeom::make(fmt, xs, xs.c, p.at("kernel").get<std::size_t>(),
                                          p.at("stride").get<std::size_t>(), Padding::Same);
        REQUIRE(Shape{g.n, g.ic, g.oh, g.ow} == ys);
        const auto x = to_format<T>(goldens().f32(name + "/x"), xs, fmt);
        const auto dy = to_format<T>(goldens().f32(name + "/dy"), ys, fmt);
        for (bool training : {false, true}) {
          INFO((training ? "training" : "inference"));
          auto y = poisoned<T>(ys.size()), dx = poisoned<T>(xs.size());
          op.forward(dev, g, kind, training, x.data(), y.data());
          CHECK_TF_CLOSE("y", to_nhwc(y, ys, fmt), goldens().f32(name + "/y"), y_tol);
          if (!training) continue;
          op.backward(dev, g, kind, x.data(), y.data(), dy.data(), dx.data());
          CHECK_TF_CLOSE("dx", to_nhwc(dx, xs, fmt), goldens().f32(name + "/dx"), kFloatTol);
        }
      }
}

TEMPLATE_TEST_CASE("Lrn with the tutorial's parameters (alpha not divided by the window) matches TensorFlow",
                   "[backend][tf_golden][lrn]", GOLDEN_SIDES) {
  using B = typename TestType::Backend;
  using T = typename TestType::Scalar;
  Device<B> dev;
  ops::Lrn<B, T> op;
  for (const std::string& name : cases_of("lrn", 3))
    for (DataFormat fmt : kFormats) {
      const auto& p = goldens().params(name);
      INFO(describe<TestType>(name, fmt));
      const LrnParams lp{p.at("depth_radius").get<std::size_t>(), p.at("bias").get<double>(),
                         p.at("alpha").get<double>(), p.at("beta").get<double>()};
      const Shape xs = nhwc_shape(name + "/x");
      const ChannelGeom g = ChannelGeom::make(fmt, xs);
      const auto x = to_format<T>(goldens().f32(name + "/x"), xs, fmt);
      const auto dy = to_format<T>(goldens().f32(name + "/dy"), xs, fmt);
      for (bool training : {false, true}) {
        INFO((training ? "training" : "inference"));
        auto y = poisoned<T>(xs.size()), dx = poisoned<T>(xs.size());
        op.forward(dev, g, lp, training, x.data(), y.data());
        CHECK_TF_CLOSE("y", to_nhwc(y, xs, fmt), goldens().f32(name + "/y"), kFloatTol);
        if (!training) continue;
        op.backward(dev, g, lp, x.data(), y.data(), dy.data(), dx.data());
        CHECK_TF_CLOSE("dx", to_nhwc(dx, xs, fmt), goldens().f32(name + "/dx"), kFloatTol);
      }
    }
}

TEMPLATE_TEST_CASE(
    "BatchNorm in training (batch statistics) and inference (given statistics) matches TensorFlow",
    "[backend][tf_golden][batch_norm]", GOLDEN_SIDES) {
  using B = typename TestType::Backend;
  using T = typename TestType::Scalar;
  Device<B> dev;
  ops::BatchNorm<B, T> op;
  for (const std::string& name : cases_of("batch_norm", 2))
    for (DataFormat fmt : kFormats) {
      const auto& p = goldens().params(name);
      INFO(describe<TestType>(name, fmt));
      const double eps = p.at("epsilon");
      const Shape xs = nhwc_shape(name + "/x");
      const ChannelGeom g = ChannelGeom::make(fmt, xs);
      const auto x = to_format<T>(goldens().f32(name + "/x"), xs, fmt);
      const auto dy = to_format<T>(goldens().f32(name + "/dy"), xs, fmt);
      const auto gamma = cast<T>(goldens().f32(name + "/gamma")),
                 beta = cast<T>(goldens().f32(name + "/beta"));
      auto y = poisoned<T>(xs.size()), mean = poisoned<T>(xs.c), var = poisoned<T>(xs.c);
      op.forward_train(dev, g, eps, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data());
      // tf.nn.moments + tf.nn.batch_normalization, and the fused kernel.
      CHECK_TF_CLOSE("y (moments)", to_nhwc(y, xs, fmt), goldens().f32(name + "/y"), kFloatTol);
      CHECK_TF_CLOSE("y (fused)", to_nhwc(y, xs, fmt), goldens().f32(name + "/y_fused"), kFloatTol);
      CHECK_TF_CLOSE("batch mean", widen(mean), goldens().f32(name + "/mean"), kFloatTol);
      CHECK_TF_CLOSE("biased batch variance", widen(var), goldens().f32(name + "/var"), kFloatTol);

      auto dx = poisoned<T>(xs.size()), dgamma = poisoned<T>(xs.c), dbeta = poisoned<T>(xs.c);
      op.backward(dev, g, eps, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                  dgamma.data(), dbeta.data());
      CHECK_TF_CLOSE("dx", to_nhwc(dx, xs, fmt), goldens().f32(name + "/dx"), kFloatTol);
      CHECK_TF_CLOSE("dgamma", widen(dgamma), goldens().f32(name + "/dgamma"), kFloatTol);
      CHECK_TF_CLOSE("dbeta", widen(dbeta), goldens().f32(name + "/dbeta"), kFloatTol);

      const auto mm = cast<T>(goldens().f32(name + "/moving_mean")),
                 mv = cast<T>(goldens().f32(name + "/moving_var"));
      auto yi = poisoned<T>(xs.size());
      op.forward_infer(dev, g, eps, x.data(), gamma.data(), beta.data(), mm.data(), mv.data(), yi.data());
      CHECK_TF_CLOSE("inference y", to_nhwc(yi, xs, fmt), goldens().f32(name + "/y_infer"), kFloatTol);
      CHECK_TF_CLOSE("inference y (fused)", to_nhwc(yi, xs, fmt), goldens().f32(name + "/y_infer_fused"),
                     kFloatTol);
    }
}
