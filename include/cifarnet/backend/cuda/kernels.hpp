// cifarnet/backend/cuda/kernels.hpp — the CUDA backend's own kernels,
// compiled at run time with NVRTC so the library stays header-only and user
// code needs no nvcc: the parts cuDNN and cuBLAS do not cover (optimizer
// updates, EMA, weight decay, gradient norms and scaling, the softmax
// cross-entropy loss, image copies), and, since cuDNN 9 deprecates its
// legacy ops API, what the backend took from it outside the convolution:
// ReLU, max and average pooling, batch normalization, per-channel bias add
// and bias gradient (add_channel_bias, channel_sum: Dense and Conv2d), and
// strided tensor copies (transform, pad_copy, unpad: cudnnTransformTensor's
// job). Their semantics are the reference backend's; the element and index
// math they share with the host is tested there against it.
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
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
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
    /* One block's work in a multi-tensor pass: elements [begin, end) of an
       arena, read from a table in device memory (chunk_ranges). */
    struct TensorChunk { long long begin, end; };
    /* One thread's share of a chunk of a multi-tensor weight decay: the
       elements begin + lane, begin + lane + lanes, ... below end get
       g += wd * v; returns the sum of their v * v (double, in that order). */
    CN_FN double decay_chunk_lane(float* g, const float* v, long long begin, long long end, float wd,
                                  int lane, int lanes) {
      double s = 0;
      for (long long i = begin + lane; i < end; i += lanes) {
        s += double(v[i]) * double(v[i]);
        decay_grad(g[i], v[i], wd);
      }
      return s;
    }
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
    }
    /* ReLU as the reference backend: NaN propagates (NaN < 0 is false),
       -0 stays -0. */
    CN_FN float relu(float x) { return x < 0.f ? 0.f : x; }
    /* ReLU's gradient from its output y (so it works in place). */
    CN_FN float relu_grad(float y, float dy) { return y > 0.f ? dy : 0.f; }
    /* -infinity (no macro or library constant is common to both compilers). */
    CN_FN float neg_inf() {
      const float big = 3.0e38f;
      return -(big * big);
    }
    /* Offset of element (e, ch, y, x) of an (n, c, h, w) tensor, NCHW
       (nchw != 0) or NHWC. */
    CN_FN long long offset4(long long e, int ch, int y, int x, int c, int h, int w, int nchw) {
      return nchw ? ((e * c + ch) * h + y) * w + x : ((e * h + y) * w + x) * c + ch;
    }
    /* v's digits (d0, d1, d2, d3) in the mixed radices (-, r1, r2, r3), in
       32-bit arithmetic (several times cheaper on a GPU than 64-bit
       division) when v allows. */
    CN_FN void digits32(int v, int r1, int r2, int r3, long long& d0, int& d1, int& d2, int& d3) {
      d3 = v % r3;
      v /= r3;
      d2 = v % r2;
      v /= r2;
      d1 = v % r1;
      d0 = v / r1;
    }
    /* digits32, or in 64-bit arithmetic past 2^31. */
    CN_FN void digits(long long v, int r1, int r2, int r3, long long& d0, int& d1, int& d2, int& d3) {
      if (v <= 2147483647LL) {
        digits32(int(v), r1, r2, r3, d0, d1, d2, d3);
        return;
      }
      d3 = int(v % r3);
      v /= r3;
      d2 = int(v % r2);
      v /= r2;
      d1 = int(v % r1);
      d0 = v / r1;
    }
    /* The (e, ch, y, x) of offset i of an (n, c, h, w) tensor. */
    CN_FN void split4(long long i, int c, int h, int w, int nchw, long long& e, int& ch, int& y, int& x) {
      if (nchw)
        digits(i, c, h, w, e, ch, y, x);
      else
        digits(i, h, w, c, e, y, x, ch);
    }
    /* A 2-D pooling: input (c, ih, iw), output (c, oh, ow), window kh x kw,
       strides sh, sw, padding before pt (top), pl (left): the padding after
       only shows in the output size. nchw: the layout (else NHWC); max: max
       pooling (else average). A kernel parameter, passed by value. */
    struct PoolShape { int c, ih, iw, oh, ow, kh, kw, sh, sw, pt, pl, nchw, max; };
    /* Along one axis: the inputs [lo, hi) of output o's window (stride s,
       padding before p, window k, n inputs), clipped to the input, so padding
       is never part of a window (TF SAME). */
    CN_FN void pool_window(int o, int s, int p, int k, int n, int& lo, int& hi) {
      const long long a = (long long)o * s - p, b = a + k;
      lo = a < 0 ? 0 : (a > n ? n : int(a));
      hi = b > n ? n : (b < lo ? lo : int(b));
    }
    /* a / s for a >= 0, s >= 1: strides 1 and 2 without a division. */
    CN_FN int div_small(int a, int s) { return s == 1   ? a
                                               : s == 2 ? a >> 1
                                                        : a / s; }
    /* Along one axis: the outputs [lo, hi) (of n_out) whose windows hold
       input i, i.e. o·s - p <= i < o·s - p + k (empty when lo >= hi). */
    CN_FN void pool_covering(int i, int s, int p, int k, int n_out, int& lo, int& hi) {
      const int first = i + p - k + 1; /* the smallest o·s allowed */
      lo = first <= 0 ? 0 : div_small(first + s - 1, s);
      hi = div_small(i + p, s) + 1;
      if (hi > n_out) hi = n_out;
    }
    /* Output i (an offset into y) of a pooling, as the reference backend:
       max: the window's values compared in window order (rows, then
       columns) from -inf, a strictly greater one winning (NaN never wins;
       an all-NaN window gives -inf); average: the float sum in window order
       divided by the number of window elements inside the input. */
    CN_FN float pool_forward_at(const float* x, const PoolShape& g, long long e, int ch, int oy, int ox) {
      int y0, y1, x0, x1;
      pool_window(oy, g.sh, g.pt, g.kh, g.ih, y0, y1);
      pool_window(ox, g.sw, g.pl, g.kw, g.iw, x0, x1);
      if (g.max) {
        float best = neg_inf();
        for (int yy = y0; yy < y1; ++yy)
          for (int xx = x0; xx < x1; ++xx) {
            const float v = x[offset4(e, ch, yy, xx, g.c, g.ih, g.iw, g.nchw)];
            if (v > best) best = v;
          }
        return best;
      }
      float sum = 0.f;
      for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) sum += x[offset4(e, ch, yy, xx, g.c, g.ih, g.iw, g.nchw)];
      return sum / float((y1 - y0) * (x1 - x0));
    }
    /* Input i's gradient (an offset into x and dx), gathered from the outputs
       whose windows hold it, in output order (rows, then columns), in float,
       as the reference backend's scatter adds them: max: dy of each output
       whose window's first element (in window order) equal to that output's
       y is this one; average: dy / (the output's window elements inside the
       input). Deterministic: one thread per input element, no atomics. x and
       y are not read for the average. */
    CN_FN float pool_backward_at(const float* x, const float* y, const float* dy, const PoolShape& g,
                                 long long i, long long e, int ch, int iy, int ix) {
      int oy0, oy1, ox0, ox1;
      pool_covering(iy, g.sh, g.pt, g.kh, g.oh, oy0, oy1);
      pool_covering(ix, g.sw, g.pl, g.kw, g.ow, ox0, ox1);
      const float v = g.max ? x[i] : 0.f;
      float acc = 0.f;
      for (int oy = oy0; oy < oy1; ++oy)
        for (int ox = ox0; ox < ox1; ++ox) {
          const long long o = offset4(e, ch, oy, ox, g.c, g.oh, g.ow, g.nchw);
          int y0, y1, x0, x1;
          pool_window(oy, g.sh, g.pt, g.kh, g.ih, y0, y1);
          pool_window(ox, g.sw, g.pl, g.kw, g.iw, x0, x1);
          if (!g.max) {
            acc += dy[o] / float((y1 - y0) * (x1 - x0));
            continue;
          }
          const float best = y[o];
          if (!(v == best)) continue;
          /* This element holds the max: does one before it in window order? */
          bool first = true;
          for (int yy = y0; yy <= iy && first; ++yy)
            for (int xx = x0; xx < x1; ++xx) {
              if (yy == iy && xx == ix) break;
              if (x[offset4(e, ch, yy, xx, g.c, g.ih, g.iw, g.nchw)] == best) {
                first = false;
                break;
              }
            }
          if (first) acc += dy[o];
        }
      return acc;
    }
    /* pool_forward_at / pool_backward_at of offset i. */
    CN_FN float pool_forward(const float* x, const PoolShape& g, long long i) {
      long long e;
      int ch, oy, ox;
      split4(i, g.c, g.oh, g.ow, g.nchw, e, ch, oy, ox);
      return pool_forward_at(x, g, e, ch, oy, ox);
    }
    /* (the same for pool_backward_at) */
    CN_FN float pool_backward(const float* x, const float* y, const float* dy, const PoolShape& g,
                              long long i) {
      long long e;
      int ch, iy, ix;
      split4(i, g.c, g.ih, g.iw, g.nchw, e, ch, iy, ix);
      return pool_backward_at(x, y, dy, g, i, e, ch, iy, ix);
    }
    /* The (e, ch, y, x) of offsets i, i + step, ... of an (n, c, h, w)
       tensor without divisions per element (a grid-stride loop's): the
       offset's mixed-radix digits (e, ch, y, x) for NCHW, (e, y, x, ch) for
       NHWC, and step's, added digit by digit with carries. */
    struct Cursor4 {
      long long d0, s0;
      int d1, d2, d3, r1, r2, r3, s1, s2, s3, nchw;
    };
    CN_FN Cursor4 cursor4(long long i, long long step, int c, int h, int w, int nchw) {
      Cursor4 k;
      k.nchw = nchw;
      k.r1 = nchw ? c : h;
      k.r2 = nchw ? h : w;
      k.r3 = nchw ? w : c;
      digits(i, k.r1, k.r2, k.r3, k.d0, k.d1, k.d2, k.d3);
      digits(step, k.r1, k.r2, k.r3, k.s0, k.s1, k.s2, k.s3);
      return k;
    }
    /* The cursor at the next offset: i + step. */
    CN_FN void advance4(Cursor4& k) {
      int carry = 0;
      k.d3 += k.s3;
      if (k.d3 >= k.r3) {
        k.d3 -= k.r3;
        carry = 1;
      }
      k.d2 += k.s2 + carry; /* at most 2·r2 - 1 */
      carry = 0;
      if (k.d2 >= k.r2) {
        k.d2 -= k.r2;
        carry = 1;
      }
      k.d1 += k.s1 + carry;
      carry = 0;
      if (k.d1 >= k.r1) {
        k.d1 -= k.r1;
        carry = 1;
      }
      k.d0 += k.s0 + carry;
    }
    /* The cursor's channel, row and column. */
    CN_FN int cursor_ch(const Cursor4& k) { return k.nchw ? k.d1 : k.d3; }
    /* (row) */
    CN_FN int cursor_y(const Cursor4& k) { return k.nchw ? k.d2 : k.d1; }
    /* (column) */
    CN_FN int cursor_x(const Cursor4& k) { return k.nchw ? k.d3 : k.d2; }
    /* Channel of offset i of an (n, c, hw) tensor. */
    CN_FN int channel_of(long long i, int c, int hw, int nchw) {
      return nchw ? int((i / hw) % c) : int(i % c);
    }
    /* The channel of offsets i, i + step, i + 2·step, ... of an (n, c, hw)
       tensor without a division per element (a grid-stride loop's): with
       inner = hw (NCHW) or 1 (NHWC), q = i % inner and ch = (i / inner) % c
       advance by step's own remainders, with a carry. */
    struct ChannelCursor { int ch, q, c, inner, dch, dq; };
    CN_FN ChannelCursor channel_cursor(long long i, long long step, int c, int hw, int nchw) {
      ChannelCursor k;
      long long e; /* (e, 0, ch, q): the digits of i in radices (-, 1, c, inner) */
      int zero;
      k.c = c;
      k.inner = nchw ? hw : 1;
      digits(i, 1, c, k.inner, e, zero, k.ch, k.q);
      digits(step, 1, c, k.inner, e, zero, k.dch, k.dq);
      return k;
    }
    /* The cursor at the next offset: i + step. */
    CN_FN void channel_advance(ChannelCursor& k) {
      k.q += k.dq;
      int carry = 0;
      if (k.q >= k.inner) {
        k.q -= k.inner;
        carry = 1;
      }
      k.ch += k.dch + carry; /* at most 2c - 1 */
      if (k.ch >= k.c) k.ch -= k.c;
    }
    /* Offset of row r = e·hw + q of channel ch of an (n, c, hw) tensor. */
    CN_FN long long channel_offset(long long e, int q, int ch, int c, int hw, int nchw) {
      return nchw ? (e * c + ch) * hw + q : (e * hw + q) * c + ch;
    }
    /* Per-channel sums (cn_channel_partials): what each element adds to the
       two sums s0, s1 of its channel, given the channel's c0, c1. */
    enum {
        kSumX = 0,     /* s0 += x */
        kSumSqDev = 1, /* s0 += (x - c0)² (c0: the mean) */
        kSumDyXhat = 2 /* s0 += dy, s1 += dy·(x - c0)·c1 (c0: the mean, c1: 1/sqrt(var + eps); y is dy) */
    };
    CN_FN void channel_terms(int mode, float x, float y, double c0, double c1, double& s0, double& s1) {
      if (mode == kSumX) {
        s0 += double(x);
      } else if (mode == kSumSqDev) {
        const double d = double(x) - c0;
        s0 += d * d;
      } else {
        s0 += double(y);
        s1 += double(y) * (double(x) - c0) * c1;
      }
    }
    /* The rows [begin, end) of chunk b of `chunks` equal parts of `rows`. */
    CN_FN void chunk_rows(long long rows, int chunks, int b, long long& begin, long long& end) {
      const long long len = (rows + chunks - 1) / chunks;
      begin = len * b;
      if (begin > rows) begin = rows;
      end = begin + len > rows ? rows : begin + len;
    }
    /* One thread's share of a channel's sums: rows r, r + step, ... below
       end of channel ch (x, and y when the mode reads it, in the (n, c, hw)
       layout), added to s0, s1. One division, then the row's (e, q) steps. */
    CN_FN void channel_partial_sums(const float* x, const float* y, int mode, double c0, double c1,
                                    long long r, long long end, int step, int ch, int c, int hw, int nchw,
                                    double& s0, double& s1) {
      if (r >= end) return;
      long long e = r / hw;
      int q = int(r % hw);
      const long long de = step / hw;
      const int dq = step % hw;
      for (; r < end; r += step) {
        const long long at = channel_offset(e, q, ch, c, hw, nchw);
        channel_terms(mode, x[at], y ? y[at] : 0.f, c0, c1, s0, s1);
        q += dq;
        e += de;
        if (q >= hw) {
          q -= hw;
          ++e;
        }
      }
    }
    /* Channels side by side in one block of cn_channel_partials: NHWC reads
       up to 32 consecutive channels per row (coalesced), NCHW one channel
       (its rows are consecutive). */
    CN_FN int channel_lanes(int c, int nchw) { return nchw ? 1 : (c < 32 ? c : 32); }
    /* 1/sqrt(var + eps), in double (as the reference backend). */
    CN_FN double bn_inv_std(double var, double eps) { return 1.0 / sqrt(var + eps); }
    /* What cn_channel_finalize makes of channel ch's sums s0, s1 (m: elements
       per channel). stats holds 4·c doubles: the mean, 1/sqrt(var + eps),
       Σdy and Σdy·xhat of each channel. */
    enum {
        kOutSum = 0,   /* out0 = s0 (a bias gradient) */
        kOutMean = 1,  /* stats[ch] = s0 / m; out0 = that mean */
        kOutVar = 2,   /* out0 = s0 / m (the biased variance); stats[c + ch] = 1/sqrt(it + eps) */
        kOutBnGrad = 3 /* stats[2c + ch] = s0, stats[3c + ch] = s1; out0 (dgamma) = s1, out1 (dbeta) = s0 */
    };
    CN_FN void channel_finish(int mode, int ch, int c, double s0, double s1, double m, double eps,
                              double* stats, float* out0, float* out1) {
      if (mode == kOutSum) {
        out0[ch] = float(s0);
      } else if (mode == kOutMean) {
        const double mu = s0 / m;
        stats[ch] = mu;
        out0[ch] = float(mu);
      } else if (mode == kOutVar) {
        const double v = s0 / m;
        out0[ch] = float(v);
        stats[c + ch] = bn_inv_std(v, eps);
      } else {
        stats[2 * c + ch] = s0;
        stats[3 * c + ch] = s1;
        out0[ch] = float(s1);
        out1[ch] = float(s0);
      }
    }
    /* Batch norm's output for one element (the reference's arithmetic). */
    CN_FN float bn_normalize(float x, float gamma, float beta, double mu, double inv) {
      return float(double(gamma) * (double(x) - mu) * inv + double(beta));
    }
    /* Batch norm's input gradient for one element (m: elements per channel;
       sdy = Σdy, sdyx = Σdy·xhat over the channel). */
    CN_FN float bn_dx(float x, float dy, float gamma, double mu, double inv, double m, double sdy,
                      double sdyx) {
      const double k = double(gamma) * inv / m;
      const double xhat = (double(x) - mu) * inv;
      return float(k * (m * double(dy) - sdy - xhat * sdyx));
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
/* CN_LOOP over an (n, c, hw) tensor, with k.ch the channel of element i. */
#define CN_CHANNEL_LOOP(n, c, hw, nchw)                                                   \
  const long long cn_first = (long long)blockIdx.x * blockDim.x + threadIdx.x,            \
                  cn_step = (long long)blockDim.x * gridDim.x;                            \
  shared::ChannelCursor k = shared::channel_cursor(cn_first, cn_step, (c), (hw), (nchw)); \
  for (long long i = cn_first; i < (n); i += cn_step, shared::channel_advance(k))
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
/* The sum of every thread's v over the block, in a fixed tree (acc[t] +=
   acc[t + k] for k = blockDim.x / 2, ..., 1; tests emulate this order);
   acc: blockDim.x shared doubles, free again when it returns. Every thread
   of the block must call it. */
__device__ inline double cn_block_sum(double* acc, double v) {
  acc[threadIdx.x] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) acc[threadIdx.x] += acc[threadIdx.x + k];
    __syncthreads();
  }
  const double total = acc[0];
  __syncthreads();
  return total;
}
/* partial[b] = sum of x[i]^2 (in double) over the elements block b visits;
   blockDim.x must be 256. */
