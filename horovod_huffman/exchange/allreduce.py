"""Compressed allreduce of one fused bucket over any collectives: the one-phase allgather and the
two-phase reduce-scatter + allgather; and the reduce-scatter alone (``reduce_scatter_sum``), for
sharded data parallelism.

Each exchange is a generator: it yields a ``Pending`` whenever it must wait, for a started
collective, or on a GPU for a quantization, an encode or a sum queued to run with other
exchanges' (quantize_queue.py, encode_queue.py, rank_sums.py), and returns the bucket's sum
over ranks, a 1-D float32/64 array.
``pipeline.Pipeline`` drives many at once on a worker thread, so that one
bucket is encoded while another's bytes are in flight.

The collectives are a small interface, so the same exchange runs over Horovod's torch or
TensorFlow operations (the adapters) or over any other transport::

    size, rank                         ranks in the group, this rank's index
    alltoall(data, splits, name)       send data[sum(splits[:j]):][:splits[j]] to rank j; the
                                       Pending's wait() gives what every rank sent this rank,
                                       concatenated in rank order (uint8)
    allgather(data, name)              every rank's data concatenated in rank order (uint8)
    allreduce(data, name)              the elementwise sum over ranks of a float16/32/64 array
                                       (small: routing decisions, routing.py)

A ``Pending`` has ``done()`` (never blocks) and ``wait()`` (blocks; returns the received bytes);
a queued quantization, encode or sum also has ``flush()``, which a driver calls when all it
holds are waiting.

Exchanges, per rank and step, for n coordinates at b bits each over N ranks::

    allgather   send n*b bits, receive (N - 1)*n*b; encode n levels, decode (N - 1)*n; exact
                sum of what the ranks quantized
    two_phase   shard j of every rank goes to rank j (alltoall), rank j sums its shard and
                requantizes the sum, then an allgather brings every rank all N summed
                shards: about 2*(N-1)/N*n*b bits each way, n levels encoded (the other
                ranks' shards, then the summed one; a rank's own shard stays quantized) and
                2*(N-1)/N*n decoded, whatever N; the requantization of the sum is
                unbiased for an unbiased quantizer, and with ``ErrorFeedback.server``
                its error is kept per shard and added to the next step's sum

``choose`` picks between them (the rule is in its docstring).
"""
from dataclasses import dataclass

import numpy as np

from .buckets import shard_bounds
from ..codec.errors import DecodeError
from .frames import MismatchError, error_frame, frame, frames, name_tag, split_frames
from .rank_sums import Part

EXCHANGES = ("allgather", "two_phase", "auto")


@dataclass(frozen=True)
class Job:
    """What one exchange reduces: collectives and state are named ``key``, frames carry ``tag``
    (buckets.Bucket.tag) and ``step``; ``tensors``, ``coords`` (gradient coordinates, a bucket's
    gaps excluded) and ``raw_bytes`` (bytes of the uncompressed gradients) go to the
    statistics. ``layout``: the matrices the bucket holds ((rows, row length) pairs from its
    first coordinate, buckets.bucket_layout; None: unknown), which ``ans``'s row model uses;
    receivers need not know it (the streams name their encoder and carry their model). The
    encoder is the codec's (``Codec.for_route`` gives a route's codec)."""
    key: str
    tag: int
    step: int
    tensors: int = 1
    coords: int = 0
    raw_bytes: int = 0
    layout: tuple = None


