// Tests of distributed/towers.hpp on the CPU (the same code drives one GPU
// per tower; test_backend_cuda runs the CUDA towers when GPUs are present):
// N towers with a batch dealt round-robin (example i to tower i % N, as the
// seed's input_fn) train like one model with the whole batch (exactly like
// the seed's procedure done by hand, within rounding of one model for a
// network without batch norm), evaluation deals and puts rows back in
// place, uneven and tiny batches, both variable strategies to the same bits,
// and errors from a tower's thread.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>
#include "instances/resnet.hpp"
#include "instances/cifar10_cnn.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace cifarnet;
namespace dist = cifarnet::distributed;

namespace {

using OneDnnResNet = Model<ResNetCifar<>, backend::OneDnn>;
using RefResNet = Model<ResNetCifar<>, backend::Reference>;
using Cnn = Model<Cifar10Cnn, backend::OneDnn>;

std::vector<train::Batch> make_batches(std::size_t steps, std::size_t batch, DataFormat fmt, std::size_t hw) {
  std::vector<train::Batch> out(steps);
  Rng rng(42);
  for (auto& b : out) {
    b.images = make_tensor<float>({batch, 3, hw, hw}, fmt);
    for (auto& v : b.images) v = float(rng.uniform(-1, 1));
    for (std::size_t i = 0; i < batch; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  }
  return out;
}

double max_abs_diff(const Eigen::Ref<const Eigen::ArrayXf>& x, const Eigen::Ref<const Eigen::ArrayXf>& y) {
  double m = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) m = std::max(m, std::abs(double(x[i]) - double(y[i])));
  return m;
}
double max_abs(const Eigen::Ref<const Eigen::ArrayXf>& x) {
  double m = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) m = std::max(m, std::abs(double(x[i])));
  return m;
}

const double kLr = 0.05, kWd = 2e-4;

/// Trainer with momentum on `net` (a Model or Towers) over `batches`.
template <class NetT>
void train_on(NetT& net, const std::vector<train::Batch>& batches) {
  optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), optim::WeightDecayOptions(kWd),
                                                        optim::MomentumOptions().momentum(0.9));
  train::Trainer<NetT> t(net, train::TrainerOptions().max_steps(std::int64_t(batches.size())));
  t.set_optimizer(opt, [](std::int64_t) { return kLr; });
  std::size_t i = 0;
  t.run([&]() -> const train::Batch& { return batches[i++]; });
}

/// Rows [b, b + n) of a batch tensor.
Tensor<float> rows(const Tensor<float>& x, std::size_t b, std::size_t n) {
  auto shape = x.shape();
  const std::size_t per = x.size() / shape[0];
  shape[0] = n;
  Tensor<float> out(shape);
  std::memcpy(out.data(), x.data() + b * per, n * per * sizeof(float));
  return out;
}

/// Rows t, t + k, t + 2k, ... of a batch tensor: tower t's share of k towers
/// (written out here independently of Towers' own dealing).
Tensor<float> dealt(const Tensor<float>& x, std::size_t t, std::size_t k) {
  auto shape = x.shape();
  const std::size_t n = shape[0], per = x.size() / n;
  shape[0] = (n - t + k - 1) / k;
  Tensor<float> out(shape);
  for (std::size_t i = t, j = 0; i < n; i += k, ++j)
    std::memcpy(out.data() + j * per, x.data() + i * per, per * sizeof(float));
  return out;
}

/// The inverse: the rows of `part` (tower t's) to rows t, t + k, ... of `whole`.
void undeal(const Tensor<float>& part, std::size_t t, std::size_t k, Tensor<float>& whole) {
  const std::size_t per = part.size() / part.shape()[0];
  for (std::size_t j = 0; j < part.shape()[0]; ++j)
    std::memcpy(whole.data() + (t + j * k) * per, part.data() + j * per, per * sizeof(float));
}

}  // namespace

