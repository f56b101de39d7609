#!/usr/bin/env bash
# cifar10_to_tfrecords on the python batches (ctest:
# data.cifar10_to_tfrecords_python_batches_...): fixtures/cifar10_py/ holds one
# tiny set of 13 images in the binary layout (bin/), as Python 2's cPickle
# wrote the python batches (py2/), and as Python 3's pickle writes them at
# protocols 2 to 5 (py3_protocolN/), plus the .tfrecords the seed's own
# converter (TensorFlow's writer) made from py2/ (tf/); make_cifar10_py.py
# wrote them all. Checks:
#   1. every python variant converts to the same train/validation/eval
#      .tfrecords bytes as the binary set, and those are TensorFlow's bytes;
#   2. --input-format auto finds cifar-10-batches-py/ inside --data-dir (the
#      seed's layout) and reads the python batches; python or binary insist
#      on their layout and name the missing file;
#   3. a corrupt batch is refused naming the file and the byte offset.
# Usage: cifar10_py_to_tfrecords.sh CIFAR10_TO_TFRECORDS FIXTURES WORKDIR
set -uo pipefail
CONVERT=$1 FIX=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
splits=(train validation eval)

"$CONVERT" --data-dir "$FIX/bin" --output-dir "$WORK/bin" --verify >"$WORK/bin.log" 2>&1 ||
  { cat "$WORK/bin.log"; fail "the binary set did not convert"; }
grep -q "Reading the binary set" "$WORK/bin.log" || fail "auto did not read bin/ as the binary set"
for s in "${splits[@]}"; do
  cmp "$WORK/bin/$s.tfrecords" "$FIX/tf/$s.tfrecords" || fail "bin/ $s differs from TensorFlow's"
done
for v in py2 py3_protocol2 py3_protocol3 py3_protocol4 py3_protocol5; do
  "$CONVERT" --data-dir "$FIX/$v" --output-dir "$WORK/$v" --verify >"$WORK/$v.log" 2>&1 ||
    { cat "$WORK/$v.log"; fail "$v did not convert"; }
  grep -q "Reading the python set in $FIX/$v" "$WORK/$v.log" || { cat "$WORK/$v.log"; fail "$v not read as python"; }
  for s in "${splits[@]}"; do
    cmp "$WORK/$v/$s.tfrecords" "$WORK/bin/$s.tfrecords" || fail "$v: $s.tfrecords differs from the binary set's"
  done
  echo "$v: train, validation and eval .tfrecords identical to the binary set's and TensorFlow's"
done

# The seed's layout: --data-dir holding cifar-10-batches-py/ (and the binary set too).
mkdir -p "$WORK/holder"
cp -r "$FIX/py3_protocol2" "$WORK/holder/cifar-10-batches-py"
cp -r "$FIX/bin" "$WORK/holder/cifar-10-batches-bin"
"$CONVERT" --data-dir "$WORK/holder" --output-dir "$WORK/auto" --splits train_all >"$WORK/auto.log" 2>&1 ||
  { cat "$WORK/auto.log"; fail "--data-dir holding cifar-10-batches-py/ did not convert"; }
grep -q "Reading the python set in $WORK/holder/cifar-10-batches-py" "$WORK/auto.log" ||
  { cat "$WORK/auto.log"; fail "auto did not prefer the python batches"; }
"$CONVERT" --data-dir "$WORK/holder" --input-format binary --output-dir "$WORK/forced" --splits train_all \
  >"$WORK/forced.log" 2>&1 || { cat "$WORK/forced.log"; fail "--input-format binary did not convert"; }
grep -q "Reading the binary set in $WORK/holder/cifar-10-batches-bin" "$WORK/forced.log" ||
  fail "--input-format binary did not read the binary set"
cmp "$WORK/auto/train_all.tfrecords" "$WORK/forced/train_all.tfrecords" || fail "train_all differs"
"$CONVERT" --data-dir "$FIX/bin" --input-format python --output-dir "$WORK/none" >"$WORK/none.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "--input-format python on the binary set exited $rc"
grep -q "cannot open '$FIX/bin/data_batch_1'" "$WORK/none.log" || { cat "$WORK/none.log"; fail "no missing-file message"; }

"$CONVERT" --download --data-dir "$WORK/dl" --input-format python --output-dir "$WORK/none" >"$WORK/dl.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "--download --input-format python exited $rc"
grep -q "^--download fetches the binary set; it cannot be read with --input-format python$" "$WORK/dl.log" ||
  { cat "$WORK/dl.log"; fail "no message for --download with --input-format python"; }
[ ! -e "$WORK/dl" ] || fail "--download --input-format python created its --data-dir"

# A batch cut short inside its data string: the file and the offset.
mkdir -p "$WORK/cut"
cp "$FIX"/py2/* "$WORK/cut/"
head -c 3000 "$FIX/py2/data_batch_5" >"$WORK/cut/data_batch_5"
"$CONVERT" --data-dir "$WORK/cut" --output-dir "$WORK/cut_out" --splits validation >"$WORK/cut.log" 2>&1
rc=$?
cat "$WORK/cut.log"
[ $rc -eq 1 ] || fail "a truncated batch exited $rc"
grep -q "file '$WORK/cut/data_batch_5' at byte offset [0-9]*: the opcode needs 6144 more bytes" "$WORK/cut.log" ||
  fail "the truncated batch was not named with its offset"
echo PASS
