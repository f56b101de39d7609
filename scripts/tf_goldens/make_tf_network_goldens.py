#!/usr/bin/env python3
"""Writes the TensorFlow-made whole-network goldens, tests/fixtures/tf/networks.safetensors.

A one-off developer tool beside make_tf_goldens.py (same environment, same
fixture format, read by tests/tf_golden.hpp): the C++ tests read the
committed fixture and never run Python or TensorFlow. Regenerate (from the
repository root) with

    python3 -m venv /tmp/venv-tf
    /tmp/venv-tf/bin/pip install tensorflow-cpu==2.21.0 numpy==2.4.6 safetensors==0.8.0 scipy==1.17.1
    /tmp/venv-tf/bin/python scripts/tf_goldens/make_tf_network_goldens.py

The committed fixture was made with TensorFlow 2.21.0 (tensorflow-cpu from
PyPI), numpy 2.4.6, safetensors 0.8.0 and scipy 1.17.1 on x86-64 Linux,
Python 3.11; the
fixture's metadata records the versions that made it. TF_ENABLE_ONEDNN_OPTS
is 0: TensorFlow's own Eigen kernels are the oracle, not the oneDNN that
cifarnet's oneDNN backend uses. One intra-op thread, so reruns write the
same bytes.

The networks are written in TF 1.x graph style (tf.compat.v1: variables,
tf.gradients, a Session, tf.compat.v1.train optimizers), op for op as the
seeds build them:

  resnet8_channels_last, resnet8_channels_first
      cifar10_model.py's ResNetCifar10 with model_base.py's ResNet v1
      (num_layers 8, so n = 1; batch_norm_decay 0.997, epsilon 1e-5) and
      cifar10_main.py's _tower_fn loss (mean sparse softmax cross-entropy
      + 2e-4 * sum of l2_loss over every trainable variable), tf.gradients
      of it, and one MomentumOptimizer(0.1, 0.9) step run together with the
      batch norms' moving-average updates (the seed's train_op). The input
      batch is channels_last; the channels_first model transposes it first,
      as forward_pass does. TensorFlow's CPU kernels run Conv2D and AvgPool
      in NHWC only, so in the channels_first graph those two ops are
      transpose -> NHWC op -> transpose; everything else (the explicit
      padding, fused batch norm with data_format NCHW, the shortcut's
      channel padding on axis 1, the global mean over axes 2 and 3) runs
      channels_first.
  cnn
      the tutorial's cifar10.inference (conv1, pool1, norm1, conv2, norm2,
      pool2, local3, local4, softmax_linear) and cifar10.loss (mean sparse
      softmax cross-entropy + 0.004 * l2_loss of the local3 and local4
      weights; the conv and softmax_linear terms have wd 0.0 or none), its
      gradients and one GradientDescentOptimizer(0.1) step. On 8x8 inputs
      instead of 24x24 (the layers are the same; local3 gets 2*2*64 inputs,
      not 6*6*64), so that the fixture stays small.
  vgg19_div32
      the style-transfer seed's vgg_model (each VGG-19 conv: relu(conv2d
      SAME + b); 2x2/2 SAME average pools for VGG's max pools) at 1/32 of
      VGG-19's widths, its weights read from a MatConvNet .mat the script
      writes (scipy.io.loadmat and the seed's indexing), and _create_losses:
      content loss at conv4_2 against a content image, style loss over
      conv1_1 ... conv5_1 with weights 0.5, 1.0, 1.5, 3.0, 4.0 against a
      style image, total = 0.01 * content + 1 * style, all at a third
      image, and the total's gradient with respect to that image.
  filter_<kernel>_<rgb|gray>
      the seed's kernels.py kernels (blur, sharpen, edge, top Sobel,
      emboss; RGB 3x3x3x3 and gray 3x3x1x1) applied by its convolve()
      (conv2d, strides 3, SAME) to a fixed image cast to float32 / 256
      (tf.image.rgb_to_grayscale first for the gray ones); the ReLU and
      clip at 255 that convolve() applies to index 2 of the list it is
      given, kernels_list[1:], so to top Sobel.

For the ResNet and the CNN, initial values are not stored: every variable is drawn from a splitmix64
stream that tests/nn/test_tf_network_goldens.cpp regenerates bit for bit
(the metadata says which stream, offset and scale; see `draw`), and the
metadata holds each tensor's exact sum so that a mismatch in the generator
fails loudly. Stored per case: the input batch (uint8 pixels, labels), the
logits, the cross-entropy, the regularization term and the total loss, the
gradient of every trainable variable ("grad/<name>"), and the value of
every variable after the step ("step/<name>": weights and, for the ResNet,
the batch norms' moving mean and variance). Variable names are cifarnet's
parameter names (stem/conv1/weights, head/dense1/biases, local3/weights,
...); the seeds' own names differ but name the same tensors. The VGG
case draws its weights the same way into tests/fixtures/tf/vgg19_div32.mat
(write_vgg_mat), which both sides read, and stores its three images, the
three losses and the image gradient; the filter cases store the image
("filters/pixels_u8"), its grayscale, each kernel and each output.
"""
import json
import os
import pathlib
import sys

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import scipy  # noqa: E402
import scipy.io  # noqa: E402
import tensorflow as tf  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