/// The seed's procedure by hand on two separate models, against Towers: the
/// batch of 6 dealt round-robin (tower 0 takes examples 0, 2, 4; tower 1
/// takes 1, 3, 5). With batch norm the towers' batch statistics depend on
/// which examples each tower holds, so this pins the dealing: contiguous
/// slices (0-2, 3-5) give other statistics and other bits.
template <class M>
void check_seed_procedure(const dist::TowersOptions& topts) {
  const DataFormat fmt = DataFormat::NHWC;
  const auto batches = make_batches(3, 6, fmt, 32);
  M a({3, 32, 32}, fmt, resnet_options(8), 7), b({3, 32, 32}, fmt, resnet_options(8), 7);
  optim::Momentum<float> opt(a.parameters(), optim::MomentumOptions().momentum(0.9));
  for (const auto& batch : batches) {
    b.parameters().values() = a.parameters().values();
    b.parameters().state() = a.parameters().state();
    Tensor<float> logits = make_tensor<float>(a.output_shape(6), fmt), dlogits;
    undeal(a.forward(dealt(batch.images, 0, 2), Mode::Train), 0, 2, logits);
    undeal(b.forward(dealt(batch.images, 1, 2), Mode::Train), 1, 2, logits);
    softmax_cross_entropy(logits, batch.labels, &dlogits);
    a.backward(dealt(dlogits, 0, 2));
    b.backward(dealt(dlogits, 1, 2));
    a.parameters().grads() += b.parameters().grads();
    optim::weight_decay(a.parameters(), kWd);
    opt.step(a.parameters(), kLr);
  }
  dist::Towers<M> towers(2, {3, 32, 32}, fmt, resnet_options(8), 7, {}, nullptr, topts);
  train_on(towers, batches);
  CHECK(max_abs_diff(towers.parameters().values(), a.parameters().values()) == 0.0);
  CHECK(max_abs_diff(towers.parameters().state(), a.parameters().state()) == 0.0);
  CHECK(std::string(towers.reducer().name()) == "host");
}

TEST_CASE(
    "Towers do what the seed's towers do: round-robin dealing, summed gradients, one update, tower 0's BN "
    "statistics",
    "[towers]") {
  SECTION("oneDNN, towers one after the other (the CPU default)") {
    CHECK_FALSE(dist::TowersOptions().parallel_for<backend::OneDnn>());
    check_seed_procedure<OneDnnResNet>({});
  }
  SECTION("reference backend, one thread per tower (as on GPUs)") {
    check_seed_procedure<RefResNet>(dist::TowersOptions().parallel(true));
  }
}

TEST_CASE("Without batch norm, N towers with a batch dealt among them follow one model with the whole batch",
          "[towers]") {
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    const auto batches = make_batches(3, 8, fmt, 24);
    Cnn ref({3, 24, 24}, fmt, {}, 11);
    train_on(ref, batches);
    const double scale = max_abs(ref.parameters().values());
    for (std::size_t n : {2, 3}) {  // 3 towers: 3, 3 and 2 examples
      INFO(to_string(fmt) << ", " << n << " towers");
      dist::Towers<Cnn> towers(n, {3, 24, 24}, fmt, {}, 11);
      train_on(towers, batches);
      const double d = max_abs_diff(towers.parameters().values(), ref.parameters().values());
      CHECK(d < 1e-5 * scale);
      WARN(n << " towers, " << to_string(fmt) << ": max |param diff| vs one model " << d << " (max |param| "
             << scale << ")");
    }
  }
}

