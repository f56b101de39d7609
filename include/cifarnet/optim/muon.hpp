// cifarnet/optim/muon.hpp — the Muon optimizer (MomentUm Orthogonalized by
// Newton–Schulz; Keller Jordan's, as the airbench CIFAR-10 speedrun uses it
// for its convolution filters).
//
// For each selected parameter (rank >= 2: conv filters HWIO (K, K, In, Out),
// dense weights (In, Out)), with lr from step():
//   buf ← momentum·buf + grad
//   u   ← grad + momentum·buf               (nesterov; else u = buf)
//   w   ← w·√Out / ‖w‖_F                    (renormalize; skipped for w = 0)
//   w   ← w − lr·zeroth_power(u)
// The zeroth power is taken of the update seen as PyTorch holds it, an
// Out × (In·K·K) matrix (the column order does not change the result): the
// Newton–Schulz iteration of backend/host/newton_schulz.hpp, on that matrix
// or, when Out > In·K·K, on its transpose, as the reference code does. Every
// matrix product runs through the backend's ops::Gemm (use_backend(); the
// reference backend's by default); the element-wise passes are host loops
// (the parameter arena is host memory on every backend).
//
// Arithmetic of the iteration (MuonOptions::precision): F32, or Bf16, which
// rounds every operation's result to bfloat16 after accumulating matrix
// products in float — what the reference recipe computes with PyTorch's
// bfloat16 tensors on a CPU (tests/optim/test_muon.cpp checks both against
// PyTorch-made goldens). The momentum buffer, the renormalisation and the
// step are in the parameter's type.
//
// The momentum slot "<param>/Muon" is arena-shaped like Momentum's.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/backend/host/newton_schulz.hpp"
#include "cifarnet/backend/reference/gemm.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

/// The arithmetic of Muon's Newton–Schulz iteration.
using MuonPrecision = backend::host::NsArithmetic;

/// Options of Muon: `MuonOptions().momentum(0.6).nesterov(true)`. The
/// defaults are the airbench recipe's.
class MuonOptions {
 public:
  /// Momentum coefficient (default 0.6); finite and in [0, 1).
  MuonOptions& momentum(double m) {
    momentum_ = m;
    return *this;
  }
  /// Nesterov momentum (default true); needs momentum > 0.
  MuonOptions& nesterov(bool on) {
    nesterov_ = on;
    return *this;
  }
  /// Newton–Schulz iterations (default 3), 1 to 100.
  MuonOptions& ns_steps(int n) {
    ns_steps_ = n;
    return *this;
  }
  /// The iteration's arithmetic (default Bf16, as the recipe).
  MuonOptions& precision(MuonPrecision p) {
    precision_ = p;
    return *this;
  }
  /// Added to the Frobenius norm before normalising the update (default 1e-7).
  MuonOptions& eps(double e) {
    eps_ = e;
    return *this;
  }
  /// Rescale each weight to norm √Out before its step (default true).
  MuonOptions& renormalize(bool on) {
    renormalize_ = on;
    return *this;
  }
  /// Slot name suffix (default "Muon").
  MuonOptions& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }
  int ns_steps() const { return ns_steps_; }
  MuonPrecision precision() const { return precision_; }
  double eps() const { return eps_; }
  bool renormalize() const { return renormalize_; }
  const std::string& name() const { return name_; }

  void validate() const {
    detail::require(std::isfinite(momentum_) && momentum_ >= 0 && momentum_ < 1, "MuonOptions", "momentum",
                    "must be finite and in [0, 1)", momentum_);
    detail::require(!nesterov_ || momentum_ > 0, "MuonOptions", "momentum", "must be > 0 with nesterov",
                    momentum_);
    detail::require(ns_steps_ >= 1 && ns_steps_ <= 100, "MuonOptions", "ns_steps", "must be in [1, 100]",
                    double(ns_steps_));
    detail::require(std::isfinite(eps_) && eps_ >= 0, "MuonOptions", "eps", "must be finite and >= 0", eps_);
    if (name_.empty()) throw ConfigError("MuonOptions: option 'name' must not be empty");
  }

 private:
  double momentum_ = 0.6;
  bool nesterov_ = true;
  int ns_steps_ = 3;
  MuonPrecision precision_ = MuonPrecision::Bf16;
  double eps_ = 1e-7;
  bool renormalize_ = true;
  std::string name_ = "Muon";
};

