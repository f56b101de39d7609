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
// Algorithms: per geometry and pass, measured once by cuDNN's legacy
// convolution API (cudnnFindConvolution{Forward,BackwardData,BackwardFilter}
// AlgorithmEx on scratch buffers, workspace up to Device::workspace_limit())
// and cached process-wide (backend/cuda/host_config.hpp, ConvAlgoCache: a
// second layer or op object with the same geometry, device and options
// measures nothing). The fastest measured algorithm is taken that fits the
// limit, runs without tensor-core math unless the device's ConvOptions allow
// TF32, and is deterministic when they ask for it (select_algorithm). Math
// type: CUDNN_FMA_MATH (full fp32, so results agree with the CPU backends to
// fp32 rounding), CUDNN_DEFAULT_MATH only when TF32 is allowed. Each pass's
// workspace is what cudnnGetConvolution*WorkspaceSize reports for the chosen
// algorithm, not the measurement's figure. (cuDNN 9 marks this legacy API
// deprecated in favour of its graph API; it is still shipped and supported,
// and the port is not done: docs/ARCHITECTURE.md.)
#pragma once

#include <algorithm>
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
    cu::Staging st(dev);
    Plan& p = plan(dev, g);
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
    cu::Staging st(dev);
    Plan& p = plan(dev, g);
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
    cu::Staging st(dev);
    Plan& p = plan(dev, g);
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
    cu::check(cudnnSetConvolutionMathType(
                  p->conv, dev.conv_options().allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
              "cudnnSetConvolutionMathType");
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

  // FFT and Winograd algorithms (ConvOptions::allow_transforms).
  static bool transform(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  }
  static bool transform(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  }
  static bool transform(cudnnConvolutionBwdFilterAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }

  // cuDNN's measurements as AlgoCandidates (fastest first).
  template <class Perf>
  static std::vector<backend::cuda::AlgoCandidate> candidates(const Perf* perf, int n) {
    std::vector<backend::cuda::AlgoCandidate> v;
    for (int i = 0; i < n; ++i)
      v.push_back({int(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS, perf[i].memory,
                   perf[i].determinism == CUDNN_DETERMINISTIC,
                   perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                       perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
                   transform(perf[i].algo)});
    return v;
  }

  template <class Perf>
  static int choose(const Perf* perf, int n, const Dev& dev, const char* pass, const ConvGeom& g) {
    const int i =
        backend::cuda::select_algorithm(candidates(perf, n), dev.workspace_limit(), dev.conv_options());
    if (i < 0)
      throw BackendError(detail::concat("CUDA Conv2d: no cuDNN ", pass, " algorithm fits ", describe(g),
                                        " within the workspace limit (CIFARNET_CUDA_WORKSPACE_MB)",
                                        dev.conv_options().deterministic ? " and is deterministic" : ""));
    return int(perf[i].algo);
  }

  // The largest workspace any algorithm of a pass asks for, capped at the limit.
  template <class Algo, class Size>
  static std::size_t largest_workspace(int count, std::size_t limit, Size&& size_of) {
    std::size_t most = 0;
    for (int a = 0; a < count; ++a) {
      std::size_t b = 0;
      if (size_of(Algo(a), &b) == CUDNN_STATUS_SUCCESS && b <= limit) most = std::max(most, b);
    }
    return most;
  }

  // Runs cuDNN's measurement of every algorithm of the three passes on
  // scratch buffers (zeros) of this geometry, on dev's GPU.
  static backend::cuda::ConvAlgorithms measure(Dev& dev, const Plan& p) {
    namespace cu = backend::cuda;
    const ConvGeom& g = p.g;
    const std::size_t limit = dev.workspace_limit();
    const std::size_t xn = p.pad.on ? p.pad.size : g.in_shape().size();
    cu::DeviceBuffer<float> x(dev.ordinal(), xn), w(dev.ordinal(), weights_size(g)),
        y(dev.ordinal(), g.out_shape().size());
    const cu::DeviceGuard guard(dev.ordinal());
    cu::check(cudaMemsetAsync(x.data(), 0, xn * sizeof(float), dev.stream()), "cudaMemsetAsync");
    cu::check(cudaMemsetAsync(w.data(), 0, w.size() * sizeof(float), dev.stream()), "cudaMemsetAsync");
    cu::check(cudaMemsetAsync(y.data(), 0, y.size() * sizeof(float), dev.stream()), "cudaMemsetAsync");
    const cudnnHandle_t h = dev.cudnn();
    std::size_t ws = largest_workspace<cudnnConvolutionFwdAlgo_t>(
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, limit, [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, p.xconv, p.filter, p.conv, p.y, a, b);
        });
    ws = std::max(ws, largest_workspace<cudnnConvolutionBwdDataAlgo_t>(
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, limit,
                          [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
                            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.filter, p.y, p.conv,
                                                                                p.xconv, a, b);
                          }));
    ws = std::max(ws, largest_workspace<cudnnConvolutionBwdFilterAlgo_t>(
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, limit,
                          [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
                            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.xconv, p.y, p.conv,
                                                                                  p.filter, a, b);
                          }));
    cu::DeviceBuffer<unsigned char> work(dev.ordinal(), ws);
    dev.sync();

    cu::ConvAlgorithms out;
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cu::check(cudnnFindConvolutionForwardAlgorithmEx(h, p.xconv, x.data(), p.filter, w.data(), p.conv, p.y,
                                                     y.data(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd,
                                                     work.data(), ws),
              "cudnnFindConvolutionForwardAlgorithmEx");
    out.fwd = choose(fwd, n, dev, "forward", g);
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cu::check(cudnnFindConvolutionBackwardDataAlgorithmEx(
                  h, p.filter, w.data(), p.y, y.data(), p.conv, p.xconv, x.data(),
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bwd_data, work.data(), ws),
              "cudnnFindConvolutionBackwardDataAlgorithmEx");
    out.bwd_data = choose(bwd_data, n, dev, "backward-data", g);
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cu::check(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                  h, p.xconv, x.data(), p.y, y.data(), p.conv, p.filter, w.data(),
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bwd_filter, work.data(), ws),
              "cudnnFindConvolutionBackwardFilterAlgorithmEx");
    out.bwd_filter = choose(bwd_filter, n, dev, "backward-filter", g);
    dev.sync();  // the scratch buffers go when this returns
    return out;
  }

  // The cached (or newly measured) algorithms of p's geometry, and each
  // one's workspace as cuDNN sizes it for this descriptor.
  static void pick_algorithms(Dev& dev, Plan& p) {
    namespace cu = backend::cuda;
    const cu::ConvAlgoKey key{dev.ordinal(), p.g, dev.conv_options(), dev.workspace_limit()};
    const cu::ConvAlgorithms a = cu::ConvAlgoCache::instance().get(key, [&] { return measure(dev, p); });
    p.fwd_algo = cudnnConvolutionFwdAlgo_t(a.fwd);
    p.bwd_data_algo = cudnnConvolutionBwdDataAlgo_t(a.bwd_data);
    p.bwd_filter_algo = cudnnConvolutionBwdFilterAlgo_t(a.bwd_filter);
    const cudnnHandle_t h = dev.cudnn();
    cu::check(
        cudnnGetConvolutionForwardWorkspaceSize(h, p.xconv, p.filter, p.conv, p.y, p.fwd_algo, &p.fwd_ws),
        "cudnnGetConvolutionForwardWorkspaceSize");
    cu::check(cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.filter, p.y, p.conv, p.xconv, p.bwd_data_algo,
                                                           &p.bwd_data_ws),
              "cudnnGetConvolutionBackwardDataWorkspaceSize");
    cu::check(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.xconv, p.y, p.conv, p.filter,
                                                             p.bwd_filter_algo, &p.bwd_filter_ws),
              "cudnnGetConvolutionBackwardFilterWorkspaceSize");
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
