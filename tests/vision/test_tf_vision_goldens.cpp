// The style-transfer seed's two programs against TensorFlow
// (tests/fixtures/tf/networks.safetensors, made by
// scripts/tf_goldens/make_tf_network_goldens.py):
//  - the five hand-made kernels, RGB and gray, applied by conv2d with
//    stride 3 SAME to a fixed image scaled by 1/256 (and converted by
//    tf.image.rgb_to_grayscale for the gray ones), top Sobel ReLU'd and
//    clipped as the seed's convolve() does;
//  - the Gatys total loss (content at conv4_2, style over conv1_1 ...
//    conv5_1 with weights 0.5, 1, 1.5, 3, 4; 0.01 · content + 1 · style) and
//    its gradient with respect to the image, through the seed's VGG-19
//    feature network at 1/32 of its widths with drawn random weights, on
//    the reference backend (double) and oneDNN (float), in both layouts;
//    the weights come from a VGG-19-shaped MatConvNet .mat
//    (tests/fixtures/tf/vgg19_div32.mat) through io::load_vgg19_mat, as the
//    seed reads imagenet-vgg-verydeep-19.mat with scipy.io.loadmat.
// Tolerances: docs/NUMERICS.md, "Whole networks against TensorFlow".
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cifarnet/io/matconvnet.hpp>
#include <cifarnet/vision/filters.hpp>
#include <cifarnet/vision/style_transfer.hpp>

#include "instances/vgg19.hpp"
#include "tf_golden.hpp"

using namespace cifarnet;
using namespace cifarnet::test;
using namespace cifarnet::vision;

