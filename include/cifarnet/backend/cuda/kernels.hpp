// cifarnet/backend/cuda/kernels.hpp — the CUDA backend's own kernels (the
// parts cuDNN and cuBLAS do not cover: optimizer updates, EMA, weight decay,
// gradient norms and scaling, the softmax cross-entropy loss, image copies),
// compiled at run time with NVRTC so the library stays header-only and user
// code needs no nvcc.
//
// One source, two compilers: the per-element math is written once inside
// CIFARNET_CUDA_SHARED(...). The host compiles it as ordinary inline
// functions (namespace cifarnet::backend::cuda::shared), which the CPU tests
// check against the library's CPU optimizers and loss; the same text,
// stringified, is the body of the NVRTC program, whose __global__ kernels are
// thin loops around it. NVRTC compiles with --fmad=false, so each product and
// sum is rounded separately, as in TensorFlow's CPU kernels and in the CPU
// optimizers here (CIFARNET_NO_FP_CONTRACT).
//
// Run time: compile_ptx() needs no GPU (CI compiles every kernel to PTX on
// its GPU-less machines). KernelLibrary::get(dev) compiles once per compute
// capability (PTX for min(device, newest NVRTC target); the driver JIT-
// compiles it), loads it with cudaLibraryLoadData (context-independent: one
// library serves every GPU of that capability) and launches kernels with
// cudaLaunchKernel on the device's stream. Errors (NVRTC log included) are
// BackendError.
#pragma once

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/core/fp_contract.hpp"

// cudaLaunchKernel takes a library's cudaKernel_t from CUDA 12.8 on.
static_assert(CUDART_VERSION >= 12080,
              "cifarnet's CUDA kernels need CUDA 12.8 or newer (cudaLibraryLoadData + cudaLaunchKernel of a "
              "cudaKernel_t); configure with -DCIFARNET_CUDA=OFF for an older toolkit");

