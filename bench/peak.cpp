// bench/peak.cpp — this machine's arithmetic limits, to read the workloads'
// images/s against: what fraction of the CPU a training step uses.
//
//   OMP_NUM_THREADS=2 build/bench/peak [--seconds 2] [--size 2048] [--repeat 1]
//
// --repeat N measures each matmul rate N times (alternating fp32 and bf16)
// and prints the median with the lowest and highest: on a shared VM the
// rate moves by a fifth within minutes (docs/BENCHMARKS.md, 2026-12-05
// 19:38), so a fraction of it is only as steady as the median under it.
//
// 1. fp32 FMA peak: every thread runs 12 (AVX2) or 16 (AVX-512) independent chains of vector FMAs
//    (the compiler's widest vector for -march=native: 8 floats with AVX2, 16
//    with AVX-512) in registers; GFLOP/s = 2 * lanes * chains * iterations /
//    seconds over all threads. No memory traffic: the ceiling no real kernel
//    reaches.
// 2. oneDNN matmul, size^3, fp32 and bf16 (bf16 inputs, fp32 output): the
//    largest GEMM rate the library's backend reaches here. bf16 runs on
//    AVX512-BF16 or AMX tiles where the CPU has them; elsewhere oneDNN 2.6
//    has no bf16 matmul and the line says so (not a figure).
// 3. The FLOPs of one training step of the CIFAR ResNets (6n+2 layers,
//    batch 128) and of the airbench94 network (examples/cifar10_speedrun),
//    from their convolution geometry (counted below), so that a measured
//    images/s reads as a fraction of 1. and 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <omp.h>

#include <dnnl.hpp>

#include "cli.hpp"

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float vfloat __attribute__((vector_size(kLanes * sizeof(float))));
// Independent chains: enough to cover FMA latency x FMA ports (4 x 2 on
// current cores) while they and the two operands stay in registers (16
// vector registers with AVX2, 32 with AVX-512).
constexpr int kChains = kLanes == 16 ? 16 : 12;

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One thread's FMA chains for `iters` iterations; returns a value the
// compiler cannot drop.
__attribute__((noinline)) float fma_chains(long iters, float seed) {
  vfloat acc[kChains];
  vfloat a, b;
  for (int l = 0; l < kLanes; ++l) {
    a[l] = 0.999999f;
    b[l] = 1e-7f * seed;
  }
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < kLanes; ++l) acc[c][l] = seed + float(c);
  for (long i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;  // contracted to one FMA (-O3 -march=native)
  }
  float s = 0;
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < kLanes; ++l) s += acc[c][l];
  return s;
}

double fma_peak_gflops(double secs) {
  long iters = 1 << 20;
  for (;;) {  // grow until one run takes long enough to time
    const auto t0 = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    sink += fma_chains(iters, float(omp_get_thread_num() + 1));
    const double t = seconds_since(t0);
    if (sink == 42.0f) std::printf(" ");
    if (t >= secs) return 2.0 * kLanes * kChains * double(iters) * omp_get_max_threads() / t / 1e9;
    iters *= 2;
  }
}

// GFLOP/s of a size^3 oneDNN matmul with inputs of type `in`; -1 when the
// CPU (or this oneDNN) has no such matmul.
double matmul_gflops(dnnl::memory::data_type in, long size, double secs) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::dims a{size, size}, b{size, size}, c{size, size};
  dnnl::matmul::primitive_desc pd;
  try {
    dnnl::matmul::desc d(dnnl::memory::desc(a, in, tag::ab), dnnl::memory::desc(b, in, tag::any),
                         dnnl::memory::desc(c, dt::f32, tag::ab));
    pd = dnnl::matmul::primitive_desc(d, eng);
  } catch (const dnnl::error&) {
    return -1;
  }
  dnnl::memory ma(pd.src_desc(), eng), mb(pd.weights_desc(), eng), mc(pd.dst_desc(), eng);
  // Fill the inputs (values do not matter for the time, only that they are not denormal).
  for (auto* m : {&ma, &mb}) {
    const std::size_t bytes = m->get_desc().get_size();
    auto* p = static_cast<unsigned char*>(m->get_data_handle());
    for (std::size_t i = 0; i < bytes; ++i) p[i] = (i % 2) ? 0x3f : 0x80;
  }
  dnnl::matmul mm(pd);
  const std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  mm.execute(s, args);  // warm-up
  s.wait();
  long reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double t = 0;
  while (t < secs) {
    mm.execute(s, args);
    s.wait();
    ++reps;
    t = seconds_since(t0);
  }
  return 2.0 * double(size) * double(size) * double(size) * double(reps) / t / 1e9;
}

// Multiply-adds of one forward pass of the CIFAR ResNet with 6n+2 layers on
// one 32x32 image: the 3x3 stem (3 -> 16), three stages of 2n 3x3
// convolutions (16, 32, 64 channels at 32x32, 16x16, 8x8; each stage's first
// convolution takes the previous width at stride 2), the dense layer
// (64 -> 10). Shortcuts are parameter-free (pooling and channel padding),
// batch norm and ReLU are not multiply-adds.
double resnet_forward_macs(int n) {
  double macs = 16.0 * 3 * 9 * 32 * 32;  // stem
  const int width[3] = {16, 32, 64}, side[3] = {32, 16, 8};
  for (int s = 0; s < 3; ++s) {
    const double hw = double(side[s]) * side[s];
    const int in0 = s == 0 ? 16 : width[s - 1];
    macs += double(width[s]) * in0 * 9 * hw;                   // first conv of the stage
    macs += double(2 * n - 1) * width[s] * width[s] * 9 * hw;  // the rest
  }
  return macs + 64.0 * 10;
}

