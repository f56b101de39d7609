#!/usr/bin/env python3
"""Writes the goldens of the airbench-style recipe pieces under tests/fixtures/recipe/.

A one-off developer tool: the C++ tests read the committed fixtures and never
run Python. Regenerate (from the repository root) with a Python that has
PyTorch and NumPy:

    python3 -m venv /tmp/venv-torch && /tmp/venv-torch/bin/pip install torch numpy
    /tmp/venv-torch/bin/python scripts/recipe_goldens/make_recipe_goldens.py

Three safetensors files (written here directly: 8-byte header length, JSON
header, little-endian data), each with a "recipe_goldens" metadata entry that
records the versions that made it:

  label_smoothing.safetensors  torch.nn.functional.cross_entropy with
      label_smoothing s and reduction sum/mean, in float64: the loss and
      d(loss)/d(logits) by autograd. Cases "s<s>_<reduction>".
  whitening.safetensors  the whitening initialiser computed with NumPy in
      float64: 2x2 patches of 64 random 3x5x5 float32 images (NCHW), their
      uncentred covariance, numpy.linalg.eigh, eigenvectors scaled by
      1/sqrt(lambda + eps) and concatenated with their negatives, as
      (2*c*kh*kw, c, kh, kw) filters (PyTorch's OIHW order). The sign of each
      eigenvector is fixed so that its largest-magnitude component is
      positive (an eigen-solver may return either sign; the C++ side uses
      the same convention).
  muon.safetensors  three Muon steps (momentum 0.6, Nesterov, the weight
      renormalised to norm sqrt(out), Newton-Schulz with 3 quintic
      iterations) on two weights, one wide (4, 3, 3, 3) and one tall
      (8, 1, 2, 2) (rows > cols: the iteration runs on the transpose), with
      fixed gradients and learning rates, in three arithmetics:
        fp32       every operation in float32;
        bf16_emul  float32 tensors rounded to bfloat16 (round to nearest
                   even) after every operation of the Newton-Schulz
                   iteration, matrix products accumulated in float32 then
                   rounded: the arithmetic cifarnet's bf16 mode implements;
        bf16       PyTorch's own bfloat16 tensors (what the reference
                   recipe runs), for comparison only.
      Weights are stored OIHW as PyTorch holds them.
"""

import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "recipe")


def write_safetensors(path, tensors, meta):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        dtype = {np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("int32"): "I32"}[arr.dtype]
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"recipe_goldens": json.dumps(meta, sort_keys=True)}
    h = json.dumps(header, sort_keys=True).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def versions():
    return {"torch": torch.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}


def label_smoothing():
    rng = np.random.default_rng(22)
    n, k = 6, 10
    logits = rng.normal(0.0, 3.0, size=(n, k))
    labels = rng.integers(0, k, size=n).astype(np.int32)
    tensors = {"logits": logits, "labels": labels}
    cases = {}
    for s in (0.0, 0.2, 1.0):
        for red in ("sum", "mean"):
            z = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
            loss = F.cross_entropy(z, torch.tensor(labels, dtype=torch.int64), label_smoothing=s, reduction=red)
            loss.backward()
            name = "s%g_%s" % (s, red)
            tensors[name + "/loss"] = np.array([loss.item()])
            tensors[name + "/dlogits"] = z.grad.numpy().copy()
            cases[name] = {"label_smoothing": s, "reduction": red}
    meta = dict(versions(), cases=cases)
    write_safetensors(os.path.join(OUT, "label_smoothing.safetensors"), tensors, meta)


def whitening():
    rng = np.random.default_rng(94)
    n, c, h, w, kh, kw, eps = 64, 3, 5, 5, 2, 2, 5e-4
    # float32 images (as a data set holds them), computed on in float64.
    images = rng.normal(0.0, 1.0, size=(n, c, h, w)).astype(np.float32)
    x = images.astype(np.float64)
    # Every kh x kw patch, flattened in (c, kh, kw) order.
    patches = [x[:, :, i:i + kh, j:j + kw].reshape(n, -1) for i in range(h - kh + 1) for j in range(w - kw + 1)]
    p = np.concatenate(patches, axis=0)
    cov = p.T @ p / len(p)
    lam, vec = np.linalg.eigh(cov)  # ascending, eigenvectors in columns
    vec = vec.T.copy()
    for r in range(len(vec)):
        if vec[r, np.argmax(np.abs(vec[r]))] < 0:
            vec[r] = -vec[r]
    scaled = vec / np.sqrt(lam + eps)[:, None]
    filters = np.concatenate([scaled, -scaled]).reshape(-1, c, kh, kw)
    meta = dict(versions(), eps=eps, kernel=[kh, kw])
    write_safetensors(os.path.join(OUT, "whitening.safetensors"),
                      {"images": images, "eigenvalues": lam, "filters": filters}, meta)


