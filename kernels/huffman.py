"""Canonical Huffman codes: lengths from counts, codes from lengths, and decode lookup tables.

READ ME FIRST
1. Code lengths are capped at MAX_CODE_BITS (12) so one lookup in a 2**12-entry table decodes any
   symbol. When plain Huffman exceeds the cap, package-merge gives the optimal limited lengths.
2. Everything downstream is derived from the lengths alone (canonical form): codes are assigned
   in order of (length, symbol id), so the wire carries lengths, never a tree.
3. A decode-table entry is a length entry (maxima.py), ``symbol << LENGTH_BITS | length``;
   length 0 marks a bit pattern that no code
   starts with (possible only in an incomplete or forged code) and decoders reject it.

Units: ``counts`` are symbol occurrences, ``lengths`` are bits per symbol (0 = symbol not coded).
"""
import numpy as np
from numba import njit, int64, uint32

from .maxima import (LENGTH_BITS, LENGTH_MASK, MAX_CODE_BITS, MAX_CODED_SYMBOLS,  # noqa: F401
                     TABLE_SIZE)


@njit(cache=True, nogil=True)
def _huffman_lengths_sorted(w):
    """Optimal code lengths for weights sorted ascending (two-queue Huffman, O(n)).

    Returns lengths in the same order (in-place method of Moffat and Katajainen, 1995): three
    passes over one array, which holds weights, then parent pointers, then depths.
    """
    n = w.shape[0]
    a = w.astype(np.int64).copy()
    if n == 1:
        return np.ones(1, dtype=np.int64)
    _pair_smallest(a)
    _internal_depths(a)
    _leaf_depths(a)
    return a


@njit(cache=True, nogil=True)
def _pair_smallest(a):
    """Pass 1, left to right: repeatedly pair the two smallest items (leaves from the right of
    ``a``, internal nodes from the left), leaving each paired node's parent index behind."""
    n = a.shape[0]
    a[0] += a[1]
    root = 0
    leaf = 2
    for nxt in range(1, n - 1):
        if leaf >= n or a[root] < a[leaf]:
            a[nxt] = a[root]
            a[root] = nxt
            root += 1
        else:
            a[nxt] = a[leaf]
            leaf += 1
        if leaf >= n or (root < nxt and a[root] < a[leaf]):
            a[nxt] += a[root]
            a[root] = nxt
            root += 1
        else:
            a[nxt] += a[leaf]
            leaf += 1


@njit(cache=True, nogil=True)
def _internal_depths(a):
    """Pass 2, right to left: the parent indices in ``a[:n - 1]`` become internal-node depths
    (the root, at n - 2, has depth 0)."""
    n = a.shape[0]
    a[n - 2] = 0
    for nxt in range(n - 3, -1, -1):
        a[nxt] = a[a[nxt]] + 1


@njit(cache=True, nogil=True)
def _leaf_depths(a):
    """Pass 3, right to left: from the internal depths, every leaf's depth (its code length),
    the shallowest to the heaviest leaves, written over ``a``."""
    n = a.shape[0]
    avail = 1
    used = 0
    depth = 0
    root = n - 2
    nxt = n - 1
    while avail > 0:
        while root >= 0 and a[root] == depth:
            used += 1
            root -= 1
        while avail > used:
            a[nxt] = depth
            nxt -= 1
            avail -= 1
        avail = 2 * used
        depth += 1
        used = 0


@njit(cache=True, nogil=True)
def _package_merge_sorted(w, max_bits):
    """Optimal code lengths of at most ``max_bits`` for weights sorted ascending (package-merge)."""
    item_leaf = _package_levels(w, max_bits)
    return _lengths_from_packages(item_leaf, w.shape[0])


@njit(cache=True, nogil=True)
def _package_levels(w, max_bits):
    """Package-merge's lists, one row per level (row 0: the leaves; row l: level l - 1's items
    paired into packages, merged by weight with the leaves): each item is a leaf's index, or -1
    for a package. A level holds at most 2n - 1 items; unused entries are undefined."""
    n = w.shape[0]
    item_w = np.empty((max_bits, 2 * n), dtype=np.int64)
    item_leaf = np.empty((max_bits, 2 * n), dtype=np.int64)
    size = n
    for i in range(n):
        item_w[0, i] = w[i]
        item_leaf[0, i] = i
    for lvl in range(1, max_bits):
        n_pack = size // 2
        i = 0   # leaves
        p = 0   # packages
        k = 0
        pw = 0
        while i < n or p < n_pack:
            if p < n_pack:
                pw = item_w[lvl - 1, 2 * p] + item_w[lvl - 1, 2 * p + 1]
            if p >= n_pack or (i < n and w[i] <= pw):
                item_w[lvl, k] = w[i]
                item_leaf[lvl, k] = i
                i += 1
            else:
                item_w[lvl, k] = pw
                item_leaf[lvl, k] = -1
                p += 1
            k += 1
        size = k
    return item_leaf


@njit(cache=True, nogil=True)
def _lengths_from_packages(item_leaf, n):
    """Code lengths of the ``n`` leaves: the first 2n - 2 items of the top level are taken, and
    every package taken at a level takes its two items of the level below; a leaf's length is
    the number of times it is taken."""
    lengths = np.zeros(n, dtype=np.int64)
    take = 2 * n - 2
    for lvl in range(item_leaf.shape[0] - 1, -1, -1):
        n_packages = 0
        for k in range(take):
            leaf = item_leaf[lvl, k]
            if leaf >= 0:
                lengths[leaf] += 1
            else:
                n_packages += 1
        take = 2 * n_packages
    return lengths


