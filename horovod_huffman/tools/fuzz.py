"""Every decoder on hostile streams under Numba's bounds checks: ``python -m horovod_huffman.tools.fuzz``.

    python -m horovod_huffman.tools.fuzz --streams 100000 [--seed 0] [--encoders rlh ans ...]

Valid streams of every encoder (dense, sparse and wide levels of each dtype, levels in small
chunks, blocks of changing scale, a matrix with its layout) are mutated: bits flipped, bytes
overwritten, payloads truncated, bytes inserted or deleted, header fields and parameters
forged. Each is then sealed: framed anew with header lengths that match and a correct
checksum, so that it passes ``wire.parse`` and reaches the decoder proper. Every stream must
decode or raise DecodeError. Anything else is a bug in a decoder: an IndexError (an access
outside its array, which the bounds checks turn into an exception: kernels/checked.py), any
other exception, or a decode running longer than ``--stall`` seconds (compiling aside).

The command re-executes itself with NUMBA_BOUNDSCHECK=1 where the flag is off, prints per
encoder the streams and their outcomes with the time taken, and exits 1 if any stream had
another outcome, naming it (3 at once on a hung decode). Stream k of an encoder is the same on every run with the same
seed: ``--replay k`` decodes it alone with its traceback, and ``--save FILE`` writes it.
"""
import argparse
import os
import pickle
import platform
import sys
import tempfile
import time
import traceback

import numpy as np

import horovod_huffman as hh
from horovod_huffman.codec import wire
from horovod_huffman.tools.watchdog import watchdog

ENCODER_IDS = {name: wire.ENCODER_IDS[name] for name in hh.ENCODERS if name in wire.ENCODER_IDS}
"""Every encoder that writes streams of its own, by name: its id in the header."""

# Elements a fuzzed decode may allocate: above every source's levels (5,000 at most), so a
# forged count of up to three times theirs reaches the decoder, and small enough that no
# forged count costs memory or time.
MAX_ELEMENTS = 1 << 14
# Outcomes of a decode, the table's columns.
DECODED, DECODE_ERROR, OTHER = range(3)
# Seconds a decode may run, compiling aside: a checked decode of MAX_ELEMENTS levels takes
# milliseconds, so a decode this long is one that does not end.
STALL_SECONDS = 20


# ---- Streams -------------------------------------------------------------------------------

def sources(seed):
    """(levels, chunk levels or None, layout or None) the valid streams are made from: int8
    levels dense, sparse in chunks of 64, in blocks whose scale changes every 256 levels
    (``ans``'s block contexts) and as a matrix of rows that are multiples of one profile with
    its layout (``ans``'s row model); int16, int32 and int64 levels wide enough for escapes."""
    rng = np.random.default_rng(seed)
    dense = np.clip(np.rint(rng.laplace(0, 1.5, 3000)), -8, 8).astype(np.int8)
    dense[500:900] = 0
    sparse = np.where(rng.random(5000) < 0.05, rng.integers(-3, 4, 5000), 0).astype(np.int8)
    scale = np.repeat(rng.choice([0.2, 1.0, 4.0], 16), 256)
    blocks = np.clip(np.rint(rng.laplace(0, scale)), -16, 16).astype(np.int8)
    rows = np.clip(np.rint(np.outer(rng.normal(0, 1, 48), rng.normal(0, 4, 40)) +
                           rng.normal(0, 0.5, (48, 40))), -60, 60).astype(np.int8).ravel()
    rows = np.concatenate([rows, dense[:100]])
    wide16 = np.clip(np.rint(rng.laplace(0, 300, 2000)), -2**15, 2**15 - 1).astype(np.int16)
    wide16[:400] = 0
    heavy = np.minimum(rng.zipf(1.3, 1500), 2**31 - 1)
    heavy32 = np.where(rng.random(1500) < 0.5, -heavy, heavy).astype(np.int32)
    wide64 = np.where(rng.random(1000) < 0.3, rng.integers(-2**31, 2**31, 1000), 0)
    return [(dense, None, None), (sparse, 64, None), (blocks, None, None),
            (rows, 256, [(48, 40)]), (wide16, 256, None), (heavy32, None, None),
            (wide64.astype(np.int64), None, None)]


