// Whole models on the CUDA backend against the oneDNN backend (itself checked
// against the reference): ResNet-8 (fused conv+BN, explicit padding, the
// pool-and-pad shortcut) and the tutorial CNN (LRN, max pooling, dense
// layers), in both data formats: logits in training and inference mode, and
// every parameter gradient, ||cuda - cpu|| / ||cpu|| < 1e-4 (fp32 on both
// sides, different algorithms, summed over many layers). Skipped when no GPU
// is present.
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>

#include <cmath>
#include <utility>
#include <vector>

using namespace cifarnet;

namespace {

template <class A, class B>
double rel(const A& out, const B& ref) {
  double e = 0, r = 0;
  for (Eigen::Index i = 0; i < Eigen::Index(ref.size()); ++i) {
    const double d = double(out[i]) - double(ref[i]);
    e += d * d;
    r += double(ref[i]) * double(ref[i]);
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

template <class Net>
void compare(InputShape in, const NetOptions& opts, std::size_t n) {
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    Model<Net, backend::Cuda> gpu(in, fmt, opts, 5);
    Model<Net, backend::OneDnn> cpu(in, fmt, opts, 5);
    REQUIRE(rel(gpu.parameters().values(), cpu.parameters().values()) == 0.0);
    Rng rng(3);
    Tensor<float> x = make_tensor<float>({n, in.c, in.h, in.w}, fmt);
    for (auto& v : x) v = float(rng.normal());
    std::vector<std::int32_t> labels(n);
    for (auto& l : labels) l = std::int32_t(rng.uniform_int(10));

    Tensor<float> dg, dc;
    const Tensor<float> lg = gpu.forward(x, Mode::Train);
    const Tensor<float> lc = cpu.forward(x, Mode::Train);
    CHECK(rel(lg, lc) < 1e-4);
    softmax_cross_entropy(lg, labels, &dg);
    softmax_cross_entropy(lc, labels, &dc);
    gpu.backward(dg);
    cpu.backward(dc);
    CHECK(rel(gpu.parameters().grads(), cpu.parameters().grads()) < 1e-4);
    // Inference: the moving statistics the training pass updated.
    CHECK(rel(gpu.forward(x, Mode::Infer), cpu.forward(x, Mode::Infer)) < 1e-4);
  }
}

bool have_gpu() {
  if (backend::cuda::device_count() > 0) return true;
  WARN("SKIPPED: the CUDA backend needs a GPU (" << backend::cuda::no_device_reason() << ")");
  return false;
}

}  // namespace

TEST_CASE("ResNet-8 on the CUDA backend matches the oneDNN backend: logits and gradients",
          "[backend][cuda][model]") {
  if (!have_gpu()) return;
  compare<ResNetCifar<>>({3, 32, 32}, NetOptions().with_repeat(1), 4);
}

TEST_CASE("The tutorial CNN on the CUDA backend matches the oneDNN backend: logits and gradients",
          "[backend][cuda][model]") {
  if (!have_gpu()) return;
  compare<Cifar10Cnn>({3, 24, 24}, cifar10_cnn_options(), 4);
}

TEST_CASE("The Trainer on one GPU follows the oneDNN Trainer: loss, weight decay, momentum, EMA, evaluation",
          "[backend][cuda][model][train]") {
  if (!have_gpu()) return;
  // Every step computation the Trainer runs through the model's backend:
  // SoftmaxCrossEntropy (the NVRTC loss kernel on CUDA), the arena kernels of
  // WeightDecay, Momentum and the EMA, the numerics check, and evaluate()'s
  // loss and in_top1.
  using Net = ResNetCifar<>;
  const DataFormat fmt = DataFormat::NHWC;
  Model<Net, backend::Cuda> gpu({3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  Model<Net, backend::OneDnn> cpu({3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  Rng rng(6);
  std::vector<train::Batch> batches(4);
  for (auto& b : batches) {
    b.images = make_tensor<float>({16, 3, 32, 32}, fmt);
    for (auto& v : b.images) v = float(rng.normal());
    for (int i = 0; i < 16; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  }
  std::vector<double> losses[2];
  train::EvalResult evals[2];
  int side = 0;
  auto run = [&](auto& net) {
    using N = std::decay_t<decltype(net)>;
    optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), optim::WeightDecayOptions(2e-4),
                                                          optim::MomentumOptions().momentum(0.9));
    optim::ExponentialMovingAverage<float> ema(net.parameters(), optim::ExponentialMovingAverageOptions(0.9));
    train::Trainer<N> t(net, train::TrainerOptions().max_steps(3));
    t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
    t.add_update([&](Parameters<float>& p, std::int64_t step) { ema.apply(p, step); });
    for (std::size_t i = 0; i < 3; ++i) losses[side].push_back(t.step(batches[i]).total_loss);
    auto swapped = ema.swap_in(net.parameters());
    bool once = false;
    evals[side] = train::evaluate(net, [&]() -> const train::Batch& {
      static const train::Batch empty;
      if (once) return empty;
      once = true;
      return batches[3];
    });
    ++side;
  };
  run(gpu);
  run(cpu);
  for (std::size_t i = 0; i < 3; ++i) CHECK(losses[0][i] == Approx(losses[1][i]).epsilon(1e-4));
  // cuDNN and oneDNN sum the convolutions in different orders: after three
  // momentum steps the weights drift apart by about 1e-4 (1.2e-4 on an H200);
  // a wrong learning rate, momentum or update order moves them by far more.
  CHECK(rel(gpu.parameters().values(), cpu.parameters().values()) < 1e-3);
  CHECK(rel(gpu.parameters().state(), cpu.parameters().state()) < 1e-4);
  CHECK(evals[0].total == 16);
  CHECK(evals[0].loss == Approx(evals[1].loss).epsilon(1e-4));
  CHECK(evals[0].correct == evals[1].correct);
}

TEST_CASE("ResNet-20 and ResNet-56 at batch 128 on the GPU follow oneDNN for 5 momentum steps, step by step",
          "[backend][cuda][model][training-size]") {
  if (!have_gpu()) return;
  // Training sizes (batch 128, 16-64 channels, both formats), where long
  // reductions lose digits: each step starts both models from the oneDNN
  // model's weights and moving statistics (so cuDNN's different summation
  // order does not compound over steps), then compares the logits and the
  // updated moving statistics within 1e-4 and the gradients within 1e-2;
  // the oneDNN model trains on with momentum, so the 5 steps walk a real
  // training trajectory. Why 1e-2 for the gradients: at this depth they
  // depend on the last bits of the forward activations (ReLU masks within
  // rounding of zero, BN's cancelling sums), so fp32 computes them only to
  // about 2e-3 (docs/NUMERICS.md: oneDNN and the float reference against
  // double at ResNet-20); two fp32 backends differ by as much (1e-3 to
  // 5.7e-3 measured on an H200), a wrong gradient by O(1).
  using Net = ResNetCifar<>;
  for (int depth : {20, 56}) {
    for (DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
      INFO("ResNet-" << depth << ", " << to_string(fmt));
      Model<Net, backend::Cuda> gpu({3, 32, 32}, fmt, resnet_options(depth), 5);
      Model<Net, backend::OneDnn> cpu({3, 32, 32}, fmt, resnet_options(depth), 5);
      optim::Chain<optim::Momentum> opt(cpu.parameters(), optim::MomentumOptions().momentum(0.9));
      Rng rng(11);
      const std::size_t n = 128;
      Tensor<float> x = make_tensor<float>({n, 3, 32, 32}, fmt);
      std::vector<std::int32_t> labels(n);
      for (int step = 0; step < 5; ++step) {
        INFO("step " << step);
        for (auto& v : x) v = float(rng.uniform(0, 255));
        for (auto& l : labels) l = std::int32_t(rng.uniform_int(10));
        gpu.parameters().values() = std::as_const(cpu.parameters()).values();
        gpu.parameters().state() = std::as_const(cpu.parameters()).state();
        gpu.parameters().zero_grad();
        cpu.parameters().zero_grad();
        Tensor<float> dg, dc;
        const Tensor<float> lg = gpu.forward(x, Mode::Train);
        const Tensor<float> lc = cpu.forward(x, Mode::Train);
        CHECK(rel(lg, lc) < 1e-4);
        softmax_cross_entropy(lg, labels, &dg);
        softmax_cross_entropy(lc, labels, &dc);
        gpu.backward(dg);
        cpu.backward(dc);
        const double eg = rel(gpu.parameters().grads(), cpu.parameters().grads());
        const double es = rel(gpu.parameters().state(), cpu.parameters().state());
        WARN("ResNet-" << depth << " " << to_string(fmt) << " step " << step << ": logits " << rel(lg, lc)
                       << ", gradients " << eg << ", moving statistics " << es);
        CHECK(eg < 1e-2);
        CHECK(es < 1e-4);  // moving mean and variance
        opt.step(cpu.parameters(), 0.1);
      }
    }
  }
}

TEST_CASE("Cycling batch sizes 128/100/37 for 200 training passes keeps the GPU's free memory stable",
          "[backend][cuda][model][memory]") {
  if (!have_gpu()) return;
  // Every buffer is sized once per geometry (activations, staging, cuDNN
  // workspaces, algorithm choices): after one pass at each size, nothing may
  // grow, whatever the order of the sizes.
  using Net = ResNetCifar<>;
  const DataFormat fmt = DataFormat::NHWC;
  Model<Net, backend::Cuda> gpu({3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  Rng rng(12);
  const std::size_t sizes[] = {128, 100, 37};
  auto pass = [&](std::size_t n) {
    Tensor<float> x = make_tensor<float>({n, 3, 32, 32}, fmt);
    for (auto& v : x) v = float(rng.normal());
    std::vector<std::int32_t> labels(n);
    for (auto& l : labels) l = std::int32_t(rng.uniform_int(10));
    Tensor<float> dy;
    softmax_cross_entropy(gpu.forward(x, Mode::Train), labels, &dy);
    gpu.backward(dy);
  };
  auto free_bytes = [] {
    std::size_t free = 0, total = 0;
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
    return free;
  };
  for (std::size_t n : sizes) pass(n);
  const std::size_t before = free_bytes();
  for (int i = 0; i < 200; ++i) pass(sizes[(i * 7 + i / 3) % 3]);
  const std::size_t after = free_bytes();
  INFO("free before " << before << " B, after " << after << " B");
  CHECK(after + (1u << 20) >= before);  // less than 1 MiB may go to the driver's own bookkeeping
}

TEST_CASE("Without a GPU the CUDA device is a clear error, never a crash", "[backend][cuda]") {
  if (backend::cuda::device_count() > 0) {
    // With a GPU: an ordinal past the last device is the error instead.
    CHECK_THROWS_WITH(Device<backend::Cuda>(backend::cuda::device_count()), Catch::Contains("requested"));
    return;
  }
  CHECK_THROWS_WITH(Device<backend::Cuda>(), Catch::Contains("no usable GPU"));
  CHECK_THROWS_AS((Model<ResNetCifar<>, backend::Cuda>({3, 32, 32}, DataFormat::NHWC, NetOptions(), 1)),
                  BackendError);
}

TEST_CASE("Staged outputs start as NaN: an op that writes nothing returns NaN, not stale data",
          "[backend][cuda]") {
  if (!have_gpu()) return;
  Device<backend::Cuda> dev(0);
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
  {  // an op that writes its output leaves zeros in the staging buffer
    backend::cuda::Staging st(dev);
    float* d = st.out(a.data(), a.size());
    backend::cuda::check(cudaMemsetAsync(d, 0, a.size() * sizeof(float), dev.stream()), "memset");
    st.finish();
  }
  CHECK(a[0] == 0.0f);
  {  // the next op, in the same staging slot, writes nothing
    backend::cuda::Staging st(dev);
    (void)st.out(b.data(), b.size());
    st.finish();
  }
  std::size_t nan = 0;
  for (float v : b) nan += std::isnan(v) ? 1 : 0;
  CHECK(nan == b.size());
}

TEST_CASE("A model built on GPU 1 runs and allocates on GPU 1 from a thread whose current GPU is 0",
          "[backend][cuda]") {
  const int n = backend::cuda::device_count();
  if (n < 2) {
    WARN("SKIPPED: needs two GPUs (" << n << " present; " << backend::cuda::no_device_reason() << ")");
    return;
  }
  using Gpu = Model<ResNetCifar<>, backend::Cuda>;
  const DataFormat fmt = DataFormat::NHWC;
  Gpu on0(std::make_unique<Device<backend::Cuda>>(0), {3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  backend::cuda::check(cudaSetDevice(0), "cudaSetDevice");
  Gpu on1(std::make_unique<Device<backend::Cuda>>(1), {3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  int current = -1;
  backend::cuda::check(cudaGetDevice(&current), "cudaGetDevice");
  CHECK(current == 0);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({8, 3, 32, 32}, fmt);
  for (auto& v : x) v = float(rng.normal());
  const Tensor<float> l1 = on1.forward(x, Mode::Train);
  const Tensor<float> l0 = on0.forward(x, Mode::Train);
  backend::cuda::check(cudaGetDevice(&current), "cudaGetDevice");
  CHECK(current == 0);  // the ops restored the caller's device
  CHECK(rel(l1, l0) < 1e-5);
  // Its buffers live on GPU 1.
  cudaPointerAttributes a{};
  backend::cuda::check(
      cudaPointerGetAttributes(&a, on1.device().buffer(Device<backend::Cuda>::kWorkspace, 1)),
      "cudaPointerGetAttributes");
  CHECK(a.device == 1);
}

TEST_CASE("Convolution algorithms: measured once per geometry, deterministic ones reproduce bit for bit",
          "[backend][cuda]") {
  if (!have_gpu()) return;
  Device<backend::Cuda> dev(0, backend::cuda::ConvOptions{false, true});
  auto& cache = backend::cuda::ConvAlgoCache::instance();
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {32, 16, 16, 16}, 32, 3, 1, Padding::Same);
  Rng rng(7);
  std::vector<float> x(g.in_shape().size()), w(3 * 3 * 16 * 32), dy(g.out_shape().size());
  for (auto& v : x) v = float(rng.normal());
  for (auto& v : w) v = float(rng.normal());
  for (auto& v : dy) v = float(rng.normal());
  std::vector<float> y1(dy.size()), y2(dy.size()), dw1(w.size()), dw2(w.size());
  const std::size_t before = cache.measured();
  ops::Conv2d<backend::Cuda, float> a, b;  // two layers of one geometry
  a.forward(dev, g, x.data(), w.data(), nullptr, y1.data());
  b.forward(dev, g, x.data(), w.data(), nullptr, y2.data());
  CHECK(cache.measured() == before + 1);
  CHECK(y1 == y2);
  a.backward_weights(dev, g, x.data(), dy.data(), dw1.data(), nullptr);
  b.backward_weights(dev, g, x.data(), dy.data(), dw2.data(), nullptr);
  CHECK(dw1 == dw2);
}

#ifdef CIFARNET_WITH_NCCL
#include <cifarnet/distributed/nccl.hpp>

TEST_CASE("NcclGroup averages one buffer per GPU (host buffers, staged)", "[backend][cuda][nccl]") {
  const int n = backend::cuda::device_count();
  if (n == 0) {  // the clear error, then the skip
    CHECK_THROWS_WITH(distributed::NcclGroup(1), Catch::Contains("GPUs requested, 0 present"));
    WARN("SKIPPED: NCCL needs a GPU (" << backend::cuda::no_device_reason() << ")");
    return;
  }
  {  // one Device per GPU: the same GPU twice is refused
    Device<backend::Cuda> d0(0);
    CHECK_THROWS_WITH(distributed::NcclGroup(std::vector<Device<backend::Cuda>*>{&d0, &d0}, 600),
                      Catch::Contains("given twice"));
  }
  distributed::NcclGroup group(n);
  const std::size_t len = 1000;
  std::vector<std::vector<float>> bufs(static_cast<std::size_t>(n), std::vector<float>(len, 0.0f));
  std::vector<float*> ptrs;
  for (int i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < len; ++j) bufs[std::size_t(i)][j] = float(i + 1) * float(j);
    ptrs.push_back(bufs[std::size_t(i)].data());
  }
  group.all_reduce_mean(ptrs, len);
  const float mean_factor = float(n + 1) / 2.0f;
  for (const auto& b : bufs)
    for (std::size_t j = 0; j < len; ++j) REQUIRE(b[j] == Approx(mean_factor * float(j)));
  group.all_reduce_sum(ptrs, len);
  for (const auto& b : bufs)
    for (std::size_t j = 0; j < len; ++j) REQUIRE(b[j] == Approx(float(n) * mean_factor * float(j)));
}

#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>

TEST_CASE("Towers on two GPUs with NCCL train like towers on the CPU (the seed's --num-gpus 2)",
          "[backend][cuda][nccl][towers]") {
  const int n = backend::cuda::device_count();
  if (n < 2) {
    WARN("SKIPPED: towers over GPUs need two GPUs (" << n << " present; " << backend::cuda::no_device_reason()
                                                     << ")");
    return;
  }
  using Gpu = Model<ResNetCifar<>, backend::Cuda>;
  using Cpu = Model<ResNetCifar<>, backend::OneDnn>;
  const DataFormat fmt = DataFormat::NHWC;
  distributed::Towers<Gpu> gpu(
      2, {3, 32, 32}, fmt, NetOptions().with_repeat(1), 5,
      [](std::size_t i) { return std::make_unique<Device<backend::Cuda>>(int(i)); },
      std::make_unique<distributed::NcclTowerReducer>(2));
  distributed::Towers<Cpu> cpu(2, {3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  CHECK(std::string(gpu.reducer().name()) == "NCCL");
  Rng rng(4);
  std::vector<train::Batch> batches(3);
  for (auto& b : batches) {
    b.images = make_tensor<float>({8, 3, 32, 32}, fmt);
    for (auto& v : b.images) v = float(rng.normal());
    for (int i = 0; i < 8; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  }
  auto train = [&](auto& net) {
    using N = std::decay_t<decltype(net)>;
    optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), optim::WeightDecayOptions(2e-4),
                                                          optim::MomentumOptions().momentum(0.9));
    train::Trainer<N> t(net, train::TrainerOptions().max_steps(3));
    t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
    std::size_t i = 0;
    t.run([&]() -> const train::Batch& { return batches[i++]; });
  };
  train(gpu);
  train(cpu);
  CHECK(rel(gpu.parameters().values(), cpu.parameters().values()) < 1e-4);
  CHECK(rel(gpu.parameters().state(), cpu.parameters().state()) < 1e-4);
  // Evaluation with fewer examples than towers, and with an uneven split.
  for (std::size_t m : {1, 7}) {
    Tensor<float> x = make_tensor<float>({m, 3, 32, 32}, fmt);
    for (auto& v : x) v = float(rng.normal());
    CHECK(rel(gpu.forward(x, Mode::Infer), cpu.forward(x, Mode::Infer)) < 1e-4);
  }
}
#endif

#include <cifarnet/vision/losses.hpp>

TEST_CASE("Gram matrices and the style loss's gradient on the GPU match oneDNN's",
          "[backend][cuda][vision]") {
  if (!have_gpu()) return;
  Rng rng(9);
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    Tensor<float> f = make_tensor<float>({1, 24, 7, 9}, fmt);
    for (auto& v : f) v = float(rng.normal());
    std::vector<float> gg, gc;
    vision::gram_matrix<backend::Cuda>(f, fmt, gg);
    vision::gram_matrix<backend::OneDnn>(f, fmt, gc);
    CHECK(rel(Eigen::Map<Eigen::ArrayXf>(gg.data(), Eigen::Index(gg.size())),
              Eigen::Map<Eigen::ArrayXf>(gc.data(), Eigen::Index(gc.size()))) < 1e-5);
    Tensor<float> other = f;
    for (auto& v : other) v = float(rng.normal());
    const auto target = vision::make_gram_target<backend::OneDnn>(other, fmt);
    std::vector<float> work, dg(f.size(), 0.5f), dc(f.size(), 0.5f);  // gradients are added
    const double lg = vision::style_layer_loss<backend::Cuda>(f, fmt, target, work, dg.data());
    const double lc = vision::style_layer_loss<backend::OneDnn>(f, fmt, target, work, dc.data());
    CHECK(lg == Approx(lc).epsilon(1e-5));
    CHECK(rel(Eigen::Map<Eigen::ArrayXf>(dg.data(), Eigen::Index(dg.size())),
              Eigen::Map<Eigen::ArrayXf>(dc.data(), Eigen::Index(dc.size()))) < 1e-5);
  }
}

TEST_CASE("PCIe traffic of one ResNet-20 training step at batch 128, read from the device's counters",
          "[backend][cuda][model][transfers]") {
  if (!have_gpu()) return;
  // The figures docs/SCALING.md quotes: the bytes and copies the backend
  // issued for one Trainer step (the path of resnet_cifar10 --num-gpus 1),
  // counted by Device::transfers() around the second step (the first one
  // also builds plans and measures algorithms).
  using Net = ResNetCifar<>;
  const std::size_t n = 128;
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    Model<Net, backend::Cuda> gpu({3, 32, 32}, fmt, resnet_options(20), 5);
    Rng rng(8);
    train::Batch b;
    b.images = make_tensor<float>({n, 3, 32, 32}, fmt);
    for (auto& v : b.images) v = float(rng.normal());
    for (std::size_t i = 0; i < n; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
    optim::Chain<optim::WeightDecay, optim::Momentum> opt(gpu.parameters(), optim::WeightDecayOptions(2e-4),
                                                          optim::MomentumOptions().momentum(0.9));
    train::Trainer<Model<Net, backend::Cuda>> t(gpu, train::TrainerOptions().max_steps(3));
    t.set_optimizer(opt, [](std::int64_t) { return 0.1; });
    t.step(b);
    gpu.device().transfers().reset();
    t.step(b);
    const backend::cuda::TransferCounts c = gpu.device().transfers().reset();
    const double mb = 1.0 / (1 << 20);
    WARN("PCIe per ResNet-20 step, batch 128, "
         << to_string(fmt) << ": host->device " << double(c.h2d_bytes) * mb << " MiB in " << c.h2d_copies
         << " copies, device->host " << double(c.d2h_bytes) * mb << " MiB in " << c.d2h_copies
         << " copies, total " << double(c.bytes()) * mb << " MiB");
    CHECK(c.h2d_bytes >= b.images.size() * sizeof(float));  // the batch went up at least once
    CHECK(c.d2h_bytes >= sizeof(float));                    // the loss came back

    // The GPU optimizer on a host arena: values and gradients up, values
    // back, and its slot (device-resident, mirrored lazily) never moves.
    optim::cuda::Momentum<> gopt(gpu.device(), gpu.parameters(), optim::MomentumOptions().momentum(0.9));
    gopt.step(gpu.parameters(), 0.1);
    gpu.device().transfers().reset();
    gopt.step(gpu.parameters(), 0.1);
    const backend::cuda::TransferCounts o = gpu.device().transfers().reset();
    const std::uint64_t arena = gpu.parameters().values().size() * sizeof(float);
    CHECK(o.h2d_bytes == 2 * arena);
    CHECK(o.d2h_bytes == arena);
    CHECK(o.h2d_copies == 2);
    CHECK(o.d2h_copies == 1);
    // A checkpoint's visit downloads the slot once; the next step uploads it once.
    gopt.visit_state([](auto&&...) {});
    CHECK(gpu.device().transfers().read().d2h_bytes == arena);
    gopt.step(gpu.parameters(), 0.1);
    CHECK(gpu.device().transfers().read().h2d_bytes == 3 * arena);
  }
}

TEST_CASE("A device-resident parameter arena trains like the staged one and moves no arena bytes per step",
          "[backend][cuda][model][transfers][resident]") {
  if (!have_gpu()) return;
  // Model::set_device_resident: the arena (values, gradients, BN state) on
  // the GPU, used in place by every op; optim::cuda::Momentum keeps its slot
  // there too. Against the same model staged op by op: the same losses and
  // weights, and per step the arena's bytes no longer cross PCIe (the
  // activations still do: they are host tensors until device activations
  // land, docs/ARCHITECTURE.md "Storage").
  using Net = ResNetCifar<>;
  using M = Model<Net, backend::Cuda>;
  const std::size_t n = 128;
  const DataFormat fmt = DataFormat::NHWC;
  M staged({3, 32, 32}, fmt, resnet_options(20), 5), resident({3, 32, 32}, fmt, resnet_options(20), 5);
  // Deterministic convolution algorithms on both, so the two runs do the
  // same arithmetic in the same order and must agree bit for bit: residency
  // moves where the arena lives, not what is computed.
  for (M* m : {&staged, &resident}) {
    backend::cuda::ConvOptions o = m->device().conv_options();
    o.deterministic = true;
    m->device().set_conv_options(o);
  }
  resident.set_device_resident(true);
  CHECK(resident.device_resident());
  Rng rng(9);
  std::vector<train::Batch> batches(3);
  for (auto& b : batches) {
    b.images = make_tensor<float>({n, 3, 32, 32}, fmt);
    for (auto& v : b.images) v = float(rng.normal());
    for (std::size_t i = 0; i < n; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  }
  backend::cuda::TransferCounts last[2];
  std::vector<double> losses[2];
  int side = 0;
  for (M* m : {&staged, &resident}) {
    optim::cuda::Momentum<> opt(m->device(), m->parameters(), optim::MomentumOptions().momentum(0.9));
    train::Trainer<M> t(*m, train::TrainerOptions().max_steps(3));
    t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
    for (std::size_t i = 0; i < batches.size(); ++i) {
      if (i + 1 == batches.size()) m->device().transfers().reset();
      losses[side].push_back(t.step(batches[i]).total_loss);
    }
    last[side] = m->device().transfers().reset();
    ++side;
  }
  const double mb = 1.0 / (1 << 20);
  for (int k = 0; k < 2; ++k)
    WARN((k ? "device-resident arena" : "staged arena")
         << ": PCIe per ResNet-20 step (batch 128, NHWC, optim::cuda::Momentum): host->device "
         << double(last[k].h2d_bytes) * mb << " MiB in " << last[k].h2d_copies << " copies, device->host "
         << double(last[k].d2h_bytes) * mb << " MiB in " << last[k].d2h_copies << " copies");
  for (std::size_t i = 0; i < losses[0].size(); ++i) CHECK(losses[1][i] == losses[0][i]);
  const std::uint64_t arena = staged.parameters().values().size() * sizeof(float);
  CHECK(last[1].bytes() + 3 * arena <= last[0].bytes());
  const auto& host = resident.sync_parameters_to_host();
  // The parameter that differs most, by name, to say where a difference is.
  const Parameters<float>& ref = std::as_const(staged).parameters();
  std::string worst;
  double worst_rel = 0;
  host.for_each([&](const ParamInfo& info, const float* v, const float*) {
    const std::size_t id = ref.id(info.name);
    const float* r = ref.value(id);
    double e = 0, n = 0;
    for (std::size_t k = 0; k < info.size; ++k) {
      e += (double(v[k]) - double(r[k])) * (double(v[k]) - double(r[k]));
      n += double(r[k]) * double(r[k]);
    }
    const double q = n > 0 ? std::sqrt(e / n) : std::sqrt(e);
    if (q > worst_rel) worst_rel = q, worst = info.name;
  });
  WARN("resident vs staged after 3 steps: values "
       << rel(host.values(), staged.parameters().values()) << ", state "
       << rel(host.state(), staged.parameters().state())
       << "; most different parameter: " << (worst.empty() ? "none" : worst) << " (" << worst_rel << ")");
  CHECK(rel(host.values(), staged.parameters().values()) == 0.0);
  CHECK(rel(host.state(), staged.parameters().state()) == 0.0);
  // A host write (a restore) reaches the device before the next op.
  resident.host_parameters().values() = staged.parameters().values();
  resident.host_parameters().state() = staged.parameters().state();
  CHECK(rel(resident.forward(batches[0].images, Mode::Infer),
            staged.forward(batches[0].images, Mode::Infer)) < 1e-4);
}
