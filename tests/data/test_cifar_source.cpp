// Tests of Cifar10Source and detect_cifar10_format (data/sources.hpp): a
// directory of the binary files and one of the seed's .tfrecords files
// written from them (as cifar10_to_tfrecords does) are told apart, and the
// ResNet input pipeline gives the same batches from either for one seed.
#include <catch2/catch.hpp>

#include <cifarnet/data/cifar.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/data/sources.hpp>
#include <cifarnet/data/tfrecord.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "data_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::data;
using cifarnet_test::require_throws_with;
using cifarnet_test::TempDir;

namespace {

/// Writes <out>/<split>.tfrecords for train, validation and eval from the
/// binary set in `bin`, as cifar10_to_tfrecords does.
void convert(const std::string& bin, const std::string& out) {
  for (const Split s : {Split::train, Split::validation, Split::eval})
    write_cifar_tfrecords(read_cifar10(bin, s), out + "/" + to_string(s) + ".tfrecords");
}

template <class Pipe>
std::vector<Batch> first_batches(Pipe& p, int n) {
  std::vector<Batch> out(static_cast<std::size_t>(n));
  for (auto& b : out) REQUIRE(p.next(b));
  return out;
}

void require_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("batch " << i);
    REQUIRE(a[i].labels == b[i].labels);
    REQUIRE(a[i].images.shape() == b[i].images.shape());
    REQUIRE(std::equal(a[i].images.data(), a[i].images.data() + a[i].images.size(), b[i].images.data()));
  }
}

}  // namespace

TEST_CASE("detect_cifar10_format tells the binary files from the seed's TFRecord files", "[data][source]") {
  TempDir bin, tf, empty;
  cifarnet_test::write_cifar10_dir(bin, 4);
  convert(bin.str(), tf.str());
  CHECK(detect_cifar10_format(bin.str()) == Cifar10Format::binary);
  CHECK(detect_cifar10_format(tf.str()) == Cifar10Format::tfrecords);
  CHECK(parse_cifar10_format("tfrecords") == Cifar10Format::tfrecords);
  CHECK(parse_cifar10_format("auto") == Cifar10Format::automatic);
  CHECK_THROWS_AS(parse_cifar10_format("pickle"), ConfigError);

  SECTION("an empty directory: what was looked for") {
    require_throws_with<IoError>([&] { detect_cifar10_format(empty.str()); },
                                 {"no CIFAR-10 data in '" + empty.str() + "'", "data_batch_1.bin",
                                  "train.tfrecords, validation.tfrecords, eval.tfrecords"});
  }
  SECTION("only some .tfrecords files: which are missing") {
    std::filesystem::remove(tf.file("eval.tfrecords"));
    require_throws_with<IoError>(
        [&] { detect_cifar10_format(tf.str()); },
        {tf.str(), "holds train.tfrecords, validation.tfrecords but not eval.tfrecords"});
  }
  SECTION("both forms in one directory: the TFRecord files") {
    convert(bin.str(), bin.str());
    CHECK(detect_cifar10_format(bin.str()) == Cifar10Format::tfrecords);
    CHECK(Cifar10Source(bin.str(), Split::train, Cifar10Format::binary).description().find("binary files") ==
          0);
  }
  SECTION("the binary files one level down, where the tarball unpacks") {
    const std::string sub = empty.file(kCifar10BinDir);
    std::filesystem::copy(bin.str(), sub);
    CHECK(cifar10_binary_dir(empty.str()) == sub);
    CHECK(detect_cifar10_format(empty.str()) == Cifar10Format::binary);
    const Cifar10Source s(empty.str(), Split::eval);
    CHECK(s.size() == 4);
    CHECK(s.description() == "binary files test_batch.bin in " + sub);
  }
}

