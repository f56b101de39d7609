// Fuzz target: the TensorBoard event reader (io/tfevents.hpp): read_events on
// a file holding the input, and the Event decoder on every record of the
// in-memory index without the payload CRC (so the fuzzer reaches the
// Summary, HistogramProto and Image decoders). A decoded Event must
// re-encode and decode to the same bytes.
#include <string>
#include <vector>

#include "cifarnet/io/tfevents.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(tfevents) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  fuzz::ignore_errors([&] {
    for (const auto& s : io::index_tfrecords(bytes, "<fuzz>", /*verify_data_crc=*/false)) {
      fuzz::ignore_errors([&] {
        const std::string_view rec(reinterpret_cast<const char*>(bytes.data() + s.data), std::size_t(s.size));
        const io::Event e = io::decode_event(rec, "<fuzz>", s.data);
        std::string again;
        try {
          again = io::encode_event(e);
        } catch (const ConfigError&) {
          return;  // an OtherValue field the writer refuses: not a round-trip case
        }
        const io::Event back = io::decode_event(again, "<reencoded>", 0);
        FUZZ_CHECK(io::encode_event(back) == again);
        FUZZ_CHECK(back.step == e.step && back.file_version == e.file_version &&
                   back.source_writer == e.source_writer);
      });
    }
  });
  fuzz::TempFile f(data, size, ".tfevents");
  fuzz::ignore_errors([&] { io::read_events(f.path()); });
  return 0;
}
