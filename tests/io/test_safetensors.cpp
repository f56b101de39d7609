#include <catch2/catch.hpp>

#include <cifarnet/io/safetensors.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "io_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::io;
using Catch::Matchers::Contains;

namespace {

const std::string kGolden = std::string(CIFARNET_TEST_DATA_DIR) + "/io/golden.safetensors";
const std::string kGoldenMulti =
    std::string(CIFARNET_TEST_DATA_DIR) + "/io/golden_multi_metadata.safetensors";

/// The tensors make_golden_safetensors.py writes, rebuilt from its formulas.
StateDict golden_tensors() {
  StateDict d;
  std::vector<float> w(2 * 2 * 3 * 4);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = float(i) * 0.25f - 3.0f;
  d.set<float>("conv1/weights", {2, 2, 3, 4}, w);
  d.set<float>("conv1/biases", {4}, {0.1f, -0.2f, 0.3f, -0.4f});
  d.set<double>("bn/moving_variance", {3}, {1.5, 2.5, 1e-5});
  d.set("global_step", TensorData::scalar<std::int64_t>(1234567890123));
  d.set<std::int32_t>("labels", {3}, {7, -3, 2147483647});
  d.set<std::uint8_t>("pixels", {2, 3}, {0, 1, 2, 253, 254, 255});
  d.set<float>("empty", {0, 3}, {});
  d.set<std::uint16_t>("u16", {2}, {1, 65535});
  d.set<bf16>("half/bf16", {2, 2}, {bf16{0x3F80}, bf16{0xC020}, bf16{0x4049}, bf16{0x0000}});
  d.metadata["format"] = "np";
  return d;
}

void check_equal(const StateDict& a, const StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO("tensor " << name);
    const TensorData* u = b.find(name);
    REQUIRE(u != nullptr);
    CHECK(u->dtype == t.dtype);
    CHECK(u->shape == t.shape);
    CHECK(u->bytes == t.bytes);
  }
  CHECK(a.metadata == b.metadata);
}

/// A file with this header text (padded to a multiple of 8) and data.
std::vector<std::uint8_t> make_file(std::string header, const std::vector<std::uint8_t>& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> b;
  b.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) b.push_back(std::uint8_t(std::uint64_t(header.size()) >> (8 * i)));
  for (char c : header) b.push_back(std::uint8_t(c));
  for (auto x : data) b.push_back(x);
  return b;
}

std::string read_error(const std::string& path, ReadOptions opt = {}) {
  return iotest::message_of<DataError>([&] { read_safetensors(path, opt); });
}

}  // namespace

TEST_CASE("every dtype round-trips through write_safetensors and read_safetensors", "[io][safetensors]") {
  iotest::TempDir dir;
  StateDict d;
  int k = 0;
  for (const auto& info : cifarnet::detail::kDtypes) {
    std::vector<std::uint8_t> bytes(6 * info.size);
    for (auto& b : bytes) b = std::uint8_t(37 * k++ + 11);
    d.set(std::string("t_") + info.name, TensorData::raw(info.dtype, {2, 3}, bytes));
  }
  d.set("scalar", TensorData::scalar(2.5f));
  d.set<double>("zero_size", {3, 0}, {});
  d.metadata["global_step"] = "17";
  d.metadata["note"] = "h\xc3\xa9llo \"quoted\"\n\ttab";
  const std::string path = dir / "all.safetensors";
  write_safetensors(path, d);
  const StateDict r = read_safetensors(path);
  check_equal(d, r);
  CHECK(r.source == path);
  CHECK(r.at("scalar").item<float>() == 2.5f);
  CHECK(r.at("scalar").shape.empty());
  // the checksum entries are in the file but not in the returned metadata
  ReadOptions keep;
  keep.keep_checksum_metadata = true;
  const StateDict raw = read_safetensors(path, keep);
  CHECK(raw.metadata.count("cifarnet.crc32c/t_F32") == 1);
  CHECK(raw.metadata.count("cifarnet.crc32c:header") == 1);
  CHECK(raw.metadata.size() == d.metadata.size() + d.size() + 1);
  // in-memory serialization is the same bytes as the file
  CHECK(serialize_safetensors(d) == iotest::read_bytes(path));
}

