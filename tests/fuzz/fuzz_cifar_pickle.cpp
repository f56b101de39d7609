// Fuzz target: the pickle subset of CIFAR-10's python batches
// (data/cifar_pickle.hpp): pickle::load, the batch and batches.meta parsers
// in memory, and the file reader on a file holding the input.
#include <string>
#include <vector>

#include "cifarnet/data/cifar_pickle.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(cifar_pickle) {
  fuzz::ignore_errors([&] {
    const data::pickle::Ref v = data::pickle::load(data, size, "<fuzz>");
    FUZZ_CHECK(v != nullptr);
    if (v->kind == data::pickle::Kind::ndarray && v->built) {
      std::size_t count = 1;
      for (auto d : v->shape) count *= std::size_t(d);
      FUZZ_CHECK(v->s.size() >= count);  // the data holds every element
    }
    // No value holds more than the budget: a few times the input.
    FUZZ_CHECK(v->s.size() <= data::pickle::kBudgetPerByte * size + data::pickle::kBudgetBase);
  });
  fuzz::ignore_errors([&] {
    const data::ImageSet set = data::parse_cifar10_pickle(data, size, "<fuzz>");
    // Accepted: whole images, one label in [0, 10) each.
    FUZZ_CHECK(set.size() > 0 && set.pixels.size() == set.size() * 3072);
    for (auto l : set.labels) FUZZ_CHECK(l >= 0 && l < 10);
  });
  fuzz::ignore_errors([&] {
    const std::vector<std::string> names = data::parse_cifar10_pickle_meta(data, size, "<fuzz>");
    FUZZ_CHECK(names.size() == 10);
  });
  fuzz::TempFile f(data, size);
  fuzz::ignore_errors([&] { data::read_cifar10_pickle_file(f.path()); });
  return 0;
}