tf1 = tf.compat.v1
ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tf"
BATCH = 4
LR = 0.1

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def draw(stream, n, offset, scale):
    """float32(offset + scale * u) for n values u in [-1, 1), exact multiples of
    2^-23: u = ((z >> 40) - 2^23) / 2^23 for z the splitmix64 outputs of state
    stream * 2^32 advanced by the golden gamma once per value. offset + scale * u
    is exact in double for the offsets and power-of-two scales used here; the
    cast to float32 rounds to nearest, as C++'s float(double) does."""
    with np.errstate(over="ignore"):
        state = np.uint64(stream) * np.uint64(1 << 32) + (np.arange(1, n + 1, dtype=np.uint64) * GOLDEN)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = ((z >> np.uint64(40)).astype(np.int64) - (1 << 23)).astype(np.float64) / float(1 << 23)
    return (offset + scale * u).astype(np.float32)


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def pow2_scale(fan_in):
    """The power of two nearest (in log) to the Glorot/He-uniform bound sqrt(6 / fan_in)."""
    return float(2.0 ** np.round(np.log2(np.sqrt(6.0 / fan_in))))


class Fixture:
    def __init__(self):
        self.tensors = {}
        self.meta = {}

    def case(self, name, params, **tensors):
        assert name not in self.meta, name
        self.meta[name] = params
        for k, v in tensors.items():
            self.put(f"{name}/{k}", v)

    def put(self, key, v):
        v = np.ascontiguousarray(np.asarray(v))
        assert v.dtype in (np.float32, np.uint8), (key, v.dtype)
        assert key not in self.tensors, key
        self.tensors[key] = v

    def save(self, path):
        meta = {
            "generator": "scripts/tf_goldens/make_tf_network_goldens.py",
            "tf_version": tf.__version__,
            "numpy_version": np.__version__,
            "safetensors_version": safetensors.__version__,
            "scipy_version": scipy.__version__,
            "cases": self.meta,
        }
        save_file(self.tensors, str(path), metadata={"tf_goldens": json.dumps(meta, sort_keys=True)})
        print(f"{path.relative_to(ROOT)}: {len(self.meta)} cases, {path.stat().st_size} bytes")


class Vars:
    """The variables of one graph, created from drawn initial values, in order."""

    def __init__(self):
        self.specs = []  # (name, shape, stream, offset, scale, trainable)
        self.vars = {}

    def make(self, name, shape, offset, scale, trainable=True):
        stream = len(self.specs) + 1
        n = int(np.prod(shape))
        value = draw(stream, n, offset, scale).reshape(shape)
        self.specs.append((name, list(shape), stream, offset, scale, trainable))
        v = tf1.get_variable(name, initializer=tf.constant(value), trainable=trainable, use_resource=True)
        self.vars[name] = v
        return v

    def init_meta(self):
        out = {}
        for name, shape, stream, offset, scale, trainable in self.specs:
            value = draw(stream, int(np.prod(shape)), offset, scale)
            # Exact: every value is a multiple of 2^-24 * scale below 2^24 * scale.
            out[name] = {"shape": shape, "stream": stream, "offset": offset, "scale": scale,
                         "trainable": trainable, "sum": float(np.sum(value.astype(np.float64)))}
        return out


