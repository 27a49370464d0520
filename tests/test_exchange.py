"""The framework-free exchange core: frames, error feedback, reduction, statistics."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import horovod_huffman as hh
from horovod_huffman.exchange import (Codec, MismatchError, contract, derive_seed, frame,
                                      split_frames)


def test_frames_split_back_in_rank_order():
    msgs = [np.arange(k, dtype=np.uint8) for k in (3, 0, 7)]
    buf = np.concatenate([frame("w", 4, m) for m in msgs])
    for got, want in zip(split_frames(buf, 3, "w", 4), msgs):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,step", [("other", 4), ("w", 5)])
def test_frames_from_another_parameter_or_step_raise(name, step):
    buf = np.concatenate([frame("w", 4, np.zeros(2, np.uint8)), frame(name, step, np.zeros(2, np.uint8))])
    with pytest.raises(MismatchError, match="rank 1"):
        split_frames(buf, 2, "w", 4)


@given(st.binary(max_size=80))
def test_bad_gathered_bytes_raise_decode_error(data):
    try:
        split_frames(np.frombuffer(data, np.uint8), 2, "w", 0)
    except (hh.DecodeError, MismatchError):
        return
    raise AssertionError("accepted garbage")


@given(st.integers(1, 127), st.integers(0, 2**32))
def test_contracted_residual_never_exceeds_the_input(s, seed):
    x = np.random.default_rng(seed).standard_normal(1000).astype(np.float32)
    qt = contract(x, hh.QSGD(levels=s, bucket_size=64).quantize(x, seed=seed))
    r = x - hh.dequantize(qt)
    for b in range(0, 1000, 64):
        assert np.linalg.norm(r[b:b + 64]) <= np.linalg.norm(x[b:b + 64]) * (1 + 1e-5)


def test_error_feedback_carries_the_residual_forward():
    codec = Codec(encoder="rlh", quantizer=hh.QSGD(levels=1, bucket_size=64), error_feedback=True,
                  seed=7)
    g = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    sent = np.zeros_like(g)
    errors, residuals = {}, []
    for t in range(1, 801):
        data, step = codec.encode("w", g)
        sent += codec.decode_sum(data, 1, "w", step, g.shape)
        residuals.append(np.linalg.norm(codec.residuals["w"]) / np.linalg.norm(g))
        errors[t] = np.abs(sent / t - g).max()
    # What was sent sums to the gradients minus one bounded residual, so the average converges
    # to the gradient as 1/T (plain error feedback on QSGD s=1 would grow without bound here).
    assert max(residuals) < 20
    assert errors[800] < 0.6 * errors[200] and errors[800] < 0.1


def test_error_feedback_defaults_to_the_quantizer_bias():
    assert not Codec(quantizer=hh.QSGD()).error_feedback
    assert Codec(quantizer=hh.TernGrad(clip=2.5)).error_feedback
    assert not Codec(quantizer=hh.TernGrad()).error_feedback


def test_decode_sum_adds_every_rank_and_counts_stats():
    codec = Codec(encoder="huffman", quantizer=hh.QSGD(levels=8), seed=1)
    grads = [np.random.default_rng(r).standard_normal((20, 30)).astype(np.float32) for r in range(3)]
    frames, parts = [], []
    for r, g in enumerate(grads):
        c = Codec(encoder="huffman", quantizer=hh.QSGD(levels=8), seed=1 + r)
        data, step = c.encode("layer", g)
        frames.append(data)
        parts.append(hh.dequantize(hh.QSGD(levels=8).quantize(g, seed=derive_seed(1 + r, "layer", 0))))
    total = codec.decode_sum(np.concatenate(frames), 3, "layer", 0, (20, 30))
    np.testing.assert_array_equal(total, parts[0] + parts[1] + parts[2])
    assert codec.current.decode_s > 0
    sent = c.end_step().as_dict()
    assert sent["coords"] == 600 and sent["raw_bytes"] == 2400 and 0 < sent["bits_per_coord"] < 32
    assert c.total.coords == 600 and c.current.coords == 0


def test_a_corrupt_rank_is_named():
    codec = Codec(seed=0)
    good, _ = codec.encode("w", np.ones(100, np.float32))
    bad = good.copy()
    bad[-10] ^= 1
    with pytest.raises(hh.DecodeError, match="rank 1"):
        codec.decode_sum(np.concatenate([good, bad]), 2, "w", 0, (100,))
