// cifarnet/backend/onednn/winograd_kernels.hpp — the bodies of the own
// Winograd F(4x4, 3x3) convolution (winograd.hpp), written once over a
// vector of L floats. winograd.hpp includes this file once per instruction
// set, inside a namespace of its own that already holds:
//   Vec          direct_conv.hpp's vector of L floats (load, store, set1,
//                fma (a b + c), add, sub, max, zero);
//   CIFARNET_WK  the functions' target attribute (GCC's target("...")), so
//                the library builds for any x86-64 and the kernels run where
//                the CPU has the instructions.
// and CIFARNET_UNROLL (backend/host/unroll.hpp).
// It has no include guard on purpose; nothing else includes it.
//
// The transforms (Lavin and Gray's F(4x4, 3x3), interpolation points 0, 1,
// -1, 2, -2 and infinity), applied to columns first, then rows:
//   input  V = Bᵀ d B   (6 x 6 -> 6 x 6)   rows of Bᵀ below, in in_1d
//   output Y = Aᵀ m A   (6 x 6 -> 4 x 4)   rows of Aᵀ below, in out_1d
// (the weights' G g Gᵀ is computed once per weights, in double, by
// winograd.hpp).

// Bᵀ d over 6 vectors:
//   r0 = 4 d0 - 5 d2 + d4          r3 = 2 (d3 - d1) - d2 + d4
//   r1 = -4 (d1 + d2) + d3 + d4    r4 = 2 (d1 - d3) - d2 + d4
//   r2 = 4 (d1 - d2) - d3 + d4     r5 = 4 d1 - 5 d3 + d5
CIFARNET_WK inline void in_1d(const typename Vec::V* d, typename Vec::V* r) {
  const typename Vec::V four = Vec::set1(4.f), five = Vec::set1(-5.f), mfour = Vec::set1(-4.f),
                        two = Vec::set1(2.f);
  r[0] = Vec::fma(four, d[0], Vec::fma(five, d[2], d[4]));
  r[1] = Vec::fma(mfour, Vec::add(d[1], d[2]), Vec::add(d[3], d[4]));
  r[2] = Vec::fma(four, Vec::sub(d[1], d[2]), Vec::sub(d[4], d[3]));
  r[3] = Vec::fma(two, Vec::sub(d[3], d[1]), Vec::sub(d[4], d[2]));
  r[4] = Vec::fma(two, Vec::sub(d[1], d[3]), Vec::sub(d[4], d[2]));
  r[5] = Vec::fma(four, d[1], Vec::fma(five, d[3], d[5]));
}

// Aᵀ m over 6 vectors:
//   o0 = m0 + (m1 + m2) + (m3 + m4)      o2 = (m1 + m2) + 4 (m3 + m4)
//   o1 = (m1 - m2) + 2 (m3 - m4)         o3 = (m1 - m2) + 8 (m3 - m4) + m5
CIFARNET_WK inline void out_1d(const typename Vec::V* m, typename Vec::V* o) {
  const typename Vec::V a = Vec::add(m[1], m[2]), b = Vec::sub(m[1], m[2]), c = Vec::add(m[3], m[4]),
                        d = Vec::sub(m[3], m[4]);
  o[0] = Vec::add(Vec::add(m[0], a), c);
  o[1] = Vec::fma(Vec::set1(2.f), d, b);
  o[2] = Vec::fma(Vec::set1(4.f), c, a);
  o[3] = Vec::add(Vec::fma(Vec::set1(8.f), d, b), m[5]);
}

// The input transform of tiles [t0, t1) of the plan `p` (global tile
// numbers; the block starts at tile `base`), every group of L input
// channels: V[k][t - base][c] for the 36 positions k = 6 i + j, the 6 x 6
// input patch at rows 4 th - 1 ..., columns 4 tw - 1 ... with zeros outside
// the image (the padding).
CIFARNET_WK inline void input_tiles(const Plan& p, const float* __restrict x, std::size_t base,
                                    std::size_t t0, std::size_t t1, std::size_t S, float* __restrict V) {
  constexpr int L = Vec::L;
  const std::size_t ci = p.ci, per_image = std::size_t(p.th) * p.tw;
  for (std::size_t t = t0; t < t1; ++t) {
    const std::size_t img = t / per_image, r = t % per_image;
    const int h0 = int(r / p.tw) * 4 - 1, w0 = int(r % p.tw) * 4 - 1;
    const float* xi = x + img * std::size_t(p.h) * p.w * ci;
    float* vt = V + (t - base) * ci;
    for (std::size_t c = 0; c < ci; c += L) {
      typename Vec::V col[6][6];  // col[j][i]: column j transformed (rows i)
      CIFARNET_UNROLL(6)
      for (int j = 0; j < 6; ++j) {
        const int iw = w0 + j;
        typename Vec::V d[6];
        CIFARNET_UNROLL(6)
        for (int i = 0; i < 6; ++i) {
          const int ih = h0 + i;
          d[i] = (ih >= 0 && ih < p.h && iw >= 0 && iw < p.w)
                     ? Vec::load(xi + (std::size_t(ih) * p.w + std::size_t(iw)) * ci + c)
                     : Vec::zero();
        }
        in_1d(d, col[j]);
      }
      CIFARNET_UNROLL(6)
      for (int i = 0; i < 6; ++i) {
        typename Vec::V row[6], out[6];
        CIFARNET_UNROLL(6)
        for (int j = 0; j < 6; ++j) row[j] = col[j][i];
        in_1d(row, out);
        CIFARNET_UNROLL(6)
        for (int j = 0; j < 6; ++j) Vec::store(vt + std::size_t(i * 6 + j) * S * ci + c, out[j]);
      }
    }
  }
}