extern "C" __global__ void cn_sum_squares(const float* x, long long n, double* partial) {
  __shared__ double acc[256];
  double s = 0;
  CN_LOOP(n) s += double(x[i]) * double(x[i]);
  const double total = cn_block_sum(acc, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
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
/* ReLU, one thread per element (in place: x == y). */
extern "C" __global__ void cn_relu(const float* x, float* y, long long n) {
  CN_LOOP(n) y[i] = shared::relu(x[i]);
}
/* ReLU's gradient from its output (in place: dy == dx). */
extern "C" __global__ void cn_relu_bwd(const float* y, const float* dy, float* dx, long long n) {
  CN_LOOP(n) dx[i] = shared::relu_grad(y[i], dy[i]);
}
/* CN_LOOP over an (n, c, h, w) tensor, with k its element's coordinates. */
#define CN_LOOP4(n, c, h, w, nchw)                                                          \
  const long long cn_first = (long long)blockIdx.x * blockDim.x + threadIdx.x,              \
                  cn_step = (long long)blockDim.x * gridDim.x;                              \
  shared::Cursor4 k = shared::cursor4(cn_first, cn_step, (c), (h), (w), (nchw));            \
  for (long long i = cn_first; i < (n); i += cn_step, shared::advance4(k))
/* Pooling forward, one thread per output element. */
extern "C" __global__ void cn_pool(const float* x, float* y, long long total, shared::PoolShape g) {
  CN_LOOP4(total, g.c, g.oh, g.ow, g.nchw)
  y[i] = shared::pool_forward_at(x, g, k.d0, shared::cursor_ch(k), shared::cursor_y(k), shared::cursor_x(k));
}
/* Pooling backward, one thread per input element (a gather: dx written once). */
extern "C" __global__ void cn_pool_bwd(const float* x, const float* y, const float* dy, float* dx,
                                       long long total, shared::PoolShape g) {
  CN_LOOP4(total, g.c, g.ih, g.iw, g.nchw)
  dx[i] = shared::pool_backward_at(x, y, dy, g, i, k.d0, shared::cursor_ch(k), shared::cursor_y(k),
                                   shared::cursor_x(k));
}
/* dst(i0, i1, i2, i3) = src(i0, i1, i2, i3) for a 4-D view of total elements
   with dims (total / (d1·d2·d3), d1, d2, d3) and element strides s (source)
   and t (destination); i3 varies fastest. */
extern "C" __global__ void cn_transform(const float* src, float* dst, long long total, int d1, int d2, int d3,
                                        long long s0, long long s1, long long s2, long long s3, long long t0,
                                        long long t1, long long t2, long long t3) {
  CN_LOOP4(total, d1, d2, d3, 1)
  dst[k.d0 * t0 + k.d1 * t1 + k.d2 * t2 + k.d3 * t3] = src[k.d0 * s0 + k.d1 * s1 + k.d2 * s2 + k.d3 * s3];
}
/* y[e, ch, q] += b[ch] over an (n, c, hw) tensor. */
extern "C" __global__ void cn_add_channel_bias(const float* b, float* y, long long total, int c, int hw,
                                               int nchw) {
  CN_CHANNEL_LOOP(total, c, hw, nchw) y[i] += b[k.ch];
}
/* Per-channel partial sums, in double, of an (n, c, hw) tensor of `rows` =
   n·hw rows (shared::channel_terms says what `mode` sums; y: dy for
   kSumDyXhat, else unused; stats: the channels' c0 at [ch], c1 at [c + ch]).
   Grid (channel tiles, row chunks), 256 threads: a block takes
   shared::channel_lanes channels side by side (NHWC: consecutive threads,
   consecutive channels) and 256 / lanes rows at a time over its chunk's
   contiguous rows; a deterministic tree over the rows leaves the block's two
   sums of channel ch in partial[(ch·chunks + chunk)·2 + k]. */
extern "C" __global__ void cn_channel_partials(const float* x, const float* y, const double* stats,
                                               double* partial, long long rows, int c, int hw, int nchw,
                                               int mode) {
  __shared__ double acc0[256], acc1[256];
  const int lanes = shared::channel_lanes(c, nchw), per = 256 / lanes;
  const int t = threadIdx.x, lane = t % lanes, row = t / lanes, ch = blockIdx.x * lanes + lane;
  double s0 = 0, s1 = 0;
  if (row < per && ch < c) {
    long long r0, r1;
    shared::chunk_rows(rows, int(gridDim.y), int(blockIdx.y), r0, r1);
    const double c0 = mode == shared::kSumX ? 0.0 : stats[ch];
    const double c1 = mode == shared::kSumDyXhat ? stats[c + ch] : 0.0;
    shared::channel_partial_sums(x, y, mode, c0, c1, r0 + row, r1, per, ch, c, hw, nchw, s0, s1);
  }
  acc0[t] = s0;
  acc1[t] = s1;
  __syncthreads();
  for (int s = 1; s < per; s *= 2) {
    if (row < per && row % (2 * s) == 0 && row + s < per) {
      acc0[t] += acc0[t + s * lanes];
      acc1[t] += acc1[t + s * lanes];
    }
    __syncthreads();
  }
  if (row == 0 && ch < c) {
    const long long at = ((long long)ch * gridDim.y + blockIdx.y) * 2;
    partial[at] = acc0[t];
    partial[at + 1] = acc1[t];
  }
}
/* One block of 256 threads per channel: adds the channel's `chunks` partial
   pairs (a deterministic tree), then shared::channel_finish by `mode`. */
extern "C" __global__ void cn_channel_finalize(const double* partial, int chunks, int c, int mode, double m,
                                               double eps, double* stats, float* out0, float* out1) {
  __shared__ double acc0[256], acc1[256];
  const int ch = blockIdx.x, t = threadIdx.x;
  double s0 = 0, s1 = 0;
  for (int b = t; b < chunks; b += 256) {
    const long long at = ((long long)ch * chunks + b) * 2;
    s0 += partial[at];
    s1 += partial[at + 1];
  }
  acc0[t] = s0;
  acc1[t] = s1;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) {
      acc0[t] += acc0[t + s];
      acc1[t] += acc1[t + s];
    }
    __syncthreads();
  }
  if (t == 0) shared::channel_finish(mode, ch, c, acc0[0], acc1[0], m, eps, stats, out0, out1);
}
/* Batch norm with given statistics: stats[ch] = the mean, stats[c + ch] =
   1/sqrt(var + eps) (from the caller's float mean and var, in double). */
