"""Growing chunks (encoders/base.py ``GrowingChunks``): the rANS coders' sparse streams take
longer chunks, so that the ~100 bits every chunk ends with stay a small share of it."""
import numpy as np
import pytest

import horovod_huffman as hh
from horovod_huffman.kernels.ans_plans import class_counts
from horovod_huffman.kernels.chunks import CHUNK_GROWTH, CHUNK_LEVELS
from horovod_huffman.kernels.symbols import level_histogram
from horovod_huffman.codec.params import value_bits
from time_limits import DECODING                # beside this file

pytestmark = DECODING


def ternary(n, density, seed):
    """TernGrad-like levels: -1 or 1 at ``density``, else 0."""
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1, 1], np.int8), n)
    return np.where(rng.random(n) < density, signs, 0).astype(np.int8)


def planned(encoder, levels):
    """(plan, the information it codes in bits): ``ans``'s levels under each class's own
    counts; ``rla``'s tokens and extras (``RlaPlan.information_bits``)."""
    if encoder.name == "rla":
        plan, _ = encoder.sized_plan(levels)
        return plan, plan.information_bits(value_bits(levels.dtype))
    plan = encoder.plan(levels)
    counts = np.zeros((plan.freqs.shape[0], plan.window + 1), dtype=np.int64)
    if plan.contexts:
        class_counts(levels, plan.base, plan.block_bits, 1, plan.classes, counts)
    else:
        level_histogram(levels, plan.base, plan.window, counts[0])
    return plan, sum(float(row[row > 0] @ np.log2(row.sum() / row[row > 0])) for row in counts)


@pytest.mark.parametrize("name", hh.codec.encoders.GROWING)
def test_sparse_streams_take_longer_chunks(name):
    """0.1 bits per level: chunks of 2**16 levels would carry ~6 Kbit, of which the ends (32
    states) take ~9%; grown eightfold (``rla``: to 48 Kbit, past 32 Kbit) or to the whole
    tensor (``ans``: 100 Kbit, short of 128 Kbit), the payload
    is within 2% (``rla``: its two chunks' ends) or 1% (``ans``: one chunk's) of the
    information it codes, and a smaller stream than with chunks kept at 2**16."""
    levels = ternary(1 << 20, 0.01, seed=1)
    encoder = hh.get_encoder(name)
    plan, information = planned(encoder, levels)
    assert plan.chunk == (levels.size if name == "ans" else 8 * CHUNK_LEVELS)
    buf = encoder.encode(levels)
    assert np.array_equal(hh.decode(buf), levels)
    assert hh.codec.encoders.check(buf).payload_bits <= \
        (1.01 if name == "ans" else 1.02) * information
    kept = hh.get_encoder(name, max_chunk_levels=CHUNK_LEVELS)
    assert planned(kept, levels)[0].chunk == CHUNK_LEVELS
    assert len(kept.encode(levels)) > len(buf)


@pytest.mark.parametrize("name", hh.codec.encoders.GROWING)
def test_dense_and_small_streams_keep_their_chunks(name):
    """QSGD s = 32 levels (~2.6 bits each) fill a chunk of 2**16 levels past the target (170
    Kbit); a tensor within one chunk keeps the encoder's chunk size in its header; a grown
    chunk stops at max_chunk_levels."""
    g = np.random.default_rng(2).standard_normal(300_000).astype(np.float32)
    dense = hh.QSGD(levels=32).quantize(g, seed=0).levels.ravel()
    assert planned(hh.get_encoder(name), dense)[0].chunk == CHUNK_LEVELS
    small = ternary(CHUNK_LEVELS, 0.01, seed=3)
    assert planned(hh.get_encoder(name), small)[0].chunk == CHUNK_LEVELS
    capped = hh.get_encoder(name, chunk_levels=1024, max_chunk_levels=4096)
    assert planned(capped, ternary(1 << 16, 0.01, seed=4))[0].chunk == 4096
    assert np.array_equal(hh.decode(capped.encode(small)), small)


@pytest.mark.parametrize("name", hh.codec.encoders.GROWING)
def test_max_chunk_levels_is_checked_and_shown(name):
    with pytest.raises(ValueError, match="at least chunk_levels"):
        hh.get_encoder(name, chunk_levels=4096, max_chunk_levels=1024)
    with pytest.raises(ValueError, match="max_chunk_levels must be an integer"):
        hh.get_encoder(name, max_chunk_levels=0.5)
    assert "max_chunk_levels" not in repr(hh.get_encoder(name, chunk_levels=1024))
    assert hh.get_encoder(name, chunk_levels=1024).max_chunk_levels == CHUNK_GROWTH * 1024
    assert "max_chunk_levels=4096" in repr(hh.get_encoder(name, max_chunk_levels=4096,
                                                           chunk_levels=4096))
