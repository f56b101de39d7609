#!/usr/bin/env python3
"""Writes vgg19_tiny_scipy.mat: a MatConvNet SimpleNN file shaped like
imagenet-vgg-verydeep-19.mat (43 layers, the real field sets, v5 with zlib
compression as MATLAB's default -v7 save), channel counts divided by 64
(1, 2, 4, 8), written by scipy rather than matio, so the C++ reader is
checked against a file its own writer did not make.

Values are a formula the test recomputes: layer at 0-based index L, filters
(row-major H, W, Cin, Cout flat index k) = float32((L + 1) + 0.001 * k),
biases[j] = float32(-(L + 1) - 0.01 * j).

Run once (needs numpy and scipy, e.g. in a venv under /tmp):
    python3 tests/data/vision/make_golden.py tests/data/vision/vgg19_tiny_scipy.mat
"""
import sys

import numpy as np
import scipy.io

NAMES = ["conv1_1", "relu1_1", "conv1_2", "relu1_2", "pool1", "conv2_1", "relu2_1", "conv2_2", "relu2_2",
         "pool2", "conv3_1", "relu3_1", "conv3_2", "relu3_2", "conv3_3", "relu3_3", "conv3_4", "relu3_4",
         "pool3", "conv4_1", "relu4_1", "conv4_2", "relu4_2", "conv4_3", "relu4_3", "conv4_4", "relu4_4",
         "pool4", "conv5_1", "relu5_1", "conv5_2", "relu5_2", "conv5_3", "relu5_3", "conv5_4", "relu5_4",
         "pool5", "fc6", "relu6", "fc7", "relu7", "fc8", "prob"]
WIDTH = {"1": 64, "2": 128, "3": 256, "4": 512, "5": 512}
DIV = 64


def channels(name):
    block, idx = name[4], name[6]
    out = WIDTH[block] // DIV
    if block == "1" and idx == "1":
        return 3, out
    if idx == "1":
        return WIDTH[str(int(block) - 1)] // DIV, out
    return out, out


def layer(i, name):
    if name.startswith("conv"):
        cin, cout = channels(name)
        k = np.arange(9 * cin * cout, dtype=np.float64)
        w = ((i + 1) + 0.001 * k).astype(np.float32).reshape(3, 3, cin, cout)
        b = (-(i + 1) - 0.01 * np.arange(cout, dtype=np.float64)).astype(np.float32).reshape(1, cout)
        weights = np.empty((1, 2), dtype=object)
        weights[0, 0], weights[0, 1] = w, b
        opts = np.empty((0, 0), dtype=object)
        return {"name": name, "type": "conv", "weights": weights, "size": np.array([[3, 3, cin, cout]], float),
                "pad": np.array([[1, 1, 1, 1]], float), "stride": np.array([[1, 1]], float),
                "precious": False, "dilate": 1.0, "opts": opts}
    if name.startswith("relu"):
        return {"name": name, "type": "relu", "leak": 0.0, "precious": False}
    if name.startswith("pool"):
        return {"name": name, "type": "pool", "method": "max", "pool": np.array([[2, 2]], float),
                "stride": np.array([[2, 2]], float), "pad": np.array([[0, 0, 0, 0]], float), "precious": False}
    if name == "prob":
        return {"name": name, "type": "softmax", "precious": False}
    return {"name": name, "type": "conv", "weights": np.empty((1, 0), dtype=object), "precious": False}


def main(path):
    layers = np.empty((1, len(NAMES)), dtype=object)
    for i, name in enumerate(NAMES):
        layers[0, i] = layer(i, name)
    meta = {"imageSize": np.array([[224, 224, 3]], float),
            "averageImage": np.array([[123.68], [116.779], [103.939]])}
    scipy.io.savemat(path, {"layers": layers, "meta": meta, "classes": {"name": "tiny"}}, format="5",
                     do_compression=True, oned_as="row")


if __name__ == "__main__":
    main(sys.argv[1])
