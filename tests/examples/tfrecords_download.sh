#!/usr/bin/env bash
# tests/examples/tfrecords_download.sh — --download and the TFRecord input
# end to end, with a file:// URL to a tarball of a tiny data set built here:
#   tfrecords_download.sh <make_tiny_cifar> <cifar10_to_tfrecords> <resnet_cifar10> <cifar10_train> <work_dir>
# 1. cifar10_to_tfrecords --download fetches and unpacks the tarball (its
#    own size and MD5 given) and writes train/validation/eval.tfrecords;
# 2. resnet_cifar10 trains 2 steps on the .tfrecords files and, with the same
#    seed, on the binary files: the same loss at step 1 and the same
#    evaluation after step 2, so the same batches (data/sources.hpp's
#    Cifar10Source; tests/data/test_cifar_source.cpp compares the batches
#    themselves);
# 3. --download again with the URL gone: nothing fetched, the data are there;
# 4. a wrong MD5: a clear error naming the URL, nothing left behind.
set -u
source "$(dirname "$0")/smoke_lib.sh"
[ $# -eq 5 ] || fail "usage: tfrecords_download.sh <make_tiny_cifar> <cifar10_to_tfrecords> <resnet_cifar10> <cifar10_train> <work_dir>"
make_tiny=$1 to_tfrecords=$2 resnet=$3 train=$4 work=$5
rm -rf "$work" && mkdir -p "$work/src" || fail "cannot create $work"

run "$work/make.log" "$make_tiny" "$work/src/cifar-10-batches-bin" 64 100 || fail "make_tiny_cifar exited with $?"
tar czf "$work/src/tiny.tar.gz" -C "$work/src" cifar-10-batches-bin || fail "tar exited with $?"
md5=$(md5sum "$work/src/tiny.tar.gz" | cut -d' ' -f1)
bytes=$(stat -c %s "$work/src/tiny.tar.gz")
url="file://$work/src/tiny.tar.gz"
dl=(--data-url "$url" --data-md5 "$md5" --data-bytes "$bytes")

# 1. Download, unpack, convert.
run "$work/convert.log" "$to_tfrecords" --download "${dl[@]}" --data-dir "$work/data" --output-dir "$work/tf" --verify ||
  fail "cifar10_to_tfrecords exited with $?"
need "$work/convert.log" "^>> Downloading $url to $work/data/tiny.tar.gz$" "the download"
need "$work/convert.log" "^>> Downloaded $work/data/tiny.tar.gz, $bytes bytes, MD5 $md5$" "the verified tarball"
need "$work/convert.log" "^CIFAR-10 is in $work/data/cifar-10-batches-bin$" "the unpacked set"
need "$work/convert.log" "^Generating $work/tf/train.tfrecords \(256 examples\)$" "train.tfrecords (batches 1-4)"
need "$work/convert.log" "^Generating $work/tf/validation.tfrecords \(64 examples\)$" "validation.tfrecords (batch 5)"
need "$work/convert.log" "^Generating $work/tf/eval.tfrecords \(100 examples\)$" "eval.tfrecords (test batch)"
need "$work/convert.log" "^  verified 100 examples$" "the read-back check"
leftover=$(ls -A "$work/data" | grep -v -x -e tiny.tar.gz -e cifar-10-batches-bin)
[ -z "$leftover" ] || fail "temporary files left in $work/data: $leftover"

# 2. The same run from the .tfrecords files and from the binary files.
args=(--num-gpus 0 --num-layers 8 --train-batch-size 16 --eval-batch-size 50 --data-format channels_last
  --seed 3 --train-steps 2)
run "$work/tf.log" "$resnet" "${args[@]}" --job-dir "$work/job_tf" --data-dir "$work/tf" ||
  fail "resnet_cifar10 on the .tfrecords files exited with $?"
need "$work/tf.log" "^Reading TFRecord files $work/tf/train.tfrecords; evaluating on TFRecord files $work/tf/eval.tfrecords$" "the TFRecord input"
need "$work/tf.log" "^ResNet-8 .*CIFAR-10 split 'train' \(TFRecord files\) \(256 training examples, 100 eval\)" "the model line"
run "$work/bin.log" "$resnet" "${args[@]}" --job-dir "$work/job_bin" --data-dir "$work/data" ||
  fail "resnet_cifar10 on the binary files exited with $?"
need "$work/bin.log" "^Reading binary files data_batch_1.bin, .*data_batch_4.bin in $work/data/cifar-10-batches-bin;" "the binary input"
for pattern in '^step = 1, loss = [0-9.]+' '^accuracy = .*'; do
  a=$(grep -Eo "$pattern" "$work/tf.log" | head -n 1)
  b=$(grep -Eo "$pattern" "$work/bin.log" | head -n 1)
  [ -n "$a" ] || fail "no line /$pattern/ in $work/tf.log"
  [ "$a" = "$b" ] || fail "TFRecord and binary runs differ: '$a' vs '$b'"
  echo "same: $a"
done

# 3. Already there: nothing fetched (the URL is gone).
mv "$work/src/tiny.tar.gz" "$work/src/moved.tar.gz"
run "$work/again.log" "$train" --download --data_url "$url" --data_md5 "$md5" --data_bytes "$bytes" \
  --data_dir "$work/data" --train_dir "$work/cnn" --max_steps 2 --batch_size 16 --log_frequency 1 ||
  fail "cifar10_train --download with the data present exited with $?"
need "$work/again.log" "^CIFAR-10 is already in $work/data/cifar-10-batches-bin: not downloading$" "the skip"
grep -q '^>> Downloading' "$work/again.log" && fail "it downloaded again"
need "$work/again.log" 'step 2, loss = ' "training on the data"

# 4. A wrong checksum: exit 1, the URL and both MD5s named, nothing left.
mv "$work/src/moved.tar.gz" "$work/src/tiny.tar.gz"
"$resnet" --job-dir "$work/job_bad" --num-gpus 0 --download --data-url "$url" --data-md5 00000000000000000000000000000000 \
  --data-bytes "$bytes" --data-dir "$work/bad" >"$work/bad.log" 2>&1
status=$?
cat "$work/bad.log"
[ $status -eq 1 ] || fail "a wrong MD5: exit status $status, expected 1"
need "$work/bad.log" "download of $url: MD5 $md5, expected 00000000000000000000000000000000" "the checksum error"
[ -z "$(ls -A "$work/bad")" ] || fail "files left in $work/bad: $(ls -A "$work/bad")"
echo "PASS"
