"""horovod-huffman: lossless Huffman-based encoding of quantized gradients for Horovod.

>>> import numpy as np, horovod_huffman as hh
>>> levels = np.array([0, 0, 1, 0, -2, 0, 0, 0], dtype=np.int8)
>>> buf = hh.get_encoder("rlh").encode(levels)
>>> bool((hh.decode(buf) == levels).all())
True
"""
from .errors import DecodeError
from .encoders import ENCODERS, Encoder, get_encoder, decode, encoder_name
from .quantizers import QSGD, TernGrad, QuantizedTensor, dequantize
from .message import pack, unpack

__version__ = "0.1.0"

__all__ = ["DecodeError", "ENCODERS", "Encoder", "get_encoder", "decode", "encoder_name",
           "QSGD", "TernGrad", "QuantizedTensor", "dequantize", "pack", "unpack"]
