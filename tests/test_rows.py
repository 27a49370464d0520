"""``ans``'s row model: levels of matrices whose rows are multiples of one profile, coded
against a rank-one prediction (encoders/rows.py, kernels/rows.py)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import horovod_huffman as hh
from horovod_huffman.codec import wire
from horovod_huffman.codec.encoders.ans import MODE_ROWS, RowsPlan
from horovod_huffman.tools.fuzz import forged_parameters
from horovod_huffman.codec.params import ParamReader, ParamWriter
from strategies import chunked_encoder                # beside this file
from time_limits import DECODING

pytestmark = DECODING


def rank_one(rows, length, scale=6.0, noise=0.6, seed=0, dtype=np.int8, limit=127):
    """Levels of a ``rows`` x ``length`` matrix near a rank-one one, rounded (flattened)."""
    rng = np.random.default_rng(seed)
    m = np.outer(rng.normal(0, 1, rows), rng.normal(0, scale, length))
    m += rng.normal(0, noise, m.shape)
    return np.clip(np.rint(m), -limit, limit).astype(dtype).ravel()


def mode_of(buf):
    return ParamReader(hh.codec.encoders.check(bytes(buf)).params).uint("mode", 0, 10)


def test_rank_one_matrices_cost_far_less_with_their_layout():
    """Two matrices of different profiles and a tail of other levels: with the layout the
    stream is under 60% of the stream without it, and decodes to the same levels."""
    levels = np.concatenate([rank_one(300, 200, seed=1), rank_one(100, 512, seed=2),
                             rank_one(1, 999, seed=3)])
    layout = [(300, 200), (100, 512)]
    encoder = hh.get_encoder("ans")
    plain = encoder.encode(levels)
    rows = encoder.encode(levels, layout=layout)
    assert mode_of(rows) == MODE_ROWS
    assert len(rows) < 0.6 * len(plain)
    assert np.array_equal(hh.decode(rows), levels)


def test_the_estimate_is_the_stream_size():
    """The row plan's size is its residuals' plan's estimate plus the model's parameters:
    within 1% of the stream."""
    levels = rank_one(400, 300, seed=4)
    encoder = hh.get_encoder("ans")
    plan, size = encoder.sized_plan(levels, [(400, 300)])
    assert isinstance(plan, RowsPlan)
    body = len(encoder.encode(levels, layout=[(400, 300)])) - wire.OVERHEAD_BYTES
    assert abs(size - body) <= 0.01 * body + 16
    assert abs(encoder.counted_bytes(levels, plan) - body) <= 0.002 * body + 16


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("chunk", [99, 64, 1 << 16])
@pytest.mark.parametrize("contexts", [False, True])
def test_round_trip_over_dtypes_chunks_and_contexts(dtype, chunk, contexts):
    """The row model's streams at chunks that end mid-step (99 levels: three steps of 32 lanes
    and three levels), on a step, and past the tensor."""
    levels = rank_one(64, 48, seed=5, dtype=dtype)
    encoder = chunked_encoder("ans", chunk, contexts=contexts)
    buf = encoder.encode(levels, layout=[(64, 48)])
    assert mode_of(buf) == MODE_ROWS
    out = hh.decode(buf)
    assert out.dtype == dtype and np.array_equal(out, levels)


def test_residuals_take_every_residual_mode():
    """The residuals' stream is a level stream of any mode: constant (a prediction exact
    everywhere), one table, block classes (rows whose noise changes scale), escapes (a few
    residuals far outside the window)."""
    u, v = np.arange(1, 33), np.array([1, -1, 0, 1, 1, -1, 0, -1] * 4)
    exact = np.outer(u, v).astype(np.int16).ravel()
    rng = np.random.default_rng(13)
    noisy = rank_one(256, 64, seed=13, dtype=np.int16, limit=30000).reshape(256, 64)
    noisy[::3] += np.rint(rng.laplace(0, 8, (86, 64))).astype(np.int16)
    wild = rank_one(64, 64, scale=200.0, seed=14, dtype=np.int16, limit=30000)
    wild[900] = 4700                                # past the window above the residuals
    encoder = hh.get_encoder("ans")
    modes = []
    for levels, rows, length in ((exact, 32, 32), (noisy.ravel(), 256, 64), (wild, 64, 64)):
        plan = encoder.plan(levels, [(rows, length)])
        assert isinstance(plan, RowsPlan)
        modes.append((plan.code.window == 1, plan.code.contexts, plan.code.escapes()))
        assert np.array_equal(hh.decode(encoder.encode(levels, layout=[(rows, length)])), levels)
    assert modes == [(True, False, False), (False, True, False), (False, False, True)]


def test_unfit_or_unmodelled_matrices_code_as_before():
    """Noise without a profile and matrices below MIN_ROWS rows: the level plan's stream,
    unchanged."""
    rng = np.random.default_rng(6)
    noise = rng.integers(-8, 9, 40 * 50).astype(np.int8)
    ans = hh.get_encoder("ans")
    assert bytes(ans.encode(noise, layout=[(40, 50)])) == bytes(ans.encode(noise))
    levels = rank_one(3, 500, seed=7)
    assert bytes(ans.encode(levels, layout=[(3, 500)])) == bytes(ans.encode(levels))


def test_auto_passes_the_layout_to_ans():
    """With the layout ``auto`` codes the row model; with an empty one (no matrices; it does
    not search) it does not."""
    levels = rank_one(256, 256, seed=9)
    auto = hh.get_encoder("auto")
    buf = auto.encode(levels, layout=[(256, 256)])
    assert auto.last_choice == "ans" and mode_of(buf) == MODE_ROWS
    assert len(buf) < len(auto.encode(levels, layout=()))
    assert np.array_equal(hh.decode(buf), levels)


@pytest.mark.parametrize("layout", [[(-1, 5)], [(10, 11)], [(1, 2, 3)], [(1, 2, 3, 4)],
                                    [(4, 2**62)], [(2.5, 4)], [(0, 2**70)], [(1, 2), (3,)],
                                    [[], []], [()], np.zeros((5, 0), dtype=np.int64)])
def test_a_layout_must_fit_the_levels(layout):
    with pytest.raises(ValueError):
        hh.get_encoder("rlh").encode(np.zeros(100, dtype=np.int8), layout=layout)


def test_every_truncation_raises():
    buf = bytes(chunked_encoder("ans", 256).encode(rank_one(40, 64, seed=10),
                                                  layout=[(40, 64)]))
    for cut in range(len(buf)):
        with pytest.raises(hh.DecodeError):
            hh.decode(buf[:cut])


@pytest.mark.parametrize("seed", range(3))
def test_forged_parameters_raise_or_decode_in_bounds(seed):
    """Resealed streams with bytes of the parameters (segments, profile, gains, the residuals'
    tables) replaced: DecodeError or levels of the declared size, never a crash."""
    levels = rank_one(48, 40, seed=seed)
    buf = bytes(chunked_encoder("ans", 256).encode(levels, layout=[(48, 40)]))
    decoded = 0
    for forged in forged_parameters(buf, np.random.default_rng(seed), 400):
        try:
            out = hh.decode(forged, max_elements=10_000)
        except hh.DecodeError:
            continue
        decoded += 1
        assert out.size <= 10_000
    assert decoded < 400


def test_a_prediction_out_of_the_dtype_raises():
    """Parameters forged with every gain at its largest: the payload's residuals plus those
    predictions leave int8, and the decoder says so instead of wrapping the levels."""
    levels = rank_one(16, 32, scale=60.0, seed=11)
    encoder = hh.get_encoder("ans")
    plan = encoder.plan(levels, [(16, 32)])
    assert plan.model.clip == 127
    params, out32, n_words, n_bits = encoder.emit(levels, plan)
    model = plan.model._replace(gains=np.full_like(plan.model.gains, 32767))
    writer = ParamWriter().uint(MODE_ROWS)
    model.write(writer)
    forged_params = encoder.emit(levels, plan._replace(model=model,
                                                       head=writer.getvalue()))[0]
    assert forged_params != params
    buf = wire.frame(encoder._result(levels.dtype, levels.size, forged_params, out32, n_words,
                                     n_bits))
    with pytest.raises(hh.DecodeError, match="does not fit"):
        hh.decode(buf)
    assert np.array_equal(hh.decode(wire.frame(encoder._result(
        levels.dtype, levels.size, params, out32, n_words, n_bits))), levels)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=40, deadline=None)
@given(rows=st.integers(1, 40), length=st.integers(1, 40), seed=st.integers(0, 2**32 - 1),
       tail=st.integers(0, 50), chunk=st.sampled_from([4, 8, 64, 1 << 16]))
def test_any_layout_round_trips(rows, length, seed, tail, chunk):
    levels = np.concatenate([rank_one(rows, length, seed=seed),
                             np.random.default_rng(seed).integers(-5, 6, tail).astype(np.int8)])
    for name in ("ans", "auto"):
        buf = hh.get_encoder(name, **({"chunk_levels": chunk} if name == "ans" else {})).encode(
            levels, layout=[(rows, length)])
        assert np.array_equal(hh.decode(buf), levels)


def test_pack_takes_a_matrix_layout_from_its_shape():
    """A tensor of two or more dimensions is one matrix of shape[0] rows to ``pack``."""
    rng = np.random.default_rng(12)
    grad = np.outer(rng.normal(0, 1, 200), rng.normal(0, 1, 300)).astype(np.float32)
    matrix = hh.QSGD(levels=16, seed=0).quantize(grad)
    flat = hh.QSGD(levels=16, seed=0).quantize(grad.ravel())
    assert np.array_equal(matrix.levels, flat.levels)
    packed = hh.pack(matrix, "ans")
    assert len(packed) < 0.8 * len(hh.pack(flat, "ans"))
    back = hh.unpack(packed)
    assert back.shape == (200, 300) and np.array_equal(back.levels, matrix.levels)


def test_forged_segments_past_the_levels_raise():
    """Segments whose rows times length, or whose sum, would pass the element count (or wrap
    a 64-bit product) are refused before anything is allocated."""
    from horovod_huffman.codec.encoders.rows import RowModel
    from horovod_huffman.codec.params import ParamWriter
    for n, gaps, rows, lengths, match in [
            (2**40, [0], [2**39], [2**39], "more than"),
            (100, [0, 0], [60, 60], [1, 1], "past level"),
            (2**40, [2**40, 2**40], [1, 1], [1, 1], "past level")]:
        writer = ParamWriter().uint(5).uint(len(gaps))
        writer.uints(np.stack([gaps, rows, lengths], axis=1).ravel())
        with pytest.raises(hh.DecodeError, match=match):
            RowModel.read(ParamReader(writer.getvalue() + bytes(200)), n, 4095, "ans")


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("sign", [1, -1])
def test_predictions_add_exactly_and_give_the_exact_range(dtype, sign):
    """``add_predictions`` (32-bit sums for sources of up to 16 bits, 64-bit ones above) gives
    src + sign * clamp((u * v + 64) >> 7, -clip, clip), computed here in Python integers,
    with levels outside the segments passed through, and returns the least and the largest
    sum exactly; a 32-bit source near its limits is summed without wrapping (64-bit sources,
    which no stream holds, at +-2**40)."""
    from horovod_huffman.kernels.rows import GAIN_MAX, PREDICTION_MAX, add_predictions
    rng = np.random.default_rng(5)
    offsets, rows, lengths = np.array([3, 200]), np.array([5, 7]), np.array([19, 13])
    profiles = rng.integers(-127, 128, int(lengths.sum()))
    gains = rng.integers(-GAIN_MAX, GAIN_MAX + 1, int(rows.sum()))
    gains[:2] = GAIN_MAX, -GAIN_MAX
    low, high = max(np.iinfo(dtype).min, -2**40), min(np.iinfo(dtype).max, 2**40)
    src = rng.integers(max(low, -30000), min(high, 30000) + 1, 330).astype(dtype)
    src[0], src[4], src[210] = low, high, high if sign > 0 else low
    clip = PREDICTION_MAX if dtype != np.int8 else 127
    expect = [int(x) for x in src]
    p0, g0 = 0, 0
    for at, n_rows, length in zip(offsets, rows, lengths):
        for r in range(n_rows):
            for j in range(length):
                p = (int(gains[g0 + r]) * int(profiles[p0 + j]) + 64) >> 7
                expect[at + r * length + j] += sign * min(max(p, -clip), clip)
        p0, g0 = p0 + length, g0 + n_rows
    expect = np.array(expect, dtype=object)
    lo, hi = int(expect.min()), int(expect.max())
    out = np.empty(src.size, dtype=np.int64)
    args = (src, sign, offsets, rows, lengths, profiles, gains, clip)
    assert add_predictions(*args, out) == (lo, hi)
    assert [int(x) for x in out] == list(expect)
    inside = slice(offsets[0], offsets[0] + rows[0] * lengths[0])     # the first segment's
    least, largest = add_predictions(src[inside], sign, offsets[:1] - offsets[0], rows[:1],
                                     lengths[:1], profiles, gains, clip, out[inside])
    assert (least, largest) == (int(expect[inside].min()), int(expect[inside].max()))


@pytest.mark.parametrize("block_bits", [2, 6, 9])
def test_predictions_give_the_block_maxima_of_their_sums(block_bits):
    """``add_predictions`` asked for block maxima fills them as ``block_maxima`` of its
    output gives them, with segments of several tiles, rows that straddle blocks and tiles,
    levels outside every segment and a last block cut short."""
    from horovod_huffman.kernels.ans_plans import block_maxima
    from horovod_huffman.kernels.rows import TILE_LEVELS, add_predictions
    rng = np.random.default_rng(block_bits)
    rows, lengths = np.array([3 * TILE_LEVELS // 37 + 2, 40]), np.array([37, TILE_LEVELS + 3])
    offsets = np.array([5, 5 + rows[0] * lengths[0] + 9])
    n = int(offsets[-1] + rows[-1] * lengths[-1]) + 11
    src = rng.integers(-128, 128, n).astype(np.int8)
    src[1] = -128
    profiles = rng.integers(-127, 128, int(lengths.sum()))
    gains = rng.integers(-3000, 3001, int(rows.sum()))
    out = np.empty(n, dtype=np.int16)
    maxima = np.full(-(-n >> block_bits), -1, dtype=np.int64)
    expect = np.empty_like(maxima)
    args = (src, -1, offsets, rows, lengths, profiles, gains, 255, out)
    assert add_predictions(*args, maxima, block_bits) == add_predictions(*args)
    block_maxima(out, block_bits, expect)
    assert (maxima == expect).all()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_block_maxima_take_every_magnitude(dtype):
    """``block_maxima`` gives each block's largest |level|, the dtype's least value included
    (int64 levels within int32's range, as the encoders take them), for blocks of the fixed
    and of other sizes and a last block cut short."""
    from horovod_huffman.kernels.ans_plans import block_maxima
    info = np.iinfo(dtype if dtype != np.int64 else np.int32)
    rng = np.random.default_rng(7)
    for block_bits in (2, 6, 8):
        for n in (1, 64, 65, 1000):
            x = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
            x[::7] = info.min
            maxima = np.empty(-(-n >> block_bits), dtype=np.int64)
            block_maxima(x, block_bits, maxima)
            size = 1 << block_bits
            assert [int(m) for m in maxima] == \
                [max(int(x[k:k + size].max()), -int(x[k:k + size].min()))
                 for k in range(0, n, size)]


def test_row_gains_are_the_same_from_narrow_and_wide_levels():
    """``row_gains`` sums 16-bit levels in 32-bit spans and wider ones in 64 bits: the same
    gains for the same values, rows longer than a span and at the 16-bit extremes
    included."""
    from horovod_huffman.kernels.rows import DOT_SPAN, PROFILE_MAX, row_gains
    rng = np.random.default_rng(8)
    rows, length = 6, 3 * DOT_SPAN + 17
    profile = rng.integers(-PROFILE_MAX, PROFILE_MAX + 1, length)
    for dtype in (np.int8, np.int16):
        info = np.iinfo(dtype)
        levels = rng.integers(info.min, info.max + 1, rows * length).astype(dtype)
        levels[:length] = info.max * np.sign(profile)            # the largest dot products
        levels[length:2 * length] = info.min * np.sign(profile)
        narrow, wide = np.empty(rows, np.int64), np.empty(rows, np.int64)
        row_gains(levels, 0, rows, length, profile, narrow)
        row_gains(levels.astype(np.int32), 0, rows, length, profile, wide)
        assert np.array_equal(narrow, wide)
