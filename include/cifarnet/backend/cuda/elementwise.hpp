// cifarnet/backend/cuda/elementwise.hpp — the CUDA backend's parameter-free
// ops outside convolution and normalization (float), as the backend's own
// NVRTC kernels (backend/cuda/kernels.hpp): Eltwise (add with its ReLU,
// affine), ChannelPad, GlobalAvgPool (sums in double), batch norm's moving-
// statistics update, and the softmax cross-entropy loss. Host or device
// pointers, staged as every op of this backend.
//
// On the host, for now (the data they read are host arrays in this backend
// today; with a device-resident arena they bring its host copy current
// first): the optimizers' flat passes (Arena), the conv+BN fold
// (BnStats::fold, inference only), synchronized
// batch norm (its reducer sums over MPI on the host), and the predictions
// softmax/argmax/in_top1 on n×k logits.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/backend/host/arena.hpp"
#include "cifarnet/backend/host/bn_stats.hpp"
#include "cifarnet/backend/host/classify.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Eltwise<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  void add(Dev& dev, std::size_t n, const float* a, const float* b, float* y, bool relu) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* da = st.in(a, n);
    const float* db = st.in(b, n);
    float* dy = st.out(y, n);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::add, n, cu::KernelLibrary::kMaxBlocks, da, db, dy,
                                       static_cast<long long>(n), relu ? 1 : 0);
    st.finish();
  }
  void affine(Dev& dev, std::size_t n, const float* x, float a, float b, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dx = st.in(x, n);
    float* dy = st.out(y, n);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::affine, n, cu::KernelLibrary::kMaxBlocks, dx, dy,
                                       static_cast<long long>(n), a, b);
    st.finish();
  }
};

template <>
struct ChannelPad<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  void forward(Dev& dev, const ChannelGeom& g, std::size_t before, std::size_t after, const float* x,
               float* y) {
    const std::size_t padded = g.n * (before + g.c + after) * g.h * g.w;
    run(dev, backend::cuda::kernel::channel_pad, g, before, after, x, g.size(), y, padded);
  }
  void backward(Dev& dev, const ChannelGeom& g, std::size_t before, std::size_t after, const float* dy,
                float* dx) {
    const std::size_t padded = g.n * (before + g.c + after) * g.h * g.w;
    run(dev, backend::cuda::kernel::channel_unpad, g, before, after, dy, padded, dx, g.size());
  }

 private:
  // One thread per output element.
  using PadKernel = std::decay_t<decltype(backend::cuda::kernel::channel_pad)>;
  static void run(Dev& dev, const PadKernel& kernel, const ChannelGeom& g, std::size_t before,
                  std::size_t after, const float* in, std::size_t in_n, float* out, std::size_t out_n) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* din = st.in(in, in_n);
    float* dout = st.out(out, out_n);
    cu::KernelLibrary::get(dev).launch(
        dev, kernel, out_n, cu::KernelLibrary::kMaxBlocks, din, dout, static_cast<long long>(out_n),
        cu::to_int(g.c, "c"), cu::to_int(before, "pad"), cu::to_int(before + g.c + after, "channels"),
        cu::to_int(g.h * g.w, "h*w"), g.fmt == DataFormat::NCHW ? 1 : 0);
    st.finish();
  }
};

template <>
struct GlobalAvgPool<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  void forward(Dev& dev, const ChannelGeom& g, const float* x, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dx = st.in(x, g.size());
    float* dy = st.out(y, g.n * g.c);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::global_avg_pool, g.n * g.c,
                                       cu::KernelLibrary::kMaxBlocks, dx, dy,
                                       static_cast<long long>(g.n * g.c), cu::to_int(g.c, "c"),
                                       cu::to_int(g.h * g.w, "h*w"), g.fmt == DataFormat::NCHW ? 1 : 0);
    st.finish();
  }
  void backward(Dev& dev, const ChannelGeom& g, const float* dy, float* dx) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* ddy = st.in(dy, g.n * g.c);
    float* ddx = st.out(dx, g.size());
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::global_avg_pool_bwd, g.size(),
                                       cu::KernelLibrary::kMaxBlocks, ddy, ddx,
                                       static_cast<long long>(g.size()), cu::to_int(g.c, "c"),
                                       cu::to_int(g.h * g.w, "h*w"), g.fmt == DataFormat::NCHW ? 1 : 0);
    st.finish();
  }
};

