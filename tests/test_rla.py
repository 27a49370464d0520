"""``rla`` (kernels/ans_tokens.py): rlh's run-length tokens rANS-coded, with a table per
context; its size against the tokens' own entropy, its contexts, its escapes, and what
``auto`` makes of it."""
import threading

import numpy as np
import pytest

import horovod_huffman as hh
from horovod_huffman.codec.encoders.rla import RLA
from horovod_huffman.codec.encoders.runlength import token_counts
from horovod_huffman.kernels.chunks import CHUNK_LEVELS
from horovod_huffman.kernels.maxima import ANS_MAX_TOKENS, RUN_BUCKETS
from horovod_huffman.kernels.ans_tokens import MARKED_RUN_SHIFT, MARKED_SYMBOL_MASK, PLAIN_BUCKETS
from horovod_huffman.kernels.runs import BUCKET_EXTRA
from strategies import chunked_encoder   # beside this file
from test_ans import flipped_streams    # beside this file
from time_limits import DECODING

pytestmark = DECODING


def sparse_levels(n, density, seed, s=8):
    """QSGD-like levels: mostly zeros, the others Laplace-distributed in [-s, s] \\ {0}."""
    rng = np.random.default_rng(seed)
    values = np.clip(np.rint(rng.laplace(0, 2, n)), -s, s)
    values[values == 0] = 1
    return np.where(rng.random(n) < density, values, 0).astype(np.int8)


