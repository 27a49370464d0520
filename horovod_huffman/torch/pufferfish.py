"""Pufferfish for PyTorch: low-rank, pre-factorized layers (Wang et al., MLSys 2021), so that
data-parallel training sends fewer gradient coordinates.

>>> import torch
>>> from horovod_huffman.torch import factorize
>>> model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
...                             torch.nn.Linear(256, 256), torch.nn.ReLU(),
...                             torch.nn.Linear(256, 10))
>>> report = factorize(model)           # the first and last layers stay full-rank
>>> type(model[2]).__name__, report.params_before, report.params_after
('LowRankLinear', 85002, 52234)

Layers (horovod_huffman.lowrank has the rank rule, the SVD split and the parameter counts):

- ``nn.Linear`` W (out x in) -> ``LowRankLinear``: Linear(in -> r, no bias), Linear(r -> out);
- ``nn.Conv2d`` (k x k, C_in -> C_out) -> ``LowRankConv2d``: the k x k convolution C_in -> r,
  optionally a BatchNorm over the r channels (``extra_bn``), then a 1 x 1 convolution r -> C_out;
- ``nn.LSTM`` -> ``LowRankLSTM``: every gate matrix (4H x input, 4H x H) that shrinks becomes a
  product U V, run through the same LSTM kernel.

r = round(rank_ratio x the layer's output width: out features, C_out, or the LSTM's hidden size).
A layer whose factors would not be smaller stays full-rank. ``switch_to_low_rank`` ends the
vanilla warm-up under Horovod: it factorizes the trained model, makes every rank's copy equal and
returns a new ``hvd.DistributedOptimizer`` with fresh state.
"""
import numpy as np
import torch
from torch import nn
from torch.func import functional_call

try:
    import horovod.torch as hvd
except ImportError:                      # the layers need no Horovod; switch_to_low_rank does
    hvd = None

from ..lowrank import (DEFAULT_RANK_RATIO, Factorization, factorizes, full_rank_layers,
                       rank_for, split)

__all__ = ["LowRankLinear", "LowRankConv2d", "LowRankLSTM", "Factorization", "factorize",
           "switch_to_low_rank"]

# Modules that count as layers when choosing which stay full-rank (the first and the last).
_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding, nn.RNNBase)


def _factors(weight, rank):
    """(U', V') of a 2-D weight tensor at ``rank``, in its dtype and on its device."""
    u, v = split(weight.detach().cpu().double().numpy(), rank)
    return (torch.from_numpy(np.ascontiguousarray(u)).to(weight),
            torch.from_numpy(np.ascontiguousarray(v)).to(weight))


class LowRankLinear(nn.Module):
    """Linear(in -> rank, no bias) then Linear(rank -> out): out x in weights as rank (in + out)."""

    def __init__(self, in_features, out_features, rank, bias=True):
        super().__init__()
        self.first = nn.Linear(in_features, rank, bias=False)
        self.second = nn.Linear(rank, out_features, bias=bias)

    def forward(self, x):
        return self.second(self.first(x))

    @classmethod
    def from_linear(cls, linear, rank):
        """The factorization of a trained ``nn.Linear`` (truncated SVD of its weight)."""
        out = cls(linear.in_features, linear.out_features, rank, linear.bias is not None)
        out.to(linear.weight)
        u, v = _factors(linear.weight, rank)
        with torch.no_grad():
            out.first.weight.copy_(v)
            out.second.weight.copy_(u)
            if linear.bias is not None:
                out.second.bias.copy_(linear.bias)
        return out


