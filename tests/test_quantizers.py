"""QSGD and TernGrad: level ranges, unbiasedness, dtypes, shapes, and pack/unpack."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from numba import njit

import horovod_huffman as hh
from horovod_huffman.kernels.squares import SUM_LANES, sum_squares

FLOATS = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("s", [1, 2, 4, 8, 16, 127, 1000])
def test_qsgd_levels_lie_in_range(s):
    g = np.random.default_rng(s).standard_normal(5000).astype(np.float32)
    qt = hh.QSGD(levels=s, seed=0).quantize(g)
    assert np.abs(qt.levels.astype(np.int64)).max() <= s
    assert qt.levels.dtype == (np.int8 if s <= 127 else np.int16)
    assert qt.scales.size == -(-5000 // 512)


@pytest.mark.parametrize("quantizer", [hh.QSGD(levels=2, bucket_size=64, seed=1),
                                       hh.TernGrad(seed=1)])
def test_unbiased_quantizers_average_to_the_gradient(quantizer):
    g = np.random.default_rng(0).standard_normal(256)
    trials = 4000
    mean = sum(hh.dequantize(quantizer.quantize(g)) for _ in range(trials)) / trials
    # Each element's estimate has variance <= scale**2 / 4; allow 6 standard errors.
    scale = np.repeat(quantizer.quantize(g).scales, quantizer.quantize(g).bucket_size)[:g.size]
    assert np.all(np.abs(mean - g) <= 6 * scale / 2 / np.sqrt(trials) + 1e-9)


def test_terngrad_levels_and_clipping():
    g = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    qt = hh.TernGrad(clip=2.5, seed=0).quantize(g)
    assert set(np.unique(qt.levels)) <= {-1, 0, 1}
    assert qt.scales[0] == pytest.approx(2.5 * g.std(), rel=1e-5)
    assert hh.TernGrad().quantize(g).scales[0] == pytest.approx(np.abs(g).max())


@pytest.mark.parametrize("dtype", FLOATS)
@given(shape=st.lists(st.integers(0, 9), min_size=0, max_size=4))
def test_any_shape_and_dtype_roundtrip_through_pack(dtype, shape):
    g = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    for q in (hh.QSGD(levels=8, bucket_size=7, seed=0), hh.TernGrad(seed=0)):
        qt = q.quantize(g)
        back = hh.unpack(hh.pack(qt, encoder="auto"))
        np.testing.assert_array_equal(back.levels, qt.levels)
        np.testing.assert_array_equal(back.scales, qt.scales)
        out = hh.dequantize(back)
        assert out.shape == tuple(shape) and out.dtype == dtype
        np.testing.assert_array_equal(out, hh.dequantize(qt))


def test_seed_makes_quantization_reproducible():
    g = np.random.default_rng(0).standard_normal(3000)
    a = [hh.QSGD(levels=4, seed=9).quantize(g).levels for _ in range(2)]
    np.testing.assert_array_equal(a[0], a[1])
    q = hh.QSGD(levels=4, seed=9)
    assert not np.array_equal(q.quantize(g).levels, q.quantize(g).levels)


def test_non_finite_gradients_stay_non_finite():
    g = np.ones(1024, dtype=np.float32)
    g[3] = np.inf
    out = hh.dequantize(hh.QSGD(levels=4, bucket_size=512).quantize(g))
    assert np.isnan(out[:512]).all() and np.isfinite(out[512:]).all()


def test_bfloat16_travels_as_float32_values():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    g = np.random.default_rng(0).standard_normal(100).astype(ml_dtypes.bfloat16)
    out = hh.dequantize(hh.unpack(hh.pack(hh.QSGD(seed=0).quantize(g))))
    assert out.dtype == ml_dtypes.bfloat16


@njit
def _sum_squares(x, start, stop):
    return sum_squares(x, start, stop)


def _sum_squares_in_order(x):
    """kernels/squares.py's order spelled out in Python floats (float64 arithmetic)."""
    rows = len(x) // SUM_LANES
    lane = [0.0] * SUM_LANES
    for r in range(rows):
        for k in range(SUM_LANES):
            v = float(x[SUM_LANES * r + k])
            lane[k] += v * v
    total = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + \
        ((lane[1] + lane[5]) + (lane[3] + lane[7]))
    for v in x[rows * SUM_LANES:]:
        total += float(v) * float(v)
    return total


@given(st.integers(0, 200), st.integers(0, 20), st.sampled_from([np.float32, np.float64]),
       st.integers(0, 2**32 - 1))
def test_bucket_sum_of_squares_takes_its_documented_order(n, start, dtype, seed):
    """The vector lanes, the lane tree and the tail of squares.py, exactly (the CUDA kernel
    repeats this order; test_gpu compares the two)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(start + n) * 10.0 ** rng.integers(-8, 8, start + n)).astype(dtype)
    assert _sum_squares(x, start, start + n) == _sum_squares_in_order(x[start:])