TEST_CASE("the ResNet pipeline gives the same batches from the TFRecord files as from the binary files",
          "[data][source]") {
  TempDir bin, tf;
  cifarnet_test::write_cifar10_dir(bin, 12);  // 48 training, 12 validation, 12 eval images
  convert(bin.str(), tf.str());

  const auto from_tf = std::make_shared<const Cifar10Source>(tf.str(), Split::train);
  const auto from_bin = std::make_shared<const Cifar10Source>(bin.str(), Split::train);
  REQUIRE(from_tf->tfrecords());
  REQUIRE_FALSE(from_bin->tfrecords());
  CHECK(from_tf->description() == "TFRecord files " + tf.str() + "/train.tfrecords");
  REQUIRE(from_tf->size() == 48);
  REQUIRE(from_bin->size() == 48);

  // Training: shuffle buffer, pad-crop and flip, as resnet_cifar10 runs it.
  const PipelineOptions po = recipes::resnet_train_options(/*seed=*/5, /*batch_size=*/8);
  recipes::ResNetTrainT<Cifar10Source> tf_pipe(from_tf, po), bin_pipe(from_bin, po);
  recipes::ResNetTrain reference(Cifar10Binary(bin.str(), Split::train), po);  // the binary path as before
  const auto tf_batches = first_batches(tf_pipe, 7);                           // past one epoch (6 batches)
  require_same(tf_batches, first_batches(bin_pipe, 7));
  require_same(tf_batches, first_batches(reference, 7));
  // Not vacuous: the batches hold varied labels and pixels, and another seed
  // gives another first batch.
  const auto& l = tf_batches[0].labels;
  CHECK(std::count(l.begin(), l.end(), l[0]) < static_cast<long>(l.size()));
  PipelineOptions other = po;
  other.seed = 6;
  recipes::ResNetTrainT<Cifar10Source> tf_other(from_tf, other);
  Batch b;
  REQUIRE(tf_other.next(b));
  CHECK_FALSE(std::equal(b.images.data(), b.images.data() + b.images.size(), tf_batches[0].images.data()));

  // Evaluation: eval.tfrecords against test_batch.bin, in file order.
  PipelineOptions eo = recipes::resnet_eval_options(5);
  recipes::ResNetEvalT<Cifar10Source> tf_eval(std::make_shared<const Cifar10Source>(tf.str(), Split::eval),
                                              eo);
  recipes::ResNetEvalT<Cifar10Source> bin_eval(std::make_shared<const Cifar10Source>(bin.str(), Split::eval),
                                               eo);
  require_same(first_batches(tf_eval, 3), first_batches(bin_eval, 3));

  // train_all: train.tfrecords then validation.tfrecords, as batches 1-5.
  const Cifar10Source all_tf(tf.str(), Split::train_all), all_bin(bin.str(), Split::train_all);
  REQUIRE(all_tf.size() == 60);
  std::vector<float> x(3072), y(3072);
  for (std::size_t i : {std::size_t(0), std::size_t(47), std::size_t(48), std::size_t(59)}) {
    CHECK(all_tf.decode(i, x.data()) == all_bin.decode(i, y.data()));
    CHECK(x == y);
  }
}

TEST_CASE("Cifar10Source names the file when the TFRecord form is asked for and missing", "[data][source]") {
  TempDir bin;
  cifarnet_test::write_cifar10_dir(bin, 2);
  require_throws_with<IoError>([&] { Cifar10Source(bin.str(), Split::train, Cifar10Format::tfrecords); },
                               {bin.str() + "/train.tfrecords"});
}

TEST_CASE("a CIFAR file without examples is a DataError naming it, in either form",
          "[data][source][errors]") {
  TempDir bin;
  cifarnet_test::write_cifar10_dir(bin, 2);
  TempDir tf;
  convert(bin.str(), tf.str());
  const std::string train = tf.str() + "/train.tfrecords";
  // The set as written reads (so the errors below come from the empty file).
  CHECK(Cifar10Source(tf.str(), Split::train).size() == 8);
  CHECK(read_cifar_tfrecords({train}).size() == 8);
  cifarnet_test::write_bytes(train, {});
  const std::vector<std::string> says{"no examples in '" + train + "'", "the file is empty (0 bytes)"};
  require_throws_with<DataError>([&] { Cifar10Source(tf.str(), Split::train); }, says);
  require_throws_with<DataError>([&] { TfRecordSource({tf.str() + "/validation.tfrecords", train}); }, says);
  require_throws_with<DataError>([&] { read_cifar_tfrecords({train}); }, says);
  // train_all reads train.tfrecords too; eval does not.
  require_throws_with<DataError>([&] { Cifar10Source(tf.str(), Split::train_all); }, says);
  CHECK(Cifar10Source(tf.str(), Split::eval).size() == 2);
  // The binary form: an empty batch file.
  const std::string batch3 = bin.str() + "/data_batch_3.bin";
  cifarnet_test::write_bytes(batch3, {});
  require_throws_with<DataError>([&] { Cifar10Source(bin.str(), Split::train); },
                                 {"no examples in '" + batch3 + "'", "the file is empty (0 bytes"});
}
