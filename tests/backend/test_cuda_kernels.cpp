// The CUDA backend's own kernels (backend/cuda/kernels.hpp) and the GPU
// optimizers (backend/cuda/optim.hpp).
//  - On any machine: the per-element functions the kernels are built from
//    (compiled here for the host) agree bit for bit with the CPU optimizers,
//    EMA, weight decay and loss; NVRTC compiles the whole kernel program to
//    PTX (no GPU needed), every kernel is in it, and no f32 multiply-add was
//    fused (--fmad=false keeps TensorFlow's separately rounded arithmetic).
//  - With a GPU: every kernel against the CPU implementation (‖Δ‖/‖ref‖ <
//    1e-5, exact where the arithmetic is the same), the GPU optimizers'
//    checkpoint slots, and a restore through visit_state.
//  - On any machine, the ops' kernels emulated on the host through their
//    shared functions: pooling windows against brute force, max and average
//    pooling bit for bit against the reference backend (ties, -inf, NaN,
//    asymmetric pads), ReLU bit for bit, and batch norm's per-channel
//    reductions thread by thread (every element summed once) and arithmetic
//    against the reference.
//  - With a GPU: transform, add_channel_bias and channel_sum, and pooling
//    with ties and NaN bit for bit against the reference.
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include "agreement.hpp"
#include "instances/resnet.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <vector>

using namespace cifarnet;
namespace cu = cifarnet::backend::cuda;

