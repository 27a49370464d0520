"""The wire format as written: a second decoder made from docs/wire-format.md alone
(tests/reference_decoder.py, which imports nothing of horovod_huffman) reads every golden
stream, and every encoder's stream of random levels, to the levels horovod_huffman reads."""
import os

import numpy as np
import pytest

import horovod_huffman as hh
import reference_decoder as reference                 # beside this file
from golden.make import message_input                 # beside this file
from strategies import chunked_encoder, deterministic_encoder   # beside this file
from test_rows import rank_one                        # beside this file
from time_limits import DECODING                # beside this file

pytestmark = DECODING

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
MESSAGE = "message.rlh.bin"
STREAMS = sorted(f for f in os.listdir(GOLDEN) if f.endswith(".bin") and f != MESSAGE)


def golden(file):
    with open(os.path.join(GOLDEN, file), "rb") as f:
        return f.read()


def golden_levels(name):
    """The levels of the golden set ``name``, which <encoder>.<name>.bin encodes."""
    return np.load(os.path.join(GOLDEN, f"levels_{name}.npy"))


def ans_mode(stream):
    """The mode of an ``ans`` stream: its first parameter byte (a varint below 128)."""
    return stream[reference.STREAM_HEADER.size]


@pytest.mark.parametrize("file", STREAMS)
def test_the_reference_decoder_reads_every_golden_stream(file):
    stream = golden(file)
    expected = golden_levels(file.split(".")[1])
    got = reference.decode(stream)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert np.array_equal(hh.decode(np.frombuffer(stream, dtype=np.uint8)), got)


def test_the_reference_decoder_reads_the_golden_tensor_message():
    message = reference.decode_message(golden(MESSAGE))
    qt = message_input(golden_levels("s8"))
    assert message.shape == qt.shape and message.dtype == qt.dtype.name
    assert message.bucket == qt.bucket_size and np.array_equal(message.scales, qt.scales)
    assert message.levels.dtype == qt.levels.dtype and np.array_equal(message.levels, qt.levels)
    assert np.array_equal(hh.unpack(np.frombuffer(golden(MESSAGE), dtype=np.uint8)).levels,
                          message.levels)


def test_the_golden_streams_cover_every_encoder_id_and_ans_mode():
    """Every encoder has golden streams, together they hold every encoder id of the format,
    and ``ans``'s hold one table (mode 0), block classes (2) and the row model (3)."""
    assert set(hh.ENCODERS) <= {file.split(".")[0] for file in STREAMS}
    ids = {reference.stream_header(golden(file))[0] for file in STREAMS}
    assert ids == set(reference.ENCODER_NAMES)
    modes = {ans_mode(golden(file)) for file in STREAMS if file.startswith("ans.")}
    assert {0, 2, 3} <= modes


def test_the_reference_decoder_checks_what_the_format_states():
    """A flipped payload bit fails the checksum; with the checksum made anew, the rANS
    chunk's own checks (its units run out before its levels, or its states end elsewhere)."""
    stream = bytearray(golden("ans.ternary.bin"))
    stream[-9] ^= 0x01                                  # the payload's last byte
    with pytest.raises(reference.FormatError, match="checksum"):
        reference.decode(bytes(stream))
    digest = reference.xxhash.xxh3_64_intdigest(bytes(stream[:-8]))
    stream[-8:] = digest.to_bytes(8, "little")
    with pytest.raises(reference.FormatError, match="final states|unread|past its end"):
        reference.decode(bytes(stream))


# ---- Every encoder's stream of random levels --------------------------------------------------

