// Tests of cifarnet/data/cifar_pickle.hpp: the python CIFAR-10 batches of
// fixtures/cifar10_py/ (written by fixtures/make_cifar10_py.py: the canonical
// Python 2 layout and Python 3's pickle at protocols 2 to 5) read as the
// binary set of the same images, and malformed pickles are refused with the
// file and the byte offset.
#include <catch2/catch.hpp>

#include <cifarnet/data/cifar.hpp>
#include <cifarnet/data/cifar_pickle.hpp>

#include <string>
#include <vector>

#include "data_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::data;
using cifarnet_test::require_throws_with;

namespace {

const std::string kPy = CIFARNET_TEST_DATA_DIR "/fixtures/cifar10_py/";

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

ImageSet parse(const std::string& s) {
  const auto b = bytes_of(s);
  return parse_cifar10_pickle(b.data(), b.size(), "t.pkl");
}

// The py2 fixture's data_batch_1: Python 2's cPickle protocol 2.
std::vector<std::uint8_t> py2_batch() { return cifarnet_test::read_bytes(kPy + "py2/data_batch_1"); }

}  // namespace

TEST_CASE("the python batches, as Python 2 and Python 3 (protocols 2-5) pickled them, read as the binary set",
          "[data][cifar][pickle]") {
  for (const Split split : {Split::train, Split::validation, Split::eval, Split::train_all}) {
    const ImageSet bin = read_cifar10(kPy + "bin", split);
    REQUIRE(bin.size() > 0);
    for (const char* variant : {"py2", "py3_protocol2", "py3_protocol3", "py3_protocol4", "py3_protocol5"}) {
      INFO(variant << ", split " << to_string(split));
      const ImageSet py = read_cifar10_python(kPy + variant, split);
      CHECK(py.geometry == bin.geometry);
      CHECK(py.num_classes == 10);
      CHECK(py.labels == bin.labels);
      CHECK(py.pixels == bin.pixels);
      CHECK(py.class_names == bin.class_names);
    }
  }
  CHECK(read_cifar10_python(kPy + "py2", Split::eval).size() == 3);
  CHECK(read_cifar10_python(kPy + "py2", Split::train).size() == 8);
}

TEST_CASE("the python set is found in --data-dir or its cifar-10-batches-py/", "[data][cifar][pickle]") {
  CHECK(has_cifar10_python(kPy + "py2"));
  CHECK(cifar10_python_dir(kPy + "py2") == kPy + "py2");
  CHECK_FALSE(has_cifar10_python(kPy + "bin"));
  CHECK(cifar10_python_dir(kPy + "bin").empty());
  cifarnet_test::TempDir dir;
  CHECK(cifar10_python_dir(dir.str()).empty());
  std::filesystem::copy(kPy + "py2", dir.file("cifar-10-batches-py"));
  CHECK(cifar10_python_dir(dir.str()) == dir.file("cifar-10-batches-py"));
}

TEST_CASE("a missing python batch names its file", "[data][cifar][pickle]") {
  cifarnet_test::TempDir dir;
  require_throws_with<IoError>([&] { read_cifar10_python(dir.str(), Split::validation); }, {"data_batch_5"});
}