extern "C" __global__ void cn_bn_prepare(const float* mean, const float* var, double* stats, long long c,
                                         double eps) {
  CN_LOOP(c) {
    stats[i] = double(mean[i]);
    stats[c + i] = shared::bn_inv_std(double(var[i]), eps);
  }
}
/* y = gamma·(x - mean)·inv + beta per element (stats as cn_bn_prepare's). */
extern "C" __global__ void cn_bn_apply(const float* x, const float* gamma, const float* beta, const double* stats,
                                       float* y, long long total, int c, int hw, int nchw) {
  CN_CHANNEL_LOOP(total, c, hw, nchw) {
    const int ch = k.ch;
    y[i] = shared::bn_normalize(x[i], gamma[ch], beta[ch], stats[ch], stats[c + ch]);
  }
}
/* Batch norm's dx per element (stats: all four rows, see channel_finish). */
extern "C" __global__ void cn_bn_dx(const float* x, const float* dy, const float* gamma, const double* stats,
                                    float* dx, long long total, int c, int hw, int nchw, double m) {
  CN_CHANNEL_LOOP(total, c, hw, nchw) {
    const int ch = k.ch;
    dx[i] = shared::bn_dx(x[i], dy[i], gamma[ch], stats[ch], stats[c + ch], m, stats[2 * c + ch],
                          stats[3 * c + ch]);
  }
}
/* Multi-tensor L2 weight decay: block b takes chunks b, b + gridDim.x, ...
   of the table; g += wd * v over each, and partial[c] = chunk c's sum of
   v * v (double: the threads' shares added in a fixed tree, the order
   tests emulate on the host). blockDim.x must be 256. */
