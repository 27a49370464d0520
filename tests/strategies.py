"""Hypothesis strategies for level tensors of the shapes quantized gradients take, and worse;
and the deterministic encoders the tests compare streams of."""
import numpy as np
from hypothesis import strategies as st

import horovod_huffman as hh

LEVEL_DTYPES = [np.int8, np.int16, np.int32, np.int64]


def _bounds(dtype):
    info = np.iinfo(np.int32 if dtype == np.int64 else dtype)
    return int(info.min), int(info.max)


@st.composite
def level_arrays(draw, max_size=3000):
    """1-D level arrays from one of several distributions, in any supported dtype."""
    dtype = draw(st.sampled_from(LEVEL_DTYPES))
    lo, hi = _bounds(dtype)
    n = draw(st.integers(0, max_size))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["zeros", "constant", "qsgd", "heavy_tail", "long_runs",
                                 "extremes", "uniform_full", "ternary"]))
    if kind == "zeros":
        x = np.zeros(n, dtype=np.int64)
    elif kind == "constant":
        x = np.full(n, draw(st.integers(lo, hi)), dtype=np.int64)
    elif kind == "qsgd":
        s = draw(st.sampled_from([1, 2, 4, 8, 16, 127]))
        x = np.clip(np.rint(rng.laplace(0, s / 6, n)), -s, s).astype(np.int64)
    elif kind == "heavy_tail":
        mag = np.minimum(rng.zipf(1.3, n), hi)
        x = np.where(rng.random(n) < 0.5, -mag, mag).astype(np.int64)
    elif kind == "long_runs":
        values = rng.integers(-3, 4, size=max(n // 50, 1))
        runs = rng.geometric(1 / draw(st.sampled_from([2, 50, 5000])), size=values.size)
        x = np.repeat(values, runs)[:n].astype(np.int64)
        x = np.pad(x, (0, n - x.size))
    elif kind == "extremes":
        x = rng.choice(np.array([lo, hi, 0, lo + 1, hi - 1, -1, 1]), size=n)
    elif kind == "uniform_full":
        x = rng.integers(lo, hi, size=n, endpoint=True)
    else:
        x = rng.choice(np.array([-1, 0, 1]), size=n, p=[0.05, 0.9, 0.05])
    return x.astype(dtype)


def deterministic_encoder(name, **kwargs):
    """The encoder ``name`` (keyword arguments go to it); those that sample the levels
    (``encoders.SEEDED``: sh, shs, auto's candidates) get seed 0, so their streams are
    reproducible."""
    if name in hh.codec.encoders.SEEDED:
        kwargs.setdefault("seed", 0)
    return hh.get_encoder(name, **kwargs)


def chunked_encoder(name, chunk, **kwargs):
    """``deterministic_encoder`` with chunks of exactly ``chunk`` levels: a growing coder's
    (``encoders.GROWING``) ``max_chunk_levels`` is pinned to it, so that the small chunks a
    test asks for are the ones it exercises."""
    kwargs["chunk_levels"] = chunk
    if name in hh.codec.encoders.GROWING:
        kwargs.setdefault("max_chunk_levels", chunk)
    return deterministic_encoder(name, **kwargs)
