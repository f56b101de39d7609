// cifarnet/backend/onednn/gemm.hpp — row-major matrix products: run() through
// dnnl_sgemm (multi-threaded, float; builds no primitive, nothing to cache),
// run_bf16() with A and B rounded to bfloat16 and the products summed in
// float, through a oneDNN matmul primitive (AMX or AVX512-BF16 kernels),
// cached per geometry. ops::Dense<OneDnn> and the style-transfer Gram
// matrices use them.
#pragma once

#include <dnnl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <dnnl.hpp>
#include <vector>

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/core/tensor_memory.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Gemm<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Gemm, T);
  using Dev = Device<backend::OneDnn>;
  CIFARNET_OUTLINE void run(Dev&, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                            const float* a, const float* b, float beta, float* c, const char* who = "Gemm") {
    using backend::onednn::dim;
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', dim(m), dim(n), dim(k), alpha, a,
                                        dim(ta ? m : k), b, dim(tb ? k : n), beta, c, dim(n));
    if (st != dnnl_success)
      throw BackendError(detail::concat("oneDNN ", who, ": dnnl_sgemm failed (status ",
                                        backend::onednn::status_name(st), " = ", int(st), ", ", m, "x", n,
                                        "x", k, ")"));
  }

  /// The product of run() with A and B rounded to bfloat16 (to nearest even,
  /// as store_bf16) and multiplied and summed in float: oneDNN's bf16 matmul
  /// (brgemm on AMX or AVX512-BF16). `a == b` (a Gram matrix) is rounded
  /// once. With `reuse`, the caller promises that the factors of the call
  /// just before this one (on this op) have not changed since: a factor with
  /// the pointer and size of one of them takes its rounding from that call
  /// (the style gradient after its Gram matrix); every other factor, even
  /// one an older call rounded, is rounded afresh. Where oneDNN has no bf16
  /// kernels (cpu_has_bf16_convolutions() false, as for ConvPrecision::BF16
  /// convolutions) it is run(), in float.
  CIFARNET_OUTLINE void run_bf16(Dev& dev, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k,
                                 float alpha, const float* a, const float* b, float beta, float* c,
                                 bool reuse = false, const char* who = "Gemm (bf16)") {
    if (!backend::onednn::cpu_has_bf16_convolutions() || m == 0 || n == 0 || k == 0) {
      run(dev, ta, tb, m, n, k, alpha, a, b, beta, c, who);  // (an empty product is only C's scaling)
      return;
    }
    const unsigned long long previous = calls_++;  // the slots this call uses get the new number
    auto held = [&](const float* p, std::size_t count) {
      for (int i = 0; i < 2; ++i)
        if (reuse && held_[i].call == previous && held_[i].src == p && held_[i].count == count) return i;
      return -1;
    };
    int ia = held(a, m * k), ib = a == b ? ia : held(b, k * n);
    if (ia < 0) {
      ia = ib >= 0 ? 1 - ib : 0;
      held_[ia].round(a, m * k);
      if (a == b) ib = ia;
    }
    if (ib < 0) {
      ib = 1 - ia;
      held_[ib].round(b, k * n);
    }
    held_[ia].call = held_[ib].call = calls_;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dnnl::memory::dim M = backend::onednn::dim(m), N = backend::onednn::dim(n),
                            K = backend::onednn::dim(k);
    // op(A) (m x k) stored k x m when ta: strides {1, m}; op(B) likewise.
    const Key key{ta, tb, m, n, k, alpha, beta, dev.engine.get()};
    Entry* e = nullptr;
    for (Entry& x : cache_)
      if (x.key == key) e = &x;
    if (!e) {
      if (cache_.size() >= kMaxEntries) cache_.clear();
      const dnnl::memory::desc ad({M, K}, dt::bf16, ta ? dims{1, M} : dims{K, 1}),
          bd({K, N}, dt::bf16, tb ? dims{1, K} : dims{N, 1}), cd({M, N}, dt::f32, dims{N, 1});
      dnnl::primitive_attr attr;
      if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
      if (beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(beta);
        attr.set_post_ops(po);
      }
      const auto pd = backend::onednn::guarded(who, [&] {
        return dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), attr, dev.engine);
      });
      cache_.push_back(Entry{key, dnnl::matmul(pd), ad, bd, cd});
      e = &cache_.back();
    }
    backend::onednn::guarded(who, [&] {
      e->prim.execute(dev.stream, {{DNNL_ARG_SRC, dnnl::memory(e->a, dev.engine, held_[ia].bits.data())},
                                   {DNNL_ARG_WEIGHTS, dnnl::memory(e->b, dev.engine, held_[ib].bits.data())},
                                   {DNNL_ARG_DST, dnnl::memory(e->c, dev.engine, c)}});
      dev.stream.wait();
      return 0;
    });
  }

 private:
  struct Key {
    bool ta = false, tb = false;
    std::size_t m = 0, n = 0, k = 0;
    float alpha = 0, beta = 0;
    dnnl_engine_t engine = nullptr;
    bool operator==(const Key& o) const {
      return ta == o.ta && tb == o.tb && m == o.m && n == o.n && k == o.k && alpha == o.alpha &&
             beta == o.beta && engine == o.engine;
    }
  };
  // One primitive per geometry in use (the style losses alternate five);
  // emptied when it would pass kMaxEntries.
  struct Entry {
    Key key;
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c;
  };
  static constexpr std::size_t kMaxEntries = 32;
  // A factor rounded to bfloat16 bits (over the OpenMP threads in 4 KiB
  // pieces), with the pointer and size it came from.
  struct Rounded {
    const float* src = nullptr;
    std::size_t count = 0;
    unsigned long long call = 0;  ///< the run_bf16 call that last used it
    HostVector<std::uint16_t> bits;
    void round(const float* in, std::size_t n) {
      src = in;
      count = n;
      bits.resize(n);
      std::uint16_t* out = bits.data();
      constexpr std::size_t kPiece = 2048;
      const long pieces = long((n + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static) if (pieces > 16)
      for (long p = 0; p < pieces; ++p) {
        const std::size_t i = std::size_t(p) * kPiece;
        backend::host::store_bf16(in + i, out + i, std::min(kPiece, n - i));
      }
    }
  };
  Rounded held_[2];
  unsigned long long calls_ = 0;  ///< run_bf16 calls so far (that reached the matmul)
  std::vector<Entry> cache_;
};

}  // namespace ops
}  // namespace cifarnet
