#!/usr/bin/env bash
# Data-parallel throughput on this machine: 2 MPI ranks x 1 OpenMP thread vs
# 1 process x 2 threads, ResNet-20, global batch 128, synthetic data (the
# input pipeline is the same in both), plus the gradient all-reduce's own
# time. The configurations run alternately ROUNDS times (background jobs make
# the machine noisy); each run trains STEPS steps and reports the example's
# "Average examples/sec" (steps 10..STEPS, so primitive creation is excluded).
# Medians are printed at the end (docs/SCALING.md: where to commit them). The 2-rank run
# is made three times: with the gradient all-reduce overlapped with backward
# (the default, 1 MiB buckets), overlapped with 256 KiB buckets (more of them
# leave early), and after backward (--no-overlap-allreduce).
# With EXTRA=1 each round also runs 2 ranks x 1 thread with --sync-batch-norm
# and 1 process x 1 thread (the cost of synchronized BN; what one thread does).
# Usage: [EXTRA=1] bench/mpi_scaling.sh BUILD_DIR [ROUNDS=5] [STEPS=40]
set -euo pipefail
BUILD=${1:?usage: mpi_scaling.sh BUILD_DIR [ROUNDS] [STEPS]}
ROUNDS=${2:-5}
STEPS=${3:-40}
EXE=$BUILD/examples/resnet_cifar10/resnet_cifar10
[ -x "$EXE" ] || { echo "build resnet_cifar10 first (cmake --build $BUILD --target resnet_cifar10)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The single process runs with OpenMP's default wait policy (threads spin a
# while between regions), as a user's run does; OMP_WAIT_POLICY=PASSIVE,
# which puts them to sleep at once, is measured beside it because it costs
# the ~60 parallel regions of a step a wake-up each. The ranks run one
# OpenMP thread each, where the policy has no effect.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The all-reduce micro-benchmark (built with the benchmarks when MPI is found).
AR=$BUILD/bench/mpi_allreduce_bench
[ -x "$AR" ] || { echo "build mpi_allreduce_bench first (cmake --build $BUILD --target mpi_allreduce_bench)"; exit 1; }
for d in 20 56; do
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe "$AR" $d 1048576 100
done

ARGS=(--num-gpus 0 --num-layers 20 --train-batch-size 128 --train-steps "$STEPS" --synthetic-examples 2560
  --data-format channels_last --save-checkpoints-secs 0 --num-inter-threads 1)
rate() { grep -o "Average examples/sec: [0-9.]*" "$1" | tail -1 | awk '{print $3}'; }
one=() passive=() two=() small=() after=() sbn=() single=()
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$WORK/a" "$WORK/b"
  OMP_NUM_THREADS=2 "$EXE" --job-dir "$WORK/a" "${ARGS[@]}" --num-intra-threads 2 >"$WORK/a.log" 2>&1
  one+=("$(rate "$WORK/a.log")")
  rm -rf "$WORK/a"
  OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 "$EXE" --job-dir "$WORK/a" "${ARGS[@]}" --num-intra-threads 2 \
    >"$WORK/a.log" 2>&1
  passive+=("$(rate "$WORK/a.log")")
  mpirun -np 2 --oversubscribe "$EXE" --job-dir "$WORK/b" "${ARGS[@]}" --num-intra-threads 1 --sync \
    >"$WORK/b.log" 2>&1
  two+=("$(rate "$WORK/b.log")")
  rm -rf "$WORK/e" "$WORK/f"
  mpirun -np 2 --oversubscribe "$EXE" --job-dir "$WORK/f" "${ARGS[@]}" --num-intra-threads 1 --sync \
    --allreduce-bucket-kb 256 >"$WORK/f.log" 2>&1
  small+=("$(rate "$WORK/f.log")")
  mpirun -np 2 --oversubscribe "$EXE" --job-dir "$WORK/e" "${ARGS[@]}" --num-intra-threads 1 --sync \
    --no-overlap-allreduce >"$WORK/e.log" 2>&1
  after+=("$(rate "$WORK/e.log")")
  extra=""
  if [ "${EXTRA:-0}" = 1 ]; then
    rm -rf "$WORK/c" "$WORK/d"
    mpirun -np 2 --oversubscribe "$EXE" --job-dir "$WORK/c" "${ARGS[@]}" --num-intra-threads 1 --sync \
      --sync-batch-norm >"$WORK/c.log" 2>&1
    sbn+=("$(rate "$WORK/c.log")")
    OMP_NUM_THREADS=1 "$EXE" --job-dir "$WORK/d" "${ARGS[@]}" --num-intra-threads 1 >"$WORK/d.log" 2>&1
    single+=("$(rate "$WORK/d.log")")
    extra="| 2 ranks + sync BN ${sbn[-1]} | 1 process x 1 thread ${single[-1]}"
  fi
  echo "round $r: 1 process x 2 threads ${one[-1]} images/s (PASSIVE wait policy ${passive[-1]}) | 2 ranks x 1 thread ${two[-1]} images/s" \
    "(256 KiB buckets: ${small[-1]}; all-reduce after backward: ${after[-1]}) $extra" \
    "| load $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -h "Gradient all-reduce" "$WORK/b.log" | sed 's/^/  overlapped, 1 MiB buckets: /' || true
  grep -h "Gradient all-reduce" "$WORK/f.log" | sed 's/^/  overlapped, 256 KiB buckets: /' || true
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "median over $ROUNDS rounds: 1 process x 2 threads $(median "${one[@]}") images/s" \
  "($(median "${passive[@]}") with OMP_WAIT_POLICY=PASSIVE)," \
  "2 ranks x 1 thread $(median "${two[@]}") images/s (all-reduce overlapped with backward)," \
  "$(median "${small[@]}") images/s (overlapped, 256 KiB buckets)," \
  "$(median "${after[@]}") images/s (all-reduce after backward)"
if [ "${EXTRA:-0}" = 1 ]; then
  echo "median: 2 ranks x 1 thread with --sync-batch-norm $(median "${sbn[@]}") images/s," \
    "1 process x 1 thread $(median "${single[@]}") images/s"
fi
