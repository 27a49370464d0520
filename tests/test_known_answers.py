"""Elias codes and canonical Huffman against textbook bit strings and independent references."""
import heapq

import numpy as np
import pytest
from hypothesis import given, strategies as st

import horovod_huffman as hh
from horovod_huffman.codec import wire
from horovod_huffman.kernels.bits import READ_PAD_WORDS, bytes_to_words, words_to_bytes
from horovod_huffman.kernels.huffman import (code_lengths, canonical_codes, decode_table,
                                             MAX_CODE_BITS, LENGTH_BITS, LENGTH_MASK)
from horovod_huffman.kernels.stats import level_range
from horovod_huffman.codec.encoders.codes import Code, chunk_count
from horovod_huffman.codec.encoders.runlength import token_buffers
from horovod_huffman.kernels import maxima, tokens, vector_runs
from horovod_huffman.kernels.runs import (RUN_BUCKETS, LONG_RUN_SYMBOL, run_ends, rlh_histogram,
                                          count_symbols)
from horovod_huffman.kernels.symbols import level_histogram, multi_symbol_tables
from horovod_huffman.codec.params import ParamReader, ParamWriter
from horovod_huffman.codec.wire import HEADER, CHECKSUM
from time_limits import DECODING                # beside this file

pytestmark = DECODING


def payload_bits(buf):
    """The payload bit string of a stream as '0'/'1' characters."""
    n_params = int.from_bytes(bytes(buf[16:20]), "little")
    n_bits = int.from_bytes(bytes(buf[20:28]), "little")
    payload = bytes(buf[HEADER.size + n_params:len(buf) - CHECKSUM.size])
    return "".join(f"{b:08b}" for b in payload)[:n_bits]


def zigzag_level(value):
    """The level whose zigzag form + 1 is ``value``."""
    u = value - 1
    return (u >> 1) if u % 2 == 0 else -((u + 1) >> 1)


# Textbook codes (Elias 1975) of 1..17.
GAMMA = {1: "1", 2: "010", 3: "011", 4: "00100", 5: "00101", 8: "0001000", 17: "000010001"}
DELTA = {1: "1", 2: "0100", 3: "0101", 4: "01100", 5: "01101", 8: "00100000", 17: "001010001"}
OMEGA = {1: "0", 2: "100", 3: "110", 4: "101000", 5: "101010", 8: "1110000", 16: "10100100000",
         17: "10100100010"}


@pytest.mark.parametrize("name,table", [("elias_gamma", GAMMA), ("elias_delta", DELTA),
                                        ("elias_omega", OMEGA)])
def test_elias_codes_match_the_textbook(name, table):
    for value, bits in table.items():
        buf = hh.get_encoder(name).encode(np.array([zigzag_level(value)], dtype=np.int32))
        assert payload_bits(buf) == bits, value


def test_elias_rle_is_omega_level_then_omega_run():
    x = np.array([0, 0, 0, 1], dtype=np.int8)   # runs (0, 3), (1, 1): levels zigzag+1 = 1, 3
    assert payload_bits(hh.get_encoder("elias_rle").encode(x)) == "0" + "110" + "110" + "0"


def test_qsgd_elias_is_gap_sign_magnitude():
    x = np.array([0, 0, -2, 3], dtype=np.int8)   # gaps 3, 1; signs 1, 0; magnitudes 2, 3
    bits = payload_bits(hh.get_encoder("qsgd_elias").encode(x))
    assert bits == "110" + "1" + "100" + "0" + "0" + "110"


def test_raw_packs_at_fixed_width():
    x = np.array([-2, 1, 0, 5], dtype=np.int8)   # offsets 0, 3, 2, 7 in 3 bits
    assert payload_bits(hh.get_encoder("raw").encode(x)) == "000011010111"


def test_canonical_huffman_codes_for_known_lengths():
    # Lengths (2, 1, 3, 3) -> canonical codes 10, 0, 110, 111 (RFC 1951, section 3.2.2).
    codes = canonical_codes(np.array([2, 1, 3, 3]))
    assert [format(int(c), f"0{n}b") for c, n in zip(codes, [2, 1, 3, 3])] == \
        ["10", "0", "110", "111"]


