// Shared by tests that compare two models built from different but
// equivalent layer compositions: the same parameter values in both.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>

namespace cifarnet::test {

/// Copies every parameter of `from` into `to`, which must register the
/// same count with the same sizes in the same order (and the same names
/// when `same_names`: checkpoints would see them).
template <class From, class To>
void copy_parameters(From& from, To& to, bool same_names = true) {
  auto& a = from.parameters();
  auto& b = to.parameters();
  REQUIRE(a.count() == b.count());
  for (std::size_t id = 0; id < a.count(); ++id) {
    REQUIRE(a.info(id).size == b.info(id).size);
    if (same_names) REQUIRE(a.info(id).name == b.info(id).name);
    std::copy(a.value(id), a.value(id) + a.info(id).size, b.value(id));
  }
}

}  // namespace cifarnet::test
