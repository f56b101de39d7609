// Fuzz target: TFRecord framing (io/tfrecord.hpp) and the CIFAR examples in
// it (data/tfrecord.hpp, data/example.hpp): the in-memory index with and
// without the payload CRC, the streaming RecordReader and
// read_cifar_tfrecords on a file holding the input.
#include <string>
#include <vector>

#include "cifarnet/data/example.hpp"
#include "cifarnet/data/tfrecord.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(tfrecord) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  // Without the payload CRC the fuzzer reaches the Example parsers inside.
  for (bool verify : {true, false}) {
    fuzz::ignore_errors([&] {
      const auto spans = io::index_tfrecords(bytes, "<fuzz>", verify);
      std::uint64_t next = 0;
      for (const auto& s : spans) {
        FUZZ_CHECK(s.offset == next && s.data == s.offset + io::kRecordHeaderBytes);
        next = s.data + s.size + 4;
        FUZZ_CHECK(next <= size);
      }
      FUZZ_CHECK(next == size);
      for (const auto& s : spans) {
        fuzz::ignore_errors(
            [&] { data::parse_example(bytes.data() + s.data, std::size_t(s.size), "<fuzz>", s.data); });
        fuzz::ignore_errors([&] {
          const auto v =
              data::decode_cifar_example(bytes.data() + s.data, std::size_t(s.size), "<fuzz>", s.data);
          FUZZ_CHECK(v.image_size == 0 || (v.image >= bytes.data() + s.data &&
                                           v.image + v.image_size <= bytes.data() + s.data + s.size));
        });
      }
    });
  }
  fuzz::TempFile f(data, size, ".tfrecord");
  std::vector<std::string> streamed;
  fuzz::ignore_errors([&] {
    io::RecordReader r(f.path());
    std::string rec;
    while (r.next(rec)) streamed.push_back(rec);
  });
  fuzz::ignore_errors([&] {
    const auto set = data::read_cifar_tfrecords({f.path()});
    FUZZ_CHECK(set.pixels.size() == set.labels.size() * 3072);
    for (auto l : set.labels) FUZZ_CHECK(l >= 0 && l < 10);
  });
  return 0;
}