TEST_CASE("Towers evaluate dealt batches with tower 0's weights, rows back in place, any batch size",
          "[towers]") {
  const DataFormat fmt = DataFormat::NCHW;
  const auto batches = make_batches(2, 5, fmt, 32);
  dist::Towers<OneDnnResNet> towers(3, {3, 32, 32}, fmt, resnet_options(8), 3);
  train_on(towers, batches);  // tower 0 moves away from the others' initial weights
  OneDnnResNet one({3, 32, 32}, fmt, resnet_options(8), 99);
  one.parameters().values() = towers.parameters().values();
  one.parameters().state() = towers.parameters().state();
  for (std::size_t n : {1, 2, 5, 7}) {  // fewer examples than towers too
    INFO("batch " << n);
    const Tensor<float> x = rows(make_batches(1, 7, fmt, 32)[0].images, 0, n);
    const Tensor<float> got = towers.forward(x, Mode::Infer);
    REQUIRE(got.shape()[0] == n);
    const Tensor<float> want = one.forward(x, Mode::Infer);
    double d = 0, s = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      d = std::max(d, double(std::abs(got.data()[i] - want.data()[i])));
      s = std::max(s, double(std::abs(want.data()[i])));
    }
    CHECK(d <= 1e-5 * std::max(1.0, s));
  }
}

TEST_CASE("Towers report a tower's error after every tower stopped, and misuse clearly", "[towers][errors]") {
  const DataFormat fmt = DataFormat::NCHW;
  for (bool parallel : {false, true}) {
    INFO("parallel " << parallel);
    dist::Towers<RefResNet> towers(2, {3, 32, 32}, fmt, resnet_options(8), 3, {}, nullptr,
                                   dist::TowersOptions().parallel(parallel));
    Tensor<float> dy = make_tensor<float>(towers.output_shape(4), fmt);
    CHECK_THROWS_WITH(towers.backward(dy), Catch::Contains("needs a preceding forward in Mode::Train"));
    Tensor<float> wrong = make_tensor<float>({4, 1, 32, 32}, fmt);
    wrong.fill(0.f);
    CHECK_THROWS_AS(towers.forward(wrong, Mode::Train), ShapeError);
    CHECK_THROWS_WITH(towers.forward(wrong, Mode::Train), Catch::Contains("expects input"));
    Tensor<float> x = make_tensor<float>({4, 3, 32, 32}, fmt);
    x.fill(0.5f);
    towers.forward(x, Mode::Train);
    Tensor<float> bad = make_tensor<float>(towers.output_shape(3), fmt);
    CHECK_THROWS_WITH(towers.backward(bad), Catch::Contains("last forward's output"));
    towers.backward(dy);  // still usable after the errors
  }
  CHECK_THROWS_WITH(dist::Towers<OneDnnResNet>(0, {3, 32, 32}, fmt, resnet_options(8), 3),
                    Catch::Contains("at least 1"));
}

TEST_CASE("The towers' worker threads run every active tower once per call, for any number of towers",
          "[towers][threads]") {
  dist::TowerThreads pool;
  std::vector<int> calls(5, 0), expected(5, 0);
  const std::size_t ks[] = {2, 1, 4, 3, 5, 2, 5, 1, 3};
  for (int round = 0; round < 50; ++round)
    for (std::size_t k : ks) {
      std::vector<int> seen(5, 0);
      auto f = [&](std::size_t i) { ++seen[i]; };
      pool.run(k, f);
      for (std::size_t i = 0; i < 5; ++i) {
        REQUIRE(seen[i] == (i < k ? 1 : 0));  // each active tower once, no other
        calls[i] += seen[i];
        expected[i] += i < k ? 1 : 0;
      }
    }
  CHECK(calls == expected);
}