@njit(cache=True, nogil=True)
def coded_symbols(counts):
    """Ids (int64, ascending) of the symbols with a non-zero count: one branch-free pass, so
    everything after it walks the few hundred occurring symbols, not rlh's ~12K-symbol
    alphabets."""
    ids = np.empty(counts.shape[0], dtype=np.int64)
    n_used = 0
    for s in range(counts.shape[0]):
        ids[n_used] = s
        n_used += counts[s] > 0
    return ids[:n_used]


@njit(cache=True, nogil=True)
def limited_lengths(weights, max_bits):
    """Code lengths (bits, int64) for positive ``weights`` (int64, any order), aligned with them;
    a lone symbol gets 1. Optimal among prefix codes whose lengths are all <= ``max_bits``;
    needs at most ``2**max_bits`` weights."""
    n = weights.shape[0]
    lengths = np.empty(n, dtype=np.int64)
    if n == 0:
        return lengths
    order = np.argsort(weights, kind="mergesort")
    ws = weights[order]
    ls = _huffman_lengths_sorted(ws)
    if ls.max() > max_bits:
        ls = _package_merge_sorted(ws, max_bits)
    for i in range(n):
        lengths[order[i]] = ls[i]
    return lengths


@njit(cache=True, nogil=True)
def code_lengths(counts, max_bits):
    """Code lengths (bits) for ``counts``; zero-count symbols get 0, a lone symbol gets 1
    (``limited_lengths`` over the occurring symbols)."""
    used = coded_symbols(counts)
    lengths = np.zeros(counts.shape[0], dtype=np.int64)
    ls = limited_lengths(counts[used].astype(np.int64), max_bits)
    for i in range(used.shape[0]):
        lengths[used[i]] = ls[i]
    return lengths


@njit(cache=True, nogil=True)
def canonical_codes_of(symbols, lengths):
    """Canonical codes (MSB-first integers, uint32) of the coded ``symbols`` (ids ascending) with
    ``lengths`` (bits, aligned): codes go in order of (length, symbol), the first code of each
    length following from the counts of the shorter ones (DEFLATE's rule). A length over
    MAX_CODE_BITS (only in a forged codebook, which the reader rejects) gets code 0."""
    per_length = np.zeros(MAX_CODE_BITS + 2, dtype=np.int64)
    for i in range(symbols.shape[0]):              # longer lengths count last, get no code
        per_length[min(lengths[i], MAX_CODE_BITS + 1)] += 1
    next_code = np.zeros(MAX_CODE_BITS + 1, dtype=np.int64)
    for length in range(2, MAX_CODE_BITS + 1):
        next_code[length] = (next_code[length - 1] + per_length[length - 1]) << 1
    codes = np.zeros(symbols.shape[0], dtype=np.uint32)
    for i in range(symbols.shape[0]):
        length = lengths[i]
        if length <= MAX_CODE_BITS:
            codes[i] = next_code[length]
            next_code[length] += 1
    return codes


@njit(cache=True, nogil=True)
def code_of_counts(counts, max_bits):
    """(ids of the symbols that occur, ascending; their ``limited_lengths``; their canonical
    codes) for ``counts`` (int64 per symbol id), in one call. With more than 2**max_bits
    symbols occurring no code exists: lengths and codes come back empty."""
    symbols = coded_symbols(counts)
    if symbols.shape[0] > (1 << max_bits):
        return symbols, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint32)
    lengths = limited_lengths(counts[symbols], max_bits)
    return symbols, lengths, canonical_codes_of(symbols, lengths)


@njit(cache=True, nogil=True)
def code_of_lengths(lengths):
    """(coded symbol ids ascending, their lengths as int64, their canonical codes) for
    ``lengths`` (bits per symbol id, 0 = not coded), in one call."""
    symbols = coded_symbols(lengths)
    coded = lengths[symbols].astype(np.int64)
    return symbols, coded, canonical_codes_of(symbols, coded)


@njit(cache=True, nogil=True)
def canonical_codes(lengths):
    """Canonical codes (MSB-first integers) for ``lengths`` (one per symbol id, 0 = not coded);
    0 where a symbol is not coded."""
    coded = coded_symbols(lengths)
    codes = np.zeros(lengths.shape[0], dtype=np.uint32)
    of_coded = canonical_codes_of(coded, lengths[coded])
    for i in range(coded.shape[0]):
        codes[coded[i]] = of_coded[i]
    return codes


@njit(cache=True, nogil=True)
def kraft_units(lengths, max_bits):
    """Kraft sum of ``lengths`` in units of 2**-max_bits (a complete code sums to 2**max_bits)."""
    total = 0
    for s in range(lengths.shape[0]):
        if lengths[s] > 0:
            total += 1 << (max_bits - lengths[s])
    return total


@njit(cache=True, nogil=True)
def decode_table(lengths, codes):
    """Single-lookup decode table over MAX_CODE_BITS bits: entry = symbol << LENGTH_BITS | length.

    Requires lengths in 1..MAX_CODE_BITS and a Kraft sum <= 1 (checked by the caller).
    """
    table = np.zeros(TABLE_SIZE, dtype=np.uint32)
    for s in range(lengths.shape[0]):
        length = lengths[s]
        if length > 0:
            shift = MAX_CODE_BITS - length
            first = int64(codes[s]) << shift
            entry = uint32((s << LENGTH_BITS) | length)
            for k in range(first, first + (1 << shift)):
                table[k] = entry
    return table