namespace {

std::vector<float> random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

bool gpu_present(const char* what) {
  if (cu::device_count() > 0) return true;
  WARN("SKIPPED: " << what << ": no GPU (" << cu::no_device_reason() << ")");
  return false;
}

double rel(const float* a, const float* b, std::size_t n) {
  double e = 0, r = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    e += d * d;
    r += double(b[i]) * double(b[i]);
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

using Net = Model<ResNetCifar<>, backend::OneDnn>;

}  // namespace

TEST_CASE("The kernels' element functions are the CPU optimizers' and loss's arithmetic, bit for bit",
          "[backend][cuda][kernels]") {
  Net net({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 3);
  auto& P = net.parameters();
  const std::size_t n = std::size_t(P.values().size());
  std::vector<float> grads0 = random_vec(n, 5, 0.1);
  // The arena's padding is zero and stays so under every update.
  P.for_each([&](const ParamInfo& p, float*, float* g) {
    if (g) std::memcpy(g, grads0.data() + (g - P.grads().data()), p.size * sizeof(float));
  });
  const std::vector<float> values0(P.values().data(), P.values().data() + n);

  for (bool nesterov : {false, true}) {
    INFO("nesterov " << nesterov);
    std::copy(values0.begin(), values0.end(), P.values().data());
    optim::Momentum<float> cpu(P, optim::MomentumOptions().momentum(0.9).nesterov(nesterov));
    std::vector<float> var = values0, acc(n, 0.0f);
    for (int step = 0; step < 3; ++step) {
      cpu.step(P, 0.1);
      for (std::size_t i = 0; i < n; ++i)
        cu::shared::momentum(var[i], acc[i], P.grads().data()[i], 0.1f, 0.9f, nesterov ? 1 : 0);
    }
    CHECK(std::memcmp(var.data(), P.values().data(), n * sizeof(float)) == 0);
  }

  std::copy(values0.begin(), values0.end(), P.values().data());
  optim::Adam<float> adam(P, optim::AdamOptions());
  std::vector<float> var = values0, m(n, 0.0f), v(n, 0.0f);
  float b1p = 0.9f, b2p = 0.999f;
  for (int step = 0; step < 3; ++step) {
    adam.step(P, 0.01);
    const float alpha = 0.01f * std::sqrt(1.0f - b2p) / (1.0f - b1p);
    for (std::size_t i = 0; i < n; ++i)
      cu::shared::adam(var[i], m[i], v[i], P.grads().data()[i], alpha, 1.0f - 0.9f, 1.0f - 0.999f, 1e-8f);
    b1p *= 0.9f;
    b2p *= 0.999f;
  }
  CHECK(std::memcmp(var.data(), P.values().data(), n * sizeof(float)) == 0);

  // EMA: the CPU EMA's shadow after two applies.
  optim::ExponentialMovingAverage<float> ema(P, optim::ExponentialMovingAverageOptions(0.99));
  std::vector<float> shadow(P.values().data(), P.values().data() + n);
  for (int k = 0; k < 2; ++k) {
    for (std::size_t i = 0; i < n; ++i) P.values().data()[i] += 0.01f * float(k + 1);
    ema.apply(P);
    const float omd = 1.0f - ema.decay();
    for (std::size_t i = 0; i < n; ++i) cu::shared::ema(shadow[i], P.values().data()[i], omd);
  }
  bool ema_equal = true;
  P.for_each([&](const ParamInfo& p, float* val, float* g) {
    if (!g) return;
    const float* s = ema.average(p.name);
    REQUIRE(s);
    ema_equal =
        ema_equal && std::memcmp(s, shadow.data() + (val - P.values().data()), p.size * sizeof(float)) == 0;
  });
  CHECK(ema_equal);

  // Weight decay's gradient.
  std::vector<float> g(P.grads().data(), P.grads().data() + n);
  optim::weight_decay(P, 2e-4);
  bool wd_equal = true;
  P.for_each([&](const ParamInfo& p, float* val, float* gr) {
    if (!gr) return;
    const std::size_t off = std::size_t(val - P.values().data());
    for (std::size_t i = 0; i < p.size; ++i) {
      float x = g[off + i];
      cu::shared::decay_grad(x, val[i], float(2e-4));
      wd_equal = wd_equal && x == gr[i];
    }
  });
  CHECK(wd_equal);

  // Softmax cross-entropy: loss and gradient.
  Tensor<float> logits = make_tensor<float>({6, 11, 1, 1}, DataFormat::NCHW), dz;
  const auto z = random_vec(66, 9, 3.0);
  std::copy(z.begin(), z.end(), logits.data());
  const std::vector<std::int32_t> labels{0, 3, 10, 7, 7, 1};
  const float loss = softmax_cross_entropy(logits, labels, &dz);
  std::vector<float> mine(66);
  double total = 0;
  for (std::size_t i = 0; i < 6; ++i)
    total += cu::shared::softmax_xent_row(z.data() + i * 11, 11, labels[i], 6.0, mine.data() + i * 11);
  CHECK(float(total / 6.0) == loss);
  CHECK(std::memcmp(mine.data(), dz.data(), 66 * sizeof(float)) == 0);

  // The image copy: HWC uint8 to NCHW and NHWC floats.
  std::vector<unsigned char> img(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < img.size(); ++i) img[i] = static_cast<unsigned char>((i * 37) % 251);
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    std::vector<float> out(img.size(), -1.0f);
    for (long long im = 0; im < 2; ++im)
      for (long long idx = 0; idx < 60; ++idx)
        cu::shared::image_to_float(img.data() + im * 60, out.data(), im, 3, 4, 5, fmt == DataFormat::NCHW,
                                   idx);
    bool ok = true;
    for (std::size_t im = 0; im < 2; ++im)
      for (std::size_t y = 0; y < 4; ++y)
        for (std::size_t x = 0; x < 5; ++x)
          for (std::size_t c = 0; c < 3; ++c)
            ok = ok &&
                 out[offset({2, 3, 4, 5}, fmt, im, c, y, x)] == float(img[((im * 4 + y) * 5 + x) * 3 + c]);
    CHECK(ok);
  }
}

TEST_CASE("A multi-tensor pass's chunk table covers each range once, in order, and refuses overlaps",
          "[backend][cuda][kernels]") {
  using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;
  CHECK(cu::kTensorChunk == 16 * cu::KernelLibrary::kThreads);
  const Ranges ranges{{100, 100}, {0, 10000}, {20000, 20001}, {10000, 12000}};
  const auto t = cu::chunk_ranges(ranges, 4096);
  const std::vector<std::pair<long long, long long>> want{
      {0, 4096}, {4096, 8192}, {8192, 10000}, {20000, 20001}, {10000, 12000}};
  REQUIRE(t.size() == want.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    INFO("chunk " << i);
    CHECK(t[i].begin == want[i].first);
    CHECK(t[i].end == want[i].second);
  }
  CHECK(cu::chunk_ranges({}).empty());
  CHECK(cu::chunk_ranges({{5, 5}, {9, 3}}).empty());
  // Adjacent ranges are fine; overlapping ones would update an element twice at once.
  CHECK(cu::chunk_ranges({{0, 10}, {10, 20}}, 4).size() == 6);
  CHECK_THROWS_WITH(cu::chunk_ranges({{30, 40}, {0, 10}, {5, 20}}),
                    Catch::Contains("[0, 10) and [5, 20) overlap"));
  CHECK_THROWS_AS(cu::chunk_ranges({{0, 10}}, 0), BackendError);
}

TEST_CASE("The multi-tensor weight decay kernel, emulated block by block, is the CPU WeightDecay's",
          "[backend][cuda][kernels]") {
  // cn_multi_decay's work as the GPU does it: each chunk one block of 256
  // threads (shared::decay_chunk_lane per thread), the threads' sums added
  // in the kernel's tree, one partial per chunk, the partials added in
  // chunk order when read back. The gradients must be the CPU pass's bits;
  // the sum of squares differs from the CPU's element order only by
  // rounding in double.
  Net net({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 3);
  auto& P = net.parameters();
  const std::size_t n = std::size_t(P.values().size());
  const auto grads0 = random_vec(n, 11, 0.1);
  P.for_each([&](const ParamInfo& p, float*, float* g) {
    if (g) std::memcpy(g, grads0.data() + (g - P.grads().data()), p.size * sizeof(float));
  });
  const double wd = 2e-4;
  std::vector<std::pair<std::size_t, std::size_t>>
      ranges;  // the conv and dense weights, as the ResNet decays
  P.for_each([&](const ParamInfo& p, float* v, float* g) {
    if (g && p.name.size() > 8 && p.name.compare(p.name.size() - 8, 8, "/weights") == 0) {
      const std::size_t off = std::size_t(v - P.values().data());
      ranges.emplace_back(off, off + p.size);
    }
  });
  REQUIRE(ranges.size() == 8);  // ResNet-8's seven convolutions and its dense layer
  std::vector<float> g(P.grads().data(), P.grads().data() + n);
  const float* v = P.values().data();

  optim::WeightDecay<float> cpu(P, optim::WeightDecayOptions(wd).decay(optim::Selection({"*/weights"})));
  const double cpu_term = cpu.apply(P);

  const auto table = cu::chunk_ranges(ranges);
  CHECK(table.size() > ranges.size());  // ranges longer than a chunk
  const int lanes = int(cu::KernelLibrary::kThreads);
  std::vector<double> partial(table.size());
  for (std::size_t c = 0; c < table.size(); ++c) {
    std::vector<double> acc(static_cast<std::size_t>(lanes));
    for (int t = 0; t < lanes; ++t)
      acc[std::size_t(t)] =
          cu::shared::decay_chunk_lane(g.data(), v, table[c].begin, table[c].end, float(wd), t, lanes);
    for (int k = lanes / 2; k > 0; k /= 2)
      for (int t = 0; t < k; ++t) acc[std::size_t(t)] += acc[std::size_t(t + k)];
    partial[c] = acc[0];
  }
  double sum = 0;
  for (double s : partial) sum += s;
  CHECK(std::memcmp(g.data(), P.grads().data(), n * sizeof(float)) == 0);
  double in_order = 0;  // the CPU pass's order: element by element, range by range
  for (const auto& r : ranges)
    for (std::size_t i = r.first; i < r.second; ++i) in_order += double(v[i]) * double(v[i]);
  CHECK(sum == Approx(in_order).epsilon(1e-13));
  CHECK(double(float(wd * (sum / 2))) == cpu_term);  // the term TF reports: rounded to float
  // Every element of a decayed range was decayed once, and nothing else was touched.
  std::vector<int> hits(n, 0);
  for (const auto& ch : table)
    for (long long i = ch.begin; i < ch.end; ++i) ++hits[std::size_t(i)];
  std::size_t decayed = 0;
  for (const auto& r : ranges) decayed += r.second - r.first;
  std::size_t once = 0, more = 0;
  for (int h : hits) once += h == 1, more += h > 1;
  CHECK(once == decayed);
  CHECK(more == 0);
}

TEST_CASE("NVRTC compiles every kernel to PTX without a GPU, with no fused f32 multiply-add",
          "[backend][cuda][kernels]") {
  const int arch = cu::nvrtc_target(75);
  INFO("compute_" << arch);
  const std::string ptx = cu::compile_ptx(arch);
  for (const auto& k : cu::kernel_names()) {
    INFO(k);
    CHECK(ptx.find(".entry " + k + "(") != std::string::npos);
  }
  CHECK(ptx.find("fma.rn.f32") == std::string::npos);
  // A target older than NVRTC supports is raised to its oldest one.
  CHECK(cu::nvrtc_target(10) >= 50);
}

TEST_CASE("Every CUDA kernel matches the CPU implementation", "[backend][cuda][kernels]") {
  if (!gpu_present("the CUDA kernels")) return;
  Device<backend::Cuda> dev;
  const std::size_t n = 100003;  // more than one grid-stride pass
  const auto x = random_vec(n, 1), y = random_vec(n, 2);

  double s = 0;
  for (float v : x) s += double(v) * double(v);
  CHECK(cu::sum_squares(dev, x.data(), n) == Approx(s).epsilon(1e-12));

  std::vector<float> g = x, ref = x;
  const double norm = cu::clip_by_global_norm(dev, g.data(), n, 10.0);
  CHECK(norm == Approx(std::sqrt(s)).epsilon(1e-12));
  const float clip = 10.0f, use = float(std::sqrt(s));
  const float sc = clip * std::min(1.0f / use, 1.0f / clip);
  for (auto& v : ref) v *= sc;
  CHECK(rel(g.data(), ref.data(), n) < 1e-6);

  // Weight decay of several ranges (one launch over a chunk table; a range
  // longer than a chunk, a short one, a gap): the gradients bit for bit, the
  // term against the host's sum in double.
  {
    const std::vector<std::pair<std::size_t, std::size_t>> ranges{
        {0, 3 * cu::kTensorChunk + 17}, {n / 2, n / 2 + 5}, {n - 1000, n}};
    std::vector<float> gd = y, gref = y;
    double want = 0;
    for (const auto& r : ranges)
      for (std::size_t i = r.first; i < r.second; ++i) {
        want += double(x[i]) * double(x[i]);
        cu::shared::decay_grad(gref[i], x[i], 2e-4f);
      }
    CHECK(cu::weight_decay_ranges(dev, ranges, gd.data(), x.data(), 2e-4f) == Approx(want).epsilon(1e-12));
    CHECK(std::memcmp(gd.data(), gref.data(), n * sizeof(float)) == 0);
  }

  std::vector<float> var = x, acc = y, var_ref = x, acc_ref = y;
  cu::momentum_update(dev, var.data(), acc.data(), y.data(), n, 0.1f, 0.9f, true);
  for (std::size_t i = 0; i < n; ++i) cu::shared::momentum(var_ref[i], acc_ref[i], y[i], 0.1f, 0.9f, 1);
  CHECK(std::memcmp(var.data(), var_ref.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(acc.data(), acc_ref.data(), n * sizeof(float)) == 0);

  std::vector<float> sh = x, sh_ref = x;
  cu::ema_update(dev, sh.data(), y.data(), n, 0.01f);
  for (std::size_t i = 0; i < n; ++i) cu::shared::ema(sh_ref[i], y[i], 0.01f);
  CHECK(std::memcmp(sh.data(), sh_ref.data(), n * sizeof(float)) == 0);

  Tensor<float> logits = make_tensor<float>({300, 11, 1, 1}, DataFormat::NCHW), dz_cpu;
  const auto z = random_vec(3300, 3, 4.0);
  std::copy(z.begin(), z.end(), logits.data());
  std::vector<std::int32_t> labels(300);
  for (std::size_t i = 0; i < 300; ++i) labels[i] = std::int32_t(i % 11);
  const float loss_cpu = softmax_cross_entropy(logits, labels, &dz_cpu);
  std::vector<float> dz(3300);
  const double loss = cu::softmax_cross_entropy(dev, z.data(), labels.data(), 300, 11, dz.data());
  CHECK(loss == Approx(loss_cpu).epsilon(1e-6));
  CHECK(rel(dz.data(), dz_cpu.data(), 3300) < 1e-6);
  labels[7] = 11;
  CHECK_THROWS_WITH(cu::softmax_cross_entropy(dev, z.data(), labels.data(), 300, 11, dz.data()),
                    Catch::Contains("label 11 of example 7 is outside [0, 11)"));

  std::vector<unsigned char> img(4 * 32 * 32 * 3);
  for (std::size_t i = 0; i < img.size(); ++i) img[i] = static_cast<unsigned char>(i % 256);
  for (DataFormat fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    std::vector<float> out(img.size(), -1.0f);
    cu::images_to_float(dev, img.data(), 4, 3, 32, 32, fmt, out.data());
    bool ok = true;
    for (std::size_t im = 0; im < 4; ++im)
      for (std::size_t yy = 0; yy < 32; ++yy)
        for (std::size_t xx = 0; xx < 32; ++xx)
          for (std::size_t c = 0; c < 3; ++c)
            ok = ok && out[offset({4, 3, 32, 32}, fmt, im, c, yy, xx)] ==
                           float(img[((im * 32 + yy) * 32 + xx) * 3 + c]);
    CHECK(ok);
  }
}

TEST_CASE("The GPU optimizers train like the CPU ones and keep TensorFlow's checkpoint slots",
          "[backend][cuda][kernels][optim]") {
  if (!gpu_present("the GPU optimizers")) return;
  Device<backend::Cuda> dev;
  Net a({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 3),
      b({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 3);
  const std::size_t n = std::size_t(a.parameters().grads().size());
  auto set_grads = [&](std::uint64_t seed) {
    const auto g = random_vec(n, seed, 0.1);
    for (auto* net : {&a, &b})
      net->parameters().for_each([&](const ParamInfo& p, float*, float* gr) {
        if (gr) std::memcpy(gr, g.data() + (gr - net->parameters().grads().data()), p.size * sizeof(float));
      });
  };
  SECTION("momentum, with a restore through visit_state halfway") {
    optim::Momentum<float> cpu(a.parameters(), optim::MomentumOptions().momentum(0.9));
    optim::cuda::Momentum<float> gpu(dev, b.parameters(), optim::MomentumOptions().momentum(0.9));
    for (int k = 0; k < 4; ++k) {
      set_grads(10 + std::uint64_t(k));
      cpu.step(a.parameters(), 0.1);
      gpu.step(b.parameters(), 0.1);
      if (k == 1) optim::load_state_dict(gpu, optim::state_dict(cpu));  // equal already: a no-op restore
    }
    CHECK(std::memcmp(a.parameters().values().data(), b.parameters().values().data(), n * sizeof(float)) ==
          0);
    const auto sc = optim::state_dict(cpu), sg = optim::state_dict(gpu);
    REQUIRE(sc.size() == sg.size());
    for (const auto& [name, vals] : sc) {
      INFO(name);
      REQUIRE(sg.count(name));
      CHECK(sg.at(name) == vals);
    }
    // A restore that changes the slots takes effect on the next step.
    auto zero = sc;
    for (auto& [name, vals] : zero) std::fill(vals.begin(), vals.end(), 0.0f);
    optim::load_state_dict(cpu, zero);
    optim::load_state_dict(gpu, zero);
    set_grads(99);
    cpu.step(a.parameters(), 0.1);
    gpu.step(b.parameters(), 0.1);
    CHECK(std::memcmp(a.parameters().values().data(), b.parameters().values().data(), n * sizeof(float)) ==
          0);
  }
  SECTION("Adam") {
    optim::Adam<float> cpu(a.parameters(), optim::AdamOptions());
    optim::cuda::Adam<float> gpu(dev, b.parameters(), optim::AdamOptions());
    for (int k = 0; k < 3; ++k) {
      set_grads(20 + std::uint64_t(k));
      cpu.step(a.parameters(), 0.01);
      gpu.step(b.parameters(), 0.01);
    }
    CHECK(rel(b.parameters().values().data(), a.parameters().values().data(), n) < 1e-6);
    CHECK(gpu.beta1_power() == cpu.beta1_power());
    const auto sg = optim::state_dict(gpu);
    CHECK(sg.count("beta2_power"));
  }
}

namespace {

/// Same float, or both NaN.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

/// Index of the first element of a and b that differs (same()), or -1.
long first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return long(i);
  return -1;
}

cu::shared::PoolShape pool_shape(const ConvGeom& g, PoolKind kind) {
  return {int(g.ic),
          int(g.ih),
          int(g.iw),
          int(g.oh),
          int(g.ow),
          int(g.kh),
          int(g.kw),
          int(g.sh),
          int(g.sw),
          int(g.pt),
          int(g.pl),
          g.fmt == DataFormat::NCHW ? 1 : 0,
          kind == PoolKind::Max ? 1 : 0};
}

/// Pooling inputs full of ties (a handful of values), with some -inf and NaN.
std::vector<float> tied_input(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {-1.0f, 0.0f, 0.5f, 1.0f, 1.0f, 2.0f};
  std::vector<float> v(n);
  for (auto& x : v) {
    const std::size_t k = std::size_t(rng.uniform_int(40));  // 1 in 40 NaN, 1 in 40 -inf
    x = k == 0 ? nan : k == 1 ? -inf : values[k % 6];
  }
  return v;
}

/// tied_input for pooling of `kind`: ties and -inf in both kinds; NaN only
/// for max (an average with a NaN is NaN everywhere it reaches, which would
/// hide the other values), so an average's NaN and -inf become 0.25.
std::vector<float> pool_input(std::size_t n, std::uint64_t seed, PoolKind kind) {
  std::vector<float> x = tied_input(n, seed);
  if (kind == PoolKind::Avg)
    for (auto& v : x)
      if (std::isnan(v) || std::isinf(v)) v = 0.25f;
  return x;
}

/// Pooling geometries: the agreement cases plus windows wider than the
/// input, even windows with SAME padding, and more asymmetric pads.
std::vector<ConvGeom> pool_geometries() {
  auto out = test::pool_cases();
  for (DataFormat fmt : test::kFormats) {
    out.push_back(ConvGeom::make(fmt, {2, 3, 6, 5}, 3, 4, 1, Padding::Same));
    out.push_back(ConvGeom::make(fmt, {1, 2, 3, 3}, 2, 5, 2, Padding::Same));
    out.push_back(test::padded_geom(fmt, {2, 3, 5, 6}, 3, 3, 2, 0, 2, 2, 0));
    out.push_back(test::padded_geom(fmt, {1, 4, 4, 4}, 4, 2, 2, 1, 1, 1, 1));
  }
  return out;
}

}  // namespace

TEST_CASE("Pooling windows and the outputs covering an input agree with brute force",
          "[backend][cuda][kernels][pool]") {
  int checked = 0;
  for (int n = 1; n <= 10; ++n)
    for (int k = 1; k <= 5; ++k)
      for (int s = 1; s <= 4; ++s)
        for (int p = 0; p < k; ++p)
          for (int q = 0; q < k; ++q) {
            if (n + p + q < k) continue;
            const int n_out = (n + p + q - k) / s + 1;
            INFO("n=" << n << " k=" << k << " s=" << s << " pads " << p << "," << q);
            const auto in_window = [&](int o, int i) { return o * s - p <= i && i < o * s - p + k; };
            // [lo, hi) must be exactly the j < count with member(j) (and, with
            // `sized`, hold no more positions than that).
            const auto expect_range = [](int lo, int hi, int count, bool sized, auto&& member) {
              std::set<int> want, got;
              for (int j = 0; j < count; ++j)
                if (member(j)) want.insert(j);
              for (int j = lo; j < hi; ++j) got.insert(j);
              CHECK(got == want);
              if (sized) CHECK(hi - lo == int(want.size()));
            };
            for (int o = 0; o < n_out; ++o) {
              int lo = 0, hi = 0;
              cu::shared::pool_window(o, s, p, k, n, lo, hi);
              expect_range(lo, hi, n, true, [&](int i) { return in_window(o, i); });
            }
            for (int i = 0; i < n; ++i) {
              int lo = 0, hi = 0;
              cu::shared::pool_covering(i, s, p, k, n_out, lo, hi);
              expect_range(lo, hi, n_out, false, [&](int o) { return in_window(o, i); });
            }
            ++checked;
          }
  CHECK(checked > 500);
}

namespace {
// Every pooling geometry and kind on tied inputs (seeds from `seed` on):
// run(g, kind, x, y_ref, dy, y, dx) fills y (the forward of x) and dx (the
// backward given y_ref and dy), which must be the reference's bit for bit.
template <class Run>
void check_pooling_against_reference(std::uint64_t seed, Run&& run) {
  Device<backend::Reference> rdev;
  ops::Pool2d<backend::Reference, float> ref;
  for (const ConvGeom& g : pool_geometries())
    for (PoolKind kind : {PoolKind::Max, PoolKind::Avg}) {
      INFO(test::str(g) << (kind == PoolKind::Max ? " max" : " avg"));
      const std::size_t nx = g.n * g.ic * g.ih * g.iw, ny = g.n * g.ic * g.oh * g.ow;
      const std::vector<float> x = pool_input(nx, ++seed, kind);
      const std::vector<float> dy = random_vec(ny, ++seed);
      std::vector<float> y_ref(ny), dx_ref(nx), y(ny), dx(nx);
      ref.forward(rdev, g, kind, true, x.data(), y_ref.data());
      ref.backward(rdev, g, kind, x.data(), y_ref.data(), dy.data(), dx_ref.data());
      run(g, kind, x, y_ref, dy, y, dx);
      CHECK(first_difference(y, y_ref) == -1);
      CHECK(first_difference(dx, dx_ref) == -1);
    }
}
}  // namespace

TEST_CASE("The pooling kernels' element functions are the reference backend's, bit for bit (ties, -inf, NaN)",
          "[backend][cuda][kernels][pool]") {
  check_pooling_against_reference(
      100, [](const ConvGeom& g, PoolKind kind, const std::vector<float>& x, const std::vector<float>& y_ref,
              const std::vector<float>& dy, std::vector<float>& y, std::vector<float>& dx) {
        const auto shape = pool_shape(g, kind);
        for (std::size_t i = 0; i < y.size(); ++i)
          y[i] = cu::shared::pool_forward(x.data(), shape, (long long)i);
        for (std::size_t i = 0; i < dx.size(); ++i)
          dx[i] = cu::shared::pool_backward(x.data(), y_ref.data(), dy.data(), shape, (long long)i);
      });
  // A window of NaN only: -inf (as the reference), and no gradient.
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {1, 1, 2, 2}, 1, 2, 2, Padding::Valid);
  const std::vector<float> x(4, std::numeric_limits<float>::quiet_NaN());
  const auto shape = pool_shape(g, PoolKind::Max);
  const float y = cu::shared::pool_forward(x.data(), shape, 0), dy = 1.0f;
  CHECK(y == -std::numeric_limits<float>::infinity());
  for (long long i = 0; i < 4; ++i) CHECK(cu::shared::pool_backward(x.data(), &y, &dy, shape, i) == 0.0f);
}

TEST_CASE("The ReLU kernels' element functions are the reference backend's, bit for bit",
          "[backend][cuda][kernels]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{nan, -nan, inf, -inf, 0.0f, -0.0f, 1e-45f, -1e-45f, 3.0f, -3.0f, 1e30f, -1e30f};
  std::vector<float> dy(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) dy[i] = float(i) - 4.5f;
  Device<backend::Reference> rdev;
  ops::Relu<backend::Reference, float> ref;
  std::vector<float> y_ref(x.size()), dx_ref(x.size()), y(x.size()), dx(x.size());
  ref.forward(rdev, x.size(), x.data(), y_ref.data());
  ref.backward(rdev, x.size(), y_ref.data(), dy.data(), dx_ref.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i] = cu::shared::relu(x[i]);
    dx[i] = cu::shared::relu_grad(y_ref[i], dy[i]);
  }
  CHECK(first_difference(y, y_ref) == -1);
  CHECK(first_difference(dx, dx_ref) == -1);
  CHECK(std::isnan(cu::shared::relu(nan)));
  CHECK(std::signbit(cu::shared::relu(-0.0f)));
}

namespace {

/// cn_channel_partials then cn_channel_finalize on the host: every block
/// and thread of the grid channel_grid() gives, through the kernels' own
/// shared functions (each thread's sums added straight into the channel's,
/// not through the blocks' trees).
void emulate_channel_reduce(const cu::kernel_detail::ChannelGrid& cg, int sum, int out, const float* x,
                            const float* y, std::vector<double>& stats, double m, double eps, float* out0,
                            float* out1) {
  const int lanes = cu::shared::channel_lanes(cg.c, cg.nchw), per = 256 / lanes;
  std::vector<double> s0(std::size_t(cg.c)), s1(std::size_t(cg.c));
  for (unsigned tile = 0; tile < cg.tiles; ++tile)
    for (unsigned chunk = 0; chunk < cg.chunks; ++chunk)
      for (int row = 0; row < per; ++row)
        for (int lane = 0; lane < lanes; ++lane) {
          const int ch = int(tile) * lanes + lane;
          if (ch >= cg.c) continue;
          long long r0 = 0, r1 = 0;
          cu::shared::chunk_rows(cg.rows, int(cg.chunks), int(chunk), r0, r1);
          const double c0 = sum == cu::shared::kSumX ? 0.0 : stats[std::size_t(ch)];
          const double c1 = sum == cu::shared::kSumDyXhat ? stats[std::size_t(cg.c + ch)] : 0.0;
          cu::shared::channel_partial_sums(x, y, sum, c0, c1, r0 + row, r1, per, ch, cg.c, cg.hw, cg.nchw,
                                           s0[std::size_t(ch)], s1[std::size_t(ch)]);
        }
  for (int ch = 0; ch < cg.c; ++ch)
    cu::shared::channel_finish(out, ch, cg.c, s0[std::size_t(ch)], s1[std::size_t(ch)], m, eps, stats.data(),
                               out0, out1);
}

std::vector<ChannelGeom> bn_geometries() {
  auto out = test::channel_cases();
  for (DataFormat fmt : test::kFormats) {
    out.push_back({fmt, 1, 3, 1, 1});      // one element per channel: variance 0
    out.push_back({fmt, 64, 10, 1, 1});    // a dense layer's (n, out)
    out.push_back({fmt, 16, 48, 8, 8});    // NHWC: two channel tiles, the second half full
    out.push_back({fmt, 9, 7, 33, 31});    // chunks that end mid-image
    out.push_back({fmt, 128, 2, 16, 16});  // NCHW: many chunks per channel
  }
  return out;
}

}  // namespace

TEST_CASE(
    "The per-channel reductions visit every element once, and batch norm's kernels do the reference's "
    "arithmetic",
    "[backend][cuda][kernels][batchnorm]") {
  namespace sh = cu::shared;
  Device<backend::Reference> rdev;
  ops::BatchNorm<backend::Reference, float> ref;
  std::uint64_t seed = 300;
  for (const ChannelGeom& g : bn_geometries()) {
    INFO(test::str(g));
    const std::size_t n = g.size(), c = g.c, hw = g.h * g.w;
    const auto cg = cu::kernel_detail::channel_grid(g.fmt, g.n, c, hw);
    CHECK(cg.chunks >= 1);
    CHECK(cg.chunks <= 1024);
    const double m = double(g.n * hw);
    const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};

    // Coverage: the count, the sum and the sum of squares of each channel's
    // offsets, all exact in double.
    std::vector<float> ones(n, 1.0f), index(n);
    for (std::size_t i = 0; i < n; ++i) index[i] = float(i);
    std::vector<double> want_sum(c), want_sq(c);
    for (std::size_t e = 0; e < g.n; ++e)
      for (std::size_t ch = 0; ch < c; ++ch)
        for (std::size_t yy = 0; yy < g.h; ++yy)
          for (std::size_t xx = 0; xx < g.w; ++xx) {
            const double o = double(L(e, ch, yy, xx));
            want_sum[ch] += o;
            want_sq[ch] += o * o;
          }
    std::vector<double> stats(4 * c, 0.0);
    std::vector<float> count(c), sums(c), squares(c);
    emulate_channel_reduce(cg, sh::kSumX, sh::kOutSum, ones.data(), nullptr, stats, m, 0, count.data(),
                           nullptr);
    emulate_channel_reduce(cg, sh::kSumX, sh::kOutSum, index.data(), nullptr, stats, m, 0, sums.data(),
                           nullptr);
    emulate_channel_reduce(cg, sh::kSumSqDev, sh::kOutSum, index.data(), nullptr, stats, m, 0, squares.data(),
                           nullptr);  // c0 = stats[ch] = 0: Σ offset²
    bool covered = true;
    for (std::size_t ch = 0; ch < c; ++ch)
      covered = covered && count[ch] == float(m) && sums[ch] == float(want_sum[ch]) &&
                squares[ch] == float(want_sq[ch]);
    CHECK(covered);

    // Batch norm, as the GPU op runs it, against the reference in float.
    Rng rng(++seed);
    std::vector<float> x(n), dy(n), gamma(c), beta(c);
    for (std::size_t i = 0; i < n; ++i) x[i] = float(3.0 + rng.normal());
    for (std::size_t i = 0; i < n; ++i) dy[i] = float(rng.uniform(-0.5, 1.0));
    for (std::size_t ch = 0; ch < c; ++ch) gamma[ch] = float(rng.uniform(0.5, 1.5));
    for (std::size_t ch = 0; ch < c; ++ch) beta[ch] = float(rng.uniform(-0.5, 0.5));
    const double eps = 1e-3;
    std::vector<float> y_ref(n), mean_ref(c), var_ref(c), y(n), mean(c), var(c);
    ref.forward_train(rdev, g, eps, x.data(), gamma.data(), beta.data(), y_ref.data(), mean_ref.data(),
                      var_ref.data());
    std::fill(stats.begin(), stats.end(), 0.0);
    emulate_channel_reduce(cg, sh::kSumX, sh::kOutMean, x.data(), nullptr, stats, m, eps, mean.data(),
                           nullptr);
    emulate_channel_reduce(cg, sh::kSumSqDev, sh::kOutVar, x.data(), nullptr, stats, m, eps, var.data(),
                           nullptr);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t ch = std::size_t(sh::channel_of((long long)i, cg.c, cg.hw, cg.nchw));
      y[i] = sh::bn_normalize(x[i], gamma[ch], beta[ch], stats[ch], stats[c + ch]);
    }
    CHECK(rel(mean.data(), mean_ref.data(), c) < 1e-7);
    CHECK(rel(var.data(), var_ref.data(), c) < 1e-6);
    CHECK(rel(y.data(), y_ref.data(), n) < 1e-6);
    if (m == 1.0)
      for (float v : var) CHECK(v == 0.0f);

    std::vector<float> dx_ref(n), dg_ref(c), db_ref(c), dx(n), dg(c), db(c);
    ref.backward(rdev, g, eps, x.data(), dy.data(), gamma.data(), mean_ref.data(), var_ref.data(),
                 dx_ref.data(), dg_ref.data(), db_ref.data());
    for (std::size_t ch = 0; ch < c; ++ch) {  // cn_bn_prepare
      stats[ch] = double(mean_ref[ch]);
      stats[c + ch] = sh::bn_inv_std(double(var_ref[ch]), eps);
    }
    emulate_channel_reduce(cg, sh::kSumDyXhat, sh::kOutBnGrad, x.data(), dy.data(), stats, m, eps, dg.data(),
                           db.data());
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t ch = std::size_t(sh::channel_of((long long)i, cg.c, cg.hw, cg.nchw));
      dx[i] = sh::bn_dx(x[i], dy[i], gamma[ch], stats[ch], stats[c + ch], m, stats[2 * c + ch],
                        stats[3 * c + ch]);
    }
    CHECK(rel(db.data(), db_ref.data(), c) < 1e-7);
    CHECK(rel(dg.data(), dg_ref.data(), c) < 1e-6);
    CHECK(rel(dx.data(), dx_ref.data(), n) < 1e-5);
  }
}

