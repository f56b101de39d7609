#!/usr/bin/env bash
# Runs cifarnet's benchmarks and the PyTorch peer (../shared/bench/peer_torch.py,
# Debian's /usr/bin/python3 with python3-torch) in the same run, one benchmark
# at a time (cifarnet, then the peer, back to back), then prints a table of
# images/s (style transfer: s/iteration) with the ratio cifarnet / peer's best
# variant (channels_last or NCHW; for inference also TorchScript-frozen).
#
# Usage: bash bench/run_vs_peer.sh [build-dir] [benchmarks]
#   benchmarks: comma list of resnet20,resnet44,resnet56,tfcnn,infer20,infer56,gatys,rss
#   (default: resnet20,resnet56,tfcnn,infer20,infer56,gatys,rss)
#   rss: peak resident set size (/usr/bin/time -v) of ResNet-20 training, cifarnet vs the peer.
# Environment: WRAP  command prefix for each benchmark pair (e.g. a script that
#                    pauses other jobs while it runs; empty by default)
#              FORMATS cifarnet formats (default nhwc,nchw); OUT results folder (default: a temp dir)
#              PRECISION fp32 (default) or bf16: cifarnet's convolutions (the peer is always fp32,
#                    the baseline issue 7's bf16 targets are stated against)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ONLY=${2:-resnet20,resnet56,tfcnn,infer20,infer56,gatys,rss}
PEER=${PEER:-../shared/bench/peer_torch.py}
FORMATS=${FORMATS:-nhwc,nchw}
WRAP=${WRAP:-}
PRECISION=${PRECISION:-fp32}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
cmake --build "$BUILD" --target cifarnet_bench style_transfer_bench > /dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), loadavg $(cut -d' ' -f1-3 /proc/loadavg), results in $out, cifarnet $PRECISION"
for b in ${ONLY//,/ }; do
  case "$b" in
    gatys)
      $WRAP bash -c "OMP_NUM_THREADS=2 '$BUILD/bench/style_transfer_bench' --format nhwc --reps 5 --warmup 2 --precision $PRECISION > '$out/cifarnet_gatys.txt' 2>&1;
                     /usr/bin/python3 '$PEER' --only gatys --formats nchw,cl --json '$out/peer_gatys.json' > '$out/peer_gatys.log' 2>&1" ;;
    rss)
      $WRAP bash -c "OMP_NUM_THREADS=2 /usr/bin/time -v '$BUILD/bench/cifarnet_bench' --only resnet20 --formats nhwc --profile 0 --precision $PRECISION > '$out/cifarnet_rss.txt' 2>&1;
                     /usr/bin/time -v /usr/bin/python3 '$PEER' --only resnet20 --formats cl > '$out/peer_rss.txt' 2>&1" ;;
    infer*)
      $WRAP bash -c "OMP_NUM_THREADS=2 '$BUILD/bench/cifarnet_bench' --only $b --formats $FORMATS --precision $PRECISION --json '$out/cifarnet_$b.json' > '$out/cifarnet_$b.txt' 2>&1;
                     /usr/bin/python3 '$PEER' --only $b --formats nchw,cl --extra --json '$out/peer_$b.json' > '$out/peer_$b.log' 2>&1" ;;
    *)
      $WRAP bash -c "OMP_NUM_THREADS=2 '$BUILD/bench/cifarnet_bench' --only $b --formats $FORMATS --precision $PRECISION --json '$out/cifarnet_$b.json' > '$out/cifarnet_$b.txt' 2>&1;
                     /usr/bin/python3 '$PEER' --only $b --formats nchw,cl --json '$out/peer_$b.json' > '$out/peer_$b.log' 2>&1" ;;
  esac
  echo "-- $b done $(date -u +%T), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
def fmt3(m, lo, hi): return f"{m:.0f} [{lo:.0f}-{hi:.0f}]"
print("\n| benchmark | cifarnet img/s median [min-max] (format) | PyTorch best img/s median [min-max] (variant) | ratio |")
print("|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(out, "cifarnet_*.json"))):
    ours = json.load(open(path))
    name = os.path.basename(path)[len("cifarnet_"):-len(".json")]
    ppath = os.path.join(out, f"peer_{name}.json")
    if not ours or not os.path.exists(ppath): continue
    best = max(ours, key=lambda r: r["median_s"] and r["batch"] / r["median_s"])
    o = (best["batch"] / best["median_s"], best["batch"] / best["max_s"], best["batch"] / best["min_s"])
    peer = [r for r in json.load(open(ppath))["results"] if "conv1x1" not in r["name"]]
    pb = max(peer, key=lambda r: r["img_per_s"]["median"])
    p = pb["img_per_s"]
    print(f"| {name} | {fmt3(*o)} ({best['format']}) | {fmt3(p['median'], p['min'], p['max'])} ({pb['name']} {pb['fmt']}) | {o[0] / p['median']:.2f}x |")
g = os.path.join(out, "cifarnet_gatys.txt")
if os.path.exists(g) and os.path.exists(os.path.join(out, "peer_gatys.json")):
    m = re.search(r"iteration \(.*?\)\s+([\d.]+) s\s+\[([\d.]+) - ([\d.]+)\]", open(g).read())
    peer = json.load(open(os.path.join(out, "peer_gatys.json")))["results"]
    pb = min(peer, key=lambda r: r["sec_per_step"]["median"])
    p = pb["sec_per_step"]
    if m:
        s, lo, hi = map(float, m.groups())
        print(f"| gatys s/iter | {s:.3f} [{lo:.3f}-{hi:.3f}] (nhwc) | {p['median']:.3f} [{p['min']:.3f}-{p['max']:.3f}] ({pb['name']} {pb['fmt']}) | {p['median'] / s:.2f}x |")
def rss(path):
    if not os.path.exists(path): return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(path).read())
    return int(m.group(1)) / 1024 if m else None
a, b = rss(os.path.join(out, "cifarnet_rss.txt")), rss(os.path.join(out, "peer_rss.txt"))
if a and b:
    print(f"| peak RSS, ResNet-20 training (MiB) | {a:.0f} | {b:.0f} | {a / b:.2f} (lower is better) |")
PY
