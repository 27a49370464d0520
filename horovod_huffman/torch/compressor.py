"""The Horovod compressor of the PyTorch adapter (``HuffmanCompressor``).

Horovod sums whatever ``compress`` returns with allreduce, and encoded streams cannot be summed.
So ``compress`` copies the gradient into its fused bucket (buckets.py) and hands allreduce a
two-element placeholder; when a bucket's last gradient arrives, a worker thread (pipeline.py)
quantizes and encodes the bucket and reduces it with a compressed exchange (allreduce.py: the
one-phase allgather or the two-phase reduce-scatter + allgather) over Horovod's collectives
(horovod_ops.py), while backward goes on. ``decompress`` waits for its bucket and scales its
slice of the sum the way the allreduce of the placeholder says the optimizer reduces (Average or
Sum). docs/torch-adapter.md has the design.
"""
import sys
import time
import weakref
from dataclasses import dataclass

import torch

from ..adapters import CodecStats, sent_uncompressed
from ..exchange.allreduce import Job, choose
from ..exchange.buckets import DEFAULT_BUCKET_BYTES, DEFAULT_MIN_NUMEL, BucketPlan, bucket_layout
from ..exchange.frames import placeholder_values, reduction_scale
from ..exchange.pipeline import Pipeline
from ..exchange.routing import BUCKETS_KEY, Router, check_route_mode, is_encoded
from .bucket_arrays import StreamReady, as_torch, bucket_sum
from .horovod_ops import Collectives, hvd, needs_horovod

__all__ = ["HuffmanCompressor"]

# How many caller frames to search for Horovod's optimizer (hook -> _allreduce_grad_async ->
# compress, or the grouped path's list comprehension one level deeper).
_FRAME_SEARCH_DEPTH = 6


class _Round:
    """One bucket's gradients for one step: its route, the slots filled so far, and for the
    encoded route, once every slot is filled (or the step ends), the Future of the bucket's
    reduced sum. ``closed``: the step is over for this bucket; its next gradient starts the
    next round."""

    def __init__(self):
        self.route = "encoded"
        self.filled = set()
        self.future = None
        self.closed = False


# ctx of a gradient that rides the optimizer's own allreduce as it is (a dense route).
_DENSE = "dense"


@dataclass
class _Pending:
    """ctx of a gradient sent through a bucket: which bucket (``state``, ``bucket``), the
    ``round`` whose Future gives the bucket's sum, the gradient's ``slot`` in it, and how to
    rebuild the tensor (shape, dtype, device)."""
    state: object
    bucket: object
    round: _Round
    slot: object
    shape: tuple
    dtype: torch.dtype
    device: torch.device


class _Buckets:
    """The buckets of one optimizer: plan, staging buffers, this step's rounds, collectives,
    and every bucket's layout (``rows``: each gradient's rows, its shape's first dimension)."""

    def __init__(self, plan, process_set, exchange, route, rows):
        self.plan = plan
        self.layouts = {b.index: bucket_layout(b, rows) for b in plan.buckets}
        self.coll = Collectives(process_set)
        self.exchange = choose(exchange, self.coll.size)
        self.router = Router() if route == "adaptive" else None
        self.staging = {}
        self.rounds = {b.index: _Round() for b in plan.buckets}
        self.steps = {b.index: 0 for b in plan.buckets}
        self.raw_bytes = {b.index: 0 for b in plan.buckets}


