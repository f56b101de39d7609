#!/usr/bin/env bash
# tests/examples/smoke_cifar10_cnn.sh — a user's first session with the
# tutorial programs, on a tiny data set in the CIFAR-10 binary layout:
#   smoke_cifar10_cnn.sh <cifar10_train> <cifar10_eval> <negate_checkpoint_tensors> <data_dir> <work_dir>
# 1. cifar10_train for 20 steps: the tutorial's log lines, a checkpoint at
#    step 20 and an event file;
# 2. cifar10_train again to step 400: it resumes at step 20 (not from 0), the
#    loss has fallen (this net at lr 0.1, with the seed's conv stddev 1e-4,
#    plateaus for ~200 steps on the tiny set: 4.32 at step 200, 3.15 at 300
#    on a 2-core EPYC; how long depends on the CPU's rounding, hence 400
#    steps), the summaries are written.
#    Batch 32, not 16: at batch 16 the run diverged at step ~135 on a 2-core
#    AVX2 EPYC (deterministically, before and after any change of ours),
#    while the tutorial has no learning-rate flag to lower instead;
# 3. cifar10_eval --run_once: precision @ 1 of the moving-average weights,
#    above chance, and its summary; --eval_data train_eval --num_examples;
# 4. the weights it evaluates are the moving averages: with softmax_linear's
#    raw weights and biases negated in the checkpoint (raw predictions turned
#    around) the precision is the same to the last image, with their moving
#    averages negated instead it falls;
# 5. cifar10_eval in its loop: the one checkpoint is evaluated once, not again.
set -u
source "$(dirname "$0")/smoke_lib.sh"
[ $# -eq 5 ] ||
  fail "usage: smoke_cifar10_cnn.sh <cifar10_train> <cifar10_eval> <negate_checkpoint_tensors> <data_dir> <work_dir>"
train=$1 eval=$2 negate=$3 data=$4 work=$5
rm -rf "$work" && mkdir -p "$work" || fail "cannot create $work"
ckpt=$work/train
args=(--data_dir "$data" --train_dir "$ckpt" --batch_size 32 --log_frequency 5 --seed 1)

run "$work/train1.log" "$train" "${args[@]}" --max_steps 20 || fail "the first training run exited with $?"
need "$work/train1.log" '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}: step 20, loss = [0-9]+\.[0-9]{2} \([0-9.]+ examples/sec; [0-9.]+ sec/batch\)$' \
  "the tutorial's log line at step 20"
need "$work/train1.log" "^Saved checkpoint $ckpt/model.ckpt-20.safetensors$" "a checkpoint at step 20"
[ -s "$ckpt/model.ckpt-20.safetensors" ] || fail "model.ckpt-20.safetensors is missing"
grep -q '^model_checkpoint_path: "model.ckpt-20.safetensors"$' "$ckpt/checkpoint" || fail "the checkpoint index does not name step 20"
ls "$ckpt"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file in $ckpt"
# the mean of the losses logged at steps 5..20, and later at steps 385..400
first=$(mean_at "$work/train1.log" '^.*: step [0-9]+, loss = ([0-9.]+) .*$')

run "$work/train2.log" "$train" "${args[@]}" --max_steps 400 || fail "the resumed training run exited with $?"
need "$work/train2.log" "^Restored $ckpt/model.ckpt-20.safetensors \(global step 20\)$" "a restore of step 20"
grep -Eq ': step (5|10|15|20), ' "$work/train2.log" && fail "the resumed run trained steps 1..20 again"
need "$work/train2.log" ': step 25, loss = ' "a log line at step 25"
need "$work/train2.log" '^Trained steps 20\.\.400 in ' "training from step 20 to 400"
last=$(mean_at "$work/train2.log" '^.*: step (38[5-9]|39[0-9]|400), loss = ([0-9.]+) .*$' 2)
less "$last" "$first" 0.3 || fail "the loss did not fall: mean $first over steps 5..20, $last over steps 385..400"
echo "mean loss: $first over steps 5..20, $last over steps 385..400"
[ -s "$ckpt/model.ckpt-400.safetensors" ] || fail "model.ckpt-400.safetensors is missing"
# The tutorial's activation summaries (through the network's taps) and its
# input images are there too.
for tag in 'cross_entropy (raw)' 'total_loss' 'learning_rate' 'local3/weights/gradients' 'conv1/activations' \
  'conv1/sparsity' 'local4/sparsity' 'softmax_linear/activations' 'images/image/0' 'images/image/2'; do
  cat "$ckpt"/events.out.tfevents.* | grep -aqF "$tag" || fail "no summary '$tag' in the event files"
done

run "$work/eval.log" "$eval" --data_dir "$data" --checkpoint_dir "$ckpt" --eval_dir "$work/eval" --run_once ||
  fail "cifar10_eval exited with $?"
need "$work/eval.log" "^[0-9-]+ [0-9:.]+: precision @ 1 = 0\.[0-9]{3} \([0-9]+/200 correct; $ckpt/model.ckpt-400.safetensors, global step 400;" \
  "the precision line for step 400 over the 200 test images"
precision=$(number_at "$work/eval.log" '^.*precision @ 1 = ([0-9.]+) .*$')
less 0.15 "$precision" 0 || fail "precision @ 1 = $precision is not above chance (0.1) after 400 steps"
cat "$work"/eval/events.out.tfevents.* | grep -aqF 'Precision @ 1' || fail "no 'Precision @ 1' summary in $work/eval"

run "$work/eval_train.log" "$eval" --data_dir "$data" --checkpoint_dir "$ckpt" --eval_dir "$work/eval" --run_once \
  --eval_data train_eval --num_examples 100 --batch_size 32 || fail "cifar10_eval --eval_data train_eval exited with $?"
need "$work/eval_train.log" 'precision @ 1 = 0\.[0-9]{3} \([0-9]+/100 correct;' "precision over 100 training images"

# The moving averages, not the raw weights: two copies of the step-400
# checkpoint, one with the raw softmax_linear tensors negated, one with their
# averages negated.
correct=$(number_at "$work/eval.log" '^.*precision @ 1 = [0-9.]+ \(([0-9]+).200 correct.*$')
for which in raw ema; do
  dir=$work/negated_$which
  rm -rf "$dir" && mkdir -p "$dir" && cp "$ckpt/checkpoint" "$ckpt/model.ckpt-400.safetensors" "$dir/" ||
    fail "cannot copy the checkpoint into $dir"
  suffix=""
  [ $which = ema ] && suffix=/ExponentialMovingAverage
  run "$work/negate_$which.log" "$negate" "$ckpt/model.ckpt-400.safetensors" "$dir/model.ckpt-400.safetensors" \
    "softmax_linear/weights$suffix" "softmax_linear/biases$suffix" || fail "negate_checkpoint_tensors ($which) failed"
  run "$work/eval_$which.log" "$eval" --data_dir "$data" --checkpoint_dir "$dir" --eval_dir "$work/eval_$which" \
    --run_once || fail "cifar10_eval on the checkpoint with negated $which tensors exited with $?"
done
raw=$(number_at "$work/eval_raw.log" '^.*precision @ 1 = [0-9.]+ \(([0-9]+).200 correct.*$')
ema=$(number_at "$work/eval_ema.log" '^.*precision @ 1 = [0-9.]+ \(([0-9]+).200 correct.*$')
echo "correct of 200: $correct as trained, $raw with the raw softmax_linear negated, $ema with its averages negated"
[ -n "$correct" ] && [ "$raw" = "$correct" ] ||
  fail "negating the raw softmax_linear tensors changed cifar10_eval's result ($correct -> $raw correct): it does not evaluate the moving averages"
less "$ema" "$correct" 10 ||
  fail "negating the moving averages of softmax_linear did not lower the precision ($correct -> $ema correct)"

timeout 5 "$eval" --data_dir "$data" --checkpoint_dir "$ckpt" --eval_dir "$work/eval" --eval_interval_secs 1 \
  >"$work/eval_loop.log" 2>&1
status=$?
cat "$work/eval_loop.log"
[ $status -eq 124 ] || fail "cifar10_eval in its loop ended by itself (status $status) instead of running until stopped"
n=$(grep -c 'precision @ 1 = ' "$work/eval_loop.log")
[ "$n" -eq 1 ] || fail "cifar10_eval's loop evaluated the one checkpoint $n times, expected once"
echo "PASS"
