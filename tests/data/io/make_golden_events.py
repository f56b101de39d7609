#!/usr/bin/env python3
"""Writes tests/data/io/golden_events.tfevents with TensorBoard's own writer.

Run once (not needed at test time):
    python3 -m venv /tmp/venv-tf
    /tmp/venv-tf/bin/pip install tensorflow-cpu tensorboard
    /tmp/venv-tf/bin/python tests/data/io/make_golden_events.py tests/data/io

The file is written by tensorboard.summary.writer.event_file_writer.
EventFileWriter (record framing, masked CRCs and its file_version event, whose
wall time is pinned by patching time.time while the writer is created).
Histogram and image summaries are produced by TensorFlow's own summary ops
(tf.compat.v1.summary.histogram / .image, i.e. the C++ histogram with the
default buckets and TF's PNG encoder); scalar events are built from the
event_pb2/summary_pb2 protos. Every event has a fixed wall time, so the C++
test (tests/io/test_tfevents.cpp) can write the same events and compare bytes.
"""
import os
import sys
import time

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer import event_file_writer

out = sys.argv[1] if len(sys.argv) > 1 else "."
tf.compat.v1.disable_eager_execution()

# Values the C++ test recomputes exactly (all exactly representable in float32).
hist_values = np.array([(i - 500) * 0.0625 for i in range(1000)] +
                       [1e-13, -1e-13, 1e30, -1e30, 3.0e38, 0.0, 0.0], dtype=np.float32)
# 5x4 RGB image and 3x2 gray image with pixel = formula of (y, x, c)
rgb = np.array([[[(y * 50 + x * 20 + c * 7) % 256 for c in range(3)] for x in range(4)] for y in range(5)],
               dtype=np.uint8)
gray = np.array([[[(y * 90 + x * 40) % 256] for x in range(2)] for y in range(3)], dtype=np.uint8)

hist_op = tf.compat.v1.summary.histogram("weights", tf.constant(hist_values))
empty_op = tf.compat.v1.summary.histogram("empty", tf.constant(np.zeros(0, np.float32)))
rgb_op = tf.compat.v1.summary.image("sample", tf.constant(rgb[None]), max_outputs=1)
gray_op = tf.compat.v1.summary.image("gray", tf.constant(gray[None]), max_outputs=1)
with tf.compat.v1.Session() as sess:
    hist_bytes, empty_bytes, rgb_bytes, gray_bytes = sess.run([hist_op, empty_op, rgb_op, gray_op])


def summary_from(b):
    s = summary_pb2.Summary()
    s.ParseFromString(b)
    return s


def scalars(**kv):
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in kv.items()])


events = [
    event_pb2.Event(wall_time=1700000001.5, step=10, summary=scalars(loss=2.302585)),
    # two values in one summary, a zero value (oneof: still written) and step 0 (omitted)
    event_pb2.Event(wall_time=1700000002.0, step=0,
                    summary=summary_pb2.Summary(value=[
                        summary_pb2.Summary.Value(tag="learning_rate", simple_value=0.1),
                        summary_pb2.Summary.Value(tag="accuracy", simple_value=0.0)])),
    event_pb2.Event(wall_time=1700000003.25, step=-5, summary=scalars(negative_step=-1.5)),
    event_pb2.Event(wall_time=1700000004.125, step=2**40, summary=scalars(big_step=1e30)),
    event_pb2.Event(wall_time=1700000005.0, step=20, summary=summary_from(hist_bytes)),
    event_pb2.Event(wall_time=1700000006.0, step=21, summary=summary_from(empty_bytes)),
    event_pb2.Event(wall_time=1700000007.0, step=30, summary=summary_from(rgb_bytes)),
    event_pb2.Event(wall_time=1700000008.0, step=31, summary=summary_from(gray_bytes)),
]

real_time = time.time
time.time = lambda: 1700000000.25
try:
    writer = event_file_writer.EventFileWriter(out, flush_secs=3600)
finally:
    time.time = real_time
for e in events:
    writer.add_event(e)
writer.close()
path = writer._file_name
os.replace(path, os.path.join(out, "golden_events.tfevents"))
print("wrote", os.path.join(out, "golden_events.tfevents"), "from", os.path.basename(path))
for v in summary_from(hist_bytes).value:
    print(v.tag, "buckets:", len(v.histo.bucket), "num:", v.histo.num)
for b in (rgb_bytes, gray_bytes):
    v = summary_from(b).value[0]
    print(v.tag, v.image.height, v.image.width, v.image.colorspace, len(v.image.encoded_image_string), "PNG bytes")
