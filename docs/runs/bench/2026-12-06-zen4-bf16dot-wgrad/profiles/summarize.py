#!/usr/bin/env python3
"""img/s and the per-layer profile's convolution time per step (forward,
backward) of each run in this folder: e26d5bd (old_r*) against the new
build (new_r*), alternated. Each file holds resnet20 then resnet56."""
import glob
import os
import re
import sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(f"{d}/*_r*.txt")):
    which, r = re.match(r".*/(old|new)_r(\d+)\.txt", f).groups()
    net = None
    for line in open(f):
        m = re.match(r"(\w+)\s+nhwc\s+batch \d+\s+([\d.]+) img/s", line)
        if m:
            net = m.group(1)
            rows[(net, r, which)] = [float(m.group(2)), 0.0, 0.0]
            continue
        m = re.match(r"\s+\S+\s+conv\s+([\d.]+)\s+([\d.]+)$", line)
        if m and net:
            rows[(net, r, which)][1] += float(m.group(1))
            rows[(net, r, which)][2] += float(m.group(2))
print(f"{'net':10s} {'round':>5s} {'old img/s':>10s} {'new img/s':>10s} {'ratio':>6s}   conv fwd/bwd ms a step, old -> new")
for (net, r, which) in sorted(rows):
    if which != "new":
        continue
    o, n = rows[(net, r, "old")], rows[(net, r, "new")]
    print(f"{net:10s} {r:>5s} {o[0]:10.1f} {n[0]:10.1f} {n[0] / o[0]:5.2f}x   {o[1]:.1f}/{o[2]:.1f} -> {n[1]:.1f}/{n[2]:.1f}")