class HuffmanCompressor(CodecStats):
    """A Horovod compressor (``compress``/``decompress``) around a ``Codec``.

    ``compress(tensor) -> (tensor or placeholder, ctx)``. ctx is None when the tensor is sent
    uncompressed through Horovod's allreduce (fewer than ``min_numel`` elements, or not floating
    point), ``_DENSE`` when its bucket takes the float32 route this step, a ``torch.dtype`` when
    it is sent as another dtype and cast back (the float16 route; bfloat16, which Horovod 0.28's
    own ops reject, as float32), and otherwise a ``_Pending`` record of its bucket.

    Buckets hold ``bucket_bytes`` of float32 gradients (``buckets.BucketPlan``, in the reverse of
    the optimizer's parameter order, roughly the order backward produces them). ``exchange``:
    "allgather", "two_phase" or "auto" (``allreduce.choose``). ``route``: "encoded" sends every
    bucket encoded; "adaptive" sends the buckets encoded, encoded with ``rlh`` (the fastest
    coder), or as float16 or float32 through Horovod's own allreduce, whichever gave the ranks
    the fastest steps (routing.Router).
    """

    def __init__(self, codec, min_numel=DEFAULT_MIN_NUMEL, named_parameters=None,
                 process_set=None, exchange="auto", bucket_bytes=DEFAULT_BUCKET_BYTES,
                 route="encoded"):
        needs_horovod()
        self.codec = codec
        self.min_numel = int(min_numel)
        self._named = list(named_parameters) if named_parameters is not None else None
        self._names = None if self._named is None else {id(p): n for n, p in self._named}
        self.process_set = process_set
        choose(exchange, 1)                         # reject a bad name at build time
        self.exchange = exchange
        self.route = check_route_mode(route)
        self.bucket_bytes = int(bucket_bytes)
        # Bucket state per optimizer, dropped with the optimizer (a rebuilt optimizer, e.g.
        # after a model is factorized, gets a plan of its own); None: no optimizer found.
        self._states = weakref.WeakKeyDictionary()
        self._unowned = None
        self._pipeline = Pipeline()

    # ---- Horovod's Compressor API --------------------------------------------------------

    def compress(self, tensor):
        if isinstance(tensor, torch.nn.Parameter):
            raise ValueError("horovod-huffman cannot be used with op=hvd.Adasum: Adasum reduces "
                             "parameter deltas pairwise and needs summable tensors; use "
                             "op=hvd.Average or hvd.Sum")
        if sent_uncompressed(tensor.numel(), tensor.is_floating_point(), self.min_numel):
            if tensor.dtype == torch.bfloat16:
                return tensor.float(), torch.bfloat16
            return tensor, None
        name, optimizer, process_set = self._identify(tensor)
        state = self._buckets(optimizer, process_set)
        if name not in state.plan.where:
            raise RuntimeError(f"gradient of {name!r} is in no bucket: the parameter does not "
                               "require grad, or is not in the optimizer this compressor serves")
        bucket, slot = state.plan.where[name]
        current = state.rounds[bucket.index]
        if current.closed:                         # the previous step's round is over
            current = state.rounds[bucket.index] = _Round()
        if name in current.filled:
            raise RuntimeError(f"gradient of {name!r} handed to compress twice in one step")
        if not current.filled:                     # the bucket's first gradient this step
            current.route = self._route(state, bucket)
        current.filled.add(name)
        full = len(current.filled) == len(bucket.slots)
        if not is_encoded(current.route):
            # A dense route is Horovod's own allreduce of the gradient (Compression.none or
            # .fp16), fused by Horovod, with the optimizer's op and scale factors.
            current.closed = full
            if current.route == "fp16":
                return tensor.to(torch.float16), tensor.dtype
            return (tensor.float(), torch.bfloat16) if tensor.dtype == torch.bfloat16 else \
                (tensor, _DENSE)
        staging = self._staging(state, bucket, tensor.device)
        staging[slot.offset:slot.offset + slot.numel].copy_(tensor.detach().reshape(-1))
        state.raw_bytes[bucket.index] += tensor.numel() * tensor.element_size()
        if full:
            self._send(state, bucket, current)
        placeholder = torch.tensor(placeholder_values(state.coll.rank), dtype=torch.float32,
                                   device=tensor.device)
        return placeholder, _Pending(state, bucket, current, slot, tuple(tensor.shape),
                                     tensor.dtype, tensor.device)

    def decompress(self, tensor, ctx):
        if ctx is None:
            return tensor
        if ctx is _DENSE:
            self._close_dense_rounds()
            return tensor
        if isinstance(ctx, torch.dtype):
            self._close_dense_rounds()
            return tensor.to(ctx)
        if ctx.round.future is None:
            # The step ended with this bucket incomplete (gradients Horovod reduces by its own
            # sparse path never reach compress): send every such bucket, missing slots zero.
            for bucket in ctx.state.plan.buckets:
                pending = ctx.state.rounds[bucket.index]
                if pending.future is None and pending.filled:
                    self._send(ctx.state, bucket, pending)
        scale = reduction_scale(tensor.detach().float().cpu().numpy(), ctx.state.coll.size,
                                ctx.slot.name)
        total = ctx.round.future.result()
        part = total[ctx.slot.offset:ctx.slot.offset + ctx.slot.numel]
        out = as_torch(part, ctx.device)
        if scale != 1.0:
            out.mul_(scale)        # the exchange's sum is this step's own array: no copy
        return out.reshape(ctx.shape).to(device=ctx.device, dtype=ctx.dtype)

    @property
    def plans(self):
        """The ``BucketPlan`` of every live optimizer served so far (and of gradients named by
        ``named_parameters`` outside any optimizer)."""
        states = list(self._states.values()) + [s for s in [self._unowned] if s is not None]
        return [state.plan for state in states]

    # ---- buckets ---------------------------------------------------------------------------

    def _buckets(self, optimizer, process_set):
        """The bucket state of ``optimizer`` (built on its first gradient)."""
        state = self._unowned if optimizer is None else self._states.get(optimizer)
        if state is None:
            entries = [(name, p.numel(), _kind(p)) for name, p in reversed(
                self._parameters(optimizer))]
            align = getattr(self.codec.quantizer, "bucket_size", None) or 1
            plan = BucketPlan(entries, capacity=max(self.bucket_bytes // 4, 1), align=align)
            rows = {name: p.shape[0] if p.dim() > 1 else 1
                    for name, p in self._parameters(optimizer)}
            state = _Buckets(plan, process_set, self.exchange, self.route, rows)
            if optimizer is None:
                self._unowned = state
            else:
                self._states[optimizer] = state
        return state

    def _parameters(self, optimizer):
        """(name, parameter) of every parameter whose gradient this compressor encodes (it
        requires grad, is floating point and has at least ``min_numel`` elements), in the
        optimizer's order (else the ``named_parameters`` order)."""
        if optimizer is not None:
            names = optimizer._parameter_names
            named = [(names[p], p) for group in optimizer.param_groups for p in group["params"]
                     if p in names]
        else:
            named = self._named
        return [(n, p) for n, p in named if p.requires_grad and
                not sent_uncompressed(p.numel(), p.is_floating_point(), self.min_numel)]

    def _route(self, state, bucket):
        """The route of ``bucket`` for the step its first gradient starts now: "encoded", or
        with ``route="adaptive"`` whatever the Router plans for the optimizer's buckets. Every
        bucket of a step takes the same route, so one route's step is what is timed; the
        period is taken at bucket 0 (the first one backward fills). At a decision step the
        first bucket to start allreduces this rank's probe timings, on every rank."""
        step = state.steps[bucket.index]
        state.steps[bucket.index] = step + 1
        router = state.router
        if router is None:
            return "encoded"
        return router.route(BUCKETS_KEY, step, time.perf_counter(), bucket.index == 0,
                            lambda times: state.coll.allreduce(
                                times, f"horovod_huffman.route.{step}").wait())

    def _close_dense_rounds(self):
        """At the step's end (the optimizer's first decompress): every round still open on a
        dense route is over, even if some of its gradients never came (sparse ones)."""
        for state in list(self._states.values()) + [s for s in [self._unowned] if s]:
            for current in state.rounds.values():
                if not is_encoded(current.route) and current.filled:
                    current.closed = True

    def _staging(self, state, bucket, device):
        staging = state.staging.get(bucket.index)
        if staging is None:
            dtype = torch.float64 if bucket.kind.startswith("float64") else torch.float32
            staging = state.staging[bucket.index] = torch.zeros(bucket.size, dtype=dtype,
                                                                device=device)
        return staging

    def _send(self, state, bucket, current):
        """Start the exchange of a bucket on the worker thread: ``current.future``. The staging
        buffer is read by the worker until the future is done; it is written again only in the
        next step, after ``decompress`` has waited for that future. A CUDA buffer is read once
        the copies queued into it have run (``StreamReady``, polled by the worker)."""
        staging = state.staging[bucket.index]
        raw_bytes, state.raw_bytes[bucket.index] = state.raw_bytes[bucket.index], 0
        ready = StreamReady.torch(staging.device) if staging.is_cuda else None
        exchange = _exchange(self.codec.for_route(current.route), state, bucket, staging,
                             raw_bytes, ready)
        current.future = self._pipeline.submit(exchange)
        current.closed = True

    # ---- which parameter is this? --------------------------------------------------------------

    def _identify(self, tensor):
        """(parameter name, Horovod optimizer or None, process set) for a gradient handed to
        ``compress``.

        Finds the parameter whose ``.grad`` this is, from the ``named_parameters`` given to
        ``Compression.build`` or from Horovod's optimizer frames (which hold the parameter ``p``
        and the optimizer's own name table); names are the same on every rank and every step.
        """
        param, optimizer = None, None
        frame = sys._getframe(2)
        for _ in range(_FRAME_SEARCH_DEPTH):
            if frame is None:
                break
            local = frame.f_locals
            p = local.get("p")
            if param is None and isinstance(p, torch.nn.Parameter) and \
                    (p.grad is tensor or (p.grad is not None and p.grad.is_sparse)):
                param = p
            owner = local.get("self")
            if param is not None and hasattr(owner, "_parameter_names"):
                optimizer = owner
                break
            frame = frame.f_back
        if param is None and self._names is not None:
            raise RuntimeError("gradient handed to compress() belongs to no known parameter")
        name = None
        if param is not None and self._names is not None:
            name = self._names.get(id(param))
        if name is None and optimizer is not None:
            name = optimizer._parameter_names.get(param)
        if name is None:
            raise RuntimeError(
                "horovod-huffman could not tell which parameter this gradient belongs to: use it "
                "through hvd.DistributedOptimizer, or pass named_parameters=model.named_parameters() "
                "to Compression.build")
        process_set = self.process_set
        if process_set is None and optimizer is not None:
            process_set = getattr(optimizer, "process_set", None)
        return name, optimizer, process_set if process_set is not None else hvd.global_process_set


def _kind(param):
    """A bucket kind: gradients share a bucket only with the same work dtype and device."""
    dtype = "float64" if param.dtype == torch.float64 else "float32"
    return f"{dtype}@{param.device}"


def _exchange(codec, state, bucket, staging, raw_bytes, ready):
    """The exchange of one bucket (a generator run by the worker thread) with ``codec`` (the
    route's, ``Codec.for_route``): on the host, or for a CUDA bucket, once ``ready``, with the
    kernels on a stream of the worker's own, synced before the training thread reads the sum
    (bucket_arrays.py)."""
    job = Job(bucket.key, bucket.tag, codec.begin(bucket.key), len(bucket.slots), bucket.numel,
              raw_bytes, state.layouts[bucket.index])
    return (yield from bucket_sum(codec, state.coll, job, staging, state.exchange,
                                  state.plan.align, ready))
