// Fuzz target: the text index of a checkpoint directory (`checkpoint`,
// io/checkpoint.hpp). An accepted index must survive format -> parse.
#include <string>

#include "cifarnet/io/checkpoint.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(checkpoint_index) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::ignore_errors([&] {
    const io::CheckpointIndex idx = io::parse_checkpoint_index(text, "checkpoint");
    const std::string again = io::format_checkpoint_index(idx);
    const io::CheckpointIndex back = io::parse_checkpoint_index(again, "<reformatted>");
    FUZZ_CHECK(back.latest == idx.latest && back.all == idx.all);
  });
  return 0;
}
