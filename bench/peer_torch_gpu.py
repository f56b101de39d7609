"""The PyTorch peer of bench/cuda/gpu_bench on the same GPU: CIFAR ResNet v1
(6n+2 layers: 3x3 stem to 16 channels, three stages of n basic blocks with
16/32/64 channels, parameter-free shortcuts: 1x1 average pool of stride 2 and
zero channel padding, global average pool, dense to 10), batch 128 training
(cross-entropy, SGD momentum 0.9, weight decay 2e-4) and batch 100
inference, with gpu_bench's protocol: warm-up steps, then R repetitions of S
steps, the device synchronised at the end of each block; median [min - max]
images/s. Precisions: fp32 (TF32 off for cuDNN and matmuls), tf32 (on for
both), bf16 (autocast to bfloat16, TF32 off). Modes: eager, compile
(torch.compile's default), max-autotune and reduce-overhead (torch.compile
with that mode; reduce-overhead replays CUDA graphs). Layouts channels_last
and NCHW. Placement: by default each step uploads its batch from pinned
host memory (non-blocking), as gpu_bench's Trainer does through its input
ring; --placement resident keeps the batch on the GPU. A developer tool:
needs torch with CUDA, which the library never does.

    python3 bench/peer_torch_gpu.py [--only resnet20,resnet56,infer20,infer56]
        [--modes eager,compile,max-autotune,reduce-overhead] [--precisions fp32,tf32,bf16]
        [--placement upload|resident]

Each line: <bench> <layout> <precision> <mode> batch <n> <images/s> img/s ...
(scripts/gpu_table.sh reads them).
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"peer_torch_gpu: PyTorch is not installed here ({e}): peer not measured")
    sys.exit(0)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        s = x
        if self.stride > 1:
            s = F.avg_pool2d(s, 1, self.stride)
        if self.pad:
            s = F.pad(s, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(y + s)


class ResNetCifar(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        layers, cin = [], 16
        for i, w in enumerate((16, 32, 64)):
            for j in range(n):
                layers.append(Block(cin, w, 2 if (i > 0 and j == 0) else 1))
                cin = w
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(x.mean((2, 3)))


def timeit(step, warmup, reps, steps):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / steps)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="resnet20,resnet56,infer20,infer56")
    ap.add_argument("--modes", default="eager,compile,max-autotune,reduce-overhead")
    ap.add_argument("--precisions", default="fp32,tf32,bf16")
    ap.add_argument("--placement", default="upload", choices=["upload", "resident"])
    ap.add_argument("--formats", default="nhwc,nchw")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    # Flags are checked before the GPU is looked for, so a typo fails everywhere.
    for mode in a.modes.split(","):
        if mode not in ("eager", "compile", "max-autotune", "reduce-overhead"):
            ap.error(f"--modes: unknown mode '{mode}'")
    for prec in a.precisions.split(","):
        if prec not in ("fp32", "tf32", "bf16"):
            ap.error(f"--precisions: unknown precision '{prec}'")
    if not torch.cuda.is_available():
        print("peer_torch_gpu: torch has no usable GPU here: peer not measured")
        return
    torch.backends.cudnn.benchmark = True
    print(f"torch {torch.__version__}, GPU {torch.cuda.get_device_name(0)}, batches {a.placement}", flush=True)
    dev = torch.device("cuda")
    for prec in a.precisions.split(","):
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        for fmt in a.formats.split(","):
            mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
            for b in a.only.split(","):
                for mode in a.modes.split(","):
                    run_one(a, dev, prec, fmt, mf, b, mode)


def run_one(a, dev, prec, fmt, mf, b, mode):
    torch.manual_seed(0)
    torch._dynamo.reset()  # each mode compiles afresh
    depth = int(b[6:] if b.startswith("resnet") else b[5:])
    m = ResNetCifar((depth - 2) // 6).to(dev).to(memory_format=mf)
    fwd = m if mode == "eager" else torch.compile(m, mode=None if mode == "compile" else mode)
    bf16 = prec == "bf16"
    try:
        train = b.startswith("resnet")
        batch = 128 if train else 100
        xh = (torch.rand(batch, 3, 32, 32) * 255).contiguous(memory_format=mf)
        yh = torch.randint(0, 10, (batch,))
        x, y = xh.to(dev), yh.to(dev)
        if a.placement == "upload":
            xh, yh = xh.pin_memory(), yh.pin_memory()

        def load():
            if a.placement == "upload":
                x.copy_(xh, non_blocking=True)
                y.copy_(yh, non_blocking=True)

        if train:
            m.train()
            opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)

            def step():
                load()
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                    loss = F.cross_entropy(fwd(x), y)
                loss.backward()
                opt.step()
        else:
            m.eval()

            def step():
                load()
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                    fwd(x)

        t = timeit(step, a.warmup + (0 if mode == "eager" else 6), a.reps, a.steps)
    except Exception as e:  # report and go on: one failing mode must not hide the others
        print(f"{b:9s} {fmt:5s} {prec:5s} {mode:15s} FAILED: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return
    med = statistics.median(t)
    print(f"{b:9s} {fmt:5s} {prec:5s} {mode:15s} batch {batch:3d}  {batch / med:9.1f} img/s  "
          f"[{batch / max(t):.1f} - {batch / min(t):.1f}]  ({med * 1e3:.2f} ms/step)", flush=True)


if __name__ == "__main__":
    main()