// The shared element functions: host inline functions here, device functions
// in the NVRTC program (where CN_FN is `__device__ inline`). Write them in
// the common subset of C++ and CUDA, without preprocessor directives.
#define CN_FN inline CIFARNET_NO_FP_CONTRACT
#define CIFARNET_CUDA_SHARED(...)                             \
  namespace cifarnet::backend::cuda::shared {                 \
  __VA_ARGS__                                                 \
  }                                                           \
  namespace cifarnet::backend::cuda::kernel_detail {          \
  inline const char* shared_source() { return #__VA_ARGS__; } \
  }

CIFARNET_CUDA_SHARED(
    /* TF ApplyMomentum: accum = accum * m + g; var -= accum * lr, or with
       Nesterov var -= g * lr + accum * m * lr. */
    CN_FN void momentum(float& var, float& acc, float g, float lr, float m, int nesterov) {
      acc = acc * m + g;
      if (nesterov)
        var -= g * lr + acc * m * lr;
      else
        var -= acc * lr;
    }
    /* TF ApplyAdam with alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t). */
    CN_FN void adam(float& var, float& m, float& v, float g, float alpha, float omb1, float omb2, float eps) {
      m += (g - m) * omb1;
      v += (g * g - v) * omb2;
      var -= (m * alpha) / (sqrtf(v) + eps);
    }
    /* tf.train.ExponentialMovingAverage: shadow -= (shadow - var) * (1 - decay). */
    CN_FN void ema(float& shadow, float var, float one_minus_decay) {
      shadow -= (shadow - var) * one_minus_decay;
    }
    /* L2 weight decay's gradient: g += wd * var. */
    CN_FN void decay_grad(float& g, float var, float wd) { g += wd * var; }
    /* One row of the mean sparse softmax cross-entropy over a batch of n:
       returns the row's loss (double, as the CPU loss) and writes
       d(mean loss)/d(logits) when dz is not null (n: the batch size). */
    CN_FN double softmax_xent_row(const float* z, int k, int label, double n, float* dz) {
      double mx = double(z[0]);
      for (int j = 1; j < k; ++j) mx = fmax(mx, double(z[j]));
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += exp(double(z[j]) - mx);
      const double lse = mx + log(sum);
      if (dz)
        for (int j = 0; j < k; ++j) dz[j] = float((exp(double(z[j]) - lse) - (j == label ? 1.0 : 0.0)) / n);
      return lse - double(z[label]);
    }
    /* Pixel (y, x, ch) of an interleaved uint8 image (h, w, c) to its place
       in a float batch tensor at example `img`, NCHW (nchw != 0) or NHWC. */
    CN_FN void image_to_float(const unsigned char* src, float* dst, long long img, int c, int h, int w,
                              int nchw, long long idx) {
      const long long per = (long long)c * h * w;
      const int ch = int(idx % c), x = int((idx / c) % w), y = int(idx / ((long long)c * w));
      const long long out = nchw ? img * per + ((long long)ch * h + y) * w + x : img * per + idx;
      dst[out] = float(src[idx]);
    })

#undef CN_FN

namespace cifarnet::backend::cuda {

namespace kernel_detail {

/// The NVRTC program: the shared functions, then the kernels. Sizes are
/// long long; every kernel is a grid-stride loop.
inline std::string kernel_source() {
  std::string s =
      "#define CN_FN __device__ inline\n"
      "namespace shared {\n";
  s += shared_source();
  s += R"(
}
#define CN_LOOP(n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                        i += (long long)blockDim.x * gridDim.x)
extern "C" __global__ void cn_momentum(float* var, float* acc, const float* g, long long n, float lr, float m,
                                       int nesterov) {
  CN_LOOP(n) shared::momentum(var[i], acc[i], g[i], lr, m, nesterov);
}
extern "C" __global__ void cn_adam(float* var, float* m, float* v, const float* g, long long n, float alpha,
                                   float omb1, float omb2, float eps) {
  CN_LOOP(n) shared::adam(var[i], m[i], v[i], g[i], alpha, omb1, omb2, eps);
}
extern "C" __global__ void cn_ema(float* shadow, const float* var, long long n, float one_minus_decay) {
  CN_LOOP(n) shared::ema(shadow[i], var[i], one_minus_decay);
}
extern "C" __global__ void cn_decay_grad(float* g, const float* var, long long n, float wd) {
  CN_LOOP(n) shared::decay_grad(g[i], var[i], wd);
}
extern "C" __global__ void cn_scale(float* x, long long n, float s) {
  CN_LOOP(n) x[i] = x[i] * s;
}
/* partial[b] = sum of x[i]^2 (in double) over the elements block b visits;
   blockDim.x must be 256. */
extern "C" __global__ void cn_sum_squares(const float* x, long long n, double* partial) {
  __shared__ double acc[256];
  double s = 0;
  CN_LOOP(n) s += double(x[i]) * double(x[i]);
  acc[threadIdx.x] = s;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) acc[threadIdx.x] += acc[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}
/* One thread per example; loss[i] is example i's loss; bad[0] counts labels
   outside [0, k). */
extern "C" __global__ void cn_softmax_xent(const float* z, const int* labels, long long n, int k, double rows,
                                           double* loss, float* dz, int* bad) {
  CN_LOOP(n) {
    const int y = labels[i];
    if (y < 0 || y >= k) {
      atomicAdd(bad, 1);
      loss[i] = 0;
      continue;
    }
    loss[i] = shared::softmax_xent_row(z + i * k, k, y, rows, dz ? dz + i * k : nullptr);
  }
}
/* y = a + b, then max(., 0) when relu (NaN propagates). */
extern "C" __global__ void cn_add(const float* a, const float* b, float* y, long long n, int relu) {
  CN_LOOP(n) {
    const float v = a[i] + b[i];
    y[i] = (relu && v < 0.f) ? 0.f : v;
  }
}
/* y = a + b where m > 0, else 0 (a sum's gradient through a ReLU). */
extern "C" __global__ void cn_add_masked(const float* a, const float* b, const float* m, float* y,
                                         long long n) {
  CN_LOOP(n) y[i] = m[i] > 0.f ? a[i] + b[i] : 0.f;
}
extern "C" __global__ void cn_affine(const float* x, float* y, long long n, float a, float b) {
  CN_LOOP(n) y[i] = x[i] * a + b;
}
/* Element i of a (n, c, h·w) tensor: its example e, channel ch, position q. */
__device__ inline void cn_split(long long i, int c, int hw, int nchw, long long& e, int& ch, int& q) {
  e = i / ((long long)c * hw);
  const long long r = i % ((long long)c * hw);
  ch = nchw ? int(r / hw) : int(r % c);
  q = nchw ? int(r % hw) : int(r / c);
}
__device__ inline long long cn_index(long long e, int ch, int q, int c, int hw, int nchw) {
  return nchw ? (e * c + ch) * hw + q : (e * hw + q) * c + ch;
}
/* One thread per (example, channel): the mean over h·w, summed in double. */
extern "C" __global__ void cn_global_avg_pool(const float* x, float* y, long long nc, int c, int hw, int nchw) {
  CN_LOOP(nc) {
    const long long e = i / c;
    const int ch = int(i % c);
    double acc = 0;
    for (int q = 0; q < hw; ++q) acc += double(x[cn_index(e, ch, q, c, hw, nchw)]);
    y[i] = float(acc / hw);
  }
}
/* One thread per element of dx. */
extern "C" __global__ void cn_global_avg_pool_bwd(const float* dy, float* dx, long long total, int c, int hw,
                                                  int nchw) {
  CN_LOOP(total) {
    long long e;
    int ch, q;
    cn_split(i, c, hw, nchw, e, ch, q);
    dx[i] = float(double(dy[e * c + ch]) / hw);
  }
}
/* One thread per element of y (oc = before + c + after channels). */
extern "C" __global__ void cn_channel_pad(const float* x, float* y, long long total, int c, int before, int oc,
                                          int hw, int nchw) {
  CN_LOOP(total) {
    long long e;
    int ch, q;
    cn_split(i, oc, hw, nchw, e, ch, q);
    const int src = ch - before;
    y[i] = (src >= 0 && src < c) ? x[cn_index(e, src, q, c, hw, nchw)] : 0.f;
  }
}
/* One thread per element of dx. */
extern "C" __global__ void cn_channel_unpad(const float* dy, float* dx, long long total, int c, int before,
                                            int oc, int hw, int nchw) {
  CN_LOOP(total) {
    long long e;
    int ch, q;
    cn_split(i, c, hw, nchw, e, ch, q);
    dx[i] = dy[cn_index(e, ch + before, q, oc, hw, nchw)];
  }
}
/* Batch norm's moving statistics, in double (as the CPU backends). */
extern "C" __global__ void cn_bn_moving(float* mm, float* mv, const float* mean, const float* var, long long c,
                                        double decay, double bessel) {
  CN_LOOP(c) {
    mm[i] = float(decay * double(mm[i]) + (1 - decay) * double(mean[i]));
    mv[i] = float(decay * double(mv[i]) + (1 - decay) * double(var[i]) * bessel);
  }
}
/* Batch norm backward's 1/sqrt(var + eps), in double (as the host did). */
extern "C" __global__ void cn_inv_std(const float* var, float* inv, long long c, double eps) {
  CN_LOOP(c) inv[i] = float(1.0 / sqrt(double(var[i]) + eps));
}
/* count images, one thread per byte of the whole batch. */
extern "C" __global__ void cn_image_to_float(const unsigned char* src, float* dst, long long count, int c, int h,
                                             int w, int nchw) {
  const long long per = (long long)c * h * w;
  CN_LOOP(count * per) shared::image_to_float(src + (i / per) * per, dst, i / per, c, h, w, nchw, i % per);
}
)";
  return s;
}

inline void check_nvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    throw BackendError(cifarnet::detail::concat("NVRTC ", what, ": ", nvrtcGetErrorString(r)));
}

