"""The table decoders' driver: chunks decode four lanes at a time.

READ ME FIRST
1. Both table decoders (kernels/symbols.py for huffman and sh, kernels/tokens.py for rlh and
   shs) look up 12-bit prefixes in tables of one form: up to 8 bytes of levels per lookup,
   written by one 8-byte store, with the levels made and bits taken in byte tables. One chain
   of lookups waits on each load; four lanes, each on its own chunk and its own bit buffer
   (kernels/bits.py, note 6), run interleaved, five lookups per refill.
2. Batches: the loop runs only iterations every lane can surely run (``safe_iterations``), so
   no lookup tests a bound. A prefix of count 0 (an escape, a rare token, an invalid code)
   consumes nothing: its lane idles to the end of the iteration, where one test of the four
   lanes' next prefixes sends it through ``rare`` (the token or symbol table), bounded so the
   rest of the batch stays safe; a token that does not fit ends the batch, and the next one
   starts with it against the chunk's own bounds.
3. Lanes take chunks from a queue. A lane near its chunk's end (or at a token ``rare`` cannot
   take) hands the chunk to the one-chunk path, which decodes the rest with every check and
   verifies the chunk ends exactly at its declared bits, and takes the next chunk. With the
   queue empty, a free lane shadows a working one (the same state: the same stores, the same
   values) until one chunk is left, which the one-chunk path finishes (lanes fixed to groups of
   four chunks leave more to the one-chunk path, as chunks of one group end at different
   times: docs/design.md).
4. ``code`` and ``tables`` are the decoder's tuples (tokens.py note 3, symbols.py); ``tokens``
   (a compile-time constant) says which decoder's rare and one-chunk paths to call.
"""
import numpy as np
from numba import njit, types, uint64, int64, literally
from numba.extending import overload

from .bits import buffer_at, buffer_refill, buffer_position, LOOKUPS_PER_BUFFER
from .errors import OK
from .maxima import MAX_CODE_BITS
from .stores import store8, levels_per_word
from . import symbols, tokens as token_paths

# Most iterations per batch: bounds how long a finished lane's chunk waits to be handed on.
BATCH_ITERATIONS = 256
LANES = 4
# Rows of the lanes' state (``state[row, lane]``, uint64): the lane's bit buffer and its end
# (kernels/bits.py), the next element index and the chunk's element stop, the chunk's end bit,
# and the chunk itself (n_chunks: none yet).
ROW_BUFFER, ROW_BUFFER_END, ROW_ELEMENT, ROW_STOP, ROW_END_BIT, ROW_CHUNK = range(6)
STATE_ROWS = 6


@njit(cache=True, inline="always")
def _lookup(buf, i, levels, counts, bits, out):
    """One lookup at the top of the bit buffer: store its levels at out[i:] and return (buffer,
    i) after them (unchanged, but for the store, when its count is 0)."""
    x = buf >> uint64(64 - MAX_CODE_BITS)
    store8(out, i, levels[x])
    return buf << uint64(bits[x]), i + uint64(counts[x])


@njit(cache=True, inline="always")
def safe_iterations(i, stop, bit_pos, end_bit, levels_per_iteration, bits_per_iteration):
    """Iterations a lane can surely run: each writes at most ``levels_per_iteration`` elements
    before ``stop`` and reads at most ``bits_per_iteration`` bits, all before ``end_bit``;
    uint64."""
    room = (stop - i) // levels_per_iteration if stop > i else uint64(0)
    left = (end_bit - bit_pos) // bits_per_iteration if end_bit > bit_pos else uint64(0)
    return min(room, left)


def _rare(words, code, out, buf, end, i, i_limit, bit_limit, tokens):
    """One token or symbol through the decoder's own table (``tokens``, a literal, picks the
    decoder at compile time). Compiled only."""
    raise NotImplementedError("_rare runs inside Numba-compiled code only")


def _for_decoder(tokens, for_tokens, for_symbols):
    """An overload's implementation picked by the literal ``tokens``; None (Numba then retries
    with the literal type) while ``tokens`` is not one. Overloads rather than ``literally``,
    which types a function twice, both branches included (~1 s more compiling each)."""
    if not isinstance(tokens, types.BooleanLiteral):
        return None
    return for_tokens if tokens.literal_value else for_symbols