def encoder(name, chunk=None):
    """The encoder ``name``, in chunks of exactly ``chunk`` levels where it cuts chunks, with
    seed 0 where it samples."""
    kwargs = {}
    if chunk and name in hh.codec.encoders.CHUNKED:
        kwargs["chunk_levels"] = chunk
        if name in hh.codec.encoders.GROWING:
            kwargs["max_chunk_levels"] = chunk
    if name in hh.codec.encoders.SEEDED:
        kwargs["seed"] = 0
    return hh.get_encoder(name, **kwargs)


def valid_streams(name, seed):
    """The streams of ``sources(seed)`` by encoder ``name``, each checked to decode to its
    levels (decoding them compiles the decoder's kernels, or loads them)."""
    return [buf for buf, _ in valid_pairs(name, seed)]


def valid_pairs(name, seed, made=None):
    """(stream, levels) of each of ``sources(seed)`` by encoder ``name``, each stream checked
    to decode to its levels here. ``made``: the pairs another process encoded (``made_apart``),
    so that a bounds-checked process compiles its decoders alone, not the encoders too."""
    pairs = made[name] if made is not None else \
        [(bytes(encoder(name, chunk).encode(levels, layout=layout)), levels)
         for levels, chunk, layout in sources(seed)]
    for buf, levels in pairs:
        if not np.array_equal(hh.decode(buf), levels):
            raise AssertionError(f"{name}: a valid {levels.dtype} stream does not decode")
    return pairs


def made_apart(names, seed):
    """The path of a file holding ``valid_pairs`` of every encoder of ``names``, encoded in
    this process; ``load_made`` reads it (once: it removes the file)."""
    made = {name: valid_pairs(name, seed) for name in names}
    fd, path = tempfile.mkstemp(prefix="horovod_huffman_fuzz_", suffix=".pickle")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(made, f)
    return path


def load_made(path):
    """``made_apart``'s pairs, the file removed."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    finally:
        os.remove(path)


def reseal(buf):
    """The stream ``buf`` with its trailing checksum recomputed, so that a forgery gets past it
    to the real checks."""
    body = bytes(buf[:-wire.CHECKSUM.size])
    return body + wire.CHECKSUM.pack(wire.checksum(body))


class Parts:
    """A stream's header fields and its body (parameters, then payload), to mutate."""
    __slots__ = ("encoder_id", "dtype_code", "n", "n_params", "body", "bits")

    def __init__(self, buf):
        _, _, self.encoder_id, self.dtype_code, _, self.n, self.n_params, self.bits = \
            wire.HEADER.unpack_from(buf, 0)
        self.body = bytearray(buf[wire.HEADER.size:len(buf) - wire.CHECKSUM.size])

    def payload_bytes(self):
        """Bytes of the body after the parameters."""
        return len(self.body) - self.n_params

    def padded(self, rng):
        """Payload bits that fill its bytes but the last, which they end anywhere in."""
        return max(0, 8 * self.payload_bytes() - int(rng.integers(0, 8)))

    def seal(self):
        """The stream, framed with a correct checksum."""
        body = wire.HEADER.pack(wire.MAGIC, wire.VERSION, self.encoder_id, self.dtype_code, 0,
                                self.n, self.n_params, self.bits) + bytes(self.body)
        return body + wire.CHECKSUM.pack(wire.checksum(body))


def _positions(parts, rng, most):
    """1 to ``most`` positions in the body (none in an empty one)."""
    size = len(parts.body)
    return rng.integers(0, size, rng.integers(1, most + 1)) if size else ()


def flip_bits(parts, rng):
    """Flip 1-8 bits of the body."""
    for pos in _positions(parts, rng, 8):
        parts.body[pos] ^= 1 << int(rng.integers(0, 8))


def overwrite_bytes(parts, rng):
    """Replace 1-6 bytes of the body."""
    for pos in _positions(parts, rng, 6):
        parts.body[pos] = rng.integers(0, 256)


def forge_parameters(parts, rng):
    """Replace 1-3 bytes of the parameters."""
    for pos in rng.integers(0, parts.n_params, rng.integers(1, 4)) if parts.n_params else ():
        parts.body[pos] = rng.integers(0, 256)


