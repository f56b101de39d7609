// cifar10_to_tfrecords — converts the CIFAR-10 python or binary set into the
// three TFRecord files the ResNet seed trains from (its
// generate_cifar10_tfrecords.py, which reads the python batches):
//
//   train.tfrecords       data_batch_1..4   (40,000 examples)
//   validation.tfrecords  data_batch_5      (10,000)
//   eval.tfrecords        test_batch        (10,000)
//
// Each record is a tf.train.Example with 'image' = the 3,072 raw bytes (CHW,
// as in the binary files and in each row of the python batches' data array)
// and 'label' = int64, exactly what TensorFlow writes (see docs/DATA.md): the
// python and the binary set of the same images give the same bytes. Usage:
//
//   cifar10_to_tfrecords --data-dir /data/cifar-10-batches-py --output-dir /tmp/cifar10
//   cifar10_to_tfrecords --data-dir /data/cifar-10-batches-bin --output-dir /tmp/cifar10
//   cifar10_to_tfrecords --data-dir ... --output-dir ... --splits train_all --verify
//   cifar10_to_tfrecords --download --data-dir /tmp/cifar10_data --output-dir /tmp/cifar10
//
// --data-dir may also be a directory holding cifar-10-batches-py/ (the
// seed's layout) or cifar-10-batches-bin/ (where --download unpacks the
// binary tarball). --input-format auto (the default) reads the python
// batches (data/cifar_pickle.hpp) when they are there, as the seed does, and
// the binary files otherwise; python or binary insists on one.
// resnet_cifar10 --data-dir <output-dir> then trains on the .tfrecords files.
#include <cifarnet/data/cifar.hpp>
#include <cifarnet/data/cifar_pickle.hpp>
#include <cifarnet/data/tfrecord.hpp>

#include <CLI/CLI.hpp>

#include "../common/cifar10_download.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace data = cifarnet::data;

int main(int argc, char** argv) {
  CLI::App app{"Convert the CIFAR-10 python or binary set into train/validation/eval .tfrecords files"};
  std::string data_dir, output_dir, input_format = "auto";
  std::vector<std::string> splits = {"train", "validation", "eval"};
  bool verify = false;
  examples::DownloadFlags download;
  app.add_option(
         "--data-dir", data_dir,
         "the cifar-10-batches-py or cifar-10-batches-bin directory, or a directory holding one (--download: "
         "where to put the binary set)")
      ->required();
  app.add_option(
         "--input-format", input_format,
         "python (the seed's pickled batches), binary, or auto: python when --data-dir holds the python "
         "batches, else binary")
      ->check(CLI::IsMember({"auto", "python", "binary"}));
  examples::add_download_flags(app, download, "--data-dir");
  app.add_option("--output-dir", output_dir, "where to write <split>.tfrecords")->required();
  app.add_option("--splits", splits, "splits to write: train, validation, eval, train_all")->delimiter(',');
  app.add_flag("--verify", verify, "read every file back and compare it with the input set");
  CLI11_PARSE(app, argc, argv);

  if (download.download && input_format == "python") {
    std::fprintf(stderr, "--download fetches the binary set; it cannot be read with --input-format python\n");
    return 2;
  }
  try {
    examples::validate_download(download, data_dir);
  } catch (const cifarnet::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  try {
    examples::download_if_asked(download, data_dir, std::cout);
    // The python batches when asked for, or (auto) when they are there.
    std::string py_dir = data::cifar10_python_dir(data_dir);
    const bool python = input_format == "python" || (input_format == "auto" && !py_dir.empty());
    if (python && py_dir.empty()) py_dir = data_dir;  // the reader names the missing file
    const std::string in_dir = python ? py_dir : data::cifar10_binary_dir(data_dir);
    std::printf("Reading the %s set in %s\n", python ? "python" : "binary", in_dir.c_str());
    std::filesystem::create_directories(output_dir);
    for (const auto& name : splits) {
      const data::Split split = data::parse_split(name);
      const auto t0 = std::chrono::steady_clock::now();
      // 1. Read the split's batch files (sizes counted from the files).
      const data::ImageSet set =
          python ? data::read_cifar10_python(in_dir, split) : data::read_cifar10(in_dir, split);
      // 2. Write one Example per image, in file order, as the seed does.
      const std::string out = (std::filesystem::path(output_dir) / (name + ".tfrecords")).string();
      std::printf("Generating %s (%zu examples)\n", out.c_str(), set.size());
      data::write_cifar_tfrecords(set, out);
      // 3. Optionally read it back through the checked reader.
      if (verify) {
        const data::ImageSet back = data::read_cifar_tfrecords({out});
        if (back.labels != set.labels || back.pixels != set.pixels) {
          std::fprintf(stderr, "verification failed: %s differs from the input set\n", out.c_str());
          return 1;
        }
        std::printf("  verified %zu examples\n", back.size());
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  %.2f s, %llu bytes\n", s,
                  static_cast<unsigned long long>(std::filesystem::file_size(out)));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("Done!\n");
  return 0;
}