def session():
    return tf1.Session(config=tf1.ConfigProto(intra_op_parallelism_threads=1,
                                              inter_op_parallelism_threads=1))


# --- model_base.py's ResNet, op for op ------------------------------------------------------

class ResNetSeed:
    def __init__(self, vs, data_format, decay=0.997, epsilon=1e-5):
        self.vs = vs
        self.cf = data_format == "channels_first"
        self.decay = decay
        self.epsilon = epsilon
        self.update_ops = []

    def nhwc_op(self, x, op):
        """A Conv2D / AvgPool on TF's CPU kernels, which take NHWC only."""
        if not self.cf:
            return op(x)
        return tf.transpose(op(tf.transpose(x, [0, 2, 3, 1])), [0, 3, 1, 2])

    def conv(self, name, x, k, filters, strides):
        in_ch = int(x.shape[1] if self.cf else x.shape[3])
        w = self.vs.make(name + "/weights", [k, k, in_ch, filters], 0.0, pow2_scale(k * k * in_ch))
        padding = "SAME"
        if strides > 1:  # _conv: explicit padding for strided convolutions
            pad = k - 1
            beg, end = pad // 2, pad - pad // 2
            if self.cf:
                x = tf.pad(x, [[0, 0], [0, 0], [beg, end], [beg, end]])
            else:
                x = tf.pad(x, [[0, 0], [beg, end], [beg, end], [0, 0]])
            padding = "VALID"
        return self.nhwc_op(x, lambda t: tf.nn.conv2d(t, w, strides=strides, padding=padding))

    def batch_norm(self, name, x):
        # tf.contrib.layers.batch_norm(decay, center=True, scale=True, epsilon,
        # is_training=True, fused=True, data_format): the fused kernel's batch
        # statistics (its variance output carries Bessel's correction), and
        # assign_moving_average(zero_debias=False) of both into the moving ones.
        c = int(x.shape[1] if self.cf else x.shape[3])
        gamma = self.vs.make(name + "/gamma", [c], 1.0, 0.25)
        beta = self.vs.make(name + "/beta", [c], 0.0, 0.125)
        mm = self.vs.make(name + "/moving_mean", [c], 0.0, 0.25, trainable=False)
        mv = self.vs.make(name + "/moving_variance", [c], 1.0, 0.5, trainable=False)
        y, mean, var = tf1.nn.fused_batch_norm(x, gamma, beta, epsilon=self.epsilon,
                                               data_format="NCHW" if self.cf else "NHWC",
                                               is_training=True)[:3]
        one_minus = 1.0 - self.decay
        self.update_ops.append(mm.assign_sub((mm - mean) * one_minus))
        self.update_ops.append(mv.assign_sub((mv - var) * one_minus))
        return y

    def avg_pool(self, x, size, stride):
        return self.nhwc_op(x, lambda t: tf.nn.avg_pool2d(t, size, stride, "SAME"))

    def residual_v1(self, name, x, k, in_filter, out_filter, stride):
        orig = x
        x = self.conv(name + "/conv1", x, k, out_filter, stride)
        x = tf.nn.relu(self.batch_norm(name + "/bn1", x))
        x = self.conv(name + "/conv2", x, k, out_filter, 1)
        x = self.batch_norm(name + "/bn2", x)
        if in_filter != out_filter:
            orig = self.avg_pool(orig, stride, stride)
            pad = (out_filter - in_filter) // 2
            if self.cf:
                orig = tf.pad(orig, [[0, 0], [pad, pad], [0, 0], [0, 0]])
            else:
                orig = tf.pad(orig, [[0, 0], [0, 0], [0, 0], [pad, pad]])
        return tf.nn.relu(tf.add(x, orig))

    def forward_pass(self, x, n):
        """cifar10_model.ResNetCifar10.forward_pass on a channels_last batch."""
        if self.cf:
            x = tf.transpose(x, [0, 3, 1, 2])
        x = x / 128 - 1
        x = self.conv("stem/conv1", x, 3, 16, 1)
        x = tf.nn.relu(self.batch_norm("stem/bn1", x))
        filters, strides = [16, 16, 32, 64], [1, 2, 2]
        for i in range(3):
            for j in range(n):
                name = f"stage{i + 1}/block{j}"
                if j == 0:
                    x = self.residual_v1(name, x, 3, filters[i], filters[i + 1], strides[i])
                else:
                    x = self.residual_v1(name, x, 3, filters[i + 1], filters[i + 1], 1)
        x = tf.reduce_mean(x, [2, 3] if self.cf else [1, 2])
        w = self.vs.make("head/dense1/weights", [64, 11], 0.0, pow2_scale(64))
        b = self.vs.make("head/dense1/biases", [11], 0.0, 0.125)
        return tf.matmul(x, w) + b  # tf.layers.dense


