// The plan executor (nn/executor.hpp): inference run from the step plan,
// folded convolutions with their residual sums and ReLUs as epilogues and,
// with bf16 convolutions, bf16 activations between them. Checked against
// the layers running themselves (NetOptions::plan_executor off) on the
// reference backend in double: bit for bit on the reference backend (the
// same operations in the same order), within float rounding on oneDNN at
// toy and at training sizes, within the bound docs/NUMERICS.md states for
// bf16; after the weights change, on a partial batch, with a user's
// container, and the rules' verdicts with their reasons.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>

#include "instances/resnet.hpp"
#include "nn/fusion_compare.hpp"

#include <algorithm>
#include <cmath>
#include <string>

using namespace cifarnet;

namespace {

template <class T>
Tensor<T> random_input(const Shape& s, DataFormat fmt, std::uint64_t seed) {
  Tensor<T> x = make_tensor<T>(s, fmt);
  Rng rng(seed);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = T(rng.uniform(0.0, 255.0));
  return x;
}

template <class T>
Tensor<double> as_double(const Tensor<T>& x) {
  Tensor<double> d(x.shape());
  std::copy(x.data(), x.data() + x.size(), d.data());
  return d;
}

}  // namespace

TEST_CASE("The executor runs inference bit for bit as the layers do on the reference backend",
          "[nn][executor]") {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    Model<ResNetCifar<>, backend::Reference, double> ex({3, 16, 16}, fmt, resnet_options(8), 1);
    Model<ResNetCifar<>, backend::Reference, double> layers({3, 16, 16}, fmt,
                                                            resnet_options(8).with_plan_executor(false), 1);
    test::same_random_parameters(ex, layers, 5);
    const Tensor<double> x = random_input<double>({3, 3, 16, 16}, fmt, 7);
    const auto* e = ex.executor(3);
    REQUIRE(e);
    INFO(ex.explain_plan(Mode::Infer, 3));
    REQUIRE(e->ok());
    CHECK(layers.executor(3) == nullptr);
    const Tensor<double> a = ex.forward(x, Mode::Infer);
    const Tensor<double>& b = layers.forward(x, Mode::Infer);
    REQUIRE(a.shape() == b.shape());
    CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
    const plan::Plan& p = e->plan();
    std::size_t matched = 0;
    CHECK(p.fired("residual_sum_in_conv_epilogue", &matched) == 3);  // one per block of ResNet-8
    CHECK(matched == 3);
    CHECK(p.fired("bf16_activations") == 0);  // fp32
  }
}

TEST_CASE("The executor on oneDNN agrees with the layers in double, at toy and training sizes",
          "[nn][executor][onednn]") {
  struct Case {
    int n;
    std::size_t side, batch;
  };
  // ResNet-8 on 16x16 images; ResNet-20 on CIFAR's 32x32 at a batch of 16
  // (19 convolutions deep, reductions of up to 576 products each).
  for (const Case c : {Case{1, 16, 4}, Case{3, 32, 16}}) {
    for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
      INFO("ResNet-" << 6 * c.n + 2 << ", format " << to_string(fmt));
      Model<ResNetCifar<>, backend::OneDnn, float> ex({3, c.side, c.side}, fmt, resnet_options(6 * c.n + 2),
                                                      1);
      Model<ResNetCifar<>, backend::Reference, double> ref(
          {3, c.side, c.side}, fmt, resnet_options(6 * c.n + 2).with_plan_executor(false), 1);
      test::same_random_parameters(ex, ref, 11);
      const Tensor<float> x = random_input<float>({c.batch, 3, c.side, c.side}, fmt, 13);
      REQUIRE(ex.executor(c.batch));
      REQUIRE(ex.executor(c.batch)->ok());
      // The stage convolutions in the own kernels where they run (NHWC, a
      // batch of at least one image per thread; Winograd from 32 channels);
      // the stem's 3 channels not.
      const plan::Plan& p = ex.executor(c.batch)->plan();
      INFO(plan::describe(p));
      std::size_t matched = 0;
      const std::size_t own = p.fired("conv_epilogue_in_registers", &matched);
      CHECK(matched == std::size_t(6 * c.n + 1));  // every convolution
      const plan::Verdict* stem = p.verdict("conv_epilogue_in_registers", "stem/conv1");
      const plan::Verdict* body = p.verdict("conv_epilogue_in_registers", "stage1/block0/conv2");
      REQUIRE(stem);
      REQUIRE(body);
      CHECK_FALSE(stem->fires);
      // (where the own kernels were measured ahead of oneDNN's, AVX2 and
      // Zen 4's AVX-512: elsewhere oneDNN's runs, and says so)
      const bool kernels =
          backend::onednn::direct::own_inference_measured() && std::size_t(omp_get_max_threads()) <= c.batch;
      if (fmt == DataFormat::NCHW) {
        CHECK(own == 0);
        CHECK(body->reason == "NCHW (the own kernels are NHWC)");
      } else if (kernels) {
        CHECK(stem->reason == "3 -> 16 channels (the own kernels: 16, 32 or 64, in = out)");
        CHECK(body->nodes.size() == 2);  // with the block's residual sum and ReLU
        // The stage convolutions but the two with stride 2: on AVX2 stage
        // 1's 16 channels in the own direct kernels, the 32 and 64 of
        // stages 2 and 3 in the own Winograd kernels
        // (conv_winograd_epilogue); on Zen 4's AVX-512 all three stages in
        // the Winograd kernels.
        const bool wino16 = backend::onednn::direct::avx512_in_halves();
        if (wino16)
          CHECK(body->reason == "conv_winograd_epilogue runs it");
        else
          CHECK(body->fires);
        std::size_t wino_matched = 0;
        const std::size_t wino = p.fired("conv_winograd_epilogue", &wino_matched);
        CHECK(wino_matched == std::size_t(6 * c.n + 1));
        CHECK(own == std::size_t(wino16 ? 0 : 2 * c.n));
        CHECK(wino == std::size_t(wino16 ? 6 * c.n - 2 : 4 * c.n - 2));
        const plan::Verdict* s3 = p.verdict("conv_epilogue_in_registers", "stage3/block0/conv2");
        const plan::Verdict* s1 = p.verdict("conv_winograd_epilogue", "stage1/block0/conv2");
        REQUIRE(s3);
        REQUIRE(s1);
        CHECK(s3->reason == "conv_winograd_epilogue runs it");
        if (wino16)
          CHECK(s1->fires);
        else
          CHECK(s1->reason == "16 -> 16 channels (fewer than 32: the own direct kernel is faster there)");
      }
      const Tensor<float>& y = ex.forward(x, Mode::Infer);
      const Tensor<double>& yr = ref.forward(as_double(x), Mode::Infer);
      CHECK(test::rel_err(y, yr) <= 1e-5);
    }
  }
}

