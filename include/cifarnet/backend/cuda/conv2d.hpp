// cifarnet/backend/cuda/conv2d.hpp — convolution through cuDNN.
//
// Weights: the library's HWIO weights are transposed on the device into the
// filter layout cuDNN wants (KCRS for NCHW activations, KRSC for NHWC) by
// cudnnTransformTensor with strided descriptors, and the weight gradient
// comes back the same way; no custom kernel.
//
// Padding: cuDNN pads symmetrically. Symmetric geometries use cuDNN's
// padding; asymmetric ones (TF SAME with an even kernel or a stride, the
// ResNet's explicit padding) copy the input into a zero-filled padded buffer
// and convolve it unpadded (backward_data takes the interior of the padded
// gradient): backend/cuda/common.hpp, PaddedInput.
//
// Algorithms: per geometry and pass, the fastest of cuDNN's heuristic list
// (cudnnGet*Algorithm_v7) whose workspace fits Device::workspace_limit();
// math type CUDNN_FMA_MATH (full fp32, no TF32), so results agree with the
// CPU backends to fp32 rounding.
#pragma once

#include <memory>
#include <tuple>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Conv2d<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
    namespace cu = backend::cuda;
    Plan& p = plan(dev, g);
    cu::Staging st(dev);
    const float* dx_in = st.in(x, g.in_shape().size());
    const float* dw = st.in(w, weights_size(g));
    const float* db = b ? st.in(b, g.oc) : nullptr;
    float* dy = st.out(y, g.out_shape().size());
    float* wk = to_filter(dev, p, dw);
    const float* xin = p.pad.on ? cu::pad_copy(dev, kPaddedSlot, p.pad, p.x, dx_in, 0.0f) : dx_in;
    void* ws = dev.workspace(p.fwd_ws);
    cu::check(cudnnConvolutionForward(dev.cudnn(), &cu::kOne, p.xconv, xin, p.filter, wk, p.conv, p.fwd_algo,
                                      ws, p.fwd_ws, &cu::kZero, p.y, dy),
              "Conv2d forward");
    if (db) cu::check(cudnnAddTensor(dev.cudnn(), &cu::kOne, p.bias, db, &cu::kOne, p.y, dy), "Conv2d bias");
    st.finish();
  }

  void backward_data(Dev& dev, const ConvGeom& g, const float* dy, const float* w, float* dx) {
    namespace cu = backend::cuda;
    Plan& p = plan(dev, g);
    cu::Staging st(dev);
    const float* ddy = st.in(dy, g.out_shape().size());
    const float* dw = st.in(w, weights_size(g));
    float* ddx = st.out(dx, g.in_shape().size());
    float* wk = to_filter(dev, p, dw);
    float* target = p.pad.on ? dev.buffer(kPaddedSlot, p.pad.size) : ddx;
    void* ws = dev.workspace(p.bwd_data_ws);
    cu::check(cudnnConvolutionBackwardData(dev.cudnn(), &cu::kOne, p.filter, wk, p.y, ddy, p.conv,
                                           p.bwd_data_algo, ws, p.bwd_data_ws, &cu::kZero, p.xconv, target),
              "Conv2d backward_data");
    if (p.pad.on) cu::unpad(dev, p.pad, target, p.x, ddx);  // the interior of the padded gradient is dx
    st.finish();
  }

  void backward_weights(Dev& dev, const ConvGeom& g, const float* x, const float* dy, float* dw, float* db) {
    namespace cu = backend::cuda;
    Plan& p = plan(dev, g);
    cu::Staging st(dev);
    const float* dx_in = st.in(x, g.in_shape().size());
    const float* ddy = st.in(dy, g.out_shape().size());
    float* ddw = st.out(dw, weights_size(g));
    float* ddb = db ? st.out(db, g.oc) : nullptr;
    const float* xin = p.pad.on ? cu::pad_copy(dev, kPaddedSlot, p.pad, p.x, dx_in, 0.0f) : dx_in;
    float* dwk = dev.buffer(kFilterSlot, weights_size(g));
    void* ws = dev.workspace(p.bwd_filter_ws);
    cu::check(
        cudnnConvolutionBackwardFilter(dev.cudnn(), &cu::kOne, p.xconv, xin, p.y, ddy, p.conv,
                                       p.bwd_filter_algo, ws, p.bwd_filter_ws, &cu::kZero, p.filter, dwk),
        "Conv2d backward_weights");
    cu::check(cudnnTransformTensor(dev.cudnn(), &cu::kOne, p.filter_as_tensor, dwk, &cu::kZero, p.hwio, ddw),
              "Conv2d backward_weights (filter layout to HWIO)");
    if (ddb)
      cu::check(cudnnConvolutionBackwardBias(dev.cudnn(), &cu::kOne, p.y, ddy, &cu::kZero, p.bias, ddb),
                "Conv2d backward bias");
    st.finish();
  }

 private:
  static constexpr std::size_t kFilterSlot = 1, kPaddedSlot = 2;

  /// Everything cuDNN needs for one geometry, built once.
  struct Plan {
    ConvGeom g;
    backend::cuda::PaddedInput pad;   ///< asymmetric padding: convolve an explicitly padded copy
    backend::cuda::TensorDesc x;      ///< the input as the caller holds it
    backend::cuda::TensorDesc xconv;  ///< what the convolution reads (x, or the padded copy)
    backend::cuda::TensorDesc y, bias;
    backend::cuda::TensorDesc hwio;  ///< the weights as HWIO memory, seen as a (K, C, R, S) tensor
    backend::cuda::TensorDesc filter_as_tensor;  ///< the same dims in cuDNN's filter layout
    backend::cuda::FilterDesc filter;
    backend::cuda::ConvDesc conv;
    cudnnConvolutionFwdAlgo_t fwd_algo{};
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
    std::size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
  };

  static std::size_t weights_size(const ConvGeom& g) { return g.kh * g.kw * g.ic * g.oc; }

  Plan& plan(Dev& dev, const ConvGeom& g) {
    for (auto& p : plans_)
      if (p->g == g) return *p;
    if (plans_.size() >= 16) plans_.erase(plans_.begin());  // batch sizes come and go; keep a few
    plans_.push_back(build(dev, g));
    return *plans_.back();
  }

  static std::unique_ptr<Plan> build(Dev& dev, const ConvGeom& g) {
    namespace cu = backend::cuda;
    auto p = std::make_unique<Plan>();
    p->g = g;
    cu::set_activation(p->x, g.fmt, g.n, g.ic, g.ih, g.iw);
    cu::set_activation(p->y, g.fmt, g.n, g.oc, g.oh, g.ow);
    cu::set_activation(p->bias, g.fmt, 1, g.oc, 1, 1);
    const auto [pad_h, pad_w] = p->pad.setup(g, g.ic, p->xconv);
    const std::size_t K = g.oc, C = g.ic, R = g.kh, S = g.kw;
    cu::set_strided(p->hwio, K, C, R, S, 1, K, S * C * K, C * K);
    const bool nhwc = g.fmt == DataFormat::NHWC;
    if (nhwc)
      cu::set_strided(p->filter_as_tensor, K, C, R, S, R * S * C, 1, S * C, C);
    else
      cu::set_strided(p->filter_as_tensor, K, C, R, S, C * R * S, R * S, S, 1);
    cu::check(
        cudnnSetFilter4dDescriptor(p->filter, CUDNN_DATA_FLOAT, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                   cu::to_int(K, "out channels"), cu::to_int(C, "in channels"),
                                   cu::to_int(R, "kernel"), cu::to_int(S, "kernel")),
        "cudnnSetFilter4dDescriptor");
    cu::check(cudnnSetConvolution2dDescriptor(p->conv, pad_h, pad_w, cu::to_int(g.sh, "stride"),
                                              cu::to_int(g.sw, "stride"), 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor");
    cu::check(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
    int on = 0, oc = 0, oh = 0, ow = 0;
    cu::check(cudnnGetConvolution2dForwardOutputDim(p->conv, p->xconv, p->filter, &on, &oc, &oh, &ow),
              "cudnnGetConvolution2dForwardOutputDim");
    if (std::size_t(oh) != g.oh || std::size_t(ow) != g.ow)
      throw BackendError(detail::concat("CUDA Conv2d: cuDNN's output ", oh, "x", ow,
                                        " differs from the geometry's ", g.oh, "x", g.ow,
                                        " (pads t,l,b,r = ", g.pt, ",", g.pl, ",", g.pb, ",", g.pr, ")"));
    pick_algorithms(dev, *p);
    return p;
  }

  // Tensor-core math (TF32 on fp32 data) would change the results.
  static bool tensor_op(cudnnMathType_t m) {
    return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }

  // The first algorithm of cuDNN's heuristic ranking that runs without
  // tensor-core math and fits the workspace limit (the descriptor's math type,
  // CUDNN_FMA_MATH, is what executes).
  template <class Perf, class Algo>
  static void pick(const Perf* perf, int n, std::size_t limit, Algo& algo, std::size_t& ws, const char* pass,
                   const ConvGeom& g) {
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit && !tensor_op(perf[i].mathType)) {
        algo = perf[i].algo;
        ws = perf[i].memory;
        return;
      }
    throw BackendError(detail::concat("CUDA Conv2d: no cuDNN ", pass, " algorithm fits ", describe(g),
                                      " within the workspace limit (CIFARNET_CUDA_WORKSPACE_MB)"));
  }

  static void pick_algorithms(Dev& dev, Plan& p) {
    namespace cu = backend::cuda;
    const std::size_t limit = dev.workspace_limit();
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cu::check(cudnnGetConvolutionForwardAlgorithm_v7(dev.cudnn(), p.xconv, p.filter, p.conv, p.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd),
              "cudnnGetConvolutionForwardAlgorithm_v7");
    pick(fwd, n, limit, p.fwd_algo, p.fwd_ws, "forward", p.g);
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cu::check(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(dev.cudnn(), p.filter, p.y, p.conv, p.xconv,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bwd_data),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    pick(bwd_data, n, limit, p.bwd_data_algo, p.bwd_data_ws, "backward-data", p.g);
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cu::check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dev.cudnn(), p.xconv, p.y, p.conv, p.filter,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                                            bwd_filter),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    pick(bwd_filter, n, limit, p.bwd_filter_algo, p.bwd_filter_ws, "backward-filter", p.g);
  }

  static std::string describe(const ConvGeom& g) {
    return detail::concat(to_string(g.fmt), " n=", g.n, " in=", g.ic, "x", g.ih, "x", g.iw, " out=", g.oc,
                          "x", g.oh, "x", g.ow, " k=", g.kh, "x", g.kw, " s=", g.sh, "x", g.sw);
  }

  // HWIO weights (device) into cuDNN's filter layout; returns the scratch copy.
  static float* to_filter(Dev& dev, Plan& p, const float* w_hwio) {
    namespace cu = backend::cuda;
    float* wk = dev.buffer(kFilterSlot, weights_size(p.g));
    cu::check(
        cudnnTransformTensor(dev.cudnn(), &cu::kOne, p.hwio, w_hwio, &cu::kZero, p.filter_as_tensor, wk),
        "Conv2d (HWIO weights to the filter layout)");
    return wk;
  }

  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace ops
}  // namespace cifarnet
