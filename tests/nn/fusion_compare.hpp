// Shared by the fusion tests (test_fusion*.cpp): a fused network against the
// unfused composition it replaces, from the same parameters and inputs (the
// file comment of test_fusion.cpp says what is compared); and by the plan's
// tests (test_plan.cpp, test_executor.cpp, test_train_executor.cpp): random
// parameters in two models, a user's two-branch container. A file that
// compares on oneDNN (compare_all, or compare_formats with backend::OneDnn)
// includes <cifarnet/backend/onednn.hpp> itself: the reference-only one
// does not parse it.
#pragma once

#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace cifarnet::test {

// Random parameters everywhere (gamma around 1, variances positive), the
// same in `a` and `b` (any scalars).
template <class A, class B>
void same_random_parameters(A& a, B& b, std::uint64_t seed) {
  auto& P = a.parameters();
  auto& Q = b.parameters();
  REQUIRE(P.count() == Q.count());
  Rng rng(seed);
  for (std::size_t id = 0; id < P.count(); ++id) {
    const ParamInfo& i = P.info(id);
    REQUIRE(i.name == Q.info(id).name);
    const bool pos =
        i.name.find("gamma") != std::string::npos || i.name.find("variance") != std::string::npos;
    auto* p = P.value(id);
    auto* q = Q.value(id);
    for (std::size_t k = 0; k < i.size; ++k) {
      const double v = rng.uniform(-0.8, 0.8) * (pos ? 0.5 : 1.0) + (pos ? 1.0 : 0.0);
      p[k] = static_cast<std::remove_reference_t<decltype(p[k])>>(v);
      q[k] = static_cast<std::remove_reference_t<decltype(q[k])>>(v);
    }
  }
}

// A two-branch container as a user writes one (layers/layer.hpp's
// interface, nothing of the library's hand-overs): y = a(x) + b(x).
template <class A, class Bt>
struct TwoBranch : LayerBase {
  static constexpr const char* kind = "two_branch";
  static constexpr bool container = true;
  static constexpr int in_channels = A::in_channels;
  static constexpr int out_channels(int in) { return A::out_channels(in); }
  template <class B, class T>
  class Node {
   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      const bool down = ctx.propagate_down;
      const Shape sa = detail::build_child<A>(a_, in, scope, ctx);
      ctx.propagate_down = down;
      const Shape sb = detail::build_child<Bt>(b_, in, scope, ctx);
      ctx.propagate_down = down;
      if (sa != sb) throw ShapeError("TwoBranch: the branches' shapes differ");
      return sa;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Tensor<T>& a = a_.forward(x, rc);
      const Tensor<T>& b = b_.forward(x, rc);
      if (y_.shape() != a.shape()) y_.resize(a.shape());
      add_.add(*rc.device, a.size(), a.data(), b.data(), y_.data(), false);
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      const Tensor<T>& da = a_.backward(dy, rc);
      if (da.size() == 0) return b_.backward(dy, rc);
      if (dx_.shape() != da.shape()) dx_.resize(da.shape());
      std::copy(da.data(), da.data() + da.size(), dx_.data());
      const Tensor<T>& db = b_.backward(dy, rc);
      add_.add(*rc.device, dx_.size(), dx_.data(), db.data(), dx_.data(), false);
      return dx_;
    }

   private:
    node_t<A, B, T> a_;
    node_t<Bt, B, T> b_;
    ops::Eltwise<B, T> add_;
    Tensor<T> y_, dx_;
  };
};

