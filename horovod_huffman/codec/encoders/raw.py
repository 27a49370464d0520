"""``raw``: fixed-width packing at ceil(log2(levels in [min, max])) bits per element.

Parameters: base (the minimum), width in bits (0..32).
"""
from horovod_huffman.kernels.fixed import encode_fixed, decode_fixed
from horovod_huffman.kernels.stats import level_range

from horovod_huffman.kernels.errors import PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN
from horovod_huffman.kernels.maxima import RAW_MAX_WIDTH

from .. import wire
from ..params import ParamWriter, dtype_range
from . import gpu
from .base import Encoder, out_words, check_status


def fixed_width(lo, hi):
    """Bits per element for levels in [lo, hi]."""
    return (hi - lo).bit_length()


class Raw(Encoder):
    """Fixed-width bit packing of ``level - min``."""
    name = "raw"
    encoder_id = wire.ENCODER_IDS[name]
    on_device = True

    def _encode(self, levels):
        lo, hi = level_range(levels)
        width = fixed_width(lo, hi)
        out32 = out_words(levels.size * width)
        n_words, n_bits = encode_fixed(levels, lo, width, out32)
        return _params(lo, width), out32, n_words, n_bits

    def _encode_device(self, levels, stream):
        lo, hi = gpu.level_range(levels, stream)
        width = fixed_width(lo, hi)
        return (_params(lo, width),) + gpu.fixed_payload(levels, lo, width, stream)

    @classmethod
    def _decode(cls, reader, words, payload_bits, out, stream=None):
        lo, hi = dtype_range(out.dtype)
        base = reader.sint("base", lo, hi)
        width = reader.uint("width", 0, RAW_MAX_WIDTH)
        reader.done()
        if stream is None:
            check_status(decode_fixed(words, payload_bits, base, width, hi, out), cls.name)
            return
        if out.size * width != payload_bits:
            check_status(PAYLOAD_OVERRUN if out.size * width > payload_bits else PAYLOAD_UNDERRUN,
                         cls.name)
        gpu.decode_fixed(words, base, width, hi, out, cls.name, stream)


def _params(base, width):
    return ParamWriter().sint(base).uint(width).getvalue()
