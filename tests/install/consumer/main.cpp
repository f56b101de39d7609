// Uses cifarnet through #include <cifarnet/...> only: trains a tiny ResNet
// block for a few steps and checks the loss falls.
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

#include <cstdio>

int main() {
  using namespace cifarnet;
  using Net = Sequential<resnet::ConvBN<3, 4>, ReLU, resnet::BlockV1<4, 8, 2>, GlobalAvgPool, Dense<8, 3>>;
  Model<Net> net({3, 8, 8}, DataFormat::NHWC, {}, 1);
  Rng rng(2);
  Tensor<float> x = make_tensor<float>({16, 3, 8, 8}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.normal());
  std::vector<std::int32_t> y(16);
  for (auto& l : y) l = std::int32_t(rng.uniform_int(3));
  Tensor<float> d;
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    last = softmax_cross_entropy(net.forward(x), y, &d);
    if (step == 0) first = last;
    net.backward(d);
    net.parameters().values() -= 0.1f * net.parameters().grads();
  }
  std::printf("consumer: %zu parameters, loss %.4f -> %.4f\n", net.parameters().num_trainable(), first, last);
  return last < first ? 0 : 1;
}
