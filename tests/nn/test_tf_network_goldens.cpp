// Whole networks against TensorFlow (tests/fixtures/tf/networks.safetensors,
// made by scripts/tf_goldens/make_tf_network_goldens.py): the seed's CIFAR
// ResNet v1 (ResNet-8) in both data formats and the tutorial CNN, from the
// same initial values and the same batch: the logits, the cross-entropy, the
// weight-decay term and the total loss, every gradient, and every variable
// after one optimizer step (momentum 0.9 with the batch norms' moving
// averages for the ResNet, plain gradient descent for the CNN). The ResNet
// runs on oneDNN (float) and on the reference backend in float and in
// double, the CNN on oneDNN.
//
// The initial values are not stored: the script draws them from splitmix64
// streams that draw_init() (tf_golden.hpp) regenerates bit for bit, and the fixture
// holds each tensor's exact sum, which is checked first.
//
// Tolerances (tf_golden.hpp's per-element error |out - tf| / max(|tf|,
// rms(tf))) are derived in docs/NUMERICS.md, "Whole networks against
// TensorFlow".
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/optim/optim.hpp>

#include "instances/cifar10_cnn.hpp"
#include "instances/resnet.hpp"
#include "tf_golden.hpp"

using namespace cifarnet;
using namespace cifarnet::test;

