// Muon (optim/muon.hpp) and its Newton–Schulz zeroth power
// (backend/host/newton_schulz.hpp) against goldens PyTorch computed
// (tests/fixtures/recipe/muon.safetensors, scripts/recipe_goldens/):
//  - "fp32": the reference recipe's code with float32 tensors; compared
//    within 1e-5 of the tensor's scale (float rounding, GEMM summation order);
//  - "bf16_emul": float32 tensors rounded to bfloat16 after every operation,
//    products accumulated in float32 — the arithmetic MuonPrecision::Bf16
//    implements (and, the script checks, equal to PyTorch's own bfloat16
//    tensors on these cases). Compared within half a bfloat16 step at the
//    tensor's scale (2^-9): a summation order that differs from PyTorch's may
//    round an intermediate the other way. The fp32 mode misses this golden by
//    more, which the test also checks, so the tolerance tells the modes apart.
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/core/params.hpp>
#include <cifarnet/optim/chain.hpp>
#include <cifarnet/optim/muon.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "recipe_golden.hpp"

using namespace cifarnet;
using namespace cifarnet::optim;
using cifarnet::test::golden_values;
using cifarnet::test::oihw_to_hwio;
using cifarnet::test::scaled_max_error;

namespace {

struct Case {
  const char* name;
  std::size_t o, i, k;
};
const Case kCases[] = {{"wide", 4, 3, 3}, {"tall", 8, 1, 2}};

constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1.0 / 512;

const io::StateDict& golden() {
  static const io::StateDict d = cifarnet::test::recipe_golden("muon.safetensors");
  return d;
}

std::vector<float> hwio(const Case& c, const std::string& tensor) {
  return oihw_to_hwio<float>(golden_values(golden(), std::string(c.name) + "/" + tensor), c.o, c.i, c.k, c.k);
}

/// Two filters and a bias in one arena; Muon trains the filters.
Parameters<float> arena() {
  Parameters<float> p;
  for (const Case& c : kCases) p.add({std::string(c.name) + "/weights", {c.k, c.k, c.i, c.o}});
  p.add({"head/biases", {3}});
  p.allocate();
  for (std::size_t id = 0; id < 2; ++id) {
    const auto w = hwio(kCases[id], "w0");
    std::copy(w.begin(), w.end(), p.value(id));
  }
  return p;
}

template <class B>
void run_golden_steps(MuonPrecision prec, Device<B>* dev) {
  Parameters<float> p = arena();
  Muon<float> muon(p, MuonOptions().precision(prec), variables_to_train({"*/weights"}));
  if (dev) muon.use_backend(*dev);
  const double lrs[] = {0.24, 0.16, 0.08};
  for (int s = 0; s < 3; ++s) {
    for (std::size_t id = 0; id < 2; ++id) {
      const auto g = hwio(kCases[id], "grad" + std::to_string(s));
      std::copy(g.begin(), g.end(), p.grad(id));
    }
    muon.step(p, lrs[s]);
  }
  const std::string mode = prec == MuonPrecision::F32 ? "fp32" : "bf16_emul";
  const double tol = prec == MuonPrecision::F32 ? kF32Tol : kBf16Tol;
  for (std::size_t id = 0; id < 2; ++id) {
    const Case& c = kCases[id];
    const std::vector<float> w(p.value(id), p.value(id) + p.info(id).size);
    const float* buf = muon.momentum_buffer(p.info(id).name);
    REQUIRE(buf != nullptr);
    const std::vector<float> m(buf, buf + p.info(id).size);
    INFO(c.name << " " << mode << ": weights off by " << scaled_max_error(w, hwio(c, mode + "/w"))
                << ", momentum off by " << scaled_max_error(m, hwio(c, mode + "/momentum")));
    CHECK(scaled_max_error(w, hwio(c, mode + "/w")) <= tol);
    CHECK(scaled_max_error(m, hwio(c, mode + "/momentum")) <= kF32Tol);
    if (prec == MuonPrecision::F32) CHECK(scaled_max_error(w, hwio(c, "bf16_emul/w")) > kBf16Tol);
  }
}

}  // namespace

TEST_CASE("round_to_bf16 rounds to nearest, ties to even", "[optim][muon][bf16]") {
  using backend::host::round_to_bf16;
  CHECK(round_to_bf16(1.0f) == 1.0f);
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 1.0f);  // halfway, 1 is even
  CHECK(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) ==
        1.0f + std::ldexp(1.0f, -6));  // halfway, up to even
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(round_to_bf16(-3.14159f) == -3.140625f);
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));  // rounds past the largest bf16
}

