"""Chunked payloads: the elements are split into chunks of ``chunk`` levels, each coded as its own
bit stream starting on a 32-bit word, so decoders can work on several chunks at once.

READ ME FIRST
1. Chunk c holds elements [c * chunk, min((c + 1) * chunk, n)); its stream starts at bit
   ``32 * (words used by chunks 0..c-1)`` of the payload and is ``chunk_bits[c]`` bits long.
2. One chunk's decode is a serial chain (each code's position depends on the previous code's
   length). The CPU table decoders run four chunks in one loop, four independent chains the
   core overlaps (kernels/lanes.py); the GPU encoder takes one chunk per thread block and the GPU
   decoder one chunk per thread (cuda_tokens.py, cuda_decode.py). ``ans`` and ``rla`` chunks
   are 32 chains each (ans.py note 3, ans_tokens.py note 2): a warp per chunk on the GPU.
3. CHUNK_LEVELS is the encoders' default (``chunk_levels``); for the same chunk size every
   producer (CPU or GPU) writes the very same bytes; decoders accept any size a stream declares.
4. The rANS coders' chunks end with ~560 bits beside their symbols' information (32 final
   states and padding); a sparse stream's chunks grow (horovod_huffman/codec/encoders/base.py
   ``GrowingChunks``): at 0.07 bits per level (TernGrad) a chunk of 2**16 levels carries
   4.6 Kbit, of which ~560 bits are 12%.
"""
import numpy as np
from numba import njit

from .bits import WORD_BITS

# 2**16 levels: a 1M-level tensor gives 16 chunks (4 for each CPU decoder lane) and a 64M one
# 1024 (enough blocks for a GPU); the per-chunk bit count costs ~3 bytes of parameters.
CHUNK_LEVELS = 1 << 16
# Growing chunks (note 4): a chunk doubles while estimated below CHUNK_PAYLOAD_BITS for ``rla``
# (at most ~1.7% of it then goes to its 32 states) or ANS_CHUNK_PAYLOAD_BITS for ``ans`` (~0.4%),
# up to CHUNK_GROWTH times the encoder's chunk_levels by default. ``rla``'s is lower: a chunk
# that grows has its runs cut and counted again (encoders/rla.py ``sized_plan``), which would
# cost QSGD s = 8 a quarter of its encode speed (docs/design.md, growing chunks), where chunks
# of 2**16 levels carry ~50 Kbit.
CHUNK_PAYLOAD_BITS = 1 << 15
ANS_CHUNK_PAYLOAD_BITS = 1 << 17
CHUNK_GROWTH = 16


@njit(cache=True, nogil=True)
def chunk_starts(chunk_bits):
    """Starting bit offset of every chunk (each chunk is padded to a 32-bit word); int64 in and
    out (a Numba loop: NumPy's small-array calls cost 5-9 us of every decode)."""
    starts = np.empty(chunk_bits.shape[0], dtype=np.int64)
    at = 0
    for c in range(chunk_bits.shape[0]):
        starts[c] = at
        at += (chunk_bits[c] + WORD_BITS - 1) // WORD_BITS * WORD_BITS
    return starts


def payload_bits(chunk_bits, starts=None):
    """Payload bits of a chunked stream: every chunk padded to a word but the last.
    ``starts``: chunk_starts(chunk_bits), where the caller has it already."""
    if len(chunk_bits) == 0:
        return 0
    if starts is None:
        starts = chunk_starts(chunk_bits)
    return int(starts[-1] + int(chunk_bits[-1]))
