"""The GPU path (kernels/cuda_*.py) writes and reads the very bytes of the CPU path.

Runs on a CUDA GPU when there is one, else on Numba's CUDA simulator (conftest.py), with small
inputs and small chunks (``chunk_levels``) so that streams still span several chunks and every
kernel's segment and chunk boundaries are crossed.
"""
import numpy as np
import pytest

import horovod_huffman as hh
from horovod_huffman.codec import wire
from horovod_huffman.tools.fuzz import reseal
from horovod_huffman.codec.device import cuda_usable, is_device_array, SIMULATED

pytestmark = [
    # The simulator runs each kernel thread in Python: a test takes up to 40 s on a 2-core VM
    # with both cores busy (tests/time_limits.py).
    pytest.mark.decoding(seconds=120),
    pytest.mark.skipif(not cuda_usable(),
                       reason="needs a CUDA GPU or the Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"),
    # The simulator runs the SplitMix64 hash on NumPy scalars, which warn on (intended) wraparound.
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]

from numba import cuda  # noqa: E402  (after the skip: importing is fine, using needs a device)
from strategies import chunked_encoder, deterministic_encoder  # noqa: E402  (beside this file)

DEVICE_ENCODERS = list(hh.codec.encoders.ON_DEVICE)
CHUNK = 64 if SIMULATED else 4096      # levels per chunk: several chunks in every test input
N = 300 if SIMULATED else 100_000


def encoder(name, **kw):
    """``name`` with chunks of CHUNK levels (or ``chunk_levels``) that do not grow (unless
    ``max_chunk_levels`` says otherwise)."""
    if name in hh.codec.encoders.CHUNKED:
        return chunked_encoder(name, kw.pop("chunk_levels", CHUNK), **kw)
    return deterministic_encoder(name, **kw)