def test_huffman_stream_uses_the_canonical_code():
    x = np.array([0] * 6 + [1] * 3 + [2] * 2 + [3], dtype=np.int8)   # lengths 1, 2, 3, 3
    assert payload_bits(hh.get_encoder("huffman").encode(x)) == \
        "0" * 6 + "10" * 3 + "110" * 2 + "111"


def reference_huffman_bits(counts):
    """Total bits of an optimal (unlimited) Huffman code, from the classic heap merge."""
    heap = [c for c in counts if c > 0]
    if len(heap) == 1:
        return heap[0]
    heapq.heapify(heap)
    total = 0
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        total += merged        # each merge adds one bit to every symbol below it
        heapq.heappush(heap, merged)
    return total


def reference_limited_bits(counts, max_bits):
    """Total bits of an optimal length-limited code by exhaustive package-merge on multisets."""
    leaves = sorted((c, (i,)) for i, c in enumerate(counts) if c > 0)
    items = list(leaves)
    for _ in range(max_bits - 1):
        packages = [(items[k][0] + items[k + 1][0], items[k][1] + items[k + 1][1])
                    for k in range(0, len(items) - 1, 2)]
        items = sorted(leaves + packages)
    chosen = items[:2 * len(leaves) - 2]
    lengths = {}
    for _, members in chosen:
        for s in members:
            lengths[s] = lengths.get(s, 0) + 1
    return sum(counts[s] * n for s, n in lengths.items())


@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=300))
def test_huffman_total_bits_equal_an_independent_reference(counts):
    c = np.array(counts, dtype=np.int64)
    if np.count_nonzero(c) < 2:
        return
    lengths = code_lengths(c, 64)
    assert int((lengths * c).sum()) == reference_huffman_bits(counts)


@given(st.lists(st.integers(1, 2**40), min_size=2, max_size=40))
def test_length_limited_code_is_optimal(counts):
    c = np.array(counts, dtype=np.int64)
    for max_bits in (6, MAX_CODE_BITS):
        if len(counts) > 2**max_bits:
            continue
        lengths = code_lengths(c, max_bits)
        assert lengths.max() <= max_bits
        assert sum(2.0 ** -int(n) for n in lengths) <= 1.0
        assert int((lengths * c).sum()) == reference_limited_bits(counts, max_bits)


def test_huffman_payload_equals_histogram_cost():
    rng = np.random.default_rng(3)
    x = np.clip(np.rint(rng.laplace(0, 2, 60_000)), -8, 8).astype(np.int8)   # one chunk
    counts = np.bincount(x.astype(np.int64) + 8)
    buf = hh.get_encoder("huffman").encode(x)
    assert len(payload_bits(buf)) == reference_huffman_bits(list(counts))


def test_stream_ends_with_the_xxh3_64_of_everything_before_it():
    assert wire.checksum(b"") == 0x2D06800538D394C2         # XXH3-64, seed 0 (xxHash's spec)
    for name in ("huffman", "rlh", "raw"):
        buf = bytes(hh.get_encoder(name).encode(np.arange(-50, 50, dtype=np.int8)))
        assert buf[4] == wire.VERSION == 4
        assert int.from_bytes(buf[-8:], "little") == wire.checksum(buf[:-8])
    msg = bytes(hh.pack(hh.TernGrad().quantize(np.linspace(-1, 1, 77)), "rlh"))
    assert int.from_bytes(msg[-8:], "little") == wire.checksum(msg[:-8])