/// Owns an nvrtcProgram.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) (void)nvrtcDestroyProgram(&p);
  }
};

}  // namespace kernel_detail

/// Names of every kernel in the program (tests, and eager loading).
inline const std::vector<std::string>& kernel_names() {
  static const std::vector<std::string> names{"cn_momentum",
                                              "cn_adam",
                                              "cn_ema",
                                              "cn_decay_grad",
                                              "cn_scale",
                                              "cn_sum_squares",
                                              "cn_softmax_xent",
                                              "cn_image_to_float",
                                              "cn_add",
                                              "cn_add_masked",
                                              "cn_affine",
                                              "cn_global_avg_pool",
                                              "cn_global_avg_pool_bwd",
                                              "cn_channel_pad",
                                              "cn_channel_unpad",
                                              "cn_bn_moving",
                                              "cn_inv_std"};
  return names;
}

// ------------------------------------------------------------ typed kernels

/// The spelling of a kernel parameter type in the NVRTC source (tests check
/// every handle below against the source's declarations).
template <class T>
struct param_name;
#define CN_PARAM_NAME(T)                    \
  template <>                               \
  struct param_name<T> {                    \
    static const char* get() { return #T; } \
  };
CN_PARAM_NAME(float*)
CN_PARAM_NAME(const float*)
CN_PARAM_NAME(double*)
CN_PARAM_NAME(int*)
CN_PARAM_NAME(const int*)
CN_PARAM_NAME(const unsigned char*)
CN_PARAM_NAME(long long)
CN_PARAM_NAME(int)
CN_PARAM_NAME(float)
CN_PARAM_NAME(double)
#undef CN_PARAM_NAME

/// A kernel of the program with its parameter types P...: launch() converts
/// each argument to its P (so a size_t for an int, or a double for a float,
/// arrives as the type the kernel reads) and takes nothing else.
template <class... P>
struct Kernel {
  const char* name;
  /// The parameter types as the source spells them.
  static std::vector<std::string> signature() { return {param_name<P>::get()...}; }
};

/// Every kernel of the program, typed as the source declares it.
namespace kernel {
using ll = long long;
inline constexpr Kernel<float*, float*, const float*, ll, float, float, int> momentum{"cn_momentum"};
inline constexpr Kernel<float*, float*, float*, const float*, ll, float, float, float, float> adam{"cn_adam"};
inline constexpr Kernel<float*, const float*, ll, float> ema{"cn_ema"};
inline constexpr Kernel<float*, const float*, ll, float> decay_grad{"cn_decay_grad"};
inline constexpr Kernel<float*, ll, float> scale{"cn_scale"};
inline constexpr Kernel<const float*, ll, double*> sum_squares{"cn_sum_squares"};
inline constexpr Kernel<const float*, const int*, ll, int, double, double*, float*, int*> softmax_xent{
    "cn_softmax_xent"};
inline constexpr Kernel<const unsigned char*, float*, ll, int, int, int, int> image_to_float{
    "cn_image_to_float"};
inline constexpr Kernel<const float*, const float*, float*, ll, int> add{"cn_add"};
inline constexpr Kernel<const float*, const float*, const float*, float*, ll> add_masked{"cn_add_masked"};
inline constexpr Kernel<const float*, float*, ll, float, float> affine{"cn_affine"};
inline constexpr Kernel<const float*, float*, ll, int, int, int> global_avg_pool{"cn_global_avg_pool"};
inline constexpr Kernel<const float*, float*, ll, int, int, int> global_avg_pool_bwd{
    "cn_global_avg_pool_bwd"};
inline constexpr Kernel<const float*, float*, ll, int, int, int, int, int> channel_pad{"cn_channel_pad"};
inline constexpr Kernel<const float*, float*, ll, int, int, int, int, int> channel_unpad{"cn_channel_unpad"};
inline constexpr Kernel<float*, float*, const float*, const float*, ll, double, double> bn_moving{
    "cn_bn_moving"};
inline constexpr Kernel<const float*, float*, ll, double> inv_std{"cn_inv_std"};

/// (name, signature) of every handle above, for the tests.
inline std::vector<std::pair<std::string, std::vector<std::string>>> all() {
  std::vector<std::pair<std::string, std::vector<std::string>>> v;
  auto add_one = [&](auto k) { v.emplace_back(k.name, k.signature()); };
  add_one(momentum);
  add_one(adam);
  add_one(ema);
  add_one(decay_grad);
  add_one(scale);
  add_one(sum_squares);
  add_one(softmax_xent);
  add_one(image_to_float);
  add_one(add);
  add_one(add_masked);
  add_one(affine);
  add_one(global_avg_pool);
  add_one(global_avg_pool_bwd);
  add_one(channel_pad);
  add_one(channel_unpad);
  add_one(bn_moving);
  add_one(inv_std);
  return v;
}
}  // namespace kernel

namespace kernel_detail {
template <class T>
struct identity {
  using type = T;
};

/// Owns a cudaLibrary_t (unloaded when it goes, also when a constructor
/// that loaded it throws later).
struct LoadedLibrary {
  cudaLibrary_t lib = nullptr;
  LoadedLibrary() = default;
  LoadedLibrary(const LoadedLibrary&) = delete;
  LoadedLibrary& operator=(const LoadedLibrary&) = delete;
  ~LoadedLibrary() {
    if (lib) (void)cudaLibraryUnload(lib);
  }
};
}  // namespace kernel_detail

/// Newest compute capability (major*10 + minor) NVRTC can target that is
/// not above `wanted`; the oldest one it supports if all are above.
inline int nvrtc_target(int wanted) {
  int count = 0;
  kernel_detail::check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(std::size_t(std::max(count, 0)));
  if (count > 0) kernel_detail::check_nvrtc(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  if (archs.empty()) throw BackendError("NVRTC supports no GPU architecture");
  std::sort(archs.begin(), archs.end());
  int best = archs.front();
  for (int a : archs)
    if (a <= wanted) best = a;
  return best;
}

/// PTX of the kernel program for compute capability `arch` (e.g. 80);
/// needs no GPU. Throws BackendError with NVRTC's log on failure.
inline std::string compile_ptx(int arch) {
  const std::string src = kernel_detail::kernel_source();
  kernel_detail::Program prog;
  kernel_detail::check_nvrtc(
      nvrtcCreateProgram(&prog.p, src.c_str(), "cifarnet_kernels.cu", 0, nullptr, nullptr),
      "nvrtcCreateProgram");
  const std::string arch_opt = "--gpu-architecture=compute_" + std::to_string(arch);
  const char* opts[] = {arch_opt.c_str(), "--fmad=false", "--std=c++17"};
  const nvrtcResult r = nvrtcCompileProgram(prog.p, 3, opts);
  if (r != NVRTC_SUCCESS) {
    std::size_t n = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(prog.p, &n) == NVRTC_SUCCESS && n > 1) {
      log.resize(n);
      (void)nvrtcGetProgramLog(prog.p, &log[0]);
    }
    throw BackendError(cifarnet::detail::concat("NVRTC compile of cifarnet's kernels for compute_", arch,
                                                ": ", nvrtcGetErrorString(r), "\n", log));
  }
  std::size_t n = 0;
  kernel_detail::check_nvrtc(nvrtcGetPTXSize(prog.p, &n), "nvrtcGetPTXSize");
  std::string ptx(n, '\0');
  kernel_detail::check_nvrtc(nvrtcGetPTX(prog.p, &ptx[0]), "nvrtcGetPTX");
  return ptx;
}

/// The loaded kernels for one compute capability; launch on a Device's stream.
class KernelLibrary {
 public:
  /// The library for `dev`'s GPU, compiled and loaded on first use (thread-safe).
  static KernelLibrary& get(const Dev& dev) {
    static std::mutex mu;
    static std::map<int, std::unique_ptr<KernelLibrary>> by_arch;
    static std::map<int, KernelLibrary*> by_device;  // ordinal -> its arch's library
    std::lock_guard<std::mutex> lock(mu);
    const auto known = by_device.find(dev.ordinal());
    if (known != by_device.end()) return *known->second;  // the steady state: one lookup
    int major = 0, minor = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev.ordinal()),
          "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev.ordinal()),
          "cudaDeviceGetAttribute");
    const int arch = nvrtc_target(major * 10 + minor);
    auto& slot = by_arch[arch];
    if (!slot) slot.reset(new KernelLibrary(arch));
    by_device[dev.ordinal()] = slot.get();
    return *slot;
  }

  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;
  ~KernelLibrary() = default;

  int arch() const { return arch_; }

  /// Launches kernel `k` over `n` elements (grid-stride, 256 threads per
  /// block, at most `max_blocks` blocks) on dev's stream, with dev's GPU
  /// current, with `args` converted to the kernel's parameter types.
  template <class... P>
  void launch(Dev& dev, const Kernel<P...>& k, std::size_t n, std::size_t max_blocks,
              typename kernel_detail::identity<P>::type... args) {
    if (n == 0) return;
    void* ptrs[] = {static_cast<void*>(&args)...};
    const std::size_t blocks = std::min(max_blocks, (n + kThreads - 1) / kThreads);
    const DeviceGuard guard(dev.ordinal());
    check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel(k.name)), dim3(unsigned(blocks)),
                           dim3(kThreads), ptrs, 0, dev.stream()),
          k.name);
  }

  static constexpr unsigned kThreads = 256;
  static constexpr std::size_t kMaxBlocks = 4096;

 private:
  explicit KernelLibrary(int arch) : arch_(arch) {
    const std::string ptx = compile_ptx(arch);
    check(cudaLibraryLoadData(&lib_.lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData of cifarnet's kernels (a driver older than the toolkit's PTX?)");
    for (const auto& k : kernel_names()) {  // a throw here unloads lib_ (LoadedLibrary)
      cudaKernel_t h = nullptr;
      check(cudaLibraryGetKernel(&h, lib_.lib, k.c_str()), "cudaLibraryGetKernel");
      kernels_[k] = h;
    }
  }
  cudaKernel_t kernel(const char* name) const {
    const auto it = kernels_.find(name);
    if (it == kernels_.end()) throw BackendError(cifarnet::detail::concat("no CUDA kernel named ", name));
    return it->second;
  }

  int arch_;
  kernel_detail::LoadedLibrary lib_;
  std::map<std::string, cudaKernel_t> kernels_;
};