def choose(exchange, n_ranks):
    """The exchange a bucket takes: ``exchange`` itself, or for "auto" "allgather" up to 3
    ranks and "two_phase" from 4 on. The two-phase exchange requantizes each summed shard, and
    that second quantization's error does not shrink with N as the allgather's mean of N
    quantized gradients does (docs/design.md: 3.2x the allgather's error at N = 3, 3.7x at 4).
    It is taken where it at least halves the bytes: 2*(N-1)/N against N-1 bucket sizes
    received, and as many levels decoded. At N = 2 both move the same bytes; at N = 3 the
    two-phase exchange saves a third."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {', '.join(EXCHANGES)}, got {exchange!r}")
    if exchange == "auto":
        return "allgather" if n_ranks <= 3 else "two_phase"
    return exchange


def run_to_end(exchange):
    """Run an exchange generator on this thread, waiting for each collective it starts (and
    running each encode and sum it queues), and return its result."""
    try:
        pending = exchange.send(None)
        while True:
            settle(pending)
            pending = exchange.send(None)
    except StopIteration as stop:
        return stop.value


def settle(pending):
    """Block until ``pending`` is done. Queued work is run (``flush``, which never
    raises): the exchange's own ``wait`` then raises its error inside the exchange, where it
    sends an error frame to the other ranks."""
    if hasattr(pending, "flush"):
        if not pending.done():
            pending.flush()
    else:
        pending.wait()


def phase_tag(bucket_tag, phase, shard=0):
    """Frame tag of one phase ("all", "scatter", "gather") and shard of a bucket's exchange."""
    return name_tag(f"{bucket_tag:08x}/{phase}/{shard}")


def allgather_sum(codec, ops, coll, job, work):
    """One-phase exchange of a bucket (generator): every rank's message to every rank, each
    rank decodes the others' and sums all N in rank order (``Codec.own`` for its own)."""
    key, tag = job.key, phase_tag(job.tag, "all")
    state = (key, "all") if codec.feedback.client else None
    qt, = yield from _quantized(codec, ops, job, [work], [f"{key}/all"], [state])
    message, = yield from _encoded(codec, ops, [qt], job, ["all"], [0])
    with codec.statistics.span(key, "encode"):
        data = frame(tag, job.step, message)
    with codec.statistics.span(key, "network"):
        pending = coll.allgather(data, f"{key}.all")
        yield pending
    with codec.statistics.span(key, "decode"):
        messages = split_frames(pending.wait(), coll.size, tag, job.step, key)
    total = yield from _rank_sum(codec, ops, coll, messages, qt, work.size, work.dtype, key)
    with codec.statistics.span(key, "decode"):
        codec.feedback.settle(ops, [state], total)
    codec.statistics.count(job.coords, job.raw_bytes, data.size, job.tensors)
    return total


def two_phase_sum(codec, ops, coll, job, work, align):
    """Two-phase exchange of a bucket (generator): reduce-scatter of encoded shards, a summed
    and requantized shard per rank, allgather of the summed shards. Shards are cut at multiples
    of ``align`` coordinates (``shard_bounds``). A rank that cannot decode a piece sends an error
    frame in the allgather, so every rank raises."""
    key, me, summed = job.key, coll.rank, None
    bounds = shard_bounds(work.size, coll.size, align)
    data, sizes, mine = yield from _scatter_frames(codec, ops, job, work, bounds, me)
    with codec.statistics.span(key, "network"):
        pending = coll.alltoall(data, sizes, f"{key}.scatter")
        yield pending
    try:
        summed = yield from _summed_shard(codec, ops, coll, job, pending.wait(), mine, bounds,
                                          work.dtype)
        failure = None
    except (DecodeError, MismatchError) as e:
        summed, failure = None, e
    if failure is None:
        message, = yield from _encoded(codec, ops, [summed], job, ["sum"], [bounds[me]])
        with codec.statistics.span(key, "encode"):
            reply = frame(phase_tag(job.tag, "gather"), job.step, message)
    else:
        reply = error_frame(phase_tag(job.tag, "gather"), job.step, failure)
    with codec.statistics.span(key, "network"):
        pending = coll.allgather(reply, f"{key}.gather")
        yield pending
    if failure is not None:
        raise failure          # nothing settles: every residual stays as it was
    with codec.statistics.span(key, "decode"):
        gathered = split_frames(pending.wait(), coll.size, phase_tag(job.tag, "gather"),
                                job.step, key)
        parts = []
        for j, message in enumerate(gathered):
            size, what = bounds[j + 1] - bounds[j], f"{key} (sum shard {j})"
            parts.append(Part(bounds[j], size, [
                codec.own(message, summed, size, what, j) if j == me else
                codec.contents(message, size, work.dtype, what, j)]))
        summing = ops.sum_later(parts, work.size, work.dtype, (codec.statistics, key))
    result = yield from _awaited(summing)
    with codec.statistics.span(key, "decode"):
        codec.feedback.settle(ops, [_client_state(key, j) for j in range(coll.size)] +
                              [_server_state(key, me)], result)
    codec.statistics.count(job.coords, job.raw_bytes, data.size - sizes[me] + reply.size, job.tensors)
    return result


