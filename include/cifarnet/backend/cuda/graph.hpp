// cifarnet/backend/cuda/graph.hpp — convolutions through cuDNN's graph
// (backend) API, the API cuDNN 9 keeps: its legacy convolution calls
// (cudnnConvolutionForward, cudnnFind*AlgorithmEx, the filter and
// convolution descriptors) are deprecated.
//
// A convolution pass (forward, backward data, backward filter) of one
// geometry is an operation graph of one node over three tensors with fixed
// ids (x, w, y). Engines are what cuDNN's heuristics offer for that graph
// (mode A, then the fallback list); each offered configuration is finalized
// into an execution plan, and measure_pass() runs every plan that obeys the
// ConvOptions (no tensor-core/TF32 math unless allowed, deterministic ones
// only when asked, no FFT/Winograd unless allowed, no engine that compiles
// kernels at run time) on scratch buffers and ranks them by time: the graph
// API's counterpart of cudnnFind*. The choice is an EngineChoice (the
// engine's global index and its knob settings), cached process-wide by
// ConvAlgoCache, and rebuilt into a plan by any op object of that geometry
// (build_plan) without measuring again. The workspace of a plan is what the
// plan reports (CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE).
//
// The device is named by a device-property descriptor made from the
// Device's cuDNN handle (cuDNN ≥ 9.8; the graph's handle attribute is
// deprecated).
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"

namespace cifarnet {
namespace backend {
namespace cuda {

static_assert(CUDNN_VERSION >= 90800,
              "cifarnet's CUDA convolutions use cuDNN's device-property descriptor (cuDNN 9.8 or newer)");

/// An owned cudnnBackendDescriptor_t (move-only).
class GraphDesc {
 public:
  GraphDesc() = default;
  explicit GraphDesc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  GraphDesc(const GraphDesc&) = delete;
  GraphDesc& operator=(const GraphDesc&) = delete;
  GraphDesc(GraphDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  GraphDesc& operator=(GraphDesc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  ~GraphDesc() { reset(); }

  cudnnBackendDescriptor_t get() const { return d_; }
  explicit operator bool() const { return d_ != nullptr; }

  /// Sets attribute `a` to `count` values of type `t` at `p`.
  GraphDesc& set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, std::int64_t count,
                 const void* p, const char* what) {
    check(cudnnBackendSetAttribute(d_, a, t, count, p), what);
    return *this;
  }
  GraphDesc& set_i64(cudnnBackendAttributeName_t a, const std::vector<std::int64_t>& v, const char* what) {
    return set(a, CUDNN_TYPE_INT64, std::int64_t(v.size()), v.data(), what);
  }
  GraphDesc& set_desc(cudnnBackendAttributeName_t a, const GraphDesc& o, const char* what) {
    const cudnnBackendDescriptor_t p = o.get();
    return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, what);
  }
  void finalize(const char* what) { check(cudnnBackendFinalize(d_), what); }
  /// Finalize that reports failure instead of throwing (engine configurations
  /// a device cannot run).
  bool try_finalize() { return cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS; }

  std::int64_t get_i64(cudnnBackendAttributeName_t a, const char* what) const {
    std::int64_t v = 0, n = 0;
    check(cudnnBackendGetAttribute(d_, a, CUDNN_TYPE_INT64, 1, &n, &v), what);
    return v;
  }