// R rows (tiles) x 2 vectors (2 L output channels) of one position's
// product: C[r][.] = sum over K of A[r][k] B[k][.], A rows `lda` apart, B a
// packed panel of K rows of 2 L floats, C rows `ldc` apart (overwritten).
template <int R>
CIFARNET_WK inline void gemm_tile(std::size_t K, const float* __restrict A, std::size_t lda,
                                  const float* __restrict B, float* __restrict C, std::size_t ldc) {
  constexpr int L = Vec::L;
  typename Vec::V acc[R][2];
  CIFARNET_UNROLL(8)
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec::zero();
  for (std::size_t k = 0; k < K; ++k) {
    const typename Vec::V b0 = Vec::load(B + k * 2 * L), b1 = Vec::load(B + k * 2 * L + L);
    CIFARNET_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      const typename Vec::V a = Vec::set1(A[std::size_t(r) * lda + k]);
      acc[r][0] = Vec::fma(a, b0, acc[r][0]);
      acc[r][1] = Vec::fma(a, b1, acc[r][1]);
    }
  }
  CIFARNET_UNROLL(8)
  for (int r = 0; r < R; ++r) {
    Vec::store(C + std::size_t(r) * ldc, acc[r][0]);
    Vec::store(C + std::size_t(r) * ldc + L, acc[r][1]);
  }
}

// Rows [0, S) of position k's product against the panel `panel` (columns
// [2 L cb, 2 L cb + 2 L) of the output channels): 6 rows at a time.
CIFARNET_WK inline void gemm_panel(std::size_t S, std::size_t ci, std::size_t co, const float* Vk,
                                   const float* panel, float* Mk, std::size_t cb) {
  constexpr std::size_t L = Vec::L;
  float* out = Mk + cb * 2 * L;
  std::size_t t = 0;
  for (; t + 6 <= S; t += 6) gemm_tile<6>(ci, Vk + t * ci, ci, panel, out + t * co, co);
  switch (S - t) {
    case 5:
      gemm_tile<5>(ci, Vk + t * ci, ci, panel, out + t * co, co);
      break;
    case 4:
      gemm_tile<4>(ci, Vk + t * ci, ci, panel, out + t * co, co);
      break;
    case 3:
      gemm_tile<3>(ci, Vk + t * ci, ci, panel, out + t * co, co);
      break;
    case 2:
      gemm_tile<2>(ci, Vk + t * ci, ci, panel, out + t * co, co);
      break;
    case 1:
      gemm_tile<1>(ci, Vk + t * ci, ci, panel, out + t * co, co);
      break;
    default:
      break;
  }
}

// The output transform of tiles [t0, t1) (global numbers; the block starts
// at `base`), every group of L output channels: the 4 x 4 outputs of each
// tile that fall inside the image, + bias[c] (if any), + sum at the same
// place (if any: a residual term laid out as y, possibly y itself, read
// before it is written), then max(., 0) if relu (a NaN stays NaN), stored
// into y.
CIFARNET_WK inline void output_tiles(const Plan& p, const float* __restrict M, std::size_t base,
                                     std::size_t t0, std::size_t t1, std::size_t S, const float* bias,
                                     const float* sum, bool relu, float* y) {
  constexpr int L = Vec::L;
  const std::size_t co = p.co, per_image = std::size_t(p.th) * p.tw;
  for (std::size_t t = t0; t < t1; ++t) {
    const std::size_t img = t / per_image, r = t % per_image;
    const int h0 = int(r / p.tw) * 4, w0 = int(r % p.tw) * 4;
    const int rows = std::min(4, p.h - h0), cols = std::min(4, p.w - w0);
    float* yi = y + img * std::size_t(p.h) * p.w * co;
    const float* mt = M + (t - base) * co;
    for (std::size_t c = 0; c < co; c += L) {
      typename Vec::V col[6][4];  // col[j][i]: column j transformed (rows i)
      CIFARNET_UNROLL(6)
      for (int j = 0; j < 6; ++j) {
        typename Vec::V m[6];
        CIFARNET_UNROLL(6)
        for (int i = 0; i < 6; ++i) m[i] = Vec::load(mt + std::size_t(i * 6 + j) * S * co + c);
        out_1d(m, col[j]);
      }
      const typename Vec::V b = bias ? Vec::load(bias + c) : Vec::zero();
      for (int i = 0; i < rows; ++i) {
        typename Vec::V row[6], o[4];
        CIFARNET_UNROLL(6)
        for (int j = 0; j < 6; ++j) row[j] = col[j][i];
        out_1d(row, o);
        for (int j = 0; j < cols; ++j) {
          const std::size_t at = (std::size_t(h0 + i) * p.w + std::size_t(w0 + j)) * co + c;
          typename Vec::V v = Vec::add(o[j], b);
          if (sum) v = Vec::add(v, Vec::load(sum + (yi - y) + at));
          if (relu) v = Vec::max(Vec::zero(), v);
          Vec::store(yi + at, v);
        }
      }
    }
  }
}