TEST_CASE("The grid-stride cursors give every element's channel and coordinates, and split4 inverts offset4",
          "[backend][cuda][kernels]") {
  bool ok = true;
  for (int nchw : {0, 1})
    for (int c : {1, 3, 16, 64})
      for (int hw : {1, 4, 63, 1024})
        for (long long step : {1LL, 7LL, 256LL, 1000LL, 1048576LL}) {
          const long long total = 3LL * c * hw;
          for (long long first : {0LL, 1LL, 5LL, 255LL}) {
            if (first >= step) continue;  // a grid-stride loop starts below its step
            auto k = cu::shared::channel_cursor(first, step, c, hw, nchw);
            for (long long i = first; i < total; i += step, cu::shared::channel_advance(k))
              ok = ok && k.ch == cu::shared::channel_of(i, c, hw, nchw) &&
                   k.ch == int(nchw ? (i / hw) % c : i % c);
          }
        }
  CHECK(ok);
  // The (e, ch, y, x) cursor of the pooling and transform kernels.
  for (int nchw : {0, 1})
    for (const auto& d : {std::array<int, 3>{1, 1, 1}, {3, 5, 7}, {16, 32, 32}, {64, 8, 8}, {5, 1, 9}})
      for (long long step : {1LL, 6LL, 256LL, 262144LL, 3000000000LL})
        for (long long first : {0LL, 3LL, 200LL}) {
          if (first >= step) continue;
          const long long total = 4LL * d[0] * d[1] * d[2];
          auto k = cu::shared::cursor4(first, step, d[0], d[1], d[2], nchw);
          for (long long i = first; i < total; i += step, cu::shared::advance4(k)) {
            long long e = -1;
            int ch = -1, y = -1, x = -1;
            cu::shared::split4(i, d[0], d[1], d[2], nchw, e, ch, y, x);
            ok = ok && k.d0 == e && cu::shared::cursor_ch(k) == ch && cu::shared::cursor_y(k) == y &&
                 cu::shared::cursor_x(k) == x;
          }
        }
  CHECK(ok);
  // Offsets past 2^31 (64-bit digits).
  {
    auto k = cu::shared::cursor4(3000000001LL, 5000000000LL, 3, 5, 7, 1);
    for (long long i = 3000000001LL; i < 40000000000LL; i += 5000000000LL, cu::shared::advance4(k)) {
      long long e = -1;
      int ch = -1, y = -1, x = -1;
      cu::shared::split4(i, 3, 5, 7, 1, e, ch, y, x);
      CHECK((k.d0 == e && k.d1 == ch && k.d2 == y && k.d3 == x));
    }
  }
  // split4 in 32-bit and in 64-bit arithmetic.
  for (int nchw : {0, 1})
    for (long long e : {0LL, 2LL, 40000000LL}) {  // the last is past 2^31 elements
      const int c = 7, h = 5, w = 9;
      for (int ch = 0; ch < c; ++ch)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) {
            long long e2 = -1;
            int ch2 = -1, y2 = -1, x2 = -1;
            cu::shared::split4(cu::shared::offset4(e, ch, y, x, c, h, w, nchw), c, h, w, nchw, e2, ch2, y2,
                               x2);
            ok = ok && e2 == e && ch2 == ch && y2 == y && x2 == x;
          }
    }
  CHECK(ok);
}