 private:
  void reset() {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// The three convolution passes (their values index per-pass arrays).
enum class ConvPass { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

inline const char* pass_name(ConvPass p) {
  return p == ConvPass::Forward        ? "forward"
         : p == ConvPass::BackwardData ? "backward-data"
                                       : "backward-filter";
}

/// Tensor ids of a pass's graph (variant packs name pointers by them).
inline constexpr std::int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

/// What a convolution graph is built from: logical NCHW dims of the input
/// (as the convolution reads it, padded copy included), of the filter (K, C,
/// R, S) and of the output, the layout, strides and the symmetric padding.
struct ConvShape {
  std::int64_t n = 0, c = 0, h = 0, w = 0;  ///< input as read
  std::int64_t k = 0, r = 0, s = 0;         ///< filter
  std::int64_t oh = 0, ow = 0;              ///< output
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0;
  bool nhwc = false;
};

/// The graph shape of geometry `g`: an asymmetric padding convolves an
/// explicitly padded copy of the input (PaddedInput) without padding of its
/// own. Throws a BackendError when the output size the convolution would
/// make is not the geometry's.
inline ConvShape conv_shape(const ConvGeom& g) {
  ConvShape s;
  const bool padded_copy = asymmetric_padding(g);
  s.n = std::int64_t(g.n);
  s.c = std::int64_t(g.ic);
  s.h = std::int64_t(padded_copy ? g.ih + g.pt + g.pb : g.ih);
  s.w = std::int64_t(padded_copy ? g.iw + g.pl + g.pr : g.iw);
  s.k = std::int64_t(g.oc);
  s.r = std::int64_t(g.kh);
  s.s = std::int64_t(g.kw);
  s.oh = std::int64_t(g.oh);
  s.ow = std::int64_t(g.ow);
  s.sh = std::int64_t(g.sh);
  s.sw = std::int64_t(g.sw);
  s.ph = padded_copy ? 0 : std::int64_t(g.pt);
  s.pw = padded_copy ? 0 : std::int64_t(g.pl);
  s.nhwc = g.fmt == DataFormat::NHWC;
  const std::int64_t eh = s.h + 2 * s.ph, ew = s.w + 2 * s.pw;
  const std::int64_t oh = eh >= s.r ? (eh - s.r) / s.sh + 1 : 0, ow = ew >= s.s ? (ew - s.s) / s.sw + 1 : 0;
  if (oh != s.oh || ow != s.ow)
    throw BackendError(cifarnet::detail::concat(
        "CUDA Conv2d: the convolution's output ", oh, "x", ow, " differs from the geometry's ", g.oh, "x",
        g.ow, " (pads t,l,b,r = ", g.pt, ",", g.pl, ",", g.pb, ",", g.pr, ")"));
  return s;
}

/// A float tensor of logical dims (n, c, h, w) in the shape's layout.
inline GraphDesc graph_tensor(std::int64_t uid, std::int64_t n, std::int64_t c, std::int64_t h,
                              std::int64_t w, bool nhwc) {
  GraphDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const std::int64_t align = 16;
  const std::vector<std::int64_t> dims{n, c, h, w};
  const std::vector<std::int64_t> strides = nhwc ? std::vector<std::int64_t>{h * w * c, 1, w * c, c}
                                                 : std::vector<std::int64_t>{c * h * w, h * w, w, 1};
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type")
      .set_i64(CUDNN_ATTR_TENSOR_DIMENSIONS, dims, "tensor dimensions")
      .set_i64(CUDNN_ATTR_TENSOR_STRIDES, strides, "tensor strides")
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id")
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  t.finalize("cudnnBackendFinalize (tensor)");
  return t;
}

/// The device-property descriptor of `handle`'s GPU.
inline GraphDesc device_properties(cudnnHandle_t handle) {
  if (cudnnGetVersion() < 90800)
    throw BackendError(
        cifarnet::detail::concat("CUDA Conv2d: the cuDNN library loaded is version ", cudnnGetVersion(),
                                 "; the convolutions need 9.8 or newer (device-property descriptor)"));
  GraphDesc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  d.set(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "device properties (handle)");
  d.finalize("cudnnBackendFinalize (device properties)");
  return d;
}

/// One pass's operation graph (and the descriptors it refers to).
struct ConvGraph {
  ConvPass pass = ConvPass::Forward;
  GraphDesc x, w, y, conv, op, graph;
};

inline ConvGraph conv_graph(ConvPass pass, const ConvShape& s) {
  ConvGraph g;
  g.pass = pass;
  g.x = graph_tensor(kUidX, s.n, s.c, s.h, s.w, s.nhwc);
  g.w = graph_tensor(kUidW, s.k, s.c, s.r, s.s, s.nhwc);
  g.y = graph_tensor(kUidY, s.n, s.k, s.oh, s.ow, s.nhwc);

  g.conv = GraphDesc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t dims = 2;
  g.conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "convolution compute type")
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode")
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "convolution dims")
      .set_i64(CUDNN_ATTR_CONVOLUTION_DILATIONS, {1, 1}, "convolution dilations")
      .set_i64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {s.sh, s.sw}, "convolution strides")
      .set_i64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {s.ph, s.pw}, "convolution paddings")
      .set_i64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {s.ph, s.pw}, "convolution paddings");
  g.conv.finalize("cudnnBackendFinalize (convolution)");

