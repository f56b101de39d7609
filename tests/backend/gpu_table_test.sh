#!/usr/bin/env bash
# scripts/gpu_table.sh against the newest committed GPU log (its figures as
# SCALING.md quotes them) and a synthetic log in the new line formats
# (tests/fixtures/gpu_table_sample.log: precisions, modes, a failed mode,
# an unsupported precision), and its refusal of a log without cifarnet.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
out=$(bash scripts/gpu_table.sh docs/runs/gpu/2026-11-27-70d40e8-h200-gpu_check.txt)
echo "$out"
grep -qF '| ResNet-20 | fp32 | 26326.0 (nchw) | 21366.9 (nchw) | 24331.3 (nchw) | **1.08x** |' <<< "$out" ||
  fail "ResNet-20 fp32 row of the H200 log"
grep -qF '| ResNet-56 | fp32 | 9484.5 (nchw) | 9649.7 (nchw) | 6519.4 (nchw) | **0.98x** |' <<< "$out" ||
  fail "ResNet-56 fp32 row of the H200 log"
[ "$(grep -c '^| ResNet' <<< "$out")" = 2 ] || fail "rows nobody measured must not be printed"

out=$(bash scripts/gpu_table.sh tests/fixtures/gpu_table_sample.log)
echo "$out"
head -1 <<< "$out" | grep -qF '| PyTorch eager | PyTorch compile | PyTorch max-autotune | PyTorch reduce-overhead |' ||
  fail "one column per peer mode, in the order met"
# fp32: cifarnet's best layout (nchw 22000) over the peer's best mode (11000); the failed mode is "-".
grep -qF '| ResNet-20 | fp32 | 22000.0 (nchw) | 10000.0 (nhwc) | 11000.0 (nhwc) | 11000.0 (nchw) | - | **2.00x** |' <<< "$out" ||
  fail "ResNet-20 fp32"
grep -qF '| ResNet-20 | tf32 | 30000.0 (nhwc) | 15000.0 (nhwc) | - | - | - | **2.00x** |' <<< "$out" || fail "ResNet-20 tf32"
grep -qF '| ResNet-20 | bf16 | not supported on CUDA | 25000.0 (nhwc) | - | - | 40000.0 (nhwc) | - |' <<< "$out" ||
  fail "ResNet-20 bf16: no cifarnet figure, no ratio"
# ResNet-20 fp32 stays the eager nchw 22000 (graphs: 21000, lower); ResNet-56 fp32 is the graphs line.
grep -qF '| ResNet-56 | fp32 | 8000.0 (nchw, graphs) | 4000.0 (nhwc) | - | - | - | **2.00x** |' <<< "$out" ||
  fail "ResNet-56 fp32: the graphs line is the best"
grep -qF '| ResNet-56 | tf32 | 9000.0 (nhwc) | - | - | - | - | - |' <<< "$out" || fail "ResNet-56 tf32: no peer, no ratio"
grep -q 'infer' <<< "$out" && fail "inference lines are not in the training table"

printf '=== images/s on this GPU: cifarnet (bench/cuda/gpu_bench)\ngpu_bench: no GPU: nothing measured\n' > "${TMPDIR:-/tmp}/gpu_table_empty_$$.log"
set +e
out=$(bash scripts/gpu_table.sh "${TMPDIR:-/tmp}/gpu_table_empty_$$.log")
rc=$?
set -e
rm -f "${TMPDIR:-/tmp}/gpu_table_empty_$$.log"
[ $rc = 1 ] && grep -q "no cifarnet training line" <<< "$out" || fail "a log without cifarnet lines: exit 1, saying why"
echo "gpu_table: all checks passed"
