// cifarnet/backend/onednn/direct_conv_kernels.hpp — the bodies of the own
// convolution kernels (direct_conv.hpp), written once over a vector of L
// floats. direct_conv.hpp includes this file once per instruction set, each
// time inside a namespace of its own (kernels::avx512, kernels::avx2) that
// already holds:
//   struct Vec   { using V = <register>; static constexpr int L = <lanes>;
//                  load, store, set1, fma (a b + c), add, max, zero };
//   CIFARNET_DK  the functions' target attribute (GCC's target("...")), so
//                the library builds for any x86-64 and the kernels run where
//                the CPU has the instructions (direct::cpu_isa()).
// and CIFARNET_UNROLL (backend/host/unroll.hpp: loops unrolled, except in
// sanitizer builds).
// It has no include guard on purpose; nothing else includes it.
//
// Every output element adds its products in the same order whatever the
// vector width or tile (forward: kernel row, kernel column, input channel;
// weight gradient: rows, then pixels of a row), so the AVX2 and AVX-512
// kernels give the same bits (tests/backend/test_direct_conv.cpp).

// One output tile of the forward (here also: dx from dy and the flipped
// weights) at row h, pixels [w0, w0 + P), channels [g L Q, g L Q + L Q) in Q
// vectors: the taps on the padding skipped (Left / Right: the tile holds the
// row's first / last pixel). With `o` (inference: direct_conv.hpp's
// StoreEpilogue), each vector of sums gets the bias, then the residual
// term at its place, then max(., 0) before it is stored: oneDNN's order of
// the same post-ops. o->sum may be y itself (read before written, one
// vector at a time).
template <int C, int P, int Q, bool Left, bool Right>
CIFARNET_DK inline void tile(int h, int w0, int g, int H, int W, const float* __restrict x,
                             const float* __restrict w, float* y, const StoreEpilogue* o) {
  constexpr int L = Vec::L;
  typename Vec::V acc[P * Q];
  CIFARNET_UNROLL(64)
  for (int i = 0; i < P * Q; ++i) acc[i] = Vec::zero();
  const int kh0 = h == 0 ? 1 : 0, kh1 = h == H - 1 ? 2 : 3;
  for (int kh = kh0; kh < kh1; ++kh) {
    const float* xrow = x + std::size_t(h + kh - 1) * std::size_t(W) * C;
    CIFARNET_UNROLL(3)
    for (int kw = 0; kw < 3; ++kw) {
      const int p0 = (Left && kw == 0) ? 1 : 0, p1 = (Right && kw == 2) ? P - 1 : P;
      const int x0 = w0 + kw - 1;  // the input column of pixel 0 (-1 only where pixel 0 is skipped)
      const float* wt = w + std::size_t((kh * 3 + kw) * C) * C + g * L * Q;
      CIFARNET_UNROLL(4)
      for (int ci = 0; ci < C; ++ci) {
        typename Vec::V wv[Q];
        CIFARNET_UNROLL(8)
        for (int q = 0; q < Q; ++q) wv[q] = Vec::load(wt + ci * C + L * q);
        CIFARNET_UNROLL(32)
        for (int p = 0; p < P; ++p) {
          if (p < p0 || p >= p1) continue;
          const typename Vec::V b = Vec::set1(xrow[std::ptrdiff_t(x0 + p) * C + ci]);
          CIFARNET_UNROLL(8)
          for (int q = 0; q < Q; ++q) acc[p * Q + q] = Vec::fma(b, wv[q], acc[p * Q + q]);
        }
      }
    }
  }
  CIFARNET_UNROLL(32)
  for (int p = 0; p < P; ++p) {
    CIFARNET_UNROLL(8)
    for (int q = 0; q < Q; ++q) {
      const std::size_t at = (std::size_t(h) * W + w0 + p) * C + g * L * Q + L * q;
      typename Vec::V v = acc[p * Q + q];
      if (o) {
        if (o->bias) v = Vec::add(v, Vec::load(o->bias + g * L * Q + L * q));
        if (o->sum) v = Vec::add(v, Vec::load(o->sum + at));
        if (o->relu) v = Vec::max(Vec::zero(), v);
      }
      Vec::store(y + at, v);
    }
  }
}