  // Each pass's node names the same six things with its own attributes:
  // the input-side, filter-side and output-side tensors (x, w, y: dx, dw
  // or dy where the pass writes them), the convolution, alpha and beta.
  struct NodeAttrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  static constexpr NodeAttrs kNodes[3] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
  const NodeAttrs& n = kNodes[int(pass)];
  const float alpha = 1.0f, beta = 0.0f;
  g.op = GraphDesc(n.type);
  g.op.set_desc(n.x, g.x, "convolution node: input side")
      .set_desc(n.w, g.w, "convolution node: filter side")
      .set_desc(n.y, g.y, "convolution node: output side")
      .set_desc(n.conv, g.conv, "convolution node: convolution")
      .set(n.alpha, CUDNN_TYPE_FLOAT, 1, &alpha, "convolution node: alpha")
      .set(n.beta, CUDNN_TYPE_FLOAT, 1, &beta, "convolution node: beta");
  g.op.finalize("cudnnBackendFinalize (convolution operation)");
  g.graph = GraphDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t ops = g.op.get();
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ops, "operation graph");
  g.graph.finalize("cudnnBackendFinalize (operation graph)");
  return g;
}

/// An engine configuration as cuDNN offered it, read into plain values.
struct EngineInfo {
  EngineChoice choice;
  std::vector<cudnnBackendNumericalNote_t> numerical;
  bool runtime_compiled = false;

  bool has(cudnnBackendNumericalNote_t n) const {
    return std::find(numerical.begin(), numerical.end(), n) != numerical.end();
  }
  /// Tensor-core math on float data is TF32 (inputs rounded to 10 bits).
  bool tensor_op() const {
    return has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) || has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
           has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION);
  }
  bool deterministic() const { return !has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC); }
  bool transform() const {
    return has(CUDNN_NUMERICAL_NOTE_FFT) || has(CUDNN_NUMERICAL_NOTE_WINOGRAD) ||
           has(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4) || has(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6) ||
           has(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13);
  }
};

/// Reads an engine configuration descriptor (as heuristics return it).
inline EngineInfo engine_info(const GraphDesc& cfg) {
  EngineInfo info;
  GraphDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t ep = engine.get();
  std::int64_t n = 0;
  check(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                 &ep),
        "engine of a configuration");
  info.choice.engine = engine.get_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, "engine index");

  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  check(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
        "engine numerical notes");
  info.numerical.assign(notes, notes + std::min<std::int64_t>(n, CUDNN_NUMERICAL_NOTE_TYPE_COUNT));
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  check(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior),
        "engine behavior notes");
  for (std::int64_t i = 0; i < std::min<std::int64_t>(n, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i)
    if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) info.runtime_compiled = true;

  std::vector<GraphDesc> knobs;
  std::vector<cudnnBackendDescriptor_t> kp;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    kp.push_back(knobs.back().get());
  }
  check(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 std::int64_t(kp.size()), &n, kp.data()),
        "knob choices of a configuration");
  for (std::int64_t i = 0; i < std::min<std::int64_t>(n, std::int64_t(kp.size())); ++i) {
    cudnnBackendKnobType_t type{};
    std::int64_t cnt = 0, value = 0;
    check(cudnnBackendGetAttribute(kp[std::size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                   1, &cnt, &type),
          "knob type");
    check(cudnnBackendGetAttribute(kp[std::size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                   &cnt, &value),
          "knob value");
    info.choice.knobs.emplace_back(int(type), value);
  }
  return info;
}

/// The engine configurations cuDNN's heuristics offer for `g` (mode A, then
/// the fallback list; repeats dropped).
inline std::vector<EngineInfo> offered_engines(const ConvGraph& g, const GraphDesc& props) {
  std::vector<EngineInfo> out;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    GraphDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g.graph, "heuristics graph")
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode")
        .set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, props, "heuristics device");
    if (!heur.try_finalize()) continue;  // no engine of this mode for the graph
    std::int64_t count = 0;
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   0, &count, nullptr),
          "heuristics result count");
    std::vector<GraphDesc> cfgs;
    std::vector<cudnnBackendDescriptor_t> cp;
    for (std::int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      cp.push_back(cfgs.back().get());
    }
    std::int64_t got = 0;
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   count, &got, cp.data()),
          "heuristics results");
    for (std::int64_t i = 0; i < std::min(got, count); ++i) {
      EngineInfo e = engine_info(cfgs[std::size_t(i)]);
      const bool seen =
          std::any_of(out.begin(), out.end(), [&](const EngineInfo& o) { return o.choice == e.choice; });
      if (!seen) out.push_back(std::move(e));
    }
  }
  return out;
}