@overload(_rare, inline="always", prefer_literal=True)
def _rare_impl(words, code, out, buf, end, i, i_limit, bit_limit, tokens):
    # Inlined: a wrapper call of its own cost a reference-count pair per rare token.
    return _for_decoder(
        tokens,
        lambda words, code, out, buf, end, i, i_limit, bit_limit, tokens:
            token_paths.rare_token(words, code, out, buf, end, i, i_limit, bit_limit),
        lambda words, code, out, buf, end, i, i_limit, bit_limit, tokens:
            symbols.rare_symbol(words, code, out, buf, end, i, i_limit, bit_limit))


def _finish(words, bit_pos, end_bit, code, tables, out, i, stop, tokens):
    """The rest of one chunk on the decoder's one-chunk path; returns a status code.
    Compiled only."""
    raise NotImplementedError("_finish runs inside Numba-compiled code only")


@overload(_finish, prefer_literal=True)
def _finish_impl(words, bit_pos, end_bit, code, tables, out, i, stop, tokens):
    return _for_decoder(
        tokens,
        lambda words, bit_pos, end_bit, code, tables, out, i, stop, tokens:
            token_paths.decode_chunk(words, bit_pos, end_bit, code, tables, out, i, stop),
        lambda words, bit_pos, end_bit, code, tables, out, i, stop, tokens:
            symbols.decode_chunk(words, bit_pos, end_bit, code, tables, out, i, stop))


@njit(cache=True, inline="always")
def _finish_lane(words, state, k, code, tables, out, tokens):
    """``_finish`` for lane ``k``'s chunk, from its state."""
    return _finish(words, int64(buffer_position(state[ROW_BUFFER, k], state[ROW_BUFFER_END, k])),
                   int64(state[ROW_END_BIT, k]), code, tables, out,
                   int64(state[ROW_ELEMENT, k]), int64(state[ROW_STOP, k]), tokens)


@njit(cache=True, nogil=True)
def _settle(words, starts, chunk_bits, chunk, queue, code, tables, out, tokens, state,
            at_end, finished, next_q):
    """Finish the chunks of the lanes ``at_end``, give lanes on finished chunks the next chunk
    in the queue, or the state of a lane still working (``state``: rows ROW_*). Returns
    (status, next_q, lanes working on distinct chunks): at 1 that lane's chunk has been
    finished too."""
    literally(tokens)
    n = out.shape[0]
    for k in range(LANES):
        c = int64(state[ROW_CHUNK, k])
        if at_end[k] and not finished[c]:
            status = _finish_lane(words, state, k, code, tables, out, tokens)
            if status != OK:
                return status, next_q, 0
            finished[c] = True
    for k in range(LANES):
        if finished[int64(state[ROW_CHUNK, k])] and next_q < queue.shape[0]:
            c = queue[next_q]
            next_q += 1
            state[ROW_BUFFER, k], state[ROW_BUFFER_END, k] = buffer_at(words, starts[c])
            state[ROW_ELEMENT, k], state[ROW_STOP, k] = c * chunk, min(n, (c + 1) * chunk)
            state[ROW_END_BIT, k], state[ROW_CHUNK, k] = starts[c] + chunk_bits[c], c
    working = -1
    distinct = 0
    for k in range(LANES):
        c = int64(state[ROW_CHUNK, k])
        if finished[c]:
            continue
        seen = False
        for j in range(k):
            seen |= state[ROW_CHUNK, j] == state[ROW_CHUNK, k]
        if not seen:
            distinct += 1
            working = k
    if distinct == 1:                             # the last chunk: on the one-chunk path
        status = _finish_lane(words, state, working, code, tables, out, tokens)
        return status, next_q, 1
    for k in range(LANES):
        if finished[int64(state[ROW_CHUNK, k])] and working >= 0:
            for row in range(state.shape[0]):    # shadow a working lane (element by element:
                state[row, k] = state[row, working]    # a slice copy compiles ~3 s of checks)
    return OK, next_q, distinct


@njit(cache=True, inline="always")
def _row(state, row):
    """The four lanes' values of one state row (ROW_*)."""
    return state[row, 0], state[row, 1], state[row, 2], state[row, 3]


@njit(cache=True, inline="always")
def _set_row(state, row, v0, v1, v2, v3):
    """Store the four lanes' values of one state row (ROW_*)."""
    state[row, 0], state[row, 1], state[row, 2], state[row, 3] = v0, v1, v2, v3