TEST_CASE("typed accessors convert and check dtypes", "[io][safetensors]") {
  StateDict d;
  d.set<float>("f", {2}, {1.5f, -2.0f});
  d.set<bf16>("b", {2}, {float_to_bf16(1.0f), float_to_bf16(-3.140625f)});
  d.set<f16>("h", {3}, {f16{0x3C00}, f16{0xC000}, f16{0x0001}});  // 1, -2, smallest subnormal
  CHECK(d.at("f").values<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(d.at("f").to_floating<double>() == std::vector<double>{1.5, -2.0});
  CHECK(d.at("b").to_floating<float>() == std::vector<float>{1.0f, -3.140625f});
  CHECK(d.at("h").to_floating<double>() == std::vector<double>{1.0, -2.0, 0x1.0p-24});
  CHECK(float_to_bf16(1.00390625f).bits == 0x3F80);  // tie rounds to even
  CHECK(float_to_bf16(1.01171875f).bits == 0x3F82);  // tie rounds up to even
  CHECK(iotest::message_of<Error>([&] { d.at("f").values<double>(); }) ==
        "cifarnet: tensor has dtype F32, asked for F64");
  CHECK(iotest::message_of<Error>([&] { d.at("missing"); }) ==
        "cifarnet: state dict has no tensor 'missing'");
  CHECK(iotest::message_of<ShapeError>([&] {
          d.set<float>("x", {2, 2}, {1.0f});
        }) == "cifarnet: tensor of shape [2, 2] needs 4 values, got 1");
  CHECK(iotest::message_of<ConfigError>([&] { d.set<float>("__metadata__", {1}, {1.0f}); }) ==
        "cifarnet: safetensors: '__metadata__' cannot be a tensor name");
}

TEST_CASE("the Python library's golden file reads with the expected values", "[io][safetensors][golden]") {
  const StateDict r = read_safetensors(kGolden);
  check_equal(golden_tensors(), r);
  CHECK(r.at("global_step").item<std::int64_t>() == 1234567890123);
  CHECK(r.at("half/bf16").to_floating<float>() == std::vector<float>{1.0f, -2.5f, 3.140625f, 0.0f});
  // files from other writers carry no checksums: accepted, unless required
  ReadOptions strict;
  strict.require_checksums = true;
  CHECK(read_error(kGolden, strict) ==
        "cifarnet: file '" + kGolden +
            "' at byte offset 8: safetensors: file has no cifarnet.crc32c checksums");

  const StateDict m = read_safetensors(kGoldenMulti);
  CHECK(m.metadata == std::map<std::string, std::string>{
                          {"format", "np"}, {"global_step", "42"}, {"note", "h\xc3\xa9llo \"q\"\n"}});
  CHECK(m.size() == r.size());
}

TEST_CASE("cifarnet writes the Python library's bytes for the same tensors and metadata",
          "[io][safetensors][golden]") {
  const auto golden = iotest::read_bytes(kGolden);
  WriteOptions no_crc;
  no_crc.checksums = false;
  // built from scratch: same order (dtype rank, then name), same JSON, same padding
  CHECK(serialize_safetensors(golden_tensors(), no_crc) == golden);
  // and what was read writes back unchanged
  CHECK(serialize_safetensors(read_safetensors(kGolden), no_crc) == golden);
  iotest::TempDir dir;
  write_safetensors(dir / "copy.safetensors", read_safetensors(kGolden), no_crc);
  CHECK(iotest::read_bytes(dir / "copy.safetensors") == golden);
}

TEST_CASE("an empty state dict is the 8-byte minimal header '{}' padded", "[io][safetensors]") {
  WriteOptions no_crc;
  no_crc.checksums = false;
  const auto b = serialize_safetensors(StateDict{}, no_crc);
  CHECK(b == make_file("{}", {}));
  CHECK(b.size() == 16);
  CHECK(parse_safetensors(b.data(), b.size(), "mem").empty());
}

TEST_CASE("missing or unreadable files are IoErrors naming the file", "[io][safetensors][errors]") {
  iotest::TempDir dir;
  const std::string p = dir / "nope.safetensors";
  CHECK(iotest::message_of<IoError>([&] { read_safetensors(p); }) ==
        "cifarnet: cannot open '" + p + "': No such file or directory");
  CHECK(iotest::message_of<IoError>([&] { read_safetensors(dir.path()); }) ==
        "cifarnet: cannot read '" + dir.path() + "': not a regular file");
}

TEST_CASE("corrupt safetensors files are DataErrors naming the file, offset and fault",
          "[io][safetensors][errors]") {
  iotest::TempDir dir;
  const std::string p = dir / "bad.safetensors";
  auto err = [&](const std::vector<std::uint8_t>& bytes) {
    iotest::write_bytes(p, bytes);
    return read_error(p);
  };
  const std::string at = "cifarnet: file '" + p + "' at byte offset ";
  const std::vector<std::uint8_t> eight(8, 0xAB);
  const std::string f32 = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  SECTION("shorter than the length field") {
    CHECK(err({1, 2, 3}) == at + "0: safetensors: file is 3 bytes, too short for the 8-byte header length");
  }
  SECTION("header length larger than the file") {
    auto b = make_file("{" + f32 + "}", eight);
    b[1] = 0x10;  // N = 4096 + 64
    CHECK(err(b) == at +
                        "0: safetensors: header length 4152 exceeds the file size (72 bytes, so at most 64); "
                        "the file is truncated or not safetensors");
  }
  SECTION("truncated file: the data is cut short") {
    auto b = make_file("{" + f32 + "}", eight);
    b.resize(b.size() - 3);
    CHECK(err(b) ==
          at + "64: safetensors: tensor 'x': data_offsets [0, 8] extend past the end of the data (5 bytes)");
  }
  SECTION("truncated file: cut inside the header") {
    auto b = make_file("{" + f32 + "}", eight);
    b.resize(40);
    CHECK_THAT(err(b), Contains(at + "0: safetensors: header length 56 exceeds the file size (40 bytes"));
  }
  SECTION("header does not start with '{'") {
    CHECK(err(make_file("[1]", {})) == at + "8: safetensors: header does not start with '{'");
  }
  SECTION("bad JSON") {
    const auto m = err(make_file(R"({"x":{"dtype":"F32",,}})", eight));
    CHECK_THAT(m,
               Contains(at + "28: safetensors: header is not valid JSON: [json.exception.parse_error.101]"));
  }
  SECTION("trailing garbage after the JSON object") {
    CHECK_THAT(err(make_file("{}x", {})), Contains(at + "10: safetensors: header is not valid JSON"));
    CHECK(err(make_file(std::string("{}\0", 3), {})) ==
          at + "10: safetensors: header contains a NUL byte, which JSON does not allow");
  }
  SECTION("unknown dtype") {
    CHECK(err(make_file(R"({"x":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight)) ==
          at + "8: safetensors: tensor 'x': unknown dtype 'F31'");
  }
  SECTION("shape does not match the offsets' span") {
    CHECK(err(make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight)) ==
          at + "8: safetensors: tensor 'x': F32 shape [3] needs 12 bytes but data_offsets [0, 8] span 8");
  }
  SECTION("shape overflowing 64 bits") {
    CHECK(err(make_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                        eight)) ==
          at +
              "8: safetensors: tensor 'x': F32 shape [4294967296, 4294967296] needs more than 2^64 bytes but "
              "data_offsets [0, 8] span 8");
  }
  SECTION("negative shape entry") {
    CHECK(
        err(make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight)) ==
        at +
            "8: safetensors: tensor 'x': shape entry is a negative integer, expected a non-negative integer");
  }
  SECTION("overlapping offsets") {
    CHECK(err(make_file(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                        eight)) ==
          at + "124: safetensors: tensor 'b' data_offsets [4, 8] overlap tensor 'a' [0, 6]");
  }
  SECTION("a gap between tensors") {
    CHECK(err(make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                        eight)) ==
          at + "122: safetensors: gap of 2 bytes before tensor 'b' (data_offsets begin "
               "at 4, previous data ends at 2)");
  }
  SECTION("bytes after the last tensor") {
    CHECK(err(make_file(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]}})", eight)) ==
          at + "70: safetensors: 2 bytes after the last tensor's data (data section is 8 bytes, tensors "
               "cover 6)");
  }
  SECTION("offsets ending before they begin") {
    CHECK(err(make_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", eight)) ==
          at + "8: safetensors: tensor 'a': data_offsets [8, 0] end before they begin");
  }
  SECTION("metadata value that is not a string") {
    CHECK(err(make_file(R"({"__metadata__":{"step":5}})", {})) ==
          at + "8: safetensors: __metadata__ value of 'step' is a non-negative integer, expected a string");
  }
  SECTION("duplicate tensor name") {
    CHECK(err(make_file("{" + f32 + "," + f32 + "}", eight)) ==
          at + "8: safetensors: header has the key 'x' twice");
  }
  SECTION("unexpected key and missing fields") {
    CHECK(err(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", eight)) ==
          at + "8: safetensors: tensor 'x': unexpected key 'extra' (expected dtype, shape, data_offsets)");
    CHECK(err(make_file(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", eight)) ==
          at + "8: safetensors: tensor 'x': missing array 'shape'");
    CHECK(err(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight)) ==
          at + "8: safetensors: tensor 'x': 'data_offsets' must be two non-negative integers [begin, end]");
    CHECK(err(make_file(R"({"x":[]})", eight)) ==
          at + "8: safetensors: tensor 'x': entry is an array, expected an object");
  }
}

TEST_CASE("checksums catch corrupt tensor data and headers", "[io][safetensors][errors][crc]") {
  iotest::TempDir dir;
  const std::string p = dir / "ck.safetensors";
  StateDict d;
  d.set<float>("a", {4}, {1, 2, 3, 4});
  d.set<std::int64_t>("step", {}, {42});
  d.metadata["global_step"] = "42";
  write_safetensors(p, d);
  auto good = iotest::read_bytes(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | good[std::size_t(i)];
  const std::string at = "cifarnet: file '" + p + "' at byte offset ";

  SECTION("a flipped bit in tensor data") {
    auto b = good;
    b[8 + n + 8 + 5] ^= 0x10;  // "a" follows the 8-byte I64 "step"
    iotest::write_bytes(p, b);
    const auto m = read_error(p);
    CHECK_THAT(m, Contains(at + std::to_string(8 + n + 8) +
                           ": safetensors: CRC-32C mismatch in tensor 'a' (stored "));
    CHECK_THAT(m, Contains("): its data is corrupt"));
    ReadOptions off;
    off.verify_checksums = false;
    CHECK_NOTHROW(read_safetensors(p, off));
  }
  SECTION("a changed metadata value of the same length") {
    std::string s(good.begin(), good.end());
    const auto pos = s.find("\"42\"");
    REQUIRE(pos != std::string::npos);
    s[pos + 2] = '3';
    iotest::write_bytes(p, std::vector<std::uint8_t>(s.begin(), s.end()));
    CHECK_THAT(read_error(p), Contains(at + "8: safetensors: header checksum mismatch (stored "));
  }
  SECTION("every single-bit flip anywhere in the file is detected") {
    std::size_t detected = 0;
    for (std::size_t i = 0; i < good.size(); ++i)
      for (int bit = 0; bit < 8; ++bit) {
        auto b = good;
        b[i] ^= std::uint8_t(1u << bit);
        try {
          parse_safetensors(b.data(), b.size(), "flip");
          FAIL_CHECK("undetected flip of bit " << bit << " at byte " << i);
        } catch (const DataError&) {
          ++detected;
        }
      }
    CHECK(detected == good.size() * 8);
  }
}

TEST_CASE("names and metadata that are not UTF-8 are rejected on write", "[io][safetensors][errors]") {
  StateDict d;
  d.set<float>("bad\xff", {1}, {1.0f});
  WriteOptions no_crc;
  no_crc.checksums = false;
  CHECK(iotest::message_of<ConfigError>([&] { serialize_safetensors(d, no_crc); }) ==
        "cifarnet: safetensors: tensor name is not valid UTF-8");
  CHECK(iotest::message_of<ConfigError>([&] { serialize_safetensors(d); }) ==
        "cifarnet: safetensors: metadata key is not valid UTF-8");
  StateDict m;
  m.metadata["k"] = "\xc3";
  CHECK(iotest::message_of<ConfigError>([&] { serialize_safetensors(m); }) ==
        "cifarnet: safetensors: metadata value of 'k' is not valid UTF-8");
}