extern "C" __global__ void cn_multi_decay(const shared::TensorChunk* chunks, int count, float* g, const float* v,
                                          float wd, double* partial) {
  __shared__ double acc[256];
  for (int c = blockIdx.x; c < count; c += gridDim.x) {
    const shared::TensorChunk ch = chunks[c];
    const double total =
        cn_block_sum(acc, shared::decay_chunk_lane(g, v, ch.begin, ch.end, wd, threadIdx.x, blockDim.x));
    if (threadIdx.x == 0) partial[c] = total;
  }
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
                                              "cn_multi_decay",
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
                                              "cn_relu",
                                              "cn_relu_bwd",
                                              "cn_pool",
                                              "cn_pool_bwd",
                                              "cn_transform",
                                              "cn_add_channel_bias",
                                              "cn_channel_partials",
                                              "cn_channel_finalize",
                                              "cn_bn_prepare",
                                              "cn_bn_apply",
                                              "cn_bn_dx"};
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
CN_PARAM_NAME(const double*)
CN_PARAM_NAME(shared::PoolShape)
CN_PARAM_NAME(const shared::TensorChunk*)
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
inline constexpr Kernel<const shared::TensorChunk*, int, float*, const float*, float, double*> multi_decay{
    "cn_multi_decay"};
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
inline constexpr Kernel<const float*, float*, ll> relu{"cn_relu"};
inline constexpr Kernel<const float*, const float*, float*, ll> relu_bwd{"cn_relu_bwd"};
inline constexpr Kernel<const float*, float*, ll, shared::PoolShape> pool{"cn_pool"};
inline constexpr Kernel<const float*, const float*, const float*, float*, ll, shared::PoolShape> pool_bwd{
    "cn_pool_bwd"};
