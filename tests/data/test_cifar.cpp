// Tests of cifarnet/data/cifar.hpp and image.hpp on small generated files.
#include <catch2/catch.hpp>

#include <cifarnet/data/cifar.hpp>
#include <cifarnet/data/image.hpp>

#include "data_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::data;
using cifarnet_test::pattern_byte;
using cifarnet_test::require_throws_with;
using cifarnet_test::TempDir;

TEST_CASE("a CIFAR-10 batch file is read record by record with labels and CHW pixels", "[data][cifar]") {
  TempDir dir;
  const std::string path = dir.file("b.bin");
  cifarnet_test::write_bytes(path, cifarnet_test::cifar10_records({3, 0, 9}));
  const ImageSet s = read_cifar10_file(path);
  REQUIRE(s.size() == 3);
  CHECK(s.geometry == ImageGeometry{32, 32, 3});
  CHECK(s.num_classes == 10);
  CHECK(s.labels == std::vector<std::int32_t>{3, 0, 9});
  REQUIRE(s.pixels.size() == 3 * 3072);
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t j : {0u, 1u, 1023u, 1024u, 2047u, 2048u, 3071u})
      CHECK(s.image(r)[j] == pattern_byte(r, j));
}

TEST_CASE("the CIFAR-10 splits read the files the seed assigns and count examples from them",
          "[data][cifar]") {
  TempDir dir;
  cifarnet_test::write_cifar10_dir(dir, 4);
  const ImageSet train = read_cifar10(dir.str(), Split::train);
  const ImageSet validation = read_cifar10(dir.str(), Split::validation);
  const ImageSet eval = read_cifar10(dir.str(), Split::eval);
  const ImageSet all = read_cifar10(dir.str(), Split::train_all);
  CHECK(train.size() == 16);
  CHECK(validation.size() == 4);
  CHECK(eval.size() == 4);
  CHECK(all.size() == 20);
  // record numbering runs across batches 1..5 then the test batch
  CHECK(train.image(5)[7] == pattern_byte(5, 7));
  CHECK(validation.image(0)[7] == pattern_byte(16, 7));
  CHECK(eval.image(3)[3000] == pattern_byte(23, 3000));
  CHECK(all.image(19)[100] == pattern_byte(19, 100));
  CHECK(validation.labels[0] == (4 * 3 + 0) % 10);
  CHECK(train.class_names.size() == 10);
  CHECK(train.class_names[0] == "airplane");
  CHECK(train.class_names[9] == "truck");
  CHECK(parse_split("validation") == Split::validation);
  CHECK(parse_split("test") == Split::eval);
  CHECK_THROWS_AS(parse_split("dev"), ConfigError);
  CHECK(std::string(to_string(Split::train_all)) == "train_all");
}

TEST_CASE("without batches.meta.txt the standard class names are used, and a wrong one is an error",
          "[data][cifar]") {
  TempDir dir;
  cifarnet_test::write_cifar10_dir(dir, 1, /*with_meta=*/false);
  CHECK(read_cifar10(dir.str(), Split::eval).class_names == cifar10_default_class_names());
  {
    std::ofstream m(dir.file("batches.meta.txt"));
    m << "a\r\nb\r\n";
  }
  CHECK(read_class_names(dir.file("batches.meta.txt")) == std::vector<std::string>{"a", "b"});
  require_throws_with<DataError>([&] { read_cifar10(dir.str(), Split::eval); },
                                 {"batches.meta.txt", "expected 10 class names, found 2"});
}

TEST_CASE("a missing CIFAR file is an IoError naming the file", "[data][cifar][errors]") {
  TempDir dir;
  cifarnet_test::write_cifar10_dir(dir, 1);
  std::filesystem::remove(dir.file("data_batch_3.bin"));
  require_throws_with<IoError>([&] { read_cifar10(dir.str(), Split::train); },
                               {"data_batch_3.bin", "cannot open"});
  CHECK_NOTHROW(read_cifar10(dir.str(), Split::validation));
}

TEST_CASE("a CIFAR file whose size is not a whole number of records names the file and offset",
          "[data][cifar][errors]") {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  auto bytes = cifarnet_test::cifar10_records({1, 2});
  bytes.resize(bytes.size() - 100);  // 2nd record truncated: 6146 - 100 bytes
  cifarnet_test::write_bytes(path, bytes);
  require_throws_with<DataError>([&] { read_cifar10_file(path); },
                                 {"t.bin", "byte offset 3073", "not a multiple of the record size 3073"});
  cifarnet_test::write_bytes(path, {});
  require_throws_with<DataError>([&] { read_cifar10_file(path); },
                                 {"no examples in '" + path + "'", "the file is empty (0 bytes"});
}

