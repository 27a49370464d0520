"""Worker: the decoders on hostile streams with Numba's bounds checks on (run with
NUMBA_BOUNDSCHECK=1 and a cache directory of its own, since Numba does not check bounds in the
normal build). Every stream must decode or raise DecodeError; an IndexError is a read or write
out of bounds that the decoder's own checks missed.

Usage: boundscheck_fuzz.py SEED CASES ENCODER [ENCODER ...]. Prints "OK <n> streams".
"""
import os
import sys

import numpy as np

import horovod_huffman as hh
from horovod_huffman import wire


def reseal(body):
    """The stream with its trailing checksum recomputed, so the mutation reaches the decoder."""
    body = bytes(body[:-wire.CHECKSUM.size])
    return body + wire.CHECKSUM.pack(wire.checksum(body))


def sources(rng):
    """Level arrays the mutations start from: dense QSGD-like levels, sparse ones spread
    over several small chunks (for encoders that cut chunks), and levels whose scale changes
    every 256 levels (``ans`` codes them with block contexts), and a matrix of rows that are
    multiples of one profile, with its layout (``ans`` codes it with the row model)."""
    dense = np.clip(np.rint(rng.laplace(0, 1.5, 3000)), -8, 8).astype(np.int8)
    dense[500:900] = 0
    sparse = np.where(rng.random(5000) < 0.05, rng.integers(-3, 4, 5000), 0).astype(np.int8)
    scale = np.repeat(rng.choice([0.2, 1.0, 4.0], 16), 256)
    blocks = np.clip(np.rint(rng.laplace(0, scale)), -16, 16).astype(np.int8)
    rows = np.clip(np.rint(np.outer(rng.normal(0, 1, 48), rng.normal(0, 4, 40)) +
                           rng.normal(0, 0.5, (48, 40))), -60, 60).astype(np.int8).ravel()
    rows = np.concatenate([rows, dense[:100]])
    return [(dense, {}, None), (sparse, {"chunk_levels": 64}, None), (blocks, {}, None),
            (rows, {"chunk_levels": 256}, [(48, 40)])]


def mutations(buf, rng, cases):
    """Truncations, then ``cases`` resealed streams with 1-6 bytes past the header replaced."""
    for cut in range(0, len(buf), max(1, len(buf) // 40)):
        yield buf[:cut]
    start = wire.HEADER.size
    for _ in range(cases):
        forged = bytearray(buf)
        for pos in rng.integers(start, len(buf) - wire.CHECKSUM.size, rng.integers(1, 7)):
            forged[pos] = rng.integers(0, 256)
        yield reseal(forged)


def main():
    assert os.environ.get("NUMBA_BOUNDSCHECK") == "1", "run with NUMBA_BOUNDSCHECK=1"
    seed, cases, names = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    rng = np.random.default_rng(seed)
    streams = 0
    for name in names:
        chunked = name in hh.encoders.CHUNKED
        for levels, options, layout in sources(rng):
            encoder = hh.get_encoder(name, **(options if chunked else {}))
            buf = bytes(encoder.encode(levels, layout=layout))
            assert np.array_equal(hh.decode(buf), levels)
            for stream in mutations(buf, rng, cases):
                try:
                    hh.decode(stream, max_elements=10_000)
                except hh.DecodeError:
                    pass
                except IndexError as e:
                    print(f"OUT OF BOUNDS in the {name!r} decoder: {e}; stream "
                          f"{bytes(stream).hex()}", flush=True)
                    return 1
                streams += 1
    print(f"OK {streams} streams", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