// The tile of row h at pixels [w0, w0 + P), channel group g, with the
// row's edges it holds.
template <int C, int P, int Q>
CIFARNET_DK inline void row_tile(int h, int w0, int g, int H, int W, const float* x, const float* w, float* y,
                                 const StoreEpilogue* o) {
  const bool l = w0 == 0, r = w0 + P == W;
  if (l && r)
    tile<C, P, Q, true, true>(h, w0, g, H, W, x, w, y, o);
  else if (l)
    tile<C, P, Q, true, false>(h, w0, g, H, W, x, w, y, o);
  else if (r)
    tile<C, P, Q, false, true>(h, w0, g, H, W, x, w, y, o);
  else
    tile<C, P, Q, false, false>(h, w0, g, H, W, x, w, y, o);
}

// The last R' < P pixels of row h (R' = rest, found from R down): a tile of
// their own, which holds the row's end (and its start where w0 is 0): only
// those two edge cases are compiled (about 5 s less for a file that
// instantiates every kernel).
template <int C, int P, int Q, int R = P - 1>
CIFARNET_DK inline void row_tail(int rest, int h, int w0, int g, int H, int W, const float* x, const float* w,
                                 float* y, const StoreEpilogue* o) {
  if constexpr (R >= 1) {
    if (rest == R && w0 == 0)  // the whole row: both edges
      tile<C, R, Q, true, true>(h, w0, g, H, W, x, w, y, o);
    else if (rest == R)  // the row's end
      tile<C, R, Q, false, true>(h, w0, g, H, W, x, w, y, o);
    else
      row_tail<C, P, Q, R - 1>(rest, h, w0, g, H, W, x, w, y, o);
  }
}

// The forward of one H x W image: y = conv(x, w), w HWIO (C x C), in tiles
// of P pixels; with Tails, a row whose width P does not divide ends with a
// tile of W % P pixels (without, W must be a multiple of P); with `o`, its
// epilogue on each tile (o->sum: that image's).
template <int C, int P, int Q, bool Tails>
CIFARNET_DK void forward_image(int H, int W, const float* x, const float* w, float* y,
                               const StoreEpilogue* o) {
  const int full = W - W % P, rest = W % P;
  for (int h = 0; h < H; ++h)
    for (int g = 0; g < C / (Vec::L * Q); ++g) {
      for (int w0 = 0; w0 < full; w0 += P) row_tile<C, P, Q>(h, w0, g, H, W, x, w, y, o);
      if constexpr (Tails) {
        if (rest) row_tail<C, P, Q>(rest, h, full, g, H, W, x, w, y, o);
      }
    }
}

// Weight gradient: acc[kw][i][q] += x[h+kh-1][w+kw-1][ci0+i] dy[h][w][g L Q +
// L q] for one pixel w, kernel columns [KW0, KW1): CI input channels
// broadcast times Q vectors of output channels.
template <int C, int CI, int Q, int KW0, int KW1>
CIFARNET_DK inline void wgrad_pixel(const float* __restrict xr, const float* __restrict dr, int w,
                                    typename Vec::V* acc) {
  typename Vec::V d[Q];
  CIFARNET_UNROLL(8)
  for (int q = 0; q < Q; ++q) d[q] = Vec::load(dr + w * C + Vec::L * q);
  CIFARNET_UNROLL(3)
  for (int kw = KW0; kw < KW1; ++kw) {
    CIFARNET_UNROLL(16)
    for (int i = 0; i < CI; ++i) {
      const typename Vec::V b = Vec::set1(xr[(w + kw - 1) * C + i]);
      CIFARNET_UNROLL(8)
      for (int q = 0; q < Q; ++q) acc[(kw * CI + i) * Q + q] = Vec::fma(b, d[q], acc[(kw * CI + i) * Q + q]);
    }
  }
}
template <int C, int CI, int Q>
CIFARNET_DK void wgrad_image(int H, int W, const float* __restrict x, const float* __restrict dy,
                             float* __restrict dw) {
  constexpr int L = Vec::L;
  for (int kh = 0; kh < 3; ++kh)
    for (int ci0 = 0; ci0 < C; ci0 += CI)
      for (int g = 0; g < C / (L * Q); ++g) {
        typename Vec::V acc[3 * CI * Q];
        CIFARNET_UNROLL(64)
        for (int i = 0; i < 3 * CI * Q; ++i) acc[i] = Vec::zero();
        const int h0 = kh == 0 ? 1 : 0, h1 = kh == 2 ? H - 1 : H;
        for (int h = h0; h < h1; ++h) {
          const float* xr = x + std::size_t(h + kh - 1) * std::size_t(W) * C + ci0;
          const float* dr = dy + std::size_t(h) * std::size_t(W) * C + g * L * Q;
          wgrad_pixel<C, CI, Q, 1, 3>(xr, dr, 0, acc);
          for (int w = 1; w < W - 1; ++w) wgrad_pixel<C, CI, Q, 0, 3>(xr, dr, w, acc);
          wgrad_pixel<C, CI, Q, 0, 2>(xr, dr, W - 1, acc);
        }
        for (int kw = 0; kw < 3; ++kw)
          for (int i = 0; i < CI; ++i)
            for (int q = 0; q < Q; ++q) {
              float* o = dw + (std::size_t((kh * 3 + kw) * C) + ci0 + i) * C + g * L * Q + L * q;
              Vec::store(o, Vec::add(Vec::load(o), acc[(kw * CI + i) * Q + q]));
            }
      }
}

