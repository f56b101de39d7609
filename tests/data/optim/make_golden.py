#!/usr/bin/env python3
"""Golden values for tests/optim: TensorFlow's own optimizers, clipping,
moving averages and learning-rate schedules, run through the TF 1.x API
(tf.compat.v1, graph mode).

Made once with:
    python3 -m venv /tmp/venv-optim && /tmp/venv-optim/bin/pip install tensorflow-cpu
    /tmp/venv-optim/bin/python tests/data/optim/make_golden.py > tests/data/optim/golden.json
(TensorFlow 2.21.0, the version this was run with, is recorded in the file.)
Not needed to run the tests: the JSON is committed.

Every float is written with Python's repr, so float32 and float64 values
round-trip exactly.
"""
import json
import math

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
v1.disable_eager_execution()

# Two variables of different shapes; values and gradients chosen to be
# non-dyadic so rounding is exercised.
VAR0 = [[0.3, -1.7, 2.25], [0.011, -0.4, 5.0]]
VAR1 = [1.5, -0.75]
GRADS = [  # per step: (grad0, grad1)
    ([[0.1, -0.2, 0.3], [1.7, -0.05, 0.0]], [0.25, -3.0]),
    ([[-0.6, 0.9, 0.01], [2.5, 0.3, -1.1]], [0.5, 1.25]),
    ([[0.7, 0.7, -0.7], [0.0, 4.0, 0.2]], [-2.0, 0.125]),
    ([[1e-3, -2e-3, 3e-3], [-0.3, 0.33, 0.333]], [7.0, -0.01]),
    ([[-1.0, 0.0, 2.0], [0.05, -0.06, 0.07]], [0.0, 0.9]),
]
LRS = [0.1, 0.05, 0.3, 0.01, 0.2]

DTYPES = {"float32": tf.float32, "float64": tf.float64}


def flat(a):
    return [float(x) for x in np.asarray(a).reshape(-1)]


def run_optimizer(make_opt, dtype, slot_names):
    """Runs len(GRADS) steps; returns per-step values, slots (by TF's slot
    key: "momentum", "m", "v") and extras, and every variable's name."""
    g = tf.Graph()
    with g.as_default():
        with v1.variable_scope("layer"):
            w = v1.get_variable("weights", initializer=np.array(VAR0, dtype=dtype.as_numpy_dtype))
            b = v1.get_variable("biases", initializer=np.array(VAR1, dtype=dtype.as_numpy_dtype))
        # float32 runs feed float32 hyper-parameters, as TF1 recipes do (TF
        # makes Python floats float32 tensors); float64 runs pass float64
        # tensors so that every hyper-parameter is float64 too.
        lr = v1.placeholder(dtype, [])
        g0 = v1.placeholder(dtype, [2, 3])
        g1 = v1.placeholder(dtype, [2])
        opt = make_opt(lr, lambda x: tf.constant(x, dtype))
        train = opt.apply_gradients([(g0, w), (g1, b)])
        names = {v.op.name for v in v1.global_variables()}
        steps = []
        with v1.Session(graph=g) as s:
            s.run(v1.global_variables_initializer())
            for (a, c), r in zip(GRADS, LRS):
                s.run(train, {lr: r, g0: a, g1: c})
                rec = {"weights": flat(s.run(w)), "biases": flat(s.run(b))}
                for sn in slot_names:
                    rec["weights/" + sn] = flat(s.run(opt.get_slot(w, sn)))
                    rec["biases/" + sn] = flat(s.run(opt.get_slot(b, sn)))
                for extra in ("beta1_power", "beta2_power"):
                    if extra in names:
                        v = [x for x in v1.global_variables() if x.op.name == extra][0]
                        rec[extra] = float(s.run(v))
                steps.append(rec)
        return {"steps": steps, "variables": sorted(names)}


def optimizers():
    out = {}
    cases = {
        "sgd": (lambda lr, c: v1.train.GradientDescentOptimizer(lr), []),
        "momentum": (lambda lr, c: v1.train.MomentumOptimizer(lr, c(0.9)), ["momentum"]),
        "nesterov": (lambda lr, c: v1.train.MomentumOptimizer(lr, c(0.9), use_nesterov=True), ["momentum"]),
        "adam": (lambda lr, c: v1.train.AdamOptimizer(lr, beta1=c(0.9), beta2=c(0.999), epsilon=c(1e-8)),
                 ["m", "v"]),
        "adam_custom": (lambda lr, c: v1.train.AdamOptimizer(lr, beta1=c(0.5), beta2=c(0.9), epsilon=c(1e-3)),
                        ["m", "v"]),
    }
    for name, (make, slots) in cases.items():
        out[name] = {}
        for dn, dt in DTYPES.items():
            out[name][dn] = run_optimizer(make, dt, slots)
    return out