// ------------------------------------------------------------ operations
// Every operation takes device pointers, or host pointers it stages (as the
// other ops of this backend), and returns when its result is ready. Their
// temporaries live in the Device's op slots (no allocation once grown).

inline constexpr std::size_t kSlotA = 5, kSlotB = 6;

/// Device slot `slot` as room for `n` values of type V (cudaMalloc'd, so
/// aligned for any V).
template <class V>
V* scratch(Dev& dev, std::size_t slot, std::size_t n) {
  return reinterpret_cast<V*>(dev.buffer(slot, (n * sizeof(V) + sizeof(float) - 1) / sizeof(float)));
}

/// Σ x² over n floats at x, accumulated in double: per-block partial sums
/// left in the device's read-back area, added on the host in block order
/// when the Pending is read (with the other values of its batch: one copy).
inline Pending sum_squares_deferred(Dev& dev, const float* x, std::size_t n, Readback* area = nullptr) {
  Readback& rb = area ? *area : dev.readback();
  if (n == 0) return Pending::ready(0.0);
  Staging st(dev);
  const float* dx = st.in(x, n);
  constexpr std::size_t kBlocks = 256;
  const std::size_t blocks = std::min(kBlocks, (n + KernelLibrary::kThreads - 1) / KernelLibrary::kThreads);
  const auto room = rb.reserve(blocks * sizeof(double));
  KernelLibrary::get(dev).launch(dev, kernel::sum_squares, n, kBlocks, dx, static_cast<long long>(n),
                                 static_cast<double*>(room.device));
  st.finish();
  return Pending::on(rb, room.generation, room.offset, blocks);
}

