// Fuzz target: safetensors checkpoints (io/safetensors.hpp, io/checkpoint.hpp):
// the header (length, JSON, dtypes, shapes, offsets, checksums) and the body,
// in memory with and without checksum verification and from a file, then
// what a restore reads from an accepted dict (global_step, RNG states,
// floating conversion). An accepted dict must survive serialize -> parse.
#include <string>
#include <vector>

#include "cifarnet/io/checkpoint.hpp"
#include "cifarnet/io/safetensors.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

namespace {
void use(const cifarnet::StateDict& dict) {
  fuzz::ignore_errors([&] { io::global_step(dict); });
  for (const auto& [k, v] : dict.metadata)
    if (k.rfind("rng/", 0) == 0) fuzz::ignore_errors([&, k = k] { io::rng_state(dict, k.substr(4)); });
  for (const auto& entry : dict) {
    const cifarnet::TensorData& t = entry.second;
    FUZZ_CHECK(t.numel() * cifarnet::dtype_size(t.dtype) == t.bytes.size());
    fuzz::ignore_errors([&] { (void)t.to_floating<float>(); });
  }
  // Round trip: the same tensors and metadata (checksums stripped) come back.
  const auto bytes = io::serialize_safetensors(dict);
  const cifarnet::StateDict back = io::parse_safetensors(bytes.data(), bytes.size(), "<reserialized>");
  FUZZ_CHECK(back.size() == dict.size() && back.metadata == dict.metadata);
  for (const auto& [name, t] : dict) {
    const cifarnet::TensorData* b = back.find(name);
    FUZZ_CHECK(b && b->dtype == t.dtype && b->shape == t.shape && b->bytes == t.bytes);
  }
}
}  // namespace

CIFARNET_FUZZ_TARGET(safetensors) {
  fuzz::ignore_errors([&] { use(io::parse_safetensors(data, size, "<fuzz>")); });
  io::ReadOptions unverified;
  unverified.verify_checksums = false;
  fuzz::ignore_errors([&] { use(io::parse_safetensors(data, size, "<fuzz>", unverified)); });
  fuzz::TempFile f(data, size, ".safetensors");
  fuzz::ignore_errors([&] { io::read_safetensors(f.path()); });
  return 0;
}
