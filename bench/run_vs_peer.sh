#!/usr/bin/env bash
# Runs cifarnet's benchmarks and the PyTorch 2.x peer (peer_torch2.py, from
# PyPI in a virtual environment: bench/setup_peer.sh) in the same run, one
# benchmark pair at a time (cifarnet, then the peer, back to back), then
# prints a table of images/s (style transfer: s/iteration) with the ratio of
# cifarnet to the peer's best mode at the same precision:
#   fp32: eager or torch.compile (channels_last);
#   bf16: bf16 autocast, eager or torch.compile.
# Protocol on both sides: 10 untimed warm-up steps (the peer adds 6 for
# torch.compile), then 5 repetitions of a block of steps; median [min-max]
# of the per-step time over the repetitions.
#
# Usage: bash bench/run_vs_peer.sh [build-dir] [benchmarks]
#   benchmarks: comma list of resnet20,resnet56,infer20,infer56,gatys,rss
#   (default: all six). rss: peak resident set size (/usr/bin/time -v) of
#   ResNet-20 training, cifarnet against the peer's eager mode.
# Environment:
#   PEER_PY   the venv's python (default .venv-peer/bin/python)
#   PEER      peer_torch2.py (default ../shared/bench/peer_torch2.py: the
#             peers live beside the repository, not in it)
#   PRECISION both (default), fp32 or bf16: cifarnet's --precision and the
#             peer's modes. both: every benchmark in fp32, then in bf16, and
#             one table with both (each precision's own table before it;
#             results in OUT/fp32 and OUT/bf16). bf16 needs AVX512-BF16 or
#             AMX; elsewhere PRECISION=bf16 exits 3 saying bf16 could not be
#             measured, and both measures fp32 and says so.
#   FORMATS   cifarnet's formats (default nhwc); REPS (5); WARMUP (10)
#   INFER_BATCH  images per inference step of infer20/infer56 on both sides
#             (default 100; 1: latency)
#   CONV_ALGORITHM  cifarnet's --conv-algorithm (default auto; winograd:
#             fp32 training's 3x3 stride-1 convolutions in Winograd where the
#             backend has it, docs/NUMERICS.md). The peer's stays its own.
#   OUT       results folder (default: a temp dir); WRAP: a command prefix
#             for each benchmark pair (e.g. one that pauses other jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
# A build whose benchmarks CI compiled at another level (scripts/test.sh
# sets CIFARNET_BENCH_OPTIMIZATION) gives no figures.
if grep -qE '^CIFARNET_BENCH_OPTIMIZATION:STRING=.+' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "run_vs_peer: $BUILD was configured with $(grep '^CIFARNET_BENCH_OPTIMIZATION:' "$BUILD/CMakeCache.txt") (CI's check build): reconfigure with -DCIFARNET_BENCH_OPTIMIZATION= for figures" >&2
  exit 2
fi
ONLY=${2:-resnet20,resnet56,infer20,infer56,gatys,rss}
PEER=${PEER:-../shared/bench/peer_torch2.py}
PEER_PY=${PEER_PY:-.venv-peer/bin/python}
FORMATS=${FORMATS:-nhwc}
PRECISION=${PRECISION:-both}
REPS=${REPS:-5}
WARMUP=${WARMUP:-10}
INFER_BATCH=${INFER_BATCH:-100}
CONV_ALGORITHM=${CONV_ALGORITHM:-auto}
WRAP=${WRAP:-}
case "$CONV_ALGORITHM" in
  auto | direct | winograd) ;;
  *) echo "run_vs_peer: CONV_ALGORITHM must be auto, direct or winograd, not '$CONV_ALGORITHM'" >&2; exit 2 ;;
esac
case "$PRECISION" in
  fp32 | bf16 | both) ;;
  *) echo "run_vs_peer: PRECISION must be both, fp32 or bf16, not '$PRECISION'" >&2; exit 2 ;;
esac
[ -x "$PEER_PY" ] || { echo "run_vs_peer: no python at PEER_PY=$PEER_PY (make the venv with bash bench/setup_peer.sh, or point PEER_PY at one with torch and numpy)" >&2; exit 2; }
[ -f "$PEER" ] || { echo "run_vs_peer: no peer script at PEER=$PEER" >&2; exit 2; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
cmake --build "$BUILD" --target cifarnet_bench style_transfer_bench > /dev/null
has_bf16=0
grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && has_bf16=1
if [ "$PRECISION" = bf16 ] && [ $has_bf16 = 0 ]; then
  echo "run_vs_peer: this CPU has neither AVX512-BF16 nor AMX: bf16 could not be measured here" >&2
  exit 3
fi
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), loadavg $(cut -d' ' -f1-3 /proc/loadavg), results in $out, precision $PRECISION, inference batch $INFER_BATCH, conv algorithm $CONV_ALGORITHM"
echo "== peer: $("$PEER_PY" -c 'import torch; print("torch", torch.__version__, "isa", torch.backends.cpu.get_cpu_capability())')"

