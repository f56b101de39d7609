// Fuzz target: tf.train.Example decoding (data/example.hpp on
// io/protobuf.hpp), the full parser and the CIFAR fast path, without the
// TFRecord CRCs in the way. An accepted Example must survive
// serialize -> parse unchanged.
#include <cstring>
#include <string>

#include "cifarnet/data/example.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

namespace {
bool same_bits(const data::Feature& a, const data::Feature& b) {
  if (a.kind != b.kind || a.bytes != b.bytes || a.int64s != b.int64s || a.floats.size() != b.floats.size())
    return false;
  return a.floats.empty() || std::memcmp(a.floats.data(), b.floats.data(), 4 * a.floats.size()) == 0;
}
}  // namespace

CIFARNET_FUZZ_TARGET(example) {
  fuzz::ignore_errors([&] {
    const data::Example ex = data::parse_example(data, size, "<fuzz>", 0);
    const std::string again = data::serialize(ex);
    const data::Example back = data::parse_example(again, "<reserialized>");
    FUZZ_CHECK(back.features.size() == ex.features.size());
    for (std::size_t i = 0; i < ex.features.size(); ++i) {
      FUZZ_CHECK(back.features[i].first == ex.features[i].first);
      FUZZ_CHECK(same_bits(back.features[i].second, ex.features[i].second));
    }
    FUZZ_CHECK(data::serialize(back) == again);
  });
  fuzz::ignore_errors([&] {
    const auto v = data::decode_cifar_example(data, size, "<fuzz>", 0);
    FUZZ_CHECK(v.image_size == 0 || (v.image >= data && v.image + v.image_size <= data + size));
  });
  return 0;
}
