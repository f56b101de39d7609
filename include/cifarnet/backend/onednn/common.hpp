// cifarnet/backend/onednn/common.hpp — what every oneDNN op shares: the
// device (one CPU engine and one in-order stream per model), memory
// descriptors for activations in the network's plain layout, translation of
// dnnl::error into cifarnet::BackendError, geometry checks, the small
// per-geometry primitive cache each op object owns, weights staged in a
// primitive's own layout (Staged), and the forward/backward pair of ops whose
// backward needs a forward workspace (WorkspaceOp).
//
// Invariants: activations are always plain nchw/nhwc float memory (no
// activation reorders between layers); primitives are built once per
// geometry and reused; every op waits on the stream before it returns, so
// the caller's buffers are ready (and free to change) when a call ends. An op
// object is stateful and not thread-safe: one per layer, used by one thread.
#pragma once

#include <omp.h>

#include <dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor_memory.hpp"
#include "cifarnet/ops/geometry.hpp"

/// The oneDNN ops are partial specializations ops::X<backend::OneDnn, T> (so
/// that the compiled mode can declare them `extern template`: core/compiled.hpp)
/// for float only; any other scalar stops here with the primary template's
/// message.
#define CIFARNET_ONEDNN_FLOAT_ONLY(Op, T)                                                  \
  static_assert(std::is_same<T, float>::value, "cifarnet: no " #Op                         \
                                               " kernel for this backend and scalar. The " \
                                               "oneDNN backend is float only: use "        \
                                               "<cifarnet/backend/reference.hpp> for others.")

namespace cifarnet {

/// The oneDNN device: CPU engine 0 and one stream on it. One per model; op
/// objects cache primitives for the engine they were last called with.
template <>
struct Device<backend::OneDnn> {
  /// Creates the CPU engine and its stream; throws BackendError on failure.
  Device();

  /// Scratch slot `slot` (0 to 3) with at least `bytes` bytes, 64-byte
  /// aligned (host memory as tensors have it: huge pages from 2 MiB,
  /// core/tensor_memory.hpp); grows (never shrinks) and is shared by every
  /// op of the model: valid until the next call for the same slot. Ops use
  /// it for layout and data-type conversions within one call (ops finish
  /// before they return): slots 0 and 1 for blocked activations, 2 and 3
  /// for bf16 copies.
  void* scratch(int slot, std::size_t bytes) {
    Buffer& b = scratch_[slot & 3];
    if (b.size < bytes) {
      const std::size_t n = (bytes + 63) / 64 * 64;
      try {
        b.p = cifarnet::detail::host_unique<char>(n);
      } catch (const std::bad_alloc&) {
        throw BackendError(detail::concat("oneDNN device: cannot allocate ", bytes, " bytes of scratch"));
      }
      b.size = bytes;
    }
    return b.p.get();
  }

  dnnl::engine engine;  ///< CPU engine 0
  dnnl::stream stream;  ///< in-order stream on `engine`

