"""A PyTorch DistributedDataParallel communication hook with the Horovod adapter's codec, streams
and exchanges, over torch.distributed.

>>> from torch.nn.parallel import DistributedDataParallel as DDP      # doctest: +SKIP
>>> from horovod_huffman.torch import ddp
>>> model = DDP(model)                                                # doctest: +SKIP
>>> model.register_comm_hook(ddp.State(encoder="rlh"), ddp.hook)      # doctest: +SKIP

DDP hands ``hook`` each gradient bucket, a flat tensor of its parameters' gradients, as
backward fills it, and in bucket order, the same on every rank. ``hook`` queues the bucket's
exchange (allreduce.py: the one-phase allgather or the two-phase reduce-scatter + allgather)
on a worker thread and returns a Future of the bucket's mean over ranks, so backward goes on.

torch.distributed matches collectives by the order in which ranks issue them on a group, not
by name as Horovod does. So the hook's collectives go on a group of their own (``State`` makes
it: DDP issues collectives of its own on the model's group, from the training thread, e.g. for
``find_unused_parameters``), and the worker runs the buckets' exchanges one after another, in
the order the hook received them, each collective waited for before the next is issued: every
rank issues the same collectives in the same order, whatever order the work completes in. (A
hook that issues collectives from completion callbacks, as DDP's own PowerSGD hook does, can
deadlock over Gloo when ranks finish buckets in different orders.)

Buckets are named by their index and the shapes of their parameters: DDP rebuilds its buckets
after the first iteration, and a bucket whose parameters change drops its error-feedback
residuals and ``auto``'s choices, which belonged to other coordinates.
"""
import queue
import threading
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist

from ..adapters import make_codec
from ..exchange.allreduce import Job, choose, run_to_end
from ..exchange.routing import BUCKETS_KEY, Router, check_route_mode, is_encoded
from .bucket_arrays import StreamReady, as_torch, bucket_sum
from .process_group import Collectives

__all__ = ["State", "hook"]


