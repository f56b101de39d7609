// examples/common/cifar10_help.hpp — what the CIFAR-10 programs say when
// --data-dir is missing or wrong: where the files must be and how to get
// them.
#pragma once

#include <string>

#include <cifarnet/data/cifar.hpp>

namespace examples {

/// The layout CIFAR-10 is expected in and how to get it, for a program whose
/// data directory flag is `data_dir_flag`; `tfrecords`: the program also
/// reads the seed's .tfrecords files; `download`: how to ask the program to
/// fetch the data.
inline std::string how_to_get_cifar10(const std::string& data_dir_flag, bool tfrecords,
                                      const std::string& download = "--download") {
  return std::string(
             "CIFAR-10 (binary version) is expected in a directory holding data_batch_1.bin ... "
             "data_batch_5.bin\nand test_batch.bin (10,000 records of 3,073 bytes each: a label byte, then "
             "1,024 red, 1,024 green\nand 1,024 blue bytes), or holding that cifar-10-batches-bin/ "
             "directory") +
         (tfrecords ? ",\nor holding train.tfrecords, validation.tfrecords and eval.tfrecords "
                      "(cifar10_to_tfrecords)"
                    : "") +
         ". " + download + " fetches\n" + cifarnet::data::kCifar10Url + " into " + data_dir_flag +
         " and unpacks it there\n(or by hand: tar xzf cifar-10-binary.tar.gz  ->  cifar-10-batches-bin/).\n";
}

}  // namespace examples