/// Σ x² over n floats at x, accumulated in double (read back and waited for).
inline double sum_squares(Dev& dev, const float* x, std::size_t n) {
  return sum_squares_deferred(dev, x, n, &dev.readback_now()).get();
}

/// L2 weight decay of several ranges [begin, end) of an arena: g += wd · v
/// on each, and the sum over all of Σ v² (double) as a Pending: each range's
/// per-block partial sums side by side in the read-back area, added on the
/// host in range order. `finish` (null: none) turns that sum into the value,
/// given `args`.
inline Pending weight_decay_ranges_deferred(Dev& dev,
                                            const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                            float* g, const float* v, float wd,
                                            PendingFinish finish = nullptr, const PendingArgs& args = {},
                                            Readback* area = nullptr) {
  Readback& rb = area ? *area : dev.readback();
  constexpr std::size_t kBlocks = 256;
  std::size_t extent = 0, total_blocks = 0;
  for (const auto& r : ranges) {
    if (r.second <= r.first) continue;
    extent = std::max(extent, r.second);
    total_blocks +=
        std::min(kBlocks, (r.second - r.first + KernelLibrary::kThreads - 1) / KernelLibrary::kThreads);
  }
  if (total_blocks == 0) return Pending::ready(finish ? finish(0.0, nullptr, args) : 0.0);
  Staging st(dev);
  const float* dv = st.in(v, extent);
  float* dg = st.inout(g, extent);
  const auto room = rb.reserve(total_blocks * sizeof(double));
  double* partial = static_cast<double*>(room.device);
  auto& lib = KernelLibrary::get(dev);
  std::size_t at = 0;
  for (const auto& r : ranges) {
    if (r.second <= r.first) continue;
    const std::size_t n = r.second - r.first;
    lib.launch(dev, kernel::sum_squares, n, kBlocks, dv + r.first, static_cast<long long>(n), partial + at);
    lib.launch(dev, kernel::decay_grad, n, KernelLibrary::kMaxBlocks, dg + r.first, dv + r.first,
               static_cast<long long>(n), wd);
    at += std::min(kBlocks, (n + KernelLibrary::kThreads - 1) / KernelLibrary::kThreads);
  }
  st.finish();
  return Pending::on(rb, room.generation, room.offset, total_blocks, finish, args);
}