A, B, C = 3.4445, -4.7750, 2.0315


def r16(x):
    return x.bfloat16().float()


def ns_torch(G, dtype, steps=3, eps=1e-7):
    """The reference recipe's zeroth power with its tensors in `dtype` (torch.bfloat16 there)."""
    X = G.to(dtype, copy=True)
    X /= (X.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        Am = X @ X.T
        Bm = B * Am + C * Am @ Am
        X = A * X + Bm @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


def ns_fp32(G):
    return ns_torch(G, torch.float32)


def ns_bf16(G):
    return ns_torch(G, torch.bfloat16)


def ns_bf16_emul(G, steps=3, eps=1e-7):
    X = r16(G.float())
    d = r16(r16(X.norm()) + eps)
    X = r16(X / d)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        Am = r16(X @ X.T)
        cA = r16(C * Am)
        cAA = r16(cA @ Am)
        bA = r16(B * Am)
        Bm = r16(bA + cAA)
        aX = r16(A * X)
        BX = r16(Bm @ X)
        X = r16(aX + BX)
    if G.size(0) > G.size(1):
        X = X.T
    return X


def muon_steps(w0, grads, lrs, ns, momentum=0.6):
    p = torch.tensor(w0, dtype=torch.float32)
    buf = torch.zeros_like(p)
    for g_np, lr in zip(grads, lrs):
        g = torch.tensor(g_np, dtype=torch.float32)
        buf.mul_(momentum).add_(g)
        g = g.add(buf, alpha=momentum)
        p.mul_(len(p) ** 0.5 / p.norm())
        update = ns(g.reshape(len(g), -1)).view(g.shape)
        p.add_(update.float(), alpha=-lr)
    return p.numpy().copy(), buf.numpy().copy()


def muon():
    rng = np.random.default_rng(60)
    lrs = [0.24, 0.16, 0.08]
    tensors, cases = {}, {}
    for name, shape in (("wide", (4, 3, 3, 3)), ("tall", (8, 1, 2, 2))):
        w0 = rng.normal(0.0, 0.5, size=shape).astype(np.float32)
        grads = [rng.normal(0.0, 1.0, size=shape).astype(np.float32) for _ in lrs]
        tensors[name + "/w0"] = w0
        for i, g in enumerate(grads):
            tensors["%s/grad%d" % (name, i)] = g
        for mode, ns in (("fp32", ns_fp32), ("bf16_emul", ns_bf16_emul), ("bf16", ns_bf16)):
            w, buf = muon_steps(w0, grads, lrs, ns)
            tensors["%s/%s/w" % (name, mode)] = w
            tensors["%s/%s/momentum" % (name, mode)] = buf
        # One zeroth power on its own (the first step's Nesterov gradient), fp32 and emulated bf16.
        g = torch.tensor(grads[0]) * (1 + 0.6)
        tensors[name + "/ns_in"] = g.numpy().copy()
        tensors[name + "/ns_fp32"] = ns_fp32(g.reshape(len(g), -1)).view(g.shape).numpy().copy()
        tensors[name + "/ns_bf16_emul"] = ns_bf16_emul(g.reshape(len(g), -1)).view(g.shape).numpy().copy()
        # The emulation is the point of the bf16_emul golden: record how far it is from PyTorch's bfloat16.
        diff = float(np.abs(tensors[name + "/bf16_emul/w"] - tensors[name + "/bf16/w"]).max())
        print("%s: bf16_emul vs bf16 weights, max |difference| %g" % (name, diff))
        cases[name] = {"shape": list(shape), "bf16_emul_vs_bf16_max_abs_diff": diff}
    meta = dict(versions(), lrs=lrs, momentum=0.6, nesterov=True, steps=3, coefficients=[A, B, C], eps=1e-7,
                cases=cases)
    write_safetensors(os.path.join(OUT, "muon.safetensors"), tensors, meta)


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    label_smoothing()
    whitening()
    muon()
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)), "bytes")
