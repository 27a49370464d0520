"""A sum of squares in a fixed order that vectorizes: the L2 norm of a QSGD bucket.

READ ME FIRST
1. The order is part of the result (float64 addition is not associative), and the CUDA kernel
   (cuda_quantize.sum_squares) repeats it exactly. For x[start:stop]:
   - element start + SUM_LANES*r + k goes into lane k (k < SUM_LANES), lanes summed in increasing r;
   - the lanes are then summed as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
   - the last (stop - start) % SUM_LANES elements are added one by one, in index order.
2. Each square is a float64 product of the element widened to float64 (exact for float16 and
   float32 elements), and no product is fused with its addition (no FMA): LLVM contracts only
   under fast-math flags, which these kernels never set.
3. ``lane_squares`` runs the lanes as one LLVM vector of SUM_LANES doubles, which Numba's own
   loops cannot express (it vectorizes neither the sequential sum nor eight scalar ones).
   Under Numba's bounds checks it is a checked twin (kernels/checked.py).
"""
from llvmlite import ir
from numba import float64, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .checked import CHECKED, check_span

# Lanes of the sum: one AVX-512 register of float64 (two AVX2 registers: the same sums).
SUM_LANES = 8


@intrinsic
def lane_squares(typingctx, x, start, rows):
    """The SUM_LANES lane sums (a tuple of float64) of x[start:start + SUM_LANES*rows]: lane k sums
    x[start + SUM_LANES*r + k]**2 over r = 0, 1, ... in order. float32 or float64 ``x``; no bounds
    check: the caller keeps start + SUM_LANES*rows <= x.size."""
    if not (isinstance(x, types.Array) and x.dtype in (types.float32, types.float64)):
        return None
    result = types.UniTuple(types.float64, SUM_LANES)

    def codegen(context, builder, sig, args):
        array, first, count = args
        element = context.get_value_type(sig.args[0].dtype)
        double = ir.DoubleType()
        vector = ir.VectorType(double, SUM_LANES)
        data = context.make_array(sig.args[0])(context, builder, array).data
        total = cgutils.alloca_once_value(builder, ir.Constant(vector, [0.0] * SUM_LANES))
        with cgutils.for_range(builder, count) as loop:
            index = builder.add(first, builder.mul(loop.index, ir.Constant(loop.index.type,
                                                                             SUM_LANES)))
            pointer = builder.bitcast(builder.gep(data, [index]),
                                      ir.VectorType(element, SUM_LANES).as_pointer())
            values = builder.load(pointer, align=sig.args[0].dtype.bitwidth // 8)
            if element != double:
                values = builder.fpext(values, vector)
            builder.store(builder.fadd(builder.load(total), builder.fmul(values, values)), total)
        sums = builder.load(total)
        lanes = [builder.extract_element(sums, ir.Constant(ir.IntType(32), k))
                 for k in range(SUM_LANES)]
        return context.make_tuple(builder, sig.return_type, lanes)

    return result(x, types.intp, types.intp), codegen


if CHECKED:
    _raw_lane_squares = lane_squares

    @njit(cache=True)
    def lane_squares(x, start, rows):
        """``lane_squares`` after checking that x[start:start + SUM_LANES*rows] lies inside
        ``x``."""
        check_span("lane_squares", x, start, SUM_LANES * rows)
        return _raw_lane_squares(x, start, rows)


@njit(cache=True, nogil=True, inline="always")
def sum_squares(x, start, stop):
    """Sum of float64(x[i])**2 for i in [start, stop), in the order of this module's note."""
    rows = (stop - start) // SUM_LANES
    lane = lane_squares(x, start, rows)
    total = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + \
        ((lane[1] + lane[5]) + (lane[3] + lane[7]))
    for i in range(start + rows * SUM_LANES, stop):
        v = float64(x[i])
        total += v * v
    return total
