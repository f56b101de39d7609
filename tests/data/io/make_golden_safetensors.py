#!/usr/bin/env python3
"""Writes the golden safetensors fixtures used by tests/io/test_safetensors.cpp.

Run once with the real `safetensors` library (not needed at test time):
    python3 -m venv /tmp/venv-io && /tmp/venv-io/bin/pip install safetensors numpy
    /tmp/venv-io/bin/python tests/data/io/make_golden_safetensors.py tests/data/io

golden.safetensors: one tensor of each common dtype (BF16 given as raw bits,
since NumPy has no bfloat16) and a single metadata entry, so its bytes are
reproducible (the library writes several metadata keys in hash order).
golden_multi_metadata.safetensors: the same tensors with several metadata
keys, for the reader only.
The values are simple formulas that the C++ test recomputes.
"""
import sys
import numpy as np
from safetensors import serialize, TensorSpec

out = sys.argv[1] if len(sys.argv) > 1 else "."

tensors = {
    "conv1/weights": (np.arange(2 * 2 * 3 * 4, dtype=np.float32).reshape(2, 2, 3, 4) * 0.25 - 3.0),
    "conv1/biases": np.array([0.1, -0.2, 0.3, -0.4], dtype=np.float32),
    "bn/moving_variance": np.array([1.5, 2.5, 1e-5], dtype=np.float64),
    "global_step": np.array(1234567890123, dtype=np.int64),
    "labels": np.array([7, -3, 2147483647], dtype=np.int32),
    "pixels": np.array([[0, 1, 2], [253, 254, 255]], dtype=np.uint8),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "u16": np.array([1, 65535], dtype=np.uint16),
}
# bfloat16 of [1.0, -2.5, 3.140625, 0.0] as raw little-endian bits
bf16_bits = np.array([0x3F80, 0xC020, 0x4049, 0x0000], dtype=np.uint16)


def specs():
    # TensorSpec holds raw pointers: the arrays in `tensors` stay alive, and
    # each is already C-contiguous (np.ascontiguousarray would turn the 0-d
    # global_step into shape [1]).
    d = {}
    for k, v in tensors.items():
        assert v.flags["C_CONTIGUOUS"]
        d[k] = TensorSpec(dtype=v.dtype.name, shape=list(v.shape), data_ptr=v.ctypes.data, data_len=v.nbytes)
    d["half/bf16"] = TensorSpec(dtype="bfloat16", shape=[2, 2], data_ptr=bf16_bits.ctypes.data,
                                data_len=bf16_bits.nbytes)
    return d


with open(f"{out}/golden.safetensors", "wb") as f:
    f.write(bytes(serialize(specs(), metadata={"format": "np"})))
with open(f"{out}/golden_multi_metadata.safetensors", "wb") as f:
    f.write(bytes(serialize(specs(), metadata={"format": "np", "global_step": "42", "note": "h\u00e9llo \"q\"\n"})))
print("wrote golden.safetensors, golden_multi_metadata.safetensors to", out)
