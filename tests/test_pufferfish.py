"""Pufferfish's factorization (horovod_huffman.lowrank, horovod_huffman.torch.pufferfish): layer
shapes and parameter counts against the formulas, full-rank factorizations that reproduce the
layer, truncated ones whose error is the dropped singular values."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from horovod_huffman import lowrank
from horovod_huffman.tools.bench.traces import CharLSTM, cnn
from horovod_huffman.torch import LowRankConv2d, LowRankLinear, LowRankLSTM, factorize


def count(module):
    return sum(p.numel() for p in module.parameters())


@given(st.integers(1, 300), st.integers(1, 300), st.integers(0, 2**32))
def test_split_error_is_the_norm_of_the_dropped_singular_values(rows, cols, seed):
    w = np.random.default_rng(seed).standard_normal((rows, cols))
    s = np.linalg.svd(w, compute_uv=False)
    for rank in sorted({1, min(rows, cols) // 2 or 1, min(rows, cols)}):
        u, v = lowrank.split(w, rank)
        assert u.shape == (rows, rank) and v.shape == (rank, cols)
        err = np.linalg.norm(w - u @ v)
        assert err == pytest.approx(np.linalg.norm(s[rank:]), rel=1e-9, abs=1e-9 * s[0])


@pytest.mark.parametrize("bias", [True, False])
def test_linear_shapes_counts_and_full_rank_outputs(bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(40, 24, bias=bias)
    low = LowRankLinear.from_linear(lin, 6)
    assert low.first.weight.shape == (6, 40) and low.second.weight.shape == (24, 6)
    assert count(low) == lowrank.dense_params(40, 24, bias, rank=6)
    assert count(lin) == lowrank.dense_params(40, 24, bias)
    full = LowRankLinear.from_linear(lin, 24)
    x = torch.randn(8, 40)
    torch.testing.assert_close(full(x), lin(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("extra_bn", [False, True])
def test_conv_shapes_counts_and_full_rank_outputs(extra_bn):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(6, 20, 3, stride=2, padding=1)
    low = LowRankConv2d.from_conv(conv, 5, extra_bn=extra_bn)
    assert low.first.weight.shape == (5, 6, 3, 3) and low.second.weight.shape == (20, 5, 1, 1)
    assert count(low) == lowrank.conv_params(6, 20, 3, True, rank=5, extra_bn=extra_bn)
    assert count(conv) == lowrank.conv_params(6, 20, 3, True)
    full = LowRankConv2d.from_conv(conv, 20, extra_bn=extra_bn).eval()
    x = torch.randn(2, 6, 11, 11)
    torch.testing.assert_close(full(x), conv(x), rtol=1e-4, atol=1e-5)


def test_conv_truncation_error_is_the_dropped_singular_values():
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(8, 16, 3)
    low = LowRankConv2d.from_conv(conv, 4)
    w = conv.weight.detach().double().reshape(16, -1)
    rebuilt = low.second.weight.detach().double().reshape(16, 4) @ \
        low.first.weight.detach().double().reshape(4, -1)
    s = torch.linalg.svdvals(w)
    assert torch.linalg.norm(w - rebuilt).item() == pytest.approx(
        torch.linalg.norm(s[4:]).item(), rel=1e-5)


def test_lstm_counts_and_full_rank_outputs():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 16, num_layers=2, batch_first=True)
    names = [n for n, _ in lstm.named_parameters() if n.startswith("weight")]
    full = LowRankLSTM.from_lstm(lstm, 16, names=names)         # rank 16 = min(64, 16)
    x = torch.randn(3, 7, 16)
    (out, (h, c)), (ref, (h0, c0)) = full(x), lstm(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c, c0, rtol=1e-5, atol=1e-5)
    low = LowRankLSTM.from_lstm(torch.nn.LSTM(64, 320, num_layers=2), 80)
    assert low.factorized == ["weight_hh_l0", "weight_ih_l1", "weight_hh_l1"]   # ih_l0 would grow
    assert count(low) == lowrank.lstm_params(64, 320, 2, rank=80)
    assert count(torch.nn.LSTM(64, 320, num_layers=2)) == lowrank.lstm_params(64, 320, 2)


def test_factorize_keeps_first_and_last_layers_and_reports_counts():
    torch.manual_seed(0)
    model = cnn(torch)
    before = count(model)
    report = factorize(model)
    assert report.kept == ["1", "9"] and report.layers == {"3": 16, "7": 32}
    assert report.params_before == before and report.params_after == count(model)
    assert report.params_after == (lowrank.conv_params(1, 32, 3) +
                                   lowrank.conv_params(32, 64, 3, rank=16) +
                                   lowrank.dense_params(1024, 128, rank=32) +
                                   lowrank.dense_params(128, 10))
    assert model(torch.randn(4, 64)).shape == (4, 10)
    lm = CharLSTM()(torch)
    report = factorize(lm, rank_ratio=0.25)
    assert report.kept == ["embed", "head"] and report.layers == {"lstm": 80}
    assert report.reduction > 2.5


def test_factorize_honours_keep_and_rejects_unknown_names():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
    with pytest.raises(ValueError, match="keep names no layer"):
        factorize(model, keep=["5"])
    report = factorize(model, keep=[])
    assert set(report.layers) == {"0", "1"}


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 64), st.integers(1, 64), st.floats(0.01, 1.0))
def test_layers_factorize_only_when_the_factors_are_smaller(out_dim, in_dim, ratio):
    model = torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim))
    report = factorize(model, rank_ratio=ratio, keep=[])
    rank = lowrank.rank_for(out_dim, ratio)
    assert ("0" in report.layers) == lowrank.factorizes(out_dim, in_dim, rank)
    assert report.params_after <= report.params_before