/// An execution plan with its workspace size.
struct ConvExecPlan {
  GraphDesc plan;
  std::size_t workspace = 0;
  PackCache<GraphDesc> packs;  ///< the last call's variant pack (execute)
  explicit operator bool() const { return bool(plan); }
};

/// The execution plan of engine `choice` for graph `g`; an empty plan when
/// the engine cannot run this graph on this device.
inline ConvExecPlan build_plan(const ConvGraph& g, const GraphDesc& props, const EngineChoice& choice) {
  GraphDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set_desc(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g.graph, "engine graph")
      .set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &choice.engine, "engine index")
      .set_desc(CUDNN_ATTR_ENGINE_DEVICEPROP, props, "engine device");
  if (!engine.try_finalize()) return {};
  std::vector<GraphDesc> knobs;
  std::vector<cudnnBackendDescriptor_t> kp;
  for (const auto& [type, value] : choice.knobs) {
    GraphDesc k(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    const auto t = cudnnBackendKnobType_t(type);
    k.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &t, "knob type")
        .set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value, "knob value");
    if (!k.try_finalize()) return {};
    kp.push_back(k.get());
    knobs.push_back(std::move(k));
  }
  GraphDesc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  cfg.set_desc(CUDNN_ATTR_ENGINECFG_ENGINE, engine, "configuration engine");
  if (!kp.empty())
    cfg.set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::int64_t(kp.size()),
            kp.data(), "configuration knobs");
  if (!cfg.try_finalize()) return {};
  ConvExecPlan p;
  p.plan = GraphDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  p.plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg, "plan configuration")
      .set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, props, "plan device");
  if (!p.plan.try_finalize()) return {};
  const std::int64_t ws = p.plan.get_i64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, "plan workspace size");
  p.workspace = ws > 0 ? std::size_t(ws) : 0;
  return p;
}

/// The variant pack binding a convolution plan's tensors x, w, y (device
/// pointers) and its workspace.
inline GraphDesc variant_pack(const void* x, const void* w, const void* y, void* workspace) {
  GraphDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const std::int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "variant pack ids")
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, "variant pack pointers")
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
  pack.finalize("cudnnBackendFinalize (variant pack)");
  return pack;
}

/// Runs `plan` of a convolution pass on x, w, y with a variant pack made
/// for this call (measuring: each candidate plan runs a few times).
inline cudnnStatus_t try_execute(cudnnHandle_t h, const ConvExecPlan& plan, const void* x, const void* w,
                                 const void* y, void* workspace) {
  const GraphDesc pack = variant_pack(x, w, y, workspace);
  return cudnnBackendExecute(h, plan.plan.get(), pack.get());
}

/// Runs `plan` of a convolution pass on x, w, y (device pointers, 16-byte
/// aligned as the tensors were declared) on the handle's stream, with the
/// plan's cached variant pack while the addresses are those of its last
/// call (PackCache); a BackendError names the pass, or the misaligned
/// tensor.
inline void execute(Dev& dev, ConvExecPlan& plan, ConvPass pass, const void* x, const void* w, const void* y,
                    void* workspace, std::shared_ptr<const void> keep = nullptr) {
  plan.packs.get({x, w, y, workspace}, [&] {
    for (const void* p : {x, w, y})  // checked when an address is new
      if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
        throw BackendError(
            cifarnet::detail::concat("CUDA Conv2d ", pass_name(pass), ": a tensor at ", p,
                                     " is not 16-byte aligned (the convolution plans are built for "
                                     "16-byte aligned device tensors)"));
    return variant_pack(x, w, y, workspace);
  });
  // Queued while dev's CUDA graphs are on: the signature is the plan, the
  // pack and the addresses the pack binds; the work keeps the pack and
  // `keep` (what owns the plan) alive until it has run.
  thread_local LaunchSignature sig;  // reused: no allocation per call once it has grown
  sig.clear();
  sig.add(static_cast<const void*>(plan.plan.get()))
      .add(x)
      .add(w)
      .add(y)
      .add(static_cast<const void*>(workspace));
  dev.submit(pass_name(pass), sig,
             [h = dev.queued_cudnn(), p = plan.plan.get(), pack = plan.packs.shared(), keep = std::move(keep),
              pass](cudaStream_t) { check(cudnnBackendExecute(h, p, pack->get()), pass_name(pass)); });
}

