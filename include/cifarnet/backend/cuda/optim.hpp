// cifarnet/backend/cuda/optim.hpp — momentum SGD and Adam on the GPU, drop-
// in replacements for optim::Momentum and optim::Adam (same options, same
// TensorFlow slot names and checkpoint layout, the same per-element math:
// backend/cuda/kernels.hpp shares it with the host).
//
// The slots (accumulators, moments) live in device memory, arena-shaped like
// the CPU optimizers' slots. The parameters' values and gradients are taken
// where they are: used in place when the arena is device memory, staged
// through the device otherwise (as every op of this backend). visit_state()
// (checkpoints, state_dict) sees a host mirror: it is refreshed from the
// device before the visit and sent back before the next step, so a restore
// through visit_state takes effect. One optimizer per model and device; not
// thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/adam.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/momentum.hpp"
#include "cifarnet/optim/select.hpp"

namespace cifarnet::optim::cuda {

namespace cu = backend::cuda;

namespace detail {

/// One arena-shaped slot buffer on the device, zero at the start, with a
/// host mirror for visit_state, synchronised lazily (cu::BasicMirror): the
/// steps copy nothing; a visit downloads once, and uploads once before the
/// next step (a visit may write: a restore).
class DeviceSlot {
 public:
  /// Allocates on dev's GPU whatever device the calling thread has current.
  DeviceSlot(cu::Dev& dev, std::size_t n) : d_(dev.ordinal(), n ? n : 1), h_(n ? n : 1) {
    const cu::DeviceGuard guard(dev.ordinal());
    cu::check(cudaMemsetAsync(d_.data(), 0, d_.size() * sizeof(float), dev.stream()), "cudaMemsetAsync");
    dev.sync();
    std::fill(h_.data(), h_.data() + h_.size(), 0.0f);
    mirror_ =
        cu::BasicMirror<cu::RuntimeCopyApi, cu::Dev>(dev, d_.data(), h_.data(), n, cu::MirrorState::Clean);
  }
  /// The device copy, current, for a kernel that updates it.
  float* device() { return mirror_.device_write(); }
  /// The host mirror, current; the caller may write it.
  float* host() { return mirror_.host_write(); }
  cu::MirrorState state() const { return mirror_.state(); }

 private:
  cu::DeviceBuffer<float> d_;
  cifarnet::detail::AlignedBuffer<float> h_;
  cu::BasicMirror<cu::RuntimeCopyApi, cu::Dev> mirror_;
};

/// Calls f(begin, size) for every contiguous run of selected elements: the
/// whole padded buffer when everything is selected (padding stays zero).
template <class F>
void for_spans(const optim::detail::Layout& l, F&& f) {
  if (l.covers_all()) {
    f(std::size_t(0), l.buffer_size());
    return;
  }
  for (const auto& e : l.entries()) f(e.offset, e.size);
}

/// What the GPU optimizers share: the device, the options, the layout of
/// the trained parameters, and one staged pass over the arena.
template <class Options>
class DeviceOptimizer {
 public:
  using Scalar = float;
  static constexpr bool is_optimizer = true;
  const Options& options() const { return opts_; }

 protected:
  DeviceOptimizer(Device<backend::Cuda>& dev, const Parameters<float>& params, Options opts,
                  const Selection& train)
      : dev_(&dev), opts_(std::move(opts)), layout_(init(opts_, params, train)) {}

  /// Stages the values (read, written) and gradients (read), then calls
  /// launch(lib, var, g, begin, size) for every span of trained elements
  /// (var and g already offset to the span).
  template <class F>
  void run(Parameters<float>& params, F&& launch) {
    layout_.check(params, opts_.name());
    const std::size_t n = layout_.buffer_size();
    cu::Staging st(*dev_);
    float* var = st.inout(params.values().data(), n);
    const float* g = st.in(params.grads().data(), n);
    auto& lib = cu::KernelLibrary::get(*dev_);
    for_spans(layout_, [&](std::size_t b, std::size_t len) { launch(lib, var + b, g + b, b, len); });
    st.finish();
  }

  Device<backend::Cuda>* dev_;
  Options opts_;
  optim::detail::Layout layout_;

