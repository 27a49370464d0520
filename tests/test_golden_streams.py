"""The wire format, pinned: every encoder's stream for fixed levels (and one tensor message)
equals the bytes kept in tests/golden, and decodes back. A change to an encoder and its decoder
together would pass the round-trip tests; it fails here."""
import os

import numpy as np
import pytest

import horovod_huffman as hh
from golden.make import (ROW_ENCODERS, ROWS_LAYOUT, SETS, encoder as golden_encoder,  # beside
                         message_input)                                     # this file
from time_limits import DECODING                # beside this file

pytestmark = DECODING

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
CHANGED = ("the {what} changed: its bytes differ from tests/golden/{file}. If the wire format is "
           "meant to change, regenerate them (.venv/bin/python tests/golden/make.py) and "
           "record the change in docs/wire-format.md")


def golden(file):
    with open(os.path.join(GOLDEN, file), "rb") as f:
        return f.read()


def levels(name):
    return np.load(os.path.join(GOLDEN, f"levels_{name}.npy"))


@pytest.mark.parametrize("name", SETS)
@pytest.mark.parametrize("encoder", hh.ENCODERS)
def test_every_encoder_writes_the_golden_stream(encoder, name):
    file = f"{encoder}.{name}.bin"
    values = levels(name)
    expected = golden(file)
    assert bytes(golden_encoder(encoder).encode(values)) == expected, \
        CHANGED.format(what=f"stream of {encoder!r}", file=file)
    back = hh.decode(np.frombuffer(expected, dtype=np.uint8))
    assert back.dtype == values.dtype and np.array_equal(back, values)


@pytest.mark.parametrize("encoder", ROW_ENCODERS)
def test_the_golden_row_model_streams_decode(encoder):
    """The row model's streams pin the decoder only: the encoder's fit is floating point
    (kernels/rows.py), whose last bits may differ from one CPU to another."""
    values = levels("rows")
    got = hh.decode(np.frombuffer(golden(f"{encoder}.rows.bin"), dtype=np.uint8))
    assert np.array_equal(got, values)
    assert np.array_equal(hh.decode(golden_encoder(encoder).encode(values, layout=ROWS_LAYOUT)),
                          values)


def test_the_tensor_message_is_the_golden_one():
    qt = message_input(levels("s8"))
    expected = golden("message.rlh.bin")
    assert bytes(hh.pack(qt, "rlh")) == expected, \
        CHANGED.format(what="tensor message (HHQT)", file="message.rlh.bin")
    back = hh.unpack(np.frombuffer(expected, dtype=np.uint8))
    assert np.array_equal(back.levels, qt.levels) and np.array_equal(back.scales, qt.scales)
    assert back.shape == qt.shape and back.dtype == qt.dtype