inline constexpr Kernel<const float*, float*, ll, int, int, int, ll, ll, ll, ll, ll, ll, ll, ll> transform{
    "cn_transform"};
inline constexpr Kernel<const float*, float*, ll, int, int, int> add_channel_bias{"cn_add_channel_bias"};
inline constexpr Kernel<const float*, const float*, const double*, double*, ll, int, int, int, int>
    channel_partials{"cn_channel_partials"};
inline constexpr Kernel<const double*, int, int, int, double, double, double*, float*, float*>
    channel_finalize{"cn_channel_finalize"};
inline constexpr Kernel<const float*, const float*, double*, ll, double> bn_prepare{"cn_bn_prepare"};
inline constexpr Kernel<const float*, const float*, const float*, const double*, float*, ll, int, int, int>
    bn_apply{"cn_bn_apply"};
inline constexpr Kernel<const float*, const float*, const float*, const double*, float*, ll, int, int, int,
                        double>
    bn_dx{"cn_bn_dx"};

/// (name, signature) of every handle above, for the tests.
inline std::vector<std::pair<std::string, std::vector<std::string>>> all() {
  std::vector<std::pair<std::string, std::vector<std::string>>> v;
  auto add_one = [&](auto k) { v.emplace_back(k.name, k.signature()); };
  add_one(momentum);
  add_one(adam);
  add_one(ema);
  add_one(decay_grad);
  add_one(multi_decay);
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
  add_one(relu);
  add_one(relu_bwd);
  add_one(pool);
  add_one(pool_bwd);
  add_one(transform);
  add_one(add_channel_bias);
  add_one(channel_partials);
  add_one(channel_finalize);
  add_one(bn_prepare);
  add_one(bn_apply);
  add_one(bn_dx);
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
    const std::size_t blocks = std::min(max_blocks, (n + kThreads - 1) / kThreads);
    enqueue(dev, k.name, dim3(unsigned(blocks)), args...);
  }

  /// Launches kernel `k` on a grid of `grid` blocks of kThreads threads, for
  /// the kernels that lay their work out over the block indices themselves
  /// (the per-channel reductions), on dev's stream with dev's GPU current.
  template <class... P>
  void launch_grid(Dev& dev, const Kernel<P...>& k, dim3 grid,
                   typename kernel_detail::identity<P>::type... args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
    enqueue(dev, k.name, grid, args...);
  }

  static constexpr unsigned kThreads = 256;  // the block size every kernel assumes
  static constexpr std::size_t kMaxBlocks = 4096;

 private:
  /// Launches kernel `name` on `grid` with `args` on dev's stream, or
  /// queues the launch while dev's CUDA graphs are on (signature: the
  /// kernel, the grid and every argument's bytes).
  template <class... A>
  void enqueue(Dev& dev, const char* name, dim3 grid, A... args) {
    const cudaKernel_t f = kernel(name);
    if (!dev.graphs()) {
      void* ptrs[] = {static_cast<void*>(&args)...};
      const DeviceGuard guard(dev.ordinal());
      check(cudaLaunchKernel(reinterpret_cast<const void*>(f), grid, dim3(kThreads), ptrs, 0, dev.stream()),
            name);
      return;
    }
    static_assert((std::is_trivially_copyable_v<A> && ...), "kernel arguments are copied bytes");
    thread_local LaunchSignature sig;  // reused: no allocation per launch once it has grown
    sig.clear();
    sig.add(static_cast<const void*>(f)).add(grid.x).add(grid.y).add(grid.z);
    (sig.bytes(&args, sizeof(A)), ...);
    dev.submit(name, sig, [f, grid, name, args...](cudaStream_t s) mutable {
      void* ptrs[] = {static_cast<void*>(&args)...};
      check(cudaLaunchKernel(reinterpret_cast<const void*>(f), grid, dim3(kThreads), ptrs, 0, s), name);
    });
  }

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
/// Blocks for the kernels that walk their elements with a cursor
/// (CN_LOOP4, CN_CHANNEL_LOOP: divisions once per thread, then additions):
/// enough to fill a large GPU, with several elements per thread.
inline constexpr std::size_t kWalkBlocks = 1024;
/// channel_sum's partial sums (Conv2d's and Dense's bias gradients): a slot
/// neither op uses for anything else.
inline constexpr std::size_t kChannelSumSlot = kSlotB;