def reduce_scatter_sum(codec, ops, coll, job, work, bounds):
    """Reduce-scatter of a bucket (generator), the first phase of ``two_phase_sum`` on its
    own: shard j of every rank's ``work`` (``bounds[j]:bounds[j + 1]``, any cut) goes encoded
    to rank j, which decodes and sums it. Returns this rank's shard of the sum over ranks, the
    exact sum of what the ranks quantized (float, ``work.dtype``).

    A three-element allreduce follows the scatter, so that every rank decides alike: how many
    ranks could not decode (DecodeError) or got another parameter or step (MismatchError),
    raised on every rank, and how many summed shards are not finite, which keeps every rank's
    error-feedback residuals as they were."""
    key, me = job.key, coll.rank
    data, sizes, mine = yield from _scatter_frames(codec, ops, job, work, bounds, me)
    with codec.statistics.span(key, "network"):
        pending = coll.alltoall(data, sizes, f"{key}.scatter")
        yield pending
    failure, flags = None, np.zeros(3, dtype=np.float32)
    try:
        total = yield from _shard_total(codec, ops, coll, job, pending.wait(), mine, bounds,
                                        work.dtype)
        flags[2] = not _on_host(ops.all_finite(total))
    except (DecodeError, MismatchError) as e:
        failure = e
        flags[0 if isinstance(e, DecodeError) else 1] = 1
    with codec.statistics.span(key, "network"):
        pending = coll.allreduce(flags, f"{key}.status")
        yield pending
    decode_failures, mismatches, nonfinite = pending.wait()
    if failure is not None:
        raise failure
    if mismatches:
        raise MismatchError(f"{int(mismatches)} rank(s) received another parameter or step "
                            f"than {key!r} at step {job.step}: ranks disagree on which gradient "
                            "is being reduced")
    if decode_failures:
        raise DecodeError(f"{int(decode_failures)} rank(s) could not decode their shard of "
                          f"{key!r} at step {job.step}")
    codec.feedback.settle(ops, [_client_state(key, j) for j in range(coll.size)], total,
                          finite=not nonfinite)
    codec.statistics.count(job.coords, job.raw_bytes, data.size - sizes[me], job.tensors)
    return total


def _on_host(flag):
    """``ops.all_finite``'s answer as a bool (read back from the device, DeviceOps')."""
    return bool(flag.copy_to_host()[0]) if hasattr(flag, "copy_to_host") else bool(flag)


def _client_state(key, shard):
    """The error-feedback state of this rank's piece ``shard`` of bucket ``key``."""
    return key, "client", shard


def _server_state(key, shard):
    """The error-feedback state of the summed ``shard`` this rank requantizes."""
    return key, "server", shard


class _NoBody:
    """The message of a frame that carries no body: this rank's frame to itself in the
    scatter, whose shard it keeps quantized (``_summed_shard``) and never encodes."""
    nbytes = 0

    @staticmethod
    def write(out, pos):
        pass


def _awaited(pending):
    """The value of ``pending`` (a generator: it yields the pending until it is done)."""
    if not pending.done():
        yield pending
    return pending.wait()