/// Muon over the selected trainable parameters (each of rank >= 2).
template <class T = float>
class Muon {
 public:
  using Scalar = T;
  using Options = MuonOptions;
  static constexpr bool is_optimizer = true;
  /// Row-major C = alpha·op(A)·op(B) + beta·C (ops::Gemm::run without the device).
  using GemmFn =
      std::function<void(bool, bool, std::size_t, std::size_t, std::size_t, T, const T*, const T*, T, T*)>;

  explicit Muon(const Parameters<T>& params, Options opts = {}, const Selection& train = {})
      : opts_(std::move(opts)) {
    opts_.validate();
    layout_ = detail::Layout::trainable(params, train);
    for (const auto& e : layout_.entries())
      if (e.shape.size() < 2)
        throw ConfigError(opts_.name() + ": parameter '" + e.name + "' has rank " +
                          std::to_string(e.shape.size()) +
                          "; Muon updates matrices and conv filters (rank >= 2): select the others for "
                          "another optimizer");
    buf_.resize(layout_.buffer_size());
    use_backend(default_device());
  }

  /// Runs the matrix products with backend B's ops::Gemm on `dev` (which
  /// must outlive the optimizer).
  template <class B>
  void use_backend(Device<B>& dev) {
    auto op = std::make_shared<ops::Gemm<B, T>>();
    Device<B>* d = &dev;
    gemm_ = [op, d](bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                    const T* b, T beta, T* c) { op->run(*d, ta, tb, m, n, k, alpha, a, b, beta, c); };
  }

  /// One update with learning rate `lr` (finite, >= 0).
  void step(Parameters<T>& params, double lr) {
    namespace host = backend::host;
    layout_.check(params, opts_.name());
    const T a = detail::checked_lr<T>(lr, opts_.name());
    T* values = params.values().data();
    const T* grads = params.grads().data();
    for (const auto& e : layout_.entries()) {
      if (e.size == 0) continue;
      const std::size_t out = e.shape.back(), rows = e.size / out;
      T* w = values + e.offset;
      u_.resize(e.size);
      host::muon_momentum(e.size, grads + e.offset, buf_.data() + e.offset, u_.data(), T(opts_.momentum()),
                          opts_.nesterov());
      if (opts_.renormalize()) {
        const double norm = std::sqrt(host::squared_norm(e.size, w));
        if (norm > 0) host::scale_by(e.size, w, T(std::sqrt(double(out)) / norm));
      }
      // u is stored (In·K·K) × Out: PyTorch's Out × (In·K·K) matrix G transposed.
      // The iteration runs on G (stored transposed) unless Out > In·K·K (then on Gᵀ).
      const bool tall = out > rows;
      host::newton_schulz5(gemm_, tall ? rows : out, tall ? out : rows, !tall, u_.data(), opts_.ns_steps(),
                           opts_.eps(), opts_.precision(), ws_);
      host::axpy(e.size, T(-a), u_.data(), w);
    }
  }

  /// f(name, data, shape) for each "<param>/<name>" momentum buffer.
  template <class F>
  void visit_state(F&& f) {
    for (const auto& e : layout_.entries()) f(e.name + "/" + opts_.name(), buf_.data() + e.offset, e.shape);
  }

  /// The momentum buffer of a trained parameter, or nullptr.
  T* momentum_buffer(const std::string& param) {
    const auto* e = layout_.find(param);
    return e ? buf_.data() + e->offset : nullptr;
  }

  const Options& options() const { return opts_; }

 private:
  static Device<backend::Reference>& default_device() {
    static Device<backend::Reference> dev;
    return dev;
  }

  Options opts_;
  detail::Layout layout_;
  cifarnet::detail::AlignedBuffer<T> buf_;
  std::vector<T> u_;
  backend::host::NewtonSchulzWorkspace<T> ws_;
  GemmFn gemm_;
};

}  // namespace cifarnet::optim