namespace {

/// A parameter's drawn initial value.
struct DrawnTensor {
  std::string name;
  std::vector<std::size_t> shape;
  bool trainable = true;
  std::vector<float> values;
};

/// Every tensor of a case's "init" metadata, drawn; each exact sum must be
/// the script's (a different generator fails here).
std::vector<DrawnTensor> drawn_init(const nlohmann::json& init) {
  std::vector<DrawnTensor> out;
  for (const auto& [name, spec] : init.items()) {
    INFO("parameter " << name);
    DrawnTensor d{
        name, spec.at("shape").get<std::vector<std::size_t>>(), spec.at("trainable").get<bool>(), {}};
    std::size_t n = 1;
    for (std::size_t e : d.shape) n *= e;
    d.values = draw_init(spec.at("stream").get<std::uint64_t>(), n, spec.at("offset").get<double>(),
                         spec.at("scale").get<double>());
    double sum = 0;  // exact: multiples of 2^-24 * scale, far fewer than 2^29 of them
    for (float x : d.values) sum += double(x);
    REQUIRE(sum == spec.at("sum").get<double>());
    out.push_back(std::move(d));
  }
  return out;
}

/// Sets every parameter of `P` (trainable and state) to the case's drawn
/// initial value; the names, shapes and count must be the fixture's.
template <class T>
void set_initial_values(Parameters<T>& P, const nlohmann::json& init) {
  const auto drawn = drawn_init(init);
  REQUIRE(P.count() == drawn.size());
  for (const DrawnTensor& d : drawn) {
    INFO("parameter " << d.name);
    const auto id = P.find(d.name);
    REQUIRE(id.has_value());
    REQUIRE(P.info(*id).shape == d.shape);
    REQUIRE(P.info(*id).trainable == d.trainable);
    std::copy(d.values.begin(), d.values.end(), P.value(*id));
  }
}

/// The case's NHWC uint8 batch as a tensor in `fmt`, each pixel p as
/// p * mul + add.
template <class T>
Tensor<T> input_batch(const std::string& c, DataFormat fmt, float mul, float add) {
  const auto& s = network_goldens().shape(c + "/x_u8");
  REQUIRE(s.size() == 4);
  const Shape shape{s[0], s[3], s[1], s[2]};
  const auto px = network_goldens().u8(c + "/x_u8");
  Tensor<T> t = make_tensor<T>(shape, fmt);
  std::size_t i = 0;
  for (std::size_t n = 0; n < shape.n; ++n)
    for (std::size_t h = 0; h < shape.h; ++h)
      for (std::size_t w = 0; w < shape.w; ++w)
        for (std::size_t ch = 0; ch < shape.c; ++ch)
          t.data()[offset(shape, fmt, n, ch, h, w)] = T(float(px[i++]) * mul + add);
  return t;
}

std::vector<std::int32_t> labels(const std::string& c) {
  const auto l = network_goldens().u8(c + "/labels_u8");
  return {l.begin(), l.end()};
}

template <class T>
std::vector<double> widen(const T* p, std::size_t n) {
  return std::vector<double>(p, p + n);
}

/// Tolerances of one network and backend (docs/NUMERICS.md). `delta`, for
/// the change a step makes, gets the rounding of the weights added per
/// tensor (check_step).
struct Tolerances {
  double logits, loss, grad, step, delta;
};

/// One training step of `net` against case `c`: forward in training mode,
/// the mean cross-entropy, backward, the optimizer chain's regularization
/// (weight decay) and update.
template <class Net, class Opt>
void check_step(Net& net, Opt& opt, const std::string& c, const Tensor<typename Net::Scalar>& x,
                const Tolerances& tol) {
  using T = typename Net::Scalar;
  auto& P = net.parameters();
  const auto& p = network_goldens().params(c);
  const T lr = T(p.at("learning_rate").get<float>());  // TF's float32 learning rate

  // The values before the step (the forward updates the moving statistics).
  std::vector<std::vector<double>> before(P.count());
  for (std::size_t id = 0; id < P.count(); ++id) before[id] = widen(P.value(id), P.info(id).size);

  Tensor<T> dlogits;
  const Tensor<T>& logits = net.forward(x, Mode::Train);
  const T xent = softmax_cross_entropy(logits, labels(c), &dlogits);
  CHECK_TF_CLOSE("logits", widen(logits.data(), logits.size()), network_goldens().f32(c + "/logits"),
                 tol.logits);
  CHECK_TF_CLOSE("cross-entropy", std::vector<double>{xent}, network_goldens().f32(c + "/cross_entropy"),
                 tol.loss);

  P.zero_grad();
  net.backward(dlogits);
  const double reg = opt.regularize(P);
  CHECK_TF_CLOSE("regularization", std::vector<double>{reg}, network_goldens().f32(c + "/regularization"),
                 tol.loss);
  CHECK_TF_CLOSE("total loss", std::vector<double>{double(xent) + reg}, network_goldens().f32(c + "/loss"),
                 tol.loss);

  const auto trainable = p.at("trainable").get<std::vector<std::string>>();
  std::size_t trainable_tensors = 0;
  for (const auto& info : P.infos()) trainable_tensors += info.trainable ? 1 : 0;
  REQUIRE(trainable.size() == trainable_tensors);
  for (const std::string& name : trainable) {
    const std::size_t id = P.id(name);
    CHECK_TF_CLOSE("gradient of " + name, widen(P.grad(id), P.info(id).size),
                   network_goldens().f32(c + "/grad/" + name), tol.grad);
  }

  opt.update(P, lr);
  for (std::size_t id = 0; id < P.count(); ++id) {
    const auto& info = P.info(id);
    const auto want = network_goldens().f32(c + "/step/" + info.name);
    CHECK_TF_CLOSE(info.name + " after the step", widen(P.value(id), info.size), want, tol.step);
    // The change itself (what the step did), against TensorFlow's change.
    std::vector<double> got_delta(info.size);
    std::vector<float> want_delta(info.size);
    for (std::size_t k = 0; k < info.size; ++k) {
      got_delta[k] = double(P.value(id)[k]) - before[id][k];
      want_delta[k] = float(double(want[k]) - before[id][k]);
    }
    // Each side rounds w1 to float32 (TensorFlow always; cifarnet in float):
    // up to 2^-24 |w1| each, which the change carries on top of the
    // gradient's error. On the measure's scale (at least rms(change)) that
    // is at most 2^-23 max|w1| / rms(change).
    double ss = 0, max_w = 0;
    for (std::size_t k = 0; k < info.size; ++k) {
      ss += double(want_delta[k]) * double(want_delta[k]);
      max_w = std::max(max_w, std::abs(double(want[k])));
    }
    const double rms_change = std::sqrt(ss / double(info.size));
    INFO(info.name << ": rms of TensorFlow's change " << rms_change << ", max |w1| " << max_w);
    REQUIRE(rms_change > 0);  // the step moved it in TensorFlow, so the comparison is not vacuous
    const double rounding = std::ldexp(max_w, -23) / rms_change;
    CHECK_TF_CLOSE(info.name + " change in the step", got_delta, want_delta, tol.delta + rounding);
  }
}

}  // namespace

