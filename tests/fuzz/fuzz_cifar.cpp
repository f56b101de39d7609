// Fuzz target: the CIFAR-10 / CIFAR-100 binary record parsers
// (data/cifar.hpp), in memory and through the file readers.
#include <cstring>
#include <vector>

#include "cifarnet/data/cifar.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(cifar) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  for (std::size_t label_bytes : {std::size_t(1), std::size_t(2)}) {
    fuzz::ignore_errors([&] {
      data::ImageSet set;
      data::detail::parse_label_image_records(bytes, "<fuzz>", label_bytes, data::kCifarGeometry,
                                              label_bytes == 1 ? 10 : 100, 20, set);
      // Accepted: whole records, every label in range, pixels copied verbatim.
      const std::size_t rec = label_bytes + 3072;
      FUZZ_CHECK(size % rec == 0 && set.labels.size() == size / rec);
      FUZZ_CHECK(set.pixels.size() == set.labels.size() * 3072);
      for (std::size_t i = 0; i < set.labels.size(); ++i) {
        FUZZ_CHECK(set.labels[i] >= 0 && set.labels[i] < (label_bytes == 1 ? 10 : 100));
        FUZZ_CHECK(std::memcmp(set.pixels.data() + i * 3072, data + i * rec + label_bytes, 3072) == 0);
      }
    });
  }
  // The file readers (read_file + the same parser) and the class-name reader.
  fuzz::TempFile f(data, size);
  fuzz::ignore_errors([&] { data::read_cifar10_file(f.path()); });
  fuzz::ignore_errors([&] { data::read_cifar100_file(f.path()); });
  fuzz::ignore_errors([&] { data::read_class_names(f.path()); });
  return 0;
}