def resnet_case(fx, data_format, images, labels, weight_decay=2e-4, momentum=0.9):
    g = tf.Graph()
    with g.as_default():
        vs = Vars()
        model = ResNetSeed(vs, data_format)
        logits = model.forward_pass(tf.constant(images.astype(np.float32)), n=1)
        xent = tf.reduce_mean(tf1.losses.sparse_softmax_cross_entropy(logits=logits, labels=labels))
        params = tf1.trainable_variables()
        reg = weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in params])
        loss = xent + reg
        grads = tf.gradients(loss, params)
        opt = tf1.train.MomentumOptimizer(learning_rate=LR, momentum=momentum)
        train_op = tf.group(opt.apply_gradients(list(zip(grads, params))), *model.update_ops)
        with session() as s:
            s.run(tf1.global_variables_initializer())
            lv, xv, rv, tv, gv = s.run([logits, xent, reg, loss, grads])
            s.run(train_op)
            after = {name: s.run(v) for name, v in vs.vars.items()}
    names = [p.name[:-2] for p in params]  # "stem/conv1/weights:0" -> "stem/conv1/weights"
    case = f"resnet8_{data_format}"
    params_meta = {"op": "resnet_cifar", "num_layers": 8, "data_format": data_format,
                   "weight_decay": weight_decay, "momentum": momentum, "learning_rate": LR,
                   "batch_norm_decay": 0.997, "batch_norm_epsilon": 1e-5, "init": vs.init_meta(),
                   "trainable": names}
    tensors = {"x_u8": images, "labels_u8": labels.astype(np.uint8), "logits": lv,
               "cross_entropy": np.float32([xv]), "regularization": np.float32([rv]),
               "loss": np.float32([tv])}
    for name, gr in zip(names, gv):
        tensors[f"grad/{name}"] = gr
    for name, v in after.items():
        tensors[f"step/{name}"] = v
    fx.case(case, params_meta, **tensors)
    print(f"{case}: loss {tv:.6f} (cross-entropy {xv:.6f}, regularization {rv:.6f}), "
          f"{len(names)} trainable variables", file=sys.stderr)


# --- the tutorial's cifar10.inference and cifar10.loss -----------------------------------

