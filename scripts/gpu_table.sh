#!/usr/bin/env bash
# One table from one scripts/gpu_check.sh log: cifarnet's training images/s
# (bench/cuda/gpu_bench) beside PyTorch's on the same GPU
# (bench/peer_torch_gpu.py), per network and precision (fp32, TF32, bf16),
# with each side's best layout, every peer mode and the ratio of cifarnet to
# the peer's best mode at that precision.
#
# Usage: bash scripts/gpu_table.sh <gpu_check log>   (gpu_check.sh runs it)
#
# It reads the lines under "=== images/s on this GPU: cifarnet" and
# "=== images/s on this GPU: PyTorch". A line is
#   <bench> <layout> [<precision> [graphs]] batch <n> <images/s> img/s ... (gpu_bench)
#   <bench> <layout> [<precision>] <mode> batch <n> <images/s> img/s ...   (the peer)
# with no precision meaning fp32 (the logs before the precision column);
# cifarnet's best of its layouts, with and without CUDA graphs, is the one
# compared (its cell says ", graphs" when graphs won).
# A cell nobody measured is "-"; a precision cifarnet does not run on CUDA
# (bf16 today) says so. Exits 1 when the log has no cifarnet line.
set -euo pipefail
[ $# = 1 ] || { echo "usage: bash scripts/gpu_table.sh <gpu_check log>" >&2; exit 2; }
[ -r "$1" ] || { echo "gpu_table: cannot read '$1'" >&2; exit 2; }
awk '
  /^=== images\/s on this GPU: cifarnet/ { side = "c"; next }
  /^=== images\/s on this GPU: PyTorch/  { side = "p"; next }
  /^===/                                  { side = ""; next }
  side != "" && $1 ~ /^resnet(20|56)$/ && $2 ~ /^(nhwc|nchw)$/ {
    b = 0; v = 0
    for (i = 3; i <= NF; ++i) if ($i == "batch") { b = i; break }
    for (i = b; i <= NF; ++i) if ($i == "img/s") { v = $(i - 1); break }
    if (!b || v == 0) next
    prec = "fp32"; mode = ""
    k = b - 3  # tokens between the layout and "batch"
    lay = $2
    if (side == "c") {
      if (k == 1) prec = $3
      else if (k == 2 && $4 == "graphs") { prec = $3; lay = $2 ", graphs" }
      else if (k != 0) next
    }
    else if (k == 1) mode = $3
    else if (k == 2) { prec = $3; mode = $4 }
    else next
    if (prec !~ /^(fp32|tf32|bf16)$/) next
    if (side == "c") {
      key = $1 SUBSEP prec
      if (v + 0 > cbest[key] + 0) { cbest[key] = v; cfmt[key] = lay }
      cseen = 1
    } else {
      key = $1 SUBSEP prec SUBSEP mode
      if (v + 0 > pbest[key] + 0) { pbest[key] = v; pfmt[key] = $2 }
      if (!(mode in known)) { known[mode] = 1; order[++nm] = mode }
    }
  }
  # (awk makes an element by reading it: test with "in" first)
  function pcell(k) { return (k in pbest) ? sprintf("%.1f (%s)", pbest[k], pfmt[k]) : "-" }
  END {
    if (!cseen) { print "gpu_table: no cifarnet training line in the log: nothing to compare"; exit 1 }
    head = "| network, batch 128 | precision | cifarnet img/s (layout) |"
    rule = "|---|---|---|"
    for (m = 1; m <= nm; ++m) { head = head " PyTorch " order[m] " |"; rule = rule "---|" }
    print head " cifarnet / best PyTorch |"
    print rule "---|"
    split("resnet20 resnet56", nets, " "); split("fp32 tf32 bf16", precs, " ")
    for (n = 1; n <= 2; ++n) for (q = 1; q <= 3; ++q) {
      net = nets[n]; prec = precs[q]; ck = net SUBSEP prec
      best = 0; any = 0; row = ""
      for (m = 1; m <= nm; ++m) {
        pk = net SUBSEP prec SUBSEP order[m]
        row = row " " pcell(pk) " |"
        if (pk in pbest) { any = 1; if (pbest[pk] + 0 > best) best = pbest[pk] + 0 }
      }
      if (!(ck in cbest) && !any) continue
      c = (ck in cbest) ? sprintf("%.1f (%s)", cbest[ck], cfmt[ck]) : (prec == "bf16" ? "not supported on CUDA" : "-")
      ratio = ((ck in cbest) && best > 0) ? sprintf("**%.2fx**", cbest[ck] / best) : "-"
      name = (net == "resnet20") ? "ResNet-20" : "ResNet-56"
      print "| " name " | " prec " | " c " |" row " " ratio " |"
    }
  }
' "$1"