TEST_CASE("Towers deal example i to tower i % N and put output row i back at row i (training batch stats)",
          "[towers]") {
  // In training mode each tower normalizes with its own examples' batch
  // statistics, so its outputs depend on which examples it holds: the towers'
  // output equals separate models run on the round-robin shares, and differs
  // from the same models run on contiguous slices.
  const DataFormat fmt = DataFormat::NCHW;
  const std::size_t n = 7, k = 3;  // shares of 3, 2, 2 examples
  const Tensor<float> x = make_batches(1, n, fmt, 32)[0].images;
  dist::Towers<OneDnnResNet> towers(k, {3, 32, 32}, fmt, resnet_options(8), 5);
  const Tensor<float> got = towers.forward(x, Mode::Train);
  OneDnnResNet one({3, 32, 32}, fmt, resnet_options(8), 5);
  Tensor<float> want = make_tensor<float>(one.output_shape(n), fmt), slices = want;
  for (std::size_t t = 0; t < k; ++t) undeal(one.forward(dealt(x, t, k), Mode::Train), t, k, want);
  const std::size_t starts[] = {0, 3, 5}, sizes[] = {3, 2, 2};
  const std::size_t per = want.size() / n;
  for (std::size_t t = 0; t < k; ++t) {
    const Tensor<float> y = one.forward(rows(x, starts[t], sizes[t]), Mode::Train);
    std::memcpy(slices.data() + starts[t] * per, y.data(), y.size() * sizeof(float));
  }
  REQUIRE(got.shape() == want.shape());
  double d = 0, d_slices = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    d = std::max(d, double(std::abs(got.data()[i] - want.data()[i])));
    d_slices = std::max(d_slices, double(std::abs(got.data()[i] - slices.data()[i])));
  }
  CHECK(d == 0.0);
  CHECK(d_slices > 1e-3);  // the test tells the two dealings apart
}

TEST_CASE("Variable strategies CPU and GPU (the seed's flag) train towers to the same bits, each its reducer",
          "[towers]") {
  CHECK(dist::parse_variable_strategy("CPU") == dist::VariableStrategy::CPU);
  CHECK(dist::parse_variable_strategy("GPU") == dist::VariableStrategy::GPU);
  CHECK_THROWS_AS(dist::parse_variable_strategy("gpu"), ConfigError);
  CHECK_THROWS_WITH(dist::parse_variable_strategy("TPU"), Catch::Contains("--variable-strategy"));
  const DataFormat fmt = DataFormat::NHWC;
  const auto batches = make_batches(3, 6, fmt, 32);
  using S = dist::VariableStrategy;
  dist::Towers<OneDnnResNet> cpu(2, {3, 32, 32}, fmt, resnet_options(8), 7, {}, nullptr,
                                 dist::TowersOptions().variable_strategy(S::CPU));
  dist::Towers<OneDnnResNet> gpu(2, {3, 32, 32}, fmt, resnet_options(8), 7, {}, nullptr,
                                 dist::TowersOptions().variable_strategy(S::GPU));
  CHECK(std::string(cpu.reducer().name()) == "host");
  CHECK(std::string(gpu.reducer().name()) == "tower 0's device");
  const auto* r = dynamic_cast<const dist::Tower0Reducer<backend::OneDnn, float>*>(&gpu.reducer());
  REQUIRE(r != nullptr);
  CHECK(r->device() == &gpu.tower(0).device());  // bound to tower 0's device
  train_on(cpu, batches);
  train_on(gpu, batches);
  CHECK(max_abs_diff(cpu.parameters().values(), gpu.parameters().values()) == 0.0);
  CHECK(max_abs_diff(cpu.parameters().state(), gpu.parameters().state()) == 0.0);
  CHECK(max_abs(cpu.parameters().values()) > 0.0);
  // The GPU strategy's broadcast of the variables (NCCL's on CUDA): tower
  // 0's buffer into every other; on a host backend a copy.
  std::vector<float> a{1, 2, 3}, b(3, 0.0f), c(3, -1.0f);
  dist::Tower0Reducer<backend::OneDnn, float> t0;
  t0.broadcast({a.data(), b.data(), c.data()}, 3);
  CHECK(b == a);
  CHECK(c == a);
  // On the CPU backends the arenas are the devices': resident is a no-op.
  gpu.set_device_resident(true);
  CHECK_FALSE(gpu.device_resident());
  CHECK(&gpu.host_parameters() == &gpu.parameters());
}