@pytest.mark.parametrize("n_bytes", list(range(0, 20)) + [4093, 4096])
def test_payload_bytes_and_words_are_big_endian(n_bytes):
    """The kernels' word <-> byte conversions against NumPy's byte-swapping views."""
    rng = np.random.default_rng(n_bytes)
    words32 = rng.integers(0, 2**32, n_bytes // 4 + 1, dtype=np.uint64).astype(np.uint32)
    expected = words32.astype(">u4").view(np.uint8)[:n_bytes]
    assert (words_to_bytes(words32, 8 * n_bytes) == expected).all()
    framed = np.concatenate([np.zeros(3, np.uint8), expected])[3:]   # a view at an offset
    padded = np.zeros(-(-n_bytes // 8) * 8 + 8 * READ_PAD_WORDS, np.uint8)
    padded[:n_bytes] = expected
    assert (bytes_to_words(framed) == padded.view(">u8").astype(np.uint64)).all()
    assert (bytes_to_words(bytes(expected)) == padded.view(">u8").astype(np.uint64)).all()


@given(dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64]), n=st.integers(0, 5000),
       base=st.integers(-140, 140), window=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_level_histogram_counts_like_numpy(dtype, n, base, window, seed):
    """Small windows (compare passes) and large ones (table increments), levels in and out of
    the window, windows reaching past the dtype's range."""
    info = np.iinfo(dtype)
    lo, hi = max(info.min, base - 5), min(info.max, base + window + 5)
    levels = np.random.default_rng(seed).integers(lo, max(lo, hi) + 1, n).astype(dtype)
    counts = np.zeros(window + 1, dtype=np.int64)
    level_histogram(levels, base, window, counts)
    v = levels.astype(np.int64) - base
    inside = (v >= 0) & (v < window)
    expected = np.bincount(v[inside], minlength=window + 1)
    expected[window] = np.count_nonzero(~inside)
    np.testing.assert_array_equal(counts, expected)


@given(dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64]), n=st.integers(0, 3000),
       seed=st.integers(0, 2**32 - 1))
def test_level_range_is_numpys_min_and_max(dtype, n, seed):
    info = np.iinfo(dtype)
    levels = np.random.default_rng(seed).integers(info.min, info.max, n, dtype=dtype,
                                                  endpoint=True)
    expected = (int(levels.min()), int(levels.max())) if n else (0, -1)
    assert level_range(levels) == expected


def codes_in_prefix(table, window, base, prefix, per_word):
    """Reference: the levels of the whole codes that begin a 12-bit prefix, one at a time."""
    out, used = [], 0
    while len(out) < per_word:
        e = int(table[(prefix << used) & ((1 << MAX_CODE_BITS) - 1)])
        length, s = e & LENGTH_MASK, e >> LENGTH_BITS
        if length == 0 or used + length > MAX_CODE_BITS or s == window:
            break
        out.append(base + s)
        used += length
    return out, used


@given(counts=st.lists(st.integers(0, 10**6), min_size=2, max_size=300),
       itemsize=st.sampled_from([1, 2, 4, 8]), base=st.integers(-100, 100),
       drop=st.integers(0, 3), seed=st.integers(0, 2**32 - 1))
def test_multi_symbol_tables_hold_every_whole_code_of_each_prefix(counts, itemsize, base, drop,
                                                                   seed):
    """The one-step-per-prefix build against decoding each prefix code by code; the last
    symbol is the escape; ``drop`` codes removed make the code incomplete (prefixes without
    a code)."""
    counts = np.array(counts, dtype=np.int64)
    lengths = code_lengths(counts, MAX_CODE_BITS)
    coded = np.flatnonzero(lengths)
    if drop and len(coded) > drop:
        lengths[np.random.default_rng(seed).choice(coded, drop, replace=False)] = 0
    window = len(counts) - 1
    dtype = np.dtype(f"int{8 * itemsize}")
    table = decode_table(lengths, canonical_codes(lengths))
    levels, counts_, bits = multi_symbol_tables(table, window, base, itemsize)
    per_word = 8 // itemsize
    for prefix in range(1 << MAX_CODE_BITS):
        expected, used = codes_in_prefix(table, window, base, prefix, per_word)
        assert (counts_[prefix], bits[prefix]) == (len(expected), used), prefix
        got = np.array([levels[prefix]], dtype=np.uint64).view(dtype)[:len(expected)]
        assert got.tolist() == expected, prefix


