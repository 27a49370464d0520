"""Loads and stores of several levels at once, which Numba cannot express itself.

READ ME FIRST
1. The table decoders (kernels/lanes.py) write a lookup's levels, up to 8 bytes, with one
   unaligned 8-byte store (``store8``); ``levels_per_word`` and ``last_level`` give them the
   dtype's levels per 8 bytes and the last level of such a word as compile-time forms.
2. ``store4_bytes`` (the payload's byte order, kernels/bits.py) and ``store8`` are LLVM-level
   intrinsics: no bounds check, no reference counting. The caller guarantees room
   (i + 4 <= out.size for 1-byte ``out``; i + 8 / itemsize <= out.size).
3. ``load8`` reads the 8 bytes from element i on (8 / itemsize elements) as one uint64, so an
   encoder can test several levels at once (a block without a run end, a block of one level);
   ``sampled_eighths`` tells from a sample whether such blocks are common enough in a chunk
   for the test to pay. Same contract as the stores: the caller guarantees room.
4. ``big_endian`` reverses a word's bytes on a little-endian machine: the payload converts
   between big-endian bytes and native words with one load, swap and store per word
   (bits.store_payload, bits.load_payload), faster than NumPy's byte-swapping casts
   (docs/design.md).
5. Under Numba's bounds checks (kernels/checked.py) ``store4_bytes``, ``store8``, ``load8`` and
   ``count_equal64`` are checked twins: the same arguments and results, and an IndexError for
   an access outside the array.
"""
import sys

from llvmlite import ir
from numba import njit, types, uint64, int64
from numba.extending import intrinsic, overload

from .checked import CHECKED, check_span

# Level k of an 8-byte word of levels is its k-th in memory order.
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


def declare_intrinsic(module, name, ret, args):
    """The LLVM intrinsic ``name`` in ``module`` (declared once per module)."""
    fn = module.globals.get(name)
    return fn if fn is not None else ir.Function(module, ir.FunctionType(ret, args), name)


def splat(builder, value, vector_type):
    """``value`` in every lane of ``vector_type``."""
    undef = ir.Constant(vector_type, ir.Undefined)
    one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, undef, ir.Constant(
        ir.VectorType(ir.IntType(32), vector_type.count), [0] * vector_type.count))


@intrinsic
def count_equal64(typingctx, ary, i, value):
    """How many of the 64 bytes' elements from element ``i`` of ``ary`` equal ``value`` (of the
    array's dtype): one vector compare and a population count of its mask (AVX-512: one
    instruction each; narrower vector units split them). No bounds check: the caller keeps
    i + 64 / itemsize <= ary.size."""
    if not (isinstance(ary, types.Array) and ary.dtype.bitwidth in (8, 16, 32, 64)):
        return None

    def codegen(context, builder, sig, args):
        array, index, val = args
        width = sig.args[0].dtype.bitwidth
        lanes = 512 // width
        vector = ir.VectorType(ir.IntType(width), lanes)
        data = context.make_array(sig.args[0])(context, builder, array).data
        load = builder.load(builder.bitcast(builder.gep(data, [index]), vector.as_pointer()),
                            align=1)
        mask = builder.bitcast(builder.icmp_unsigned("==", load, splat(builder, val, vector)),
                               ir.IntType(lanes))
        popcount = declare_intrinsic(builder.module, f"llvm.ctpop.i{lanes}", ir.IntType(lanes),
                                     [ir.IntType(lanes)])
        count = builder.call(popcount, [mask])
        return builder.zext(count, ir.IntType(64)) if lanes < 64 else count
    return types.uint64(ary, types.uint64, ary.dtype), codegen


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


if CHECKED:
    _raw_store4_bytes, _raw_store8, _raw_load8, _raw_count_equal64 = \
        store4_bytes, store8, load8, count_equal64

    @njit(cache=True)
    def store4_bytes(out, i, value):
        """``store4_bytes`` after checking that out[i:i + 4] lies inside ``out``."""
        check_span("store4_bytes", out, i, 4)
        _raw_store4_bytes(out, i, value)

    @njit(cache=True)
    def store8(out, i, value):
        """``store8`` after checking that its 8 bytes from element i lie inside ``out``."""
        check_span("store8", out, i, 8 // out.itemsize)
        _raw_store8(out, i, value)

    @njit(cache=True)
    def load8(ary, i):
        """``load8`` after checking that its 8 bytes from element i lie inside ``ary``."""
        check_span("load8", ary, i, 8 // ary.itemsize)
        return _raw_load8(ary, i)

    @njit(cache=True)
    def count_equal64(ary, i, value):
        """``count_equal64`` after checking that its 64 bytes from element i lie inside
        ``ary``."""
        check_span("count_equal64", ary, i, 64 // ary.itemsize)
        return _raw_count_equal64(ary, i, value)


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


def levels_per_word(out):
    """Levels of ``out``'s dtype in 8 bytes, as a compile-time constant (``out.itemsize`` is
    read at run time in Numba, so divisions by it stay divisions). Compiled only."""
    raise NotImplementedError("levels_per_word runs inside Numba-compiled code only")


@overload(levels_per_word, inline="always")
def _levels_per_word(out):
    per_word = 64 // out.dtype.bitwidth
    return lambda out: per_word


def last_level(word, out):
    """The level in the last slot of an 8-byte ``word`` of ``out``'s levels (the one ``store8``
    writes at the highest index), as ``out``'s dtype. Compiled only."""
    raise NotImplementedError("last_level runs inside Numba-compiled code only")


@overload(last_level, inline="always")
def _last_level(word, out):
    width = out.dtype.bitwidth
    dtype = out.dtype
    if LITTLE_ENDIAN:
        return lambda word, out: dtype(word >> uint64(64 - width))
    mask = (1 << width) - 1 if width < 64 else (1 << 64) - 1
    return lambda word, out: dtype(word & uint64(mask))


def level_word(level, out):
    """The uint64 whose every level of ``out``'s dtype is ``level`` (its low bits): the word
    ``store8`` writes for a run of one level. Compiled only."""
    raise NotImplementedError("level_word runs inside Numba-compiled code only")


@overload(level_word, inline="always")
def _level_word(level, out):
    width = out.dtype.bitwidth
    mask = (1 << width) - 1 if width < 64 else (1 << 64) - 1
    every = ((1 << 64) - 1) // mask
    return lambda level, out: (uint64(level) & uint64(mask)) * uint64(every)
