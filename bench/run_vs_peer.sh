#!/usr/bin/env bash
# Runs cifarnet_bench and the PyTorch peer (../shared/bench/peer_torch.py,
# Debian's /usr/bin/python3 with python3-torch) in the same run, then prints
# images/s side by side with the ratio cifarnet / peer's best format.
# Usage: bash bench/run_vs_peer.sh [build-dir] [benchmarks]   (default: build, resnet20,resnet56,tfcnn,infer20,infer56)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ONLY=${2:-resnet20,resnet56,tfcnn,infer20,infer56}
PEER=${PEER:-../shared/bench/peer_torch.py}
out=$(mktemp -d)
cmake --build "$BUILD" --target cifarnet_bench > /dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
OMP_NUM_THREADS=2 "$BUILD/bench/cifarnet_bench" --only "$ONLY" --formats nhwc,nchw --json "$out/cifarnet.json"
/usr/bin/python3 "$PEER" --only "$ONLY" --formats nchw,cl --extra --json "$out/peer.json" > "$out/peer.log" 2>&1 || { cat "$out/peer.log"; exit 1; }
cat "$out/peer.log"
/usr/bin/python3 - "$out/cifarnet.json" "$out/peer.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1])); peer = json.load(open(sys.argv[2]))["results"]
# peer names: "resnet20 train", "tfcnn train", "infer20 eval", "infer20 eval jit-frozen", ...
# (the conv1x1-shortcut variant is another model and is left out)
best = {}
for r in peer:
    if "conv1x1" in r["name"]: continue
    key = r["name"].split()[0]
    ips = r["img_per_s"]["median"]
    if ips > best.get(key, (0, ""))[0]: best[key] = (ips, r["name"] + " " + r["fmt"])
mine = {}
for r in ours:
    ips = r["batch"] / r["median_s"]
    if ips > mine.get(r["name"], (0, ""))[0]: mine[r["name"]] = (ips, r["format"])
print("\n| benchmark | cifarnet img/s, median (best format) | PyTorch best img/s, median (variant) | ratio |")
print("|---|---|---|---|")
for name, (ips, fmt) in mine.items():
    if name in best:
        pb, what = best[name]
        print(f"| {name} | {ips:.0f} ({fmt}) | {pb:.0f} ({what}) | {ips / pb:.2f}x |")
    else:
        print(f"| {name} | {ips:.0f} ({fmt}) | n/a | |")
PY