TEST_CASE("The executor's bf16 activations stay within the stated bound, and say where they stop",
          "[nn][executor][onednn]") {
  const DataFormat fmt = DataFormat::NHWC;
  Model<ResNetCifar<>, backend::OneDnn, float> ex(
      {3, 32, 32}, fmt, resnet_options(20).with_conv_precision(ConvPrecision::BF16), 1);
  Model<ResNetCifar<>, backend::Reference, double> ref({3, 32, 32}, fmt,
                                                       resnet_options(20).with_plan_executor(false), 1);
  test::same_random_parameters(ex, ref, 17);
  const std::size_t n = 16;
  const Tensor<float> x = random_input<float>({n, 3, 32, 32}, fmt, 19);
  auto* e = ex.executor(n);
  REQUIRE(e);
  REQUIRE(e->ok());
  const plan::Plan& p = e->plan();
  INFO(plan::describe(p));
  std::size_t matched = 0;
  const std::size_t fired = p.fired("bf16_activations", &matched);
  CHECK(matched == 19);
  if (!ops::ConvEpilogue<backend::OneDnn, float>::bf16_storage()) {
    CHECK(fired == 0);
    const plan::Verdict* v = p.verdict("bf16_activations", "stem/conv1");
    REQUIRE(v);
    CHECK(v->reason == "no bf16 activations on this CPU");
  } else {
    // every output but the two the next stage's average pool reads, and the last (the head reads float)
    CHECK(fired == 16);
    const plan::Verdict* v = p.verdict("bf16_activations", "stage1/block2/conv2");
    REQUIRE(v);
    CHECK_FALSE(v->fires);
    CHECK(v->reason == "read by 'stage2/block0/avg_pool1' (avg_pool), which reads float");
    const plan::Verdict* last = p.verdict("bf16_activations", "stage3/block2/conv2");
    REQUIRE(last);
    CHECK(last->reason == "read by 'head/global_pool1' (global_pool), which reads float");
  }
  const Tensor<float>& y = ex.forward(x, Mode::Infer);
  const Tensor<double>& yr = ref.forward(as_double(x), Mode::Infer);
  // docs/NUMERICS.md, "The plan executor": bf16 products and activations
  // over ResNet-20's 19 convolutions
  const double err = test::rel_err(y, yr);
  INFO("relative error of the logits " << err);
  CHECK(err <= 2e-2);
}

