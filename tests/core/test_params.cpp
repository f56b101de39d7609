// Parameters::version: the write counter that caches derived from a parameter
// (oneDNN's reordered weights, the conv+BN fold) compare instead of values.
#include <catch2/catch.hpp>

#include <cifarnet/core/params.hpp>

#include <utility>

using cifarnet::Parameters;

TEST_CASE("Parameters versions change on every write access and on nothing else", "[core][params]") {
  Parameters<float> p;
  const std::size_t w = p.add({"conv/weights", {3, 3, 2, 4}});
  const std::size_t m = p.add({"bn/moving_mean", {4}, false});
  p.allocate();
  const auto& c = std::as_const(p);
  const std::uint64_t w0 = c.version(w), m0 = c.version(m);
  CHECK(w0 != 0);  // 0 means "unknown" to the ops

  SECTION("reads leave every version alone") {
    (void)c.value(w), (void)c.values(), (void)c.state(), (void)p.grad(w), (void)p.grads();
    p.zero_grad();
    CHECK(c.version(w) == w0);
    CHECK(c.version(m) == m0);
  }
  SECTION("a non-const value(id) bumps that parameter only") {
    p.value(w)[0] = 1.0f;
    CHECK(c.version(w) > w0);
    CHECK(c.version(m) == m0);
    const std::uint64_t w1 = c.version(w);
    p.value(m)[0] = 2.0f;
    CHECK(c.version(m) > m0);
    CHECK(c.version(w) == w1);
  }
  SECTION("the flat buffers and the visitor bump every parameter") {
    p.values()[0] = 1.0f;
    CHECK(c.version(w) > w0);
    CHECK(c.version(m) > m0);
    const std::uint64_t w1 = c.version(w), m1 = c.version(m);
    p.state()[0] = 1.0f;
    CHECK(c.version(w) > w1);
    CHECK(c.version(m) > m1);
    const std::uint64_t w2 = c.version(w), m2 = c.version(m);
    p.for_each([](const auto&, float* v, float*) { v[0] += 1.0f; });
    CHECK(c.version(w) > w2);
    CHECK(c.version(m) > m2);
  }
  SECTION("touch marks a write made through a kept pointer") {
    float* kept = p.value(w);
    const std::uint64_t w1 = c.version(w);
    kept[3] = 5.0f;  // invisible to the counter ...
    CHECK(c.version(w) == w1);
    p.touch(w);  // ... until touched
    CHECK(c.version(w) > w1);
    const std::uint64_t w2 = c.version(w), m1 = c.version(m);
    p.touch();
    CHECK(c.version(w) > w2);
    CHECK(c.version(m) > m1);
    CHECK_THROWS(p.touch(99));
  }
}