class _Worker:
    """One daemon thread that runs exchange generators to completion, one at a time, in the
    order they were submitted, setting each one's torch Future."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def submit(self, exchange, finish, device):
        """Run ``exchange``; then ``finish(total)`` gives the Future's value, a tensor on
        ``device``. Returns the Future."""
        future = torch.futures.Future(devices=[device] if device.type == "cuda" else None)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="horovod_huffman.ddp")
                self._thread.start()
        self._queue.put((exchange, finish, future))
        return future

    def _loop(self):
        while True:
            exchange, finish, future = self._queue.get()
            try:
                future.set_result(finish(run_to_end(exchange)))
            except BaseException as error:         # noqa: B902 (raised in DDP's backward)
                future.set_exception(error)


class State:
    """The hook's state: a Codec (quantizer + encoder + error feedback), the exchange and the
    process group.

    encoder: a name from ``horovod_huffman.ENCODERS`` (``encoder_kwargs`` go to it) or an
    Encoder; quantizer: default QSGD(levels=8); error_feedback: None = on for biased
    quantizers; seed: reproducible quantization per (bucket, shard, step); exchange:
    "allgather", "two_phase" or "auto" (``allreduce.choose``); process_group: the ranks that
    reduce (default: the default group's), as given to DDP; route: "encoded" sends every
    bucket encoded; "adaptive" sends a step's buckets encoded, encoded with ``rlh`` (the
    fastest coder), or as float16 or float32 through an allreduce, whichever gave the ranks
    the fastest steps (routing.Router, ``router``; steps start at bucket 0, which DDP hands
    over first).

    Making a State makes a Gloo process group of the same ranks for the hook's collectives
    (``torch.distributed.new_group``), so every rank of the default group makes its States
    in the same order, as it makes its DDP models. The hook's bytes cross in host memory
    whatever DDP's own backend is; a CUDA bucket is quantized, coded and decoded on its GPU
    and only its encoded bytes reach the host (bucket_arrays.py)."""

    def __init__(self, encoder="rlh", quantizer=None, error_feedback=None, seed=None,
                 exchange="auto", process_group=None, route="encoded", **encoder_kwargs):
        self.codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        choose(exchange, 1)                          # reject a bad name now
        self.exchange = exchange
        self.router = Router() if check_route_mode(route) == "adaptive" else None
        self._step = -1                              # the step bucket 0 started last
        ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
        self.process_group = process_group
        self._coll = Collectives(dist.new_group(ranks, backend="gloo"))
        self._worker = _Worker()
        self._signatures = {}                        # bucket key -> its parameters' shapes

    def stats(self):
        """Bytes, bits per coordinate and times of this rank (``Statistics.summary``)."""
        return self.codec.statistics.summary()

    def state_dict(self):
        """What a resumed job needs to take the same next step: every bucket's step count
        (the quantization seeds and frames follow it), its parameters' shapes, and the
        error-feedback residuals (torch tensors). Call it between steps."""
        codec = self.codec
        return {"steps": dict(codec.steps), "signatures": dict(self._signatures),
                "residuals": {state: torch.from_numpy(np.array(r))
                              for state, r in codec.feedback.residuals.items()}}

    def load_state_dict(self, saved):
        """Restore a ``state_dict``."""
        codec = self.codec
        codec.steps = dict(saved["steps"])
        self._signatures = dict(saved["signatures"])
        codec.feedback.residuals = {tuple(state): r.numpy().copy()
                                    for state, r in saved["residuals"].items()}
        codec.choices.clear()

    def _exchange(self, index, shapes, grads, raw_bytes, step, start, ready):
        """The exchange of DDP's bucket ``index`` at hook ``step``, handed over at ``start``
        (a generator the worker runs: the codec and the router are touched by the worker
        only), whose parameters have ``shapes``: the sum over ranks of ``grads`` (a flat
        float32/64 tensor, read once ``ready``), a tensor on its device."""
        codec, coll = self.codec, self._coll
        if ready is not None:
            yield ready
        route = self._route(index, step, start)
        if not is_encoded(route):
            # One host copy of the bucket in the route's dtype, summed in place.
            dense = grads.to("cpu", torch.float16 if route == "fp16" else grads.dtype,
                             copy=True)
            pending = coll.allreduce_tensor(dense)
            yield pending
            return pending.wait().to(grads.device, grads.dtype)
        key = f"horovod_huffman.ddp.{index}"
        if self._signatures.get(key, shapes) != shapes:
            self._forget(key)
        self._signatures[key] = shapes
        layout = tuple((s[0], int(np.prod(s)) // s[0]) if len(s) > 1 and s[0] else
                       (1, int(np.prod(s))) for s in shapes)
        codec = codec.for_route(route)
        job = Job(key, zlib.crc32(f"{key}/{shapes}".encode()), codec.begin(key), len(shapes),
                  grads.numel(), raw_bytes, layout)
        align = getattr(codec.quantizer, "bucket_size", None) or 1
        total = yield from bucket_sum(codec, coll, job, grads, choose(self.exchange, coll.size),
                                      align, None)
        return as_torch(total, grads.device)

    def _route(self, index, step, start):
        """The route of bucket ``index`` at ``step``: "encoded", or with ``route="adaptive"``
        what the Router gives the step (timed from bucket 0's hand-over to the next step's;
        a decision's allreduce runs on the hook's group, on the worker, in bucket order)."""
        if self.router is None:
            return "encoded"
        return self.router.route(BUCKETS_KEY, step, start, index == 0,
                                 lambda times: self._coll.allreduce(times, "route").wait())

    def _forget(self, key):
        """Drop bucket ``key``'s error-feedback residuals and ``auto``'s choices."""
        codec = self.codec
        codec.feedback.forget(key)
        for slot in [s for s in codec.choices if s[0] == key]:
            del codec.choices[slot]


def hook(state, bucket):
    """DDP communication hook: a Future of the bucket's gradients averaged over the ranks
    (the sum the exchange defines, divided by the world size), in the bucket's dtype."""
    buffer = bucket.buffer()
    grads = buffer.detach()
    if grads.dtype not in (torch.float32, torch.float64):
        grads = grads.float()
    ready = StreamReady.torch(grads.device) if grads.is_cuda else None
    shapes = tuple(tuple(p.shape) for p in bucket.parameters())
    if bucket.index() == 0:                      # DDP hands bucket 0 over first in every step
        state._step += 1
    exchange = state._exchange(bucket.index(), shapes, grads,
                               buffer.numel() * buffer.element_size(), state._step,
                               time.perf_counter(), ready)
    size = state._coll.size

    def mean(total):
        return total.div_(size).to(buffer.dtype)

    return state._worker.submit(exchange, mean, buffer.device)