/// Device slot `slot` as room for `n` values of type V (cudaMalloc'd, so
/// aligned for any V).
template <class V>
V* scratch(Dev& dev, std::size_t slot, std::size_t n) {
  return reinterpret_cast<V*>(dev.buffer(slot, (n * sizeof(V) + sizeof(float) - 1) / sizeof(float)));
}

// ------------------------------------------------ layout and channel helpers
// Building blocks of the ops (cuDNN 9 deprecates its legacy ops API:
// cudnnTransformTensor, cudnnAddTensor, cudnnConvolutionBackwardBias, ...).
// They take device pointers (the op has staged its arguments), queue their
// kernels on dev's stream and never wait.

namespace kernel_detail {
/// A float 4-D view: dims (n, c, h, w) and element strides, as a cuDNN
/// tensor descriptor holds them.
struct View4 {
  std::array<int, 4> dims{}, strides{};
  std::string str() const {
    return cifarnet::detail::concat("(", dims[0], ", ", dims[1], ", ", dims[2], ", ", dims[3], ") strides (",
                                    strides[0], ", ", strides[1], ", ", strides[2], ", ", strides[3], ")");
  }
};
inline View4 view_of(const TensorDesc& d, const char* what) {
  View4 v;
  cudnnDataType_t t{};
  check(cudnnGetTensor4dDescriptor(d, &t, &v.dims[0], &v.dims[1], &v.dims[2], &v.dims[3], &v.strides[0],
                                   &v.strides[1], &v.strides[2], &v.strides[3]),
        "cudnnGetTensor4dDescriptor");
  if (t != CUDNN_DATA_FLOAT)
    throw BackendError(cifarnet::detail::concat("transform: the ", what, " is not float"));
  return v;
}

/// How cn_channel_partials covers an (n, c, hw) tensor: a grid of (tiles,
/// chunks) blocks, and the partial sums it leaves (doubles).
struct ChannelGrid {
  int c = 0, hw = 1, nchw = 0;
  long long rows = 0;  ///< n·hw
  unsigned tiles = 0, chunks = 0;
  std::size_t partial_count() const { return std::size_t(c) * chunks * 2; }
};
inline ChannelGrid channel_grid(DataFormat fmt, std::size_t n, std::size_t c, std::size_t hw) {
  ChannelGrid g;
  g.c = to_int(c, "channels");
  g.hw = to_int(hw, "h·w");
  g.nchw = fmt == DataFormat::NCHW && hw > 1 ? 1 : 0;  // (n, c, 1) is one layout in both formats
  g.rows = static_cast<long long>(n * hw);
  const int lanes = std::max(1, shared::channel_lanes(g.c, g.nchw));
  const long long per = KernelLibrary::kThreads / unsigned(lanes);
  g.tiles = unsigned((c + std::size_t(lanes) - 1) / std::size_t(lanes));
  // About 8 rows per thread, at most 1024 chunks (so also at most 1024
  // partials per channel for cn_channel_finalize).
  g.chunks = unsigned(std::clamp<long long>((g.rows + per * 8 - 1) / (per * 8), 1, 1024));
  return g;
}
}  // namespace kernel_detail