 private:
  struct Buffer {
    std::unique_ptr<char, cifarnet::detail::HostFree> p;
    std::size_t size = 0;
  };
  Buffer scratch_[4];
};

namespace backend {
namespace onednn {

using dim = dnnl::memory::dim;
using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

/// The oneDNN library's version, e.g. "3.5.3" (what programs print about
/// the device they run on).
inline std::string version_string() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace onednn

/// --log-device-placement's line on the oneDNN backend (recipes::describe_device).
inline std::string device_description(OneDnn) {
  return "device: CPU, oneDNN " + onednn::version_string() + ", " + std::to_string(omp_get_max_threads()) +
         " OpenMP threads";
}

namespace onednn {

/// Name of a oneDNN status code, for error messages.
inline const char* status_name(dnnl_status_t s) {
  switch (s) {
    case dnnl_success:
      return "success";
    case dnnl_out_of_memory:
      return "out_of_memory";
    case dnnl_invalid_arguments:
      return "invalid_arguments";
    case dnnl_unimplemented:
      return "unimplemented";
    case dnnl_iterator_ends:
      return "iterator_ends";
    case dnnl_runtime_error:
      return "runtime_error";
    case dnnl_not_required:
      return "not_required";
    default:
      return "unknown";
  }
}

/// Runs `f()` and rethrows any dnnl::error as cifarnet::BackendError naming
/// the op (e.g. "Conv2d backward_weights") and the oneDNN status.
template <class F>
decltype(auto) guarded(const char* op, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw BackendError(detail::concat("oneDNN ", op, ": ", e.what(), " (status ", status_name(e.status),
                                      " = ", int(e.status), ")"));
  }
}

/// The plain oneDNN tag of an activation layout.
inline tag act_tag(DataFormat f) { return f == DataFormat::NCHW ? tag::nchw : tag::nhwc; }

/// Descriptor of an activation tensor with logical dims (n, c, h, w) laid
/// out in format `f` (f32 unless `type` says otherwise).
inline dnnl::memory::desc act_desc(DataFormat f, std::size_t n, std::size_t c, std::size_t h, std::size_t w,
                                   dt type = dt::f32) {
  return dnnl::memory::desc({dim(n), dim(c), dim(h), dim(w)}, type, act_tag(f));
}

/// f32 descriptor of a flat vector of `n` elements.
inline dnnl::memory::desc vec_desc(std::size_t n) { return dnnl::memory::desc({dim(n)}, dt::f32, tag::a); }

/// A memory object over a caller's buffer; the handle is re-pointed per call.
inline dnnl::memory user_memory(const dnnl::memory::desc& d, const dnnl::engine& eng) {
  return dnnl::memory(d, eng, DNNL_MEMORY_NONE);
}

/// Points `m` at the caller's buffer `p` (oneDNN only reads inputs, so the
/// const_cast never leads to a write through a const pointer).
inline dnnl::memory& bind(dnnl::memory& m, const float* p) {
  m.set_data_handle(const_cast<float*>(p));
  return m;
}

/// Throws ConfigError naming the first required buffer that is null.
inline void require(const char* op, std::initializer_list<std::pair<const void*, const char*>> bufs) {
  for (const auto& [p, name] : bufs)
    if (!p) throw ConfigError(detail::concat(op, ": buffer '", name, "' is null"));
}

/// Human-readable convolution / pooling geometry for error messages.
inline std::string describe(const ConvGeom& g) {
  return detail::concat(to_string(g.fmt), " n=", g.n, " in=", g.ic, "x", g.ih, "x", g.iw, " out=", g.oc, "x",
                        g.oh, "x", g.ow, " kernel=", g.kh, "x", g.kw, " stride=", g.sh, "x", g.sw,
                        " pad(t,l,b,r)=", g.pt, ",", g.pl, ",", g.pb, ",", g.pr);
}

/// Human-readable channel geometry for error messages.
inline std::string describe(const ChannelGeom& g) {
  return detail::concat(to_string(g.fmt), " ", g.shape().str());
}

/// Throws ShapeError unless `g` is a non-empty geometry whose output size
/// follows from input, kernel, stride and padding (as oneDNN requires). For
/// pooling (`pooling` true) the output has the input's channels (oc is not
/// used) and every pad must be smaller than the kernel, so no window lies
/// wholly in the padding.
inline void check_geometry(const ConvGeom& g, const char* op, bool pooling) {
  auto axis_ok = [&](std::size_t in, std::size_t k, std::size_t s, std::size_t p0, std::size_t p1,
                     std::size_t out) {
    return in > 0 && k > 0 && s > 0 && out > 0 && in + p0 + p1 >= k && (in + p0 + p1 - k) / s + 1 == out &&
           (!pooling || (p0 < k && p1 < k));
  };
  if (g.n == 0 || g.ic == 0 || (!pooling && g.oc == 0) || !axis_ok(g.ih, g.kh, g.sh, g.pt, g.pb, g.oh) ||
      !axis_ok(g.iw, g.kw, g.sw, g.pl, g.pr, g.ow))
    throw ShapeError(detail::concat(op, ": inconsistent geometry (", describe(g),
                                    "); expected all sizes > 0 and out = (in + pads - kernel) / stride + 1",
                                    pooling ? " with pads < kernel" : ""));
}

/// Throws ShapeError unless every dimension of `g` is positive.
inline void check_geometry(const ChannelGeom& g, const char* op) {
  if (g.size() == 0) throw ShapeError(detail::concat(op, ": empty geometry (", describe(g), ")"));
}

/// A parameter buffer in the layout a primitive chose through
/// format_tag::any, with the cached reorder between it and the caller's
/// layout (user -> primitive for weights read, primitive -> user for weight
/// gradients written). When both layouts agree no copy is made (`direct()`).
struct Staged {
  dnnl::memory mem;                 ///< primitive-layout buffer (empty when direct)
  dnnl::reorder reorder;            ///< user->mem or mem->user (empty when direct)
  const void* shown = nullptr;      ///< for weights: the user buffer `mem` holds a copy of
  std::uint64_t shown_version = 0;  ///< ... at this Parameters::version (0: none)
  bool direct() const { return !mem; }
};

/// A small least-recently-used map from a geometry key to the state an op
/// builds for it (primitive descriptors, primitives, reordered weights,
/// workspaces). The entries are bound to one engine: a call with another
/// engine drops them. References returned by get() stay valid until the next
/// get() that inserts (eviction only ever removes other entries).
template <class Key, class State>
class PrimitiveCache {
 public:
  /// `capacity`: how many geometries to keep (a layer normally sees two: the
  /// full batch and the last partial one; evaluation may add one more).
  explicit PrimitiveCache(std::size_t capacity = 8) : capacity_(capacity < 1 ? 1 : capacity) {}

