// Tests of cifarnet/data/tfrecord.hpp and example.hpp: framing, the
// tf.train.Example wire format, golden files written by real TensorFlow
// (fixtures/make_golden_tfrecords.py), and malformed input.
#include <catch2/catch.hpp>

#include <cifarnet/core/crc32c.hpp>
#include <cifarnet/data/example.hpp>
#include <cifarnet/data/tfrecord.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "data_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::data;
using cifarnet_test::pattern_byte;
using cifarnet_test::read_bytes;
using cifarnet_test::require_throws_with;
using cifarnet_test::TempDir;
using cifarnet_test::write_bytes;

namespace {
const std::string kFixtures = CIFARNET_TEST_DATA_DIR "/fixtures/";
const std::vector<int> kGoldenLabels = {3, 0, 9, 7, 1};

ImageSet golden_cifar_set() {
  ImageSet s;
  s.num_classes = 10;
  for (std::size_t i = 0; i < kGoldenLabels.size(); ++i) {
    for (std::size_t j = 0; j < 3072; ++j) s.pixels.push_back(pattern_byte(i, j));
    s.labels.push_back(kGoldenLabels[i]);
  }
  return s;
}

// The first example of features.tfrecords, in the order TensorFlow wrote it.
Example golden_features_example() {
  Example ex;
  Feature e;
  e.kind = Feature::Kind::bytes_list;
  ex.features.emplace_back("e", e);
  ex.features.emplace_back("f", Feature{});
  ex.features.emplace_back("g", Feature::of_floats({1.5f, -0.0f, std::numeric_limits<float>::max(), 1e-45f}));
  Feature h;
  h.kind = Feature::Kind::bytes_list;
  h.bytes = {"", "abc", std::string(200, '\0')};
  for (int i = 0; i < 200; ++i) h.bytes[2][i] = static_cast<char>(i);
  ex.features.emplace_back("h", h);
  Feature label;
  label.kind = Feature::Kind::int64_list;
  label.int64s = {-1, 300, 0, std::numeric_limits<std::int64_t>::max(),
                  std::numeric_limits<std::int64_t>::min()};
  ex.features.emplace_back("label", label);
  Feature empty_key;
  empty_key.kind = Feature::Kind::int64_list;
  empty_key.int64s = {127, 128, 16383, 16384};
  ex.features.emplace_back("", empty_key);
  return ex;
}
}  // namespace