TEST_CASE("a CIFAR label out of range names the file and the label byte's offset", "[data][cifar][errors]") {
  TempDir dir;
  const std::string path = dir.file("l.bin");
  cifarnet_test::write_bytes(path, cifarnet_test::cifar10_records({1, 2, 10}));
  require_throws_with<DataError>([&] { read_cifar10_file(path); },
                                 {"l.bin", "byte offset 6146", "label 10 out of range [0, 10)"});
}

TEST_CASE("CIFAR-100 records carry a coarse and a fine label", "[data][cifar100]") {
  TempDir dir;
  cifarnet_test::write_bytes(dir.file("train.bin"), cifarnet_test::cifar100_records({19, 0, 7}, {99, 5, 42}));
  cifarnet_test::write_bytes(dir.file("test.bin"), cifarnet_test::cifar100_records({1}, {2}));
  const ImageSet train = read_cifar100(dir.str(), Split::train);
  REQUIRE(train.size() == 3);
  CHECK(train.num_classes == 100);
  CHECK(train.labels == std::vector<std::int32_t>{99, 5, 42});
  CHECK(train.coarse_labels == std::vector<std::int32_t>{19, 0, 7});
  CHECK(train.image(2)[2048] == pattern_byte(2, 2048));
  CHECK(read_cifar100(dir.str(), Split::train_all).size() == 3);
  CHECK(read_cifar100(dir.str(), Split::eval).labels == std::vector<std::int32_t>{2});
  require_throws_with<ConfigError>([&] { read_cifar100(dir.str(), Split::validation); }, {"validation"});
}

TEST_CASE("CIFAR-100 errors name the file and the offset of the bad byte", "[data][cifar100][errors]") {
  TempDir dir;
  const std::string path = dir.file("train.bin");
  cifarnet_test::write_bytes(path, cifarnet_test::cifar100_records({0, 20}, {0, 0}));
  require_throws_with<DataError>([&] { read_cifar100_file(path); },
                                 {"train.bin", "byte offset 3074", "coarse label 20 out of range [0, 20)"});
  cifarnet_test::write_bytes(path, cifarnet_test::cifar100_records({0, 0}, {0, 100}));
  require_throws_with<DataError>([&] { read_cifar100_file(path); },
                                 {"train.bin", "byte offset 3075", "label 100 out of range [0, 100)"});
  auto bytes = cifarnet_test::cifar100_records({0}, {0});
  bytes.push_back(1);
  cifarnet_test::write_bytes(path, bytes);
  require_throws_with<DataError>([&] { read_cifar100_file(path); },
                                 {"train.bin", "byte offset 3074", "record size 3074"});
  require_throws_with<IoError>([&] { read_cifar100(dir.str(), Split::eval); }, {"test.bin", "cannot open"});
}

TEST_CASE("uint8 CHW images convert to float HWC once, channel by channel", "[data][image]") {
  const ImageGeometry g{2, 3, 2};  // 2 rows, 3 columns, 2 channels
  const std::vector<std::uint8_t> chw = {0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 255};
  Image img;
  decode_chw_to_hwc(chw.data(), g, img);
  REQUIRE(img.size() == 12);
  CHECK(img.at(0, 0, 0) == 0.0f);
  CHECK(img.at(0, 0, 1) == 100.0f);
  CHECK(img.at(0, 2, 0) == 2.0f);
  CHECK(img.at(1, 2, 1) == 255.0f);
  CHECK(img.at(1, 0, 1) == 103.0f);
  // the unrolled 3-channel path agrees with the general one
  std::vector<std::uint8_t> rgb(2 * 2 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 20);
  Image a;
  decode_chw_to_hwc(rgb.data(), ImageGeometry{2, 2, 3}, a);
  for (std::size_t y = 0; y < 2; ++y)
    for (std::size_t x = 0; x < 2; ++x)
      for (std::size_t c = 0; c < 3; ++c) CHECK(a.at(y, x, c) == float(rgb[c * 4 + y * 2 + x]));
}