/// weight_decay_ranges_deferred, read back and waited for: Σ v².
inline double weight_decay_ranges(Dev& dev, const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                  float* g, const float* v, float wd) {
  return weight_decay_ranges_deferred(dev, ranges, g, v, wd, nullptr, {}, &dev.readback_now()).get();
}

/// x *= s over n floats.
inline void scale(Dev& dev, float* x, std::size_t n, float s) {
  Staging st(dev);
  float* dx = st.inout(x, n);
  KernelLibrary::get(dev).launch(dev, kernel::scale, n, KernelLibrary::kMaxBlocks, dx,
                                 static_cast<long long>(n), s);
  st.finish();
}

/// One TF ApplyMomentum over n elements (var, acc read and written; g read).
inline void momentum_update(Dev& dev, float* var, float* acc, const float* g, std::size_t n, float lr,
                            float m, bool nesterov) {
  Staging st(dev);
  float* v = st.inout(var, n);
  float* a = st.inout(acc, n);
  const float* gr = st.in(g, n);
  KernelLibrary::get(dev).launch(dev, kernel::momentum, n, KernelLibrary::kMaxBlocks, v, a, gr,
                                 static_cast<long long>(n), lr, m, nesterov ? 1 : 0);
  st.finish();
}

/// Kernel `name` over n elements of x (read and written) and y (read), with
/// the trailing `scalars`: the shape of the two-operand updates below.
template <class... S>
void update_with(Dev& dev, const Kernel<float*, const float*, long long, S...>& k, float* x, const float* y,
                 std::size_t n, S... scalars) {
  Staging st(dev);
  float* dx = st.inout(x, n);
  const float* dy = st.in(y, n);
  KernelLibrary::get(dev).launch(dev, k, n, KernelLibrary::kMaxBlocks, dx, dy, static_cast<long long>(n),
                                 scalars...);
  st.finish();
}