def clipping():
    out = {}
    for dn, dt in DTYPES.items():
        g = tf.Graph()
        with g.as_default():
            a = tf.constant(np.array(GRADS[1][0]), dtype=dt)
            b = tf.constant(np.array(GRADS[1][1]), dtype=dt)
            rec = {}
            for clip in (0.5, 2.0, 100.0):
                rec["clip_by_norm_%g" % clip] = [flat(v1.Session().run(tf.clip_by_norm(a, clip))),
                                                  flat(v1.Session().run(tf.clip_by_norm(b, clip)))]
                clipped, norm = tf.clip_by_global_norm([a, b], clip)
                with v1.Session() as s:
                    ca, cb, n = s.run([clipped[0], clipped[1], norm])
                rec["clip_by_global_norm_%g" % clip] = {"grads": [flat(ca), flat(cb)], "norm": float(n)}
            rec["global_norm"] = float(v1.Session().run(tf.linalg.global_norm([a, b])))
        out[dn] = rec
    return out


def ema():
    """Variable EMA with and without num_updates, over the VAR0 tensor whose
    value follows a fixed sequence; and the tutorial's loss average."""
    values = [VAR0] + [[[x + 0.37 * (k + 1) * (i + 1) for i, x in enumerate(row)] for row in VAR0]
                       for k in range(5)]
    out = {}
    for dn, dt in DTYPES.items():
        rec = {}
        for label, decay, num_updates in (("fixed", 0.99, None), ("num_updates", 0.9999, [1, 2, 3, 1000, 100000])):
            g = tf.Graph()
            with g.as_default():
                w = v1.get_variable("w", initializer=np.array(VAR0, dtype=dt.as_numpy_dtype))
                n = v1.placeholder(tf.int64, [])
                e = v1.train.ExponentialMovingAverage(decay, num_updates=n if num_updates else None)
                upd = e.apply([w])
                newv = v1.placeholder(dt, [2, 3])
                assign = w.assign(newv)
                shadow = e.average(w)
                seq = []
                with v1.Session(graph=g) as s:
                    s.run(v1.global_variables_initializer())
                    for k in range(5):
                        s.run(assign, {newv: values[k + 1]})
                        feed = {n: num_updates[k]} if num_updates else {n: 0}
                        s.run(upd, feed)
                        seq.append(flat(s.run(shadow)))
                rec[label] = {"values": [flat(v) for v in values], "shadows": seq,
                              "shadow_name": shadow.op.name, "num_updates": num_updates, "decay": decay}
        # Loss averages (cifar10.py _add_loss_summaries): a tensor, not a variable.
        losses = [2.3, 2.1, 1.95, 2.4, 1.7]
        for label, zd in (("loss_avg", False), ("loss_avg_debiased", True)):
            g = tf.Graph()
            with g.as_default():
                x = v1.placeholder(dt, [], name="x")
                ident = tf.identity(x, name="total_loss")
                e = v1.train.ExponentialMovingAverage(0.9, name="avg", zero_debias=zd)
                upd = e.apply([ident])
                avg = e.average(ident)
                seq = []
                with v1.Session(graph=g) as s:
                    s.run(v1.global_variables_initializer())
                    for L in losses:
                        s.run(upd, {x: L})
                        seq.append(float(s.run(avg)))
                rec[label] = {"losses": losses, "averages": seq, "shadow_name": avg.op.name}
        out[dn] = rec
    return out


def schedules():
    out = {}
    g = tf.Graph()
    with g.as_default():
        step = v1.placeholder(tf.int64, [])
        pc = v1.train.piecewise_constant(step, [10, 20, 30], [1.0, 0.1, 0.01, 0.002])
        ed = v1.train.exponential_decay(0.1, step, 350, 0.1, staircase=False)
        eds = v1.train.exponential_decay(0.1, step, 350, 0.1, staircase=True)
        cd = v1.train.cosine_decay(0.1, step, 100)
        cda = v1.train.cosine_decay(0.1, step, 100, alpha=0.1)
        with v1.Session(graph=g) as s:
            steps_pc = list(range(0, 36))
            out["piecewise_constant"] = {"boundaries": [10, 20, 30], "values": [1.0, 0.1, 0.01, 0.002],
                                         "steps": steps_pc,
                                         "lr": [float(s.run(pc, {step: k})) for k in steps_pc]}
            steps_ed = [0, 1, 100, 349, 350, 351, 699, 700, 1000, 5000]
            out["exponential_decay"] = {"steps": steps_ed, "lr": [float(s.run(ed, {step: k})) for k in steps_ed]}
            out["exponential_decay_staircase"] = {"steps": steps_ed,
                                                  "lr": [float(s.run(eds, {step: k})) for k in steps_ed]}
            steps_cd = [0, 1, 25, 50, 75, 99, 100, 101, 150]
            out["cosine_decay"] = {"steps": steps_cd, "lr": [float(s.run(cd, {step: k})) for k in steps_cd]}
            out["cosine_decay_alpha"] = {"steps": steps_cd, "lr": [float(s.run(cda, {step: k})) for k in steps_cd]}
    return out


def main():
    doc = {
        "tensorflow": tf.__version__,
        "inputs": {"var0": VAR0, "var1": VAR1, "grads": GRADS, "lrs": LRS},
        "optimizers": optimizers(),
        "clipping": clipping(),
        "ema": ema(),
        "schedules": schedules(),
    }
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