@njit(cache=True, inline="always")
def _clear_rare(words, code, out, counts, buf, end, i, i_limit, bit_limit, tokens):
    """Before a batch: every rare token (count 0) at the top of one lane's buffer through
    ``_rare``, until a lookup is next; returns (ok, buf, end, i), ok False at a token ``_rare``
    cannot take (the lane then ends its batch). All uint64 but ok."""
    ok = True
    while ok and counts[buf >> uint64(64 - MAX_CODE_BITS)] == 0:
        ok, buf, end, i = _rare(words, code, out, buf, end, i, i_limit, bit_limit, tokens)
    return ok, buf, end, i


@njit(cache=True, inline="always")
def _rare_at_top(words, code, out, counts, buf, end, i, i_limit, bit_limit, tokens):
    """Within a batch: the rare token at the top of one lane's buffer, if there is one, through
    ``_rare`` within the limits that keep the batch's remaining iterations safe; returns (ok,
    buf, end, i), ok False when it does not fit (the batch ends)."""
    if counts[buf >> uint64(64 - MAX_CODE_BITS)] != 0:
        return True, buf, end, i
    return _rare(words, code, out, buf, end, i, i_limit, bit_limit, tokens)


@njit(cache=True, nogil=True)
def decode_lanes(words, starts, chunk_bits, chunk, queue, code, tables, out, tokens):
    """Decode the chunks listed in ``queue`` (two or more) into ``out``; returns a status code
    (errors.py). ``tables``: (levels, counts, bits, lane counts, lane bits); the loop uses the
    levels and the lane tables, whose counts are at most 8 bytes of levels."""
    literally(tokens)
    levels = tables[symbols.TABLE_LEVELS]
    counts, bits = tables[symbols.TABLE_LANE_COUNTS], tables[symbols.TABLE_LANE_BITS]
    n_chunks = starts.shape[0]
    state = np.zeros((STATE_ROWS, LANES), dtype=np.uint64)
    state[ROW_CHUNK, :] = n_chunks                      # no chunk yet: a pseudo-chunk, finished
    at_end = np.zeros(LANES, dtype=np.bool_)
    finished = np.ones(n_chunks + 1, dtype=np.bool_)
    for c in queue:
        finished[c] = False
    status, next_q, distinct = _settle(words, starts, chunk_bits, chunk, queue, code, tables,
                                       out, tokens, state, at_end, finished, int64(0))
    top = uint64(64 - MAX_CODE_BITS)
    out_step = uint64(LOOKUPS_PER_BUFFER * levels_per_word(out))
    bit_step = uint64(LOOKUPS_PER_BUFFER * MAX_CODE_BITS)
    while status == OK and distinct > 1:
        u0, u1, u2, u3 = _row(state, ROW_BUFFER)
        q0, q1, q2, q3 = _row(state, ROW_BUFFER_END)
        i0, i1, i2, i3 = _row(state, ROW_ELEMENT)
        stop0, stop1, stop2, stop3 = _row(state, ROW_STOP)
        e0, e1, e2, e3 = _row(state, ROW_END_BIT)
        while True:
            # tokens at the lanes' tops that the tables leave to ``rare``: the chunks' bounds
            ok0, u0, q0, i0 = _clear_rare(words, code, out, counts, u0, q0, i0, stop0, e0,
                                          tokens)
            ok1, u1, q1, i1 = _clear_rare(words, code, out, counts, u1, q1, i1, stop1, e1,
                                          tokens)
            ok2, u2, q2, i2 = _clear_rare(words, code, out, counts, u2, q2, i2, stop2, e2,
                                          tokens)
            ok3, u3, q3, i3 = _clear_rare(words, code, out, counts, u3, q3, i3, stop3, e3,
                                          tokens)
            n0 = safe_iterations(i0, stop0, buffer_position(u0, q0), e0, out_step, bit_step)
            n1 = safe_iterations(i1, stop1, buffer_position(u1, q1), e1, out_step, bit_step)
            n2 = safe_iterations(i2, stop2, buffer_position(u2, q2), e2, out_step, bit_step)
            n3 = safe_iterations(i3, stop3, buffer_position(u3, q3), e3, out_step, bit_step)
            n = min(n0, n1, n2, n3, uint64(BATCH_ITERATIONS))
            if n == 0 or not (ok0 and ok1 and ok2 and ok3):
                at_end[0], at_end[1] = n0 == 0 or not ok0, n1 == 0 or not ok1
                at_end[2], at_end[3] = n2 == 0 or not ok2, n3 == 0 or not ok3
                break
            for it in range(n):
                for _ in range(LOOKUPS_PER_BUFFER):
                    u0, i0 = _lookup(u0, i0, levels, counts, bits, out)
                    u1, i1 = _lookup(u1, i1, levels, counts, bits, out)
                    u2, i2 = _lookup(u2, i2, levels, counts, bits, out)
                    u3, i3 = _lookup(u3, i3, levels, counts, bits, out)
                u0, q0 = buffer_refill(words, u0, q0)
                u1, q1 = buffer_refill(words, u1, q1)
                u2, q2 = buffer_refill(words, u2, q2)
                u3, q3 = buffer_refill(words, u3, q3)
                if counts[u0 >> top] == 0 or counts[u1 >> top] == 0 or \
                        counts[u2 >> top] == 0 or counts[u3 >> top] == 0:
                    # bounds that keep the batch's remaining iterations safe
                    left = n - uint64(it) - uint64(1)
                    room, span = left * out_step, left * bit_step
                    ok0, u0, q0, i0 = _rare_at_top(words, code, out, counts, u0, q0, i0,
                                                   stop0 - room, e0 - span, tokens)
                    ok1, u1, q1, i1 = _rare_at_top(words, code, out, counts, u1, q1, i1,
                                                   stop1 - room, e1 - span, tokens)
                    ok2, u2, q2, i2 = _rare_at_top(words, code, out, counts, u2, q2, i2,
                                                   stop2 - room, e2 - span, tokens)
                    ok3, u3, q3, i3 = _rare_at_top(words, code, out, counts, u3, q3, i3,
                                                   stop3 - room, e3 - span, tokens)
                    if not (ok0 and ok1 and ok2 and ok3):
                        break
        _set_row(state, ROW_BUFFER, u0, u1, u2, u3)
        _set_row(state, ROW_BUFFER_END, q0, q1, q2, q3)
        _set_row(state, ROW_ELEMENT, i0, i1, i2, i3)
        status, next_q, distinct = _settle(words, starts, chunk_bits, chunk, queue, code,
                                           tables, out, tokens, state, at_end, finished, next_q)
    return status