def patterns():
    """Level arrays that stress the token kernels: runs across segments and chunks, escapes,
    dtype extremes, a constant tensor, lengths just off the chunk size."""
    rng = np.random.default_rng(7)
    sparse = np.zeros(N, np.int8)
    hit = rng.random(N) < 0.2
    sparse[hit] = rng.integers(-3, 4, hit.sum())
    sparse[N // 3:N // 3 + 2 * CHUNK] = 2                    # a run over a chunk boundary
    dense = np.clip(np.rint(rng.laplace(0, 20, N)), -127, 127).astype(np.int8)
    wide = rng.integers(-5, 6, N).astype(np.int16)
    wide[::37] = rng.integers(-30000, 30000, wide[::37].size)  # escapes (beyond 4096 codes)
    extremes = rng.choice(np.array([-128, 127, 0], np.int8), N)
    big = np.zeros(N, np.int32)
    big[::5] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max] * (big[::5].size // 2) + \
        [0] * (big[::5].size % 2)
    return {
        "sparse": sparse, "dense": dense, "escapes": wide, "extremes": extremes, "int32": big,
        "zeros": np.zeros(N, np.int8), "constant": np.full(CHUNK + 1, -3, np.int16),
        "one": np.array([5], np.int64), "chunk-1": sparse[:CHUNK - 1], "2chunks": dense[:2 * CHUNK],
    }


PATTERNS = patterns()


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
@pytest.mark.parametrize("name", DEVICE_ENCODERS)
def test_device_encode_writes_the_host_bytes(name, pattern):
    levels = PATTERNS[pattern]
    host = encoder(name).encode(levels)
    device = encoder(name).encode(cuda.to_device(levels))
    assert device.dtype == np.uint8
    assert bytes(device) == bytes(host)


# The encoders whose device kernels code a batch of parts (gpu.Batch).
BATCHED = ["huffman", "sh", "rlh", "shs"]


def batch_parts(pattern):
    """Parts of one dtype for a batch: empty ones, one level, one just past a chunk, a
    constant one, two chunks; slices of ``pattern``'s levels at different offsets."""
    levels = PATTERNS[pattern]
    return [levels[:0], levels[7:CHUNK + 10], levels[:1], np.full(5, levels[3], levels.dtype),
            levels[:0], levels[-2 * CHUNK:], levels[40:57]]


@pytest.mark.parametrize("name,pattern", [(name, "sparse") for name in BATCHED + ["ans"]] +
                         [("rlh", "escapes"), ("huffman", "escapes")])
def test_a_batch_of_parts_gives_each_part_the_bytes_it_has_alone(name, pattern):
    """``encode_parts`` of parts laid end to end gives each part the host bytes of the part
    alone (encoded one after another by one encoder: a sampling encoder draws its samples in
    part order), on the device (one batch for the Huffman family and ``ans``) and on the host
    alike."""
    parts = batch_parts(pattern)
    sizes = [p.size for p in parts]
    alone = encoder(name)
    want = [bytes(alone.encode(p)) for p in parts]
    flat = np.concatenate(parts)
    assert [bytes(b) for b in encoder(name).encode_parts(cuda.to_device(flat), sizes)] == want
    assert [bytes(b) for b in encoder(name).encode_parts(flat, sizes)] == want
    with pytest.raises(ValueError, match="add up"):
        encoder(name).encode_parts(flat, sizes[:-1])


class _Counted:
    """A module whose kernel launches (``kernel[grid, block, stream](...)``: as "launch", and
    by the kernel's name), ``to_device`` copies and ``copy_to_host`` calls are counted in
    ``counts``."""

    def __init__(self, module, counts):
        self._module, self._counts = module, counts

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        counts = self._counts

        def counted(kind, call):
            def run(*args, **kwargs):
                counts[kind] = counts.get(kind, 0) + 1
                return call(*args, **kwargs)
            return run
        if name in ("to_device", "copy_to_host"):
            return counted(name, attr)
        if hasattr(attr, "__getitem__") and callable(attr):       # a kernel
            def launch(_, config):
                counts[name] = counts.get(name, 0) + 1
                return counted("launch", attr[config])
            return type("Launch", (), {"__getitem__": launch})()
        return attr


@pytest.mark.parametrize("name", ["huffman", "rlh", "shs", "ans", "rla"])  # token modes, rANS
def test_a_batch_takes_the_same_launches_and_copies_whatever_its_parts(name, monkeypatch):
    """The Huffman family, ``ans`` and ``rla`` code a batch in a fixed number of kernel
    launches, uploads and copies to the host: a batch of eight parts takes as many as a batch
    of one (for ``ans``, one with contexts and others without)."""
    from horovod_huffman.codec.encoders import gpu
    levels = PATTERNS["sparse"]

    def counted(parts):
        counts = {}
        monkeypatch.setattr(gpu, "cuda_tokens", _Counted(gpu.cuda_tokens, counts))
        monkeypatch.setattr(gpu, "cuda_ans", _Counted(gpu.cuda_ans, counts))
        monkeypatch.setattr(gpu, "cuda_rla", _Counted(gpu.cuda_rla, counts))
        monkeypatch.setattr(gpu, "cuda", _Counted(gpu.cuda, counts))
        monkeypatch.setattr(gpu, "copy_to_host", _Counted(gpu, counts).copy_to_host)
        flat = cuda.to_device(np.concatenate(parts))
        encoder(name).encode_parts(flat, [p.size for p in parts])
        monkeypatch.undo()
        return counts

    encoder(name).encode(cuda.to_device(levels))      # the tables uploaded once per context
    if name == "ans":
        assert encoder(name).plan(levels).contexts
    one = counted([levels])
    assert one["launch"] >= 3 and one["copy_to_host"] >= 2
    assert counted(batch_parts("sparse") + [levels]) == one


@pytest.mark.parametrize("name", ["huffman", "rlh", "sh", "shs", "ans", "rla"])
def test_levels_near_zero_bring_their_statistics_back_in_one_copy(name, monkeypatch):
    """A batch whose levels lie near 0 (here -3..3: QSGD, TernGrad) gets its ranges and
    histograms (``sh``, ``shs``: with their samples; ``ans``: context statistics; ``rla``:
    token statistics) back in one copy, then its chunks' bits (or units) and its payload
    together, bounded by its statistics: two in all. Levels beyond the first window counted
    (int16 escapes; for ``ans`` and ``rla``, levels up to 36) are counted again in their
    own: one copy more, the same bytes."""
    from horovod_huffman.codec.encoders import gpu

    def copies(levels):
        counts = {}
        monkeypatch.setattr(gpu, "copy_to_host", _Counted(gpu, counts).copy_to_host)
        coded = encoder(name).encode_parts(cuda.to_device(levels), [levels.size])
        monkeypatch.undo()
        assert np.array_equal(coded[0], encoder(name).encode(levels))
        return counts["copy_to_host"]

    assert copies(PATTERNS["sparse"]) == 2
    assert copies(PATTERNS["escapes"] if name in ("huffman", "rlh", "sh", "shs") else
                  PATTERNS["sparse"] * 12) == 3


@pytest.mark.parametrize("name", ["huffman", "sh", "rlh", "shs", "ans", "rla"])
def test_a_batch_of_many_parts_counts_first_where_the_encoders_levels_have_been(name,
                                                                                monkeypatch):
    """A batch of 40 parts would bring back too many bins counted in the widest first window
    (gpu.MAX_GUESSED_BINS, MAX_NEAR_BINS), so the first counts its ranges first: three
    copies (``ans``, whose small parts take fewer bins, may take two). An encoder remembers
    the largest |level| it has coded (``near``), and the next batch counts first in
    -near..near: two copies. The bytes are each part's alone."""
    from horovod_huffman.codec.encoders import gpu
    levels = PATTERNS["sparse"]
    sizes = np.diff(np.linspace(0, levels.size, 41).astype(np.int64))
    parts = np.split(levels, np.cumsum(sizes)[:-1])
    enc, reference = encoder(name), encoder(name)
    copies = []
    for _ in range(2):
        counts = {}
        monkeypatch.setattr(gpu, "copy_to_host", _Counted(gpu, counts).copy_to_host)
        coded = enc.encode_parts(cuda.to_device(levels), sizes)
        monkeypatch.undo()
        copies.append(counts["copy_to_host"])
        for part, got in zip(parts, coded):
            assert bytes(got) == bytes(reference.encode(part))
    assert enc.near == int(np.abs(levels).max())
    assert copies[1] == 2 and copies[0] == (2 if name == "ans" else 3)


@pytest.mark.parametrize("name", ["huffman", "sh", "rlh", "shs", "ans", "rla"])
@pytest.mark.parametrize("pattern", ["sparse", "dense", "escapes", "int32"])
def test_a_payloads_bound_holds_it_and_a_part_past_its_bound_is_coded_again(name, pattern,
                                                                            monkeypatch):
    """The Huffman family bounds every part's payload from its full histogram of symbols
    (gpu.bits_bound), ``ans`` and ``rla`` from their plan's estimate (gpu.units_bound), and
    bring its chunks' bits and words back in one copy: the bound is at least the payload's
    bits (for the Huffman family, equal to them less the chunks' padding without escapes). A
    part whose bound is too small (here: 0 bits) is written again once its chunks' bits are
    back, and gives the same bytes: the Huffman family codes it again (two copies more), the
    rANS coders pack its coded units again (one copy more)."""
    from horovod_huffman.codec.encoders import gpu
    levels = PATTERNS[pattern]
    bounded = "units_bound" if name in ("ans", "rla") else "bits_bound"
    bits_bound = getattr(gpu, bounded)

    def encoded(bound):
        bounds, counts = [], {}

        def recorded(*args):
            bounds.append(bound(*args))
            return bounds[-1]
        monkeypatch.setattr(gpu, bounded, recorded)
        monkeypatch.setattr(gpu, "copy_to_host", _Counted(gpu, counts).copy_to_host)
        coded = encoder(name).encoded_parts(cuda.to_device(levels), [levels.size])[0]
        monkeypatch.undo()
        assert np.array_equal(wire.frame(coded), encoder(name).encode(levels))  # (sh, shs:
        # a fresh encoder draws the same sample)
        return coded, bounds, counts["copy_to_host"]

    coded, bounds, copies = encoded(bits_bound)
    if not bounds:                      # a part coded on the host (escapes past the window)
        return
    assert len(bounds) == 1
    assert bounds[0] >= coded.bits - 32 * -(-levels.size // CHUNK)
    if pattern in ("sparse", "dense") and bounded == "bits_bound":  # no escapes: the bits
        assert bounds[0] <= coded.bits
    _, _, again = encoded(lambda *args: 0)
    assert again == copies + (2 if bounded == "bits_bound" else 1)


@pytest.mark.parametrize("name", ["rlh", "sh", "ans", "rla"])
def test_a_batch_of_messages_is_each_message_in_turn(name, monkeypatch):
    """message.encode_batch (a two-phase scatter's shards, Codec.encode_parts) of device
    tensors gives the bytes of ``encode`` of each in turn, for tensors of several shapes and
    sizes, an empty one included; the Huffman family, ``ans`` and ``rla`` code five tensors,
    their scales included, in the launches and copies to the host that one takes."""
    from horovod_huffman.codec import message
    from horovod_huffman.codec.encoders import gpu
    levels = PATTERNS["sparse"]
    cuts = [(0, 130), (130, 130), (130, 200), (200, 263), (263, N)]
    shapes = [(130,), (0,), (7, 10), (63,), (N - 263,)]

    def tensors(device):
        out = []
        for (a, b), shape in zip(cuts, shapes):
            scales = np.linspace(0.5, 2.0, -(-(b - a) // 16)).astype(np.float32)
            lv = levels[a:b]
            if device:
                lv, scales = cuda.to_device(lv), cuda.to_device(scales)
            out.append(hh.QuantizedTensor(lv, scales, shape, np.dtype(np.float32), 16))
        return out

    alone = encoder(name)          # one encoder: a sampling encoder's samples go in order
    want = [_bytes(message.encode(qt, alone)) for qt in tensors(False)]
    assert [_bytes(m) for m in message.encode_batch(tensors(False), encoder(name))] == want
    assert [_bytes(m) for m in message.encode_batch(tensors(True), encoder(name))] == want
    if name in BATCHED + ["ans", "rla"]:
        def counted(qts):
            counts = {}
            monkeypatch.setattr(gpu, "cuda_tokens", _Counted(gpu.cuda_tokens, counts))
            monkeypatch.setattr(gpu, "cuda_ans", _Counted(gpu.cuda_ans, counts))
            monkeypatch.setattr(gpu, "cuda_rla", _Counted(gpu.cuda_rla, counts))
            monkeypatch.setattr(gpu, "copy_to_host", _Counted(gpu, counts).copy_to_host)
            monkeypatch.setattr(message, "copy_to_host", _Counted(message, counts).copy_to_host)
            message.encode_batch(qts, encoder(name))
            monkeypatch.undo()
            return counts
        one = counted(tensors(True)[-1:])
        many = counted(tensors(True))
        assert many == one


def _bytes(msg):
    """The bytes a message (message.Message) writes."""
    out = np.empty(msg.nbytes, dtype=np.uint8)
    msg.write(out, 0)
    return bytes(out)


@pytest.mark.parametrize("pattern", ["sparse", "dense", "escapes", "int32", "one"])
@pytest.mark.parametrize("name", DEVICE_ENCODERS + ["elias_gamma", "qsgd_elias"])
def test_device_decode_reads_host_streams(name, pattern):
    """Device decoders read the host's streams (a constant stream's:
    test_device_decode_dequantizes_and_sums_in_the_decoding_pass)."""
    levels = PATTERNS[pattern]
    out = hh.decode(encoder(name).encode(levels), device="cuda")
    assert is_device_array(out) and not isinstance(out, np.ndarray)
    got = out.copy_to_host()
    assert got.dtype == levels.dtype
    np.testing.assert_array_equal(got, levels)


@pytest.mark.parametrize("name,work", [(name, np.float32) for name in DEVICE_ENCODERS] +
                         [("elias_gamma", np.float32), ("rlh", np.float64), ("raw", np.float64)])
def test_device_decode_dequantizes_and_sums_in_the_decoding_pass(name, work):
    """Two ranks' messages decoded on the device straight into one float total
    (message.Contents.dequantize_into: the first assigned, the second added, into a slice of
    a larger array) hold, bit for bit, the host's dequantize-then-add sum; runs across chunks,
    then a constant tensor."""
    from horovod_huffman.codec.message import contents
    rng = np.random.default_rng(11)
    tensors = [PATTERNS["sparse"], np.full(N, -3, np.int8)]
    expected = None
    result = cuda.to_device(np.full(N + 10, 7, work))
    total = result[5:N + 5]
    for rank, levels in enumerate(tensors):
        qt = hh.QuantizedTensor(levels, rng.random(-(-N // 64)).astype(np.float32), (N,),
                                np.dtype(work), 64)
        part = hh.dequantize(qt).astype(work)
        expected = part if expected is None else expected + part
        contents(hh.pack(qt, encoder(name))).dequantize_into(total, rank > 0, cuda.stream())
    got = result.copy_to_host()
    assert got[5:N + 5].tobytes() == expected.tobytes()
    assert (got[:5] == 7).all() and (got[N + 5:] == 7).all()


@pytest.mark.parametrize("names", [("rlh",) * 3, ("huffman", "sh", "shs", "rlh"),
                                   ("rlh", "ans", "rlh", "rlh"), ("rlh", "huffman")],
                         ids="-".join)
def test_a_decode_group_sums_the_ranks_in_one_launch_as_the_host_does(names, monkeypatch):
    """The ranks' streams of one total decoded through a gpu.StreamGroup (DeviceOps.decode_group)
    give, bit for bit, the host's dequantize-then-add sum in rank order; the Huffman family's
    streams between two streams of other encoders decode in one launch (the last case: a
    constant huffman stream, which is written at once, in its turn)."""
    from horovod_huffman.codec.encoders import gpu
    from horovod_huffman.codec.message import contents
    rng = np.random.default_rng(5)
    levels = [np.roll(PATTERNS["sparse"], 17 * r) for r in range(len(names))]
    if names == ("rlh", "huffman"):
        levels[1] = np.full(N, -3, np.int8)
    expected = None
    messages = []
    for name, tensor in zip(names, levels):
        qt = hh.QuantizedTensor(tensor, rng.random(-(-N // 64)).astype(np.float32), (N,),
                                np.dtype(np.float32), 64)
        part = hh.dequantize(qt).astype(np.float32)
        expected = part if expected is None else expected + part
        messages.append(contents(hh.pack(qt, encoder(name))))
    counts = {}
    monkeypatch.setattr(gpu, "cuda_decode", _Counted(gpu.cuda_decode, counts))
    assert _summed_in_one_group(messages).tobytes() == expected.tobytes()
    grouped = [name in BATCHED and levels[i].min() != levels[i].max()
               for i, name in enumerate(names)]
    runs = sum(1 for i, g in enumerate(grouped) if g and (i == 0 or not grouped[i - 1]))
    assert counts.get("launch", 0) >= runs
    if all(grouped):
        assert counts["launch"] == 1


@pytest.mark.parametrize("name", ["ans", "rla"])
@pytest.mark.parametrize("chunks, launches", [((1, 4, 2), 1), ((2, 3, 1), 2)])
def test_rans_streams_of_several_chunk_sizes_sum_in_one_launch(name, chunks, launches,
                                                               monkeypatch):
    """Ranks whose ``ans`` or ``rla`` streams chose different chunk sizes (each rank's own
    estimate, GrowingChunks) still decode into their total in one launch, every element
    getting its additions in rank order: the host's sum, bit for bit (kernels/cuda_ans.py
    note 8). A stream whose chunks do not nest in the others' (3 against 2 chunks of CHUNK)
    starts a launch of its own."""
    from horovod_huffman.codec.encoders import gpu
    from horovod_huffman.codec.message import contents
    rng = np.random.default_rng(6)
    expected, messages = None, []
    for rank, chunk in enumerate(c * CHUNK for c in chunks):
        qt = hh.QuantizedTensor(np.roll(PATTERNS["dense"], 29 * rank),
                                rng.random(-(-N // 64)).astype(np.float32), (N,),
                                np.dtype(np.float32), 64)
        part = hh.dequantize(qt).astype(np.float32)
        expected = part if expected is None else expected + part
        messages.append(contents(hh.pack(qt, encoder(name, chunk_levels=chunk))))
    counts = {}
    module = "cuda_ans" if name == "ans" else "cuda_rla"
    monkeypatch.setattr(gpu, module, _Counted(getattr(gpu, module), counts))
    assert _summed_in_one_group(messages).tobytes() == expected.tobytes()
    assert counts == {"decode_streams": launches, "launch": launches}


def _summed_in_one_group(messages):
    """The host copy of the total that the ranks' ``messages`` (message.Contents, in rank
    order) decode into through one DeviceOps decode group: the first assigned, the others
    added."""
    from horovod_huffman.exchange.array_ops import DeviceOps
    ops = DeviceOps(cuda.stream())
    total = None
    with ops.decode_group() as group:
        for rank, message in enumerate(messages):
            total = ops.decode_into(message, total, rank > 0, group, f"rank {rank}")
    group.checked().wait()
    return total.copy_to_host()


def test_a_decode_group_decodes_slices_of_one_array_in_one_launch(monkeypatch):
    """A two-phase gather's summed shards, of different lengths (an empty one included), each
    decoded through one gpu.StreamGroup into its slice of the bucket (``within``), give the
    host's dequantized shards bit for bit in one launch; a corrupted shard is named by its
    label."""
    from horovod_huffman.codec.encoders import gpu
    from horovod_huffman.codec.message import contents
    from horovod_huffman.exchange.array_ops import DeviceOps
    rng = np.random.default_rng(9)
    bounds = [0, 2 * CHUNK + 5, 2 * CHUNK + 5, 3 * CHUNK, N]
    levels = np.roll(PATTERNS["sparse"], 11)
    scales = rng.random(-(-N // 16)).astype(np.float32)
    names = ["rlh", "huffman", "shs", "sh"]
    messages, expected = [], np.zeros(N, np.float32)
    for j, name in enumerate(names):
        a, b = bounds[j], bounds[j + 1]
        qt = hh.QuantizedTensor(levels[a:b], scales[:-(-(b - a) // 16)], (b - a,),
                                np.dtype(np.float32), 16)
        expected[a:b] = hh.dequantize(qt)
        messages.append(hh.pack(qt, encoder(name)))

    def gathered(messages):
        ops = DeviceOps(cuda.stream())
        result = cuda.to_device(np.full(N, np.nan, np.float32))
        with ops.decode_group() as group:
            for j, message in enumerate(messages):
                a, b = bounds[j], bounds[j + 1]
                ops.decode_into(contents(message), result[a:b], False, group, f"shard {j}",
                                (result, a))
        group.checked().wait()
        return result.copy_to_host()

    counts = {}
    monkeypatch.setattr(gpu, "cuda_decode", _Counted(gpu.cuda_decode, counts))
    assert gathered(messages).tobytes() == expected.tobytes()
    assert counts["launch"] == 1
    bad = list(messages)
    bad[3] = bad[3].copy()
    bad[3][-20] ^= 0x40
    bad[3] = reseal(bad[3])
    with pytest.raises(hh.DecodeError, match="shard 3"):
        gathered(bad)


@pytest.mark.parametrize("name", ["rlh", "ans"])
def test_a_decode_group_names_the_stream_it_cannot_decode(name):
    """A corrupted stream in a group makes that group's verdict raise DecodeError naming the
    stream's label. The statuses of the groups of one DeviceOps (the Huffman family's launch
    and any other device decoder's) stay on the device until a verdict is waited for, which
    reads them all in one copy: a group of good streams before it passes."""
    from horovod_huffman.codec.message import contents
    from horovod_huffman.exchange.array_ops import DeviceOps
    qt = hh.QuantizedTensor(PATTERNS["sparse"], np.ones(-(-N // 64), np.float32), (N,),
                            np.dtype(np.float32), 64)
    good = hh.pack(qt, encoder(name))
    bad = good.copy()
    bad[-40] ^= 0x5A                           # inside the payload's last chunk
    ops = DeviceOps(cuda.stream())
    with ops.decode_group() as first:
        ops.decode_into(contents(good), None, False, first, "rank 0")
    with ops.decode_group() as second:
        total = ops.decode_into(contents(good), None, False, second, "rank 0")
        ops.decode_into(contents(reseal(bad)), total, True, second, "rank 1")
    assert not first.checked().done() and not second.checked().done()
    first.checked().wait()
    assert second.checked().done()
    with pytest.raises(hh.DecodeError, match="rank 1"):
        second.checked().wait()


@pytest.mark.parametrize("name", ["rlh", "raw"])
def test_dequantizing_decode_checks_its_input(name):
    """A stream of another length raises DecodeError before anything is written; a resealed
    bit flip raises DecodeError in the dequantizing decode exactly when the host's decode
    raises, and otherwise gives the host's values."""
    from horovod_huffman.codec.message import contents
    qt = hh.QuantizedTensor(PATTERNS["sparse"], np.ones(-(-N // 64), np.float32), (N,),
                            np.dtype(np.float32), 64)
    buf = hh.pack(qt, encoder(name))
    for size in (N - 1, N + 1):
        other = cuda.to_device(np.full(size, 7, np.float32))
        with pytest.raises(hh.DecodeError):
            hh.codec.encoders.decode_dequantized(contents(buf).stream, other,
                                           cuda.to_device(qt.scales), 64, False, covered=True)
        assert (other.copy_to_host() == 7).all()
    rng = np.random.default_rng(4)
    for forged in _mutations(bytes(buf), rng, 6 if SIMULATED else 200):
        try:
            host = hh.dequantize(hh.unpack(np.frombuffer(forged, np.uint8))).astype(np.float32)
        except hh.DecodeError:
            host = None
        total = cuda.to_device(np.zeros(N, np.float32))
        try:
            contents(np.frombuffer(forged, np.uint8)).dequantize_into(total, False,
                                                                      cuda.stream())
        except hh.DecodeError:
            assert host is None
        else:
            assert host is not None and total.copy_to_host().tobytes() == host.tobytes()


@pytest.mark.parametrize("name", ["huffman", "sh"])
def test_block_decoders_agree_where_codes_never_resynchronize(name):
    """Eight equally likely levels get codes of 3 bits, which a slice entered off a multiple
    of 3 never falls into step with: every slice waits for the one before it (the block
    decoder's longest chain of rounds, kernels/cuda_decode.py). Chunks of 50 and 64 levels
    give slices of 10 and 12 bits (16 threads) or 1 and 1 (256): starts off and on the codes."""
    levels = np.random.default_rng(3).integers(-4, 4, 4 * 64 + 50).astype(np.int8)
    for chunk in (50, 64):
        buf = encoder(name, chunk_levels=chunk).encode(levels)
        np.testing.assert_array_equal(hh.decode(buf, device="cuda").copy_to_host(), levels)


def test_empty_tensors_on_the_device():
    for name in DEVICE_ENCODERS:
        buf = encoder(name).encode(cuda.to_device(np.zeros(0, np.int8)))
        assert bytes(buf) == bytes(encoder(name).encode(np.zeros(0, np.int8)))
        back = hh.decode(buf)
        assert back.size == 0 and back.dtype == np.int8
        assert hh.decode(buf, device="cuda").size == 0


@pytest.mark.parametrize("name", ["elias_rle", "auto"])
def test_encoders_without_kernels_take_device_arrays(name):
    levels = PATTERNS["sparse"]
    buf = hh.get_encoder(name).encode(cuda.to_device(levels))
    assert bytes(buf) == bytes(hh.get_encoder(name).encode(levels))
    np.testing.assert_array_equal(hh.decode(buf), levels)


def test_device_levels_are_checked():
    with pytest.raises(ValueError, match="1-D"):
        hh.get_encoder("rlh").encode(cuda.to_device(np.zeros((4, 4), np.int8)))
    with pytest.raises(TypeError, match="signed integer"):
        hh.get_encoder("rlh").encode(cuda.to_device(np.zeros(4, np.uint8)))
    with pytest.raises(ValueError, match="int32 range"):
        hh.get_encoder("raw").encode(cuda.to_device(np.array([0, 2**40], np.int64)))
    with pytest.raises(ValueError, match="device"):
        hh.decode(encoder("rlh").encode(PATTERNS["one"]), device="tpu")


def _mutations(buf, rng, count):
    """Streams with one payload bit flipped and the checksum recomputed."""
    body_end = len(buf) - wire.CHECKSUM.size
    for _ in range(count):
        mutated = bytearray(buf)
        pos = int(rng.integers(body_end // 2, body_end))      # the payload sits at the end
        mutated[pos] ^= 1 << int(rng.integers(0, 8))
        yield reseal(mutated)


def _decode_or_none(buf, **kw):
    try:
        out = hh.decode(buf, **kw)
    except hh.DecodeError as e:
        assert str(e)
        return None
    return out if isinstance(out, np.ndarray) else out.copy_to_host()


@pytest.mark.parametrize("name", DEVICE_ENCODERS)
def test_corrupt_payloads_fail_on_the_device_as_on_the_host(name):
    """A resealed bit flip either decodes identically on both paths or raises DecodeError on
    both; the device kernels never read or write out of bounds (the simulator checks)."""
    _both_paths_agree(encoder(name).encode(PATTERNS["sparse"]), np.random.default_rng(1),
                      6 if SIMULATED else 200)


def _both_paths_agree(buf, rng, count):
    """``count`` resealed bit flips of the stream ``buf`` each decode identically on the host
    and the device, or raise DecodeError on both."""
    for forged in _mutations(bytes(buf), rng, count):
        host = _decode_or_none(forged)
        device = _decode_or_none(forged, device="cuda")
        assert (host is None) == (device is None)
        if host is not None:
            np.testing.assert_array_equal(host, device)


@pytest.mark.parametrize("pattern", ["sparse", "escapes"])
def test_forged_rla_streams_fail_on_the_device_as_on_the_host(pattern):
    """The warp decoder's walk (kernels/cuda_rla.py note 3) on forged ``rla`` streams: two
    contexts (sparse levels) or host-written escapes (levels past 4095 codes), more bit flips
    than the test of every encoder: each decodes identically on both paths or raises
    DecodeError on both."""
    _both_paths_agree(encoder("rla").encode(PATTERNS[pattern]), np.random.default_rng(12),
                      16 if SIMULATED else 400)


@pytest.mark.parametrize("sampled", [False, True])
def test_ans_contexts_on_the_device(sampled, monkeypatch):
    """Blocks of levels in classes with a table each: the device plans the same classes (from
    every block's symbols, or every few blocks'), writes the host's bytes and decodes them,
    forged class ids included."""
    block_bits = 4 if SIMULATED else 8
    if sampled:                                  # every 6th of the 24 blocks is counted
        monkeypatch.setattr(hh.codec.encoders.ans, "SAMPLED_LEVELS", 4 << block_bits)
    rng = np.random.default_rng(8)
    scale = np.repeat(rng.choice([0.2, 1.0, 4.0], 24), 1 << block_bits)
    levels = np.clip(np.rint(rng.laplace(0, scale)), -16, 16).astype(np.int8)
    ans = encoder("ans", block_bits=block_bits)
    assert ans.plan(levels).contexts
    host = ans.encode(levels)
    assert bytes(ans.encode(cuda.to_device(levels))) == bytes(host)
    np.testing.assert_array_equal(hh.decode(host, device="cuda").copy_to_host(), levels)
    for forged in _mutations(bytes(host), rng, 6 if SIMULATED else 200):
        device = _decode_or_none(forged, device="cuda")
        host_out = _decode_or_none(forged)
        assert (host_out is None) == (device is None)


def test_ans_row_model_streams_decode_on_the_device():
    """A stream with the row model decodes on the host and lands on the device, forged ones
    failing there as on the host; device levels encode without the layout (the model is
    fitted on the host only): the host's bytes without it."""
    rng = np.random.default_rng(9)
    levels = np.clip(np.rint(np.outer(rng.normal(0, 1, 24), rng.normal(0, 6, 20)) +
                             rng.normal(0, 0.5, (24, 20))), -127, 127).astype(np.int8).ravel()
    ans = encoder("ans")
    host = ans.encode(levels, layout=[(24, 20)])
    assert bytes(host) != bytes(ans.encode(levels))
    np.testing.assert_array_equal(hh.decode(host, device="cuda").copy_to_host(), levels)
    assert bytes(ans.encode(cuda.to_device(levels), layout=[(24, 20)])) == \
        bytes(ans.encode(levels))
    for forged in _mutations(bytes(host), rng, 6 if SIMULATED else 200):
        device = _decode_or_none(forged, device="cuda")
        host_out = _decode_or_none(forged)
        assert (host_out is None) == (device is None)


def test_rla_contexts_on_the_device():
    """Sparse levels take two tables (one after a zero run): the device counts the tokens
    under their contexts, plans the same tables, writes the host's bytes (extras spanning
    chunk boundaries included) and decodes them; forged streams fail on both paths alike."""
    from test_rla import sparse_levels
    levels = sparse_levels(2000 if SIMULATED else 300_000, 0.2, seed=3)
    levels[500:900] = 0                                        # a run with extra bits
    rla = encoder("rla", chunk_levels=256 if SIMULATED else 4096)
    assert rla.sized_plan(levels)[0].freqs.shape[0] == 2
    host = rla.encode(levels)
    assert bytes(rla.encode(cuda.to_device(levels))) == bytes(host)
    np.testing.assert_array_equal(hh.decode(host, device="cuda").copy_to_host(), levels)
    rng = np.random.default_rng(9)
    for forged in _mutations(bytes(host), rng, 6 if SIMULATED else 200):
        device = _decode_or_none(forged, device="cuda")
        host_out = _decode_or_none(forged)
        assert (host_out is None) == (device is None)


@pytest.mark.parametrize("name", hh.codec.encoders.GROWING)
def test_sparse_chunks_grow_on_the_device(name, monkeypatch):
    """TernGrad-like levels (2% non-zero): the device estimates the stream as the host does,
    grows its chunks alike (16 times CHUNK), writes the host's bytes, in two copies to the
    host as chunks that do not grow, and decodes them."""
    from horovod_huffman.codec.encoders import gpu
    rng = np.random.default_rng(11)
    n = 4000 if SIMULATED else 1_000_000
    levels = np.where(rng.random(n) < 0.02, rng.choice(np.array([-1, 1], np.int8), n), 0)
    levels = levels.astype(np.int8)
    enc = encoder(name, max_chunk_levels=16 * CHUNK)
    plan = enc.plan(levels) if name == "ans" else enc.sized_plan(levels)[0]
    assert plan.chunk == 16 * CHUNK
    host = enc.encode(levels)
    counts = {}
    monkeypatch.setattr(gpu, "copy_to_host", _Counted(gpu, counts).copy_to_host)
    assert bytes(enc.encode(cuda.to_device(levels))) == bytes(host)
    monkeypatch.undo()
    assert counts["copy_to_host"] == 2
    np.testing.assert_array_equal(hh.decode(host, device="cuda").copy_to_host(), levels)


@pytest.mark.parametrize("pattern", ["sparse", "zero chunks", "long runs", "dense"])
def test_rla_grown_chunks_take_their_counts_from_the_chunks_they_join(pattern):
    """``gpu.rla_grown`` gives a part's statistics at 4 times its chunk size from those
    counted at that size: what counting again at the grown size gives, token for token.
    Runs that cross chunk ends, chunks of one run (zero chunks, long runs) and a last chunk
    cut short are among them."""
    from horovod_huffman.codec.device import arena
    from horovod_huffman.codec.encoders import gpu
    rng = np.random.default_rng(21)
    n = 23 * CHUNK + CHUNK // 3
    if pattern == "sparse":
        levels = np.where(rng.random(n) < 0.03, rng.choice([-1, 1], n), 0)
    elif pattern == "zero chunks":
        levels = np.where(rng.random(n) < 0.01, rng.integers(-3, 4, n), 0)
        levels[3 * CHUNK:9 * CHUNK + 5] = 0
        levels[12 * CHUNK - 7:14 * CHUNK + 3] = 2
    elif pattern == "long runs":
        levels = np.repeat(rng.integers(-2, 3, n), rng.integers(1, CHUNK, n))[:n]
    else:
        levels = rng.integers(-4, 5, n)
    levels = levels.astype(np.int8)
    stream = cuda.stream()
    device = cuda.to_device(levels, stream=stream)
    lo, hi = int(levels.min()), int(levels.max())
    count = gpu.RlaCount(0, n, lo, hi - lo + 1, CHUNK)
    grown = count._replace(chunk=4 * CHUNK)
    with arena(stream):
        ends = cuda.device_array(n, np.uint32)
        found, = gpu.rla_statistics(device, [count], ends, stream)
        counted, = gpu.rla_statistics(device, [grown], ends, stream)
    derived = gpu.rla_grown(found, count, grown.chunk)
    for field in gpu.RlaFound._fields:
        np.testing.assert_array_equal(getattr(derived, field), getattr(counted, field), field)


def _rla_found(levels, base, window, chunk):
    """The RlaFound of host ``levels`` with runs cut at ``chunk``, token by token, as
    cuda_rla.token_statistics counts it."""
    from horovod_huffman.codec.encoders import gpu
    from horovod_huffman.kernels.maxima import RUN_BUCKETS
    from horovod_huffman.kernels.runs import BUCKET_EXTRA, run_bucket
    contexts = np.zeros((2, RUN_BUCKETS * window + 1), dtype=np.int64)
    tokens, extra_bits, edges = [], [], []
    for lo in range(0, levels.size, chunk):
        part = levels[lo:lo + chunk].astype(np.int64)
        ends = np.flatnonzero(np.append(part[1:] != part[:-1], True))
        runs = np.diff(ends, prepend=-1)
        context = 0
        for end, run in zip(ends, runs):
            contexts[context, run_bucket(int(run)) * window + part[end] - base] += 1
            last_context, context = context, int(part[end] == 0)
        tokens.append(ends.size)
        extra_bits.append(sum(int(BUCKET_EXTRA[run_bucket(int(r))]) for r in runs))
        edges.append((runs[0], part[0], runs[-1], part[-1], last_context))
    return gpu.RlaFound(contexts, np.array(tokens), np.array(extra_bits),
                        np.array(edges, dtype=np.int64))


def test_rla_grown_counts_match_a_count_at_the_grown_size_token_for_token():
    """``gpu.rla_grown`` against a token-by-token count of host levels at the grown size:
    400 random tensors of short chunks (8 levels) grown 2, 4 or 8 times, whose runs cross
    chunk ends, fill whole chunks and whole grown chunks, with and without level 0."""
    from horovod_huffman.codec.encoders import gpu
    rng = np.random.default_rng(4)
    for trial in range(400):
        n = int(rng.integers(1, 120))
        low = int(rng.integers(-2, 1)) if trial % 5 else 1
        levels = np.repeat(rng.integers(low, low + 3, n),
                           rng.integers(1, int(rng.choice([2, 6, 20])), n))[:n]
        base, window = int(levels.min()), int(levels.max() - levels.min() + 1)
        count = gpu.RlaCount(0, n, base, window, 8)
        grown = 8 * int(rng.choice([2, 4, 8]))
        derived = gpu.rla_grown(_rla_found(levels, base, window, 8), count, grown)
        counted = _rla_found(levels, base, window, grown)
        for field in gpu.RlaFound._fields:
            np.testing.assert_array_equal(getattr(derived, field), getattr(counted, field),
                                          f"{field} of {levels.tolist()} grown to {grown}")


def test_rla_whose_grown_chunks_pass_the_token_limit_is_coded_on_the_host():
    """Grown chunks merge runs that chunk ends had cut into new tokens: 2048 distinct tokens
    (ANS_MAX_TOKENS) with chunks of 64 levels, 2049 with the grown ones, where one takes the
    escape. The device hands such levels to the host, as when its first count passes the
    limit: the host's bytes."""
    from horovod_huffman.codec.encoders.runlength import token_counts
    from horovod_huffman.kernels.maxima import ANS_MAX_TOKENS, RUN_BUCKETS
    values = np.arange(1, 2048, dtype=np.int16)
    levels = np.zeros(8192, np.int16)
    levels[:64] = values[:64]
    tail = np.concatenate([values[64:], values[-1:]])
    levels[128:128 + tail.size] = tail

    def distinct(chunk):
        tokens = token_counts(levels, chunk, contexts=True)
        return np.count_nonzero(tokens.counts[:tokens.window * RUN_BUCKETS])
    rla = encoder("rla", chunk_levels=64, max_chunk_levels=8192)
    plan, _ = rla.sized_plan(levels)
    assert distinct(64) == ANS_MAX_TOKENS and distinct(plan.chunk) > ANS_MAX_TOKENS
    host = rla.encode(levels)
    assert bytes(rla.encode(cuda.to_device(levels))) == bytes(host)
    np.testing.assert_array_equal(hh.decode(host, device="cuda").copy_to_host(), levels)


def test_rla_past_its_token_limit_is_coded_on_the_host():
    """More distinct tokens than ANS_MAX_TOKENS: the rarer take the escape, which the device
    leaves to the host (the same bytes); the device decodes the escapes."""
    from horovod_huffman.codec.encoders.runlength import token_counts
    from horovod_huffman.kernels.maxima import ANS_MAX_TOKENS
    rng = np.random.default_rng(5)
    values = rng.integers(-450, 451, 4000).astype(np.int16)      # within rlh's window
    levels = np.repeat(values, rng.integers(1, 5, values.size))
    assert np.count_nonzero(token_counts(levels, CHUNK)[2]) > ANS_MAX_TOKENS
    rla = encoder("rla")
    host = rla.encode(levels)
    assert bytes(rla.encode(cuda.to_device(levels))) == bytes(host)
    np.testing.assert_array_equal(hh.decode(host, device="cuda").copy_to_host(), levels)


QUANTIZERS = [hh.QSGD(levels=8, bucket_size=64, seed=1), hh.QSGD(levels=127, seed=2),
              hh.TernGrad(seed=3), hh.TernGrad(clip=2.5, bucket_size=100, seed=4)]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("quantizer", QUANTIZERS, ids=repr)
def test_device_quantization_equals_the_host(quantizer, dtype):
    rng = np.random.default_rng(0)
    grad = (rng.standard_normal((23, 17)) * 1e-2).astype(dtype)
    grad[3, 4] = np.nan                                        # a non-finite bucket survives
    host = quantizer.quantize(grad, seed=5)
    dev = quantizer.quantize(cuda.to_device(grad), seed=5)
    np.testing.assert_array_equal(dev.levels.copy_to_host(), host.levels)
    np.testing.assert_array_equal(dev.scales.copy_to_host(), host.scales)
    assert dev.shape == host.shape and dev.dtype == host.dtype
    back = hh.dequantize(dev).copy_to_host()
    assert back.shape == grad.shape and back.dtype == grad.dtype
    np.testing.assert_array_equal(back, hh.dequantize(host))
    # the NaN's bucket dequantizes to NaN, every other bucket to finite values
    nan_at = np.ravel_multi_index((3, 4), grad.shape) // host.bucket_size
    in_nan_bucket = np.arange(back.size) // host.bucket_size == nan_at
    np.testing.assert_array_equal(np.isnan(back.reshape(-1)), in_nan_bucket)
    assert np.isfinite(back.reshape(-1)[~in_nan_bucket]).all()


def test_quantize_encode_decode_dequantize_stays_on_the_device():
    rng = np.random.default_rng(3)
    grad = cuda.to_device(rng.standard_normal(N).astype(np.float32))
    qt = hh.QSGD(levels=4, bucket_size=64, seed=0).quantize(grad)
    buf = encoder("rlh").encode(qt.levels)
    levels = hh.decode(buf, device="cuda")
    back = hh.dequantize(hh.QuantizedTensor(levels, qt.scales, qt.shape, qt.dtype,
                                            qt.bucket_size))
    np.testing.assert_array_equal(back.copy_to_host(),
                                  hh.dequantize(hh.QSGD(levels=4, bucket_size=64, seed=0)
                                                .quantize(grad.copy_to_host())))


def _torch_cuda():
    """torch, where it is installed and sees a real GPU (not the simulator); else None."""
    if SIMULATED:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(_torch_cuda() is None, reason="needs torch with a real CUDA GPU")
@pytest.mark.parametrize("shape", [(1 << 22,), (1024, 4096)], ids=["flat", "matrix"])
@pytest.mark.parametrize("name", DEVICE_ENCODERS + ["auto"])
def test_torch_gradients_pack_to_the_host_bytes(name, shape):
    """A torch CUDA gradient of 4M coordinates (quantized on the device) packs to the bytes of
    the same gradient packed on the host, and ``unpack(device="cuda")`` gives back its levels
    and values: the path a torch user's CUDA tensors take (default chunks, sampling seeded)."""
    torch = _torch_cuda()
    n = int(np.prod(shape))
    grad = (torch.randn(n, device="cuda") * torch.linspace(0.1, 2.0, n, device="cuda"))
    grad = grad.reshape(shape)

    def make():
        return hh.get_encoder(name, seed=1) if name in ("sh", "shs") else name

    dev = hh.QSGD(levels=8, seed=0).quantize(grad, seed=7)
    host = hh.QSGD(levels=8, seed=0).quantize(grad.cpu().numpy(), seed=7)
    buf = hh.pack(dev, make())
    assert np.array_equal(buf, hh.pack(host, make()))
    back = hh.unpack(buf, device="cuda")
    np.testing.assert_array_equal(back.levels.copy_to_host(), host.levels)
    np.testing.assert_array_equal(hh.dequantize(back).copy_to_host().reshape(shape),
                                  hh.dequantize(host))


@pytest.mark.parametrize("quantizer,kind,name,n_ranks", [
    (hh.QSGD(levels=8, bucket_size=64), "allgather", "rlh", 2),
    (hh.QSGD(levels=8, bucket_size=64), "two_phase", "rlh", 3),
    (hh.QSGD(levels=8, bucket_size=64), "two_phase", "auto", 2),
    (hh.TernGrad(clip=2.5), "two_phase", "rlh", 2),
    (hh.TernGrad(clip=2.5), "two_phase", "auto", 2)], ids=repr)
def test_exchanges_run_on_the_device(quantizer, kind, name, n_ranks):
    """The exchanges on device buckets (DeviceOps) for in-process ranks: unbiased QSGD (no
    error feedback) sends exactly the host's bytes and sums to the host's result (at 3 ranks
    the scatter codes each rank's two shards as one batch); biased TernGrad exercises error
    feedback on the device, whose residual contracts (the allgather's device error feedback
    is the overflow-step test's below). With ``auto`` the third step encodes with the encoder
    chosen at the second (Codec.encode); the others take two steps, the second with the
    first's residual."""
    from horovod_huffman.exchange.allreduce import Job, allgather_sum, two_phase_sum
    from horovod_huffman.exchange.array_ops import DeviceOps, HostOps
    from horovod_huffman.exchange.codec_state import Codec
    from horovod_huffman.exchange.local import LocalGroup, run_ranks

    rng = np.random.default_rng(5)
    grads = [rng.standard_normal(300).astype(np.float32) for _ in range(n_ranks)]
    stream = cuda.stream()

    def run(ops, codecs, step, device):
        group = LocalGroup(n_ranks)
        job = Job("w", 7, step, 1, 300, 1200)
        works = [cuda.to_device(g, stream=stream) if device else g for g in grads]
        gens = [two_phase_sum(c, ops, group.member(r), job, works[r], 64) if kind == "two_phase"
                else allgather_sum(c, ops, group.member(r), job, works[r])
                for r, c in enumerate(codecs)]
        return run_ranks(gens), group

    host = [Codec(encoder=encoder(name), quantizer=quantizer, seed=r) for r in range(n_ranks)]
    dev = [Codec(encoder=encoder(name), quantizer=quantizer, seed=r) for r in range(n_ranks)]
    for step in range(3 if name == "auto" else 2):       # error feedback: a residual kept
        total_h, group_h = run(HostOps, host, step, False)
        total_d, group_d = run(DeviceOps(stream), dev, step, True)
        sent_h = [bytes(d) for v in group_h._submitted.values() for _, d, _ in v.values()]
        sent_d = [bytes(d) for v in group_d._submitted.values() for _, d, _ in v.values()]
        if quantizer.biased:
            for state, residual in dev[0].feedback.residuals.items():
                assert np.isfinite(residual.copy_to_host()).all(), state
        else:
            assert sent_d == sent_h
            for h, d in zip(total_h, total_d):
                np.testing.assert_allclose(d.copy_to_host(), h, rtol=1e-6, atol=1e-7)
        for d in total_d[1:]:
            np.testing.assert_array_equal(d.copy_to_host(), total_d[0].copy_to_host())


@pytest.mark.parametrize("name", ["rlh", "ans", "rla"])
@pytest.mark.parametrize("kind", ["allgather", "two_phase"])
def test_buckets_exchanged_at_once_encode_as_one_batch_with_each_buckets_bytes(kind, name,
                                                                              monkeypatch):
    """Three buckets of 2 ranks run at once on one DeviceOps: every encode of a phase, all
    buckets' and both ranks', goes in one ``encode_batch`` (the allgather's one phase; the
    two-phase exchange's scatter and its sums), and the sums decode in a launch per round
    of ranks, whatever the buckets (rank_sums.py: the allgather's two ranks, the scatter's
    two, the gather's one); every rank sends the bytes and gets the sums of the same
    exchanges on the host, bucket by bucket. For ``rlh`` (the Huffman family's decoder),
    ``ans`` and ``rla``."""
    from horovod_huffman.codec import message, quantizers
    from horovod_huffman.codec.encoders import gpu
    from horovod_huffman.exchange import array_ops
    from horovod_huffman.exchange.allreduce import Job, allgather_sum, two_phase_sum
    from horovod_huffman.exchange.array_ops import DeviceOps, HostOps
    from horovod_huffman.exchange.codec_state import Codec
    from horovod_huffman.exchange.local import LocalGroup, run_ranks

    rng = np.random.default_rng(11)
    sizes = [160, 70, 129]
    grads = [[rng.standard_normal(n).astype(np.float32) for _ in range(2)] for n in sizes]
    stream = cuda.stream()
    ops = DeviceOps(stream)
    batches = []
    encode_batch = ops.encode_batch
    ops.encode_batch = lambda qts, enc: batches.append(len(qts)) or encode_batch(qts, enc)

    def exchanges(ops, codecs, group, device):
        gens = []
        for b, n in enumerate(sizes):
            job = Job(f"b{b}", b, 0, 1, n, 4 * n)
            for r in range(2):
                work = cuda.to_device(grads[b][r], stream=stream) if device else grads[b][r]
                gens.append(two_phase_sum(codecs[b][r], ops, group.member(r), job, work, 64)
                            if kind == "two_phase"
                            else allgather_sum(codecs[b][r], ops, group.member(r), job, work))
        return gens

    def codecs():
        return [[Codec(encoder=encoder(name), quantizer=hh.QSGD(levels=8, bucket_size=64),
                       seed=r) for r in range(2)] for _ in sizes]

    host_group, dev_group = LocalGroup(2), LocalGroup(2)
    host = run_ranks(exchanges(HostOps, codecs(), host_group, False))
    launches, quantize, own, concat = {}, {}, {}, {}
    monkeypatch.setattr(gpu, "cuda_decode", _Counted(gpu.cuda_decode, launches))
    monkeypatch.setattr(gpu, "cuda_ans", _Counted(gpu.cuda_ans, launches))
    monkeypatch.setattr(gpu, "cuda_rla", _Counted(gpu.cuda_rla, launches))
    monkeypatch.setattr(quantizers, "cq", _Counted(quantizers.cq, quantize))
    monkeypatch.setattr(array_ops, "cq", _Counted(array_ops.cq, own))
    monkeypatch.setattr(message, "cp", _Counted(message.cp, concat))
    dev = run_ranks(exchanges(ops, codecs(), dev_group, True))
    monkeypatch.undo()
    two = kind == "two_phase"
    assert batches == ([6, 6] if two else [6])
    assert launches["decode_streams"] == (3 if two else 2)
    # Scales and levels: the scatter's 12 shards, then the 6 summed ones; the allgather's 6.
    assert quantize["launch"] == (4 if two else 2)
    assert own["launch"] == (2 if two else 1)           # the own tensors of a round of ranks
    assert concat["launch"] == (4 if two else 2)        # each batch's levels and scales
    assert dev_group._submitted.keys() == host_group._submitted.keys()
    for slot, sent in host_group._submitted.items():
        for r, (_, data, _) in sent.items():
            assert bytes(dev_group._submitted[slot][r][1]) == bytes(data), (slot, r)
    for h, d in zip(host, dev):
        np.testing.assert_allclose(d.copy_to_host(), h, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("owning", [True, False], ids=["owning", "over-a-buffer"])
def test_copies_to_the_host_land_in_a_page_locked_buffer_lent_again_once_unviewed(
        owning, monkeypatch):
    """device.copy_to_host copies into a PinnedPool buffer: while any view of a result lives,
    its buffer is not lent again; once none does, the next copy reuses it. The same whether
    the pinned array owns its memory (the simulator's) or views a buffer object (numba-cuda's
    ``pinned_array``: an ndarray over its PinnedMemory)."""
    import horovod_huffman.codec.device as device
    from horovod_huffman.codec.device import PinnedPool, copy_to_host

    if not owning:
        monkeypatch.setattr(device.cuda, "pinned_array", lambda n, dtype: np.ndarray(
            n, dtype, buffer=bytearray(n * np.dtype(dtype).itemsize)))
    pool = PinnedPool(limit=1 << 20)
    monkeypatch.setattr(device, "_PINNED", pool)
    stream = cuda.stream()
    first = copy_to_host(cuda.to_device(np.arange(10.0)), stream)
    part = first[3:5].view(np.int64).reshape(2)
    del first
    second = copy_to_host(cuda.to_device(np.arange(7, dtype=np.int32)), stream)
    assert len(pool._buffers) == 2 and part.view(np.float64).tolist() == [3.0, 4.0]
    del part
    third = copy_to_host(cuda.to_device(np.arange(4, dtype=np.int8)), stream)
    assert len(pool._buffers) == 2
    assert second.tolist() == list(range(7)) and third.tolist() == list(range(4))
    assert pool.host_array((2 << 20,), np.uint8) is None       # beyond the limit
    assert copy_to_host(cuda.to_device(np.arange(1 << 19)), stream).sum() == \
        (1 << 19) * ((1 << 19) - 1) // 2                          # into pageable memory


@pytest.mark.parametrize("quantizer, dtype, launches", [
    (hh.QSGD(levels=8, bucket_size=64), np.float16, 4),      # scales, levels: twice each
    (hh.QSGD(levels=8, bucket_size=64), np.float32, 4),
    (hh.QSGD(levels=8, bucket_size=64), np.float64, 4),
    (hh.TernGrad(), np.float16, 6),             # and the maxima's start and scales once
    (hh.TernGrad(bucket_size=64), np.float64, 6),
    (hh.TernGrad(clip=2.5), np.float32, 12)],   # and two moments and the bounds, twice each
    ids=["qsgd-float16", "qsgd-float32", "qsgd-float64", "terngrad-float16",
         "terngrad-buckets-float64", "terngrad-clip-float32"])
def test_forty_gradients_quantize_in_two_launches_per_kernel_with_the_hosts_levels(
        quantizer, dtype, launches, monkeypatch):
    """quantize_batch of 40 device gradients (empty ones among them) launches each kernel
    over tensors once per 32 (cuda_parts.MAX_PARTS) and uploads nothing (TernGrad's clip
    bounds are the host's, computed on the device); every tensor's levels and scales are
    those the host gives it alone with its seed, and slices of one array each."""
    from horovod_huffman.codec import quantizers

    rng = np.random.default_rng(13)
    sizes = [int(n) for n in rng.integers(0, 300, 40)]
    sizes[5] = sizes[33] = 0
    sizes[7] = 5000                   # a TernGrad bucket of three segments (cuda_quantize)
    grads = [rng.standard_normal(n).astype(dtype) for n in sizes]
    seeds = [int(s) for s in rng.integers(0, 2**62, 40)]
    stream = cuda.stream()
    counts = {}
    device = [cuda.to_device(g, stream=stream) for g in grads]
    monkeypatch.setattr(quantizers, "cq", _Counted(quantizers.cq, counts))
    monkeypatch.setattr(quantizers, "cuda", _Counted(quantizers.cuda, counts))
    qts = quantizer.quantize_batch(device, seeds, stream)
    monkeypatch.undo()
    assert counts["launch"] == launches
    assert "to_device" not in counts            # and quantizers.py copies nothing back
    for g, seed, qt in zip(grads, seeds, qts):
        want = quantizer.quantize(g, seed=seed)
        assert qt.shape == want.shape and qt.dtype == want.dtype
        np.testing.assert_array_equal(qt.levels.copy_to_host(), want.levels)
        np.testing.assert_array_equal(qt.scales.copy_to_host(), want.scales)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_own_tensors_dequantize_into_their_totals_in_one_launch_per_16(dtype, monkeypatch):
    """DeviceOps.dequantize_all of 34 quantized tensors into slices of one total, assigned or
    added, in three launches (cuda_quantize.dequantize_parts, 16 tensors each: two arrays a
    tensor), equals HostOps.dequantize_all bit for bit."""
    from horovod_huffman.exchange import array_ops
    from horovod_huffman.exchange.array_ops import DeviceOps, HostOps

    rng = np.random.default_rng(14)
    sizes = [int(n) for n in rng.integers(0, 200, 34)]
    quantizer = hh.QSGD(levels=8, bucket_size=32, seed=3)
    qts = [quantizer.quantize(rng.standard_normal(n).astype(dtype)) for n in sizes]
    offsets = np.cumsum([0] + sizes)
    start = rng.standard_normal(int(offsets[-1])).astype(dtype)
    adds = [bool(k % 3) for k in range(len(qts))]
    host = start.copy()
    HostOps.dequantize_all([(host, int(o), qt, a) for o, qt, a in zip(offsets, qts, adds)])
    stream = cuda.stream()
    total = cuda.to_device(start, stream=stream)
    dev_qts = [hh.QuantizedTensor(cuda.to_device(qt.levels), cuda.to_device(qt.scales),
                                  qt.shape, qt.dtype, qt.bucket_size) for qt in qts]
    counts = {}
    monkeypatch.setattr(array_ops, "cq", _Counted(array_ops.cq, counts))
    DeviceOps(stream).dequantize_all([(total, int(o), qt, a)
                                      for o, qt, a in zip(offsets, dev_qts, adds)])
    monkeypatch.undo()
    assert counts["launch"] == 3
    np.testing.assert_array_equal(total.copy_to_host(), host)


def test_the_pipeline_encodes_the_buckets_it_holds_at_once_as_one_batch():
    """Horovod's worker (pipeline.Pipeline) given three buckets of 2 ranks while it is busy
    advances them all, then encodes them in one ``encode_batch``; the sums are those of the
    same exchanges on the host."""
    from horovod_huffman.exchange.allreduce import Job, allgather_sum
    from horovod_huffman.exchange.array_ops import DeviceOps, HostOps
    from horovod_huffman.exchange.codec_state import Codec
    from horovod_huffman.exchange.local import LocalGroup, run_ranks
    from horovod_huffman.exchange.pipeline import Pipeline

    rng = np.random.default_rng(12)
    sizes = [160, 70, 129]
    grads = [[rng.standard_normal(n).astype(np.float32) for _ in range(2)] for n in sizes]

    def exchanges(ops, group, codecs):
        return [allgather_sum(codecs[r], ops, group.member(r), Job(f"b{b}", b, 0, 1, n, 4 * n),
                              grads[b][r] if ops is HostOps else cuda.to_device(grads[b][r]))
                for b, n in enumerate(sizes) for r in range(2)]

    def codecs():
        return [Codec(encoder=encoder("rlh"), quantizer=hh.QSGD(levels=8, bucket_size=64),
                      seed=r) for r in range(2)]

    ops = DeviceOps(cuda.stream())
    batches = []
    encode_batch = ops.encode_batch
    ops.encode_batch = lambda qts, enc: batches.append(len(qts)) or encode_batch(qts, enc)
    pipeline = Pipeline()
    with pipeline._wake:                    # the worker is busy: it takes all six at once
        futures = [pipeline.submit(e) for e in exchanges(ops, LocalGroup(2), codecs())]
    got = [f.result(timeout=600) for f in futures]
    assert batches == [6]
    host = run_ranks(exchanges(HostOps, LocalGroup(2), codecs()))
    for d, h in zip(got, host):
        np.testing.assert_allclose(d.copy_to_host(), h, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["allgather", "two_phase"])
def test_device_error_feedback_keeps_its_residuals_through_an_overflow_step(kind):
    """Error feedback on device buckets beside the host's, 2 ranks, an Inf on rank 0 at steps
    0 and 2: those steps reduce to NaN on both; the device keeps every residual as it was
    (zeros where there was none) without reading the decision back; the residuals match the
    host's at every step (the contraction's sums differ only in rounding)."""
    from horovod_huffman.exchange.allreduce import Job, allgather_sum, two_phase_sum
    from horovod_huffman.exchange.array_ops import DeviceOps, HostOps
    from horovod_huffman.exchange.codec_state import Codec
    from horovod_huffman.exchange.local import LocalGroup, run_ranks

    rng = np.random.default_rng(9)
    stream = cuda.stream()
    quantizer = hh.QSGD(levels=8, bucket_size=64)
    host = [Codec(encoder="rlh", quantizer=quantizer, error_feedback=True, seed=r)
            for r in range(2)]
    dev = [Codec(encoder="rlh", quantizer=quantizer, error_feedback=True, seed=r)
           for r in range(2)]
    before = None
    for step in range(4):
        grads = [rng.standard_normal(300).astype(np.float32) for _ in range(2)]
        if step in (0, 2):
            grads[0][100] = np.inf
        job = Job("w", 7, step, 1, 300, 1200)
        totals = {}
        for ops, codecs, device in ((HostOps, host, False), (DeviceOps(stream), dev, True)):
            group = LocalGroup(2)
            works = [cuda.to_device(g, stream=stream) if device else g for g in grads]
            totals[device] = run_ranks([
                two_phase_sum(c, ops, group.member(r), job, works[r], 64) if kind == "two_phase"
                else allgather_sum(c, ops, group.member(r), job, works[r])
                for r, c in enumerate(codecs)])
        for device in (False, True):
            got = [t.copy_to_host() if device else t for t in totals[device]]
            assert all(np.isfinite(t).all() == (step not in (0, 2)) for t in got), (step, device)
        kept = [{k: v.copy_to_host() for k, v in c.feedback.residuals.items()} for c in dev]
        if step == 0:
            assert all(not r.any() for rank in kept for r in rank.values()) and kept[0]
            assert host[0].feedback.residuals == {}
        else:
            for c_h, rank in zip(host, kept):
                assert sorted(rank) == sorted(c_h.feedback.residuals)
                for k, v in rank.items():
                    np.testing.assert_allclose(v, c_h.feedback.residuals[k], rtol=1e-5, atol=1e-5)
        if step == 2:
            for rank, prior in zip(kept, before):
                for k, v in rank.items():
                    np.testing.assert_array_equal(v, prior[k])
        before = kept


def test_device_benchmark_runs(capsys):
    """``python -m horovod_huffman.tools.bench --device cuda`` end to end, at a tiny size."""
    from horovod_huffman.tools.bench.run import main
    assert main(["--device", "cuda", "--sizes", "2048", "--repeats", "1", "--encoders", "rlh",
                 "--trace", "mlp-digits", "--cpu-max", "2048", "--chunk-levels", "512",
                 "--step-coords", "1500", "--bucket-coords", "1024"]) == 0
    out = capsys.readouterr().out
    assert "| 2,048 | rlh |" in out and "D2D copy GB/s" in out and "--chunk-levels 512" in out
    assert "| 1,500 | rlh, step |" in out


def test_auto_encodes_the_members_it_chose_in_batches(monkeypatch):
    """``auto`` on a DeviceOps: at a step that reuses the choices of an earlier one, every
    part whose chosen member codes batches (the Huffman family, ``ans``) joins one encode
    batch with the others of that member; every step's bytes are the host's."""
    from horovod_huffman.exchange.allreduce import Job, allgather_sum
    from horovod_huffman.exchange.array_ops import DeviceOps, HostOps
    from horovod_huffman.exchange.codec_state import Codec
    from horovod_huffman.exchange.local import LocalGroup, run_ranks

    rng = np.random.default_rng(12)
    sizes = [3000, 4000, 2500]                  # large enough for a Huffman code or ANS
    grads = [[rng.standard_normal(n).astype(np.float32) for _ in range(2)] for n in sizes]
    for r in range(2):                          # another member for this bucket: sparse
        grads[1][r][rng.random(sizes[1]) < 0.95] = 0.0
    stream = cuda.stream()
    ops = DeviceOps(stream)
    batches = []
    encode_batch = ops.encode_batch
    ops.encode_batch = lambda qts, enc: batches.append((enc.name, len(qts))) or \
        encode_batch(qts, enc)

    def codecs():
        return [[Codec(encoder=hh.get_encoder("auto", seed=0),
                       quantizer=hh.QSGD(levels=8, bucket_size=64), seed=r) for r in range(2)]
                for _ in sizes]

    host_codecs, dev_codecs = codecs(), codecs()
    for step in range(3):
        batches.clear()
        groups = LocalGroup(2), LocalGroup(2)
        for group, codec, device in zip(groups, (host_codecs, dev_codecs), (False, True)):
            run_ranks([allgather_sum(codec[b][r], ops if device else HostOps,
                                     group.member(r), Job(f"b{b}", b, step, 1, n, 4 * n),
                                     cuda.to_device(grads[b][r], stream=stream) if device
                                     else grads[b][r])
                       for b, n in enumerate(sizes) for r in range(2)])
        for slot, sent in groups[0]._submitted.items():
            for r, (_, data, _) in sent.items():
                assert bytes(groups[1]._submitted[slot][r][1]) == bytes(data), (step, slot, r)
        if step < 2:
            assert batches == []                # every part chose on the host
    members = [codec.choices[(f"b{b}", "all")][1] for b, row in enumerate(dev_codecs)
               for codec in row]
    batched = [m.name for m in members if m.codes_in_batches]
    assert batched, [m.name for m in members]
    assert sorted(batches) == sorted((name, batched.count(name)) for name in set(batched))


def test_an_arena_lends_its_regions_again_once_its_outermost_block_ends(monkeypatch):
    """device.Arena: inside a block, regions never overlap (nested blocks included) and start
    on 256-byte boundaries; the next block takes them again from the start, with no
    allocation once the buffer has grown to what a block needed; outside a block, and beyond
    the buffer, ``take`` allocates. Each thread has its own arena for a stream."""
    import threading
    from horovod_huffman.codec import device

    stream = cuda.stream()
    arena = device.arena(stream)
    assert device.arena(stream) is arena
    other = []
    thread = threading.Thread(target=lambda: other.append(device.arena(stream)))
    thread.start()
    thread.join()
    assert other[0] is not arena

    def regions():
        with arena:
            a = arena.take(100, np.int64)
            with arena:
                b = arena.upload(np.arange(7, dtype=np.int32))
            c = arena.take((3, 5), np.float32)
            return [arena.used, a, b, c]

    allocations = []
    device_array = cuda.device_array
    monkeypatch.setattr(cuda, "device_array",
                        lambda *a, **k: allocations.append(a) or device_array(*a, **k))
    used, a, b, c = regions()                   # no buffer yet: three allocations
    assert len(allocations) == 3 and used == 1280 + 60
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(7))
    allocations.clear()
    used, a, b, c = regions()                   # a buffer of 2048 bytes, then regions of it
    assert len(allocations) == 1 and arena.buffer.size == 2048
    allocations.clear()
    for _ in range(2):
        used, a, b, c = regions()
    assert allocations == [] and used == 1280 + 60
    assert a.shape == (100,) and b.dtype == np.int32 and c.shape == (3, 5)
    a.copy_to_device(np.full(100, -1, np.int64), stream=stream)
    c.copy_to_device(np.ones((3, 5), np.float32), stream=stream)
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(7))    # no overlap
    assert (a.copy_to_host() == -1).all()
    arena.take(10, np.int8)                     # outside a block
    assert len(allocations) == 1