def tokens_in_prefix(table, prefix, per_word, lane):
    """Reference: (levels, bits) of the whole rlh tokens that begin a 12-bit prefix, one at a
    time: a token may start while fewer than ``per_word`` levels are out, and (``lane``) must
    end within them, else the levels stay within MAX_LOOKUP_LEVELS."""
    out, used = [], 0
    while len(out) < per_word:
        e = int(table[(prefix << used) & ((1 << MAX_CODE_BITS) - 1)])
        length = e & maxima.TOKEN_LENGTH_MASK
        extra = (e >> maxima.TOKEN_EXTRA_SHIFT) & maxima.TOKEN_EXTRA_MASK
        if length == 0 or e & maxima.TOKEN_ESCAPE or used + length + extra > MAX_CODE_BITS:
            break
        window = (prefix << used) & ((1 << MAX_CODE_BITS) - 1)
        run = ((e >> maxima.TOKEN_RUN_SHIFT) & maxima.TOKEN_RUN_MASK) + \
            (((window << length) & ((1 << MAX_CODE_BITS) - 1)) >> (MAX_CODE_BITS - extra))
        if len(out) + run > (per_word if lane else maxima.MAX_LOOKUP_LEVELS):
            break
        out += [e >> maxima.TOKEN_LEVEL_SHIFT] * run
        used += length + extra
    return out, used


@given(counts=st.lists(st.integers(0, 10**6), min_size=2, max_size=600),
       window=st.integers(1, 9), itemsize=st.sampled_from([1, 2, 4, 8]),
       base=st.integers(-100, 100), drop=st.integers(0, 3), seed=st.integers(0, 2**32 - 1))
def test_token_lookup_tables_hold_every_whole_token_of_each_prefix(counts, window, itemsize,
                                                                   base, drop, seed):
    """rlh's lookup tables against decoding each prefix token by token: symbols of every run
    bucket (extra bits included), the escape, incomplete codes (``drop``)."""
    n_symbols = window * RUN_BUCKETS + 1
    counts = np.resize(np.array(counts, dtype=np.int64), n_symbols)
    lengths = code_lengths(counts, MAX_CODE_BITS) if counts.any() else np.zeros(n_symbols, int)
    coded = np.flatnonzero(lengths)
    if len(coded) == 0 or (drop and len(coded) <= drop):
        return
    if drop:
        lengths[np.random.default_rng(seed).choice(coded, drop, replace=False)] = 0
    table = tokens.rlh_token_table(lengths, canonical_codes(lengths), window)
    levels, counts_, bits, lane_counts, lane_bits = tokens.lookup_tables(table, base, itemsize)
    dtype, per_word = np.dtype(f"int{8 * itemsize}"), 8 // itemsize
    for prefix in range(1 << MAX_CODE_BITS):
        for lane, (c, b) in ((False, (counts_, bits)), (True, (lane_counts, lane_bits))):
            expected, used = tokens_in_prefix(table, prefix, per_word, lane)
            assert (c[prefix], b[prefix]) == (len(expected), used), (prefix, lane)
            if not expected:
                continue
            # the lane levels open the word; past the last token's start, its level repeats
            word = (np.array([levels[prefix]], dtype=np.uint64).view(dtype) - base).tolist()
            if lane:
                assert word[:len(expected)] == expected, prefix
            else:
                assert word == (expected + [expected[-1]] * per_word)[:per_word], prefix


@pytest.mark.skipif(not vector_runs.AVAILABLE, reason="the CPU has no AVX-512 F/BW")
@given(n_runs=st.integers(1, 3000), long_share=st.sampled_from([0.0, 0.02, 0.3, 0.8]),
       spread=st.integers(0, 255), chunk=st.sampled_from([1, 2, 3, 4, 5, 64, 67, 130, 65536]),
       seed=st.integers(0, 2**32 - 1))