// Weight gradient with one vector of input channels (C = L: AVX-512's 16):
// acc[kw][j] (the C input channels) += x[h+kh-1][w+kw-1][:] dy[h][w][co0 + j]
// for one pixel w, T output channels from co0.
template <int T, int KW0, int KW1>
CIFARNET_DK inline void wgrad_row_pixel(const float* __restrict xr, const float* __restrict dr, int w,
                                        typename Vec::V* acc) {
  constexpr int C = Vec::L;
  typename Vec::V xv[3];
  CIFARNET_UNROLL(3)
  for (int kw = KW0; kw < KW1; ++kw) xv[kw] = Vec::load(xr + (w + kw - 1) * C);
  CIFARNET_UNROLL(16)
  for (int j = 0; j < T; ++j) {
    const typename Vec::V b = Vec::set1(dr[w * C + j]);
    CIFARNET_UNROLL(3)
    for (int kw = KW0; kw < KW1; ++kw) acc[kw * T + j] = Vec::fma(xv[kw], b, acc[kw * T + j]);
  }
}
template <int T>
CIFARNET_DK void wgrad_row_image(int H, int W, const float* __restrict x, const float* __restrict dy,
                                 float* __restrict dw) {
  constexpr int C = Vec::L;
  for (int kh = 0; kh < 3; ++kh)
    for (int co0 = 0; co0 < C; co0 += T) {
      typename Vec::V acc[3 * T];
      CIFARNET_UNROLL(64)
      for (int i = 0; i < 3 * T; ++i) acc[i] = Vec::zero();
      const int h0 = kh == 0 ? 1 : 0, h1 = kh == 2 ? H - 1 : H;
      for (int h = h0; h < h1; ++h) {
        const float* xr = x + std::size_t(h + kh - 1) * std::size_t(W) * C;
        const float* dr = dy + std::size_t(h) * std::size_t(W) * C + co0;
        wgrad_row_pixel<T, 1, 3>(xr, dr, 0, acc);
        for (int w = 1; w < W - 1; ++w) wgrad_row_pixel<T, 0, 3>(xr, dr, w, acc);
        wgrad_row_pixel<T, 0, 2>(xr, dr, W - 1, acc);
      }
      // acc[kw][j] holds dw[kh][kw][0..C)[co0 + j] (HWIO): added column by column.
      for (int kw = 0; kw < 3; ++kw)
        for (int j = 0; j < T; ++j) {
          alignas(64) float v[C];
          Vec::store(v, acc[kw * T + j]);
          float* o = dw + std::size_t((kh * 3 + kw) * C) * C + co0 + j;
          for (int i = 0; i < C; ++i) o[i * C] += v[i];
        }
    }
}
