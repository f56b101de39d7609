#!/usr/bin/env python3
"""Medians per (precision, binary, figure) of a gatys_ab.txt written by run.sh,
and each round's new/base ratio. Usage: summarize.py gatys_ab.txt"""
import re
import statistics as st
import sys

cur, d = None, {}
for line in open(sys.argv[1]):
    m = re.match(r"== round (\d+) (\w+) (\w+)", line)
    if m:
        cur = (m.group(2), m.group(3), int(m.group(1)))
        continue
    m = re.match(r"\s+nhwc\s+(.+?)\s{2,}([0-9.]+) s", line)
    if m and cur:
        d.setdefault((cur[0], m.group(1)), {}).setdefault(cur[1], {})[cur[2]] = float(m.group(2))
for (p, fig), v in sorted(d.items()):
    base, new = v.get("base", {}), v.get("new", {})
    rounds = sorted(set(base) & set(new))
    ratios = [base[r] / new[r] for r in rounds]
    print(f"{p} {fig}: base median {st.median(base.values()):.4f} s, new {st.median(new.values()):.4f} s, "
          f"ratio of medians {st.median(base.values()) / st.median(new.values()):.3f}x, "
          f"per round {' '.join(f'{x:.2f}' for x in ratios)} (new faster in {sum(x > 1 for x in ratios)} of {len(ratios)})")
