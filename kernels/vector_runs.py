"""AVX-512 run pass for 1-byte levels: rlh's run ends and token symbols, 64 levels per step.

READ ME FIRST
1. ``runs.run_ends`` stores an index per level and ``runs.rlh_histogram`` then walks the runs to
   map each to its symbol: ~17 scalar operations per token of dense levels. Here one step
   compares 64 levels with their neighbours (two 64-byte loads, one compare: the run ends) and
   with the three levels before them (a level equal to the 1, 2 or 3 before it is the 2nd, 3rd,
   4th+ of its run), so every level gets the symbol its run would have if it ended there:
   (run - 1) * window + level - base for runs 1..3, LONG_RUN_SYMBOL for longer ones.
   ``llvm.masked.compressstore`` keeps the ends' indices and symbols (16 int32 lanes per
   store). ``runs.count_symbols`` then counts them and gives the LONG_RUN_SYMBOL tokens, rare
   in dense levels, their symbols from the run ends.
2. Runs are cut at chunk boundaries (kernels/chunks.py): a step's lanes at chunk positions 0, 1,
   2 do not look back past the chunk start, and a chunk's last level always ends a run. The
   positions a whole step does not fit (a chunk's first levels at the array start, its tail)
   go through ``_position``, the same rule one level at a time.
3. Only where the CPU has AVX-512 F and BW and Numba compiles for it (``AVAILABLE``: no
   NUMBA_CPU_NAME / NUMBA_CPU_FEATURES override); elsewhere LLVM would expand the compressing
   stores into a branch per lane, so callers keep the scalar passes.
4. For int8 levels (a window of at most 256 levels covers every level: no escapes) and fewer
   than 2**31 of them (int32 ends).
5. Under Numba's bounds checks ``_any_end`` and ``_step`` are checked twins (kernels/checked.py).
"""
import llvmlite.binding as llvm
from llvmlite import ir
from numba import config, njit, types, uint64, int64
from numba.extending import intrinsic

from .checked import CHECKED, check_span
from .runs import LONG_RUN_SYMBOL as _LONG_RUN_SYMBOL
from .stores import declare_intrinsic, splat

STEP = 64                     # levels per step: one 512-bit vector of int8
# The symbol of a level that is the 4th or later of its run (runs.count_symbols resolves it).
LONG_RUN_SYMBOL = uint64(_LONG_RUN_SYMBOL)

_FEATURES = llvm.get_host_cpu_features()
AVAILABLE = bool(_FEATURES.get("avx512f") and _FEATURES.get("avx512bw")) and \
    config.CPU_NAME is None and config.CPU_FEATURES is None

_I1, _I8, _I16, _I32, _I64 = (ir.IntType(b) for b in (1, 8, 16, 32, 64))
_LANES = 16                   # int32 lanes per compressing store


@intrinsic
def _any_end(typingctx, levels, i):
    """Whether any of levels i..i + 63 differs from the next (a run end): one 64-byte compare,
    so a step can skip a block inside a long run (needs i + 64 < levels.size)."""
    if not (isinstance(levels, types.Array) and levels.dtype.bitwidth == 8):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        bytes64 = ir.VectorType(_I8, STEP)
        x, y = (builder.load(builder.bitcast(builder.gep(data, [builder.add(
            args[1], ir.Constant(_I64, offset))]), bytes64.as_pointer()), align=1)
            for offset in (0, 1))
        mask = builder.bitcast(builder.icmp_unsigned("!=", x, y), _I64)
        return builder.icmp_unsigned("!=", mask, ir.Constant(_I64, 0))

    return types.boolean(levels, types.uint64), codegen


@intrinsic
def _step(typingctx, levels, i, base, window, ends, symbols, t):
    """One step over levels i..i + 63, each compared with the next and the 3 before it (all
    in the chunk: i >= chunk start + 3, i + 64 < chunk end): stores the run ends' indices into
    ends[t:] and their symbols into symbols[t:]; returns the new t. Each compressed vector is
    stored whole (16 lanes): the lanes past its count land on slots the next stores overwrite,
    and t + 16 <= i + 64 (never more ends than levels) keeps them inside the arrays."""
    if not (isinstance(levels, types.Array) and levels.dtype.bitwidth == 8):
        return None
    sig = types.uint64(levels, types.uint64, types.int64, types.int64, ends, symbols,
                       types.uint64)

    def codegen(context, builder, signature, args):
        lv_arg, i, base_arg, window_arg, ends_arg, sym_arg, t = args
        data, ends_ptr, sym_ptr = (
            builder.bitcast(context.make_array(signature.args[k])(context, builder, args[k]).data,
                            pointee.as_pointer())
            for k, pointee in ((0, _I8), (4, _I32), (5, _I32)))
        x, ended, same_k = _run_masks(builder, data, i)
        lanes32 = ir.VectorType(_I32, _LANES)
        first_index = splat(builder, builder.trunc(i, _I32), lanes32)
        minus_base = splat(builder, builder.trunc(builder.neg(base_arg), _I32), lanes32)
        window32 = splat(builder, builder.trunc(window_arg, _I32), lanes32)
        for q in range(STEP // _LANES):
            end_q = _quarter(builder, ended, q)
            symbol = _quarter_symbols(builder, x, same_k, q, minus_base, window32)
            index = builder.add(first_index, ir.Constant(lanes32, list(range(q * _LANES,
                                                                             (q + 1) * _LANES))))
            _compress_store(builder, index, ends_ptr, t, end_q)
            _compress_store(builder, symbol, sym_ptr, t, end_q)
            popcount = declare_intrinsic(builder.module, "llvm.ctpop.i16", _I16, [_I16])
            t = builder.add(t, builder.zext(builder.call(popcount, [builder.bitcast(end_q, _I16)]),
                                            _I64))
        return t

    return sig, codegen


def _run_masks(builder, data, i):
    """IR for one step's comparisons: (x, the 64 levels at i; ended, a 64 x i1 mask of the
    levels that differ from the next; same_k, the masks of the levels equal to the 1, the 1 and
    2, and the 1, 2 and 3 levels before them)."""
    bytes64 = ir.VectorType(_I8, STEP)

    def load(offset):
        at = builder.gep(data, [builder.add(i, ir.Constant(_I64, offset))])
        return builder.load(builder.bitcast(at, bytes64.as_pointer()), align=1)

    x = load(0)
    ended = builder.icmp_unsigned("!=", x, load(1))
    same, same_k = None, []
    for k in (1, 2, 3):
        eq = builder.icmp_unsigned("==", x, load(-k))
        same = eq if same is None else builder.and_(same, eq)
        same_k.append(same)
    return x, ended, same_k


def _quarter(builder, vector, q):
    """IR for lanes 16q .. 16q + 15 of a 64-lane vector."""
    pick = ir.Constant(ir.VectorType(_I32, _LANES), list(range(q * _LANES, (q + 1) * _LANES)))
    return builder.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined), pick)