 private:
  static optim::detail::Layout init(const Options& o, const Parameters<float>& params,
                                    const Selection& train) {
    o.validate();
    return optim::detail::Layout::trainable(params, train);
  }
};

}  // namespace detail

/// optim::Momentum on the GPU `dev` (TF ApplyMomentum; slot "<param>/Momentum").
template <class T = float>
class Momentum : public detail::DeviceOptimizer<MomentumOptions> {
  static_assert(std::is_same_v<T, float>, "optim::cuda::Momentum: the CUDA backend is float only");

 public:
  using Options = MomentumOptions;

  Momentum(Device<backend::Cuda>& dev, const Parameters<T>& params, Options opts = {},
           const Selection& train = {})
      : DeviceOptimizer(dev, params, std::move(opts), train), accum_(dev, layout_.buffer_size()) {}

  /// One update with learning rate `lr` (finite, >= 0).
  void step(Parameters<T>& params, double lr) {
    const float a = optim::detail::checked_lr<T>(lr, opts_.name());
    float* acc = accum_.device();
    run(params, [&](cu::KernelLibrary& lib, float* var, const float* g, std::size_t b, std::size_t len) {
      lib.launch(*dev_, cu::kernel::momentum, len, cu::KernelLibrary::kMaxBlocks, var, acc + b, g,
                 static_cast<long long>(len), a, float(opts_.momentum()), opts_.nesterov() ? 1 : 0);
    });
  }

  template <class F>
  void visit_state(F&& f) {
    float* h = accum_.host();
    for (const auto& e : layout_.entries()) f(e.name + "/" + opts_.name(), h + e.offset, e.shape);
  }

 private:
  detail::DeviceSlot accum_;
};

/// optim::Adam on the GPU `dev` (TF ApplyAdam; slots "<param>/Adam",
/// "<param>/Adam_1", "beta1_power", "beta2_power").
template <class T = float>
class Adam : public detail::DeviceOptimizer<AdamOptions> {
  static_assert(std::is_same_v<T, float>, "optim::cuda::Adam: the CUDA backend is float only");

 public:
  using Options = AdamOptions;

  Adam(Device<backend::Cuda>& dev, const Parameters<T>& params, Options opts = {},
       const Selection& train = {})
      : DeviceOptimizer(dev, params, std::move(opts), train),
        m_(dev, layout_.buffer_size()),
        v_(dev, layout_.buffer_size()),
        beta1_power_(T(opts_.beta1())),
        beta2_power_(T(opts_.beta2())) {}

  void step(Parameters<T>& params, double lr) {
    const T lr_t = optim::detail::checked_lr<T>(lr, opts_.name());
    const T b1 = T(opts_.beta1()), b2 = T(opts_.beta2()), eps = T(opts_.epsilon());
    // The scalars exactly as optim::Adam computes them.
    const T alpha = lr_t * std::sqrt(T(1) - beta2_power_) / (T(1) - beta1_power_);
    const T omb1 = T(1) - b1, omb2 = T(1) - b2;
    float* m = m_.device();
    float* v = v_.device();
    run(params, [&](cu::KernelLibrary& lib, float* var, const float* g, std::size_t b, std::size_t len) {
      lib.launch(*dev_, cu::kernel::adam, len, cu::KernelLibrary::kMaxBlocks, var, m + b, v + b, g,
                 static_cast<long long>(len), alpha, omb1, omb2, eps);
    });
    beta1_power_ = beta1_power_ * b1;
    beta2_power_ = beta2_power_ * b2;
  }

  template <class F>
  void visit_state(F&& f) {
    const std::string& nm = opts_.name();
    float* m = m_.host();
    float* v = v_.host();
    for (const auto& e : layout_.entries()) {
      f(e.name + "/" + nm, m + e.offset, e.shape);
      f(e.name + "/" + nm + "_1", v + e.offset, e.shape);
    }
    const std::vector<std::size_t> scalar;
    f(std::string("beta1_power"), &beta1_power_, scalar);
    f(std::string("beta2_power"), &beta2_power_, scalar);
  }

  T beta1_power() const { return beta1_power_; }
  T beta2_power() const { return beta2_power_; }

 private:
  detail::DeviceSlot m_, v_;
  T beta1_power_, beta2_power_;
};

}  // namespace cifarnet::optim::cuda