def test_vector_run_pass_is_the_scalar_passes(n_runs, long_share, spread, chunk, seed):
    """AVX-512 run ends and symbols (kernels/vector_runs.py) against ``run_ends`` then
    ``rlh_histogram``: runs of 1..3 and, at ``long_share``, of 4..12 (a placeholder, resolved by
    ``count_symbols`` one by one or, at high shares, by ``rlh_histogram``), chunk cuts inside
    runs, levels in a window of ``spread`` + 1."""
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n_runs) < long_share, rng.integers(4, 13, n_runs),
                       rng.integers(1, 4, n_runs))
    values = rng.integers(-128, -127 + spread, n_runs, endpoint=True).clip(-128, 127)
    levels = np.repeat(values, lengths).astype(np.int8)
    n = levels.size
    lo, hi = level_range(levels)
    base, window = int(lo), int(hi - lo + 1)
    results = []
    for vector in (False, True):
        ends, symbols = token_buffers(n)
        chunk_runs = np.empty(chunk_count(n, chunk), dtype=np.int64)
        counts = np.zeros(window * RUN_BUCKETS + 1, dtype=np.int64)
        if vector:
            t = vector_runs.runs_and_symbols(levels, chunk, base, window, ends, symbols,
                                             chunk_runs)
            placeholder = symbols[:t] == LONG_RUN_SYMBOL
            assert placeholder.tolist() == (np.diff(ends[:t], prepend=-1) >= 4).tolist()
            scalar_symbols = np.array(results[0][1])
            assert symbols[:t][~placeholder].tolist() == scalar_symbols[~placeholder].tolist()
            count_symbols(levels, ends, symbols[:t], t, base, window, counts)
        else:
            t = run_ends(levels, chunk, ends, chunk_runs)
            rlh_histogram(levels, ends, t, base, window, counts, symbols[:t], True)
        results.append((ends[:t].tolist(), symbols[:t].tolist(), chunk_runs.tolist(),
                        counts.tolist()))
    assert results[0] == results[1]


def test_code_folds_the_rarest_symbols_into_the_escape():
    """More than 4096 symbols occurring: the 4095 most frequent (ties: the higher id) and the
    escape, which carries the rest, get a code; the code is a complete prefix code."""
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 50, 9000).astype(np.int64)
    escape = 8999
    code = Code.from_counts(counts, escape)
    others = np.flatnonzero(counts[:escape])
    ranked = others[np.lexsort((-others, -counts[others]))]
    assert code.symbols.tolist() == sorted(ranked[:4095].tolist() + [escape])
    weights = np.append(counts[ranked[:4095]], counts[escape] + counts[ranked[4095:]].sum())
    assert sum(2.0 ** -code.lengths) == 1.0 and code.lengths.max() <= MAX_CODE_BITS
    reference = code_lengths(np.sort(weights), MAX_CODE_BITS)
    assert np.dot(np.sort(weights), reference) == np.dot(
        counts[code.symbols[:-1]].tolist() + [weights[-1]], code.lengths)


@given(values=st.lists(st.integers(0, 2**63 - 1), max_size=40), cut=st.integers(0, 400))
def test_bulk_varints_read_like_one_at_a_time(values, cut):
    """``ParamReader.uints`` (a Numba kernel) against ``uint``, on whole and truncated blocks,
    with one value out of range."""
    block = ParamWriter()
    for v in values:
        block.uint(v)
    data = block.getvalue()
    assert ParamReader(data).uints("v", len(values), 0, 2**63 - 1).tolist() == values
    truncated = data[:cut]
    one_by_one = ParamReader(truncated)
    try:
        expected = [one_by_one.uint("v", 0, 2**63 - 1) for _ in values]
    except hh.DecodeError:
        with pytest.raises(hh.DecodeError, match="truncated"):
            ParamReader(truncated).uints("v", len(values), 0, 2**63 - 1)
    else:
        assert ParamReader(truncated).uints("v", len(values), 0, 2**63 - 1).tolist() == expected
    if values and max(values) > 0:
        with pytest.raises(hh.DecodeError, match="out of range"):
            ParamReader(data).uints("v", len(values), 0, max(values) - 1)


def test_forged_varints_are_too_long_or_out_of_range():
    with pytest.raises(hh.DecodeError, match="too long"):
        ParamReader(b"\x80" * 11).uints("v", 1, 0, 10)
    with pytest.raises(hh.DecodeError, match="out of range"):     # 2**63: past any bound
        ParamReader(b"\x80" * 9 + b"\x01").uints("v", 1, 0, 2**63 - 1)