template <>
struct SoftmaxCrossEntropy<backend::Cuda, float> : backend::host::SoftmaxCrossEntropyOp<float> {
  using Dev = Device<backend::Cuda>;
  double loss(Dev& dev, std::size_t n, std::size_t k, const float* z, const std::int32_t* labels, float* dz) {
    return backend::cuda::softmax_cross_entropy(dev, z, labels, n, k, dz);
  }
};

template <>
struct BnStats<backend::Cuda, float> : backend::host::BnStatsOp<float> {
  using Dev = Device<backend::Cuda>;
  /// The conv+BN fold, on the host: reads the arena's host copy (current
  /// first when the arena is device-resident; it writes layer buffers only).
  void fold(Dev& dev, std::size_t rows, std::size_t c, double eps, const float* w, const float* gamma,
            const float* beta, const float* mean, const float* var, float* folded_w, float* folded_b) {
    dev.mirrors().host_read_all();
    backend::host::BnStatsOp<float>::fold(dev, rows, c, eps, w, gamma, beta, mean, var, folded_w, folded_b);
  }
  void update_moving(Dev& dev, std::size_t c, double decay, double bessel, const float* mean,
                     const float* var, float* mmean, float* mvar) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dmean = st.in(mean, c);
    const float* dvar = st.in(var, c);
    float* dmm = st.inout(mmean, c);
    float* dmv = st.inout(mvar, c);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::bn_moving, c, cu::KernelLibrary::kMaxBlocks, dmm, dmv,
                                       dmean, dvar, static_cast<long long>(c), decay, bessel);
    st.finish();
  }
};

template <>
struct SyncBatchNorm<backend::Cuda, float> : backend::host::SyncBatchNormOp<float> {};

/// The optimizers' flat passes on the host arena (optim::cuda::Momentum and
/// ::Adam run the same updates on the GPU with backend/cuda/kernels.hpp).
/// With a device-resident arena (Model::set_device_resident) the device copy
/// is the current one, so each pass first brings the host copy current
/// (a download of what the device wrote) and, for a pass that writes, has
/// the device take it back before its next op; without one the mirror set
/// is empty and these calls cost nothing.
template <>
struct Arena<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  using T = float;
  template <class... A>
  void sgd(Dev& d, A&&... a) {
    host(d, true).sgd(d, std::forward<A>(a)...);
  }
  template <class... A>
  void momentum(Dev& d, A&&... a) {
    host(d, true).momentum(d, std::forward<A>(a)...);
  }
  template <class... A>
  void adam(Dev& d, A&&... a) {
    host(d, true).adam(d, std::forward<A>(a)...);
  }
  template <class... A>
  void ema(Dev& d, A&&... a) {
    host(d, true).ema(d, std::forward<A>(a)...);
  }
  template <class... A>
  void scale(Dev& d, A&&... a) {
    host(d, true).scale(d, std::forward<A>(a)...);
  }
  template <class... A>
  void scale_div(Dev& d, A&&... a) {
    host(d, true).scale_div(d, std::forward<A>(a)...);
  }
  template <class... A>
  void fill(Dev& d, A&&... a) {
    host(d, true).fill(d, std::forward<A>(a)...);
  }
  template <class... A>
  void copy(Dev& d, A&&... a) {
    host(d, true).copy(d, std::forward<A>(a)...);
  }
  template <class... A>
  void swap(Dev& d, A&&... a) {
    host(d, true).swap(d, std::forward<A>(a)...);
  }
  template <class... A>
  double sum_squares(Dev& d, A&&... a) {
    return host(d, false).sum_squares(d, std::forward<A>(a)...);
  }
  template <class... A>
  bool all_finite(Dev& d, A&&... a) {
    return host(d, false).all_finite(d, std::forward<A>(a)...);
  }
  template <class... A>
  NonFinite find_non_finite(Dev& d, A&&... a) {
    return host(d, false).find_non_finite(d, std::forward<A>(a)...);
  }
  template <class... A>
  double weight_decay(Dev& d, A&&... a) {
    return host(d, true).weight_decay(d, std::forward<A>(a)...);
  }

 private:
  backend::host::ArenaOp<float>& host(Dev& d, bool write) {
    if (write)
      d.mirrors().host_write_all();
    else
      d.mirrors().host_read_all();
    return op_;
  }
  backend::host::ArenaOp<float> op_;
};

}  // namespace ops
}  // namespace cifarnet
