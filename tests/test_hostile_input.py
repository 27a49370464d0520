"""Decoders treat their input as hostile: every bad stream raises DecodeError, promptly."""
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st, HealthCheck, settings

import horovod_huffman as hh
from horovod_huffman.codec import wire
from horovod_huffman.tools import fuzz
from horovod_huffman.tools.fuzz import ENCODER_IDS, reseal
from horovod_run import PYTHONPATH
from strategies import chunked_encoder, deterministic_encoder as encoder, level_arrays
from time_limits import DECODING

NAMES = list(ENCODER_IDS)
pytestmark = DECODING


def sample_levels(seed=0, n=2000):
    rng = np.random.default_rng(seed)
    x = np.clip(np.rint(rng.laplace(0, 1.5, n)), -8, 8).astype(np.int8)
    x[500:900] = 0
    return x


def decode_or_error(buf, **kw):
    try:
        return hh.decode(buf, **kw)
    except hh.DecodeError as e:
        assert str(e)
        return None


@pytest.mark.parametrize("name", NAMES)
def test_every_truncation_raises(name):
    buf = bytes(hh.get_encoder(name).encode(sample_levels()))
    for cut in list(range(0, 64)) + list(range(64, len(buf), 37)):
        with pytest.raises(hh.DecodeError):
            hh.decode(buf[:cut])


@pytest.mark.parametrize("name", NAMES)
def test_bit_flips_are_caught_by_the_checksum(name):
    buf = bytearray(hh.get_encoder(name).encode(sample_levels()))
    for pos in range(0, len(buf), max(1, len(buf) // 50)):
        flipped = bytearray(buf)
        flipped[pos] ^= 1 << (pos % 8)
        with pytest.raises(hh.DecodeError):
            hh.decode(bytes(flipped))


@pytest.mark.parametrize("name", NAMES)
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_resealed_mutations_never_crash_or_overallocate(name, data):
    x = data.draw(level_arrays(max_size=500))
    chunked = name in hh.codec.encoders.CHUNKED and data.draw(st.booleans())
    enc = chunked_encoder(name, data.draw(st.integers(1, 64))) if chunked else encoder(name)
    buf = bytearray(enc.encode(x))
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(buf) - wire.CHECKSUM.size - 1))   # not the checksum
        op = data.draw(st.sampled_from(["flip", "byte", "insert", "delete"]))
        if op == "flip":
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "byte":
            buf[pos] = data.draw(st.integers(0, 255))
        elif op == "insert":
            buf[pos:pos] = bytes([data.draw(st.integers(0, 255))])
        elif len(buf) > wire.CHECKSUM.size + 1:
            del buf[pos]
    sealed = reseal(buf)
    out = decode_or_error(sealed, max_elements=10_000)
    if out is not None:                 # exactly what the (checked) header declares
        assert out.size == hh.codec.encoders.check(sealed, max_elements=10_000).n


