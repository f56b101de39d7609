// The flat-arena kernels (core/arena.hpp, ops::Arena): how a pass is cut
// into chunks, the reductions and finite checks against plain loops, the
// weight-decay kernel against TF's expression, and a Model installing its
// backend's kernels into its arena (an arena no Model owns uses the
// reference backend's).
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/optim/momentum.hpp>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace cifarnet;

TEST_CASE("ArenaRuns cuts each span into fixed chunks from its first element", "[optim][arena]") {
  ArenaRuns r = ArenaRuns::span(5, 5 + 2 * kArenaChunk + 3);
  r.add_span(100000, 100010);
  r.add_span(7, 7);  // empty: nothing added
  REQUIRE(r.chunks.size() == 4);
  CHECK(r.chunks[0].begin == 5);
  CHECK(r.chunks[1].begin == 5 + kArenaChunk);
  CHECK(r.chunks[2].end == 5 + 2 * kArenaChunk + 3);
  CHECK(r.chunks[3].begin == 100000);
  CHECK(r.elements == 2 * kArenaChunk + 3 + 10);
}

TEST_CASE("The arena kernels' reductions, finite checks and weight decay match plain loops",
          "[optim][arena]") {
  Device<backend::OneDnn> dev;
  ops::BackendArenaKernels<backend::OneDnn, float> k(dev);
  Rng rng(7);
  const std::size_t n = 3 * kArenaChunk + 1000;  // several chunks, run in parallel
  std::vector<float> x(n);
  for (auto& v : x) v = float(rng.uniform(-2.0, 2.0));
  const ArenaRuns all = ArenaRuns::span(0, n);

  double plain = 0;
  for (float v : x) plain += double(v) * double(v);
  CHECK(k.sum_squares(all, x.data()) == Approx(plain).epsilon(1e-12));
  CHECK(k.all_finite(all, x.data()));
  CHECK_FALSE(k.find_non_finite(all, x.data()).found);

  x[2 * kArenaChunk + 17] = -std::numeric_limits<float>::infinity();
  x[n - 1] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(k.all_finite(all, x.data()));
  const NonFinite bad = k.find_non_finite(all, x.data());
  CHECK(bad.found);
  CHECK(bad.index == 2 * kArenaChunk + 17);
  CHECK(bad.value == -std::numeric_limits<double>::infinity());
  CHECK(k.all_finite(ArenaRuns::span(0, kArenaChunk), x.data()));

  // g += T(wd)·v, rounded then added (no FMA), and Σ v² in double as 8
  // interleaved partial sums (element i into partial i % 8; the partials,
  // then the tail, added in order), whatever the vector width. 1003
  // elements: a tail of 3.
  std::vector<float> v(1003), g(1003), want(1003);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = float(rng.uniform(-1.0, 1.0));
    g[i] = want[i] = float(rng.uniform(-1.0, 1.0));
  }
  const float wd = 2e-4f;
  double part[8] = {}, s = 0, in_order = 0;
  const std::size_t body = v.size() / 8 * 8;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i < body) part[i % 8] += double(v[i]) * double(v[i]);
    in_order += double(v[i]) * double(v[i]);
    volatile float prod = wd * v[i];  // rounded on its own
    want[i] = want[i] + prod;
  }
  for (double p : part) s += p;
  for (std::size_t i = body; i < v.size(); ++i) s += double(v[i]) * double(v[i]);
  const double got = k.weight_decay(0, v.size(), g.data(), v.data(), wd);
  CHECK(got == s);
  CHECK(got == Approx(in_order).epsilon(1e-14));
  CHECK(std::memcmp(g.data(), want.data(), g.size() * sizeof(float)) == 0);
  // An offset range (begin > 0) and one shorter than the 8 partials.
  std::vector<float> g2 = g;
  CHECK(k.weight_decay(5, 12, g2.data(), v.data(), wd) == Approx([&] {
                                                            double t = 0;
                                                            for (std::size_t i = 5; i < 12; ++i)
                                                              t += double(v[i]) * double(v[i]);
                                                            return t;
                                                          }())
                                                              .epsilon(1e-15));
}

TEST_CASE("Weight decay over many ranges, shared among threads, gives the serial loop's bits",
          "[optim][arena]") {
  // weight_decay_ranges hands each range to one thread and adds the
  // ranges' sums in range order (host/arena.hpp): the gradient and the sum
  // must be the bits of weight_decay called range by range, whatever the
  // thread count. Checked to fail: adding the ranges' sums in reverse order
  // changes the total's last bits here.
  Device<backend::OneDnn> dev;
  ops::BackendArenaKernels<backend::OneDnn, float> k(dev);
  Rng rng(11);
  // A ResNet-like arena: weights of 432 to 36,864 elements between short
  // unregularized runs (batch norm's gamma and beta), 2 x kArenaParallelMin
  // decayed elements in all.
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::size_t at = 0, decayed = 0;
  for (std::size_t i = 0; decayed < 2 * kArenaParallelMin; ++i) {
    const std::size_t len = i % 5 == 0 ? 36864 : 432 + 977 * (i % 7);
    ranges.emplace_back(at, at + len);
    at += len + 32;
    decayed += len;
  }
  std::vector<float> v(at), g0(at);
  for (auto& e : v) e = float(rng.uniform(-1.0, 1.0));
  for (auto& e : g0) e = float(rng.uniform(-1.0, 1.0));
  const float wd = 2e-4f;
  std::vector<float> g_serial = g0;
  double serial = 0;
  for (const auto& r : ranges) serial += k.weight_decay(r.first, r.second, g_serial.data(), v.data(), wd);
  const int before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    omp_set_num_threads(threads);
    std::vector<float> g = g0;
    const double got = k.weight_decay_ranges(ranges, g.data(), v.data(), wd);
    CHECK(got == serial);
    CHECK(std::memcmp(g.data(), g_serial.data(), g.size() * sizeof(float)) == 0);
  }
  omp_set_num_threads(before);
}

TEST_CASE("A Model installs its backend's arena kernels, and an arena no Model owns uses the reference's",
          "[optim][arena]") {
  using Net = Sequential<Flatten, Dense<0, 4>>;
  Model<Net, backend::OneDnn> net({2, 3, 3}, DataFormat::NHWC, {}, 3);
  REQUIRE(net.parameters().kernels() != nullptr);
  CHECK(dynamic_cast<ops::BackendArenaKernels<backend::OneDnn, float>*>(net.parameters().kernels()));

  Parameters<float> loose;
  loose.add({"w", {3}, true, Initializer::ones()});
  loose.allocate();
  CHECK(loose.kernels() == nullptr);
  CHECK(&optim::detail::kernels(loose) == &default_arena_kernels<float>());

  // The same momentum step through either: bit-identical.
  Parameters<float>& p = net.parameters();
  Rng rng(9);
  for (float* a : {p.values().data(), p.grads().data()})
    for (Eigen::Index i = 0; i < p.values().size(); ++i) a[i] = float(rng.uniform(-1.0, 1.0));
  std::vector<float> values(p.values().data(), p.values().data() + p.values().size());
  std::vector<float> grads(p.grads().data(), p.grads().data() + p.grads().size());
  optim::Momentum<float> m1(p, optim::MomentumOptions().momentum(0.9));
  m1.step(p, 0.1);
  std::vector<float> acc(values.size(), 0.0f), by_default = values;
  default_arena_kernels<float>().momentum(ArenaRuns::span(0, values.size()), by_default.data(), acc.data(),
                                          grads.data(), 0.1f, 0.9f, false);
  CHECK(std::memcmp(by_default.data(), p.values().data(), values.size() * sizeof(float)) == 0);
}
