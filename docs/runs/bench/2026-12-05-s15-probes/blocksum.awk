# Sums a cifarnet_bench per-layer profile's forward + backward ms by stage:
# the blocks of each stage (conv, bn, add lines of stageS/blockB/...), then per block.
/^ +stage[0-9]\/block[0-9]+\// {
  split($1, p, "/"); st = p[1]; bl = p[2]
  t = $3 + $4; sum[st] += t; seen[st "/" bl] = 1
}
END {
  for (k in seen) { split(k, q, "/"); nb[q[1]]++ }
  for (s in sum) printf "%s: %d blocks, %.2f ms a step, %.2f ms a block\n", s, nb[s], sum[s], sum[s] / nb[s]
}