TEST_CASE("Newton-Schulz zeroth power matches PyTorch's in fp32 and in emulated bf16", "[optim][muon]") {
  Device<backend::Reference> dev;
  ops::Gemm<backend::Reference, float> gemm;
  auto g = [&](bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float al, const float* a,
               const float* b, float be, float* c) { gemm.run(dev, ta, tb, m, n, k, al, a, b, be, c); };
  backend::host::NewtonSchulzWorkspace<float> ws;
  for (const Case& c : kCases) {
    const std::size_t rows = c.i * c.k * c.k;
    const bool tall = c.o > rows;
    for (auto prec : {MuonPrecision::F32, MuonPrecision::Bf16}) {
      std::vector<float> x = hwio(c, "ns_in");
      backend::host::newton_schulz5(g, tall ? rows : c.o, tall ? c.o : rows, !tall, x.data(), 3, 1e-7, prec,
                                    ws);
      const auto want = hwio(c, prec == MuonPrecision::F32 ? "ns_fp32" : "ns_bf16_emul");
      const double err = scaled_max_error(x, want);
      INFO(c.name << (prec == MuonPrecision::F32 ? " fp32" : " bf16") << ": off by " << err);
      CHECK(err <= (prec == MuonPrecision::F32 ? kF32Tol : kBf16Tol));
    }
  }
}

TEST_CASE("Muon's steps match PyTorch's (fp32 and emulated bf16), reference and oneDNN GEMMs",
          "[optim][muon][golden]") {
  for (auto prec : {MuonPrecision::F32, MuonPrecision::Bf16}) {
    run_golden_steps<backend::Reference>(prec, nullptr);
    Device<backend::OneDnn> dev;
    run_golden_steps(prec, &dev);
  }
}

TEST_CASE("Muon renormalises the weight to norm sqrt(out) before its step", "[optim][muon]") {
  Parameters<float> p;
  p.add({"w", {3, 5}});
  p.allocate();
  for (std::size_t i = 0; i < 15; ++i) p.value(0)[i] = float(i) - 4.0f;
  // A zero gradient gives a zero update (0 / (0 + eps)), so only the renormalisation acts.
  Muon<float> muon(p, MuonOptions().precision(MuonPrecision::F32));
  muon.step(p, 0.5);
  double ss = 0;
  for (std::size_t i = 0; i < 15; ++i) ss += double(p.value(0)[i]) * p.value(0)[i];
  CHECK(std::sqrt(ss) == Approx(std::sqrt(5.0)).epsilon(1e-6));
  // Without renormalisation nothing moves.
  Parameters<float> q;
  q.add({"w", {3, 5}});
  q.allocate();
  q.value(0)[2] = 7.0f;
  Muon<float> plain(q, MuonOptions().renormalize(false));
  plain.step(q, 0.5);
  CHECK(q.value(0)[2] == 7.0f);
}

TEST_CASE("Muon rejects vectors and bad options with a message naming them", "[optim][muon]") {
  Parameters<float> p = arena();
  CHECK_THROWS_WITH(Muon<float>(p), Catch::Contains("head/biases") && Catch::Contains("rank 1"));
  CHECK_THROWS_WITH(
      Muon<float>(p, MuonOptions().momentum(0).nesterov(true), variables_to_train({"*/weights"})),
      Catch::Contains("nesterov"));
  CHECK_THROWS_WITH(Muon<float>(p, MuonOptions().ns_steps(0), variables_to_train({"*/weights"})),
                    Catch::Contains("ns_steps"));
  Muon<float> ok(p, {}, variables_to_train({"*/weights"}));
  CHECK_THROWS_WITH(ok.step(p, -1.0), Catch::Contains("learning rate"));
}

TEST_CASE("Muon is a Chain's optimizer stage", "[optim][muon]") {
  Parameters<float> p = arena();
  BasicChain<float, Muon> chain(p, variables_to_train({"*/weights"}),
                                MuonOptions().precision(MuonPrecision::F32));
  for (std::size_t id = 0; id < 2; ++id)
    for (std::size_t i = 0; i < p.info(id).size; ++i) p.grad(id)[i] = float(i % 7) - 3.0f;
  const float before = p.value(0)[0];
  chain.step(p, 0.1);
  CHECK(p.value(0)[0] != before);
  std::vector<std::string> names;
  chain.visit_state(
      [&](const std::string& n, float*, const std::vector<std::size_t>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"wide/weights/Muon", "tall/weights/Muon"});
}
