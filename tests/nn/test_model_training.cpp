// A small ResNet fits 128 random examples, on both CPU backends (the rest
// of the Model tests: test_model.cpp, test_grad_sync.cpp).
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

#include <cstdint>
#include <vector>

using namespace cifarnet;

namespace {
// A small ResNet-style network: stem, one stage of two blocks, a strided
// block with the pool-pad shortcut, head.
using TinyResNet =
    Sequential<resnet::ConvBN<3, 8>, ReLU, resnet::BlockV1<8, 8, 1>, Repeat<resnet::BlockV1<8, 8, 1>>,
               resnet::BlockV1<8, 16, 2>, GlobalAvgPool, Dense<16, 10>>;
}  // namespace

TEMPLATE_TEST_CASE("A small ResNet learns 128 random examples to 100% training accuracy", "[nn][learn]",
                   backend::Reference, backend::OneDnn) {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("backend " << TestType::name << ", format " << to_string(fmt));
    Model<TinyResNet, TestType> net({3, 8, 8}, fmt, NetOptions().with_repeat(1), 7);
    Rng rng(11);
    const std::size_t n = 128;
    Tensor<float> x = make_tensor<float>({n, 3, 8, 8}, fmt);
    for (auto& v : x) v = float(rng.normal());
    std::vector<std::int32_t> y(n);
    for (auto& l : y) l = std::int32_t(rng.uniform_int(10));
    auto& P = net.parameters();
    Eigen::ArrayXf accum = Eigen::ArrayXf::Zero(P.values().size());
    Tensor<float> d;
    std::size_t correct = 0;
    int step = 0;
    for (; step < 400 && correct < n; ++step) {
      const auto& logits = net.forward(x, Mode::Train);
      correct = count_correct(logits, y);
      softmax_cross_entropy(logits, y, &d);
      net.backward(d);
      accum = 0.9f * accum + P.grads();  // TF momentum
      P.values() -= 0.1f * accum;
    }
    INFO("steps " << step);
    CHECK(correct == n);
    // In inference mode (moving statistics) the fit holds too once the statistics settle.
    CHECK(step < 400);
  }
}
