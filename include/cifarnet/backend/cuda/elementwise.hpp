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
#include <initializer_list>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

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
  void add_masked(Dev& dev, std::size_t n, const float* a, const float* b, const float* m, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* da = st.in(a, n);
    const float* db = st.in(b, n);
    const float* dm = st.in(m, n);
    float* dy = st.out(y, n);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::add_masked, n, cu::KernelLibrary::kMaxBlocks, da, db,
                                       dm, dy, static_cast<long long>(n));
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
  /// Byte images (h, w, c interleaved; host or device memory) to the float
  /// batch tensor on the GPU: the image_to_float kernel (host bytes are
  /// copied up first).
  void from_bytes(Dev& dev, std::size_t count, std::size_t c, std::size_t h, std::size_t w, DataFormat fmt,
                  const std::uint8_t* src, float* dst) {
    backend::cuda::images_to_float(dev, src, count, c, h, w, fmt, dst);
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
  /// loss() left on the GPU until read (with the step's other values).
  Pending loss_deferred(Dev& dev, std::size_t n, std::size_t k, const float* z, const std::int32_t* labels,
                        float* dz) {
    return backend::cuda::softmax_cross_entropy_deferred(dev, z, labels, n, k, dz);
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

/// Synchronized batch norm (MPI replicas) on the host: its inputs are
/// brought to the host (device tensors downloaded), the host op runs with the
/// cross-replica reducer, and its outputs go back where they live.
template <>
struct SyncBatchNorm<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  double statistics(Dev& dev, const ChannelGeom& g, const float* x, CrossReplicaSum& reducer, float* mean,
                    float* var) {
    namespace cu = backend::cuda;
    cu::to_host(dev, x, g.size(), x_);
    mean_.resize(g.c);
    var_.resize(g.c);
    const double m = op_.statistics(dev, g, x_.data(), reducer, mean_.data(), var_.data());
    cu::from_host(dev, mean_.data(), g.c, mean);
    cu::from_host(dev, var_.data(), g.c, var);
    return m;
  }
  void backward(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* dy,
                const float* gamma, const float* mean, const float* var, CrossReplicaSum& reducer, float* dx,
                float* dgamma, float* dbeta) {
    namespace cu = backend::cuda;
    cu::to_host(dev, x, g.size(), x_);
    cu::to_host(dev, dy, g.size(), dy_);
    cu::to_host(dev, gamma, g.c, gamma_);
    cu::to_host(dev, mean, g.c, mean_);
    cu::to_host(dev, var, g.c, var_);
    dx_.resize(g.size());
    dgamma_.resize(g.c);
    dbeta_.resize(g.c);
    op_.backward(dev, g, eps, x_.data(), dy_.data(), gamma_.data(), mean_.data(), var_.data(), reducer,
                 dx_.data(), dgamma_.data(), dbeta_.data());
    cu::from_host(dev, dx_.data(), g.size(), dx);
    cu::from_host(dev, dgamma_.data(), g.c, dgamma);
    cu::from_host(dev, dbeta_.data(), g.c, dbeta);
  }

 private:
  backend::host::SyncBatchNormOp<float> op_;
  std::vector<float> x_, dy_, gamma_, mean_, var_, dx_, dgamma_, dbeta_;  // host copies, reused
};

/// The flat arena passes (optimizers, weight decay, clipping, the numerics
/// check, EMA). When every buffer a pass touches is on the GPU (a
/// device-resident arena, Model::set_device_resident, and slots in device
/// memory) the pass runs there with the backend's NVRTC kernels, span by
/// span, and copies nothing; only the passes that return a value wait for
/// the GPU (a sum, a flag). Otherwise (a host optimizer slot, a host EMA
/// shadow) it runs on the host arena: with a device-resident arena each
/// such pass first brings the host copy current (a download of what the
/// device wrote) and, for a pass that writes, has the device take it back
/// before its next op; without one the mirror set is empty and that costs
/// nothing.
template <>
struct Arena<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  using T = float;
  void sgd(Dev& d, const ArenaRuns& r, T* var, const T* g, T lr) {
    if (on_device(d, {var, g}))
      return spans(r, [&](std::size_t b, std::size_t n) {
        backend::cuda::update_with(d, backend::cuda::kernel::decay_grad, var + b, g + b, n, -lr);
      });
    host(d, true).sgd(d, r, var, g, lr);
  }
  void momentum(Dev& d, const ArenaRuns& r, T* var, T* acc, const T* g, T lr, T m, bool nesterov) {
    if (on_device(d, {var, acc, g}))
      return spans(r, [&](std::size_t b, std::size_t n) {
        backend::cuda::momentum_update(d, var + b, acc + b, g + b, n, lr, m, nesterov);
      });
    host(d, true).momentum(d, r, var, acc, g, lr, m, nesterov);
  }
  void adam(Dev& d, const ArenaRuns& r, T* var, T* m, T* v, const T* g, T alpha, T omb1, T omb2, T eps) {
    namespace cu = backend::cuda;
    if (on_device(d, {var, m, v, g}))
      return spans(r, [&](std::size_t b, std::size_t n) {
        cu::Staging st(d);  // every pointer maps to its device copy: nothing is copied
        float* dv = st.inout(var + b, n);
        float* dm = st.inout(m + b, n);
        float* dvv = st.inout(v + b, n);
        const float* dg = st.in(g + b, n);
        cu::KernelLibrary::get(d).launch(d, cu::kernel::adam, n, cu::KernelLibrary::kMaxBlocks, dv, dm, dvv,
                                         dg, static_cast<long long>(n), alpha, omb1, omb2, eps);
        st.finish();
      });
    host(d, true).adam(d, r, var, m, v, g, alpha, omb1, omb2, eps);
  }
  void ema(Dev& d, const ArenaRuns& r, T* shadow, const T* value, T omd) {
    if (on_device(d, {shadow, value}))
      return spans(r, [&](std::size_t b, std::size_t n) {
        backend::cuda::ema_update(d, shadow + b, value + b, n, omd);
      });
    host(d, true).ema(d, r, shadow, value, omd);
  }
  void scale(Dev& d, const ArenaRuns& r, T* x, T s) {
    if (on_device(d, {x}))
      return spans(r, [&](std::size_t b, std::size_t n) { backend::cuda::scale(d, x + b, n, s); });
    host(d, true).scale(d, r, x, s);
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
  double sum_squares(Dev& d, const ArenaRuns& r, const T* x) {
    return sums(d, r, x, &d.readback_now()).get();
  }
  /// Σ x² left on the GPU until read (with a device-resident arena): one
  /// span's partial sums in the read-back area; several spans are read
  /// back and added here.
  Pending sum_squares_deferred(Dev& d, const ArenaRuns& r, const T* x) { return sums(d, r, x, nullptr); }
  /// On the GPU: the sum of squares in double is finite exactly when every
  /// element is (a float's square is below 1.2e77, and no arena holds 1e231
  /// of them).
  bool all_finite(Dev& d, const ArenaRuns& r, const T* x) {
    if (!on_device(d, {x})) return host(d, false).all_finite(d, r, x);
    return std::isfinite(sums(d, r, x, &d.readback_now()).get());
  }
  Pending finite_deferred(Dev& d, const ArenaRuns& r, const T* x) {
    if (!on_device(d, {x}))
      return Pending::ready(host(d, false).all_finite(d, r, x) ? 0.0
                                                               : std::numeric_limits<double>::quiet_NaN());
    return sums(d, r, x, nullptr);
  }
  template <class... A>
  NonFinite find_non_finite(Dev& d, A&&... a) {
    return host(d, false).find_non_finite(d, std::forward<A>(a)...);  // after all_finite failed: once
  }
  /// g += wd · v over [begin, end); returns Σ v² (in double; on the GPU the
  /// partial sums of blocks are added, not the elements in order).
  double weight_decay(Dev& d, std::size_t begin, std::size_t end, T* g, const T* v, T wd) {
    if (!on_device(d, {g, v})) return host(d, true).weight_decay(d, begin, end, g, v, wd);
    return backend::cuda::weight_decay_ranges(d, {{begin, end}}, g, v, wd);
  }
  /// Every decayed range in one launch (a multi-tensor kernel over a chunk
  /// table uploaded once) with one read back (WeightDecay).
  double weight_decay_ranges(Dev& d, const std::vector<std::pair<std::size_t, std::size_t>>& ranges, T* g,
                             const T* v, T wd) {
    return decay(d, ranges, g, v, wd, nullptr, {}, &d.readback_now()).get();
  }
  /// The same, its sum left on the GPU until read (device-resident arena).
  Pending weight_decay_ranges_deferred(Dev& d, const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                       T* g, const T* v, T wd, PendingFinish finish,
                                       const PendingArgs& args) {
    return decay(d, ranges, g, v, wd, finish, args, nullptr);
  }
  /// With a device-resident arena, an optimizer's slot (or an EMA's shadow)
  /// is mirrored on the GPU too, so the passes above find it there; the
  /// handle unmirrors it (its host copy current) when the owner lets go,
  /// and does nothing if the device went first.
  std::shared_ptr<void> adopt_state(Dev& d, T* p, std::size_t n) {
    if (d.mirrors().empty() || !p || n == 0 || d.mirrors().mirror_of(p)) return nullptr;
    d.mirror(p, n);
    std::weak_ptr<const int> life = d.life();
    Dev* dev = &d;
    return std::shared_ptr<void>(p, [dev, life](void* q) noexcept {
      if (!life.lock()) return;
      try {
        dev->unmirror(static_cast<const float*>(q));
      } catch (...) {  // a failing GPU while the owner goes: nothing left to save
      }
    });
  }

 private:
  /// Every buffer on the GPU: in a mirrored range (the resident arena) or
  /// device memory.
  static bool on_device(Dev& d, std::initializer_list<const T*> ps) {
    if (d.mirrors().empty()) return false;  // no resident arena: the host arena is the current one
    for (const T* p : ps)
      if (!d.mirrors().mirror_of(p) && !backend::cuda::is_device_pointer(p)) return false;
    return true;
  }
  /// f(begin, size) for each run of contiguous chunks (one launch per run).
  template <class F>
  static void spans(const ArenaRuns& r, F&& f) {
    std::size_t b = 0, e = 0;
    for (const auto& c : r.chunks) {
      if (c.begin == e && e != 0) {
        e = c.end;
        continue;
      }
      if (e > b) f(b, e - b);
      b = c.begin;
      e = c.end;
    }
    if (e > b) f(b, e - b);
  }
  /// Σ x² over r: on the GPU into `area` (null: the deferred one), else on the host.
  Pending sums(Dev& d, const ArenaRuns& r, const T* x, backend::cuda::Readback* area) {
    if (!on_device(d, {x})) return Pending::ready(host(d, false).sum_squares(d, r, x));
    std::size_t count = 0, first = 0, size = 0;
    spans(r, [&](std::size_t b, std::size_t n) {
      if (count++ == 0) first = b, size = n;
    });
    if (count == 1) return backend::cuda::sum_squares_deferred(d, x + first, size, area);
    double s = 0;
    spans(r, [&](std::size_t b, std::size_t n) { s += backend::cuda::sum_squares(d, x + b, n); });
    return Pending::ready(s);
  }
  /// Weight decay of `ranges`: on the GPU into `area` (null: the deferred one), else on the host.
  Pending decay(Dev& d, const std::vector<std::pair<std::size_t, std::size_t>>& ranges, T* g, const T* v,
                T wd, PendingFinish finish, const PendingArgs& args, backend::cuda::Readback* area) {
    if (on_device(d, {g, v}))
      return backend::cuda::weight_decay_ranges_deferred(d, decay_table_, ranges, g, v, wd, finish, args,
                                                         area);
    auto& h = host(d, true);
    double s = 0;
    for (const auto& r : ranges) s += h.weight_decay(d, r.first, r.second, g, v, wd);
    return Pending::ready(finish ? finish(s, nullptr, args) : s);
  }
  backend::host::ArenaOp<float>& host(Dev& d, bool write) {
    if (write)
      d.mirrors().host_write_all();
    else
      d.mirrors().host_read_all();
    return op_;
  }
  backend::host::ArenaOp<float> op_;
  backend::cuda::DeviceChunkTable decay_table_;  // the decayed ranges' chunks: one launch per weight decay
};

}  // namespace ops
}  // namespace cifarnet