def _quarter_symbols(builder, x, same_k, q, minus_base, window32):
    """IR for the symbols (int32) of levels 16q .. 16q + 15 of the step, each as its run's end:
    level - base, plus window per level back in the run (runs 1..3), or LONG_RUN_SYMBOL from the
    4th level of a run on."""
    symbol = builder.add(builder.sext(_quarter(builder, x, q), ir.VectorType(_I32, _LANES)),
                         minus_base)
    for k in (0, 1):
        symbol = builder.select(_quarter(builder, same_k[k], q),
                                builder.add(symbol, window32), symbol)
    long_run = ir.Constant(ir.VectorType(_I32, _LANES), [int(LONG_RUN_SYMBOL)] * _LANES)
    return builder.select(_quarter(builder, same_k[2], q), long_run, symbol)


def _compress_store(builder, vector, pointer, t, mask):
    """IR storing the lanes of ``vector`` (16 x int32) selected by ``mask`` packed at
    pointer[t:] (all 16 lanes are written; those past the count are don't-cares)."""
    lanes32 = ir.VectorType(_I32, _LANES)
    compress = declare_intrinsic(builder.module, "llvm.x86.avx512.mask.compress.v16i32",
                                 lanes32, [lanes32, lanes32, ir.VectorType(_I1, _LANES)])
    packed = builder.call(compress, [vector, ir.Constant(lanes32, ir.Undefined), mask])
    builder.store(packed, builder.bitcast(builder.gep(pointer, [t]), lanes32.as_pointer()),
                  align=4)


if CHECKED:
    _raw_any_end, _raw_step = _any_end, _step

    @njit(cache=True)
    def _any_end(levels, i):
        """``_any_end`` after checking that levels[i:i + STEP + 1] lies inside ``levels``."""
        check_span("_any_end", levels, i, STEP + 1)
        return _raw_any_end(levels, i)

    @njit(cache=True)
    def _step(levels, i, base, window, ends, symbols, t):
        """``_step`` after checking its loads (levels[i - 3:i + STEP + 1]) and its stores
        (``ends`` and ``symbols`` from t on: four stores of _LANES slots, each past the ends
        the ones before it kept, at most _LANES each, so STEP slots in all)."""
        check_span("_step", levels, int64(i) - 3, STEP + 4)
        check_span("_step", ends, t, STEP)
        check_span("_step", symbols, t, STEP)
        return _raw_step(levels, i, base, window, ends, symbols, t)


@njit(cache=True, inline="always")
def _position(levels, j, start, base, window):
    """The symbol level j (in a chunk from ``start``) would have as its run's end (uint64)."""
    x = levels[j]
    s1 = j >= start + 1 and levels[j - 1] == x
    s2 = s1 and j >= start + 2 and levels[j - 2] == x
    if s2 and j >= start + 3 and levels[j - 3] == x:
        return LONG_RUN_SYMBOL
    return uint64(int64(x) - base + window * (int64(s1) + int64(s2)))


@njit(cache=True, nogil=True)
def runs_and_symbols(levels, chunk, base, window, ends, symbols, chunk_runs):
    """Write every run's last index into ``ends`` (int32) and its symbol (or LONG_RUN_SYMBOL) into
    ``symbols`` (uint32), runs cut at chunk boundaries; ``chunk_runs[c]`` = runs in chunks
    0..c. Returns the number of runs. int8 levels covered by [base, base + window); needs
    AVAILABLE."""
    n = uint64(levels.shape[0])
    one = uint64(1)
    t = uint64(0)
    for c in range(chunk_runs.shape[0]):
        start = uint64(c * chunk)
        stop = min(n, uint64((c + 1) * chunk))
        i = start
        while i < start + uint64(3) and i < stop - one:    # a step looks 3 levels back
            ends[t] = i
            symbols[t] = _position(levels, i, start, base, window)
            t += uint64(levels[i] != levels[i + one])
            i += one
        while i + uint64(STEP) < stop:
            if _any_end(levels, i):
                t = _step(levels, i, base, window, ends, symbols, t)
            i += uint64(STEP)
        while i < stop - one:
            ends[t] = i
            symbols[t] = _position(levels, i, start, base, window)
            t += uint64(levels[i] != levels[i + one])
            i += one
        ends[t] = stop - one
        symbols[t] = _position(levels, stop - one, start, base, window)
        t += one
        chunk_runs[c] = t
    return int64(t)