TEST_CASE("pickles that are not CIFAR batches are refused with the file and the byte offset",
          "[data][cifar][pickle]") {
  // Empty, no STOP, an old protocol, an opcode outside the subset.
  require_throws_with<DataError>([] { parse(""); }, {"'t.pkl' at byte offset 0", "empty"});
  require_throws_with<DataError>([] { parse("\x80\x02}"); }, {"offset 3", "without STOP"});
  require_throws_with<DataError>([] { parse(std::string("\x80\x01}.", 4)); }, {"offset 0", "protocol 1"});
  require_throws_with<DataError>([] { parse("\x80\x02S'x'\n."); }, {"offset 2", "opcode 0x53 ('S')"});
  // A callable other than numpy's and _codecs': never called, named.
  require_throws_with<DataError>([] { parse("\x80\x02\x63os\nsystem\nU\x02ls\x85R."); },
                                 {"offset 18", "REDUCE of os.system"});
  // A length that lies: more bytes than the file has, refused before allocating.
  require_throws_with<DataError>([] { parse(std::string("\x80\x02T\xff\xff\xff\x7f", 7) + "abc."); },
                                 {"offset 2", "needs 2147483647 more bytes, but only 4 remain"});
  require_throws_with<DataError>(
      [] { parse(std::string("\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x01}.", 13)); },
      {"offset 2", "FRAME longer than the rest"});
  // Memo entries that were never stored; stack underflow; nesting.
  require_throws_with<DataError>([] { parse("\x80\x02h\x05."); },
                                 {"offset 2", "memo entry 5 was never stored"});
  require_throws_with<DataError>([] { parse("\x80\x02\x85."); }, {"offset 2", "underflows"});
  require_throws_with<DataError>(
      [] { parse("\x80\x02" + std::string("K\x01") + std::string(40, '\x85') + "."); },
      {"nested more than 32 deep"});
  // Values and copies beyond a few times the file's size: a value per byte,
  // or one memoized 64 KiB str encoded to bytes over and over.
  require_throws_with<DataError>([] { parse("\x80\x02" + std::string(200000, 'N') + "."); },
                                 {"more memory than a few times the file's size"});
  std::string copies =
      "\x80\x02X" + std::string("\x00\x00\x01\x00", 4) + std::string(65536, 'x') + "q\x01]q\x02(";
  for (int k = 0; k < 1000; ++k) copies += "c_codecs\nencode\nh\x01\x8c\x06latin1\x86R";
  require_throws_with<DataError>([&] { parse(copies + "e."); },
                                 {"more memory than a few times the file's size"});
  std::string keys("\x80\x02K\x00q\x01}q\x02(", 10);
  for (int k = 0; k < 300; ++k)
    keys += "U\x02" + std::string{char('a' + k / 26 % 26), char('a' + k % 26)} + "h\x01";
  require_throws_with<DataError>([&] { parse(keys + "u."); }, {"a dict of more than 256 keys"});
  // A list cannot hold a list (so no container can hold itself).
  require_throws_with<DataError>(
      [] {
        parse(
            "\x80\x02]q\x01h\x01"
            "a.");
      },
      {"a list element of kind list"});
  // Well-formed pickles of something else.
  require_throws_with<DataError>([] { parse("\x80\x02]."); }, {"offset 0", "holds a list, not a dict"});
  require_throws_with<DataError>([] { parse("\x80\x02}."); }, {"no 'data' array"});
}

TEST_CASE("a python batch with bad labels or a bad array is refused", "[data][cifar][pickle]") {
  const std::vector<std::uint8_t> good = py2_batch();
  CHECK(parse_cifar10_pickle(good.data(), good.size(), "b").labels == std::vector<std::int32_t>{1, 4});
  auto patched = [&](const std::string& from, const std::string& to) {
    std::string s(good.begin(), good.end());
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    return s;
  };
  // labels [1, 4] -> [1, 12]; -> [1] (one label for two images).
  require_throws_with<DataError>(
      [&] {
        parse(
            patched("(K\x01K\x04"
                    "e",
                    "(K\x01K\x0c"
                    "e"));
      },
      {"label 1 is 12, not in [0, 10)"});
  require_throws_with<DataError>(
      [&] {
        parse(
            patched("(K\x01K\x04"
                    "e",
                    "(K\x01"
                    "e"));
      },
      {"'labels' has 1 entries for 2 images"});
  // dtype u1 -> i8: 2 x 3072 elements of 8 bytes do not fit the data.
  require_throws_with<DataError>([&] { parse(patched("U\x02u1", "U\x02i8")); }, {"but 6144 bytes of data"});
  // shape (2, 3072) -> (3, 2048): as many bytes, but not CIFAR rows.
  require_throws_with<DataError>(
      [&] { parse(patched(std::string("K\x02M\x00\x0c", 5), std::string("K\x03M\x00\x08", 5))); },
      {"not of shape (N, 3072)"});
  // The array's module renamed: an unknown callable.
  require_throws_with<DataError>([&] { parse(patched("numpy.core.multiarray", "numpy.core.multiarrax")); },
                                 {"REDUCE of numpy.core.multiarrax._reconstruct"});
}

TEST_CASE("every truncation and single-byte change of a python batch is refused or read, never a crash",
          "[data][cifar][pickle]") {
  const std::vector<std::uint8_t> good = py2_batch();
  std::size_t refused = 0;
  for (std::size_t n = 0; n < good.size(); ++n) {
    try {
      parse_cifar10_pickle(good.data(), n, "t");
    } catch (const DataError&) {
      ++refused;
    }
  }
  CHECK(refused == good.size());  // a prefix never ends with STOP and a dict
  // Every byte of the opcodes before the pixel data and after it, set to a
  // few values: a DataError or a batch of whole images, nothing else.
  std::size_t read = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    if (i > 400 && i + 400 < good.size()) continue;  // the pixel bytes themselves
    for (const int v : {0x00, 0x01, 0x7f, 0x80, 0xff, int('e'), int('t'), int('h')}) {
      std::vector<std::uint8_t> b = good;
      b[i] = std::uint8_t(v);
      try {
        const ImageSet s = parse_cifar10_pickle(b.data(), b.size(), "t");
        CHECK(s.pixels.size() == s.size() * 3072);
        ++read;
      } catch (const DataError&) {
      }
    }
  }
  CHECK(read > 0);  // e.g. a pixel byte or a label changed within range
}