  /// The state for `key`, made with `make()` (returning State) on a miss.
  template <class Make>
  State& get(const dnnl::engine& eng, const Key& key, Make&& make) {
    if (eng.get() != engine_) {
      entries_.clear();
      engine_ = eng.get();
    }
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return *entries_.front().second;
      }
    entries_.emplace_front(key, std::make_unique<State>(make()));
    while (entries_.size() > capacity_) entries_.pop_back();
    return *entries_.front().second;
  }

  /// Builds a primitive from its descriptor and counts it.
  template <class Prim, class Pd>
  Prim build(const Pd& pd) {
    ++builds_;
    return Prim(pd);
  }

  /// A Staged buffer for a primitive that wants `prim` while the caller
  /// holds `user`; `into_prim` chooses the reorder direction.
  Staged stage(const dnnl::engine& eng, const dnnl::memory::desc& prim, const dnnl::memory::desc& user,
               bool into_prim) {
    Staged s;
    if (prim == user) return s;
    s.mem = dnnl::memory(prim, eng);
    s.reorder = into_prim ? build<dnnl::reorder>(dnnl::reorder::primitive_desc(eng, user, eng, prim))
                          : build<dnnl::reorder>(dnnl::reorder::primitive_desc(eng, prim, eng, user));
    return s;
  }

  /// A Staged activation for a primitive that wants `prim` while the caller
  /// holds `user`: like stage(), but `mem` has no buffer of its own (bind
  /// it to device scratch with onednn::scratch before each use).
  Staged stage_scratch(const dnnl::engine& eng, const dnnl::memory::desc& prim,
                       const dnnl::memory::desc& user, bool into_prim) {
    Staged s;
    if (prim == user) return s;
    s.mem = dnnl::memory(prim, eng, DNNL_MEMORY_NONE);
    s.reorder = into_prim ? build<dnnl::reorder>(dnnl::reorder::primitive_desc(eng, user, eng, prim))
                          : build<dnnl::reorder>(dnnl::reorder::primitive_desc(eng, prim, eng, user));
    return s;
  }

  /// The state cached for `key`, or nullptr (no insertion, no reordering).
  const State* find(const Key& key) const {
    for (const auto& e : entries_)
      if (e.first == key) return e.second.get();
    return nullptr;
  }

  /// Number of geometries held now.
  std::size_t size() const { return entries_.size(); }
  /// Number of primitives built since construction (tests use it to prove
  /// that repeated calls reuse primitives).
  std::size_t builds() const { return builds_; }
  std::size_t capacity() const { return capacity_; }

 private:
  std::size_t capacity_;
  std::size_t builds_ = 0;
  dnnl_engine_t engine_ = nullptr;
  std::list<std::pair<Key, std::unique_ptr<State>>> entries_;
};

/// Argument map of one primitive execution.
using Args = std::unordered_map<int, dnnl::memory>;

/// `m` (a memory without a buffer of its own) pointed at device scratch slot
/// `slot`, grown to its size.
inline dnnl::memory scratch(Device<backend::OneDnn>& dev, dnnl::memory& m, int slot) {
  m.set_data_handle(dev.scratch(slot, m.get_desc().get_size()));
  return m;
}

/// The primitives of an op whose backward may need the workspace of a
/// training-mode forward (max pooling, LRN): training and inference
/// forwards, and the backward with the training descriptor as its hint. The
/// workspace of the last training run is kept with the input pointer it came
/// from; backward() first reruns the training forward on its x (into a
/// scratch output) when the stored workspace came from another buffer or
/// there is none yet. Primitives are built on first use.
template <class Fwd, class Bwd>
class WorkspaceOp {
 public:
  /// The op's forward_training and forward_inference descriptors, its
  /// backward descriptor, and the plain src/dst layouts.
  WorkspaceOp(const typename Fwd::desc& train, const typename Fwd::desc& infer, const typename Bwd::desc& bwd,
              const dnnl::memory::desc& src, const dnnl::memory::desc& dst, const dnnl::engine& eng)
      : train_desc_(train),
        infer_desc_(infer),
        bwd_desc_(bwd),
        dst_(dst),
        x_(user_memory(src, eng)),
        y_(user_memory(dst, eng)),
        dx_(user_memory(src, eng)),
        dy_(user_memory(dst, eng)) {}