@pytest.mark.parametrize("name", ["huffman", "rlh"])
@given(seed=st.integers(0, 2**32 - 1), chunk=st.integers(16, 200), flips=st.integers(1, 6))
def test_bit_flips_in_sparse_many_chunk_streams(name, seed, chunk, flips):
    """The four-chunk loops and the Huffman zero-run path (one-bit code, >= 4 chunks) meet
    forged payload bits."""
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(4000) < 0.005, rng.choice([-1, 1], 4000), 0).astype(np.int8)
    buf = bytearray(hh.get_encoder(name, chunk_levels=chunk).encode(x))
    for pos in rng.integers(len(buf) // 2, len(buf) - wire.CHECKSUM.size, flips):
        buf[pos] ^= 1 << int(rng.integers(0, 8))
    out = decode_or_error(reseal(buf), max_elements=10_000)
    if out is not None:
        assert out.size == x.size


@given(st.binary(min_size=0, max_size=400))
def test_random_bytes_raise(data):
    assert decode_or_error(data) is None


@given(st.binary(min_size=0, max_size=200),
       st.sampled_from(sorted(ENCODER_IDS.values())) | st.integers(0, 255), st.integers(1, 4),
       st.integers(0, 5000))
def test_forged_headers_with_valid_checksums(body, encoder_id, dtype_code, n):
    """Any encoder's id, or another, over parameters and payload of any bytes."""
    params = body[: len(body) // 2]
    payload = body[len(body) // 2:]
    head = wire.HEADER.pack(wire.MAGIC, wire.VERSION, encoder_id, dtype_code, 0, n,
                            len(params), 8 * len(payload))
    out = decode_or_error(reseal(head + params + payload + bytes(wire.CHECKSUM.size)))
    if out is not None:
        assert out.size == n


def test_forged_element_count_is_capped_before_allocation():
    buf = hh.get_encoder("rlh").encode(np.zeros(1000, dtype=np.int8))
    forged = bytearray(buf)
    struct.pack_into("<Q", forged, 8, 1 << 39)
    with pytest.raises(hh.DecodeError, match="max_elements"):
        hh.decode(reseal(forged))
    with pytest.raises(hh.DecodeError, match="max_elements"):
        hh.decode(buf, max_elements=999)
    assert hh.decode(buf, max_elements=1000).size == 1000


def test_forged_run_past_the_element_count_raises():
    buf = bytearray(hh.get_encoder("rlh").encode(np.zeros(1000, dtype=np.int8)))
    struct.pack_into("<Q", buf, 8, 999)
    with pytest.raises(hh.DecodeError, match="run"):
        hh.decode(reseal(buf))


@pytest.mark.parametrize("field,value,match", [(0, b"XXXX", "magic"), (4, b"\x09", "version"),
                                               (5, b"\x77", "encoder id"),
                                               (6, b"\x09", "dtype"), (7, b"\x01", "flags")])
def test_each_header_field_is_checked(field, value, match):
    buf = bytearray(hh.get_encoder("huffman").encode(sample_levels()))
    buf[field:field + len(value)] = value
    with pytest.raises(hh.DecodeError, match=match):
        hh.decode(reseal(buf))


def test_length_mismatch_names_the_header():
    buf = bytearray(hh.get_encoder("huffman").encode(sample_levels()))
    struct.pack_into("<Q", buf, 20, 10**12)
    with pytest.raises(hh.DecodeError, match="length"):
        hh.decode(reseal(buf))


def test_quantized_message_rejects_bad_input():
    qt = hh.QSGD(levels=4, seed=0).quantize(np.random.default_rng(0).standard_normal((30, 7)))
    msg = bytes(hh.pack(qt, "shs"))
    for cut in range(0, len(msg), 7):
        with pytest.raises(hh.DecodeError):
            hh.unpack(msg[:cut])
    forged = bytearray(msg)
    struct.pack_into("<Q", forged, 16, 10**9)       # first dim
    with pytest.raises(hh.DecodeError):
        hh.unpack(reseal(forged))
    with pytest.raises(hh.DecodeError, match="max_elements"):
        hh.unpack(msg, max_elements=100)


@pytest.mark.parametrize("name", NAMES)
def test_fuzzed_streams_reach_the_decoder(name):
    """The fuzz's mutated streams are framed anew with a correct checksum: all but the few
    with a forged element count past its cap, or of 0 over a body, pass ``check`` on to the
    decoder proper."""
    valid = fuzz.valid_streams(name, 0)
    passed = 0
    for k in range(200):
        try:
            hh.codec.encoders.check(fuzz.hostile_stream(name, valid, 0, k), fuzz.MAX_ELEMENTS)
            passed += 1
        except hh.DecodeError as e:
            assert "max_elements" in str(e) or "empty stream" in str(e)
    assert passed >= 190


# The child's own watchdog limits each decode to 20 s (fuzz.STALL_SECONDS); this test waits
# for its compiling too.
@pytest.mark.decoding(seconds=1500)
def test_every_decoder_stays_in_bounds_under_numba_bounds_checks():
    """Numba checks no bounds in the normal build, so the decoders' own checks are the only
    ones: ``python -m horovod_huffman.tools.fuzz`` decodes hostile streams of every encoder with
    NUMBA_BOUNDSCHECK=1, raw loads and stores checked too (kernels/checked.py), and every
    stream must decode or raise DecodeError. Compiling every kernel with the checks takes most
    of its time: 8 to 13 minutes cold on a 2-core VM, seconds once they are cached (apart from
    the unchecked ones: kernels/__init__.py)."""
    proc = subprocess.run([sys.executable, "-m", "horovod_huffman.tools.fuzz", "--streams", "3600",
                           "--seed", "0"], env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                          capture_output=True, text=True, timeout=1400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert re.search(r"^all +3600 +\d+ +\d+ +0$", proc.stdout, re.M), proc.stdout