def _quantized(codec, ops, job, works, seed_names, states):
    """The QuantizedTensors of ``works`` (generator, ``Codec.quantizing``: it yields the
    quantization while it waits in a queue to run with other exchanges' gradients)."""
    with codec.statistics.span(job.key, "encode"):    # a queued one charges its own
        quantizing = codec.quantizing(ops, job, works, seed_names, states)
    return (yield from _awaited(quantizing))


def _encoded(codec, ops, qts, job, parts, starts):
    """The messages of ``qts`` (generator, ``Codec.encoding``: it yields the encoding while
    it waits in a queue to be encoded with other exchanges' tensors)."""
    with codec.statistics.span(job.key, "encode"):    # a queued encode charges its own
        encoding = codec.encoding(ops, qts, job, parts, starts)
    return (yield from _awaited(encoding))


def _scatter_frames(codec, ops, job, work, bounds, me):
    """(the frames of every shard of ``work`` in rank order, in one array, this rank's own
    with an empty body; their sizes; this rank's own quantized shard), a generator
    (``_encoded``). The other ranks' shards are encoded together (one batch on a GPU)."""
    shards = range(len(bounds) - 1)
    qts = yield from _quantized(
        codec, ops, job, [work[bounds[j]:bounds[j + 1]] for j in shards],
        [f"{job.key}/shard{j}" for j in shards],
        [_client_state(job.key, j) if codec.feedback.client else None for j in shards])
    others = [j for j in range(len(qts)) if j != me]
    messages = dict(zip(others, (yield from _encoded(
        codec, ops, [qts[j] for j in others], job, [f"shard{j}" for j in others],
        [bounds[j] for j in others]))))
    with codec.statistics.span(job.key, "encode"):
        data, sizes = frames([(phase_tag(job.tag, "scatter", j), job.step,
                               messages.get(j, _NoBody)) for j in range(len(qts))])
    return data, sizes, qts[me]


def _shard_total(codec, ops, coll, job, received, mine, bounds, work_dtype):
    """This rank's shard summed over ranks (float, ``work_dtype``): its own piece from its
    quantized levels (no other rank sees that piece), the others decoded from ``received``
    (a generator, as ``_rank_sum``)."""
    key, me = job.key, coll.rank
    size = bounds[me + 1] - bounds[me]
    with codec.statistics.span(key, "decode"):
        pieces = split_frames(received, coll.size, phase_tag(job.tag, "scatter", me), job.step,
                              key)
    return (yield from _rank_sum(codec, ops, coll, pieces, mine, size, work_dtype, key,
                                 checked=False))


def _rank_sum(codec, ops, coll, messages, mine, size, work_dtype, key, checked=True):
    """The sum in rank order of every rank's tensor of ``size`` coordinates: this rank's own
    from its quantized ``mine`` (with ``checked``, its message as it came back verified,
    ``Codec.own``), the others' decoded from ``messages`` (a generator: ``ops.sum_later``
    gives a Pending of it, which on a GPU waits to be computed with other exchanges' sums,
    rank_sums.py; it raises the DecodeError of a stream it rejected)."""
    with codec.statistics.span(key, "decode"):
        entries = []
        for rank, message in enumerate(messages):
            if rank != coll.rank:
                entries.append(codec.contents(message, size, work_dtype, key, rank))
            else:
                entries.append(codec.own(message, mine, size, key, rank) if checked else mine)
        summing = ops.sum_later([Part(0, size, entries)], size, work_dtype,
                                (codec.statistics, key))
    return (yield from _awaited(summing))


def _summed_shard(codec, ops, coll, job, received, mine, bounds, work_dtype):
    """This rank's shard summed over ranks and requantized (a QuantizedTensor; a generator,
    as ``_rank_sum``)."""
    key, me = job.key, coll.rank
    total = yield from _shard_total(codec, ops, coll, job, received, mine, bounds, work_dtype)
    server = _server_state(key, me) if codec.feedback.server else None
    qt, = yield from _quantized(codec, ops, job, [total], [f"{key}/sum{me}"], [server])
    return qt
