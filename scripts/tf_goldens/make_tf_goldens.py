#!/usr/bin/env python3
"""Writes the TensorFlow-made goldens under tests/fixtures/tf/.

A one-off developer tool: the C++ tests read the committed fixtures and never
run Python or TensorFlow. Regenerate (from the repository root) with

    python3 -m venv /tmp/venv-tf
    /tmp/venv-tf/bin/pip install tensorflow-cpu numpy safetensors
    /tmp/venv-tf/bin/python scripts/tf_goldens/make_tf_goldens.py

The committed fixtures were made with TensorFlow 2.21.0 (tensorflow-cpu from
PyPI), numpy 2.4.6 and safetensors 0.8.0 on x86-64 Linux, Python 3.11. Each
file records the versions that made it in its metadata.

TensorFlow's own CPU kernels (Eigen) compute the goldens: TF_ENABLE_ONEDNN_OPTS
is set to 0 before TensorFlow is imported, so the oracle does not share
oneDNN with cifarnet's oneDNN backend.

Two safetensors files (the format io/safetensors.hpp reads):

  ops.safetensors    the forward (and backward) passes of conv2d, LRN,
                     max/avg pooling and batch norm, NHWC float32
  image.safetensors  the tf.image operations on fixed HWC float32 images

Each case "<name>" stores its tensors as "<name>/<tensor>"; the metadata
entry "tf_goldens" is a JSON object with the versions that made the file and
"cases": {"<name>": {"op": ..., parameters...}}. The random
tf.image operations are not run: their decisions (crop offsets, flip,
brightness delta, contrast factor) are fixed here and passed to the
deterministic operation they draw for, which is what the fixtures check.
docs/TF_SEMANTICS.md lists which behaviour each case checks.
"""
import json
import os
import pathlib
import sys

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tensorflow as tf  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tf"
RNG = np.random.default_rng(20)


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def uniform(shape, lo=-1.0, hi=1.0):
    return f32(RNG.uniform(lo, hi, size=shape))


def distinct(shape):
    """Pairwise distinct values in (-1, 1) in random order (no max ties)."""
    n = int(np.prod(shape))
    v = -1.0 + 2.0 * (np.arange(n) + 0.5) / n
    RNG.shuffle(v)
    return f32(v.reshape(shape))


def pixels(shape):
    """Integer-valued floats in [0, 255], as a decoded uint8 image."""
    return f32(RNG.integers(0, 256, size=shape))


class Fixture:
    def __init__(self):
        self.tensors = {}
        self.meta = {}

    def case(self, name, params, **tensors):
        assert name not in self.meta, name
        self.meta[name] = params
        for k, v in tensors.items():
            v = np.ascontiguousarray(np.asarray(v))
            assert v.dtype in (np.float32, np.uint8), (name, k, v.dtype)
            self.tensors[f"{name}/{k}"] = v

    def save(self, path):
        # One metadata entry, keys sorted: the safetensors library writes its
        # metadata map in no fixed order, so several entries would make the
        # bytes differ from run to run.
        meta = {
            "generator": "scripts/tf_goldens/make_tf_goldens.py",
            "tf_version": tf.__version__,
            "numpy_version": np.__version__,
            "safetensors_version": safetensors.__version__,
            "cases": self.meta,
        }
        save_file(self.tensors, str(path), metadata={"tf_goldens": json.dumps(meta, sort_keys=True)})
        print(f"{path.relative_to(ROOT)}: {len(self.meta)} cases, {path.stat().st_size} bytes")


def grads(fn, dy, *xs):
    """(y, [d(sum(y * dy))/dx for x in xs]) through a GradientTape."""
    vs = [tf.constant(x) for x in xs]
    with tf.GradientTape() as tape:
        for v in vs:
            tape.watch(v)
        y = fn(*vs)
        s = tf.reduce_sum(y * tf.constant(dy))
    return y.numpy(), [g.numpy() for g in tape.gradient(s, vs)]


