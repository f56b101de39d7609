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
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include "instances/resnet.hpp"

#include <cmath>
#include <cstring>
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
