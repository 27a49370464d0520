"""The search for matrices in levels that come without a layout (encoders/row_search.py), and
``auto``, which codes flat levels with the row model where it finds them."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import horovod_huffman as hh
from horovod_huffman.codec.encoders import row_search
from horovod_huffman.codec.encoders.ans import MODE_ROWS
from horovod_huffman.codec.encoders.row_search import (BLOCK_ROWS, find_layout, lag_scores,
                                                 row_lengths)
from horovod_huffman.codec.encoders.rows import check_layout
from horovod_huffman.kernels.row_search import (pick_phases, profile_cosines,
                                                relative_squares, row_phases)
from test_rows import mode_of, rank_one            # beside this file
from time_limits import DECODING                # beside this file

pytestmark = DECODING


def noise(n, seed, scale=4.0):
    """Levels of independent rounded normals, int8 where ``scale`` keeps them small: no
    rows."""
    rng = np.random.default_rng(seed)
    values = np.rint(rng.normal(0, scale, n))
    return np.clip(values, -127, 127).astype(np.int8) if scale < 30 else values.astype(np.int64)


def matrices_of(layout):
    """[(first level, rows, length)] of the pairs of ``layout`` with more than one row."""
    out, at = [], 0
    for rows, length in layout:
        if rows > 1:
            out.append((at, rows, length))
        at += rows * length
    return out


def test_a_matrix_among_other_levels_is_found_on_its_rows():
    """A 240 x 300 matrix from level 12345 among 2**18 levels without rows: the row length is
    found, every matrix found begins a row of it, and they cover at least 85% of it and at
    most a block of rows outside it on either side."""
    start, rows, length = 12345, 240, 300
    levels = np.concatenate([noise(start, 1), rank_one(rows, length, seed=2),
                             noise(180000, 3)])
    assert row_lengths(lag_scores(levels)) == [length]
    found = matrices_of(find_layout(levels))
    assert found
    inside = outside = 0
    for first, n_rows, n in found:
        assert n == length and (first - start) % length == 0
        lo, hi = max(first, start), min(first + n_rows * n, start + rows * length)
        inside += max(0, hi - lo)
        outside += n_rows * n - max(0, hi - lo)
    assert inside >= 0.85 * rows * length
    assert outside <= 2 * BLOCK_ROWS * length


def test_matrices_of_one_row_length_and_other_profiles_stay_apart():
    """Two matrices of rows of 256 one after the other: no matrix found holds more than a
    block's rows of both."""
    levels = np.concatenate([rank_one(520, 256, seed=4), rank_one(520, 256, seed=5)])
    found = matrices_of(find_layout(levels))
    assert len(found) >= 2
    boundary = 520 * 256
    for first, n_rows, length in found:
        before = max(0, min(first + n_rows * length, boundary) - first) // length
        after = max(0, first + n_rows * length - max(first, boundary)) // length
        assert min(before, after) <= BLOCK_ROWS


def test_levels_without_rows_give_none():
    assert find_layout(noise(1 << 18, 6)) is None


@pytest.mark.parametrize("levels", [
    rank_one(250, 1000, seed=7),                                      # too few levels
    rank_one(900, 300, seed=8, limit=1),                              # three values
    rank_one(900, 300, seed=9, scale=1e7, noise=1e4, dtype=np.int32,
             limit=2**30),                                            # too large
], ids=["small", "narrow", "large"])
def test_what_is_not_searched_gives_none(levels):
    assert find_layout(levels) is None


