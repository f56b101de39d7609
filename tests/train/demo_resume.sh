#!/usr/bin/env bash
# The issue-3 demo: examples/train_demo trains 200 steps (momentum, piecewise
# LR, global-norm clipping, EMA, checkpoints, events). A second run is killed
# with SIGKILL after step 130 and restarted: its final checkpoint must equal
# the uninterrupted run's, byte for byte.
# Usage: demo_resume.sh <train_demo binary> <work dir>
set -euo pipefail
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
"$bin" --job-dir "$work/straight" --steps 200 > "$work/straight.log"
set +e
"$bin" --job-dir "$work/crashed" --steps 200 --crash-at 130 > "$work/crashed-1.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 137 ]; then echo "expected the run to die by SIGKILL (137), got $rc"; cat "$work/crashed-1.log"; exit 1; fi
grep -q "crashing after step 130" "$work/crashed-1.log"
"$bin" --job-dir "$work/crashed" --steps 200 > "$work/crashed-2.log"
grep -q "Restored .*model.ckpt-100.safetensors (global step 100)" "$work/crashed-2.log"
cmp "$work/straight/model.ckpt-200.safetensors" "$work/crashed/model.ckpt-200.safetensors"
ls "$work/straight"/events.out.tfevents.* > /dev/null
tail -n 1 "$work/straight.log"
tail -n 1 "$work/crashed-2.log"
echo "final checkpoints are identical after a SIGKILL at step 130 and a resume from step 100"
