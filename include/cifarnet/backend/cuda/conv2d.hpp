// cifarnet/backend/cuda/conv2d.hpp — convolution through cuDNN's graph API.
//
// Weights: the library's HWIO weights are transposed on the device into the
// filter layout cuDNN's engines want (KCRS for NCHW activations, KRSC for
// NHWC) by the backend's strided-copy kernel (transform,
// backend/cuda/kernels.hpp), and the weight gradient comes back the same
// way. The bias and its gradient are the backend's own kernels
// (add_channel_bias, channel_sum: the legacy cudnnAddTensor and
// cudnnConvolutionBackwardBias are deprecated in cuDNN 9).
//
// Padding: the convolution pads symmetrically. Symmetric geometries use the
// graph's own padding; asymmetric ones (TF SAME with an even kernel or a
// stride, the ResNet's explicit padding) copy the input into a zero-filled
// padded buffer and convolve it unpadded (backward_data takes the interior
// of the padded gradient): backend/cuda/common.hpp, PaddedInput.
//
// Engines: per geometry and pass, the heuristics' offers are measured once
// (backend/cuda/graph.hpp, measure_pass: the graph API's cudnnFind, on
// scratch buffers, workspace up to Device::workspace_limit()) and the choice
// is cached process-wide (backend/cuda/host_config.hpp, ConvAlgoCache: a
// second layer or op object with the same geometry, device and options
// measures nothing, it rebuilds the plan from the cached engine and knobs).
// The fastest measured engine is taken that fits the limit, uses no tensor-
// core (TF32) math unless the device's ConvOptions allow TF32, no FFT or
// Winograd unless they allow transforms, and is deterministic when they ask
// for it (select_algorithm). Each pass's workspace is what its execution
// plan reports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/graph.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Conv2d<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const std::shared_ptr<Plan> pp = plan(dev, g);
    Plan& p = *pp;
    const float* dx_in = st.in(x, g.in_shape().size());
    const float* dw = st.in(w, weights_size(g));
    const float* db = b ? st.in(b, g.oc) : nullptr;
    float* dy = st.out(y, g.out_shape().size());
    float* wk = to_filter(dev, p, dw);
    const float* xin = p.pad.on ? cu::pad_copy(dev, kPaddedSlot, p.pad, p.x, dx_in, 0.0f) : dx_in;
    cu::ConvExecPlan& e = p.exec[int(cu::ConvPass::Forward)];
    cu::execute(dev, e, cu::ConvPass::Forward, xin, wk, dy, dev.workspace(e.workspace), pp);
    if (db) cu::add_channel_bias(dev, g.fmt, g.n, g.oc, g.oh * g.ow, db, dy);
    st.finish();
  }

  void backward_data(Dev& dev, const ConvGeom& g, const float* dy, const float* w, float* dx) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const std::shared_ptr<Plan> pp = plan(dev, g);
    Plan& p = *pp;
    const float* ddy = st.in(dy, g.out_shape().size());
    const float* dw = st.in(w, weights_size(g));
    float* ddx = st.out(dx, g.in_shape().size());
    float* wk = to_filter(dev, p, dw);
    float* target = p.pad.on ? dev.buffer(kPaddedSlot, p.pad.size) : ddx;
    cu::ConvExecPlan& e = p.exec[int(cu::ConvPass::BackwardData)];
    cu::execute(dev, e, cu::ConvPass::BackwardData, target, wk, ddy, dev.workspace(e.workspace), pp);
    if (p.pad.on) cu::unpad(dev, p.pad, target, p.x, ddx);  // the interior of the padded gradient is dx
    st.finish();
  }

  void backward_weights(Dev& dev, const ConvGeom& g, const float* x, const float* dy, float* dw, float* db) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const std::shared_ptr<Plan> pp = plan(dev, g);
    Plan& p = *pp;
    const float* dx_in = st.in(x, g.in_shape().size());
    const float* ddy = st.in(dy, g.out_shape().size());
    float* ddw = st.out(dw, weights_size(g));
    float* ddb = db ? st.out(db, g.oc) : nullptr;
    const float* xin = p.pad.on ? cu::pad_copy(dev, kPaddedSlot, p.pad, p.x, dx_in, 0.0f) : dx_in;
    float* dwk = dev.buffer(kFilterSlot, weights_size(g));
    cu::ConvExecPlan& e = p.exec[int(cu::ConvPass::BackwardFilter)];
    cu::execute(dev, e, cu::ConvPass::BackwardFilter, xin, dwk, ddy, dev.workspace(e.workspace), pp);
    cu::transform(dev, p.filter_as_tensor, dwk, p.hwio, ddw);  // filter layout back to HWIO
    if (ddb) cu::channel_sum(dev, g.fmt, g.n, g.oc, g.oh * g.ow, ddy, ddb);
    st.finish();
  }

 private:
  static constexpr std::size_t kFilterSlot = 1, kPaddedSlot = 2;

  /// Everything cuDNN needs for one geometry, built once.
  struct Plan {
    ConvGeom g;
    backend::cuda::PaddedInput pad;  ///< asymmetric padding: convolve an explicitly padded copy
    backend::cuda::TensorDesc x;     ///< the input as the caller holds it
    backend::cuda::TensorDesc hwio;  ///< the weights as HWIO memory, seen as a (K, C, R, S) tensor
    backend::cuda::TensorDesc filter_as_tensor;  ///< the same dims in cuDNN's filter layout
    backend::cuda::GraphDesc props;              ///< the device, for heuristics and plans
    backend::cuda::ConvGraph graphs[3];          ///< indexed by ConvPass
    backend::cuda::ConvExecPlan exec[3];         ///< indexed by ConvPass
  };

  static std::size_t weights_size(const ConvGeom& g) { return g.kh * g.kw * g.ic * g.oc; }

  /// Shared: work a launch queue holds keeps its plan alive (CUDA graphs).
  std::shared_ptr<Plan> plan(Dev& dev, const ConvGeom& g) {
    for (auto& p : plans_)
      if (p->g == g) return p;
    if (plans_.size() >= 16) plans_.erase(plans_.begin());  // batch sizes come and go; keep a few
    plans_.push_back(build(dev, g));
    return plans_.back();
  }

  static std::shared_ptr<Plan> build(Dev& dev, const ConvGeom& g) {
    namespace cu = backend::cuda;
    auto p = std::make_shared<Plan>();
    p->g = g;
    cu::set_activation(p->x, g.fmt, g.n, g.ic, g.ih, g.iw);
    p->pad.setup(g, g.ic);
    const std::size_t K = g.oc, C = g.ic, R = g.kh, S = g.kw;
    cu::set_strided(p->hwio, K, C, R, S, 1, K, S * C * K, C * K);
    if (g.fmt == DataFormat::NHWC)
      cu::set_strided(p->filter_as_tensor, K, C, R, S, R * S * C, 1, S * C, C);
    else
      cu::set_strided(p->filter_as_tensor, K, C, R, S, C * R * S, R * S, S, 1);
    const cu::ConvShape s = cu::conv_shape(g);
    p->props = cu::device_properties(dev.cudnn());
    for (cu::ConvPass pass :
         {cu::ConvPass::Forward, cu::ConvPass::BackwardData, cu::ConvPass::BackwardFilter})
      p->graphs[int(pass)] = cu::conv_graph(pass, s);
    const cu::ConvAlgoKey key{dev.ordinal(), g, dev.conv_options(), dev.workspace_limit()};
    const cu::ConvAlgorithms a = cu::ConvAlgoCache::instance().get(key, [&] { return measure(dev, *p); });
    const cu::EngineChoice* chosen[3] = {&a.fwd, &a.bwd_data, &a.bwd_filter};
    for (std::size_t i = 0; i < 3; ++i) {
      p->exec[i] = cu::build_plan(p->graphs[i], p->props, *chosen[i]);
      if (!p->exec[i])
        throw BackendError(detail::concat("CUDA Conv2d: cuDNN engine ", chosen[i]->engine, " chosen for the ",
                                          cu::pass_name(p->graphs[i].pass), " pass of ", describe(g),
                                          " no longer builds a plan"));
    }
    return p;
  }

  // Measures every allowed engine of the three passes on scratch buffers
  // (zeros) of this geometry, on dev's GPU.
  static backend::cuda::ConvAlgorithms measure(Dev& dev, const Plan& p) {
    namespace cu = backend::cuda;
    const ConvGeom& g = p.g;
    const std::size_t xn = p.pad.on ? p.pad.size : g.in_shape().size();
    cu::DeviceBuffer<float> x(dev.ordinal(), xn), w(dev.ordinal(), weights_size(g)),
        y(dev.ordinal(), g.out_shape().size());
    const cu::DeviceGuard guard(dev.ordinal());
    cu::check(cudaMemsetAsync(x.data(), 0, xn * sizeof(float), dev.stream()), "cudaMemsetAsync");
    cu::check(cudaMemsetAsync(w.data(), 0, w.size() * sizeof(float), dev.stream()), "cudaMemsetAsync");
    cu::check(cudaMemsetAsync(y.data(), 0, y.size() * sizeof(float), dev.stream()), "cudaMemsetAsync");
    const std::string what = describe(g);
    cu::ConvAlgorithms out;
    cu::EngineChoice* passes[3] = {&out.fwd, &out.bwd_data, &out.bwd_filter};
    for (std::size_t i = 0; i < 3; ++i)
      *passes[i] = cu::measure_pass(dev, p.graphs[i], p.props, x.data(), w.data(), y.data(),
                                    dev.conv_options(), dev.workspace_limit(), what);
    dev.sync();  // the scratch buffers go when this returns
    return out;
  }

  static std::string describe(const ConvGeom& g) {
    return detail::concat(to_string(g.fmt), " n=", g.n, " in=", g.ic, "x", g.ih, "x", g.iw, " out=", g.oc,
                          "x", g.oh, "x", g.ow, " k=", g.kh, "x", g.kw, " s=", g.sh, "x", g.sw);
  }

  // HWIO weights (device) into cuDNN's filter layout; returns the scratch copy.
  static float* to_filter(Dev& dev, Plan& p, const float* w_hwio) {
    float* wk = dev.buffer(kFilterSlot, weights_size(p.g));
    backend::cuda::transform(dev, p.hwio, w_hwio, p.filter_as_tensor, wk);
    return wk;
  }

  std::vector<std::shared_ptr<Plan>> plans_;
};

}  // namespace ops
}  // namespace cifarnet