/// The graph API's counterpart of cudnnFind*: builds a plan for every engine
/// configuration the heuristics offer for `g` that `opts` allows (and that
/// compiles nothing at run time), times each on the scratch tensors x, w, y
/// (device memory of the graph's sizes, on dev's GPU, made current by the
/// caller) with the workspace each asks for up to `limit`, and returns the
/// fastest that select_algorithm accepts. Throws a BackendError naming
/// `what` when none does.
inline EngineChoice measure_pass(Device<Cuda>& dev, const ConvGraph& g, const GraphDesc& props, void* x,
                                 void* w, void* y, const ConvOptions& opts, std::size_t limit,
                                 const std::string& what) {
  const std::vector<EngineInfo> offered = offered_engines(g, props);
  struct Timed {
    const EngineInfo* info;
    ConvExecPlan plan;
    float ms = 0;
    bool ok = false;
  };
  std::vector<Timed> runs;
  std::size_t workspace = 0;
  for (const EngineInfo& e : offered) {
    AlgoCandidate c;
    c.deterministic = e.deterministic();
    c.tensor_op = e.tensor_op();
    c.transform = e.transform();
    if (e.runtime_compiled || !allowed(c, opts)) continue;
    ConvExecPlan plan = build_plan(g, props, e.choice);
    if (!plan || plan.workspace > limit) continue;
    workspace = std::max(workspace, plan.workspace);
    runs.push_back({&e, std::move(plan)});
  }
  DeviceBuffer<unsigned char> ws(dev.ordinal(), std::max<std::size_t>(workspace, 1));
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  const cudnnHandle_t h = dev.cudnn();
  for (Timed& r : runs) {
    if (try_execute(h, r.plan, x, w, y, ws.data()) != CUDNN_STATUS_SUCCESS) continue;  // warm-up
    constexpr int kReps = 3;
    (void)cudaEventRecord(start, dev.stream());
    bool ran = true;
    for (int i = 0; i < kReps && ran; ++i)
      ran = try_execute(h, r.plan, x, w, y, ws.data()) == CUDNN_STATUS_SUCCESS;
    (void)cudaEventRecord(stop, dev.stream());
    if (!ran || cudaEventSynchronize(stop) != cudaSuccess) continue;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) continue;
    r.ms = ms / kReps;
    r.ok = true;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  (void)cudaGetLastError();
  check(cudaStreamSynchronize(dev.stream()), "convolution measurement");  // ws goes when this returns
  std::stable_sort(runs.begin(), runs.end(), [](const Timed& a, const Timed& b) {
    if (a.ok != b.ok) return a.ok;
    return a.ms < b.ms;
  });
  std::vector<AlgoCandidate> ranked;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const EngineInfo& e = *runs[i].info;
    ranked.push_back(
        {int(i), runs[i].ok, runs[i].plan.workspace, e.deterministic(), e.tensor_op(), e.transform()});
  }
  const int i = select_algorithm(ranked, limit, opts);
  if (i < 0)
    throw BackendError(cifarnet::detail::concat(
        "CUDA Conv2d: no cuDNN ", pass_name(g.pass), " engine runs ", what, " (", offered.size(),
        " offered by the heuristics, ", runs.size(), " allowed: fp32 math", opts.allow_tf32 ? " or TF32" : "",
        opts.deterministic ? ", deterministic" : "", ", no run-time compilation, workspace within ", limit,
        " bytes (CIFARNET_CUDA_WORKSPACE_MB))"));
  return runs[std::size_t(i)].info->choice;
}

}  // namespace cuda
}  // namespace backend
}  // namespace cifarnet