def bursty_levels(n, seed):
    """Levels whose non-zeros come in bursts (geometric gaps of mean 50, bursts of mean 2.5),
    as in the gradient of an embedding or of a layer with dead units: runs carry what a
    level's own distribution does not."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n, dtype=np.int8)
    i = 0
    while i < n:
        i += rng.geometric(0.02)
        k = min(rng.geometric(0.4), max(0, n - i))
        values = np.clip(np.rint(rng.laplace(0, 2, k)), -8, 8)
        values[values == 0] = 1
        out[i:i + k] = values
        i += k
    return out


def token_information_bits(levels):
    """The tokens' empirical information with one table per context (the previous token's
    level 0 or not, the chunk's first token with 'not'), plus their extra bits: what rla's
    payload codes."""
    base, window, _, ends, symbols, chunk_runs, *_ = token_counts(levels, CHUNK_LEVELS)
    symbols = symbols.astype(np.int64)
    after_zero = np.concatenate(([False], symbols[:-1] % window == -base))
    after_zero[np.concatenate(([0], chunk_runs[:-1]))] = False
    bits = 0.0
    for context in (False, True):
        _, counts = np.unique(symbols[after_zero == context], return_counts=True)
        bits += float((counts * np.log2(counts.sum() / counts)).sum())
    return bits + int(BUCKET_EXTRA[symbols // window].sum())


@pytest.mark.parametrize("density", [0.05, 0.3, 0.7])
def test_payload_within_two_percent_of_the_tokens_entropy(density):
    """The payload (rANS streams and extras; the tables are parameters) against the tokens'
    empirical information under their own per-context frequencies, plus their extra bits:
    every chunk's 32 final states (~560 bits) in chunks grown to 32 Kbit or more take up to
    ~1.7%."""
    levels = sparse_levels(500_000, density, seed=int(density * 10))
    buf = hh.get_encoder("rla").encode(levels)
    assert np.array_equal(hh.decode(buf), levels)
    assert hh.codec.encoders.check(buf).payload_bits <= 1.02 * token_information_bits(levels)


def test_a_table_after_zero_runs_saves_what_one_table_spends():
    """After a run of zeros comes a non-zero level: one table still gives zero runs a share
    there, a table per context does not. Sparse levels take two tables and come out well
    below rlh (whole-bit codes, one table); dense levels with no zero take one."""
    levels = sparse_levels(300_000, 0.1, seed=1)
    plan, _ = RLA().sized_plan(levels)
    assert plan.freqs.shape[0] == 2 and plan.anchor == -plan.base
    rla, rlh = (len(hh.get_encoder(n).encode(levels)) for n in ("rla", "rlh"))
    assert rla < 0.9 * rlh
    positive = np.random.default_rng(2).integers(1, 9, 10_000).astype(np.int8)
    assert RLA().sized_plan(positive)[0].freqs.shape[0] == 1
    assert np.array_equal(hh.decode(hh.get_encoder("rla").encode(positive)), positive)


def test_rare_tokens_take_the_escape_past_the_table_limit():
    """More distinct tokens than a table holds: the rarest travel as escapes (level and run
    in the extras), and the stream still decodes exactly, runs and chunk ends included."""
    rng = np.random.default_rng(3)
    levels = rng.integers(-1500, 1500, 40_000).astype(np.int16)
    levels[1000:5000] = 7
    base, window, counts, *_ = token_counts(levels, 4096)
    assert np.count_nonzero(counts[:window * RUN_BUCKETS]) > ANS_MAX_TOKENS
    encoder = chunked_encoder("rla", 4096)
    plan, _ = encoder.sized_plan(levels)
    assert np.count_nonzero(plan.freqs[:, :-1].any(axis=0)) <= ANS_MAX_TOKENS
    assert np.array_equal(hh.decode(encoder.encode(levels)), levels)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_runs_that_reach_the_end_of_a_chunk_or_of_the_levels_decode_exactly(dtype):
    """The decoder writes 8 bytes of a token's level whatever its run, except within 8 bytes
    of the end of the levels: short tensors, runs across chunk ends and up to the last level,
    and escapes (more distinct tokens than a table holds, negative levels among them) come
    back exactly."""
    rng = np.random.default_rng(5)
    encoder = chunked_encoder("rla", 4096)
    low = max(np.iinfo(dtype).min, -1500)
    escaped = 0
    for n in [1, 2, 7, 8, 9, 15, 17, 4095, 4096, 4097, 3 * 4096 + 5, 60_000]:
        for tail in (1, 3, 8, 11):
            runs = rng.geometric(0.08, n)
            levels = np.repeat(rng.integers(low, -low, n), runs)[:n].astype(dtype)
            levels[-min(tail, n):] = low
            plan, _ = encoder.sized_plan(levels)
            escaped += bool(plan.freqs[:, -1].any())
            assert np.array_equal(hh.decode(encoder.encode(levels)), levels), (n, tail)
    assert escaped


@pytest.mark.parametrize("levels", [np.zeros(200_000, dtype=np.int8),
                                    np.full(70_000, -3, dtype=np.int16),
                                    np.array([2**31 - 1, -2**31, 0, 0], dtype=np.int32)])
def test_constant_and_extreme_levels(levels):
    assert np.array_equal(hh.decode(hh.get_encoder("rla").encode(levels)), levels)


def test_auto_takes_rla_where_runs_and_contexts_pay():
    levels = bursty_levels(300_000, seed=4)
    auto = hh.get_encoder("auto")
    buf = auto.encode(levels)
    assert auto.last_choice == "rla"
    assert len(buf) < 0.9 * len(hh.get_encoder("ans").encode(levels))
    assert np.array_equal(hh.decode(buf), levels)


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
@pytest.mark.parametrize("share", [0.05, 0.6, 1.0])
def test_token_counts_per_context_match_the_symbols(dtype, share):
    """``token_counts(..., contexts=True)`` counts every token under its context in the pass
    that gives long runs their symbols (int8 levels with sparse long runs) or after it: the
    rows are the symbols counted after a token of level 0 or not, chunk by chunk; where long
    runs are rare, the pass also marks every token with extras, in order, with its run."""
    rng = np.random.default_rng(11)
    levels = np.where(rng.random(50_000) < share, rng.integers(-20, 21, 50_000), 0).astype(dtype)
    tokens = token_counts(levels, 4096, contexts=True)
    plain = token_counts(levels, 4096)
    assert plain.contexts is None
    np.testing.assert_array_equal(tokens.symbols, plain.symbols)
    np.testing.assert_array_equal(tokens.counts, plain.counts)
    symbols = tokens.symbols.astype(np.int64)
    after_zero = np.concatenate(([False], symbols[:-1] % tokens.window == -tokens.base))
    after_zero[np.concatenate(([0], tokens.chunk_runs[:-1]))] = False
    for context in (0, 1):
        expected = np.bincount(symbols[after_zero == context], minlength=tokens.counts.size)
        np.testing.assert_array_equal(tokens.contexts[context], expected)
    # Where the pass marks the tokens with extras (long runs rare), it marks them all.
    assert (tokens.marked is None) == (share == 0.05)
    if tokens.marked is not None:
        marked = np.flatnonzero(symbols >= PLAIN_BUCKETS * tokens.window)
        runs = np.diff(tokens.ends[:symbols.size].astype(np.int64), prepend=-1)
        np.testing.assert_array_equal(tokens.marked[:, 0], marked)
        np.testing.assert_array_equal(tokens.marked[:, 1] >> MARKED_RUN_SHIFT, runs[marked])
        np.testing.assert_array_equal(tokens.marked[:, 1] & MARKED_SYMBOL_MASK,
                                      symbols[marked])


@pytest.mark.parametrize("s", [1, 8, 127])
def test_flipped_streams_decode_or_fail_and_return(s):
    """The token decoder takes a chunk in batches without the test of each unit read against
    the chunk's end (they stay inside the payload's array; a batch that read past that end
    fails after it), and the payload's last chunk or the rest of a chunk too short for a
    batch token by token: on streams of 13 chunks, whole or with one payload bit flipped,
    decoding gives the levels (whole) or the levels' shape or DecodeError, and it returns
    (a batch ended past its chunk's last level once looped for ever)."""
    levels, streams = flipped_streams(s, "rla")
    outcomes = []

    def decode_all():
        for buf in streams:
            try:
                outcomes.append(hh.decode(buf))
            except hh.DecodeError as e:
                outcomes.append(e)

    worker = threading.Thread(target=decode_all, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), f"decoding hung after {len(outcomes)} streams"
    assert np.array_equal(outcomes[0], levels)
    for out in outcomes[1:]:
        assert isinstance(out, hh.DecodeError) or out.shape == levels.shape
    assert sum(isinstance(out, hh.DecodeError) for out in outcomes) >= len(outcomes) // 2
