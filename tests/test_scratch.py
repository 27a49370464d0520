"""Borrowed buffers (horovod_huffman/codec/scratch.py) and the row model's use of them."""
import threading

import numpy as np

import horovod_huffman as hh
from horovod_huffman.codec import scratch, wire
from horovod_huffman.codec.encoders.ans import RowsPlan, release
from time_limits import DECODING                # beside this file

pytestmark = DECODING


def test_a_buffer_is_lent_to_one_taker_until_it_is_given_back():
    a = scratch.take(4096, np.int16)
    b = scratch.take(4096, np.int16)
    assert not np.shares_memory(a, b)
    scratch.give(a)
    c = scratch.take(100, np.int16)
    assert np.shares_memory(a, c) and c.shape == (100,)
    assert not np.shares_memory(scratch.take(100, np.int16), c)     # c is still out
    scratch.give(c)
    assert scratch.take(8192, np.int16).size == 8192                  # too small: a new one


def test_each_thread_has_its_own_buffers_and_large_ones_are_not_kept():
    a = scratch.take(1000, np.int32)
    scratch.give(a)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(scratch.take(1000, np.int32)))
    worker.start()
    worker.join()
    assert not np.shares_memory(seen[0], a)
    big = scratch.take(scratch.POOL_BYTES // 2 + 1, np.int16)
    scratch.give(big)
    assert not np.shares_memory(scratch.take(10, np.int16), big)


def _matrix_levels(seed, rows=64, length=256):
    """Levels of a rank-one matrix plus noise, which the row model codes."""
    rng = np.random.default_rng(seed)
    u, v = rng.normal(size=rows), rng.normal(size=length)
    x = np.outer(u, v) * 12 + rng.normal(size=(rows, length))
    return np.clip(np.rint(x), -127, 127).astype(np.int8).ravel(), [(rows, length)]


def test_plans_made_before_either_is_emitted_keep_their_own_residuals():
    enc = hh.get_encoder("ans")
    (x, layout), (y, _) = _matrix_levels(1), _matrix_levels(2)
    scratch.give(scratch.take(x.size, np.int16))         # a buffer the first plan takes
    first, second = enc.plan(x, layout), enc.plan(y, layout)
    assert isinstance(first, RowsPlan) and isinstance(second, RowsPlan)
    assert not np.shares_memory(first.resid, second.resid)
    streams = [enc.emit(x, first), enc.emit(y, second)]
    release(first)
    release(second)
    for levels, (params, words, n_words, n_bits) in zip((x, y), streams):
        stream = enc._result(levels.dtype, levels.size, params, words, n_words, n_bits)
        assert np.array_equal(hh.decode(wire.frame(stream)), levels)
    # encoding again reuses a buffer given back, and gives the same bytes
    assert np.array_equal(enc.encode(x, layout=layout), enc.encode(x, layout=layout))
