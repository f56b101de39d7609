// During backward the containers (or the training executor) report only
// gradients that are already final (the order overlapped all-reduce relies
// on), on both CPU backends.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

#include <cstdint>
#include <vector>

using namespace cifarnet;

namespace {
// A block whose shortcut has parameters (a strided 1x1 convolution), so the
// shortcut's gradients are registered after the body's.
using ProjectionBlock = Residual<Sequential<resnet::ConvBN<8, 16, 2, FusedRelu>, resnet::ConvBN<16, 16>>,
                                 Sequential<Conv2d<8, 16, 1, 2>>, FusedRelu>;
using SyncTestNet = Sequential<Conv2d<3, 8, 3>, BatchNorm2d<8, FusedRelu>, Repeat<resnet::BlockV1<8, 8, 1>>,
                               ProjectionBlock, GlobalAvgPool, Dense<16, 10>>;

/// At every ready_from(id) checks that each trainable gradient of a parameter
/// id' >= id already holds its final value.
struct CheckingSync : GradientSync {
  const Parameters<float>* params = nullptr;
  std::vector<float> final_grads;
  std::vector<std::size_t> ids;
  std::size_t violations = 0, begins = 0, finishes = 0;
  void begin() override { ++begins; }
  void finish() override { ++finishes; }
  void ready_from(std::size_t id) override {
    ids.push_back(id);
    const auto& infos = params->infos();
    for (std::size_t p = id; p < infos.size(); ++p) {
      if (!infos[p].trainable) continue;
      const float* g = params->grads().data() + infos[p].offset;
      for (std::size_t i = 0; i < infos[p].size; ++i)
        if (!(g[i] == final_grads[infos[p].offset + i])) {
          ++violations;
          break;
        }
    }
  }
};
}  // namespace

TEMPLATE_TEST_CASE("During backward the containers report only gradients that are already final",
                   "[nn][backward][grad_sync]", backend::Reference, backend::OneDnn) {
  // the layer tree, and the training executor (nn/train_executor.hpp)
  const bool executor = GENERATE(false, true);
  INFO("training executor " << executor);
  NetOptions opts;
  opts.repeat = 2;
  opts.plan_training = executor;
  Model<SyncTestNet, TestType> net({3, 8, 8}, DataFormat::NCHW, opts, 11);
  Rng rng(5);
  Tensor<float> x = make_tensor<float>({4, 3, 8, 8}, DataFormat::NCHW);
  for (auto& v : x) v = float(rng.uniform(-1, 1));
  const std::vector<std::int32_t> y{1, 4, 7, 9};
  Tensor<float> d;
  softmax_cross_entropy(net.forward(x), y, &d);
  net.backward(d);
  auto& P = net.parameters();
  CheckingSync sync;
  sync.params = &P;
  sync.final_grads.assign(P.grads().data(), P.grads().data() + P.grads().size());
  // The same backward again, from poisoned gradients: a report that came
  // before a parameter's gradient was written would see the poison.
  softmax_cross_entropy(net.forward(x), y, &d);
  for (const auto& p : P.infos())
    if (p.trainable) std::fill_n(P.grads().data() + p.offset, p.size, std::nanf(""));
  net.set_gradient_sync(&sync);
  net.backward(d);
  net.set_gradient_sync(nullptr);
  CHECK(sync.violations == 0);
  REQUIRE(sync.ids.size() >= 5);                              // the dense layer, pool, blocks, stem...
  CHECK(std::is_sorted(sync.ids.rbegin(), sync.ids.rend()));  // non-increasing
  CHECK(sync.ids.front() > 0);                                // early reports, not just the end
  CHECK(sync.ids.back() == 0);                                // the first layer ends it: all final
  // And the gradients are the ones a backward without reports writes.
  std::size_t differ = 0;
  for (Eigen::Index i = 0; i < P.grads().size(); ++i)
    differ += P.grads()[i] == sync.final_grads[std::size_t(i)] ? 0 : 1;
  CHECK(differ == 0);
}
