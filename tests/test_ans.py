"""The rANS coder (kernels/ans.py, encoder ``ans``): its arithmetic, its frequencies, its size
against the entropy, and its end-of-chunk checks."""
import numpy as np
import pytest

import horovod_huffman as hh
from horovod_huffman.codec import wire
from horovod_huffman.tools.fuzz import forged_parameters, reseal
from horovod_huffman.kernels.ans import (RECORD_SHIFT, RENORM_SHIFT, STATE_BITS, cumulative,
                                         encode_records, encode_tables, normalize, pack_classes,
                                         unpack_classes)
from horovod_huffman.kernels.maxima import (ANS_BIAS_SHIFT, ANS_BOUND_MASK, ANS_COMPLEMENT_SHIFT,
                                            ANS_FREQ_MASK, ANS_PROB_BITS, ANS_PROB_SCALE)
from strategies import chunked_encoder                # beside this file
from time_limits import DECODING

pytestmark = DECODING


def test_coding_step_is_exact_below_2_to_31():
    """The encoder's C(s, x) = (x // f) * M + x % f + c_s takes x // f as a multiply and two
    shifts, with a bias: exact for every frequency 1..M and every state the coder can hold
    (the range's edges, the edges of multiples of f, random states)."""
    rng = np.random.default_rng(0)
    top = (1 << STATE_BITS) - 1
    for g in range(1, ANS_PROB_SCALE + 1):
        # every frequency g at slot 0, and at the top of the scale (the largest bias)
        rest = ANS_PROB_SCALE - g
        freqs = np.array([g, rest - g, g] if rest > g else [rest, g] if rest else [g],
                         dtype=np.int64)
        entries, rcps = encode_tables(freqs)
        cum = cumulative(freqs).tolist()
        for s in {0, freqs.size - 1} - {s for s in range(freqs.size) if freqs[s] == 0}:
            f, e, r = int(freqs[s]), int(entries[s]), int(rcps[s])
            bias, complement = e >> ANS_BIAS_SHIFT, (e >> ANS_COMPLEMENT_SHIFT) & ANS_FREQ_MASK
            assert e & ANS_BOUND_MASK == f << (STATE_BITS - ANS_PROB_BITS)
            xs = {1, top, top - 1, f, f - 1, f + 1, top // f * f, top // f * f - 1}
            xs.update(int(x) for x in rng.integers(1, top, 4))
            for x in xs - {0}:
                q = ((x * (r & 0xFFFFFFFF)) >> 32) >> (r >> 32)
                assert x + bias + q * complement == \
                    (x // f) * ANS_PROB_SCALE + x % f + cum[s], (f, x)


def test_host_records_code_exactly_below_each_bound():
    """The host coder's records (``encode_records``: one reciprocal with a fixed shift) give
    C(s, x) for every frequency 1..M and every state it codes with them, x below the
    symbol's bound f * 2**RENORM_SHIFT (the edges of the range and of multiples of f, random
    states), in Python integers: the 64-bit product does not wrap."""
    rng = np.random.default_rng(1)
    for g in range(1, ANS_PROB_SCALE + 1):
        rest = ANS_PROB_SCALE - g
        freqs = np.array([g, rest - g, g] if rest > g else [rest, g] if rest else [g],
                         dtype=np.int64)
        entries, _ = encode_tables(freqs)
        records = encode_records(entries)
        cum = cumulative(freqs).tolist()
        for s in {0, freqs.size - 1} - {s for s in range(freqs.size) if freqs[s] == 0}:
            f, rec = int(freqs[s]), records[s]
            bound = int(rec["bound"])
            assert bound == f << RENORM_SHIFT
            xs = {1, bound - 1, bound - 2, f, f - 1, f + 1, (bound - 1) // f * f,
                  (bound - 1) // f * f - 1}
            xs.update(int(x) for x in rng.integers(1, bound, 4))
            for x in xs - {0}:
                product = x * int(rec["rcp"])
                assert product < 2**64
                q = product >> RECORD_SHIFT
                assert x + int(rec["bias"]) + q * int(rec["complement"]) == \
                    (x // f) * ANS_PROB_SCALE + x % f + cum[s], (f, x)


@pytest.mark.parametrize("counts", [[5, 0, 1], [1] * 4096, [10**9, 1, 1, 0, 3],
                                    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 300, [7]])
def test_frequencies_fill_the_scale_and_keep_every_symbol(counts):
    counts = np.array(counts, dtype=np.int64)
    freqs = normalize(counts)
    assert freqs.sum() == ANS_PROB_SCALE
    assert ((freqs > 0) == (counts > 0)).all()


def entropy_bits(levels):
    _, c = np.unique(levels, return_counts=True)
    p = c / c.sum()
    return float(-(c * np.log2(p)).sum())


@pytest.mark.parametrize("s", [2, 8, 127])
def test_stream_within_one_percent_of_the_entropy(s):
    """Fractions of a bit: on 300,000 QSGD levels the whole stream (header and frequency
    table included) is within 1% of the levels' zeroth-order entropy, where Huffman needs at
    least a bit per level."""
    g = np.random.default_rng(s).standard_normal(300_000).astype(np.float32)
    levels = hh.QSGD(levels=s).quantize(g, seed=0).levels.ravel()
    buf = hh.get_encoder("ans").encode(levels)
    assert 8 * len(buf) <= 1.01 * entropy_bits(levels)
    assert np.array_equal(hh.decode(buf), levels)


def test_wide_levels_escape_and_come_back():
    """Levels spread over more than the window take the escape; their values follow the
    chunks and return in order, chunk by chunk."""
    rng = np.random.default_rng(1)
    levels = np.where(rng.random(200_000) < 0.01, rng.integers(-10**6, 10**6, 200_000),
                      rng.integers(-3, 4, 200_000)).astype(np.int32)
    encoder = chunked_encoder("ans", 4096)
    assert np.array_equal(hh.decode(encoder.encode(levels)), levels)


def test_a_chunk_must_end_where_its_states_began():
    """A changed final state still decodes to levels, but its lane's units are taken at other
    steps and the states do not come back to their start: the decoder says so (a state off
    its start, or units not read to the chunk's end) instead of returning wrong levels."""
    levels = np.random.default_rng(2).integers(-8, 9, 5000).astype(np.int8)
    buf = bytearray(hh.get_encoder("ans").encode(levels))
    frame = hh.codec.encoders.check(bytes(buf))
    first_payload_byte = len(buf) - wire.CHECKSUM.size - len(frame.payload)
    buf[first_payload_byte + 2] ^= 0x01                 # state 0, low unit
    with pytest.raises(hh.DecodeError, match="ANS state|payload"):
        hh.decode(reseal(buf))


def test_auto_takes_ans_where_it_is_smallest():
    """TernGrad-like levels (10% non-zero, no runs to speak of): ans codes them below a bit per
    level, under every Huffman coder, and ``auto`` picks it."""
    rng = np.random.default_rng(3)
    levels = np.where(rng.random(100_000) < 0.1, np.where(rng.random(100_000) < 0.5, -1, 1),
                      0).astype(np.int8)
    auto = hh.get_encoder("auto")
    buf = auto.encode(levels)
    assert auto.last_choice == "ans"
    assert len(buf) < min(len(hh.get_encoder(n).encode(levels)) for n in ("huffman", "rlh"))


def blocks_of_scales(n_blocks=64, block=256, seed=4):
    """int8 levels whose Laplace scale changes from block to block (as gradients' do from
    layer to layer and row to row)."""
    rng = np.random.default_rng(seed)
    scale = np.repeat(rng.choice([0.2, 1.0, 4.0], n_blocks), block)
    return np.clip(np.rint(rng.laplace(0, scale)), -16, 16).astype(np.int8)


def test_contexts_pay_on_blocks_of_different_scales():
    """Blocks sorted into classes by their largest |level|, a frequency table per class: the
    stream is smaller than with one table for all, and decodes to the same levels."""
    levels = blocks_of_scales(n_blocks=256, block=64)
    plain, contexts = hh.get_encoder("ans", contexts=False), hh.get_encoder("ans")
    plan = contexts.plan(levels)
    assert plan.contexts and plan.classes.size == levels.size >> contexts.block_bits
    buf = contexts.encode(levels)
    assert len(buf) < 0.9 * len(plain.encode(levels))
    assert np.array_equal(hh.decode(buf), levels)


def test_contexts_only_where_they_pay():
    """Levels drawn alike in every block: one table (no class ids on the wire)."""
    levels = np.random.default_rng(5).integers(-3, 4, 1 << 16).astype(np.int8)
    assert not hh.get_encoder("ans").plan(levels).contexts


def test_a_block_naming_a_class_without_a_table_raises(monkeypatch):
    """Three classes take two bits per block; a forged id 3 names no table."""
    from horovod_huffman.codec.encoders import ans as ans_module
    levels = blocks_of_scales()
    encoder = hh.get_encoder("ans")
    plan = encoder.plan(levels)
    counts = np.ones((3, plan.window + 1), dtype=np.int64)
    counts[:, plan.window] = 0
    forged_plan = ans_module.AnsPlan.from_counts(plan.base, plan.window, counts, plan.chunk,
                                                 (np.arange(plan.classes.size) % 3)
                                                 .astype(np.uint8), plan.block_bits)
    monkeypatch.setattr(encoder, "_sized_plan", lambda *_: (forged_plan, 0))
    pack = ans_module._pack_classes
    monkeypatch.setattr(ans_module, "_pack_classes",
                        lambda classes, bits: pack(np.full_like(classes, 3), bits))
    with pytest.raises(hh.DecodeError, match="class 3 of 3"):
        hh.decode(encoder.encode(levels))


def test_frequency_tables_read_back_and_reject_every_cut_and_forgery():
    """Tables written by ``write_frequencies`` read back in one call, and every truncation,
    a count past the ids, an id past them and a wrong sum raise DecodeError."""
    from horovod_huffman.codec.encoders.ans import read_frequencies, write_frequencies
    from horovod_huffman.kernels.ans import normalize
    from horovod_huffman.codec.params import ParamReader, ParamWriter
    rng = np.random.default_rng(3)
    freqs = np.stack([normalize(rng.integers(0, 50, 40)) for _ in range(3)])
    writer = ParamWriter()
    write_frequencies(writer, freqs)
    data = writer.getvalue()
    reader = ParamReader(data)
    assert (read_frequencies(reader, 3, 40, "ans") == freqs).all()
    reader.done()
    for cut in range(len(data)):
        with pytest.raises(hh.DecodeError, match="truncated"):
            read_frequencies(ParamReader(data[:cut]), 3, 40, "ans")
    for forged, match in ((ParamWriter().uint(41), "out of range"),
                          (ParamWriter().uint(1).uint(40).uint(4095), "names symbol 40"),
                          (ParamWriter().uint(1).uint(3).uint(4094), "add up to 4095")):
        with pytest.raises(hh.DecodeError, match=match):
            read_frequencies(ParamReader(forged.getvalue()), 1, 40, "ans")


@pytest.mark.parametrize("bits", range(1, 9))
def test_class_ids_unpack_as_packed(bits):
    classes = np.random.default_rng(bits).integers(0, 1 << bits, 1001).astype(np.uint8)
    data = np.empty(-(-classes.size * bits // 8), dtype=np.uint8)
    pack_classes(classes, bits, data)
    out = np.empty_like(classes)
    assert unpack_classes(data, bits, out) == classes.max()
    assert np.array_equal(out, classes)


def flipped_streams(s, name="ans"):
    """QSGD(s) levels of 50,000 coordinates, and their stream by encoder ``name`` in chunks
    of 4096 levels: whole, then 40 times with one payload bit flipped (resealed)."""
    g = np.random.default_rng(s).standard_normal(50_000).astype(np.float32)
    levels = hh.QSGD(levels=s).quantize(g, seed=0).levels.ravel()
    buf = bytes(chunked_encoder(name, 4096).encode(levels))
    payload = len(buf) - wire.CHECKSUM.size - len(hh.codec.encoders.check(buf).payload)
    rng = np.random.default_rng(s)
    streams = [buf]
    for at in rng.integers(payload, len(buf) - wire.CHECKSUM.size, 40):
        forged = bytearray(buf)
        forged[at] ^= 1 << int(rng.integers(8))
        streams.append(reseal(forged))
    return levels, streams


@pytest.mark.parametrize("s", [1, 127])
def test_both_renormalizations_decode_alike(monkeypatch, s):
    """The decoder takes a state's unit by a branch or by a select by the stream's bits per
    level; either one on any stream, whole or with a payload byte flipped, gives the same
    levels or the same error."""
    from horovod_huffman.codec.encoders import ans as ans_module
    levels, streams = flipped_streams(s)

    def outcomes(bits_per_level):
        monkeypatch.setattr(ans_module, "SELECT_BITS_PER_LEVEL", bits_per_level)
        for stream in streams:
            try:
                yield hh.decode(stream).tobytes()
            except hh.DecodeError as e:
                yield str(e)
    branches, selects = list(outcomes(10**9)), list(outcomes(0))
    assert branches == selects
    assert branches[0] == levels.tobytes()
    assert sum(isinstance(o, str) for o in branches) > 20


@pytest.mark.parametrize("s", [8, 127])
def test_chunks_decoded_in_pairs_match_chunks_one_by_one(monkeypatch, s):
    """The decoder takes two whole chunks without escapes at once; on any stream, whole or
    with a payload byte flipped, it gives the levels or the error that decoding each chunk
    alone gives."""
    from horovod_huffman.codec.encoders import ans as ans_module
    from horovod_huffman.kernels import ans as kernels
    levels, streams = flipped_streams(s)

    def one_by_one(words, starts, chunk_bits, chunk, coder, out, escapes, escape_starts,
                   selects):
        units = kernels.payload_units(words)
        for c in range(starts.size):
            start = c * chunk
            status = kernels.decode_chunk(units, starts[c], chunk_bits[c], coder, out, start,
                                          min(out.size, start + chunk), escapes,
                                          escape_starts[c], escape_starts[c + 1], selects)
            if status != kernels.OK:
                return status
        return kernels.OK

    def outcomes():
        for stream in streams:
            try:
                yield hh.decode(stream).tobytes()
            except hh.DecodeError as e:
                yield str(e)
    paired = list(outcomes())
    monkeypatch.setattr(ans_module, "decode_chunks", one_by_one)
    assert list(outcomes()) == paired
    assert paired[0] == levels.tobytes()
    assert sum(isinstance(o, str) for o in paired) > 20


@pytest.mark.parametrize("seed", range(4))
def test_forged_context_streams_raise_or_decode_in_bounds(seed):
    """Resealed streams with bytes of the parameters (classes, block size, tables, class ids)
    replaced: DecodeError or exactly the header's count of levels, never a crash."""
    levels = blocks_of_scales(n_blocks=96, block=16, seed=seed)
    encoder = chunked_encoder("ans", 64, block_bits=4)
    assert encoder.plan(levels).contexts
    buf = bytes(encoder.encode(levels))
    for forged in forged_parameters(buf, np.random.default_rng(seed), 300):
        try:
            out = hh.decode(forged, max_elements=10_000)
        except hh.DecodeError:
            continue
        assert out.size == levels.size           # the header, which no forgery touched


def test_levels_outside_the_counted_blocks_stay_codable():
    """Of a large tensor only every stride-th block's symbols are counted; a level that appears
    only in another block (here 16, in block 1) still has a frequency in its class."""
    from horovod_huffman.codec.encoders.ans import SAMPLED_LEVELS
    levels = blocks_of_scales(n_blocks=4 * SAMPLED_LEVELS // 256, seed=6)
    encoder = hh.get_encoder("ans")
    rare = (1 << encoder.block_bits) + 7
    levels[levels == 16] = 15
    levels[rare] = 16
    assert encoder.plan(levels).contexts
    assert np.array_equal(hh.decode(encoder.encode(levels)), levels)


def test_sparse_levels_take_larger_blocks():
    """Where one-bit class ids per block would weigh on a small stream (TernGrad-like levels,
    5% non-zero, with rows of 256 dead coordinates), the plan also tries blocks four times
    larger, and takes them when they are smaller."""
    rng = np.random.default_rng(7)
    dead = np.repeat(rng.random((1 << 18) // 256) < 0.3, 256)
    levels = np.where(~dead & (rng.random(dead.size) < 0.05), rng.choice([-1, 1], dead.size),
                      0).astype(np.int8)
    encoder = hh.get_encoder("ans")
    plan = encoder.plan(levels)
    assert plan.contexts and plan.block_bits == encoder.block_bits + 2
    assert np.array_equal(hh.decode(encoder.encode(levels)), levels)


def test_a_tensor_past_the_class_bytes_takes_larger_blocks(monkeypatch):
    """Where the class ids of blocks of 2**block_bits levels would pass MAX_CLASS_BYTES (a
    tensor of over 44M levels at the defaults), the plan keeps its contexts over the smallest
    larger blocks whose ids fit."""
    from horovod_huffman.codec.encoders import ans as ans_module
    levels = blocks_of_scales(n_blocks=256, block=256)       # 1024 blocks of 64: 384 bytes
    encoder = hh.get_encoder("ans")
    monkeypatch.setattr(ans_module, "MAX_CLASS_BYTES", 100)  # 256 blocks of 256: 96 bytes
    plan = encoder.plan(levels)
    assert plan.contexts and plan.block_bits == encoder.block_bits + 2
    buf = encoder.encode(levels)
    assert len(buf) < 0.9 * len(hh.get_encoder("ans", contexts=False).encode(levels))
    assert np.array_equal(hh.decode(buf), levels)
