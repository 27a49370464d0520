"""Pufferfish's low-rank factorization (Wang et al., MLSys 2021), framework-free: the rank of a
factorized layer, the truncated-SVD split of its trained weight, and parameter counts.

A weight W (out x in; a k x k convolution's as out x (in k k)) becomes the product of two
factors, U' (out x r) and V' (r x in), r = round(rank_ratio x out). Training a model built from
such products sends r (out + in) gradient coordinates per layer instead of out x in, with no
compression step. The adapters' ``factorize`` (horovod_huffman.torch.pufferfish,
horovod_huffman.tensorflow.pufferfish) replace layers by the two factors; docs/pufferfish.md
has the layers and the parameter counts of the examples' models.

>>> import numpy as np
>>> w = np.random.default_rng(0).standard_normal((64, 48))
>>> u, v = split(w, 12)
>>> u.shape, v.shape, factorizes(64, 48, 12)
((64, 12), (12, 48), True)
>>> s = np.linalg.svd(w, compute_uv=False)
>>> bool(np.isclose(np.linalg.norm(w - u @ v), np.linalg.norm(s[12:])))
True
"""
from dataclasses import dataclass, field

import numpy as np

DEFAULT_RANK_RATIO = 0.25


@dataclass
class Factorization:
    """What an adapter's ``factorize`` did: ``layers`` maps each factorized layer's name to its
    rank; ``kept`` names the layers left full-rank; parameter counts of the whole model before
    and after."""
    layers: dict = field(default_factory=dict)
    kept: list = field(default_factory=list)
    params_before: int = 0
    params_after: int = 0

    @property
    def reduction(self):
        """params_before / params_after."""
        return self.params_before / self.params_after if self.params_after else float("inf")

    def summary(self):
        """One line for a log: what was factorized at which rank, what was kept, the counts."""
        return (f"factorized {self.layers} (rank per layer), kept {self.kept}: "
                f"{self.params_before} -> {self.params_after} parameters "
                f"({self.reduction:.2f}x fewer)")


def full_rank_layers(layers, keep=None):
    """The set of layer names that stay full-rank: ``keep``, or by default the first and last
    of ``layers`` (the model's layers in order), as Pufferfish's hybrid networks keep them.
    ValueError when ``keep`` names a layer that is not in ``layers``."""
    if keep is None:
        return {layers[0], layers[-1]} if layers else set()
    keep = set(keep)
    unknown = keep - set(layers)
    if unknown:
        raise ValueError(f"keep names no layer of the model: {sorted(unknown)} "
                         f"(layers: {list(layers)})")
    return keep


def rank_for(out_width, rank_ratio=DEFAULT_RANK_RATIO):
    """The rank of a factorized layer with ``out_width`` outputs: round(rank_ratio x out_width),
    at least 1."""
    if not 0 < rank_ratio <= 1:
        raise ValueError(f"rank_ratio must be in (0, 1], got {rank_ratio!r}")
    return max(1, int(round(rank_ratio * out_width)))


def factorizes(out_dim, in_dim, rank):
    """Whether factors of ``rank`` hold fewer coordinates than the out_dim x in_dim weight:
    rank (out_dim + in_dim) < out_dim in_dim. Layers where they do not stay full-rank."""
    return rank * (out_dim + in_dim) < out_dim * in_dim


def split(weight, rank):
    """(U', V') with U' V' the best rank-``rank`` approximation of the 2-D ``weight`` (truncated
    SVD, W = U S V^T: U' = U_r S_r^1/2, V' = S_r^1/2 V_r^T), in float64. The Frobenius error
    |W - U' V'| equals the norm of the dropped singular values."""
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D, got shape {w.shape}")
    if not 1 <= rank <= min(w.shape):
        raise ValueError(f"rank must be in [1, {min(w.shape)}] for a {w.shape} weight, "
                         f"got {rank}")
    u, s, vt = np.linalg.svd(w, full_matrices=False)
    root = np.sqrt(s[:rank])
    return u[:, :rank] * root, root[:, None] * vt[:rank]


def dense_params(in_dim, out_dim, bias=True, rank=None):
    """Parameters of a dense layer, full-rank (``rank`` None) or factorized: in x r + r x out
    (+ out of bias)."""
    extra = out_dim if bias else 0
    return (in_dim * out_dim if rank is None else rank * (in_dim + out_dim)) + extra


def conv_params(in_channels, out_channels, kernel, bias=True, rank=None, extra_bn=False):
    """Parameters of a ``kernel`` x ``kernel`` convolution, full-rank or factorized: a k x k
    convolution in -> r and a 1 x 1 convolution r -> out (+ 2 r of BatchNorm with
    ``extra_bn``, + out of bias)."""
    extra = out_channels if bias else 0
    if rank is None:
        return in_channels * out_channels * kernel * kernel + extra
    return rank * (in_channels * kernel * kernel + out_channels) + (2 * rank if extra_bn else 0) \
        + extra


def matrix_params(out_dim, in_dim, rank=None):
    """Coordinates of an out_dim x in_dim weight, or of its factors at ``rank`` where they are
    fewer (``factorizes``); the rule the adapters apply to each of an LSTM's gate matrices."""
    if rank is not None and factorizes(out_dim, in_dim, rank):
        return rank * (out_dim + in_dim)
    return out_dim * in_dim


def lstm_params(input_size, hidden, layers=1, rank=None):
    """Parameters of an LSTM (two biases of 4 hidden per layer, as PyTorch keeps them), full-rank
    or with each gate matrix (4 hidden x input, 4 hidden x hidden) factorized at ``rank`` where
    that makes it smaller (``matrix_params``)."""
    total = 0
    for layer in range(layers):
        width = input_size if layer == 0 else hidden
        total += 8 * hidden + matrix_params(4 * hidden, width, rank) + \
            matrix_params(4 * hidden, hidden, rank)
    return total