def test_auto_codes_flat_levels_as_with_their_layout():
    """Flat levels of two matrices and other levels: ``auto`` finds the rows, its stream is
    within 3% of the one with the true layout and under 80% of the one without a row model
    (an empty layout), and decodes to the levels."""
    levels = np.concatenate([noise(7000, 10), rank_one(320, 320, seed=11),
                             rank_one(300, 200, seed=12), noise(100000, 13)])
    layout = [(1, 7000), (320, 320), (300, 200)]
    searched = hh.get_encoder("auto").encode(levels)
    given = hh.get_encoder("auto").encode(levels, layout=layout)
    none = hh.get_encoder("auto").encode(levels, layout=())
    assert mode_of(searched) == MODE_ROWS
    assert hh.codec.encoders.check(bytes(none)).encoder_id != hh.get_encoder("ans").encoder_id or \
        mode_of(none) != MODE_ROWS
    assert len(searched) <= 1.03 * len(given)
    assert len(searched) < 0.8 * len(none)
    assert np.array_equal(hh.decode(searched), levels)


def test_row_phases_sum_what_each_window_keeps():
    """Against a direct sum over windows: kept[b, q] sums dot^2 / |first|^2 and energy[b, q]
    |second|^2 over the windows from b * span + q + r * length, r < sample_rows."""
    rng = np.random.default_rng(14)
    levels = rng.integers(-9, 10, 500).astype(np.int16)
    levels[100:130] = 0
    length, block_rows, sample_rows = 7, 5, 3
    blocks = -(-levels.size // (block_rows * length))
    kept, energy = np.empty((blocks, length)), np.empty((blocks, length))
    row_phases(levels, length, block_rows, sample_rows, kept, energy)
    want_kept, want_energy = np.zeros_like(kept), np.zeros_like(energy)
    x = levels.astype(np.float64)
    for b in range(blocks):
        for i in range(b * block_rows * length, (b * block_rows + sample_rows) * length):
            if i + 2 * length > levels.size:
                break
            first, second = x[i:i + length], x[i + length:i + 2 * length]
            q = i % length
            if first @ first > 0:
                want_kept[b, q] += (first @ second) ** 2 / (first @ first)
            want_energy[b, q] += second @ second
    np.testing.assert_allclose(kept, want_kept, rtol=1e-12)
    np.testing.assert_array_equal(energy, want_energy)


def test_relative_squares_are_squares_over_their_neighbourhood():
    rng = np.random.default_rng(15)
    levels = rng.integers(-5, 6, 4000).astype(np.int8)
    levels[1000:1100] = 0
    starts, size, local = np.array([0, 950, 3000]), 1000, 16
    out = np.empty((3, size), dtype=np.float32)
    relative_squares(levels, starts, local, out)
    for b, at in enumerate(starts):
        x2 = levels[at:at + size].astype(np.float64) ** 2
        want = np.empty(size)
        for i in range(size):
            around = x2[max(0, i - local // 2):i + local // 2 + 1]
            want[i] = x2[i] / around.mean() if around.any() else 0.0
        np.testing.assert_allclose(out[b], want - want.mean(), rtol=1e-5, atol=1e-5)


def test_profile_cosines_compare_each_matrix_with_the_one_before():
    """Rows of one profile, then of the same one negated and scaled, then of another and then
    zeros: |cosine| 1, then near 0, then -1 (no profile), the first 0."""
    rng = np.random.default_rng(16)
    length = 64
    v, w = rng.normal(0, 10, length), rng.normal(0, 10, length)
    w -= (w @ v) / (v @ v) * v                                  # orthogonal to v
    gains = rng.normal(0, 1, 8)
    parts = [np.outer(gains, v), np.outer(gains, -0.5 * v), np.outer(gains, w),
             np.zeros((8, length))]
    levels = np.rint(np.concatenate([p.ravel() for p in parts])).astype(np.int16)
    starts = np.arange(4) * 8 * length
    cosines = np.empty(4)
    profile_cosines(levels, length, starts, np.full(4, 8), cosines)
    assert cosines[0] == 0.0
    assert cosines[1] > 0.99
    assert cosines[2] < 0.1
    assert cosines[3] == -1.0


def test_row_lengths_are_the_shortest_lags_whose_multiples_all_score_best():
    """Lags 320, 640, 960, 1280 score high (and 1600 higher, where rows of 320 and of 200
    meet): 320, whose weakest multiple scores best, then 200, once the multiples of 320 no
    longer count; a lag below MIN_SEARCH_LENGTH never counts; scores below MIN_LAG_SCORE give
    none."""
    scores = np.zeros(row_search.MAX_SEARCH_LENGTH + 1)
    scores[0] = 1.0
    scores[[3, 320, 640, 960, 1280, 1600, 1920]] = [0.9, 0.3, 0.32, 0.3, 0.29, 0.5, 0.28]
    scores[[200, 400, 600, 800, 1000, 1200]] = 0.2
    assert row_lengths(scores) == [320, 200]
    assert row_lengths(scores * 0.1) == []


def test_pick_phases_pool_the_blocks_around_each():
    """Against a direct sum: each block's phase has the largest kept / energy over the block
    and ``phase_blocks`` either side; its share is that ratio over ``share_blocks`` either
    side."""
    rng = np.random.default_rng(17)
    kept, energy = rng.random((13, 9)), rng.random((13, 9)) + 0.5
    energy[4, :] = 0.0
    kept[4, :] = 0.0
    phases, shares = np.empty(13, dtype=np.int64), np.empty(13)
    pick_phases(kept, energy, 3, 1, phases, shares)
    for b in range(13):
        around = slice(max(0, b - 3), b + 4)
        q = np.argmax(kept[around].sum(axis=0) / energy[around].sum(axis=0))
        near = slice(max(0, b - 1), b + 2)
        assert phases[b] == q
        assert shares[b] == pytest.approx(kept[near, q].sum() / energy[near, q].sum())


def test_a_later_lengths_matrices_keep_their_rows_outside_the_earlier_ones():
    """``_outside`` against a row-by-row check: a row is kept where it overlaps no earlier
    matrix, in runs of at least MIN_MATRIX_ROWS rows."""
    rng = np.random.default_rng(18)
    for _ in range(200):
        taken, at = [], 0
        for _ in range(rng.integers(0, 4)):
            at += int(rng.integers(0, 3000))
            rows, length = int(rng.integers(1, 60)), int(rng.integers(64, 200))
            taken.append((at, rows, length))
            at += rows * length
        start, rows, length = int(rng.integers(0, 4000)), int(rng.integers(1, 120)), \
            int(rng.integers(64, 200))
        free = [not any(first < start + (r + 1) * length and start + r * length <
                        first + n * width for first, n, width in taken) for r in range(rows)]
        want, r = [], 0
        while r < rows:
            if free[r]:
                end = r
                while end < rows and free[end]:
                    end += 1
                if end - r >= row_search.MIN_MATRIX_ROWS:
                    want.append((start + r * length, end - r, length))
                r = end
            else:
                r += 1
        assert row_search._outside([(start, rows, length)], taken) == want


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(40, 1100),
       dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64]),
       scale=st.sampled_from([2.0, 30.0, 1e5]), head=st.integers(0, 5000))
def test_any_levels_give_a_valid_layout_and_round_trip(seed, length, dtype, scale, head):
    """Noise, a rank-one matrix of any row length and noise again: whatever ``find_layout``
    finds is a layout of the levels (``check_layout``) and ``auto`` decodes to them."""
    limit = np.iinfo(dtype).max if dtype != np.int8 else 127
    levels = np.concatenate([
        noise(head, seed, scale=scale / 4),
        rank_one(300_000 // length, length, scale=scale, noise=scale / 20, seed=seed,
                 dtype=np.int64, limit=min(limit, 2**40)),
        noise(2000, seed + 1, scale=scale / 4)]).clip(-limit, limit).astype(dtype)
    layout = find_layout(levels)
    if layout is not None:
        check_layout(layout, levels.size)
        assert all(rows >= 1 and n >= 1 for rows, n in layout)
    assert np.array_equal(hh.decode(hh.get_encoder("auto").encode(levels)), levels)