def conv_cases(fx):
    # (name, input NHWC, kernel, out channels, stride, padding mode)
    cases = [
        ("conv_s1_even", (1, 8, 8, 3), 3, 4, 1, "SAME"),
        ("conv_s1_odd", (1, 7, 7, 3), 3, 4, 1, "SAME"),
        ("conv_s2_even", (2, 8, 8, 3), 3, 5, 2, "SAME"),  # pad 0 before, 1 after
        ("conv_s2_odd", (2, 7, 7, 3), 3, 5, 2, "SAME"),  # pad 1 before, 1 after
        ("conv_k5_s2_mixed", (1, 9, 8, 3), 5, 4, 2, "SAME"),  # rows 2/2, cols 1/2
        ("conv_k5_s1_tutorial", (1, 6, 6, 3), 5, 6, 1, "SAME"),  # the tutorial's conv1 shape
        ("conv_k1_s2_even", (2, 6, 6, 4), 1, 3, 2, "SAME"),  # projection shortcut
        ("conv_k3_s2_explicit", (2, 8, 8, 3), 3, 4, 2, "EXPLICIT"),  # fixed_padding + VALID
    ]
    for name, shape, k, oc, s, mode in cases:
        x = uniform(shape)
        w = uniform((k, k, shape[3], oc))
        b = uniform((oc,))
        oh = -(-shape[1] // s) if mode == "SAME" else (shape[1] + k - 1 - k) // s + 1
        ow = -(-shape[2] // s) if mode == "SAME" else (shape[2] + k - 1 - k) // s + 1
        dy = uniform((shape[0], oh, ow, oc), -0.5, 1.0)

        def fn(x_, w_, b_, s=s, mode=mode, k=k):
            if mode == "EXPLICIT":  # ResNet's fixed_padding: (k-1)//2 before, the rest after
                before = (k - 1) // 2
                after = k - 1 - before
                x_ = tf.pad(x_, [[0, 0], [before, after], [before, after], [0, 0]])
                mode = "VALID"
            return tf.nn.bias_add(tf.nn.conv2d(x_, w_, strides=s, padding=mode), b_)

        y, (dx, dw, db) = grads(fn, dy, x, w, b)
        assert y.shape == dy.shape, (name, y.shape, dy.shape)
        fx.case(name, {"op": "conv2d", "kernel": k, "stride": s, "padding": mode},
                x=x, w=w, b=b, y=y, dy=dy, dx=dx, dw=dw, db=db)


def pool_cases(fx):
    # (name, kind, input NHWC, window, stride)
    cases = [
        ("maxpool_k3_s2_even", "max", (2, 8, 8, 2), 3, 2),
        ("maxpool_k3_s2_odd", "max", (1, 7, 9, 3), 3, 2),
        ("maxpool_k2_s2_odd", "max", (1, 7, 7, 3), 2, 2),
        ("maxpool_k3_s1", "max", (1, 6, 5, 3), 3, 1),
        ("avgpool_k3_s2_even", "avg", (2, 8, 8, 2), 3, 2),
        ("avgpool_k3_s2_odd", "avg", (1, 7, 9, 3), 3, 2),
        ("avgpool_k2_s2_odd", "avg", (1, 7, 7, 3), 2, 2),
        ("avgpool_k3_s1", "avg", (1, 6, 5, 3), 3, 1),
    ]
    for name, kind, shape, k, s in cases:
        x = distinct(shape) if kind == "max" else uniform(shape)
        oh, ow = -(-shape[1] // s), -(-shape[2] // s)
        dy = uniform((shape[0], oh, ow, shape[3]), -0.5, 1.0)
        op = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d
        y, (dx,) = grads(lambda x_: op(x_, ksize=k, strides=s, padding="SAME"), dy, x)
        fx.case(name, {"op": kind + "_pool", "kernel": k, "stride": s, "padding": "SAME"},
                x=x, y=y, dy=dy, dx=dx)


def lrn_cases(fx):
    # The CIFAR-10 tutorial's norm1/norm2: depth_radius 4, bias 1, alpha
    # 0.001 / 9 (TF does not divide alpha by the window), beta 0.75; inputs
    # large enough that the normalization moves the output, and a case with
    # fewer channels than the window, and a strong one.
    cases = [
        ("lrn_tutorial_c16", (1, 3, 4, 16), 4, 1.0, 0.001 / 9.0, 0.75, 10.0),
        ("lrn_tutorial_c5", (2, 3, 3, 5), 4, 1.0, 0.001 / 9.0, 0.75, 10.0),
        ("lrn_strong_c8", (1, 2, 3, 8), 2, 2.0, 0.1, 0.5, 2.0),
    ]
    for name, shape, r, bias, alpha, beta, scale in cases:
        x = uniform(shape, -scale, scale)
        dy = uniform(shape, -0.5, 1.0)
        y, (dx,) = grads(lambda x_: tf.nn.local_response_normalization(
            x_, depth_radius=r, bias=bias, alpha=alpha, beta=beta), dy, x)
        fx.case(name, {"op": "lrn", "depth_radius": r, "bias": bias, "alpha": alpha, "beta": beta},
                x=x, y=y, dy=dy, dx=dx)


def bn_cases(fx):
    cases = [
        ("bn_n3_c6", (3, 4, 4, 6), 1e-5),
        ("bn_n2_c3_eps1e-3", (2, 3, 4, 3), 1e-3),
    ]
    for name, shape, eps in cases:
        # An offset mean, so centring matters.
        x = f32(uniform(shape, -1.0, 1.0) * 2.0 + uniform((shape[3],), -3.0, 3.0))
        gamma = uniform((shape[3],), 0.5, 1.5)
        beta = uniform((shape[3],), -0.5, 0.5)
        dy = uniform(shape, -0.5, 1.0)
        # Training: the batch's mean and biased variance (tf.nn.moments), as
        # tf.nn.batch_normalization composes them ...
        mean, var = tf.nn.moments(tf.constant(x), axes=[0, 1, 2])

        def composed(x_, g_, b_):
            m, v = tf.nn.moments(x_, axes=[0, 1, 2])
            return tf.nn.batch_normalization(x_, m, v, b_, g_, eps)

        y, _ = grads(composed, dy, x, gamma, beta)

        # ... and the fused kernel Keras and tf.layers use in training, whose
        # gradients are the ones training applies.
        def fused(x_, g_, b_):
            return tf.compat.v1.nn.fused_batch_norm(x_, g_, b_, epsilon=eps, is_training=True)[0]

        y_fused, (dx, dgamma, dbeta) = grads(fused, dy, x, gamma, beta)
        # Inference: given moving statistics.
        mmean = uniform((shape[3],), -3.0, 3.0)
        mvar = uniform((shape[3],), 0.5, 4.0)
        y_infer = tf.nn.batch_normalization(tf.constant(x), mmean, mvar, beta, gamma, eps).numpy()
        y_infer_fused = tf.compat.v1.nn.fused_batch_norm(
            x, gamma, beta, mean=mmean, variance=mvar, epsilon=eps, is_training=False)[0].numpy()
        fx.case(name, {"op": "batch_norm", "epsilon": eps},
                x=x, gamma=gamma, beta=beta, mean=mean.numpy(), var=var.numpy(), y=y, y_fused=y_fused,
                dy=dy, dx=dx, dgamma=dgamma, dbeta=dbeta, moving_mean=mmean, moving_var=mvar,
                y_infer=y_infer, y_infer_fused=y_infer_fused)


def image_cases(fx):
    # Inputs shared by several cases are stored once, as "input/<name>"; a
    # case names its input in its parameters ("input").
    img = pixels((9, 7, 3))
    small = pixels((5, 6, 3))
    fimg = f32(img / 255.0)  # photometric ops on float images (TF never clips float32)
    # Nearly flat, stddev below 1/sqrt(H*W*C), which then divides. Centred
    # on 0: around 100, TF's float32 mean is off by an ulp of 100 (7.6e-6),
    # which the small divisor turns into 0.3 % differences from the exact
    # result (cifarnet accumulates in double and is within 4e-5 of it).
    flat = f32(uniform(img.shape, -0.01, 0.01))
    shrink = pixels((8, 6, 3))
    inputs = {"img": img, "small": small, "fimg": fimg, "flat": flat, "shrink": shrink}
    for k, v in inputs.items():
        fx.tensors[f"input/{k}"] = v
    name_of = {id(v): k for k, v in inputs.items()}

    def case(name, params, x, y):
        fx.case(name, dict(params, input=name_of[id(x)]), y=y)

    # The CIFAR record layout: uint8 CHW bytes, decoded by the seed as
    # transpose(reshape(record, [3, H, W]), [1, 2, 0]) then cast to float32.
    chw = RNG.integers(0, 256, size=(3, 4, 5), dtype=np.uint8)
    hwc = tf.cast(tf.transpose(tf.constant(chw), [1, 2, 0]), tf.float32).numpy()
    fx.case("decode_chw", {"op": "decode_chw"}, chw=chw, y=hwc)

    # resize_with_crop_or_pad: pad (odd and even differences), crop, and both.
    for name, src, th, tw in [("crop_or_pad_pad", img, 13, 12), ("crop_or_pad_crop", img, 6, 4),
                              ("crop_or_pad_mixed", img, 12, 4), ("crop_or_pad_same", img, 9, 7)]:
        y = tf.image.resize_with_crop_or_pad(src, th, tw).numpy()
        case(name, {"op": "resize_with_crop_or_pad", "height": th, "width": tw}, src, y)

    # Random crop after pad (the ResNet seed's augmentation: crop_or_pad to
    # (H+2p, W+2p), then random_crop back to (H, W)): the crop's offsets are
    # fixed here, and crop_to_bounding_box takes them.
    pad = 2
    padded = tf.image.resize_with_crop_or_pad(small, small.shape[0] + 2 * pad, small.shape[1] + 2 * pad)
    for dy_, dx_ in [(0, 0), (4, 4), (1, 3), (3, 0), (2, 2)]:
        y = tf.image.crop_to_bounding_box(padded, dy_, dx_, small.shape[0], small.shape[1]).numpy()
        case(f"pad_crop_{dy_}_{dx_}", {"op": "pad_and_crop", "pad": pad, "offset_height": dy_,
                                       "offset_width": dx_}, small, y)

    case("central_crop_0.5", {"op": "central_crop", "fraction": 0.5}, img,
         tf.image.central_crop(img, 0.5).numpy())
    case("central_crop_0.875", {"op": "central_crop", "fraction": 0.875}, img,
         tf.image.central_crop(img, 0.875).numpy())
    case("flip_left_right", {"op": "flip_left_right"}, img, tf.image.flip_left_right(img).numpy())

    for delta in (0.25, -0.4):
        case(f"brightness_{delta}", {"op": "adjust_brightness", "delta": delta}, fimg,
             tf.image.adjust_brightness(fimg, delta).numpy())
    case("brightness_pixels_63", {"op": "adjust_brightness", "delta": 63.0}, img,
         tf.image.adjust_brightness(img, 63.0).numpy())
    for factor in (0.2, 1.8, 0.5):
        case(f"contrast_{factor}", {"op": "adjust_contrast", "factor": factor}, fimg,
             tf.image.adjust_contrast(fimg, factor).numpy())
    case("contrast_pixels_1.4", {"op": "adjust_contrast", "factor": 1.4}, img,
         tf.image.adjust_contrast(img, 1.4).numpy())

    case("standardize_pixels", {"op": "per_image_standardization"}, img,
         tf.image.per_image_standardization(img).numpy())
    case("standardize_unit", {"op": "per_image_standardization"}, fimg,
         tf.image.per_image_standardization(fimg).numpy())
    case("standardize_flat", {"op": "per_image_standardization"}, flat,
         tf.image.per_image_standardization(flat).numpy())

    # Resizing (io::resize, stb_image_resize): bilinear with half-pixel
    # centres (tf.image.resize's default) enlarging, and area shrinking by
    # integer factors. Not shrinking bilinear: stb widens its triangle filter
    # as tf.image.resize(antialias=True) does, but clamps the edge pixel into
    # the border windows where TF renormalises (docs/TF_SEMANTICS.md).
    for name, src, h, w, method in [
            ("resize_bilinear_up", small, 10, 12, "bilinear"),
            ("resize_bilinear_up_odd", small, 7, 9, "bilinear"),
            ("resize_area_down2", shrink, 4, 3, "area")]:
        y = tf.image.resize(src, [h, w], method=method).numpy()
        case(name, {"op": "resize", "method": method, "height": h, "width": w}, src, f32(y))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"TensorFlow {tf.__version__}, numpy {np.__version__}, safetensors {safetensors.__version__}",
          file=sys.stderr)
    ops = Fixture()
    conv_cases(ops)
    pool_cases(ops)
    lrn_cases(ops)
    bn_cases(ops)
    ops.save(OUT / "ops.safetensors")
    image = Fixture()
    image_cases(image)
    image.save(OUT / "image.safetensors")


if __name__ == "__main__":
    main()
