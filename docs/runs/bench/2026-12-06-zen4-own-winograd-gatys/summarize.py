#!/usr/bin/env python3
"""Medians over the rounds of run.sh's two logs: per VGG-19 shape the base
(oneDNN's Winograd) and new (own Winograd) forward and data-gradient ms with
the median of the rounds' ratios; per precision the style transfer's figures
with the median ratio base / new and how many rounds the new one was faster."""
import re, statistics as st, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
r = v = None
for line in open(os.path.join(d, "vgg_wino.txt")):
    m = re.match(r"== round (\d+) (\w+)", line)
    if m:
        r, v = int(m.group(1)), m.group(2)
        continue
    m = re.match(r"\s*(\d+x\s*\d+\s+\d+->\s*\d+) own=(\d) fwd\s+([\d.]+) ms\s+dx\s+([\d.]+) ms", line)
    if m:
        rows.setdefault(m.group(1), {}).setdefault(r, {})[v] = (float(m.group(3)), float(m.group(4)), m.group(2))
print("VGG-19 shape        own(base/new)  fwd base  fwd new  ratio  faster   dx base  dx new  ratio  faster")
for shape, rr in rows.items():
    fb = [x["base"][0] for x in rr.values()]; fn = [x["new"][0] for x in rr.values()]
    db = [x["base"][1] for x in rr.values()]; dn = [x["new"][1] for x in rr.values()]
    fr = [x["base"][0] / x["new"][0] for x in rr.values()]; dr = [x["base"][1] / x["new"][1] for x in rr.values()]
    own = "/".join(sorted({x["base"][2] for x in rr.values()}) + sorted({x["new"][2] for x in rr.values()}))
    print(f"{shape:20s} {own:13s} {st.median(fb):8.3f} {st.median(fn):8.3f} {st.median(fr):5.2f}x "
          f"{sum(x > 1 for x in fr)}/{len(fr)}  {st.median(db):8.3f} {st.median(dn):7.3f} {st.median(dr):5.2f}x "
          f"{sum(x > 1 for x in dr)}/{len(dr)}")
figs = {}
for line in open(os.path.join(d, "gatys_ab.txt")):
    m = re.match(r"== round (\d+) (\w+) (\w+)", line)
    if m:
        r, p, v = int(m.group(1)), m.group(2), m.group(3)
        continue
    m = re.match(r"\s*nhwc\s+(.+?)\s{2,}([\d.]+) s", line)
    if m:
        figs.setdefault((p, m.group(1)), {}).setdefault(r, {})[v] = float(m.group(2))
print("\nstyle transfer (s)                                     base    new   ratio faster")
for (p, name), rr in figs.items():
    b = [x["base"] for x in rr.values()]; n = [x["new"] for x in rr.values()]
    q = [x["base"] / x["new"] for x in rr.values()]
    print(f"{p} {name:50s} {st.median(b):.4f} {st.median(n):.4f} {st.median(q):5.2f}x {sum(x > 1 for x in q)}/{len(q)}")