/// shadow -= (shadow - var) · (1 - decay) over n elements.
inline void ema_update(Dev& dev, float* shadow, const float* var, std::size_t n, float one_minus_decay) {
  update_with(dev, kernel::ema, shadow, var, n, one_minus_decay);
}

/// tf.clip_by_global_norm over one flat gradient buffer, as
/// optim::ClipByGlobalNorm: g *= clip · min(1/norm, 1/clip) in float (also
/// when the norm is below clip, as TF); a NaN or infinite norm makes every
/// element NaN. Returns the norm before clipping.
inline double clip_by_global_norm(Dev& dev, float* g, std::size_t n, double clip_norm) {
  const double norm = std::sqrt(sum_squares(dev, g, n));
  const float clip = float(clip_norm), use_norm = float(norm);
  const float s = clip * std::min(1.0f / use_norm, 1.0f / clip) + (use_norm - use_norm);
  scale(dev, g, n, std::isfinite(s) ? s : std::numeric_limits<float>::quiet_NaN());
  return norm;
}

/// Mean sparse softmax cross-entropy of a batch of n rows of k logits (row-
/// major, as the library's (n, k, 1, 1) logits), with d(mean)/d(logits) in
/// dz when not null. Labels outside [0, k) are a DataError.
inline double xent_finish(double sum, const unsigned char* tail, const PendingArgs& a) {
  int bad = 0;
  std::memcpy(&bad, tail, sizeof bad);
  if (bad) {
    for (std::size_t i = 0; i < a.n; ++i)
      if (a.labels[i] < 0 || std::size_t(a.labels[i]) >= a.k)
        throw DataError(
            cifarnet::detail::concat("label ", a.labels[i], " of example ", i, " is outside [0, ", a.k, ")"));
  }
  return sum / double(a.n);
}