TEST_CASE("TFRecord framing is length, masked CRC of the length, data, masked CRC of the data",
          "[data][tfrecord]") {
  TempDir dir;
  const std::string path = dir.file("a.tfrecords");
  {
    TfRecordWriter w(path);
    w.write(std::string("a"));
    w.write(std::string());
    CHECK(w.records() == 2);
    w.close();
  }
  const auto b = read_bytes(path);
  REQUIRE(b.size() == 17 + 16);
  const std::uint8_t len1[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  CHECK(std::memcmp(b.data(), len1, 8) == 0);
  const std::uint32_t lcrc = masked_crc32c(len1, 8);
  CHECK(b[8] == (lcrc & 0xFF));
  CHECK(b[11] == (lcrc >> 24));
  CHECK(b[12] == 'a');
  const std::uint32_t dcrc = masked_crc32c("a", 1);
  CHECK(b[13] == (dcrc & 0xFF));
  CHECK(b[16] == (dcrc >> 24));
  CHECK(read_tfrecord_file(path) == std::vector<std::string>{"a", ""});
  TfRecordReader r(path);
  std::string rec;
  REQUIRE(r.next(rec));
  REQUIRE(r.next(rec));
  CHECK(r.record_offset() == 17);
  CHECK(r.offset() == b.size());
  CHECK_FALSE(r.next(rec));
  const auto spans = index_tfrecords(b, path);
  REQUIRE(spans.size() == 2);
  CHECK(spans[1].offset == 17);
  CHECK(spans[1].data == 29);
  CHECK(spans[1].size == 0);
}

TEST_CASE("records written by TensorFlow read back and are rewritten byte for byte",
          "[data][tfrecord][golden]") {
  const std::string golden = kFixtures + "raw.tfrecords";
  const auto records = read_tfrecord_file(golden);
  REQUIRE(records.size() == 3);
  CHECK(records[0].empty());
  CHECK(records[1] == "a");
  REQUIRE(records[2].size() == 512);
  for (std::size_t i = 0; i < 512; ++i) CHECK(static_cast<std::uint8_t>(records[2][i]) == i % 256);
  TempDir dir;
  TfRecordWriter w(dir.file("raw.tfrecords"));
  for (const auto& r : records) w.write(r);
  w.close();
  CHECK(read_bytes(dir.file("raw.tfrecords")) == read_bytes(golden));
}

TEST_CASE("CIFAR TFRecords written by TensorFlow as the seed does are read and rewritten identically",
          "[data][tfrecord][golden]") {
  const ImageSet expect = golden_cifar_set();
  for (const char* name : {"cifar_sorted.tfrecords", "cifar_label_first.tfrecords"}) {
    INFO(name);
    const ImageSet got = read_cifar_tfrecords({kFixtures + name});
    CHECK(got.labels == expect.labels);
    CHECK(got.pixels == expect.pixels);
    CHECK(got.geometry == ImageGeometry{32, 32, 3});
  }
  // TensorFlow's deterministic (sorted-key) serialization is what our writer produces.
  TempDir dir;
  write_cifar_tfrecords(expect, dir.file("ours.tfrecords"));
  CHECK(read_bytes(dir.file("ours.tfrecords")) == read_bytes(kFixtures + "cifar_sorted.tfrecords"));
  for (const auto& rec : read_tfrecord_file(kFixtures + "cifar_sorted.tfrecords")) {
    const Example ex = parse_example(rec);
    REQUIRE(ex.features.size() == 2);
    CHECK(ex.features[0].first == "image");
  }
  // The label-first order TensorFlow also writes (per-process hash order)
  // parses, keeps its order, and serializes back to the same bytes.
  for (const auto& rec : read_tfrecord_file(kFixtures + "cifar_label_first.tfrecords")) {
    const Example ex = parse_example(rec);
    REQUIRE(ex.features.size() == 2);
    CHECK(ex.features[0].first == "label");
    CHECK(serialize(ex) == rec);
  }
}

TEST_CASE("general tf.train.Examples from TensorFlow parse to the right values and serialize identically",
          "[data][example][golden]") {
  const auto records = read_tfrecord_file(kFixtures + "features.tfrecords");
  REQUIRE(records.size() == 3);
  const Example expect = golden_features_example();
  const Example got = parse_example(records[0]);
  REQUIRE(got.features.size() == expect.features.size());
  for (std::size_t i = 0; i < expect.features.size(); ++i) {
    INFO("feature '" << expect.features[i].first << "'");
    CHECK(got.features[i].first == expect.features[i].first);
    CHECK(got.features[i].second == expect.features[i].second);
  }
  const Feature* g = got.find("g");
  REQUIRE(g);
  CHECK(std::signbit(g->floats[1]));
  CHECK(g->floats[3] > 0.0f);  // the denormal survived
  CHECK(serialize(expect) == records[0]);
  CHECK(got.find("missing") == nullptr);
  // an Example with an empty Features message, and a completely empty one
  CHECK(parse_example(records[1]).features.empty());
  CHECK(serialize(Example{}) == records[1]);
  CHECK(records[2].empty());
  CHECK(parse_example(records[2]).features.empty());
}

TEST_CASE("Example encoding: varints, negative int64 in ten bytes, packed lists", "[data][example]") {
  std::string s;
  io::pb::put_varint(s, 300);
  CHECK(s == std::string("\xac\x02", 2));
  CHECK(io::pb::varint_size(127) == 1);
  CHECK(io::pb::varint_size(128) == 2);
  CHECK(io::pb::varint_size(~0ull) == 10);
  Example ex;
  ex.set("label", Feature::of_int64(-2));
  const std::string enc = serialize(ex);
  // Example{features{feature{key "label" value{int64_list{value: [-2] packed}}}}}
  const std::string want = std::string("\x0a\x19\x0a\x17\x0a\x05label\x12\x0e\x1a\x0c\x0a\x0a", 17) +
                           std::string("\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
  CHECK(enc == want);
  CHECK(parse_example(enc).find("label")->int64s == std::vector<std::int64_t>{-2});
  ex.set("label", Feature::of_int64(4));  // replaces in place
  CHECK(ex.features.size() == 1);
  const std::uint8_t img[3] = {1, 2, 3};
  const std::string cifar = encode_cifar_example(img, 3, 7);
  const auto v = decode_cifar_example(cifar.data(), cifar.size(), "x", 0);
  CHECK(v.image_size == 3);
  CHECK(v.image[2] == 3);
  CHECK(v.label == 7);
}

TEST_CASE("the Example parser accepts unpacked lists, unknown fields and repeated keys", "[data][example]") {
  // Int64List with two unpacked values and an unknown field 5 (varint)
  const std::string int64_list = std::string("\x08\x05\x08\x06\x28\x01", 6);
  const std::string feature = "\x1a" + std::string(1, char(int64_list.size())) + int64_list;
  const auto entry = [&](const std::string& key, const std::string& f) {
    const std::string e =
        "\x0a" + std::string(1, char(key.size())) + key + "\x12" + std::string(1, char(f.size())) + f;
    return "\x0a" + std::string(1, char(e.size())) + e;
  };
  const std::string features = entry("label", feature);
  const std::string ex = "\x0a" + std::string(1, char(features.size())) + features;
  const Example got = parse_example(ex);
  REQUIRE(got.find("label"));
  CHECK(got.find("label")->int64s == std::vector<std::int64_t>{5, 6});
  // the same key again later replaces the first value (proto map semantics)
  const std::string one = "\x1a\x03\x0a\x01\x09";
  const std::string features2 = entry("label", feature) + entry("label", one);
  const std::string ex2 = "\x0a" + std::string(1, char(features2.size())) + features2;
  CHECK(parse_example(ex2).find("label")->int64s == std::vector<std::int64_t>{9});
  CHECK(parse_example(ex2).features.size() == 1);
  // unpacked float values (wire type 5)
  const std::string floats = std::string("\x12\x05\x0d\x00\x00\xc0\x3f", 7);
  const std::string features3 = entry("f", floats);
  const std::string ex3 = "\x0a" + std::string(1, char(features3.size())) + features3;
  CHECK(parse_example(ex3).find("f")->floats == std::vector<float>{1.5f});
}

TEST_CASE("malformed Examples are DataErrors naming the file and the offset", "[data][example][errors]") {
  // truncated varint inside the outer length
  require_throws_with<DataError>([] { parse_example(std::string("\x0a\x80", 2), "f.rec", 100); },
                                 {"f.rec", "byte offset 101", "truncated varint"});
  // a length running past the end
  require_throws_with<DataError>([] { parse_example(std::string("\x0a\x05\x0a", 3), "f.rec", 0); },
                                 {"f.rec", "byte offset 1", "runs past the end"});
  // wire type 3 (groups) is not supported
  require_throws_with<DataError>([] { parse_example(std::string("\x13", 1), "f.rec", 0); },
                                 {"f.rec", "byte offset 0", "unsupported wire type 3"});
  // field number 0
  require_throws_with<DataError>([] { parse_example(std::string("\x02\x00", 2), "f.rec", 0); },
                                 {"invalid field number 0"});
  // an 11-byte varint
  require_throws_with<DataError>(
      [] { parse_example(std::string("\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11), "f.rec", 0); },
      {"varint overflows 64 bits"});
  // CIFAR decoding: 'label' stored as bytes, or missing
  Example ex;
  ex.set("image", Feature::of_bytes("xyz"));
  ex.set("label", Feature::of_bytes("3"));
  const std::string bad = serialize(ex);
  require_throws_with<DataError>([&] { decode_cifar_example(bad.data(), bad.size(), "c.tfrecords", 40); },
                                 {"c.tfrecords", "feature 'label' has the wrong type"});
  ex.features.pop_back();
  const std::string nolabel = serialize(ex);
  require_throws_with<DataError>(
      [&] { decode_cifar_example(nolabel.data(), nolabel.size(), "c.tfrecords", 40); },
      {"c.tfrecords", "byte offset 40", "feature 'label' is missing"});
  ex.set("label", Feature{});
  ex.features.back().second.kind = Feature::Kind::int64_list;  // an empty list
  const std::string empty = serialize(ex);
  require_throws_with<DataError>([&] { decode_cifar_example(empty.data(), empty.size(), "c.tfrecords", 0); },
                                 {"'label' holds 0 values"});
}

TEST_CASE("truncated TFRecord files and CRC mismatches name the file and the offset",
          "[data][tfrecord][errors]") {
  TempDir dir;
  const std::string path = dir.file("bad.tfrecords");
  {
    TfRecordWriter w(path);
    w.write(std::string(100, 'x'));
    w.write(std::string(50, 'y'));
    w.close();
  }
  const auto good = read_bytes(path);  // record 2 starts at 116, its payload at 128
  REQUIRE(good.size() == 116 + 66);
  const auto both = [&](const std::vector<std::uint8_t>& bytes, const std::vector<std::string>& parts) {
    write_bytes(path, bytes);
    require_throws_with<DataError>([&] { read_tfrecord_file(path); }, parts);
    require_throws_with<DataError>([&] { index_tfrecords(bytes, path); }, parts);
  };
  SECTION("header cut short") {
    both(std::vector<std::uint8_t>(good.begin(), good.begin() + 116 + 5),
         {"bad.tfrecords", "byte offset 116", "truncated record header (5 of 12 bytes)"});
  }
  SECTION("payload cut short") {
    both(std::vector<std::uint8_t>(good.begin(), good.end() - 10),
         {"bad.tfrecords", "byte offset 116", "truncated record: payload of 50 bytes"});
  }
  SECTION("payload CRC missing") {
    both(std::vector<std::uint8_t>(good.begin(), good.end() - 2), {"byte offset 116", "truncated record"});
  }
  SECTION("length corrupted") {
    auto b = good;
    b[116] ^= 0x01;
    both(b, {"bad.tfrecords", "byte offset 116", "corrupt record length (CRC mismatch)"});
  }
  SECTION("a huge length with a valid CRC does not allocate, it is truncation") {
    auto b = good;
    cifarnet::detail::put_le64(b.data() + 116, 1ull << 60);
    cifarnet::detail::put_le32(b.data() + 124, masked_crc32c(b.data() + 116, 8));
    both(b, {"byte offset 116", "truncated record: payload of 1152921504606846976 bytes"});
  }
  SECTION("payload corrupted") {
    auto b = good;
    b[150] ^= 0x40;
    both(b, {"bad.tfrecords", "byte offset 128", "corrupt record payload of 50 bytes (CRC mismatch)"});
  }
  SECTION("payload CRC corrupted") {
    auto b = good;
    b.back() ^= 0x01;
    both(b, {"byte offset 128", "CRC mismatch"});
  }
  SECTION("a missing file is an IoError") {
    require_throws_with<IoError>([&] { read_tfrecord_file(dir.file("none.tfrecords")); },
                                 {"none.tfrecords", "cannot open"});
  }
}

TEST_CASE("CIFAR TFRecords with a wrong image size or label are DataErrors naming the record",
          "[data][tfrecord][errors]") {
  TempDir dir;
  const std::string path = dir.file("c.tfrecords");
  std::vector<std::uint8_t> img(3072, 7);
  {
    TfRecordWriter w(path);
    w.write(encode_cifar_example(img.data(), img.size(), 1));
    w.write(encode_cifar_example(img.data(), 3000, 1));
    w.close();
  }
  const std::uint64_t second = 16 + encode_cifar_example(img.data(), img.size(), 1).size();
  require_throws_with<DataError>(
      [&] { read_cifar_tfrecords({path}); },
      {"c.tfrecords", "byte offset " + std::to_string(second + 12), "'image' has 3000 bytes, expected 3072"});
  {
    TfRecordWriter w(path);
    w.write(encode_cifar_example(img.data(), img.size(), 10));
    w.close();
  }
  require_throws_with<DataError>([&] { read_cifar_tfrecords({path}); },
                                 {"c.tfrecords", "byte offset 12", "label 10 out of range [0, 10)"});
  CHECK(read_cifar_tfrecords({path}, 11).labels == std::vector<std::int32_t>{10});
}
