// Shared gradient-check helper (DESIGN.md): random cotangent g, scalar
// f = <g, net(x)>, central differences in double on the reference backend,
// compared with the analytic input and parameter gradients.
#pragma once

#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace cifarnet::test {

/// Fills t with values uniform in [lo, hi) (never all zeros).
template <class T>
void fill_uniform(Tensor<T>& t, Rng& rng, double lo = -1.0, double hi = 1.0) {
  for (auto& v : t) v = T(rng.uniform(lo, hi));
}

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-5;
  double atol = 1e-8;
  std::size_t max_checks_per_tensor = 60;  ///< sampled elements per tensor
};

template <class Net>
void gradcheck(InputShape in, std::size_t n, DataFormat fmt, NetOptions opts = {}, std::uint64_t seed = 1,
               GradCheckOptions o = {}) {
  using M = Model<Net, backend::Reference, double>;
  M net(in, fmt, opts, seed, /*input_gradient=*/true);
  Rng rng(seed + 100);
  // Randomize every trainable parameter (BN gammas too) so nothing is trivially 1 or 0.
  net.parameters().for_each([&](const ParamInfo& p, double* v, double*) {
    if (!p.trainable) return;
    for (std::size_t i = 0; i < p.size; ++i)
      v[i] = rng.uniform(-0.8, 0.8) + (p.name.find("gamma") != std::string::npos ? 1.0 : 0.0);
  });
  Tensor<double> x = make_tensor<double>(net.input_shape(n), fmt);
  fill_uniform(x, rng);
  const Tensor<double>& y0 = net.forward(x, Mode::Train);
  Tensor<double> g(y0.shape());
  fill_uniform(g, rng);

  auto f = [&]() {
    const Tensor<double>& y = net.forward(x, Mode::Train);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y.data()[i] * g.data()[i];
    return s;
  };
  f();
  const Tensor<double> dx = net.backward(g);  // copies
  REQUIRE(dx.size() == x.size());
  std::vector<double> grads(net.parameters().grads().data(),
                            net.parameters().grads().data() + net.parameters().grads().size());

  auto& P = net.parameters();
  // `param`: the arena id `value` belongs to, marked as written after each
  // write through the pointer (caches keyed on Parameters::version).
  auto check = [&](const std::string& what, double* value, double analytic,
                   std::size_t param = ~std::size_t(0)) {
    auto set = [&](double v) {
      *value = v;
      if (param != ~std::size_t(0)) P.touch(param);
    };
    const double keep = *value;
    set(keep + o.eps);
    const double fp = f();
    set(keep - o.eps);
    const double fm = f();
    set(keep);
    const double numeric = (fp - fm) / (2 * o.eps);
    const double tol = o.atol + o.rtol * std::max({std::fabs(analytic), std::fabs(numeric), 1e-3});
    INFO(what << ": analytic " << analytic << " numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= tol);
  };
  auto sample = [&](std::size_t size) {
    std::vector<std::size_t> idx;
    if (size <= o.max_checks_per_tensor) {
      for (std::size_t i = 0; i < size; ++i) idx.push_back(i);
    } else {
      for (std::size_t k = 0; k < o.max_checks_per_tensor; ++k)
        idx.push_back(std::size_t(rng.uniform_int(size)));
    }
    return idx;
  };
  for (std::size_t i : sample(x.size()))
    check("input[" + std::to_string(i) + "]", x.data() + i, dx.data()[i]);
  for (std::size_t id = 0; id < P.count(); ++id) {
    const auto& info = P.info(id);
    if (!info.trainable) continue;
    for (std::size_t i : sample(info.size))
      check(info.name + "[" + std::to_string(i) + "]", P.value(id) + i, grads[info.offset + i], id);
  }
}

}  // namespace cifarnet::test
