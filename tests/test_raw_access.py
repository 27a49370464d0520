"""Raw loads and stores stay inside their arrays: a bounds-checked process checks each one
(kernels/checked.py), and the arithmetic that lets the decoders' loops run without tests
(lanes.safe_iterations, ans_tokens.store_room and batch_until) never lets one past."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

from horovod_huffman.kernels import stores
from horovod_huffman.kernels.ans_tokens import batch_until, store_room
from horovod_huffman.kernels.bits import LOOKUPS_PER_BUFFER
from horovod_huffman.kernels.lanes import BATCH_ITERATIONS, safe_iterations
from horovod_huffman.kernels.maxima import MAX_CODE_BITS
from time_limits import DECODING

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = DECODING

U64 = st.integers(0, 2**64 - 1)
# Levels per 8-byte word of each level dtype (int8 .. int64).
PER_WORD = st.sampled_from([8, 4, 2, 1])

CHECKED_ACCESSES = r"""
import sys
import numpy as np
from numba import njit, uint64
from numba.core import config
from horovod_huffman.kernels import checked, squares, stores, vector_runs

assert checked.CHECKED and stores.load8 is not stores._raw_load8
assert config.CACHE_DIR.endswith("boundscheck"), config.CACHE_DIR

load = njit(lambda a, i: stores.load8(a, i))
store = njit(lambda a, i, v: stores.store8(a, i, v))
store4 = njit(lambda a, i, v: stores.store4_bytes(a, i, v))
count = njit(lambda a, i, v: stores.count_equal64(a, i, v))
lanes = njit(lambda x, start, rows: squares.lane_squares(x, start, rows))
any_end = njit(lambda a, i: vector_runs._any_end(a, uint64(i)))  # (_step needs AVX-512)
sample = njit(lambda a, start, stop, after: stores.sampled_eighths(a, uint64(start),
                                                                   uint64(stop), uint64(0), after))

def raises(f, *args):
    try:
        f(*args)
    except IndexError:
        return True
    return False

for dtype in (np.int8, np.int16, np.int32, np.int64):
    a = np.arange(128 // np.dtype(dtype).itemsize).astype(dtype)
    per, block = 8 // a.itemsize, 64 // a.itemsize
    assert load(a, a.size - per) == int.from_bytes(a[-per:].tobytes(), sys.byteorder)
    assert raises(load, a, a.size - per + 1) and raises(load, a, uint64(2**64 - 1))
    assert raises(load, a[::2], 0)                     # element i is not data + i * itemsize
    store(a, a.size - per, 0)
    assert not a[-per:].any() and raises(store, a, a.size - per + 1, 0)
    assert count(a, a.size - block, a.dtype.type(0)) == per
    assert raises(count, a, a.size - block + 1, a.dtype.type(0))
    # the sampler's blocks and their successors, on levels that end where the range does
    for start in (0, 1, 7, 100):
        for stop in range(start + 64 * per - 2, start + 64 * per + 300, 7):
            for after in (False, True):
                sample(np.zeros(stop, dtype), start, stop, after)
b = np.zeros(16, np.uint8)
store4(b, 12, 7)
assert raises(store4, b, 13, 7)
x = np.ones(20)
assert lanes(x, 4, 2) == (2.0,) * 8 and raises(lanes, x, 5, 2)
c = np.zeros(100, np.int8)
c[-1] = 1
assert any_end(c, c.size - 65) and raises(any_end, c, c.size - 64)
print("OK")
"""


def run_checked(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=280, env=dict(os.environ, NUMBA_BOUNDSCHECK="1",
                                                PYTHONPATH=ROOT, **env))


# The checked child compiles its kernels cold (minutes): its timeout is this test's limit.
@pytest.mark.decoding(seconds=300)
def test_a_bounds_checked_process_checks_every_raw_load_and_store():
    """Under NUMBA_BOUNDSCHECK=1 each raw load and store is its checked twin: the same result
    inside the array, an IndexError past either end (a uint64 index that wrapped below zero
    included) or on a strided array (vector_runs._step compiles only for AVX-512, which this
    does not need); ``sampled_eighths``'s samples stay inside their range."""
    proc = run_checked(CHECKED_ACCESSES)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-4000:]


def test_without_bounds_checks_the_raw_intrinsics_run():
    assert not stores.CHECKED and not hasattr(stores, "_raw_load8")