TEST_CASE("The fixture of whole networks was made by TensorFlow from the seeds' model functions",
          "[nn][tf_golden]") {
  INFO(network_goldens().path());
  CHECK(network_goldens().tf_version() == "2.21.0");
  CHECK(network_goldens().cases("resnet_cifar") ==
        std::vector<std::string>{"resnet8_channels_first", "resnet8_channels_last"});
  CHECK(network_goldens().cases("cifar10_cnn") == std::vector<std::string>{"cnn"});
  // The generator: splitmix64's first output of state 0 + gamma is the
  // published 0xE220A8397B1DCDAF, so u = (0xE220A8 - 2^23) / 2^23.
  CHECK(draw_init(0, 1, 0.0, 1.0)[0] == float(double(0xE220A8 - (1 << 23)) / double(1 << 23)));
}

/// Backend B computing in scalar T.
template <class B, class T>
struct Side {
  using Backend = B;
  using Scalar = T;
};

TEMPLATE_TEST_CASE(
    "ResNet-8 (the seed's model function) matches TensorFlow: logits, loss with weight decay, "
    "every gradient, one momentum step with the moving averages",
    "[nn][tf_golden][resnet]", (Side<backend::OneDnn, float>), (Side<backend::Reference, float>),
    (Side<backend::Reference, double>)) {
  using B = typename TestType::Backend;
  using T = typename TestType::Scalar;
  for (const DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    const std::string c = fmt == DataFormat::NHWC ? "resnet8_channels_last" : "resnet8_channels_first";
    const auto& p = network_goldens().params(c);
    INFO((std::is_same_v<B, backend::OneDnn> ? "oneDNN" : "reference")
         << (std::is_same_v<T, float> ? " float" : " double") << ", " << to_string(fmt) << ", case " << c
         << " (TensorFlow " << network_goldens().tf_version() << ")");
    REQUIRE(p.at("num_layers") == 8);
    Model<ResNetCifar<>, B, T> net(
        {3, 32, 32}, fmt,
        resnet_options(8, p.at("batch_norm_decay").get<double>(), p.at("batch_norm_epsilon").get<double>()),
        1);
    set_initial_values(net.parameters(), p.at("init"));
    optim::BasicChain<T, optim::WeightDecay, optim::Momentum> opt(
        net.parameters(), optim::WeightDecayOptions(p.at("weight_decay").get<double>()),
        optim::MomentumOptions().momentum(p.at("momentum").get<double>()));
    // The model standardizes raw pixels itself (x / 128 - 1).
    check_step(net, opt, c, input_batch<T>(c, fmt, 1.0f, 0.0f), Tolerances{1e-5, 1e-6, 2e-4, 5e-6, 2e-4});
  }
}

TEST_CASE(
    "The tutorial CNN matches TensorFlow: logits, loss with the local3/local4 decay, every gradient, "
    "one gradient-descent step",
    "[nn][tf_golden][cnn]") {
  const std::string c = "cnn";
  const auto& p = network_goldens().params(c);
  INFO("oneDNN, NHWC, case cnn (TensorFlow " << network_goldens().tf_version() << ")");
  const auto& xs = network_goldens().shape(c + "/x_u8");
  REQUIRE(xs.size() == 4);
  Model<Cifar10Cnn, backend::OneDnn> net({3, xs[1], xs[2]}, DataFormat::NHWC, cifar10_cnn_options(), 1);
  set_initial_values(net.parameters(), p.at("init"));
  REQUIRE(p.at("decayed").get<std::vector<std::string>>() ==
          std::vector<std::string>{"local3/weights", "local4/weights"});
  optim::Chain<optim::WeightDecay, optim::GradientDescent> opt(
      net.parameters(),
      optim::WeightDecayOptions(p.at("weight_decay").get<double>())
          .decay(optim::Selection(cifar10_cnn_decayed())),
      {});
  check_step(net, opt, c, input_batch<float>(c, DataFormat::NHWC, 1.0f / 128, -1.0f),
             Tolerances{1e-5, 1e-6, 2e-4, 5e-6, 2e-4});
}
