#!/usr/bin/env python3
"""Cost model of synchronous data-parallel training (docs/SCALING.md).

Ring all-reduce of S gradient bytes over N nodes at bandwidth B with a
per-message latency a:  T_ar(N) = 2 (N-1)/N * S / B + 2 (N-1) * a.
Compute per step on one node for b images at r images/s:  T_c = b / r; the
backward pass is taken as 2/3 of it (twice the forward's work).
Without overlap a step costs T_c + T_ar; with ideal overlap of the all-reduce
with backward, T_c/3 + max(2 T_c/3, T_ar).

  python3 bench/scaling_model.py RATE [ALPHA_US=25]

RATE: measured images/s of one node (bench/mpi_scaling.sh, 1 process).
Prints, for ResNet-20 and ResNet-56, on the measured node and on nodes 10x
and 100x faster (extrapolations), strong scaling (the global batch of 128
split over N nodes, the seed's --sync semantics) and where communication
exceeds compute, for strong and weak (128 per node) scaling, at
10/25/100 Gb/s (nominal line rates).
"""
import sys

PARAMS = {"ResNet-20": 269_787, "ResNet-56": 853_083}  # trainable, printed by the model


def macs(n):
    """Forward multiply-adds per 32x32 image of ResNet-(6n+2) (TF_SEMANTICS.md section 3 shapes)."""
    conv = lambda hw, cin, cout: hw * hw * 9 * cin * cout
    stem = conv(32, 3, 16)
    stage1 = 2 * n * conv(32, 16, 16)
    stage2 = conv(16, 16, 32) + conv(16, 32, 32) + 2 * (n - 1) * conv(16, 32, 32)
    stage3 = conv(8, 32, 64) + conv(8, 64, 64) + 2 * (n - 1) * conv(8, 64, 64)
    return stem + stage1 + stage2 + stage3 + 64 * 11


# ResNet-56's compute relative to ResNet-20's (the measured rate is
# ResNet-20's): the ratio of their multiply-adds, an estimate.
MACS = {"ResNet-20": macs(3), "ResNet-56": macs(9)}
BANDWIDTHS = {"10 Gb/s": 10e9 / 8, "25 Gb/s": 25e9 / 8, "100 Gb/s": 100e9 / 8}
NODES = [1, 2, 4, 8, 16, 32, 64]


def allreduce(n, size_bytes, bw, alpha):
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n * size_bytes / bw + 2 * (n - 1) * alpha


def table(net, params, rate, alpha):
    size = 4 * params
    print(f"\n{net}: {params} parameters = {size / 1e6:.2f} MB of fp32 gradients, "
          f"{MACS[net] / 1e6:.1f} M multiply-adds per image; {rate:.0f} images/s per node; "
          f"alpha = {alpha * 1e6:.0f} us")
    print("  strong scaling, global batch 128 split over N nodes (the seed's --sync):")
    print("    N  batch/node  compute ms | all-reduce ms at " + " / ".join(BANDWIDTHS) +
          " | speed-up without / with overlap, at " + " / ".join(BANDWIDTHS))
    for n in NODES:
        tc = 128 / n / rate
        ta = [allreduce(n, size, bw, alpha) for bw in BANDWIDTHS.values()]
        no = [(128 / rate) / (tc + t) for t in ta]
        ov = [(128 / rate) / (tc / 3 + max(2 * tc / 3, t)) for t in ta]
        print(f"  {n:3d} {128 / n:10.1f} {tc * 1e3:11.2f} | " + " / ".join(f"{t * 1e3:6.2f}" for t in ta) +
              " | " + " / ".join(f"{a:4.1f}, {b:4.1f}" for a, b in zip(no, ov)))
    for mode, per_node in (("strong", lambda n: 128 / n), ("weak (128 per node)", lambda n: 128)):
        out = []
        for name, bw in BANDWIDTHS.items():
            stop = [n for n in NODES if n > 1 and allreduce(n, size, bw, alpha) > per_node(n) / rate]
            stop_ov = [n for n in NODES
                       if n > 1 and allreduce(n, size, bw, alpha) > 2 / 3 * per_node(n) / rate]
            out.append(f"{name}: N = {stop[0] if stop else '>64'} ({stop_ov[0] if stop_ov else '>64'})")
        print(f"  {mode}: all-reduce exceeds compute (exceeds backward, overlap stops hiding it) from " +
              "; ".join(out))


def main():
    rate20 = float(sys.argv[1])
    alpha = (float(sys.argv[2]) if len(sys.argv) > 2 else 25.0) * 1e-6
    for factor, label in ((1, "the measured node"), (10, "a node 10x faster"), (100, "a node 100x faster")):
        print(f"\n===== {label}: ResNet-20 at {rate20 * factor:.0f} images/s =====")
        for net, params in PARAMS.items():
            table(net, params, rate20 * factor * MACS["ResNet-20"] / MACS[net], alpha)


if __name__ == "__main__":
    main()
