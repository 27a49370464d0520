"""Every encoder reproduces every level array exactly, in the same dtype."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import horovod_huffman as hh
from horovod_huffman.codec.encoders import SEEDED
from strategies import chunked_encoder, level_arrays
from time_limits import DECODING                # beside this file

pytestmark = DECODING

NAMES = list(hh.ENCODERS)
CHUNKED = list(hh.codec.encoders.CHUNKED)


@pytest.mark.parametrize("name", NAMES)
@given(levels=level_arrays())
def test_decode_of_encode_is_identity(name, levels):
    buf = hh.get_encoder(name).encode(levels)
    assert buf.dtype == np.uint8 and buf.ndim == 1
    out = hh.decode(buf)
    assert out.dtype == levels.dtype
    np.testing.assert_array_equal(out, levels)


@pytest.mark.parametrize("name", ["rlh", "rla", "auto"])
def test_more_distinct_tokens_than_codes_round_trip(name):
    """Over 4096 distinct (run, level) tokens: the rarest fold into the escape and are written
    escaped, which the output's bound must count (random tests of a few thousand levels never
    reach that many tokens)."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2080, 40000).astype(np.int16)
    levels = np.repeat(values, rng.integers(1, 4, values.size))
    np.testing.assert_array_equal(hh.decode(hh.get_encoder(name).encode(levels)), levels)


@pytest.mark.parametrize("name", SEEDED)
@given(levels=level_arrays(), seed=st.integers(0, 2**32), sample=st.integers(1, 3000))
def test_sampled_encoders_roundtrip_for_any_sample(name, levels, seed, sample):
    enc = hh.get_encoder(name, sample_size=sample, seed=seed)
    np.testing.assert_array_equal(hh.decode(enc.encode(levels)), levels)


@given(levels=level_arrays(), k=st.integers(1, 2048))
def test_shs_roundtrips_for_any_sparsity_factor(levels, k):
    np.testing.assert_array_equal(hh.decode(hh.get_encoder("shs", k=k).encode(levels)), levels)


@pytest.mark.parametrize("name", CHUNKED)
@given(levels=level_arrays(), chunk=st.integers(1, 300))
def test_streams_of_many_chunks_roundtrip(name, levels, chunk):
    """Small chunks: the lane loop's queue, lanes that shadow others, chunk ends."""
    enc = chunked_encoder(name, chunk)
    np.testing.assert_array_equal(hh.decode(enc.encode(levels)), levels)


def sparse_levels(n, density, dtype, seed):
    """Mostly zeros, the rest +-1: the one-bit-code fast paths of the Huffman coders."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < density, rng.choice([-1, 1], n), 0).astype(dtype)


@pytest.mark.parametrize("name", CHUNKED)
@given(n=st.integers(0, 6000), chunk=st.integers(1, 400),
       density=st.sampled_from([0.0005, 0.005, 0.02, 0.1]),
       dtype=st.sampled_from([np.int8, np.int16, np.int32]), seed=st.integers(0, 2**32 - 1))
def test_sparse_streams_of_many_chunks_roundtrip(name, n, chunk, density, dtype, seed):
    levels = sparse_levels(n, density, dtype, seed)
    enc = chunked_encoder(name, chunk)
    np.testing.assert_array_equal(hh.decode(enc.encode(levels)), levels)


def mixed_run_levels(n, s, seed, dtype):
    """Laplace levels in [-s, s] with runs of one level, 4 to 600 long, laid over them: tokens
    of every run bucket, as QSGD's s = 2..16 levels have (rare tokens in the lane loop, fills
    on the one-chunk path)."""
    rng = np.random.default_rng(seed)
    x = np.clip(np.rint(rng.laplace(0, s / 8, n)), -s, s).astype(dtype)
    lengths = rng.choice([4, 5, 7, 12, 30, 255, 600], n // 100, p=[.3, .2, .2, .1, .1, .05, .05])
    for start, length in zip(rng.integers(0, max(n, 1), n // 100), lengths):
        x[start:start + length] = rng.integers(-s, s + 1)
    return x


@pytest.mark.parametrize("name", ["rlh", "shs"])
@given(n=st.integers(0, 40_000), chunk=st.integers(250, 300) | st.integers(300, 5000),
       s=st.sampled_from([2, 4, 8, 16]), dtype=st.sampled_from([np.int8, np.int16]),
       seed=st.integers(0, 2**32 - 1))
def test_mixed_runs_in_chunks_of_every_size_roundtrip(name, n, chunk, s, dtype, seed):
    """Dense chunks long enough for the lane loop, runs up to and past the longest fill, at and
    across chunk ends."""
    levels = mixed_run_levels(n, s, seed, dtype)
    enc = hh.get_encoder(name, chunk_levels=chunk, **({"seed": 0} if name == "shs" else {}))
    np.testing.assert_array_equal(hh.decode(enc.encode(levels)), levels)


@pytest.mark.parametrize("name", NAMES)
def test_large_tensors_with_long_runs_and_many_symbols(name):
    rng = np.random.default_rng(7)
    x = np.zeros(300_000, dtype=np.int16)
    x[100_000:100_050] = rng.integers(-30000, 30000, 50)    # > 4096 distinct needs no escape here
    x[200_000:] = rng.integers(-32768, 32767, 100_000)       # > 4096 distinct: rare ones escape
    np.testing.assert_array_equal(hh.decode(hh.get_encoder(name).encode(x)), x)


def test_a_stream_decodes_without_knowing_its_encoder():
    x = np.array([0, 0, 0, 5, -5, 0, 1], dtype=np.int8)
    for name in NAMES:
        buf = hh.get_encoder(name).encode(x)
        assert hh.encoder_name(buf) in hh.ENCODERS
        np.testing.assert_array_equal(hh.decode(bytes(buf)), x)


@given(levels=level_arrays(max_size=3000), chunk=st.integers(1, 9) | st.integers(500, 3000))
def test_run_ends_mark_every_run_and_every_chunk_end(levels, chunk):
    """Small chunks; chunks over 64 blocks of 8 bytes take the skip of blocks without a run end
    when they are sparse (zeros, long runs, ternary levels)."""
    from horovod_huffman.kernels.runs import run_ends
    if levels.size == 0:
        return
    n_chunks = -(-levels.size // chunk)
    ends = np.empty(levels.size, dtype=np.int32)
    chunk_runs = np.empty(n_chunks, dtype=np.int64)
    n_runs = run_ends(levels, chunk, ends, chunk_runs)
    boundary = np.append(levels[1:] != levels[:-1], True)
    boundary[chunk - 1::chunk] = True
    np.testing.assert_array_equal(ends[:n_runs], np.flatnonzero(boundary))
    np.testing.assert_array_equal(chunk_runs, [np.count_nonzero(boundary[:min(levels.size, (c + 1) * chunk)])
                                               for c in range(n_chunks)])
