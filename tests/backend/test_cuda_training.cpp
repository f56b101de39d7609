// Training on GPUs against the CPU (tests/backend/test_cuda_model.cpp has the
// models' forward and backward): NCCL averaging, towers on two GPUs (and two
// towers sharing one GPU with the host reducer, what one GPU can run), the
// style losses' Gram matrices, one step's PCIe traffic, and a
// device-resident parameter arena. Skipped when no GPU is present.
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>
#include "instances/resnet.hpp"
#include "instances/cuda.hpp"

#include "cuda_support.hpp"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace cifarnet;
using cuda_test::have_gpu;

namespace {
/// `count` batches of n normal images (3x32x32, format fmt) and labels in [0, 10), from Rng(seed).
std::vector<cifarnet::train::Batch> random_batches(std::size_t count, std::size_t n, cifarnet::DataFormat fmt,
                                                   std::uint64_t seed) {
  cifarnet::Rng rng(seed);
  std::vector<cifarnet::train::Batch> batches(count);
  for (auto& b : batches) {
    b.images = cifarnet::make_tensor<float>({n, 3, 32, 32}, fmt);
    for (auto& v : b.images) v = float(rng.normal());
    for (std::size_t i = 0; i < n; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  }
  return batches;
}
}  // namespace
using cuda_test::rel;

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

#endif

#include <cifarnet/distributed/towers.hpp>

namespace {
// Two ResNet-8 towers on GPUs (tower i on device_of(i), gradients summed by
// `reducer`, or by the host reducer when it is null; `resident`: the
// arenas on the devices) train 3 momentum steps like two towers on the
// CPU: variables and slots within 1e-4, tower 1 holding tower 0's
// variables after the next forward's broadcast, evaluation with fewer
// examples than towers and with an uneven split. Inputs are pixel values
// in [0, 255]: N(0, 1) values through ResNet's x/128 - 1 are nearly the
// constant -1, whose batch norm cancels most digits, and two float
// backends then differ by 1e-4 in the first gradients (measured on an
// H100: towers or not, one tower or two), which 3 steps amplify to 1e-3.
void check_towers_against_cpu(int (*device_of)(std::size_t),
                              std::unique_ptr<distributed::TowerReducer<float>> reducer, bool resident,
                              const char* reducer_name) {
  using Gpu = Model<ResNetCifar<>, backend::Cuda>;
  using Cpu = Model<ResNetCifar<>, backend::OneDnn>;
  const DataFormat fmt = DataFormat::NHWC;
  distributed::Towers<Gpu> gpu(
      2, {3, 32, 32}, fmt, NetOptions().with_repeat(1), 5,
      [device_of](std::size_t i) { return std::make_unique<Device<backend::Cuda>>(device_of(i)); },
      std::move(reducer));
  if (resident) gpu.set_device_resident(true);
  distributed::Towers<Cpu> cpu(2, {3, 32, 32}, fmt, NetOptions().with_repeat(1), 5);
  CHECK(std::string(gpu.reducer().name()) == reducer_name);
  Rng rng(4);
  std::vector<train::Batch> batches(3);
  for (auto& b : batches) {
    b.images = make_tensor<float>({8, 3, 32, 32}, fmt);
    for (auto& v : b.images) v = float(rng.uniform_int(256));  // pixel values, as the network expects
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
  const Parameters<float>& g = gpu.sync_parameters_to_host();
  CHECK(rel(g.values(), cpu.parameters().values()) < 1e-4);
  CHECK(rel(g.state(), cpu.parameters().state()) < 1e-4);
  if (resident) {  // tower 1 holds tower 0's variables after the next forward's broadcast
    (void)gpu.forward(batches[0].images, Mode::Infer);
    CHECK(rel(gpu.tower(1).sync_parameters_to_host().values(), g.values()) == 0.0);
  }
  // Evaluation with fewer examples than towers, and with an uneven split.
  for (std::size_t m : {1, 7}) {
    Tensor<float> x = make_tensor<float>({m, 3, 32, 32}, fmt);
    for (auto& v : x) v = float(rng.uniform_int(256));
    CHECK(rel(gpu.forward(x, Mode::Infer), cpu.forward(x, Mode::Infer)) < 1e-4);
  }
}
}  // namespace

#ifdef CIFARNET_WITH_NCCL
TEST_CASE("Towers on two GPUs with NCCL train like towers on the CPU (the seed's --num-gpus 2)",
          "[backend][cuda][nccl][towers]") {
  const int n = backend::cuda::device_count();
  if (n < 2) {
    WARN("SKIPPED: towers over GPUs need two GPUs (" << n << " present; " << backend::cuda::no_device_reason()
                                                     << ")");
    return;
  }
  // Host arenas (staged NCCL), device-resident arenas (ncclBroadcast and
  // ncclAllReduce in place, --variable-strategy GPU), and device-resident
  // arenas with the host reducer (--variable-strategy CPU).
  const int variant = GENERATE(0, 1, 2);
  INFO("variant " << (variant == 0   ? "host arenas, NCCL"
                      : variant == 1 ? "resident, NCCL"
                                     : "resident, host sum"));
  std::unique_ptr<distributed::TowerReducer<float>> reducer;
  if (variant < 2) reducer = std::make_unique<distributed::NcclTowerReducer>(2);
  check_towers_against_cpu([](std::size_t i) { return int(i); }, std::move(reducer), variant > 0,
                           variant < 2 ? "NCCL" : "host");
}
#endif

TEST_CASE("Two towers sharing one GPU, gradients summed on the host, train like towers on the CPU",
          "[backend][cuda][towers]") {
  // What a one-GPU machine can run of the towers' device path: two Device
  // objects (two streams, two arenas) on GPU 0, the examples dealt
  // round-robin, the host reducer (--variable-strategy CPU), with host
  // arenas and with device-resident ones (arenas down for the sum, back up,
  // the broadcast from tower 0). NCCL needs distinct GPUs (the case above).
  if (!have_gpu()) return;
  const bool resident = GENERATE(false, true);
  INFO((resident ? "device-resident arenas" : "host arenas"));
  check_towers_against_cpu([](std::size_t) { return 0; }, nullptr, resident, "host");
}

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
    const train::Batch b = random_batches(1, n, fmt, 8)[0];
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

TEST_CASE(
    "The whole Trainer step on the GPU: device activations and arena train as the staged path, bit for bit",
    "[backend][cuda][model][transfers][resident]") {
  if (!have_gpu()) return;
  // Two ResNet-20s from one seed, trained 3 steps by the same Trainer and
  // optimizer chain (weight decay, momentum, an EMA of the weights):
  //   staged   — every tensor a host tensor, staged op by op (the debug path:
  //              set_device_activations(false), arena on the host);
  //   resident — the default device activations and gradients, plus the
  //              arena, the momentum slot and the EMA shadow on the GPU
  //              (set_device_resident before the optimizers are made), so the
  //              loss, weight decay, numerics check, momentum and EMA run
  //              through the NVRTC kernels.
  // Deterministic convolution algorithms on both: the same arithmetic in the
  // same order, so the losses, the weights, the moving statistics and the EMA
  // shadows must agree bit for bit; and per step the resident model moves the
  // batch up and a few scalars back, nothing else.
  using Net = ResNetCifar<>;
  using M = Model<Net, backend::Cuda>;
  const std::size_t n = 128;
  const DataFormat fmt = DataFormat::NHWC;
  M staged({3, 32, 32}, fmt, resnet_options(20), 5), resident({3, 32, 32}, fmt, resnet_options(20), 5);
  for (M* m : {&staged, &resident}) {
    backend::cuda::ConvOptions o = m->device().conv_options();
    o.deterministic = true;
    m->device().set_conv_options(o);
  }
  staged.set_device_activations(false);
  CHECK(resident.device_activations());
  resident.set_device_resident(true);
  CHECK(resident.device_resident());
  const std::vector<train::Batch> batches = random_batches(3, n, fmt, 9);
  backend::cuda::TransferCounts last[2];
  std::vector<double> losses[2];
  std::vector<float> shadows[2];
  int side = 0;
  for (M* m : {&staged, &resident}) {
    optim::Chain<optim::WeightDecay, optim::Momentum> opt(m->parameters(), optim::WeightDecayOptions(2e-4),
                                                          optim::MomentumOptions().momentum(0.9));
    optim::ExponentialMovingAverage<float> ema(m->parameters(), optim::ExponentialMovingAverageOptions(0.9));
    train::Trainer<M> t(*m, train::TrainerOptions().max_steps(3));
    t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
    t.add_update([&](Parameters<float>& p, std::int64_t step) { ema.apply(p, step); });
    for (std::size_t i = 0; i < batches.size(); ++i) {
      if (i + 1 == batches.size()) m->device().transfers().reset();
      losses[side].push_back(t.step(batches[i]).total_loss);
    }
    last[side] = m->device().transfers().reset();
    // The step's weight decay term stays readable after an evaluation (whose
    // losses come back through the device's other read-back area).
    const double term = opt.get<0>().loss();
    CHECK(term > 0);
    const auto e = train::evaluate(
        *m, [&]() -> const train::Batch& { return batches[0]; }, 3);
    CHECK(e.total == 3 * n);
    CHECK(opt.get<0>().loss() == term);
    (void)t.state_dict();  // a checkpoint: every host copy current (the EMA shadow's too)
    ema.visit_state([&](const std::string&, const float* v, const auto& shape) {
      std::size_t k = 1;
      for (std::size_t d : shape) k *= d;
      shadows[side].insert(shadows[side].end(), v, v + k);
    });
    ++side;
  }
  const double mb = 1.0 / (1 << 20);
  for (int k = 0; k < 2; ++k)
    WARN(
        (k ? "device-resident step" : "staged step")
        << ": PCIe per ResNet-20 Trainer step (batch 128, NHWC, weight decay + momentum + EMA): host->device "
        << double(last[k].h2d_bytes) * mb << " MiB in " << last[k].h2d_copies << " copies, device->host "
        << double(last[k].d2h_bytes) * mb << " MiB in " << last[k].d2h_copies << " copies");
  for (std::size_t i = 0; i < losses[0].size(); ++i)
    CHECK(losses[1][i] ==
          Approx(losses[0][i]).epsilon(1e-12));  // weight decay's Σv² adds blocks, not elements
  const std::uint64_t batch_bytes = n * 3 * 32 * 32 * sizeof(float) + n * sizeof(std::int32_t);
  CHECK(last[1].h2d_bytes >= n * 3 * 32 * 32 * sizeof(float));  // the batch went up
  CHECK(last[1].h2d_bytes <= batch_bytes + 4096);               // and nothing else of size
  CHECK(last[1].d2h_bytes <= 64 * 1024);                        // the loss, Σv² partial sums, flags
  // One read back per step: the loss rows, the weight decay's and the
  // numerics check's partial sums wait in the read-back area for one copy
  // (core/pending.hpp); up go the batch (through the pinned input ring, on
  // its copy stream) and the labels.
  CHECK(last[1].d2h_copies == 1);
  CHECK(last[1].h2d_copies == 2);
  CHECK(resident.device().input_ring().pinned());
  CHECK(resident.device().input_ring().uploads() == batches.size() + 3);  // 3 steps, 3 evaluation batches
  CHECK(last[0].bytes() > 100 * last[1].bytes());
  const auto& host = resident.sync_parameters_to_host();
  // The parameter that differs most, by name, to say where a difference is.
  const Parameters<float>& ref = std::as_const(staged).parameters();
  std::string worst;
  double worst_rel = 0;
  host.for_each([&](const ParamInfo& info, const float* v, const float*) {
    const std::size_t id = ref.id(info.name);
    const float* r = ref.value(id);
    double e = 0, q2 = 0;
    for (std::size_t k = 0; k < info.size; ++k) {
      e += (double(v[k]) - double(r[k])) * (double(v[k]) - double(r[k]));
      q2 += double(r[k]) * double(r[k]);
    }
    const double q = q2 > 0 ? std::sqrt(e / q2) : std::sqrt(e);
    if (q > worst_rel) worst_rel = q, worst = info.name;
  });
  WARN("resident vs staged after 3 steps: values "
       << rel(host.values(), staged.parameters().values()) << ", state "
       << rel(host.state(), staged.parameters().state())
       << "; most different parameter: " << (worst.empty() ? "none" : worst) << " (" << worst_rel << ")");
  CHECK(rel(host.values(), staged.parameters().values()) == 0.0);
  CHECK(rel(host.state(), staged.parameters().state()) == 0.0);
  REQUIRE(shadows[0].size() == shadows[1].size());
  CHECK(shadows[0] == shadows[1]);
  // A host write (a restore) reaches the device before the next op.
  resident.host_parameters().values() = staged.parameters().values();
  resident.host_parameters().state() = staged.parameters().state();
  CHECK(rel(resident.forward(batches[0].images, Mode::Infer),
            staged.forward(batches[0].images, Mode::Infer)) < 1e-4);
}

TEST_CASE(
    "A device-resident GPU model checkpoints and resumes exactly: state_dict sees the device, a restore "
    "reaches it",
    "[backend][cuda][model][resident]") {
  if (!have_gpu()) return;
  // The Trainer's sync points with a resident arena and adopted momentum
  // slots: state_dict() must read the device's values and slots (not the
  // stale host copies), load_state_dict() must reach the device before the
  // next step. A model restored into a differently initialised twin then
  // takes the next step exactly as the original (deterministic algorithms).
  using Net = ResNetCifar<>;
  using M = Model<Net, backend::Cuda>;
  const DataFormat fmt = DataFormat::NCHW;
  const std::size_t n = 32;
  const std::vector<train::Batch> batches = random_batches(3, n, fmt, 21);
  struct Run {
    M m;
    optim::Chain<optim::WeightDecay, optim::Momentum> opt;
    train::Trainer<M> t;
    explicit Run(std::uint64_t seed)
        : m({3, 32, 32}, DataFormat::NCHW, resnet_options(8), seed),
          opt((init(m), m.parameters()), optim::WeightDecayOptions(2e-4),
              optim::MomentumOptions().momentum(0.9)),
          t(m, train::TrainerOptions().max_steps(10)) {
      t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
    }
    static int init(M& m) {
      backend::cuda::ConvOptions o = m.device().conv_options();
      o.deterministic = true;
      m.device().set_conv_options(o);
      m.set_device_resident(true);  // before the optimizer: its slot is adopted
      return 0;
    }
  };
  Run a(5);
  a.t.step(batches[0]);
  a.t.step(batches[1]);
  const auto saved = a.t.state_dict();
  const double next = a.t.step(batches[2]).total_loss;
  Run b(77);  // other initial weights: the restore must replace them on the device
  b.t.load_state_dict(saved);
  CHECK(b.t.global_step() == 2);
  const double resumed = b.t.step(batches[2]).total_loss;
  CHECK(resumed == next);
  const auto& va = a.m.sync_parameters_to_host();
  const auto& vb = b.m.sync_parameters_to_host();
  CHECK(rel(vb.values(), va.values()) == 0.0);
  CHECK(rel(vb.state(), va.state()) == 0.0);
}

TEST_CASE("Byte batches go up through the input ring as bytes and train as float batches, bit for bit",
          "[backend][cuda][model][transfers][bytes]") {
  if (!have_gpu()) return;
  // Two resident ResNet-20s from one seed (deterministic convolutions), one
  // fed float batches, one the same images as bytes (the ResNet pipeline's
  // byte_pixels): the bytes go up (a quarter of the float batch) and
  // Eltwise::from_bytes makes the float input on the GPU, so both train to
  // the same bits.
  using M = Model<ResNetCifar<>, backend::Cuda>;
  const std::size_t n = 128;
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    M a({3, 32, 32}, fmt, resnet_options(20), 5), b({3, 32, 32}, fmt, resnet_options(20), 5);
    Rng rng(12);
    std::vector<train::Batch> floats(3), bytes(3);
    for (std::size_t k = 0; k < floats.size(); ++k) {
      bytes[k].pixel_height = bytes[k].pixel_width = 32;
      bytes[k].pixel_channels = 3;
      bytes[k].pixels.resize(n * 3072);
      for (auto& p : bytes[k].pixels) p = std::uint8_t(rng.uniform_int(256));
      for (std::size_t i = 0; i < n; ++i) bytes[k].labels.push_back(std::int32_t(rng.uniform_int(10)));
      floats[k].labels = bytes[k].labels;
      pixels_to_images(bytes[k], fmt, floats[k].images);
    }
    std::vector<double> losses[2];
    backend::cuda::TransferCounts last[2];
    int side = 0;
    for (M* m : {&a, &b}) {
      backend::cuda::ConvOptions o = m->device().conv_options();
      o.deterministic = true;
      m->device().set_conv_options(o);
      m->set_device_resident(true);
      optim::Chain<optim::WeightDecay, optim::Momentum> opt(m->parameters(), optim::WeightDecayOptions(2e-4),
                                                            optim::MomentumOptions().momentum(0.9));
      train::Trainer<M> t(*m, train::TrainerOptions().max_steps(3));
      t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
      const auto& batches = side == 0 ? floats : bytes;
      for (std::size_t i = 0; i < batches.size(); ++i) {
        if (i + 1 == batches.size()) m->device().transfers().reset();
        losses[side].push_back(t.step(batches[i]).total_loss);
      }
      last[side] = m->device().transfers().reset();
      ++side;
    }
    CHECK(losses[0] == losses[1]);
    CHECK(rel(a.sync_parameters_to_host().values(), b.sync_parameters_to_host().values()) == 0.0);
    CHECK(rel(a.sync_parameters_to_host().state(), b.sync_parameters_to_host().state()) == 0.0);
    const std::uint64_t labels = n * sizeof(std::int32_t);
    CHECK(last[0].h2d_bytes == n * 3072 * sizeof(float) + labels);
    CHECK(last[1].h2d_bytes == n * 3072 + labels);  // a quarter of the images' bytes
    CHECK(last[1].h2d_copies == 2);
    CHECK(last[1].d2h_copies == 1);
  }
}

TEST_CASE("With CUDA graphs on, training replays each step's segments as graphs and gives the same bits",
          "[backend][cuda][model][graphs]") {
  if (!have_gpu()) return;
  // A resident ResNet-20 at batch 128 (deterministic convolutions) trained
  // 8 steps with the launch queue off, then the same from the same seed with
  // it on (one model at a time: graphs need the GPU's tensor memory to
  // themselves). Batches alternate between two (the input ring's two
  // slots), and the learning rate drops at step 5 (a new scalar: the
  // optimizer's segment is new, not a stale replay). Losses, weights and
  // BN statistics must agree bit for bit, and from the third step on the
  // step's work must run as replayed graphs.
  using M = Model<ResNetCifar<>, backend::Cuda>;
  const std::size_t n = 128;
  const DataFormat fmt = DataFormat::NHWC;
  const std::vector<train::Batch> batches = random_batches(2, n, fmt, 31);
  struct Out {
    std::vector<double> losses;
    std::vector<float> values, state;
    backend::cuda::LaunchQueueStats stats;
    std::vector<std::uint64_t> replayed_per_step;
  };
  const auto run = [&](bool graphs) {
    Out o;
    M m({3, 32, 32}, fmt, resnet_options(20), 7);
    backend::cuda::ConvOptions c = m.device().conv_options();
    c.deterministic = true;
    m.device().set_conv_options(c);
    m.set_device_resident(true);
    m.device().set_graphs(graphs);
    CHECK(m.device().graphs() == graphs);
    optim::Chain<optim::WeightDecay, optim::Momentum> opt(m.parameters(), optim::WeightDecayOptions(2e-4),
                                                          optim::MomentumOptions().momentum(0.9));
    train::Trainer<M> t(m, train::TrainerOptions().max_steps(8));
    t.set_optimizer(opt, [](std::int64_t step) { return step < 5 ? 0.1 : 0.01; });
    std::uint64_t before = 0;
    for (int i = 0; i < 8; ++i) {
      o.losses.push_back(t.step(batches[std::size_t(i) % 2]).total_loss);
      o.replayed_per_step.push_back(m.device().graph_stats().replayed_items - before);
      before = m.device().graph_stats().replayed_items;
    }
    const auto& p = m.sync_parameters_to_host();
    o.values.assign(p.values().data(), p.values().data() + p.values().size());
    o.state.assign(p.state().data(), p.state().data() + p.state().size());
    o.stats = m.device().graph_stats();
    return o;
  };
  const Out eager = run(false), graphed = run(true);
  CHECK(eager.losses == graphed.losses);
  CHECK(eager.values == graphed.values);
  CHECK(eager.state == graphed.state);
  CHECK(eager.stats.submitted == 0);
  const auto& s = graphed.stats;
  INFO("submitted " << s.submitted << ", segments " << s.flushes << " (eager " << s.eager_segments
                    << ", captured " << s.captures << ", replayed " << s.replays << "), disabled: '"
                    << s.disabled << "', last eager: '" << s.last_eager << "'");
  CHECK(s.disabled.empty());
  CHECK(s.replays > 0);
  for (int i = 3; i < 8; ++i) {
    INFO("step " << i + 1);
    if (i != 4 && i != 5) CHECK(graphed.replayed_per_step[std::size_t(i)] > 100);  // steps 5, 6: a new rate
  }
  WARN("CUDA graphs, ResNet-20 at batch 128, 8 steps: "
       << s.submitted << " launches queued, " << s.replays << " segments replayed (" << s.replayed_items
       << " launches), " << s.captures << " captured, " << s.eager_segments
       << " item by item (last: " << s.last_eager << ")");
}

TEST_CASE("CUDA graphs stay off while a second Device shares the GPU, and training is unchanged",
          "[backend][cuda][model][graphs]") {
  if (!have_gpu()) return;
  using M = Model<ResNetCifar<>, backend::Cuda>;
  const std::vector<train::Batch> batches = random_batches(1, 16, DataFormat::NCHW, 3);
  M a({3, 32, 32}, DataFormat::NCHW, resnet_options(8), 1);
  Device<backend::Cuda> other(a.device().ordinal());  // its stream is attached to the same tensor memory
  a.set_device_resident(true);
  a.device().set_graphs(true);
  optim::Momentum<float> opt(a.parameters(), optim::MomentumOptions().momentum(0.9));
  train::Trainer<M> t(a, train::TrainerOptions().max_steps(3));
  t.set_optimizer(opt, [](std::int64_t) { return 0.05; });
  for (int i = 0; i < 3; ++i) CHECK(std::isfinite(t.step(batches[0]).total_loss));
  CHECK(a.device().graph_stats().submitted == 0);  // every launch ran at once
  CHECK(a.device().graph_stats().replays == 0);
}
