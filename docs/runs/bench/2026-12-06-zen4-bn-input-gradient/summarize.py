#!/usr/bin/env python3
"""Medians per binary and the per-round ratio new/old of side_by_side.txt (images/s)."""
import re, statistics, sys
from collections import defaultdict
rows = defaultdict(dict)  # (net, prec) -> {(round, which): img/s}
for line in open(sys.argv[1] if len(sys.argv) > 1 else "side_by_side.txt"):
    m = re.match(r"round (\d+) (old|new) (\w+) (\w+)\s+nhwc\s+batch\s+\d+\s+([\d.]+) img/s", line)
    if m:
        r, which, prec, net, v = m.groups()
        rows[(net, prec)][(int(r), which)] = float(v)
for (net, prec), d in sorted(rows.items()):
    rounds = sorted({r for r, _ in d})
    old = [d[(r, "old")] for r in rounds if (r, "old") in d and (r, "new") in d]
    new = [d[(r, "new")] for r in rounds if (r, "old") in d and (r, "new") in d]
    ratios = [n / o for n, o in zip(new, old)]
    print(f"{net:9s} {prec}: old median {statistics.median(old):8.1f}  new median {statistics.median(new):8.1f}  "
          f"ratio of medians {statistics.median(new) / statistics.median(old):.3f}x  per round "
          + " ".join(f"{x:.2f}" for x in ratios) + f"  (new faster in {sum(x > 1 for x in ratios)} of {len(ratios)})")
