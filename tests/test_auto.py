"""``auto`` picks an encoder within 3% of the smallest, on tensors of >= 64K levels."""
import numpy as np
import pytest

import horovod_huffman as hh
from horovod_huffman.codec.encoders import SEEDED
from time_limits import DECODING                # beside this file

pytestmark = DECODING

CANDIDATES = [n for n in hh.ENCODERS if n != "auto"]


def tensors():
    rng = np.random.default_rng(11)
    g = rng.standard_normal(1 << 16) * np.exp(rng.standard_normal(1 << 16))
    yield "terngrad", hh.TernGrad(seed=0).quantize(g).levels
    for s in (1, 2, 4, 8, 16, 127):
        yield f"qsgd{s}", hh.QSGD(levels=s, seed=0).quantize(g).levels
    sparse = np.zeros(1 << 17, dtype=np.int8)
    sparse[rng.integers(0, sparse.size, 300)] = rng.integers(-3, 4, 300)
    yield "sparse", sparse
    yield "uniform16", rng.integers(-40, 40, 1 << 16).astype(np.int16)


@pytest.mark.parametrize("label,levels", list(tensors()))
def test_auto_is_within_three_percent_of_the_best(label, levels):
    sizes = {n: hh.get_encoder(n, seed=0).encode(levels).size if n in SEEDED
             else hh.get_encoder(n).encode(levels).size for n in CANDIDATES}
    auto = hh.get_encoder("auto", seed=0)
    buf = auto.encode(levels)
    assert buf.size <= 1.03 * min(sizes.values()), (auto.last_choice, sizes)
    np.testing.assert_array_equal(hh.decode(buf), levels)


def test_estimates_match_real_sizes():
    g = np.random.default_rng(5).standard_normal(1 << 16)
    levels = hh.QSGD(levels=4, seed=0).quantize(g).levels
    auto = hh.get_encoder("auto", seed=3)
    est = auto.estimate(levels)
    for name, (size, _) in est.items():
        enc = hh.get_encoder(name, seed=3) if name in SEEDED else hh.get_encoder(name)
        assert abs(size - enc.encode(levels).size) <= 0.01 * size + 16, name


def test_elias_run_estimates_are_exact_across_chunk_boundaries():
    """The run statistics come from rlh's tokens, which chunk boundaries cut; elias_rle codes
    maximal runs and qsgd_elias gaps between non-zero levels, so runs over one or several
    boundaries, and a zero run at the end, must be counted whole."""
    rng = np.random.default_rng(2)
    sparse = np.zeros(5 << 16, dtype=np.int8)
    sparse[rng.integers(0, sparse.size, 40)] = rng.integers(-3, 4, 40)
    steps = np.repeat(rng.integers(-2, 3, 9).astype(np.int8), 40000)
    for levels in (np.zeros(3 << 16, dtype=np.int8), sparse, steps, steps[::-1].copy(),
                   np.r_[np.ones(1 << 17, dtype=np.int16), rng.integers(-900, 900, 5000)]):
        est = hh.get_encoder("auto", seed=0).estimate(levels)
        for name in ("elias_rle", "qsgd_elias"):
            assert est[name].bytes == hh.get_encoder(name).encode(levels).size, name