/// dst(n, c, h, w) = src(n, c, h, w) for two float 4-D views with the same
/// dims and any strides (cudnnTransformTensor with alpha 1, beta 0): one
/// thread per element, walking the destination in its memory order (writes
/// coalesced). Throws BackendError naming both shapes when the dims differ.
inline void transform(Device<Cuda>& dev, const TensorDesc& src_desc, const float* src,
                      const TensorDesc& dst_desc, float* dst) {
  const auto s = kernel_detail::view_of(src_desc, "source"),
             d = kernel_detail::view_of(dst_desc, "destination");
  if (s.dims != d.dims)
    throw BackendError(cifarnet::detail::concat("transform: source ", s.str(), " and destination ", d.str(),
                                                " differ in shape"));
  std::size_t total = 1;
  for (int v : s.dims) total *= std::size_t(v);
  if (total == 0) return;
  // Axes from the largest destination stride to the smallest (size-1 axes
  // first: they never move), so consecutive threads write consecutive places.
  std::array<int, 4> ax{0, 1, 2, 3};
  auto key = [&](int a) {
    return d.dims[a] == 1 ? std::numeric_limits<long long>::max() : (long long)d.strides[a];
  };
  std::stable_sort(ax.begin(), ax.end(), [&](int a, int b) { return key(a) > key(b); });
  KernelLibrary::get(dev).launch(dev, kernel::transform, total, kWalkBlocks, src, dst,
                                 static_cast<long long>(total), s.dims[ax[1]], s.dims[ax[2]], s.dims[ax[3]],
                                 s.strides[ax[0]], s.strides[ax[1]], s.strides[ax[2]], s.strides[ax[3]],
                                 d.strides[ax[0]], d.strides[ax[1]], d.strides[ax[2]], d.strides[ax[3]]);
}

/// Copies x (device, layout `x_desc`) into the interior of device buffer
/// `slot` of `pad`, whose border holds `border`; returns the copy.
inline const float* pad_copy(Dev& dev, std::size_t slot, const PaddedInput& pad, const TensorDesc& x_desc,
                             const float* x, float border) {
  float* xp = dev.buffer(slot, pad.size);
  check(cudnnSetTensor(dev.cudnn(), pad.whole, xp, &border), "fill the padded copy of an input");
  transform(dev, x_desc, x, pad.inside, xp + pad.interior);
  return xp;
}

/// The interior of a padded gradient `gp` into dx (layout `x_desc`).
inline void unpad(Dev& dev, const PaddedInput& pad, const float* gp, const TensorDesc& x_desc, float* dx) {
  transform(dev, pad.inside, gp + pad.interior, x_desc, dx);
}

/// y[e, ch, q] += b[ch] over an (n, c, hw) tensor y in format fmt (a
/// convolution's or, with hw = 1, a dense layer's bias).
inline void add_channel_bias(Device<Cuda>& dev, DataFormat fmt, std::size_t n, std::size_t c, std::size_t hw,
                             const float* b, float* y) {
  const std::size_t total = n * c * hw;
  KernelLibrary::get(dev).launch(dev, kernel::add_channel_bias, total, kWalkBlocks, b, y,
                                 static_cast<long long>(total), to_int(c, "channels"), to_int(hw, "h·w"),
                                 fmt == DataFormat::NCHW ? 1 : 0);
}

/// cn_channel_partials then cn_channel_finalize over the tensor `cg`
/// describes: per-channel sums (`sum`: a shared::kSum* mode) of x (and y)
/// into `partial` (cg.partial_count() doubles), finished by `out`
/// (a shared::kOut* mode) into stats / out0 / out1. m: elements per channel.
inline void channel_reduce(Dev& dev, const kernel_detail::ChannelGrid& cg, int sum, int out, const float* x,
                           const float* y, double* stats, double* partial, double m, double eps, float* out0,
                           float* out1) {
  if (cg.c == 0) return;
  auto& lib = KernelLibrary::get(dev);
  lib.launch_grid(dev, kernel::channel_partials, dim3(cg.tiles, cg.chunks), x, y, stats, partial, cg.rows,
                  cg.c, cg.hw, cg.nchw, sum);
  lib.launch_grid(dev, kernel::channel_finalize, dim3(unsigned(cg.c)), partial, int(cg.chunks), cg.c, out, m,
                  eps, stats, out0, out1);
}