namespace {

/// A parameter's drawn initial value.
struct DrawnTensor {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> values;
};

/// Every tensor of a case's "init" metadata, drawn, its exact sum checked
/// against the script's (a different generator fails here).
std::vector<DrawnTensor> drawn_init(const nlohmann::json& init) {
  std::vector<DrawnTensor> out;
  for (const auto& [name, spec] : init.items()) {
    INFO("parameter " << name);
    DrawnTensor d{name, spec.at("shape").get<std::vector<std::size_t>>(), {}};
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

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

/// The Gatys loss and image gradient of model M against the case, in `fmt`.
template <class M>
void check_gatys(DataFormat fmt, double tol_loss, double tol_grad) {
  using T = typename M::Scalar;
  const std::string c = "vgg19_div32";
  const auto& p = network_goldens().params(c);
  const auto& s = network_goldens().shape(c + "/image");
  REQUIRE(s.size() == 4);
  const std::size_t H = s[1], W = s[2];
  REQUIRE(p.at("width_divisor") == 32);
  M net({3, H, W}, fmt, NetOptions(), 1, /*input_gradient=*/true);
  // The seed's weights file: a VGG-19-shaped MatConvNet .mat, read by the
  // style transfer's reader; its values are the script's draws, exactly.
  const std::string mat =
      std::string(CIFARNET_SOURCE_DIR) + "/tests/fixtures/tf/" + p.at("mat_file").get<std::string>();
  io::load_vgg19_mat(net, mat);
  auto& P = net.parameters();
  // The file holds all 16 convolutions (the seed builds them all); the
  // network ends at conv5_1, the last layer a loss uses.
  std::size_t matched = 0;
  for (const DrawnTensor& d : drawn_init(p.at("init"))) {
    INFO("parameter " << d.name << " read from " << mat);
    const auto id = P.find(d.name);
    if (!id) {
      CHECK((d.name.rfind("conv5_", 0) == 0 && d.name.rfind("conv5_1/", 0) != 0));
      continue;
    }
    ++matched;
    REQUIRE(P.info(*id).shape == d.shape);
    CHECK_TF_CLOSE("the .mat file's values",
                   widen(std::vector<T>(P.value(*id), P.value(*id) + P.info(*id).size)), d.values, 0.0);
  }
  REQUIRE(matched == P.count());
  StyleTransferOptions o;
  o.height = H;
  o.width = W;
  o.content_layer = p.at("content_layer").get<std::string>();
  o.style_layers = p.at("style_layers").get<std::vector<std::string>>();
  o.style_layer_weights = p.at("style_layer_weights").get<std::vector<double>>();
  o.content_weight = p.at("content_weight").get<double>();
  o.style_weight = p.at("style_weight").get<double>();
  // The seed's own settings, which the options default to.
  const StyleTransferOptions seed;
  CHECK(o.content_layer == seed.content_layer);
  CHECK(o.style_layers == seed.style_layers);
  CHECK(o.style_layer_weights == seed.style_layer_weights);
  CHECK(o.content_weight == seed.content_weight);
  CHECK(o.style_weight == seed.style_weight);
  CHECK(seed.tv_weight == 0.0);

  GatysLoss<M> loss(net, o);
  loss.set_content(as<T>(network_goldens().f32(c + "/content")).data());
  loss.set_style(as<T>(network_goldens().f32(c + "/style")).data());
  const auto x = as<T>(network_goldens().f32(c + "/image"));
  std::vector<T> g(x.size());
  const LossParts parts = loss.evaluate(x.data(), g.data());
  CHECK_TF_CLOSE("content loss", std::vector<double>{parts.content},
                 network_goldens().f32(c + "/content_loss"), tol_loss);
  CHECK_TF_CLOSE("style loss", std::vector<double>{parts.style}, network_goldens().f32(c + "/style_loss"),
                 tol_loss);
  CHECK_TF_CLOSE("total loss", std::vector<double>{parts.total}, network_goldens().f32(c + "/total_loss"),
                 tol_loss);
  CHECK_TF_CLOSE("d(total)/d(image)", widen(g), network_goldens().f32(c + "/image_grad"), tol_grad);
}

}  // namespace

TEST_CASE("The seed's five kernels, RGB and gray, with stride 3 SAME on a fixed image match TensorFlow",
          "[vision][filters][tf_golden]") {
  INFO(network_goldens().path() << " (TensorFlow " << network_goldens().tf_version() << ")");
  const auto px = network_goldens().u8("filters/pixels_u8");
  const auto& ps = network_goldens().shape("filters/pixels_u8");
  REQUIRE(ps.size() == 3);
  cifarnet::Image img(ps[0], ps[1], ps[2]);
  for (std::size_t i = 0; i < px.size(); ++i) img.data[i] = float(px[i]);
  const cifarnet::Image unit = to_unit_range(img);  // the seed's cast / 256
  const cifarnet::Image gray = rgb_to_grayscale(unit);
  // tf.image.rgb_to_grayscale: a float32 dot product with the same three weights.
  CHECK_TF_CLOSE("rgb_to_grayscale", widen(gray.data), network_goldens().f32("filters/gray"), 1e-6);

  std::size_t n = 0;
  for (const bool rgb : {true, false}) {
    const auto ks = seed_kernels(rgb);
    REQUIRE(ks.size() == 5);
    for (const Kernel& k : ks) {
      const std::string c = "filter_" + k.name + (rgb ? "_rgb" : "_gray");
      INFO("case " << c << " " << network_goldens().params(c).dump());
      CHECK(network_goldens().params(c).at("relu_clip").get<bool>() == k.relu_clip);
      // The kernel is the seed's, value for value (HWIO).
      CHECK_TF_CLOSE("kernel", widen(k.hwio), network_goldens().f32(c + "/kernel"), 0.0);
      const cifarnet::Image y = convolve(rgb ? unit : gray, k, 3);
      const auto& ys = network_goldens().shape(c + "/y");
      REQUIRE(ys == std::vector<std::size_t>{y.height, y.width, y.channels});
      CHECK_TF_CLOSE("y", widen(y.data), network_goldens().f32(c + "/y"), 1e-6);
      ++n;
    }
  }
  CHECK(n == network_goldens().cases("filter").size());
}

TEST_CASE("The Gatys total loss and its image gradient through a VGG-19-shaped net match TensorFlow",
          "[vision][loss][tf_golden]") {
  for (const DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    INFO(network_goldens().path() << " (TensorFlow " << network_goldens().tf_version() << "), "
                                  << to_string(fmt));
    {
      INFO("reference double");
      check_gatys<Model<Vgg19Features<32>, backend::Reference, double>>(fmt, 5e-6, 3e-5);
    }
    {
      INFO("oneDNN float");
      check_gatys<Model<Vgg19Features<32>, backend::OneDnn, float>>(fmt, 5e-6, 3e-5);
    }
  }
}