template <class T>
double rel_err(const T* a, const double* b, std::size_t n) {
  double e = 0, r = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - b[i];
    e += d * d;
    r += b[i] * b[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

template <class T>
double rel_err(const Tensor<T>& a, const Tensor<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  return rel_err(a.data(), b.data(), b.size());
}

// Runs a training forward/backward and an inference forward of the unfused
// network (reference, double) and of the fused one (backend B, scalar T) from
// the same parameters and inputs; every result must agree within `tol`.
template <class Fused, class Unfused, class B, class T>
void compare(InputShape in, std::size_t n, DataFormat fmt, double tol, NetOptions opts = {}) {
  INFO("backend " << B::name << ", format " << to_string(fmt));
  Model<Unfused, backend::Reference, double> ref(in, fmt, opts, 3, /*input_gradient=*/true);
  Model<Fused, B, T> net(in, fmt, opts, 3, /*input_gradient=*/true);
  auto& R = ref.parameters();
  auto& P = net.parameters();
  REQUIRE(R.count() == P.count());
  Rng rng(17);
  for (std::size_t id = 0; id < R.count(); ++id) {
    const ParamInfo& a = R.info(id);
    const ParamInfo& b = P.info(id);
    REQUIRE(a.name == b.name);  // checkpoints see the same names
    REQUIRE(a.shape == b.shape);
    REQUIRE(a.trainable == b.trainable);
    for (std::size_t i = 0; i < a.size; ++i) {
      // Random values everywhere (gamma around 1, variances positive).
      const bool pos =
          a.name.find("gamma") != std::string::npos || a.name.find("variance") != std::string::npos;
      const double v = rng.uniform(-0.8, 0.8) * (pos ? 0.5 : 1.0) + (pos ? 1.0 : 0.0);
      R.value(id)[i] = v;
      P.value(id)[i] = T(v);
    }
  }
  Tensor<double> xd = make_tensor<double>(ref.input_shape(n), fmt);
  Tensor<T> x = make_tensor<T>(net.input_shape(n), fmt);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = T(xd.data()[i] = rng.uniform(-1.5, 1.5));

  const Tensor<double>& yr = ref.forward(xd, Mode::Train);
  const Tensor<T>& y = net.forward(x, Mode::Train);
  CHECK(rel_err(y, yr) <= tol);
  Tensor<double> gd(yr.shape());
  Tensor<T> g(y.shape());
  for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = T(gd.data()[i] = rng.uniform(-0.5, 1.0));
  const Tensor<double> dxr = ref.backward(gd);
  const Tensor<T> dx = net.backward(g);
  CHECK(rel_err(dx, dxr) <= tol);
  for (std::size_t id = 0; id < R.count(); ++id) {
    const ParamInfo& a = R.info(id);
    INFO("parameter " << a.name);
    CHECK(rel_err(P.value(id), R.value(id), a.size) <= tol);  // moving statistics after the update
    if (a.trainable) CHECK(rel_err(P.grad(id), R.grad(id), a.size) <= tol);
  }
  const Tensor<double>& yri = ref.forward(xd, Mode::Infer);
  const Tensor<T>& yi = net.forward(x, Mode::Infer);
  CHECK(rel_err(yi, yri) <= tol);
}

// The comparison on backend B in both data formats.
template <class Fused, class Unfused, class B, class T>
void compare_formats(InputShape in, std::size_t n, double tol, NetOptions opts = {}) {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) compare<Fused, Unfused, B, T>(in, n, fmt, tol, opts);
}

template <class Fused, class Unfused>
void compare_all(InputShape in, std::size_t n, double float_tol, NetOptions opts = {}) {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    compare<Fused, Unfused, backend::Reference, double>(in, n, fmt, 1e-12, opts);
    compare<Fused, Unfused, backend::OneDnn, float>(in, n, fmt, float_tol, opts);
  }
}

template <int In, int Out, int S>
using UnfusedStage =
    Sequential<resnet::BlockV1Unfused<In, Out, S>, Repeat<resnet::BlockV1Unfused<Out, Out, 1>, -1>>;

// ResNetCifar<Classes> before the fusion, layer for layer.
template <int Classes>
using UnfusedResNet =
    Sequential<Rescale<std::ratio<1, 128>, std::ratio<-1>>,
               Named<resnet::stem, Sequential<resnet::ConvBNUnfused<3, 16>, ReLU>>,
               Named<resnet::stage1, UnfusedStage<16, 16, 1>>, Named<resnet::stage2, UnfusedStage<16, 32, 2>>,
               Named<resnet::stage3, UnfusedStage<32, 64, 2>>,
               Named<resnet::head, Sequential<GlobalAvgPool, Dense<64, Classes>>>>;

}  // namespace cifarnet::test