def distribution(kind, n, dtype, rng):
    """``n`` levels of ``dtype`` shaped as quantized gradients take them, and worse."""
    info = np.iinfo(np.int32 if dtype == np.int64 else dtype)   # int64: int32-range levels
    lo, hi = int(info.min), int(info.max)
    if kind == "ternary":                               # sparse: TernGrad
        x = rng.choice([-1, 0, 1], size=n, p=[0.04, 0.92, 0.04])
    elif kind == "s8":                                  # QSGD s = 8, a run of zeros
        x = np.clip(np.rint(rng.laplace(0, 1.3, n)), -8, 8)
        x[n // 5:n // 3] = 0
    elif kind == "s127":
        x = np.clip(np.rint(rng.laplace(0, 20, n)), -127, 127)
    elif kind == "runs":                                # runs of every bucket
        values = rng.integers(-3, 4, size=n)
        x = np.repeat(values, rng.geometric(1 / 40, size=n))[:n]
    elif kind == "tokens":                              # many (level, run) tokens: rla escapes
        values = rng.integers(-1040, 1040, size=n)
        x = np.repeat(values, rng.integers(1, 4, size=n))[:n]
    elif kind == "wide":                                # past every window: escapes
        x = rng.integers(lo, hi, size=n, endpoint=True)
    elif kind == "outliers":                            # a narrow window and a few far levels
        x = np.clip(np.rint(rng.laplace(0, 2, n)), -20, 20)
        x[rng.integers(0, n, 5)] = rng.choice([lo, hi, lo // 3, hi // 3], 5)
    else:                                               # constant
        x = np.full(n, rng.integers(lo, hi, endpoint=True))
    return np.asarray(x, dtype=np.int64).astype(dtype)


# (distribution, dtype, levels, chunk size or None for the encoder's default)
CASES = [(kind, dtype, n, chunk)
         for kind, dtypes in (("ternary", (np.int8, np.int32)), ("s8", (np.int8, np.int64)),
                              ("s127", (np.int16, np.int8)), ("runs", (np.int8, np.int16)),
                              ("tokens", (np.int16,)), ("wide", (np.int16, np.int32)),
                              ("outliers", (np.int16, np.int32)),
                              ("constant", (np.int8, np.int64)))
         for dtype in dtypes
         for n, chunk in ((2500, None), (3000, 512))] + \
    [("s8", np.int8, n, None) for n in (1, 2, 5)] + [("ternary", np.int8, 0, None)]


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{k}-{np.dtype(d).name}-{n}-{c}" for k, d, n, c in CASES])
def test_the_reference_decoder_reads_every_encoders_stream(case):
    kind, dtype, n, chunk = CASES[case]
    levels = distribution(kind, n, dtype, np.random.default_rng(case))
    for name in hh.ENCODERS:
        encoder = chunked_encoder(name, chunk) if chunk and name in hh.codec.encoders.CHUNKED \
            else deterministic_encoder(name)
        got = reference.decode(bytes(encoder.encode(levels)))
        assert got.dtype == levels.dtype and np.array_equal(got, levels), name


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_the_reference_decoder_reads_the_row_model(dtype):
    """``ans`` with a layout: the row model, its residuals int16 for int8 levels and int32
    for wider ones, in residual streams of one table, block classes, escapes or one level."""
    limit = np.iinfo(dtype).max if dtype != np.int32 else 30000
    u, v = np.arange(1, 33), np.array([1, -1, 0, 1, 1, -1, 0, -1] * 4)
    wild = rank_one(64, 64, scale=200.0, seed=14, dtype=dtype, limit=limit)
    wild[900] = min(4700, limit)                        # far outside the residuals' window
    cases = [(rank_one(64, 48, seed=5, dtype=dtype), 64, 48),
             (rank_one(256, 32, seed=13, dtype=dtype, noise=3.0), 256, 32),
             (wild, 64, 64), (np.outer(u, v).astype(dtype).ravel(), 32, 32)]
    for levels, rows, length in cases:
        for encoder in (hh.get_encoder("ans"), chunked_encoder("ans", 256)):
            stream = bytes(encoder.encode(levels, layout=[(rows, length)]))
            assert ans_mode(stream) == 3
            got = reference.decode(stream)
            assert got.dtype == levels.dtype and np.array_equal(got, levels)