def cnn_case(fx, images, labels):
    wd = 0.004
    g = tf.Graph()
    with g.as_default():
        vs = Vars()
        decay_terms = []

        def var_wd(name, shape, scale, wd_):
            v = vs.make(name, shape, 0.0, scale)
            if wd_ is not None:  # _variable_with_weight_decay
                decay_terms.append(tf.multiply(tf.nn.l2_loss(v), wd_))
            return v

        x = tf.constant(images.astype(np.float32) / 128.0 - 1.0)
        k1 = var_wd("conv1/weights", [5, 5, 3, 64], pow2_scale(75), 0.0)
        b1 = vs.make("conv1/biases", [64], 0.0, 0.125)
        conv1 = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k1, [1, 1, 1, 1], padding="SAME"), b1))
        pool1 = tf.nn.max_pool2d(conv1, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
        norm1 = tf.nn.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
        k2 = var_wd("conv2/weights", [5, 5, 64, 64], pow2_scale(1600), 0.0)
        b2 = vs.make("conv2/biases", [64], 0.125, 0.0625)
        conv2 = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(norm1, k2, [1, 1, 1, 1], padding="SAME"), b2))
        norm2 = tf.nn.lrn(conv2, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
        pool2 = tf.nn.max_pool2d(norm2, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
        reshape = tf.reshape(pool2, [BATCH, -1])
        dim = int(reshape.shape[1])
        w3 = var_wd("local3/weights", [dim, 384], pow2_scale(dim), wd)
        b3 = vs.make("local3/biases", [384], 0.125, 0.0625)
        local3 = tf.nn.relu(tf.matmul(reshape, w3) + b3)
        w4 = var_wd("local4/weights", [384, 192], pow2_scale(384), wd)
        b4 = vs.make("local4/biases", [192], 0.125, 0.0625)
        local4 = tf.nn.relu(tf.matmul(local3, w4) + b4)
        w5 = var_wd("softmax_linear/weights", [192, 10], pow2_scale(192), 0.0)
        b5 = vs.make("softmax_linear/biases", [10], 0.0, 0.125)
        logits = tf.add(tf.matmul(local4, w5), b5)

        xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        reg = tf.add_n(decay_terms)
        loss = tf.add_n([xent] + decay_terms)  # cifar10.loss: add_n of the 'losses' collection
        params = tf1.trainable_variables()
        grads = tf.gradients(loss, params)
        train_op = tf1.train.GradientDescentOptimizer(LR).apply_gradients(list(zip(grads, params)))
        with session() as s:
            s.run(tf1.global_variables_initializer())
            lv, xv, rv, tv, gv = s.run([logits, xent, reg, loss, grads])
            s.run(train_op)
            after = {name: s.run(v) for name, v in vs.vars.items()}
    names = [p.name[:-2] for p in params]
    tensors = {"x_u8": images, "labels_u8": labels.astype(np.uint8), "logits": lv,
               "cross_entropy": np.float32([xv]), "regularization": np.float32([rv]),
               "loss": np.float32([tv])}
    for name, gr in zip(names, gv):
        tensors[f"grad/{name}"] = gr
    for name, v in after.items():
        tensors[f"step/{name}"] = v
    fx.case("cnn", {"op": "cifar10_cnn", "weight_decay": wd, "decayed": ["local3/weights", "local4/weights"],
                    "learning_rate": LR, "input": "x_u8 / 128 - 1", "init": vs.init_meta(),
                    "trainable": names}, **tensors)
    print(f"cnn: loss {tv:.6f} (cross-entropy {xv:.6f}, regularization {rv:.6f})", file=sys.stderr)


# --- the style-transfer seed: VGG-19 features, Gatys losses, image gradient ------------------

STYLE_LAYERS = ["conv1_1", "conv2_1", "conv3_1", "conv4_1", "conv5_1"]
STYLE_LAYERS_W = [0.5, 1.0, 1.5, 3.0, 4.0]
CONTENT_LAYER = "conv4_2"
CONTENT_WEIGHT, STYLE_WEIGHT = 0.01, 1
MEAN_PIXELS = np.array([123.68, 116.779, 103.939]).reshape((1, 1, 1, 3))


MAT_LAYER_NAMES = [
    "conv1_1", "relu1_1", "conv1_2", "relu1_2", "pool1", "conv2_1", "relu2_1", "conv2_2", "relu2_2",
    "pool2", "conv3_1", "relu3_1", "conv3_2", "relu3_2", "conv3_3", "relu3_3", "conv3_4", "relu3_4",
    "pool3", "conv4_1", "relu4_1", "conv4_2", "relu4_2", "conv4_3", "relu4_3", "conv4_4", "relu4_4",
    "pool4", "conv5_1", "relu5_1", "conv5_2", "relu5_2", "conv5_3", "relu5_3", "conv5_4", "relu5_4",
    "pool5", "fc6", "relu6", "fc7", "relu7", "fc8", "prob"]


def write_vgg_mat(path, divisor, stream0):
    """A MatConvNet SimpleNN file shaped like imagenet-vgg-verydeep-19.mat at
    1/divisor of its widths: `layers`, a 1x43 cell of structs (name, type,
    weights = {filters H x W x Cin x Cout, biases 1 x Cout}), float32, the 16
    convolutions' values drawn (streams stream0, stream0 + 1, ...: weights,
    then biases, conv by conv). fc6, fc7 and fc8, which neither the seed nor
    cifarnet reads, hold 1x1x1x1 zero placeholders. Returns the draw
    metadata of every conv tensor (cifarnet's parameter names)."""
    width = {1: 64, 2: 128, 3: 256, 4: 512, 5: 512}
    layers = np.empty((1, len(MAT_LAYER_NAMES)), dtype=object)
    init = {}
    stream = stream0
    in_ch = 3
    for i, name in enumerate(MAT_LAYER_NAMES):
        kind = ("conv" if name.startswith(("conv", "fc")) else "relu" if name.startswith("relu")
                else "pool" if name.startswith("pool") else "softmax")
        layer = {"name": name, "type": kind}
        if name.startswith("conv"):
            out = width[int(name[4])] // divisor
            w_shape, b_shape = [3, 3, in_ch, out], [1, out]
            tensors = []
            for suffix, shape, offset, scale in [("weights", w_shape, 0.0, pow2_scale(9 * in_ch)),
                                                 ("biases", b_shape, 0.0, 0.0625)]:
                value = draw(stream, int(np.prod(shape)), offset, scale)
                init[f"{name}/{suffix}"] = {"shape": [int(d) for d in shape if suffix == "weights" or d != 1],
                                            "stream": stream, "offset": offset, "scale": scale,
                                            "sum": float(np.sum(value.astype(np.float64)))}
                tensors.append(value.reshape(shape))
                stream += 1
            cell = np.empty((1, 2), dtype=object)
            cell[0, 0], cell[0, 1] = tensors
            layer["weights"] = cell
            in_ch = out
        elif name.startswith("fc"):
            cell = np.empty((1, 2), dtype=object)
            cell[0, 0], cell[0, 1] = np.zeros((1, 1, 1, 1), np.float32), np.zeros((1, 1), np.float32)
            layer["weights"] = cell
        layers[0, i] = layer
    scipy.io.savemat(str(path), {"layers": layers}, do_compression=True, oned_as="row")
    # The v5 header's 116 bytes of text carry the time of writing: a fixed
    # text instead, so that reruns write the same bytes.
    with open(path, "r+b") as f:
        head = f.read(116)
        assert head.startswith(b"MATLAB 5.0 MAT-file"), head
        f.seek(0)
        f.write(b"MATLAB 5.0 MAT-file, written by scripts/tf_goldens/make_tf_network_goldens.py".ljust(116))
    return init


def vgg_case(fx, rng, divisor=32, height=20, width=26):
    """The seed's vgg_model, op for op: scipy.io.loadmat of a VGG-19-shaped
    .mat (write_vgg_mat, committed beside the fixture), _weights' indexing
    (vgg_layers[0][layer][0][0][2][0][0] and [0][1], the name at [0][0][0][0]
    checked), each conv relu(conv2d(SAME) + b), avg_pool 2x2/2 SAME for VGG's
    max pools, through conv5_4 and avgpool5 as _init builds them; then
    _create_losses on a content and a style image, at a third image, and the
    gradient of the total loss with respect to that image (what the seed's
    Adam steps on)."""
    mat_path = OUT / f"vgg19_div{divisor}.mat"
    init = write_vgg_mat(mat_path, divisor, stream0=100)
    print(f"{mat_path.relative_to(ROOT)}: {mat_path.stat().st_size} bytes", file=sys.stderr)
    content = f32(rng.integers(0, 256, size=(1, height, width, 3)) - MEAN_PIXELS)
    style = f32(rng.integers(0, 256, size=(1, height, width, 3)) - MEAN_PIXELS)
    image = f32(rng.uniform(-100.0, 100.0, size=(1, height, width, 3)))
    vgg_layers = scipy.io.loadmat(str(mat_path))["layers"]

    def weights(layer, expected_layer_name):
        w = vgg_layers[0][layer][0][0][2][0][0]
        b = vgg_layers[0][layer][0][0][2][0][1]
        layer_name = vgg_layers[0][layer][0][0][0][0]
        assert layer_name == expected_layer_name, (layer_name, expected_layer_name)
        return w, b.reshape(b.size)

    g = tf.Graph()
    with g.as_default():
        input_image = tf1.get_variable("input/Variable", initializer=tf.constant(image), use_resource=True)

        def conv2d_relu(prev, layer, name):
            w, b = weights(layer, name)
            conv = tf.nn.conv2d(prev, filters=tf.constant(w), strides=[1, 1, 1, 1], padding="SAME")
            return tf.nn.relu(conv + tf.constant(b))

        def avgpool(prev):
            return tf.nn.avg_pool2d(prev, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")

        graph = {}
        x = input_image
        for name in MAT_LAYER_NAMES[:MAT_LAYER_NAMES.index("pool5") + 1]:
            if name.startswith("conv"):
                x = graph[name] = conv2d_relu(x, MAT_LAYER_NAMES.index(name), name)
            elif name.startswith("pool"):
                x = graph["avg" + name] = avgpool(x)
        with session() as s:
            s.run(tf1.global_variables_initializer())
            s.run(input_image.assign(content))
            p = s.run(graph[CONTENT_LAYER])
            s.run(input_image.assign(style))
            a = s.run([graph[n] for n in STYLE_LAYERS])
            s.run(input_image.assign(image))
            content_loss = tf.reduce_sum((graph[CONTENT_LAYER] - p) ** 2) / (4.0 * p.size)

            def gram(f, n, m):
                f = tf.reshape(f, (m, n))
                return tf.matmul(tf.transpose(f), f)

            def single_style_loss(a_, g_):
                n = a_.shape[3]
                m = a_.shape[1] * a_.shape[2]
                return tf.reduce_sum((gram(g_, n, m) - gram(a_, n, m)) ** 2 / ((2 * n * m) ** 2))

            e = [single_style_loss(a[i], graph[STYLE_LAYERS[i]]) for i in range(len(STYLE_LAYERS))]
            style_loss = sum([STYLE_LAYERS_W[i] * e[i] for i in range(len(STYLE_LAYERS))])
            total_loss = CONTENT_WEIGHT * content_loss + STYLE_WEIGHT * style_loss
            grad = tf.gradients(total_loss, input_image)[0]
            cv, sv, tv, gv = s.run([content_loss, style_loss, total_loss, grad])
    fx.case(f"vgg19_div{divisor}", {"op": "gatys_style_transfer", "width_divisor": divisor,
                                     "mat_file": mat_path.name, "content_layer": CONTENT_LAYER,
                                     "style_layers": STYLE_LAYERS, "style_layer_weights": STYLE_LAYERS_W,
                                     "content_weight": CONTENT_WEIGHT, "style_weight": STYLE_WEIGHT,
                                     "init": init},
            content=content, style=style, image=image, content_loss=np.float32([cv]),
            style_loss=np.float32([sv]), total_loss=np.float32([tv]), image_grad=gv)
    print(f"vgg19_div{divisor}: content {cv:.6g}, style {sv:.6g}, total {tv:.6g}", file=sys.stderr)


# --- the seed's hand-made filters ---------------------------------------------------------

def seed_kernels():
    """kernels.py as the seed writes it: (name, RGB 3x3x3x3, gray 3x3x1x1)."""
    def taps(t, channels):
        a = np.zeros([3, 3, channels, channels])
        for (r, c), v in t.items():
            a[r, c, :, :] = v
        return a

    blur = {(1, 1): 0.25, (0, 1): 0.125, (1, 0): 0.125, (2, 1): 0.125, (1, 2): 0.125,
            (0, 0): 0.0625, (0, 2): 0.0625, (2, 0): 0.0625, (2, 2): 0.0625}
    blur_gray = {k: 1.0 for k in blur}
    sharpen = {(1, 1): 5, (0, 1): -1, (1, 0): -1, (2, 1): -1, (1, 2): -1}
    edge_gray = {(0, 1): -1, (1, 0): -1, (1, 2): -1, (2, 1): -1, (1, 1): 4}
    eye = -np.eye(3)
    edge_rgb = np.array([[eye, eye, eye], [eye, -8 * eye, eye], [eye, eye, eye]])
    sobel = np.zeros([3, 3])
    sobel[0, :] = 1
    sobel[0, 1] = 2
    sobel[2, :] = -1
    sobel[2, 1] = -2
    sobel_t = {(r, c): sobel[r, c] for r in range(3) for c in range(3) if sobel[r, c] != 0}
    emboss = {(0, 0): -2, (0, 1): -1, (1, 0): -1, (1, 1): 1, (1, 2): 1, (2, 1): 1, (2, 2): 2}
    return [("blur", taps(blur, 3), taps(blur_gray, 1)),
            ("sharpen", taps(sharpen, 3), taps(sharpen, 1)),
            ("edge", edge_rgb, taps(edge_gray, 1)),
            ("top_sobel", taps(sobel_t, 3), taps(sobel_t, 1)),
            ("emboss", taps(emboss, 3), taps(emboss, 1))]


def filter_cases(fx, rng):
    """The seed's read_one_image (cast to float32, / 256), rgb_to_grayscale for
    the gray kernels, and convolve(): conv2d with strides 3 and SAME padding,
    relu and a clip at 255 on the result with index 2 of the list it gets,
    which the seed slices as kernels_list[1:], so top Sobel's."""
    pixels = rng.integers(0, 256, size=(20, 17, 3), dtype=np.uint8)
    image = tf.cast(tf.constant(pixels), tf.float32) / 256.0
    gray = tf.image.rgb_to_grayscale(image)
    fx.put("filters/pixels_u8", pixels)
    fx.put("filters/gray", gray.numpy())
    ks = seed_kernels()
    for rgb in (True, False):
        src = tf.expand_dims(image if rgb else gray, 0)
        clipped_name = ks[1:][2][0]  # convolve()'s i == 2 on kernels_list[1:]: top Sobel
        for name, k_rgb, k_gray in ks:
            kernel = tf.constant(k_rgb if rgb else k_gray, dtype=tf.float32)
            out = tf.nn.conv2d(src, kernel, strides=[1, 3, 3, 1], padding="SAME")[0]
            clipped = name == clipped_name
            if clipped:
                out = tf.minimum(tf.nn.relu(out), 255)
            fx.case(f"filter_{name}_{'rgb' if rgb else 'gray'}",
                    {"op": "filter", "kernel": name, "rgb": rgb, "stride": 3, "relu_clip": clipped},
                    kernel=f32(kernel.numpy()), y=out.numpy())


def check_fused_variance():
    """The fused kernel's variance output is the unbiased one (Bessel's
    correction), which the seed's moving variance averages."""
    x = draw(999, 2 * 3 * 3 * 2, 0.0, 1.0).reshape(2, 3, 3, 2)
    var = tf1.nn.fused_batch_norm(x, np.ones(2, np.float32), np.zeros(2, np.float32), epsilon=1e-5,
                                  is_training=True)[2].numpy()
    want = x.astype(np.float64).var(axis=(0, 1, 2), ddof=1)
    assert np.allclose(var, want, rtol=1e-5), (var, want)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"TensorFlow {tf.__version__}, numpy {np.__version__}, safetensors {safetensors.__version__}",
          file=sys.stderr)
    check_fused_variance()
    rng = np.random.default_rng(47)
    fx = Fixture()
    images = rng.integers(0, 256, size=(BATCH, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    for fmt in ("channels_last", "channels_first"):
        resnet_case(fx, fmt, images, labels)
    cnn_images = rng.integers(0, 256, size=(BATCH, 8, 8, 3), dtype=np.uint8)
    cnn_labels = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    cnn_case(fx, cnn_images, cnn_labels)
    vgg_case(fx, rng)
    filter_cases(fx, rng)
    fx.save(OUT / "networks.safetensors")


if __name__ == "__main__":
    main()