TEST_CASE("The executor follows the weights, the batch size and the options", "[nn][executor][onednn]") {
  const DataFormat fmt = DataFormat::NHWC;
  Model<ResNetCifar<>, backend::OneDnn, float> ex({3, 16, 16}, fmt, resnet_options(8), 1);
  Model<ResNetCifar<>, backend::Reference, double> ref({3, 16, 16}, fmt,
                                                       resnet_options(8).with_plan_executor(false), 1);
  test::same_random_parameters(ex, ref, 23);
  const Tensor<float> x = random_input<float>({5, 3, 16, 16}, fmt, 29);
  CHECK(test::rel_err(ex.forward(x, Mode::Infer), ref.forward(as_double(x), Mode::Infer)) <= 1e-5);
  // new weights and statistics (another fold, other weights reordered)
  test::same_random_parameters(ex, ref, 31);
  CHECK(test::rel_err(ex.forward(x, Mode::Infer), ref.forward(as_double(x), Mode::Infer)) <= 1e-5);
  // a training step in between (moving statistics updated by the layers)
  ex.forward(x, Mode::Train);
  ref.forward(as_double(x), Mode::Train);
  CHECK(test::rel_err(ex.forward(x, Mode::Infer), ref.forward(as_double(x), Mode::Infer)) <= 1e-5);
  // a partial batch: its own plan and executor
  const Tensor<float> x3 = random_input<float>({3, 3, 16, 16}, fmt, 37);
  CHECK(test::rel_err(ex.forward(x3, Mode::Infer), ref.forward(as_double(x3), Mode::Infer)) <= 1e-5);
  REQUIRE(ex.executor(3));
  CHECK(ex.executor(3)->plan().key.batch == 3);
  CHECK(ex.explain_plan(Mode::Infer, 3).find("executor: ") != std::string::npos);
  // off: the layers run themselves
  Model<ResNetCifar<>, backend::OneDnn, float> off({3, 16, 16}, fmt,
                                                   resnet_options(8).with_plan_executor(false), 1);
  CHECK(off.executor(5) == nullptr);
  CHECK(off.explain_plan(Mode::Infer, 5).find("executor: off (NetOptions::plan_executor)") !=
        std::string::npos);
}

namespace {
struct ExecTap {
  static constexpr const char* name = "after_conv1";
};
using TapNet = Sequential<ConvBatchNorm<3, 8, 3, 1, Padding::Same, FusedRelu>, Tap<ExecTap>,
                          ConvBatchNorm<8, 8, 3, 1, Padding::Same, FusedRelu>,
                          ConvBatchNorm<8, 8, 3, 1, Padding::Same, FusedRelu>,
                          ConvBatchNorm<8, 8, 3, 1, Padding::Same, FusedRelu>>;
}  // namespace

TEST_CASE("A tap read in inference keeps its activation through the executor's buffer reuse",
          "[nn][executor]") {
  // The tap's input is an executor buffer that, without the tap, the third
  // convolution's output would reuse; Model::activation must still hold the
  // first convolution's output after the run.
  Model<TapNet, backend::Reference, double> ex({3, 8, 8}, DataFormat::NHWC, NetOptions(), 1);
  Model<TapNet, backend::Reference, double> layers({3, 8, 8}, DataFormat::NHWC,
                                                   NetOptions().with_plan_executor(false), 1);
  test::same_random_parameters(ex, layers, 47);
  const Tensor<double> x = random_input<double>({2, 3, 8, 8}, DataFormat::NHWC, 53);
  REQUIRE(ex.executor(2));
  REQUIRE(ex.executor(2)->ok());
  const Tensor<double> y = ex.forward(x, Mode::Infer);
  const Tensor<double>& yl = layers.forward(x, Mode::Infer);
  CHECK(std::equal(y.data(), y.data() + y.size(), yl.data()));
  const Tensor<double>& a = ex.activation("after_conv1");
  const Tensor<double>& al = layers.activation("after_conv1");
  REQUIRE(a.shape() == al.shape());
  CHECK(std::equal(a.data(), a.data() + a.size(), al.data()));
}

namespace {
using EndsInIdentity = Sequential<ConvBatchNorm<3, 8, 3, 1, Padding::Same, FusedRelu>,
                                  ConvBatchNorm<8, 8, 3, 1, Padding::Same, FusedRelu>, Identity>;
}  // namespace

TEST_CASE("A bf16 output that reaches the model's output through an identity stays float",
          "[nn][executor][onednn]") {
  Model<EndsInIdentity, backend::OneDnn, float> ex({3, 8, 8}, DataFormat::NHWC,
                                                   NetOptions().with_conv_precision(ConvPrecision::BF16), 1);
  Model<EndsInIdentity, backend::Reference, double> ref({3, 8, 8}, DataFormat::NHWC,
                                                        NetOptions().with_plan_executor(false), 1);
  test::same_random_parameters(ex, ref, 59);
  const Tensor<float> x = random_input<float>({2, 3, 8, 8}, DataFormat::NHWC, 61);
  auto* e = ex.executor(2);
  REQUIRE(e);
  REQUIRE(e->ok());
  INFO(plan::describe(e->plan()));
  const plan::Verdict* v = e->plan().verdict("bf16_activations", "conv2");
  REQUIRE(v);
  CHECK_FALSE(v->fires);
  CHECK(test::rel_err(ex.forward(x, Mode::Infer), ref.forward(as_double(x), Mode::Infer)) <= 2e-2);
}