# Every benchmark at precision $1, results into folder $2.
run_precision() {
  local prec=$1 dir=$2 modes
  case "$prec" in
    fp32) modes=eager,compile ;;
    bf16) modes=bf16,bf16compile ;;
  esac
  mkdir -p "$dir"
  local ours="OMP_NUM_THREADS=2 '$BUILD/bench/cifarnet_bench' --formats $FORMATS --precision $prec --reps $REPS --warmup $WARMUP --profile 0 --infer-batch $INFER_BATCH --conv-algorithm $CONV_ALGORITHM"
  local peer="'$PEER_PY' '$PEER' --threads 2 --reps $REPS --warmup $WARMUP --infer-batch $INFER_BATCH"
  for b in ${ONLY//,/ }; do
    case "$b" in
      gatys)
        $WRAP bash -c "OMP_NUM_THREADS=2 '$BUILD/bench/style_transfer_bench' --format nhwc --reps $REPS --warmup 2 --precision $prec > '$dir/cifarnet_gatys.txt' 2>&1;
                       $peer --only gatys --modes $modes --json '$dir/peer_gatys.json' > '$dir/peer_gatys.log' 2>&1" ;;
      rss)
        local eager=${modes%%,*}
        $WRAP bash -c "/usr/bin/time -v bash -c \"$ours --only resnet20\" > '$dir/cifarnet_rss.txt' 2>&1;
                       /usr/bin/time -v $peer --only resnet20 --modes $eager > '$dir/peer_rss.txt' 2>&1" ;;
      resnet* | infer*)
        $WRAP bash -c "$ours --only $b --json '$dir/cifarnet_$b.json' > '$dir/cifarnet_$b.txt' 2>&1;
                       $peer --only $b --modes $modes --json '$dir/peer_$b.json' > '$dir/peer_$b.log' 2>&1" ;;
      *) echo "run_vs_peer: unknown benchmark '$b'" >&2; exit 2 ;;
    esac
    echo "-- $prec $b done $(date -u +%T), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  done
}

# The table of one results folder ($1), or with two ($1 fp32, $2 bf16) both
# side by side, as docs/BENCHMARKS.md shows them.
tables() {
  python3 - "$@" <<'PY'
import glob, json, os, re, sys
def fmt3(m, lo, hi): return f"{m:.0f} [{lo:.0f}-{hi:.0f}]"
def rows(out):
    r = {}
    for path in sorted(glob.glob(os.path.join(out, "cifarnet_*.json"))):
        ours = json.load(open(path))
        name = os.path.basename(path)[len("cifarnet_"):-len(".json")]
        ppath = os.path.join(out, f"peer_{name}.json")
        if not ours or not os.path.exists(ppath): continue
        best = max(ours, key=lambda r: r["batch"] / r["median_s"])
        o = (best["batch"] / best["median_s"], best["batch"] / best["max_s"], best["batch"] / best["min_s"])
        peer = json.load(open(ppath))
        if not peer: continue
        pb = max(peer, key=lambda r: r["per_s"])
        bs = pb["per_s"] * pb["median_s"]
        p = (pb["per_s"], bs / pb["max_s"], bs / pb["min_s"])
        r[name] = (f"{fmt3(*o)} ({best['format']})", f"{fmt3(*p)} ({pb['mode']})", f"{o[0] / p[0]:.2f}x")
    g, pg = os.path.join(out, "cifarnet_gatys.txt"), os.path.join(out, "peer_gatys.json")
    if os.path.exists(g) and os.path.exists(pg):
        m = re.search(r"iteration \(.*?\)\s+([\d.]+) s\s+\[([\d.]+) - ([\d.]+)\]", open(g).read())
        peer = json.load(open(pg))
        if m and peer:
            s, lo, hi = map(float, m.groups())
            pb = min(peer, key=lambda r: r["median_s"])
            r["gatys s/iter"] = (f"{s:.3f} [{lo:.3f}-{hi:.3f}] (nhwc)",
                                 f"{pb['median_s']:.3f} [{pb['min_s']:.3f}-{pb['max_s']:.3f}] ({pb['mode']})",
                                 f"{pb['median_s'] / s:.2f}x")
    def rss(path):
        if not os.path.exists(path): return None
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(path).read())
        return int(m.group(1)) / 1024 if m else None
    a, b = rss(os.path.join(out, "cifarnet_rss.txt")), rss(os.path.join(out, "peer_rss.txt"))
    if a and b:
        r["peak RSS, ResNet-20 training (MiB)"] = (f"{a:.0f}", f"{b:.0f} (eager)", f"{a / b:.2f} (lower is better)")
    return r
dirs = sys.argv[1:]
if len(dirs) == 1:
    print("\n| benchmark | cifarnet img/s median [min-max] (format) | PyTorch best img/s median [min-max] (mode) | ratio |")
    print("|---|---|---|---|")
    for name, (o, p, q) in rows(dirs[0]).items():
        print(f"| {name} | {o} | {p} | {q} |")
else:
    f, b = rows(dirs[0]), rows(dirs[1])
    print("\n| benchmark | cifarnet fp32 | PyTorch best fp32 (mode) | ratio | cifarnet bf16 | PyTorch best bf16 (mode) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in list(f) + [n for n in b if n not in f]:
        fo, fp, fq = f.get(name, ("-", "-", "-"))
        bo, bp, bq = b.get(name, ("not measured", "-", "-"))
        print(f"| {name} | {fo} | {fp} | {fq} | {bo} | {bp} | {bq} |")
PY
}

if [ "$PRECISION" != both ]; then
  run_precision "$PRECISION" "$out"
  tables "$out"
  exit 0
fi
run_precision fp32 "$out/fp32"
if [ $has_bf16 = 1 ]; then
  run_precision bf16 "$out/bf16"
else
  echo "run_vs_peer: this CPU has neither AVX512-BF16 nor AMX: bf16 could not be measured here (fp32 only)"
fi
echo "== fp32"
tables "$out/fp32"
if [ $has_bf16 = 1 ]; then
  echo "== bf16"
  tables "$out/bf16"
  echo "== both (fp32, then bf16, measured in this run)"
  tables "$out/fp32" "$out/bf16"
fi
