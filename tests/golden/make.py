"""Writes the golden streams that tests/test_golden_streams.py compares every encoder with: run
it only for an intended change of the wire format, and record the change in
docs/wire-format.md.

    .venv/bin/python tests/golden/make.py

Inputs (kept here as .npy, so they do not depend on a random generator's version):
levels_s8.npy (int8, QSGD s = 8 levels of a Laplace-like gradient with runs of zeros) and
levels_s127.npy (int16 levels up to 127 in magnitude, with long runs), levels_ternary.npy
(70,000 int8 TernGrad-like levels, 10% nonzero: more than one 65,536-level chunk),
levels_blocks.npy (4,096 int8 levels whose Laplace scale changes every 256 levels: ``ans``
codes them with block contexts). Outputs: <encoder>.<set>.bin
(the stand-alone stream of ``encoder(name).encode(levels)``) for every encoder and set,
and message.rlh.bin (the tensor message of ``pack`` for levels_s8 with fixed scales).
levels_rows.npy (a 48 x 40 int8 matrix of rows near multiples of one profile, then 100 other
levels) gives <encoder>.rows.bin for the encoders of ROW_ENCODERS with the layout ROWS_LAYOUT
(``ans``'s row model; these pin the decoder only, the fit being floating point).
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))        # tests/: the shared test helpers

import horovod_huffman as hh  # noqa: E402
from strategies import deterministic_encoder  # noqa: E402

SETS = ("s8", "s127", "ternary", "blocks")
ROWS_LAYOUT = [(48, 40)]
ROW_ENCODERS = ("ans", "auto")


def encoder(name):
    """The encoder ``name``, seeded where it samples the levels (NumPy's PCG64 stream, NumPy
    pinned in docker/versions.env)."""
    return deterministic_encoder(name)


def make_levels():
    rng = np.random.default_rng(20261124)
    s8 = np.clip(np.rint(rng.laplace(0, 1.3, 3000)), -8, 8)
    s8[500:900] = 0                                   # a long run of zeros
    s127 = np.clip(np.rint(rng.laplace(0, 20, 2000)), -127, 127)
    s127[100:400] = 5                                  # a long run of one level
    ternary = np.where(rng.random(70000) < 0.1, np.where(rng.random(70000) < 0.5, -1, 1), 0)
    scale = np.repeat(rng.choice([0.2, 1.0, 4.0], 16), 256)
    blocks = np.clip(np.rint(rng.laplace(0, scale)), -16, 16)
    return {"s8": s8.astype(np.int8), "s127": s127.astype(np.int16),
            "ternary": ternary.astype(np.int8), "blocks": blocks.astype(np.int8)}


def make_rows_levels():
    rng = np.random.default_rng(20261125)
    matrix = np.outer(rng.normal(0, 1, 48), rng.normal(0, 6, 40)) + rng.normal(0, 0.6, (48, 40))
    tail = rng.integers(-4, 5, 100)
    return np.clip(np.rint(np.concatenate([matrix.ravel(), tail])), -127, 127).astype(np.int8)


def message_input(levels):
    """The QuantizedTensor whose tensor message is pinned (float32, 3000 = 6 x 500 elements)."""
    scales = (np.arange(1, 7, dtype=np.float32) / np.float32(64))
    return hh.QuantizedTensor(levels, scales, (6, 500), np.dtype(np.float32), 512)


def main():
    levels = make_levels()
    for name, values in levels.items():
        np.save(os.path.join(HERE, f"levels_{name}.npy"), values)
        for encoder_name in hh.ENCODERS:
            with open(os.path.join(HERE, f"{encoder_name}.{name}.bin"), "wb") as f:
                f.write(bytes(encoder(encoder_name).encode(values)))
    rows = make_rows_levels()
    np.save(os.path.join(HERE, "levels_rows.npy"), rows)
    for encoder_name in ROW_ENCODERS:
        with open(os.path.join(HERE, f"{encoder_name}.rows.bin"), "wb") as f:
            f.write(bytes(encoder(encoder_name).encode(rows, layout=ROWS_LAYOUT)))
    with open(os.path.join(HERE, "message.rlh.bin"), "wb") as f:
        f.write(bytes(hh.pack(message_input(levels["s8"]), "rlh")))


if __name__ == "__main__":
    main()