def truncate_payload(parts, rng):
    """Cut the payload short, its bits ending anywhere in its new last byte."""
    if parts.payload_bytes():
        del parts.body[parts.n_params + int(rng.integers(0, parts.payload_bytes())):]
        parts.bits = parts.padded(rng)


def splice(parts, rng):
    """Delete or insert 1-16 bytes anywhere in the body; the parameters or the payload that
    holds them grow or shrink."""
    pos = int(rng.integers(0, len(parts.body) + 1))
    count = int(rng.integers(1, 17))
    if rng.random() < 0.5:
        count = min(count, len(parts.body) - pos)
        del parts.body[pos:pos + count]
        count = -count
    else:
        parts.body[pos:pos] = rng.integers(0, 256, count, dtype=np.uint8).tobytes()
    if pos < parts.n_params:
        parts.n_params = max(pos, parts.n_params + count)
    parts.bits = parts.padded(rng)


def forge_header(parts, rng):
    """One header field forged: the element count, the payload bits (within its bytes), the
    dtype, the encoder (any id) or the border between parameters and payload."""
    field = rng.integers(0, 5)
    if field == 0:
        parts.n = int(rng.choice([0, 1, parts.n - 1, parts.n + 1, 2 * parts.n,
                                  rng.integers(0, MAX_ELEMENTS + 2)]))
        parts.n = max(parts.n, 0)
    elif field == 1:
        parts.bits = parts.padded(rng)
    elif field == 2:
        parts.dtype_code = int(rng.choice(list(wire.LEVEL_DTYPES)))
    elif field == 3:
        parts.encoder_id = int(rng.choice(list(ENCODER_IDS.values())))
    else:
        parts.n_params = int(np.clip(parts.n_params + rng.integers(-8, 9), 0, len(parts.body)))
        parts.bits = parts.padded(rng)


def forged_parameters(buf, rng, count):
    """``count`` sealed copies of the stream ``buf`` with 1-3 bytes of its parameters
    replaced (``forge_parameters``)."""
    for _ in range(count):
        parts = Parts(bytes(buf))
        forge_parameters(parts, rng)
        yield parts.seal()


MUTATIONS = (flip_bits, overwrite_bytes, forge_parameters, truncate_payload, splice,
             forge_header)


def hostile_stream(name, valid, seed, k):
    """Stream k of encoder ``name``: one of its ``valid`` streams after one or two mutations,
    sealed; the same for the same (seed, name, k) on every run."""
    rng = np.random.default_rng([seed, ENCODER_IDS[name], k])
    parts = Parts(valid[int(rng.integers(0, len(valid)))])
    for _ in range(int(rng.integers(1, 3))):
        MUTATIONS[int(rng.integers(0, len(MUTATIONS)))](parts, rng)
    return parts.seal()


# ---- Decoding --------------------------------------------------------------------------------

def outcome(stream):
    """(DECODED, DECODE_ERROR or OTHER, the exception or None) of decoding ``stream``."""
    try:
        hh.decode(stream, max_elements=MAX_ELEMENTS)
    except hh.DecodeError:
        return DECODE_ERROR, None
    except Exception as e:                  # noqa: BLE001  (any other is what the fuzz finds)
        return OTHER, e
    return DECODED, None


