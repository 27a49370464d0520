"""Huffman-family plumbing shared by huffman, sh, rlh and shs: choosing which symbols get a
code, writing and reading the canonical codebook, and building the tables."""
import numpy as np

from horovod_huffman.kernels.chunks import CHUNK_LEVELS, chunk_starts, payload_bits
from horovod_huffman.kernels.codebook import write_codebook, read_codebook
from horovod_huffman.kernels.errors import OK
from horovod_huffman.kernels.huffman import (MAX_CODE_BITS, MAX_CODED_SYMBOLS, code_lengths,
                                             canonical_codes, kraft_units)

from ..errors import DecodeError
from ..wire import MAX_ELEMENTS

# Alphabet size (symbol ids) any Huffman-family stream may declare; bounds decoder tables.
MAX_SYMBOLS = 1 << 17


def lengths_for(counts, escape):
    """Code lengths for ``counts``; when more than MAX_CODED_SYMBOLS symbols occur, the rarest
    are folded into the ``escape`` symbol (which then needs a code too). ``counts`` is int64."""
    counts = counts.astype(np.int64, copy=True)
    if np.count_nonzero(counts) > MAX_CODED_SYMBOLS:    # (flatnonzero: 32 us on 12K counts)
        occurring = np.flatnonzero(counts)
        others = occurring[occurring != escape]
        keep = MAX_CODED_SYMBOLS - 1
        order = np.argsort(counts[others], kind="stable")[::-1]
        dropped = others[order[keep:]]
        counts[escape] += counts[dropped].sum()
        counts[dropped] = 0
    return code_lengths(counts, MAX_CODE_BITS)


def weights_from_probabilities(p, possible):
    """Integer Huffman weights from model probabilities: >= 1 wherever ``possible`` is set
    (a symbol that can occur must get a code however small or underflowed its probability),
    0 elsewhere."""
    # 2**40 keeps ~12 significant digits yet sums of up to 2**17 weights stay far below 2**63.
    w = np.rint(np.asarray(p, dtype=np.float64) * float(1 << 40)).astype(np.int64)
    return np.where(possible, np.maximum(w, 1), 0)


def write_lengths(writer, lengths):
    """Append the coded-symbol count and the canonical codebook to a ParamWriter."""
    writer.uint(np.count_nonzero(lengths))
    writer.raw(write_codebook(lengths))


def read_lengths(reader, n_symbols, name):
    """Code lengths and canonical codes of a stream's codebook, fully validated."""
    n_coded = reader.uint("coded symbols", 1, min(MAX_CODED_SYMBOLS, n_symbols))
    status, lengths = read_codebook(reader.rest(), n_coded, n_symbols)
    if status != OK:
        raise DecodeError(f"{name}: codebook corrupt (symbol ids or code lengths out of range)")
    if kraft_units(lengths, MAX_CODE_BITS) > (1 << MAX_CODE_BITS):
        raise DecodeError(f"{name}: codebook corrupt (code lengths violate the Kraft inequality)")
    return lengths, canonical_codes(lengths)


def code_cost_bits(counts, lengths):
    """Total bits of the codes for ``counts`` symbols at ``lengths``."""
    return int(np.dot(counts.astype(np.int64), lengths.astype(np.int64)))


def chunk_count(n, chunk=CHUNK_LEVELS):
    """Chunks of ``chunk`` levels (the last may be shorter) covering ``n`` levels."""
    return max(1, -(-n // chunk))


def write_chunks(writer, chunk, chunk_bits):
    """Append the chunk size and every chunk's bit count to a ParamWriter."""
    writer.uint(chunk)
    for bits in chunk_bits:
        writer.uint(bits)


def read_chunks(reader, n, total_bits, name):
    """(chunk size, chunk start offsets, chunk bit counts) of a stream of ``n`` levels, checked
    against the payload's ``total_bits``."""
    chunk = reader.uint("chunk size", 1, MAX_ELEMENTS)
    n_chunks = chunk_count(n, chunk)
    if n_chunks > reader.remaining():
        raise DecodeError(f"{name}: {n_chunks} chunks declared, the parameters cannot hold them")
    bits = reader.uints("chunk bits", n_chunks, 0, total_bits)
    starts = chunk_starts(bits)
    declared = payload_bits(bits, starts)
    if declared != total_bits:
        raise DecodeError(f"{name}: chunk lengths add up to {declared} bits, the header "
                          f"declares {total_bits}")
    return chunk, starts, bits
