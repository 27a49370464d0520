"""Elias-based encoders, the paper's baselines.

``elias_gamma``, ``elias_delta``, ``elias_omega``: each level as the Elias code of
zigzag(level) + 1. ``elias_rle``: each maximal run as omega(zigzag(level) + 1), omega(run).
``qsgd_elias``: QSGD's own encoding: per non-zero, omega(gap since the previous non-zero),
a sign bit (1 = negative), omega(|level|). None has parameters.
"""

from horovod_huffman.kernels import elias as k

from .. import wire
from ..params import dtype_range
from .base import Encoder, out_words, check_status


class _EliasSymbols(Encoder):
    kind = None

    def _encode(self, levels):
        n_bits = k.encoded_bits(levels, self.kind)
        out32 = out_words(n_bits)
        n_words, n_bits = k.encode_stream(levels, self.kind, k.LAYOUT_SYMBOLS, out32)
        return b"", out32, n_words, n_bits

    @classmethod
    def _decode(cls, reader, words, payload_bits, out):
        reader.done()
        lo, hi = dtype_range(out.dtype)
        status = k.decode_stream(words, payload_bits, cls.kind, k.ELIAS_TABLES[cls.kind],
                                 k.LAYOUT_SYMBOLS, lo, hi, out)
        check_status(status, cls.name)


class EliasGamma(_EliasSymbols):
    """Elias gamma code of zigzag(level) + 1 per element."""
    name, kind = "elias_gamma", k.GAMMA
    encoder_id = wire.ENCODER_IDS[name]


class EliasDelta(_EliasSymbols):
    """Elias delta code of zigzag(level) + 1 per element."""
    name, kind = "elias_delta", k.DELTA
    encoder_id = wire.ENCODER_IDS[name]


class EliasOmega(_EliasSymbols):
    """Elias omega code of zigzag(level) + 1 per element."""
    name, kind = "elias_omega", k.OMEGA
    encoder_id = wire.ENCODER_IDS[name]


class EliasRLE(Encoder):
    """The paper's Elias baseline: each run as omega(level) then omega(run length)."""
    name = "elias_rle"
    encoder_id = wire.ENCODER_IDS[name]

    def _encode(self, levels):
        out32 = out_words(k.rle_bits(levels))
        n_words, n_bits = k.encode_stream(levels, k.OMEGA, k.LAYOUT_RUNS, out32)
        return b"", out32, n_words, n_bits

    @classmethod
    def _decode(cls, reader, words, payload_bits, out):
        reader.done()
        lo, hi = dtype_range(out.dtype)
        check_status(k.decode_stream(words, payload_bits, k.OMEGA, k.ELIAS_TABLES[k.OMEGA],
                                     k.LAYOUT_RUNS, lo, hi, out), cls.name)


class QSGDElias(Encoder):
    """QSGD's encoding: Elias-omega gaps between non-zeros, sign bit, Elias-omega magnitude."""
    name = "qsgd_elias"
    encoder_id = wire.ENCODER_IDS[name]

    def _encode(self, levels):
        out32 = out_words(k.qsgd_bits(levels))
        n_words, n_bits = k.encode_stream(levels, k.OMEGA, k.LAYOUT_GAPS, out32)
        return b"", out32, n_words, n_bits

    @classmethod
    def _decode(cls, reader, words, payload_bits, out):
        reader.done()
        lo, hi = dtype_range(out.dtype)
        out.fill(0)
        check_status(k.decode_stream(words, payload_bits, k.OMEGA, k.ELIAS_TABLES[k.OMEGA],
                                     k.LAYOUT_GAPS, lo, hi, out), cls.name)