def fuzz(names, streams, seed, stall, out=sys.stdout, made=None):
    """Decode ``streams`` hostile streams, shared among the encoders ``names``; print the table
    to ``out`` and return the streams of another outcome, as (name, k, exception). ``made``:
    the valid streams, encoded apart (``valid_pairs``)."""
    names = list(names)
    dog = watchdog()
    t0 = time.perf_counter()
    valid = {name: [buf for buf, _ in valid_pairs(name, seed, made)] for name in names}
    warm_up = time.perf_counter() - t0
    compiled = dog.compile_seconds
    counts = {name: [0, 0, 0] for name in names}
    others = []
    t0 = time.perf_counter()
    for j, name in enumerate(names):
        for k in range(streams // len(names) + (j < streams % len(names))):
            stream = hostile_stream(name, valid[name], seed, k)
            dog.begin(f"{name} stream {k} (seed {seed})", stall)
            result, error = outcome(stream)
            dog.end()
            counts[name][result] += 1
            if result == OTHER:
                others.append((name, k, error))
    elapsed = time.perf_counter() - t0
    print(f"{'encoder':<12} {'streams':>9} {'decoded':>9} {'DecodeError':>12} {'other':>6}",
          file=out)
    for name in names + ["all"]:
        row = counts[name] if name != "all" else np.sum(list(counts.values()), axis=0)
        print(f"{name:<12} {sum(row):>9} {row[DECODED]:>9} {row[DECODE_ERROR]:>12} "
              f"{row[OTHER]:>6}", file=out)
    fuzzed = sum(sum(row) for row in counts.values())
    print(f"{fuzzed} streams in {elapsed:.1f} s ({fuzzed / max(elapsed, 1e-9):.0f} streams/s, "
          f"{dog.compile_seconds - compiled:.1f} s of it compiling), after {warm_up:.1f} s "
          f"making the valid streams and compiling or loading their decoders; seed {seed}, "
          f"NUMBA_BOUNDSCHECK={os.environ.get('NUMBA_BOUNDSCHECK')}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs", file=out, flush=True)
    for name, k, error in others:
        print(f"{name} stream {k}: {type(error).__name__}: {error}; replay: python -m "
              f"horovod_huffman.tools.fuzz --seed {seed} --encoders {name} --replay {k}", file=out)
    return others


def replay(name, seed, k, save=None, made=None):
    """Decode stream k of encoder ``name`` alone and print its outcome (with the traceback of
    an exception other than DecodeError); returns that outcome. ``save``: a file to write
    the stream to; ``made``: as for ``fuzz``."""
    stream = hostile_stream(name, [buf for buf, _ in valid_pairs(name, seed, made)], seed, k)
    if save:
        with open(save, "wb") as f:
            f.write(stream)
    result, error = outcome(stream)
    if result == OTHER:
        traceback.print_exception(type(error), error, error.__traceback__)
    print(f"{name} stream {k} (seed {seed}, {len(stream)} bytes): "
          f"{['decoded', 'DecodeError', 'other'][result]}", flush=True)
    return result


def checked_or_reexecuted(argv, names, seed):
    """Return where Numba's bounds checks are on; else encode the valid streams of ``names``
    here (``made_apart``: the encoders' kernels as cached, unchecked) and replace this process
    with this command under NUMBA_BOUNDSCHECK=1, handed those streams (``--made``). The
    checked process then compiles its decoders alone: checked kernels compile cold, into a
    cache of their own (kernels/__init__.py), and the encoders are half of them."""
    from numba.core import config
    if config.BOUNDSCHECK:
        return
    if os.environ.get("NUMBA_BOUNDSCHECK") == "1":
        raise SystemExit("NUMBA_BOUNDSCHECK=1 is set but Numba's bounds checks are off")
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1")
    made = made_apart(names, seed)
    os.execve(sys.executable, [sys.executable, "-m", "horovod_huffman.tools.fuzz", *argv,
                               "--made", made], env)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m horovod_huffman.tools.fuzz",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1200,
                        help="hostile streams in all, shared among the encoders")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--encoders", nargs="+", choices=list(ENCODER_IDS),
                        default=list(ENCODER_IDS))
    parser.add_argument("--stall", type=float, default=STALL_SECONDS,
                        help="seconds a decode may run, compiling aside, before it counts as hung")
    parser.add_argument("--replay", type=int, metavar="K",
                        help="decode stream K of the one encoder given alone")
    parser.add_argument("--save", metavar="FILE", help="with --replay: write the stream here")
    parser.add_argument("--made", metavar="FILE", help=argparse.SUPPRESS)   # made_apart's
    args = parser.parse_args(argv)
    checked_or_reexecuted(argv, args.encoders, args.seed)
    made = None if args.made is None else load_made(args.made)
    if args.replay is not None:
        if len(args.encoders) != 1:
            parser.error("--replay takes one encoder (--encoders NAME)")
        return int(replay(args.encoders[0], args.seed, args.replay, args.save, made) == OTHER)
    return int(bool(fuzz(args.encoders, args.streams, args.seed, args.stall, made=made)))


if __name__ == "__main__":
    sys.exit(main())