@pytest.mark.decoding(seconds=420)
def test_a_bounds_checked_process_caches_in_a_directory_of_its_own(tmp_path):
    """Numba's cache index does not record the flag, so the checked kernels live apart."""
    code = "import horovod_huffman.kernels as k; print(k._cache_directory())"
    checked = run_checked(code, NUMBA_CACHE_DIR=str(tmp_path))
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=120,
                           env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT))
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert checked.stdout.startswith(str(tmp_path / "boundscheck") + os.sep)
    assert plain.stdout.startswith(str(tmp_path) + os.sep)
    assert "boundscheck" not in plain.stdout


@given(i=U64, stop=U64, bit_pos=U64, end_bit=U64, per_word=PER_WORD)
def test_safe_iterations_fit_the_chunk_and_no_more_do(i, stop, bit_pos, end_bit, per_word):
    out_step, bit_step = LOOKUPS_PER_BUFFER * per_word, LOOKUPS_PER_BUFFER * MAX_CODE_BITS
    n = int(safe_iterations(np.uint64(i), np.uint64(stop), np.uint64(bit_pos),
                            np.uint64(end_bit), np.uint64(out_step), np.uint64(bit_step)))
    assert n == 0 or (i + n * out_step <= stop and bit_pos + n * bit_step <= end_bit)
    assert i + (n + 1) * out_step > stop or bit_pos + (n + 1) * bit_step > end_bit


@given(data=st.data(), per_word=PER_WORD, i=st.integers(0, 10**6),
       levels=st.integers(0, 3000), bit_pos=st.integers(0, 10**7), bits=st.integers(0, 30000))
def test_a_lane_batch_stores_and_reads_inside_its_chunk(data, per_word, i, levels, bit_pos,
                                                        bits):
    """A lane of the four-lane loop (kernels/lanes.py) through one batch, its lookups and rare
    tokens taking any levels and bits the tables allow: every 8-byte store ends by the chunk's
    stop, every refill reads from a position before its end bit, and the rare path's limits
    never fall below the lane."""
    stop, end_bit = i + levels, bit_pos + bits
    out_step, bit_step = LOOKUPS_PER_BUFFER * per_word, LOOKUPS_PER_BUFFER * MAX_CODE_BITS
    n = min(int(safe_iterations(np.uint64(i), np.uint64(stop), np.uint64(bit_pos),
                                np.uint64(end_bit), np.uint64(out_step), np.uint64(bit_step))),
            BATCH_ITERATIONS)
    for it in range(n):
        for _ in range(LOOKUPS_PER_BUFFER):
            assert i + per_word <= stop                  # store8 at i
            i += data.draw(st.integers(0, per_word))
            bit_pos += data.draw(st.integers(0, MAX_CODE_BITS))
        assert bit_pos <= end_bit                        # buffer_refill's load
        if data.draw(st.booleans()):                     # a rare token at the lane's top
            left = n - it - 1
            i_limit, bit_limit = stop - left * out_step, end_bit - left * bit_step
            assert i <= i_limit and bit_pos <= bit_limit
            if i < i_limit:
                i += data.draw(st.integers(1, i_limit - i))
                bit_pos += data.draw(st.integers(0, bit_limit - bit_pos))


@given(size=st.integers(0, 2**40), per_word=PER_WORD)
def test_store_room_is_where_a_store_stops_fitting(size, per_word):
    room = int(store_room(np.uint64(size), np.uint64(per_word)))
    assert room == 0 or room - 1 + per_word <= size
    assert room + per_word > size


@given(data=st.data(), per_word=PER_WORD, size=st.integers(1, 5000),
       unit_words=st.integers(1, 2000))
def test_a_token_batch_reads_and_stores_inside_its_arrays(data, per_word, size, unit_words):
    """A batch of ``_tokens`` without its tests (kernels/ans_tokens.py), each token taking
    any run up to the chunk's stop and one unit or none: every unit read (at u XOR 3, the
    unit's place in its big-endian word) lies in the array, every 8-byte store in ``out``."""
    last = 4 * unit_words - 1                 # the uint16 view of 64-bit words
    # near the ends of ``out``, of the chunk and of the units, where the bounds bind
    stop = size - data.draw(st.integers(0, min(size - 1, 16)))
    i = stop - data.draw(st.integers(1, min(stop, 80)))
    u = last - data.draw(st.integers(1, min(last, 80)))
    room = int(store_room(np.uint64(size), np.uint64(per_word)))
    if i >= room:
        return                                # no batch: the tested path takes the chunk
    until = int(batch_until(np.uint64(i), np.uint64(stop), np.uint64(room), np.uint64(u),
                            np.uint64(last)))
    assert i < until <= stop
    while i < until:
        assert u < last and u ^ 3 <= last     # unit_at(units, u)
        assert i + per_word <= size           # store8(out, i, word)
        i += data.draw(st.integers(1, stop - i))
        u += data.draw(st.integers(0, 1))
    assert u <= last
