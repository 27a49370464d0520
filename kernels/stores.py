"""Loads and stores of several levels at once, which Numba cannot express itself.

READ ME FIRST
1. The multi-level RLH/SHS decoder (runs.py) writes up to four levels per table lookup. For
   1-byte level dtypes its table holds the four levels already as bytes, so one unaligned
   32-bit store writes them all (measured: the four-chunk loop 1.4x faster than four stores of
   separately extracted levels); wider dtypes take four element stores. (The Huffman decoder,
   symbols.py, keeps 8 bytes of levels per entry and writes them with ``store8``.)
2. ``store4_bytes`` is an LLVM-level intrinsic: no bounds check, no reference counting. The
   caller guarantees ``i + 4 <= out.size`` (the decoder's loops only run with room for a whole
   entry) and a 1-byte dtype (``put_four`` dispatches on the dtype at compile time).
3. ``load8`` reads the 8 bytes from element i on (8 / itemsize elements) as one uint64, so an
   encoder can test several levels at once (a block without a run end, a block of one level);
   ``sampled_eighths`` tells from a sample whether such blocks are common enough in a chunk
   for the test to pay. ``store8`` is its counterpart (the Huffman decoder writes a lookup's
   levels, the RLH decoder a fill, 8 bytes at a time); the caller guarantees room.
   Same contract: no bounds check; the caller guarantees i + 8 / itemsize <= out.size.
4. ``big_endian`` reverses a word's bytes on a little-endian machine: the payload converts
   between big-endian bytes and native words with one load, swap and store per word
   (bits.store_payload, bits.load_payload; measured 6-7x faster than NumPy's byte-swapping
   casts).
"""
import sys

from llvmlite import ir
from numba import njit, types, uint64, int64
from numba.extending import intrinsic, overload

# Multi-level entry (runs.py): bits consumed (0-3), count (4-6), levels from bit 8: four
# bytes for a 1-byte dtype, else four 14-bit symbols (4 * 14 + 8 header bits = 64).
MULTI_SHIFT = 8
MULTI_SYMBOL_BITS = 14
MULTI_SYMBOL_MAX = (1 << MULTI_SYMBOL_BITS) - 1
# Level k of a byte entry is byte k of the 32-bit store in memory order.
LITTLE_ENDIAN = sys.byteorder == "little"


@intrinsic
def store4_bytes(typingctx, out, i, value):
    """Store the low 32 bits of ``value`` as out[i:i + 4] with one unaligned store (native byte
    order: out[i] is the lowest byte on a little-endian machine)."""
    if not (isinstance(out, types.Array) and out.dtype.bitwidth == 8):
        return None

    def codegen(context, builder, sig, args):
        ary, index, val = args
        data = context.make_array(sig.args[0])(context, builder, ary).data
        pointer = builder.bitcast(builder.gep(data, [index]), ir.IntType(32).as_pointer())
        store = builder.store(builder.trunc(val, ir.IntType(32)), pointer)
        store.align = 1
        return context.get_dummy_value()
    return types.void(out, i, value), codegen


@intrinsic
def store8(typingctx, out, i, value):
    """Store the uint64 ``value`` as the 8 bytes from element ``i`` of ``out`` (any dtype of 1,
    2, 4 or 8 bytes) with one unaligned native-order store."""
    if not (isinstance(out, types.Array) and out.dtype.bitwidth in (8, 16, 32, 64)):
        return None

    def codegen(context, builder, sig, args):
        ary, index, val = args
        data = context.make_array(sig.args[0])(context, builder, ary).data
        pointer = builder.bitcast(builder.gep(data, [index]), ir.IntType(64).as_pointer())
        store = builder.store(val, pointer)
        store.align = 1
        return context.get_dummy_value()
    return types.void(out, i, types.uint64), codegen


@intrinsic
def load8(typingctx, ary, i):
    """The 8 bytes at element ``i`` of ``ary`` (any dtype of 1, 2, 4 or 8 bytes) as one
    unaligned native-order uint64 load."""
    if not (isinstance(ary, types.Array) and ary.dtype.bitwidth in (8, 16, 32, 64)):
        return None

    def codegen(context, builder, sig, args):
        array, index = args
        data = context.make_array(sig.args[0])(context, builder, array).data
        pointer = builder.bitcast(builder.gep(data, [index]), ir.IntType(64).as_pointer())
        load = builder.load(pointer)
        load.align = 1
        return load
    return types.uint64(ary, i), codegen


@intrinsic
def big_endian(typingctx, value):
    """A uint32 or uint64 ``value`` with its bytes reversed on a little-endian machine (unchanged
    on a big-endian one): what a native load of big-endian bytes needs, and what a native store
    needs to write big-endian bytes."""
    if value not in (types.uint32, types.uint64):
        return None

    def codegen(context, builder, sig, args):
        return builder.bswap(args[0]) if LITTLE_ENDIAN else args[0]
    return value(value), codegen


# Blocks sampled per chunk to choose between a per-element loop and one that skips blocks.
SAMPLE_BLOCKS = 64


@njit(cache=True, inline="always")
def sampled_eighths(levels, start, stop, pattern, against_next):
    """Eighths (0..8) of SAMPLE_BLOCKS evenly spaced 8-byte blocks of levels[start:stop] (uint64
    indices) that equal ``pattern`` or, ``against_next``, the block one level on (no run end in
    the block); 0 when the range is too short to sample."""
    one, samples = uint64(1), uint64(SAMPLE_BLOCKS)
    block = uint64(8 // levels.itemsize)
    if stop - start <= samples * block:
        return 0
    step = (stop - start - block) // samples    # the last block and its successor fit
    hits = uint64(0)
    for k in range(samples):
        i = start + k * step
        hits += uint64(load8(levels, i) == (load8(levels, i + one) if against_next else pattern))
    return int64(hits * uint64(8) // samples)


def put_four(out, i, entry, base):
    """Write the four levels of a multi-symbol ``entry`` at out[i:i + 4] (the first ``count``
    are real; the rest are overwritten later). Compiled only (Numba overload)."""
    raise NotImplementedError("put_four runs inside Numba-compiled code only")


@overload(put_four, inline="always")
def _put_four(out, i, entry, base):
    if out.dtype.bitwidth == 8:
        def put_bytes(out, i, entry, base):
            store4_bytes(out, i, entry >> uint64(MULTI_SHIFT))
        return put_bytes

    def put_symbols(out, i, entry, base):
        m = uint64(MULTI_SYMBOL_MAX)
        out[i] = base + int64((entry >> uint64(MULTI_SHIFT)) & m)
        out[i + 1] = base + int64((entry >> uint64(MULTI_SHIFT + MULTI_SYMBOL_BITS)) & m)
        out[i + 2] = base + int64((entry >> uint64(MULTI_SHIFT + 2 * MULTI_SYMBOL_BITS)) & m)
        out[i + 3] = base + int64((entry >> uint64(MULTI_SHIFT + 3 * MULTI_SYMBOL_BITS)) & m)
    return put_symbols
