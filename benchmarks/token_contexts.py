"""What a run-length token's context is worth: the information of ``rla``'s tokens under three
models, on gradient traces.

``rla`` codes every run-length token (kernels/runs.py) under one of two tables, chosen by whether
the token before it has level 0. A coder with a state per lane (32 lanes taking tokens in turn,
as ``ans`` does) could instead choose by the token 32 before it, in its own lane, so that the
lanes decode a step without waiting for each other. This prints, per trace and quantizer, the
bits of the tokens' symbols under each model (the empirical conditional entropy of their
symbols, every chunk of 65,536 levels starting without context) plus their runs' extra bits,
and each model against rla's:

- ``none``: one table;
- ``previous``: rla's, the token before;
- ``lane``: the token 32 before.

    python benchmarks/token_contexts.py --traces cnn-digits mlp-digits --coords 1048576
"""
import argparse

import numpy as np

import horovod_huffman as hh
from horovod_huffman.codec.encoders.runlength import token_counts
from horovod_huffman.kernels.chunks import CHUNK_LEVELS
from horovod_huffman.kernels.runs import BUCKET_EXTRA
from horovod_huffman.tools.bench import traces as tr

LANES = 32


def entropy_bits(symbols):
    """The bits of ``symbols`` coded with their own frequencies (empirical entropy x count)."""
    counts = np.bincount(symbols)
    counts = counts[counts > 0].astype(np.float64)
    return float(-(counts * np.log2(counts / counts.sum())).sum())


def conditional_bits(symbols, context):
    """``entropy_bits`` of the symbols of each context value (0 or 1), added."""
    return sum(entropy_bits(symbols[context == v]) for v in (0, 1) if (context == v).any())


def model_bits(levels, chunk=CHUNK_LEVELS):
    """{model: bits} of the run-length tokens of ``levels`` (chunks of ``chunk`` levels)."""
    tokens = token_counts(levels, chunk)
    symbols = np.asarray(tokens.symbols, dtype=np.int64)
    level = tokens.base + symbols % tokens.window
    bucket = np.minimum(symbols // tokens.window, BUCKET_EXTRA.size - 1)
    extras = float(BUCKET_EXTRA[bucket].sum())
    zero = (level == 0).astype(np.int64)
    ends = np.asarray(tokens.chunk_runs, dtype=np.int64)        # runs up to each chunk's end
    firsts = np.repeat(np.concatenate(([0], ends[:-1])), np.diff(np.concatenate(([0], ends))))
    at = np.arange(symbols.size) - firsts                        # the token's index in its chunk

    def before(k):
        """Whether the token k before each one has level 0 (0 where the chunk has none)."""
        return np.where(at >= k, np.roll(zero, k), 0)
    return {"none": entropy_bits(symbols) + extras,
            "previous": conditional_bits(symbols, before(1)) + extras,
            "lane": conditional_bits(symbols, before(LANES)) + extras}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", nargs="+", default=["cnn-digits", "mlp-digits"],
                   choices=list(tr.TRACES))
    p.add_argument("--coords", type=int, default=1 << 20)
    args = p.parse_args(argv)
    quantizers = [hh.QSGD(levels=1, bucket_size=512, seed=0),
                  hh.QSGD(levels=8, bucket_size=512, seed=0), hh.TernGrad(seed=0)]
    print("| trace | quantizer | tokens | none / previous | lane / previous |")
    print("|---|---|---:|---:|---:|")
    for name in args.traces:
        grad = tr.TRACES[name](args.coords).grad
        for q in quantizers:
            levels = np.asarray(q.quantize(grad).levels)
            bits = model_bits(levels)
            print(f"| {name} | {q!r} | {token_counts(levels, CHUNK_LEVELS).symbols.size:,} | "
                  f"{bits['none'] / bits['previous']:.4f} | "
                  f"{bits['lane'] / bits['previous']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