class LowRankConv2d(nn.Module):
    """The k x k convolution C_in -> rank (no bias), an optional BatchNorm2d(rank), then a 1 x 1
    convolution rank -> C_out: C_out x C_in x k x k weights as rank (C_in k k + C_out)."""

    def __init__(self, in_channels, out_channels, kernel_size, rank, stride=1, padding=0,
                 dilation=1, bias=True, padding_mode="zeros", extra_bn=False):
        super().__init__()
        self.first = nn.Conv2d(in_channels, rank, kernel_size, stride=stride, padding=padding,
                               dilation=dilation, bias=False, padding_mode=padding_mode)
        self.bn = nn.BatchNorm2d(rank) if extra_bn else None
        self.second = nn.Conv2d(rank, out_channels, 1, bias=bias)

    def forward(self, x):
        x = self.first(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.second(x)

    @classmethod
    def from_conv(cls, conv, rank, extra_bn=False):
        """The factorization of a trained ``nn.Conv2d`` (groups = 1): the SVD of its weight as
        C_out x (C_in k k). With ``extra_bn`` the BatchNorm starts as identity (fresh statistics),
        so the output changes once it has seen batches."""
        out = cls(conv.in_channels, conv.out_channels, conv.kernel_size, rank, conv.stride,
                  conv.padding, conv.dilation, conv.bias is not None, conv.padding_mode, extra_bn)
        out.to(conv.weight)
        u, v = _factors(conv.weight.reshape(conv.out_channels, -1), rank)
        with torch.no_grad():
            out.first.weight.copy_(v.reshape(out.first.weight.shape))
            out.second.weight.copy_(u.reshape(out.second.weight.shape))
            if conv.bias is not None:
                out.second.bias.copy_(conv.bias)
        return out


class LowRankLSTM(nn.Module):
    """An LSTM whose gate matrices are products of factors where that is smaller: for a weight
    ``weight_ih_l0`` (4H x input), parameters ``weight_ih_l0_u`` (4H x rank) and
    ``weight_ih_l0_v`` (rank x input); other weights and the biases stay as they are. The
    forward pass multiplies the factors out and runs PyTorch's LSTM (``torch.func.
    functional_call`` on a parameter-less template), so it takes the same inputs and returns the
    same outputs as ``nn.LSTM``. ``names``: the weights to factorize (default: every gate matrix
    whose factors are smaller)."""

    def __init__(self, input_size, hidden_size, rank, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, names=None):
        super().__init__()
        template = nn.LSTM(input_size, hidden_size, num_layers=num_layers, bias=bias,
                           batch_first=batch_first, dropout=dropout, device="meta")
        object.__setattr__(self, "_template", template)     # not a submodule: no parameters
        self.rank = rank
        self.factorized = []
        for name, p in template.named_parameters():
            if name in names if names is not None else \
                    name.startswith("weight") and factorizes(p.shape[0], p.shape[1], rank):
                self.factorized.append(name)
                self.register_parameter(f"{name}_u", nn.Parameter(torch.empty(p.shape[0], rank)))
                self.register_parameter(f"{name}_v", nn.Parameter(torch.empty(rank, p.shape[1])))
            else:
                self.register_parameter(name, nn.Parameter(torch.empty(p.shape)))

    def weights(self):
        """{template parameter name: tensor}, the factorized ones multiplied out."""
        out = {}
        for name, _ in self._template.named_parameters():
            out[name] = getattr(self, f"{name}_u") @ getattr(self, f"{name}_v") \
                if name in self.factorized else getattr(self, name)
        return out

    def forward(self, x, hx=None):
        self._template.train(self.training)
        return functional_call(self._template, self.weights(), (x,) if hx is None else (x, hx))

    @classmethod
    def from_lstm(cls, lstm, rank, names=None):
        """The factorization of a trained ``nn.LSTM`` (unidirectional, no projections)."""
        out = cls(lstm.input_size, lstm.hidden_size, rank, lstm.num_layers, lstm.bias,
                  lstm.batch_first, lstm.dropout, names)
        reference = lstm.weight_ih_l0
        out.to(reference)
        with torch.no_grad():
            for name, p in lstm.named_parameters():
                if name in out.factorized:
                    u, v = _factors(p, rank)
                    getattr(out, f"{name}_u").copy_(u)
                    getattr(out, f"{name}_v").copy_(v)
                else:
                    getattr(out, name).copy_(p)
        return out


def _params(model):
    return sum(p.numel() for p in model.parameters())


def _low_rank(module, rank_ratio, extra_bn):
    """The factorized replacement of ``module``, or None where it stays full-rank (another kind
    of layer, or factors that would not be smaller)."""
    if isinstance(module, nn.Linear):
        rank = rank_for(module.out_features, rank_ratio)
        if factorizes(module.out_features, module.in_features, rank):
            return LowRankLinear.from_linear(module, rank), rank
    elif isinstance(module, nn.Conv2d) and module.groups == 1:
        rank = rank_for(module.out_channels, rank_ratio)
        fan_in = module.weight[0].numel()
        if factorizes(module.out_channels, fan_in, rank):
            return LowRankConv2d.from_conv(module, rank, extra_bn), rank
    elif type(module) is nn.LSTM and not module.bidirectional and not module.proj_size:
        rank = rank_for(module.hidden_size, rank_ratio)
        lstm = LowRankLSTM.from_lstm(module, rank)
        if lstm.factorized:
            return lstm, rank
    return None, None


def factorize(model, rank_ratio=DEFAULT_RANK_RATIO, keep=None, extra_bn=False):
    """Replace, in place, every Linear, Conv2d and LSTM of ``model`` by its low-rank
    factorization from its current weights, except the modules named in ``keep`` (default:
    the model's first and last layers, as Pufferfish's hybrid networks keep them). Returns a
    ``Factorization``. Units: rank_ratio is the rank per output unit (channel, feature or
    hidden unit)."""
    layers = [name for name, m in model.named_modules() if isinstance(m, _LAYERS)]
    keep = full_rank_layers(layers, keep)
    report = Factorization(params_before=_params(model))
    for name in layers:
        if name in keep:
            report.kept.append(name)
            continue
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        replacement, rank = _low_rank(getattr(owner, attr), rank_ratio, extra_bn)
        if replacement is None:
            report.kept.append(name)
        else:
            setattr(owner, attr, replacement)
            report.layers[name] = rank
    report.params_after = _params(model)
    return report


def switch_to_low_rank(model, make_optimizer, rank_ratio=DEFAULT_RANK_RATIO, keep=None,
                       extra_bn=False, root_rank=0, **distributed):
    """End Pufferfish's vanilla warm-up under Horovod: factorize ``model`` (``factorize``), give
    every parameter a new ``nn.Parameter`` (the previous DistributedOptimizer's gradient hooks
    stay on the old ones, which no longer take part), broadcast parameters and buffers from
    ``root_rank`` so every rank holds the same factors, and return ``(optimizer, report)``:
    ``hvd.DistributedOptimizer(make_optimizer(model.parameters()), named_parameters=...,
    **distributed)`` with fresh optimizer state. Call it on every rank at the same step, after
    an optimizer step (no gradient in flight)."""
    if hvd is None:
        raise ImportError("switch_to_low_rank needs horovod.torch (scripts/install_horovod.sh); "
                          "factorize needs no Horovod")
    report = factorize(model, rank_ratio, keep, extra_bn)
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = nn.Parameter(p.detach(), requires_grad=p.requires_grad)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root_rank)
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         named_parameters=model.named_parameters(), **distributed)
    return optimizer, report
