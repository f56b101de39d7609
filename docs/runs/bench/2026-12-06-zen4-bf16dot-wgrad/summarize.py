#!/usr/bin/env python3
"""Medians of run.sh's outputs: the bf16 weight gradient per shape (own
kernel against oneDNN's, from conv_passes_bench's bf16 backward_weights
column) and img/s per training benchmark (e26d5bd against the new build)."""
import glob
import os
import re
import statistics
import sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def passes(net, mode):
    by_shape = {}
    for f in sorted(glob.glob(f"{d}/passes_{net}_{mode}_r*.txt")):
        for line in open(f):
            m = re.match(r"(\S+->\S+(?: s2)? @\S+)\s+([\d.]+) ->\s+([\d.]+)\s+([\d.]+) ->\s+([\d.]+)\S?\s+([\d.]+) ->\s+([\d.]+)(\S?)", line)
            if m:
                by_shape.setdefault(m.group(1), []).append((float(m.group(7)), m.group(8), float(m.group(3))))
    return by_shape


for net in ("airbench", "resnet"):
    own, one = passes(net, "own"), passes(net, "onednn")
    if not own:
        continue
    runs = len(next(iter(own.values())))
    print(f"## {net}: bf16 backward_weights, ms, median of {runs} runs (each a median of the bench's reps)")
    print(f"{'shape':22s} {'oneDNN':>9s} {'own':>9s} {'ratio':>7s}  mark  (bf16 forward, ms)")
    for shape in own:
        a = statistics.median(v[0] for v in one[shape])
        b = statistics.median(v[0] for v in own[shape])
        fwd = statistics.median(v[2] for v in own[shape])
        print(f"{shape:22s} {a:9.3f} {b:9.3f} {a / b:6.2f}x  {own[shape][0][1] or '-':4s}  ({fwd:.3f})")
    print()


def steps(which):
    out = {}
    for f in sorted(glob.glob(f"{d}/steps_{which}_r*.txt")):
        for line in open(f):
            m = re.match(r"(\w+)\s+nhwc\s+batch (\d+)\s+([\d.]+) img/s", line)
            if m:
                out.setdefault(m.group(1), []).append(float(m.group(3)))
    return out


old, new = steps("old"), steps("new")
if not old:
    sys.exit(0)
print("## bf16 training, img/s (each run's median of 5 reps), e26d5bd against the new build, rounds alternated")
for b in old:
    o, n = statistics.median(old[b]), statistics.median(new[b])
    wins = sum(1 for x, y in zip(old[b], new[b]) if y > x)
    print(f"{b:10s} old {o:8.1f} {old[b]}  new {n:8.1f} {new[b]}  {n / o:.3f}x  (new faster in {wins} of {len(old[b])})")
