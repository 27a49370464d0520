"""Tensors past 2**31 levels whose payloads pass 2**31 bits round-trip through ``rlh`` and
``ans``: level indices, run ends, chunk starts and bit positions past every 32-bit bound.

N_LEVELS int8 levels: 2**31, then 32 whole chunks of 2**16 levels (kernels/chunks.py) and a
partial one, so that chunks start past 2**31 levels (and their streams past 2**31 bits) on
each decode path, and 12345 puts the end on no power of two. Each test holds the levels
(2 GiB), the decoded levels (2 GiB) and the stream; ``rlh`` adds its token buffers while it
encodes (from 2**31 levels on, 12 bytes of address space per level, of which it touches 12
per run: encoders/runlength.py ``token_buffers``).
Levels are made and compared STEP levels at a time, so no temporary grows with the tensor.
"""
import numpy as np
import pytest

import horovod_huffman as hh
from horovod_huffman.codec import wire

# `horovod` puts these tests in the serial half of scripts/test.sh (`pytest -m horovod`, one
# test at a time), not beside another xdist worker: each runs with the serial jobs, as it takes
# up to 6 GiB (rlh 4.9 GiB, ans 5.6 GiB at their peaks).
# A round trip of this size takes about a minute on a 2-core VM: a limit of its own.
pytestmark = [pytest.mark.large, pytest.mark.horovod, pytest.mark.decoding(seconds=300)]

# 2**31 levels, 2**21 more (32 chunks of 2**16), and 12345 (no power of two).
N_LEVELS = 2**31 + 2**21 + 12345
# Levels made or compared per step: 1 MiB of int8, and as much of bool per comparison.
STEP = 1 << 20
# rlh's levels: runs of uniform lengths 1 .. 2 * mean - 1 of uniform int8 values; one step in
# SPARSE_EVERY takes runs of mean SPARSE_RUN (about 0.02 payload bits per level: the one-chunk
# decode path, kernels/lanes.py DENSE_BITS_PER_LEVEL), the others of mean DENSE_RUN (about
# 1.5 bits per level: the lanes); about 1.25 bits per level in all, as over 4096 tokens occur
# and the rarest take the escape.
DENSE_RUN = 8
SPARSE_RUN = 1024
SPARSE_EVERY = 4
# Step k of rlh's levels is random step k % TEMPLATES of its kind plus k % OFFSETS (mod 256:
# the same runs): coprime, so no two steps of the tensor are equal (TEMPLATES * OFFSETS is
# above N_LEVELS / STEP) and a level decoded to another place shows. (Fresh runs for every
# step cost about 15 s on two cores, these templates about 2 s.)
TEMPLATES = 61
OFFSETS = 251


def run_steps(rng, mean, count):
    """``count`` steps (rows of STEP int8 levels) of runs of uniform lengths 1 .. 2 * mean - 1
    and uniform int8 values, runs cut at each step's end."""
    steps = np.empty((count, STEP), dtype=np.int8)
    for row in steps:
        filled = 0
        while filled < STEP:
            lengths = rng.integers(1, 2 * mean, size=STEP // mean + 1)
            values = rng.integers(-128, 128, size=lengths.size, dtype=np.int8)
            runs = np.repeat(values, lengths)[:STEP - filled]
            row[filled:filled + runs.size] = runs
            filled += runs.size
    return steps


def fill_runs(levels, seed):
    """Fill the int8 ``levels`` STEP levels at a time with runs of random values: steps k with
    k % SPARSE_EVERY == 1 of mean run length SPARSE_RUN (so the steps that start at 2**31 and
    just after are dense and sparse), the others DENSE_RUN (TEMPLATES, OFFSETS)."""
    rng = np.random.default_rng(seed)
    dense, sparse = run_steps(rng, DENSE_RUN, TEMPLATES), run_steps(rng, SPARSE_RUN, TEMPLATES)
    for k, at in enumerate(range(0, levels.size, STEP)):
        size = min(STEP, levels.size - at)
        template = (sparse if k % SPARSE_EVERY == 1 else dense)[k % TEMPLATES, :size]
        np.add(template.view(np.uint8), k % OFFSETS, out=levels[at:at + size].view(np.uint8))


def fill_qsgd_like(levels, seed):
    """Fill the int8 ``levels`` with independent levels -3..3, peaked at 0 as QSGD's are: the
    sum of two uniform 2-bit fields of a random byte, less 3 (probabilities 1, 2, 3, 4, 3, 2, 1
    sixteenths: 2.66 bits of entropy per level)."""
    rng = np.random.default_rng(seed)
    for at in range(0, levels.size, STEP):
        size = min(STEP, levels.size - at)
        random = np.frombuffer(rng.bytes(size), dtype=np.uint8)
        out = levels[at:at + size].view(np.uint8)
        np.bitwise_and(random, 3, out=out)
        out += (random >> 2) & 3
        out -= 3


def assert_levels_equal(decoded, levels):
    """``decoded == levels`` STEP levels at a time (a whole comparison would allocate as many
    bools as levels); names the first level that differs."""
    assert decoded.dtype == levels.dtype and decoded.size == levels.size
    for at in range(0, levels.size, STEP):
        got, want = decoded[at:at + STEP], levels[at:at + STEP]
        if not np.array_equal(got, want):
            i = at + int(np.flatnonzero(got != want)[0])
            raise AssertionError(f"level {i} decoded as {decoded[i]}, encoded as {levels[i]}")


def payload_bits(buf):
    """The payload bits a stream's header declares."""
    return wire.HEADER.unpack_from(buf, 0)[-1]


def round_trip(name, levels):
    """Encode ``levels`` with encoder ``name``, check that the payload passes 2**31 bits, decode
    and compare."""
    buf = hh.get_encoder(name).encode(levels)
    assert payload_bits(buf) > 2**31
    # The default max_elements (wire.DEFAULT_MAX_ELEMENTS, 2**31) refuses these streams.
    decoded = hh.decode(buf, max_elements=levels.size)
    del buf
    assert_levels_equal(decoded, levels)


def test_rlh_round_trips_past_2_to_31_levels_and_bits():
    levels = np.empty(N_LEVELS, dtype=np.int8)
    fill_runs(levels, seed=0)
    round_trip("rlh", levels)


def test_ans_round_trips_past_2_to_31_levels_and_bits():
    levels = np.empty(N_LEVELS, dtype=np.int8)
    fill_qsgd_like(levels, seed=1)
    round_trip("ans", levels)