// Multiply-adds of one forward pass of the airbench94 network on one 32x32
// image (models/airbench.hpp): the 2x2 whitening convolution 3 -> 24
// (valid: 31x31), then per group a 3x3 convolution at the group's input
// size, a 2x2 max pool, a 3x3 convolution at the pooled size (24 -> 64 at
// 31x31 then 64 -> 64 at 15x15; 64 -> 256 at 15x15, 256 -> 256 at 7x7;
// 256 -> 256 at 7x7, then at 3x3), the head (256 -> 10).
double airbench_forward_macs() {
  double macs = 24.0 * 3 * 4 * 31 * 31;
  macs += 64.0 * 24 * 9 * 31 * 31 + 64.0 * 64 * 9 * 15 * 15;
  macs += 256.0 * 64 * 9 * 15 * 15 + 256.0 * 256 * 9 * 7 * 7;
  macs += 256.0 * 256 * 9 * 7 * 7 + 256.0 * 256 * 9 * 3 * 3;
  return macs + 256.0 * 10;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "This machine's fp32 FMA peak, oneDNN matmul rates (fp32, bf16) and the ResNets' FLOPs per step"};
  double secs = 2.0;
  long size = 2048;
  app.add_option("--seconds", secs, "Time per measurement")->check(CLI::PositiveNumber);
  app.add_option("--size", size, "Matmul size (size^3)")->check(CLI::Range(64L, 16384L));
  int repeat = 1;
  app.add_option("--repeat", repeat, "Measurements of each matmul rate (their median is the figure)")
      ->check(CLI::Range(1, 99));
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;

  const dnnl_version_t* v = dnnl_version();
  std::printf("threads %d, vector lanes %d (fp32), oneDNN %d.%d.%d, effective ISA %s\n",
              omp_get_max_threads(), kLanes, v->major, v->minor, v->patch,
              isa_name(dnnl::get_effective_cpu_isa()));
  const double peak = fma_peak_gflops(secs);
  std::printf("fp32 FMA peak (registers only)       %9.1f GFLOP/s\n", peak);
  std::vector<double> f32s, b16s;
  for (int r = 0; r < repeat; ++r) {
    f32s.push_back(matmul_gflops(dnnl::memory::data_type::f32, size, secs));
    b16s.push_back(matmul_gflops(dnnl::memory::data_type::bf16, size, secs));
  }
  // the median (of an even count, the mean of the middle two), and the range
  const auto summary = [repeat](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    const double med = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
    std::string range;
    if (repeat > 1) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ", median of %d [%.1f - %.1f]", repeat, v.front(), v.back());
      range = buf;
    }
    return std::make_pair(med, range);
  };
  // each reading in the order taken, under the line with their median
  const auto readings = [repeat](const std::vector<double>& v) {
    if (repeat < 2 || v.front() < 0) return;
    std::printf("  readings:");
    for (const double x : v) std::printf(" %.1f", x);
    std::printf("\n");
  };
  const auto [f32, f32_range] = summary(f32s);
  std::printf("oneDNN matmul fp32 %5ld^3            %9.1f GFLOP/s  (%.0f %% of the FMA peak%s)\n", size, f32,
              100.0 * f32 / peak, f32_range.c_str());
  readings(f32s);
  const auto [b16, b16_range] = summary(b16s);
  if (b16 < 0)
    std::printf("oneDNN matmul bf16 %5ld^3            not available on this CPU (no AVX512-BF16 / AMX)\n",
                size);
  else
    std::printf("oneDNN matmul bf16 %5ld^3            %9.1f GFLOP/s  (%.2fx the fp32 FMA peak%s)\n", size,
                b16, b16 / peak, b16_range.c_str());
  readings(b16s);
  for (int layers : {20, 56}) {
    const int n = (layers - 2) / 6;
    const double fwd = 2.0 * resnet_forward_macs(n);
    // Training: forward, backward data and backward weights of every
    // convolution (about 3x the forward; the stem's data gradient is skipped).
    const double train = 3.0 * fwd - 2.0 * (16.0 * 3 * 9 * 32 * 32);
    std::printf(
        "ResNet-%d: forward %.1f MFLOP/image, training %.1f MFLOP/image = %.1f GFLOP per step of 128;"
        " at the fp32 FMA peak %.0f img/s (training), %.0f img/s (inference)\n",
        layers, fwd / 1e6, train / 1e6, 128 * train / 1e9, peak * 1e9 / train, peak * 1e9 / fwd);
  }
  {
    const double fwd = 2.0 * airbench_forward_macs();
    // Training: three passes of every convolution, less the whitening
    // layer's data gradient (nothing needs it) and, once its bias is frozen,
    // its weight gradient and the first group's data gradient; counted here
    // with both (the first three of the recipe's eight epochs).
    const double train = 3.0 * fwd - 2.0 * (24.0 * 3 * 4 * 31 * 31);
    const double run = 8.0 * 50000.0 * train;  // 8 epochs of 25 batches of 2,000
    std::printf(
        "airbench94: forward %.1f MFLOP/image, training %.1f MFLOP/image = %.1f GFLOP per step of 2,000,"
        " %.1f TFLOP per 8-epoch run; at the fp32 FMA peak %.0f img/s, at the bf16 matmul rate %s\n",
        fwd / 1e6, train / 1e6, 2000 * train / 1e9, run / 1e12, peak * 1e9 / train,
        b16 < 0 ? "-" : std::to_string(long(b16 * 1e9 / train + 0.5)).append(" img/s").c_str());
  }
  return 0;
}