  /// y = forward(x), in training mode (recording the workspace) or not.
  template <class Cache>
  void forward(Cache& c, const Device<backend::OneDnn>& dev, bool training, const float* x, float* y) {
    if (training) return train(c, dev, x, bind(y_, y));
    if (!infer_p_) infer_p_ = c.template build<Fwd>(typename Fwd::primitive_desc(infer_desc_, dev.engine));
    infer_p_->execute(dev.stream, {{DNNL_ARG_SRC, bind(x_, x)}, {DNNL_ARG_DST, bind(y_, y)}});
  }

  /// dx from dy for input x (the backward reads x where it needs it).
  template <class Cache>
  void backward(Cache& c, const Device<backend::OneDnn>& dev, const float* x, const float* dy, float* dx) {
    const auto& hint = training_pd(dev.engine);
    if (!bwd_p_) {
      const typename Bwd::primitive_desc pd(bwd_desc_, dev.engine, hint);
      bwd_reads_src_ = pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_SRC).get_size() != 0;
      bwd_p_ = c.template build<Bwd>(pd);
    }
    if (workspace_ && ws_src_ != x) {
      if (!scratch_) scratch_ = dnnl::memory(dst_, dev.engine);
      train(c, dev, x, *scratch_);
    }
    Args args{{DNNL_ARG_DIFF_DST, bind(dy_, dy)}, {DNNL_ARG_DIFF_SRC, bind(dx_, dx)}};
    if (bwd_reads_src_) args.emplace(DNNL_ARG_SRC, bind(x_, x));
    if (workspace_) args.emplace(DNNL_ARG_WORKSPACE, *workspace_);
    bwd_p_->execute(dev.stream, args);
  }

 private:
  const typename Fwd::primitive_desc& training_pd(const dnnl::engine& eng) {
    if (!train_pd_) {
      train_pd_ = typename Fwd::primitive_desc(train_desc_, eng);
      if (train_pd_->workspace_desc().get_size() != 0)
        workspace_ = dnnl::memory(train_pd_->workspace_desc(), eng);
    }
    return *train_pd_;
  }

  template <class Cache>
  void train(Cache& c, const Device<backend::OneDnn>& dev, const float* x, const dnnl::memory& out) {
    if (!train_p_) train_p_ = c.template build<Fwd>(training_pd(dev.engine));
    Args args{{DNNL_ARG_SRC, bind(x_, x)}, {DNNL_ARG_DST, out}};
    if (workspace_) args.emplace(DNNL_ARG_WORKSPACE, *workspace_);
    train_p_->execute(dev.stream, args);
    ws_src_ = x;
  }

  typename Fwd::desc train_desc_, infer_desc_;
  typename Bwd::desc bwd_desc_;
  dnnl::memory::desc dst_;
  dnnl::memory x_, y_, dx_, dy_;  // caller buffers, re-pointed per call
  std::optional<typename Fwd::primitive_desc> train_pd_;
  std::optional<dnnl::primitive> train_p_, infer_p_, bwd_p_;
  bool bwd_reads_src_ = false;
  std::optional<dnnl::memory> workspace_, scratch_;
  const float* ws_src_ = nullptr;  // the x the workspace was computed from
};

/// Whether oneDNN has bf16 convolution kernels on this CPU (AVX-512:
/// avx512_core, native with AVX512-BF16, emulated without). Elsewhere
/// ConvPrecision::BF16 convolutions run in float.
inline bool cpu_has_bf16_convolutions() {
  const unsigned isa = unsigned(dnnl::get_effective_cpu_isa()), core = unsigned(dnnl::cpu_isa::avx512_core);
  return (isa & core) == core;  // the ISA values are feature bit sets
}

/// Whether oneDNN runs its bf16 convolutions on AMX here (its kernels differ
/// by ISA, and with them which passes pay in bf16: ops::Conv2d).
inline bool cpu_has_amx_convolutions() {
  const unsigned isa = unsigned(dnnl::get_effective_cpu_isa()),
                 amx = unsigned(dnnl::cpu_isa::avx512_core_amx);
  return (isa & amx) == amx;
}

}  // namespace onednn
}  // namespace backend

inline Device<backend::OneDnn>::Device()
    : engine(backend::onednn::guarded("engine", [] { return dnnl::engine(dnnl::engine::kind::cpu, 0); })),
      stream(backend::onednn::guarded("stream", [this] { return dnnl::stream(engine); })) {}

}  // namespace cifarnet
