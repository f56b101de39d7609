#!/usr/bin/env bash
# Runs examples/cifar10_speedrun and the PyTorch reference of the same recipe
# (peer_airbench94_cpu.py, PyTorch 2.x in a virtual environment:
# bench/setup_peer.sh) one after the other with the same settings, and
# prints both logs (docs/SPEEDRUN.md).
#
# Usage: bash bench/speedrun_vs_peer.sh [build-dir=build]
# Environment:
#   DATA       CIFAR-10 binary directory (default ../shared/data/cifar-10-batches-bin)
#   PRECISION  fp32 (default) or bf16 (needs AVX512-BF16 or AMX)
#   RUNS (1), EPOCHS (8), SUBSET (0: all 50,000), THREADS (2), SEED (0)
#   PEER_PY    the venv's python (default .venv-peer/bin/python)
#   PEER       peer_airbench94_cpu.py (default ../shared/bench/peer_airbench94_cpu.py)
#   OUT        folder for both JSON files (default: a temp dir)
#   ORDER      cifarnet-first (default) or peer-first: which program runs first
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
# A build whose benchmarks CI compiled at another level (scripts/test.sh
# sets CIFARNET_BENCH_OPTIMIZATION) gives no figures.
if grep -qE '^CIFARNET_BENCH_OPTIMIZATION:STRING=.+' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "speedrun_vs_peer: $BUILD was configured with $(grep '^CIFARNET_BENCH_OPTIMIZATION:' "$BUILD/CMakeCache.txt") (CI's check build): reconfigure with -DCIFARNET_BENCH_OPTIMIZATION= for figures" >&2
  exit 2
fi
DATA=${DATA:-../shared/data/cifar-10-batches-bin}
PRECISION=${PRECISION:-fp32}
RUNS=${RUNS:-1}
EPOCHS=${EPOCHS:-8}
SUBSET=${SUBSET:-0}
THREADS=${THREADS:-2}
SEED=${SEED:-0}
ORDER=${ORDER:-cifarnet-first}
PEER_PY=${PEER_PY:-.venv-peer/bin/python}
PEER=${PEER:-../shared/bench/peer_airbench94_cpu.py}
OUT=${OUT:-$(mktemp -d)}
PROG=$BUILD/examples/cifar10_speedrun/cifar10_speedrun
[ -x "$PROG" ] || { echo "speedrun_vs_peer.sh: $PROG not built (cmake --build $BUILD --target cifar10_speedrun)" >&2; exit 2; }
[ -x "$PEER_PY" ] || { echo "speedrun_vs_peer.sh: $PEER_PY not found (bash bench/setup_peer.sh)" >&2; exit 2; }
[ -f "$PEER" ] || { echo "speedrun_vs_peer.sh: $PEER not found (set PEER)" >&2; exit 2; }
case "$ORDER" in cifarnet-first | peer-first) ;; *)
  echo "speedrun_vs_peer.sh: ORDER must be cifarnet-first or peer-first, not '$ORDER'" >&2
  exit 2
  ;;
esac
mkdir -p "$OUT"
peer_subset=()
[ "$SUBSET" != 0 ] && peer_subset=(--subset "$SUBSET")
echo "# $(lscpu | sed -n 's/^Model name: *//p') | $(nproc) CPUs | commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# precision $PRECISION, runs $RUNS, epochs $EPOCHS, subset $SUBSET, threads $THREADS, seed $SEED, order $ORDER"
run_cifarnet() {
  echo "=== cifarnet $(date -u +%FT%TZ)"
  OMP_NUM_THREADS=$THREADS "$PROG" --data-dir "$DATA" --subset "$SUBSET" --epochs "$EPOCHS" --runs "$RUNS" \
    --precision "$PRECISION" --seed "$SEED" --json "$OUT/cifarnet.json"
}
run_peer() {
  echo "=== pytorch $(date -u +%FT%TZ)"
  "$PEER_PY" "$PEER" --data "$DATA" "${peer_subset[@]}" --epochs "$EPOCHS" --runs "$RUNS" --precision "$PRECISION" \
    --threads "$THREADS" --seed "$SEED" --json "$OUT/torch.json"
}
if [ "$ORDER" = peer-first ]; then
  run_peer
  run_cifarnet
else
  run_cifarnet
  run_peer
fi
echo "=== done $(date -u +%FT%TZ); JSON in $OUT"
