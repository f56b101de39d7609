#!/usr/bin/env bash
# tests/examples/resume_layout.sh — a job keeps its activation layout across
# processes, and every run says its layout and why on its first line:
#   resume_layout.sh <resnet_cifar10> <data_dir> <work_dir>
# 1. Without --data-format on the CPU: the first stdout line names
#    channels_last as the CPU default; a job trained to step 4 in two
#    processes (2 + 2 steps) ends with the same checkpoint bytes as one
#    process trained to step 4.
# 2. A job begun in channels_first and resumed without --data-format takes
#    channels_first from its checkpoint ("from the job dir") and again ends
#    byte-identical to an uninterrupted channels_first run.
# 3. Resumed with an explicit --data-format other than the checkpoint's, it
#    trains in the layout asked for and says that the layout changes.
set -u
source "$(dirname "$0")/smoke_lib.sh"
[ $# -eq 3 ] || fail "usage: resume_layout.sh <resnet_cifar10> <data_dir> <work_dir>"
resnet=$1 data=$2 work=$3
rm -rf "$work" && mkdir -p "$work" || fail "cannot create $work"
args=(--data-dir "$data" --num-gpus 0 --num-layers 8 --train-batch-size 16 --eval-batch-size 50 --seed 3
  --save-checkpoints-secs 0)

# go <log> <job> [args...]: one process, stdout to <log> (stderr to <log>.err).
go() {
  local log=$1 job=$2
  shift 2
  echo "+ $resnet --job-dir $job ${args[*]} $*"
  "$resnet" --job-dir "$job" "${args[@]}" "$@" >"$log" 2>"$log.err"
  local status=$?
  cat "$log" "$log.err"
  [ $status -eq 0 ] || fail "$resnet exited with $status (log $log)"
}
# first_line <log> <extended regex> <what>: stdout's first line must match.
first_line() {
  head -n 1 "$1" | grep -Eq -- "$2" || fail "$3: the first line of $1 is '$(head -n 1 "$1")', not /$2/"
}
same_bytes() {
  cmp "$1" "$2" || fail "$3: $1 and $2 differ"
  echo "same bytes: $1 $2"
}

# 1. The CPU default, in one process and in two.
go "$work/whole.log" "$work/whole" --train-steps 4
first_line "$work/whole.log" '^Data format: channels_last \(default for training on the CPU\)$' "a new CPU job"
go "$work/part1.log" "$work/parts" --train-steps 2
go "$work/part2.log" "$work/parts" --train-steps 4
first_line "$work/part2.log" \
  "^Data format: channels_last \\(from the job dir: recorded in $work/parts/model.ckpt-2.safetensors\\)$" \
  "the resumed CPU job"
need "$work/part2.log" "^Restored $work/parts/model.ckpt-2.safetensors \\(global step 2\\)$" "the resume"
same_bytes "$work/whole/model.ckpt-4.safetensors" "$work/parts/model.ckpt-4.safetensors" \
  "train 4 steps vs train 2 + resume to 4, default layout"

# 2. A channels_first job resumed without the flag stays channels_first.
go "$work/nchw_whole.log" "$work/nchw_whole" --train-steps 4 --data-format channels_first
first_line "$work/nchw_whole.log" '^Data format: channels_first \(given by --data-format\)$' "a given layout"
go "$work/nchw1.log" "$work/nchw_parts" --train-steps 2 --data-format channels_first
go "$work/nchw2.log" "$work/nchw_parts" --train-steps 4
first_line "$work/nchw2.log" \
  "^Data format: channels_first \\(from the job dir: recorded in $work/nchw_parts/model.ckpt-2.safetensors\\)$" \
  "the resumed channels_first job"
need "$work/nchw2.log" 'format channels_first,' "the model line in channels_first"
same_bytes "$work/nchw_whole/model.ckpt-4.safetensors" "$work/nchw_parts/model.ckpt-4.safetensors" \
  "train 4 steps vs train 2 + resume to 4, channels_first from the job dir"

# 3. An explicit other layout at a resume: allowed, and said.
go "$work/switch1.log" "$work/switch" --train-steps 2 --data-format channels_first
go "$work/switch2.log" "$work/switch" --train-steps 4 --data-format channels_last
first_line "$work/switch2.log" \
  "^Data format: channels_last \\(given by --data-format; the job's checkpoint $work/switch/model.ckpt-2.safetensors was trained in channels_first: resuming in a different layout, as asked" \
  "a resume in another layout"
need "$work/switch2.log" 'format channels_last,' "the model line in channels_last"
need "$work/switch2.log" '^Trained steps 2\.\.4 in ' "training on from step 2"
# ... and the next resume without the flag keeps the new layout.
go "$work/switch3.log" "$work/switch" --train-steps 5
first_line "$work/switch3.log" \
  "^Data format: channels_last \\(from the job dir: recorded in $work/switch/model.ckpt-4.safetensors\\)$" \
  "the resume after the change"
echo "PASS"
