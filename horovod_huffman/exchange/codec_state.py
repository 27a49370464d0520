"""The codec state of the exchanges (allreduce.py): ``Codec`` quantizes (with error feedback)
and encodes a bucket's parts, checks the messages the ranks send back before they are
decoded, and keeps each key's steps, statistics and ``auto``'s choices.
"""
import copy
from dataclasses import InitVar, dataclass, field

import numpy as np

from ..codec.encoders import as_encoder, get_encoder
from ..codec.encoders.rows import slice_layout
from ..codec.errors import DecodeError
from ..codec.message import contents, verify
from ..codec.quantizers import QSGD
from .array_ops import work_dtype
from ..codec.pending import Joined, Ready
from .feedback import ErrorFeedback
from .frames import MismatchError, derive_seed
from .routing import FAST_ROUTE
from .statistics import Statistics


@dataclass
class Codec:
    """Quantizer + encoder + error feedback, keyed by parameter name.

    error_feedback: add each parameter's last quantization error to its next gradient, with
    the bucket scales contracted so that the residual never grows (feedback.py; None: on
    exactly when the quantizer is biased). server_error_feedback: in the two-phase exchange,
    keep the error of requantizing this rank's summed shard and add it to the next step's sum
    (None: as ``error_feedback``). Both live on in ``feedback`` (``ErrorFeedback``: ``client``,
    ``server`` and the residuals).
    seed: None draws quantization randomness from the quantizer's own sequence; an integer makes
    it a function of (seed, parameter name, step) only (``derive_seed``), reproducible whatever
    order the gradient hooks fire in.
    """
    encoder: object = "rlh"
    quantizer: object = field(default_factory=lambda: QSGD(levels=8))
    error_feedback: InitVar[object] = None
    server_error_feedback: InitVar[object] = None
    seed: object = None
    steps: dict = field(default_factory=dict)
    statistics: Statistics = field(default_factory=Statistics)
    choices: dict = field(default_factory=dict)
    feedback: ErrorFeedback = field(init=False)
    _fast: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self, error_feedback, server_error_feedback):
        self.encoder = as_encoder(self.encoder)
        if error_feedback is None:
            error_feedback = bool(getattr(self.quantizer, "biased", False))
        if server_error_feedback is None:
            server_error_feedback = error_feedback
        self.feedback = ErrorFeedback(error_feedback, server_error_feedback)

    def for_route(self, route):
        """The codec an encoded ``route`` (routing.ENCODED_ROUTES) codes with: this one for
        "encoded", and for the rlh route (routing.FAST_ROUTE) a view of this one with the
        ``rlh`` encoder that shares every piece of its state (steps, statistics, error
        feedback, ``auto``'s choices); this one again where its encoder is ``rlh``."""
        if route != FAST_ROUTE or getattr(self.encoder, "name", None) == FAST_ROUTE:
            return self
        if self._fast is None:
            self._fast = copy.copy(self)
            self._fast.encoder = get_encoder(FAST_ROUTE)
        return self._fast

    def begin(self, key):
        """The step of ``key`` that starts now (0, 1, ...). A key's second step closes the
        statistics of the current step first."""
        self.statistics.begin(key)
        step = self.steps.get(key, 0)
        self.steps[key] = step + 1
        return step

    def quantize(self, ops, work, shape, seed_name, step, state=None):
        """QuantizedTensor of the 1-D work array ``work`` (float32/64) in ``shape``.

        seed_name, step: the quantization seed (``derive_seed``) when the codec has a seed.
        state: None, or the key of an error-feedback residual: ``feedback`` adds it to ``work``
        first, contracts the bucket scales and stages the new residual, which replaces the kept
        one when the exchange settles (``ErrorFeedback.settle``).
        """
        seed = None if self.seed is None else derive_seed(self.seed, seed_name, step)
        if state is not None:
            return self.feedback.quantize(ops, self.quantizer, work, shape, seed, state)
        return self.quantizer.quantize(work.reshape(shape), seed=seed, stream=ops.stream)

    def quantizing(self, ops, job, works, seed_names, states):
        """A Pending (allreduce.py) of the QuantizedTensors of the 1-D work arrays ``works``
        of ``job`` (allreduce.Job), as ``quantize`` of each with its seed name and state. A
        quantizer that ``quantizes_in_batches`` (QSGD, TernGrad), with no error feedback, joins the
        quantize queue of ``ops`` where it has one (DeviceOps), to be quantized with every
        gradient queued there with it in one launch per kernel (quantize_queue.py), the same
        levels; anything else is quantized now. Seeds are drawn now, in order."""
        queue = getattr(ops, "quantizes", None)
        if queue is not None and works and all(state is None for state in states) and \
                getattr(self.quantizer, "quantizes_in_batches", False):
            seeds = [self.quantizer.next_seed(
                None if self.seed is None else derive_seed(self.seed, name, job.step))
                for name in seed_names]
            return queue.put(self.quantizer, works, seeds, (self.statistics, job.key))
        return Ready([self.quantize(ops, work, (work.size,), name, job.step, state)
                      for work, name, state in zip(works, seed_names, states)])

    def encode(self, ops, qt, job, part, start=0):
        """The message of ``qt``, ``part`` ("all", "shard<j>", "sum") of the exchange ``job``
        (allreduce.Job), which holds the bucket's coordinates from ``start``, encoded with
        this codec's encoder and the part's share of ``job.layout``. The encoder's
        ``encode_part`` decides what codes it: ``auto`` reuses its choice for (job.key, part)
        over several steps of that key, kept in ``choices``."""
        layout = None if job.layout is None else \
            slice_layout(job.layout, start, start + qt.numel)
        return self.encoder.encode_part(
            lambda encoder, layout: ops.encode(qt, encoder, layout), self.choices,
            (job.key, part), job.step, qt.shape, layout)

    def encoding(self, ops, qts, job, parts, starts):
        """A Pending (allreduce.py) of the messages of ``qts``, as ``encode`` of each as
        ``parts`` of ``job`` from ``starts``. On ops with an encode queue (DeviceOps), a tensor
        whose encoder codes batches on the device (``Encoder.batch_member``: the Huffman family
        and ``ans``, or the member ``auto`` chose for its part at an earlier step; none uses a
        layout there) joins that queue, to be encoded with every tensor queued there with that
        encoder as one batch (encode_queue.py), the same bytes; anything else is encoded
        now."""
        queue = getattr(ops, "queue", None)
        if queue is None:
            return Ready([self.encode(ops, qt, job, part, start)
                          for qt, part, start in zip(qts, parts, starts)])
        pendings, run, run_member = [], [], None

        def close_run():
            if run:
                pendings.append(queue.put(run, run_member, self.statistics, job.key))
                run.clear()
        for qt, part, start in zip(qts, parts, starts):
            member = self.encoder.batch_member(self.choices, (job.key, part), job.step)
            if member is not run_member:
                close_run()
                run_member = member
            if member is None:
                pendings.append(Ready([self.encode(ops, qt, job, part, start)]))
            else:
                run.append(qt)
        close_run()
        return pendings[0] if len(pendings) == 1 else Joined(pendings)

    @staticmethod
    def contents(message, numel, dtype, what, rank):
        """The entry (rank_sums.Part) of ``rank``'s message for ``what``: (its checked
        message.Contents, the label a DecodeError of its stream names it by). The message must
        hold ``numel`` coordinates of the work dtype ``dtype`` (``array_ops.work_dtype``);
        DecodeError or MismatchError naming both when it is malformed or of another size or
        dtype."""
        try:
            found = contents(message, max_elements=numel)
        except DecodeError as e:
            raise DecodeError(f"{what!r} from rank {rank}: {e}") from e
        if found.numel != numel or work_dtype(found.dtype) != dtype:
            raise MismatchError(f"rank {rank} sent {found.numel} coordinates of {found.dtype} "
                                f"for {what!r}, expected {numel} of {np.dtype(dtype)}")
        return found, f"{what!r} from rank {rank}"

    def own(self, message, qt, numel, what, rank):
        """This rank's own message as it came back from a collective: checked without decoding
        (``message.verify``: fields and the checksum, so bytes corrupted after encoding fail
        here as on every other rank); returns ``qt``, the QuantizedTensor it encodes
        losslessly."""
        try:
            verify(message, max_elements=numel)
        except DecodeError as e:
            raise DecodeError(f"{what!r} from rank {rank} (this rank): {e}") from e
        return qt
