#!/usr/bin/env bash
# Side by side (docs/BENCHMARKS.md, 2026-12-05 03:4x): cifarnet_bench built
# from 6e1c09a (before this session) and from HEAD (the residual-sum pass in
# AVX-512 registers, dcbcc9e + its fix, and the AMX copies' prefetch,
# 09fe2b2), each `ninja -C build bench/cifarnet_bench` at that commit,
# copied to $BIN/cifarnet_bench_<name>; NHWC, 2 threads, ResNet-56 and -20
# in bf16 and fp32, the two binaries' order swapped each round.
set -u
BIN=${BIN:-/work/s11bins}
for cfg in "resnet56 bf16" "resnet20 bf16" "resnet56 fp32" "resnet20 fp32"; do
  set -- $cfg
  for r in 1 2 3 4; do
    order="6e1c09a head"; [ $((r % 2)) = 0 ] && order="head 6e1c09a"
    for b in $order; do
      echo "== $1 $2 round $r $b"
      OMP_NUM_THREADS=2 "$BIN/cifarnet_bench_$b" --only $1 --formats nhwc --precision $2 --reps 7 --steps 4 \
        --warmup 5 --profile 1 2>&1 | grep -E "img/s|per kind|booked"
    done
  done
done