/// The mean softmax cross-entropy of n rows of k logits as a Pending (the
/// rows' losses and the count of bad labels wait in the read-back area; the
/// host adds the losses in row order), and d/dz into dz (null: none). The
/// host `labels` must stay valid until the Pending is read: a label outside
/// [0, k) is a DataError then.
inline Pending softmax_cross_entropy_deferred(Dev& dev, const float* z, const std::int32_t* labels,
                                              std::size_t n, std::size_t k, float* dz,
                                              Readback* area = nullptr) {
  Readback& rb = area ? *area : dev.readback();
  if (n == 0 || k == 0) throw ShapeError("softmax_cross_entropy on the GPU: empty logits");
  Staging st(dev);
  const float* d_z = st.in(z, n * k);
  float* d_dz = dz ? st.out(dz, n * k) : nullptr;
  int* d_labels = scratch<int>(dev, kSlotA, n);
  const auto room = rb.reserve((n + 1) * sizeof(double));  // the rows' losses, then the bad count
  double* loss = static_cast<double*>(room.device);
  int* bad = reinterpret_cast<int*>(loss + n);
  copy_to_device(dev, d_labels, labels, n * sizeof(int), "copy of labels to the device");
  check(cudaMemsetAsync(bad, 0, sizeof(double), dev.stream()), "cudaMemsetAsync");
  KernelLibrary::get(dev).launch(dev, kernel::softmax_xent, n, KernelLibrary::kMaxBlocks, d_z, d_labels,
                                 static_cast<long long>(n), to_int(k, "classes"), double(n), loss, d_dz, bad);
  st.finish();
  PendingArgs args;
  args.n = n;
  args.k = k;
  args.labels = labels;
  return Pending::on(rb, room.generation, room.offset, n, xent_finish, args);
}

/// softmax_cross_entropy_deferred, read back and waited for.
inline double softmax_cross_entropy(Dev& dev, const float* z, const std::int32_t* labels, std::size_t n,
                                    std::size_t k, float* dz) {
  return softmax_cross_entropy_deferred(dev, z, labels, n, k, dz, &dev.readback_now()).get();
}

/// `count` interleaved uint8 images (h, w, c) at src (host or device) into
/// the float batch tensor dst (count, c, h, w) in format `fmt`, starting at
/// example `first`: the pipeline's augmentation-free copy, on the GPU.
inline void images_to_float(Dev& dev, const unsigned char* src, std::size_t count, std::size_t c,
                            std::size_t h, std::size_t w, DataFormat fmt, float* dst, std::size_t first = 0) {
  const std::size_t per = c * h * w;
  if (count == 0 || per == 0) return;
  const DeviceGuard guard(dev.ordinal());
  const unsigned char* s = src;
  if (!is_device_pointer(src)) {
    unsigned char* d_src = scratch<unsigned char>(dev, kSlotA, count * per);
    copy_to_device(dev, d_src, src, count * per, "copy of images to the device");
    s = d_src;
  }
  Staging st(dev);
  float* d = st.out(dst + first * per, count * per);  // only the examples written
  KernelLibrary::get(dev).launch(dev, kernel::image_to_float, count * per, KernelLibrary::kMaxBlocks, s, d,
                                 static_cast<long long>(count), to_int(c, "c"), to_int(h, "h"),
                                 to_int(w, "w"), fmt == DataFormat::NCHW ? 1 : 0);
  st.finish();
}

}  // namespace cifarnet::backend::cuda