TEST_CASE("transform, add_channel_bias and channel_sum on the GPU match the host",
          "[backend][cuda][kernels]") {
  if (!gpu_present("transform, add_channel_bias, channel_sum")) return;
  Device<backend::Cuda> dev;
  const std::size_t n = 5, c = 7, h = 6, w = 9, total = n * c * h * w;
  const auto x = random_vec(total, 41);
  cu::DeviceBuffer<float> dx(total), dt(total), dpad(n * c * (h + 3) * (w + 2)), db(c), dsum(c);
  cu::copy_to_device(dev, dx.data(), x.data(), total * sizeof(float), "test upload");
  for (DataFormat from : test::kFormats)
    for (DataFormat to : test::kFormats) {
      INFO(to_string(from) << " to " << to_string(to));
      cu::TensorDesc a, b;
      cu::set_activation(a, from, n, c, h, w);
      cu::set_activation(b, to, n, c, h, w);
      cu::transform(dev, a, dx.data(), b, dt.data());
      std::vector<float> out(total);
      dev.download(out.data(), dt.data(), total);
      bool ok = true;
      for (std::size_t e = 0; e < n; ++e)
        for (std::size_t ch = 0; ch < c; ++ch)
          for (std::size_t yy = 0; yy < h; ++yy)
            for (std::size_t xx = 0; xx < w; ++xx)
              ok = ok && out[offset({n, c, h, w}, to, e, ch, yy, xx)] ==
                             x[offset({n, c, h, w}, from, e, ch, yy, xx)];
      CHECK(ok);
      // Into the interior of a padded (h + 3, w + 2) map and back.
      cu::TensorDesc inside;
      cu::set_activation(inside, to, n, c, h, w, h + 3, w + 2);
      float* interior = dpad.data() + cu::pixel_offset(to, c, w + 2, 2, 1);
      cu::transform(dev, a, dx.data(), inside, interior);
      cu::transform(dev, inside, interior, a, dt.data());
      dev.download(out.data(), dt.data(), total);
      CHECK(std::memcmp(out.data(), x.data(), total * sizeof(float)) == 0);
    }
  cu::TensorDesc a, b;
  cu::set_activation(a, DataFormat::NCHW, n, c, h, w);
  cu::set_activation(b, DataFormat::NCHW, n, c, w, h);
  CHECK_THROWS_WITH(cu::transform(dev, a, dx.data(), b, dt.data()),
                    Catch::Contains("(5, 7, 6, 9)") && Catch::Contains("(5, 7, 9, 6)"));

  const auto bias = random_vec(c, 42);
  cu::copy_to_device(dev, db.data(), bias.data(), c * sizeof(float), "test upload");
  for (DataFormat fmt : test::kFormats) {
    INFO(to_string(fmt));
    cu::copy_to_device(dev, dt.data(), x.data(), total * sizeof(float), "test upload");
    cu::add_channel_bias(dev, fmt, n, c, h * w, db.data(), dt.data());
    std::vector<float> out(total), sums(c);
    dev.download(out.data(), dt.data(), total);
    bool ok = true;
    std::vector<double> want(c);
    for (std::size_t e = 0; e < n; ++e)
      for (std::size_t ch = 0; ch < c; ++ch)
        for (std::size_t q = 0; q < h * w; ++q) {
          const std::size_t i = offset({n, c, h, w}, fmt, e, ch, q / w, q % w);
          ok = ok && out[i] == x[i] + bias[ch];
          want[ch] += double(x[i]);
        }
    CHECK(ok);
    cu::channel_sum(dev, fmt, n, c, h * w, dx.data(), dsum.data());
    dev.download(sums.data(), dsum.data(), c);
    for (std::size_t ch = 0; ch < c; ++ch) CHECK(sums[ch] == float(want[ch]));
  }
}

TEST_CASE("Pooling on the GPU is the reference's, bit for bit, with ties, -inf and NaN",
          "[backend][cuda][kernels][pool]") {
  if (!gpu_present("pooling with ties")) return;
  Device<backend::Cuda> dev;
  ops::Pool2d<backend::Cuda, float> op;
  check_pooling_against_reference(
      500, [&](const ConvGeom& g, PoolKind kind, const std::vector<float>& x, const std::vector<float>& y_ref,
               const std::vector<float>& dy, std::vector<float>& y, std::vector<float>& dx) {
        op.forward(dev, g, kind, true, x.data(), y.data());
        op.backward(dev, g, kind, x.data(), y_ref.data(), dy.data(), dx.data());
      });
}
