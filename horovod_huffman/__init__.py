"""horovod-huffman: lossless Huffman-based encoding of quantized gradients for Horovod.

>>> import numpy as np, horovod_huffman as hh
>>> levels = np.array([0, 0, 1, 0, -2, 0, 0, 0], dtype=np.int8)
>>> buf = hh.get_encoder("rlh").encode(levels)
>>> bool((hh.decode(buf) == levels).all())
True
"""
from .codec.errors import DecodeError
from .codec.encoders import ENCODERS, Encoder, get_encoder, decode, encoder_name
from .codec.quantizers import QSGD, TernGrad, QuantizedTensor, dequantize
from .codec.message import pack, unpack
from . import module_paths

module_paths.install()

__version__ = "0.1.0"

__all__ = ["DecodeError", "ENCODERS", "Encoder", "get_encoder", "decode", "encoder_name",
           "QSGD", "TernGrad", "QuantizedTensor", "dequantize", "pack", "unpack"]