@njit(cache=True, nogil=True)
def decode_levels(words, starts, chunk_bits, chunk, code, tables, out):
    """huffman/sh: fill ``out`` from a chunked payload; returns a status code. ``code``: (single
    symbol table, base, window, value_bits, lo, hi); ``tables``: symbols.multi_symbol_tables."""
    levels, counts, bits = tables
    queue = np.arange(starts.shape[0])
    return decode_lanes(words, starts, chunk_bits, chunk, queue, code,
                        (levels, counts, bits, counts, bits), out, False)


# Chunks coded in at least this many bits per level go through the lanes (measured, kernels
# alone on the benchmark's tensors: QSGD s = 2..16, 0.34-2 bits per level, 1.1-2.1x faster
# than one chunk at a time; at s = 1 and TernGrad, 0.03-0.31 bits, runs past 8 levels are
# most tokens and each would leave the lane loop for the rare path: one chunk at a time with
# fills is 1.3-1.9x faster there).
DENSE_BITS_PER_LEVEL = 0.33


@njit(cache=True, nogil=True)
def decode_tokens(words, starts, chunk_bits, chunk, code, tables, out):
    """rlh/shs: fill ``out`` from a chunked token payload; returns a status code. ``code``:
    tokens.py note 3; ``tables``: tokens.lookup_tables. Dense chunks (DENSE_BITS_PER_LEVEL) go
    through the lanes, the others one at a time."""
    n = out.shape[0]
    n_chunks = starts.shape[0]
    dense = np.empty(n_chunks, dtype=np.bool_)
    for c in range(n_chunks):
        dense[c] = chunk_bits[c] >= DENSE_BITS_PER_LEVEL * (min(n, (c + 1) * chunk) - c * chunk)
    status = decode_lanes(words, starts, chunk_bits, chunk, np.flatnonzero(dense), code, tables,
                          out, True)
    for c in range(n_chunks):
        if status != OK or dense[c]:
            continue
        status = token_paths.decode_chunk(words, starts[c], starts[c] + chunk_bits[c], code,
                                          tables, out, c * chunk, min(n, (c + 1) * chunk))
    return status
