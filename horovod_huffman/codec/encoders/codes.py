"""Huffman-family plumbing shared by huffman, sh, rlh and shs: choosing which symbols get a
code, writing and reading the canonical codebook, and building the tables."""
import numpy as np

from horovod_huffman.kernels.chunks import CHUNK_LEVELS, chunk_starts, payload_bits
from horovod_huffman.kernels.codebook import write_codebook, read_codebook
from horovod_huffman.kernels.errors import OK
from horovod_huffman.kernels.huffman import (code_of_counts, code_of_lengths, limited_lengths,
                                             canonical_codes, canonical_codes_of, kraft_units)
from horovod_huffman.kernels.maxima import MAX_CODE_BITS, MAX_CODED_SYMBOLS
from horovod_huffman.kernels.symbols import pack_entries

from ..errors import DecodeError
from ..wire import MAX_ELEMENTS


class Code:
    """A canonical Huffman code over ``n_symbols`` symbol ids, held by its coded symbols only
    (rlh's alphabets have ~12K ids, a few hundred coded): ``symbols`` (ids, ascending, int64),
    ``lengths`` (bits, 1..MAX_CODE_BITS, int64) and ``codes`` (MSB-first, uint32), aligned."""
    __slots__ = ("n_symbols", "symbols", "lengths", "codes")

    def __init__(self, n_symbols, symbols, lengths, codes=None):
        self.n_symbols, self.symbols, self.lengths = n_symbols, symbols, lengths
        self.codes = canonical_codes_of(symbols, lengths) if codes is None else codes

    @classmethod
    def from_counts(cls, counts, escape):
        """The optimal code of lengths <= MAX_CODE_BITS for ``counts`` (int64 per symbol id);
        when more than MAX_CODED_SYMBOLS symbols occur, the rarest are folded into the
        ``escape`` symbol (which then needs a code too)."""
        counts = counts.astype(np.int64, copy=False)
        symbols, lengths, codes = code_of_counts(counts, MAX_CODE_BITS)
        if lengths.size == symbols.size:
            return cls(counts.size, symbols, lengths, codes)
        weights = counts[symbols]
        others = np.flatnonzero(symbols != escape)
        order = others[np.argsort(weights[others], kind="stable")[::-1]]
        kept = np.sort(order[:MAX_CODED_SYMBOLS - 1])
        folded = int(weights[order[MAX_CODED_SYMBOLS - 1:]].sum()) + int(counts[escape])
        at = np.searchsorted(symbols[kept], escape)
        symbols = np.insert(symbols[kept], at, escape)
        weights = np.insert(weights[kept], at, folded)
        return cls(counts.size, symbols, limited_lengths(weights, MAX_CODE_BITS))

    @classmethod
    def from_lengths(cls, lengths):
        """The code of ``lengths`` (bits per symbol id, 0 = not coded)."""
        return cls(lengths.size, *code_of_lengths(lengths))

    def full_lengths(self):
        """Code lengths per symbol id (int64, 0 = not coded)."""
        lengths = np.zeros(self.n_symbols, dtype=np.int64)
        lengths[self.symbols] = self.lengths
        return lengths

    def entries(self):
        """Encoder entries ``code << 4 | length`` per symbol id (uint32, 0 = not coded)."""
        return pack_entries(self.symbols, self.codes, self.lengths, self.n_symbols)

    def codebook(self):
        """The canonical codebook's bytes (kernels/codebook.py)."""
        return write_codebook(self.symbols, self.lengths)

    def write(self, writer):
        """Append the coded-symbol count and the canonical codebook to a ParamWriter."""
        writer.uint(self.symbols.size)
        writer.raw(self.codebook())


def weights_from_probabilities(p, possible):
    """Integer Huffman weights from model probabilities: >= 1 wherever ``possible`` is set
    (a symbol that can occur must get a code however small or underflowed its probability),
    0 elsewhere."""
    # 2**40 keeps ~12 significant digits yet sums of up to 2**17 weights stay far below 2**63.
    w = np.rint(np.asarray(p, dtype=np.float64) * float(1 << 40)).astype(np.int64)
    return np.where(possible, np.maximum(w, 1), 0)


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
    writer.uint(chunk).uints(chunk_bits)


def read_chunks(reader, n, total_bits, name):
    """(chunk size, chunk start offsets, chunk bit counts) of a stream of ``n`` levels, checked
    against the payload's ``total_bits``."""
    chunk, starts, bits, declared = read_chunk_bits(reader, n, total_bits, name)
    if declared != total_bits:
        raise DecodeError(f"{name}: chunk lengths add up to {declared} bits, the header "
                          f"declares {total_bits}")
    return chunk, starts, bits


def read_chunk_bits(reader, n, max_bits, name):
    """(chunk size, chunk start offsets, chunk bit counts, bits the chunks take in all) of a
    stream of ``n`` levels whose chunks take at most ``max_bits``; the caller checks the
    total."""
    chunk = reader.uint("chunk size", 1, MAX_ELEMENTS)
    n_chunks = chunk_count(n, chunk)
    if n_chunks > reader.remaining():
        raise DecodeError(f"{name}: {n_chunks} chunks declared, the parameters cannot hold them")
    bits = reader.uints("chunk bits", n_chunks, 0, max_bits)
    starts = chunk_starts(bits)
    return chunk, starts, bits, payload_bits(bits, starts)
