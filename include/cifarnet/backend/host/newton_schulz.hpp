// cifarnet/backend/host/newton_schulz.hpp — the element-wise parts of the
// Muon optimizer (optim/muon.hpp) as host loops, and its Newton–Schulz
// "zeroth power" with every matrix product handed to a caller-supplied GEMM
// (the backend's ops::Gemm).
//
// The zeroth power of a matrix X (p × q with p ≤ q) approximates U·Vᵀ of its
// SVD U·S·Vᵀ by the quintic iteration of the Muon paper's reference code:
//   X ← X / (‖X‖_F + eps);  repeat: A = X·Xᵀ, B = b·A + c·A·A, X ← a·X + B·X
// with (a, b, c) = (3.4445, −4.7750, 2.0315). The operations run in this
// order, each rounded to bfloat16 (round to nearest even) in the Bf16
// arithmetic, matrix products accumulated in the scalar type T first — which
// is how PyTorch computes the same expressions on bfloat16 tensors on a CPU
// (fp32 accumulation, one rounding per operation). In the F32 arithmetic
// nothing is rounded beyond T.
#pragma once

#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "cifarnet/backend/host/bf16.hpp"

namespace cifarnet::backend::host {

/// The arithmetic of the Newton–Schulz iteration.
enum class NsArithmetic {
  F32,  ///< the parameter's scalar type throughout
  Bf16  ///< every operation's result rounded to bfloat16 (the airbench recipe)
};

/// Rounds n values to bfloat16 in place (through float for double).
template <class T>
void round_to_bf16(std::size_t n, T* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] = T(round_to_bf16(float(x[i])));
}

/// Σ x², accumulated in double.
template <class T>
double squared_norm(std::size_t n, const T* x) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

/// x ← x·s.
template <class T>
void scale_by(std::size_t n, T* x, T s) {
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] * s;
}

/// y ← y + alpha·x.
template <class T>
void axpy(std::size_t n, T alpha, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = y[i] + alpha * x[i];
}

/// Muon's momentum: buf ← buf·m + g (two roundings, as PyTorch's mul_ then
/// add_), then u ← g + m·buf (Nesterov) or u ← buf.
template <class T>
void muon_momentum(std::size_t n, const T* g, T* buf, T* u, T m, bool nesterov) {
  for (std::size_t i = 0; i < n; ++i) {
    const T scaled = buf[i] * m;
    buf[i] = scaled + g[i];
    if (nesterov) {
      const T look = m * buf[i];
      u[i] = g[i] + look;
    } else {
      u[i] = buf[i];
    }
  }
}

/// Scratch buffers of newton_schulz5 (grown on demand, reused).
template <class T>
struct NewtonSchulzWorkspace {
  std::vector<T> a, t, b, bx;
};

/// The zeroth power of X (p × q, p ≤ q) in place, X stored row-major as
/// p × q, or as its transpose (q × p) when `transposed`; the result keeps
/// the storage. gemm(ta, tb, m, n, k, alpha, A, B, beta, C) is row-major
/// C = alpha·op(A)·op(B) + beta·C (ops::Gemm's contract).
template <class T, class Gemm>
void newton_schulz5(Gemm&& gemm, std::size_t p, std::size_t q, bool transposed, T* x, int steps, double eps,
                    NsArithmetic arith, NewtonSchulzWorkspace<T>& ws) {
  const bool bf = arith == NsArithmetic::Bf16;
  const std::size_t nx = p * q, na = p * p;
  auto round = [&](std::size_t n, T* v) {
    if (bf) round_to_bf16(n, v);
  };
  auto round1 = [&](double v) { return bf ? T(round_to_bf16(float(v))) : T(v); };
  const T a = T(3.4445), b = T(-4.7750), c = T(2.0315);

  round(nx, x);
  const T norm = round1(std::sqrt(squared_norm(nx, x)));
  const T denom = round1(double(norm) + double(T(eps)));
  for (std::size_t i = 0; i < nx; ++i) x[i] = x[i] / denom;
  round(nx, x);

  ws.a.resize(na);
  ws.t.resize(na);
  ws.b.resize(na);
  ws.bx.resize(nx);
  T *A = ws.a.data(), *cA = ws.t.data(), *Bm = ws.b.data(), *BX = ws.bx.data();
  for (int s = 0; s < steps; ++s) {
    // A = X·Xᵀ
    if (transposed)
      gemm(true, false, p, p, q, T(1), x, x, T(0), A);
    else
      gemm(false, true, p, p, q, T(1), x, x, T(0), A);
    round(na, A);
    // B = b·A + (c·A)·A, rounded after each operation
    for (std::size_t i = 0; i < na; ++i) cA[i] = c * A[i];
    round(na, cA);
    gemm(false, false, p, p, p, T(1), cA, A, T(0), Bm);  // (c·A)·A
    round(na, Bm);
    for (std::size_t i = 0; i < na; ++i) A[i] = b * A[i];
    round(na, A);
    for (std::size_t i = 0; i < na; ++i) Bm[i] = A[i] + Bm[i];
    round(na, Bm);
    // X = a·X + B·X
    if (transposed)
      gemm(false, true, q, p, p, T(1), x, Bm, T(0), BX);  // (B·X)ᵀ = Xᵀ·Bᵀ
    else
      gemm(false, false, p, q, p, T(1), Bm, x, T(0), BX);
    round(nx, BX);
    for (std::size_t i = 0; i < nx; ++i) x[i] = a * x[i];
    round(nx, x);
    for (std::size_t i = 0; i < nx; ++i) x[i] = x[i] + BX[i];
    round(nx, x);
  }
}

}  // namespace cifarnet::backend::host