/// db[ch] = Σ over e and q of dy[e, ch, q] for an (n, c, hw) tensor in format
/// fmt, accumulated in double and written as float (overwriting db): a
/// convolution's or dense layer's bias gradient. Deterministic (a fixed
/// reduction tree per shape); scratch in device slot kChannelSumSlot.
inline void channel_sum(Device<Cuda>& dev, DataFormat fmt, std::size_t n, std::size_t c, std::size_t hw,
                        const float* dy, float* db) {
  if (c == 0) return;
  const auto cg = kernel_detail::channel_grid(fmt, n, c, hw);
  double* partial = scratch<double>(dev, kChannelSumSlot, cg.partial_count());
  channel_reduce(dev, cg, shared::kSumX, shared::kOutSum, dy, nullptr, nullptr, partial, 0.0, 0.0, db,
                 nullptr);
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

// ------------------------------------------------- multi-tensor passes
// A pass over many parameters of an arena in one launch: the host cuts the
// parameters' ranges into a table of chunks (one block's work each), puts
// the table in device memory once, and the kernel reads it there; so a
// step's weight decay is one launch whatever the number of decayed
// variables (it was two per variable), and a captured CUDA graph replays the
// same launch unchanged.

static_assert(sizeof(shared::TensorChunk) == 2 * sizeof(long long) &&
                  std::is_trivially_copyable<shared::TensorChunk>::value,
              "the chunk table is copied to the device byte for byte: its layout must be NVRTC's");

/// Elements per chunk of a multi-tensor pass: 16 per thread of a block.
inline constexpr std::size_t kTensorChunk = std::size_t(16) * KernelLibrary::kThreads;

/// The chunk table of a multi-tensor pass over `ranges` [begin, end) of an
/// arena: each range cut into chunks of at most `chunk` elements from its
/// first element on, the ranges in the given order, empty ones skipped.
/// Overlapping ranges are a BackendError naming both (chunks run in
/// parallel: an element in two ranges would be updated twice at once).
inline std::vector<shared::TensorChunk> chunk_ranges(
    const std::vector<std::pair<std::size_t, std::size_t>>& ranges, std::size_t chunk = kTensorChunk) {
  if (chunk == 0) throw BackendError("chunk_ranges: a chunk of 0 elements");
  std::vector<std::pair<std::size_t, std::size_t>> sorted;
  for (const auto& r : ranges)
    if (r.second > r.first) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first < sorted[i - 1].second)
      throw BackendError(cifarnet::detail::concat("multi-tensor pass: ranges [", sorted[i - 1].first, ", ",
                                                  sorted[i - 1].second, ") and [", sorted[i].first, ", ",
                                                  sorted[i].second, ") overlap"));
  std::vector<shared::TensorChunk> table;
  for (const auto& r : ranges)
    for (std::size_t b = r.first; b < r.second; b += chunk)
      table.push_back({static_cast<long long>(b), static_cast<long long>(std::min(r.second, b + chunk))});
  return table;
}

/// A chunk table in device memory (chunk_ranges), built and uploaded again
/// only when the ranges or the GPU change: an owner that runs the same pass
/// every step (ops::Arena's weight decay) uploads it once.
class DeviceChunkTable {
 public:
  /// The table of `ranges` on dev's GPU, uploaded on dev's stream when new.
  const shared::TensorChunk* get(Dev& dev, const std::vector<std::pair<std::size_t, std::size_t>>& ranges) {
    if (ordinal_ != dev.ordinal() || ranges != ranges_) {
      std::vector<shared::TensorChunk> chunks = chunk_ranges(ranges);
      if (ordinal_ != dev.ordinal() || device_.size() < chunks.size()) {
        if (ordinal_ == dev.ordinal()) dev.sync();  // a pass queued before may still read the old table
        device_ = DeviceBuffer<shared::TensorChunk>(dev.ordinal(), std::max<std::size_t>(chunks.size(), 1));
      }
      ordinal_ = dev.ordinal();
      ranges_ = ranges;
      chunks_ = std::move(chunks);
      if (!chunks_.empty()) {
        const DeviceGuard guard(dev.ordinal());
        copy_to_device(dev, device_.data(), chunks_.data(), chunks_.size() * sizeof(shared::TensorChunk),
                       "multi-tensor chunk table");
        dev.sync();  // the host table may change before the copy would have read it
      }
    }
    return device_.data();
  }
  /// The table's chunks as last built (host copy).
  const std::vector<shared::TensorChunk>& chunks() const { return chunks_; }

 private:
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;
  std::vector<shared::TensorChunk> chunks_;
  DeviceBuffer<shared::TensorChunk> device_;
  int ordinal_ = -1;
};

/// L2 weight decay of several ranges [begin, end) of an arena in one launch
/// (cn_multi_decay over `table`'s chunks): g += wd · v on each, and the sum
/// over all of Σ v² (double) as a Pending: one partial sum per chunk in the
/// read-back area, added on the host in chunk order (so in range order).
/// `finish` (null: none) turns that sum into the value, given `args`.
inline Pending weight_decay_ranges_deferred(Dev& dev, DeviceChunkTable& table,
                                            const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                            float* g, const float* v, float wd,
                                            PendingFinish finish = nullptr, const PendingArgs& args = {},
                                            Readback* area = nullptr) {
  Readback& rb = area ? *area : dev.readback();
  std::size_t extent = 0;
  for (const auto& r : ranges)
    if (r.second > r.first) extent = std::max(extent, r.second);
  if (extent == 0) return Pending::ready(finish ? finish(0.0, nullptr, args) : 0.0);
  const shared::TensorChunk* chunks = table.get(dev, ranges);
  const std::size_t count = table.chunks().size();
  if (count > std::size_t(std::numeric_limits<int>::max()))
    throw BackendError(cifarnet::detail::concat("multi-tensor weight decay: ", count, " chunks (at most ",
                                                std::numeric_limits<int>::max(), ")"));
  Staging st(dev);
  const float* dv = st.in(v, extent);
  float* dg = st.inout(g, extent);
  const auto room = rb.reserve(count * sizeof(double));
  // One block per chunk up to the grid limit of the other kernels; blocks
  // take further chunks in turn.
  KernelLibrary::get(dev).launch_grid(dev, kernel::multi_decay,
                                      dim3(unsigned(std::min(count, KernelLibrary::kMaxBlocks))), chunks,
                                      static_cast<int>(count), dg, dv, wd, static_cast<double*>(room.device));
  st.finish();
  return Pending::on(rb, room.generation, room.offset, count, finish, args);
}

/// The same without an owner's table (a one-off call: uploads its own).
inline Pending weight_decay_ranges_deferred(Dev& dev,
                                            const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                            float* g, const float* v, float wd,
                                            PendingFinish finish = nullptr, const PendingArgs& args = {},
                                            Readback* area = nullptr) {
  DeviceChunkTable table;
  Pending p = weight_decay_ranges_deferred(dev, table, ranges, g, v, wd, finish, args, area);
  dev.sync();  // the kernel reads the table: done before the table's memory goes
  return p;
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
  {
    LaunchSignature sig;
    sig.add(static_cast<const void*>(bad));
    dev.submit("cudaMemsetAsync (the bad-row count)", sig, [bad](cudaStream_t s) {
      check(cudaMemsetAsync(bad, 0, sizeof(double), s), "cudaMemsetAsync");
    });
  }
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
