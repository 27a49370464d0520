"""``auto``: encode with whichever encoder gives the smallest stream for this tensor.

``rlh``'s tokens (one pass, kept for ``rla``), one pass over them (kernels/stats.py), the
``sh``/``shs`` samples and the ANS coders' plans give every candidate's stream size without
encoding: the Huffman and Elias coders' payloads exactly when [min, max] fits the windows, to
within the escape cost otherwise. Then only the winner encodes (reusing its plan).
"""
from collections import namedtuple

import numpy as np

from horovod_huffman.kernels.estimate import elias_level_bits
from horovod_huffman.kernels.maxima import ANS_MAX_WINDOW
from horovod_huffman.kernels.runs import RUN_BUCKETS
from horovod_huffman.kernels.stats import level_range, token_statistics

from .. import wire
from ..device import is_device_array, as_device_array, stream_or_default, copy_to_host
from ..params import value_bits
from .ans import Ans, release
from .base import Encoder, check_levels
from .elias import EliasGamma, EliasDelta, EliasOmega, EliasRLE, QSGDElias
from .huffman import Huffman, SampleHuffman, LevelPlan, emit, plan_bits
from .raw import Raw, fixed_width
from .rla import RLA
from .rows import check_layout
from .row_search import find_layout
from .runlength import RLH, SHS, emit_shs, rlh_payload_bits, token_counts
from .codes import Code

# The ANS coders of levels and of run-length tokens: where the runner-up's estimate is within
# CLOSE times the best one's, ans's (from sampled blocks, off by up to a few percent) is
# counted over every block, which leaves both within 0.5% of their streams.
RIVALS = {"ans": "rla", "rla": "ans"}
CLOSE = 1.06
# ``Auto.encode_part``: the encoder chosen for a part of an exchange at one step of it codes
# that part for the next RECHOOSE_EVERY - 1 steps, so that choosing, which costs more than
# encoding, is paid on one step in this many (docs/design.md has the measurements).
RECHOOSE_EVERY = 8
# Parameter bytes besides the codebook: mode, base, window, k, count varints.
PARAM_OVERHEAD_BYTES = 12


class Sized(namedtuple("Sized", "bytes plan")):
    """A candidate's estimated stream ``bytes`` (header and checksum included) and the
    ``plan`` its encoder would code with (None where it plans anew)."""
    __slots__ = ()


def _param_bytes(code):
    """Parameter bytes of a stream with ``code`` (a codes.Code)."""
    return len(code.codebook()) + PARAM_OVERHEAD_BYTES



class Auto(Encoder):
    """Picks the smallest of every listed encoder per tensor; the stream names the winner, so
    ``hh.decode`` needs nothing from this object. ``last_choice`` holds the latest pick."""
    name = "auto"

    def __init__(self, sample_size=1000, k=200, seed=None, rechoose_every=RECHOOSE_EVERY):
        if int(rechoose_every) < 1:
            raise ValueError(f"rechoose_every must be at least 1, got {rechoose_every!r}")
        self.rechoose_every = int(rechoose_every)
        self.sh = SampleHuffman(sample_size=sample_size, seed=seed)
        self.shs = SHS(sample_size=sample_size, k=k, seed=seed)
        self.huffman, self.rlh, self.raw = Huffman(), RLH(), Raw()
        self.elias = [EliasGamma(), EliasDelta(), EliasOmega()]
        self.elias_rle, self.qsgd_elias = EliasRLE(), QSGDElias()
        self.ans, self.rla = Ans(), RLA()
        self.last_choice = None

    def _config(self):
        config = {"sample_size": self.sh.sample_size, "k": self.shs.k, "seed": self.sh.seed}
        if self.rechoose_every != RECHOOSE_EVERY:
            config["rechoose_every"] = self.rechoose_every
        return config

    def encode_part(self, encode, memory, slot, step, shape, layout):
        """As Encoder.encode_part, choosing once in ``rechoose_every`` steps: the member chosen
        for ``slot`` at its step s codes it at steps s + 1 .. s + rechoose_every - 1, then this
        object chooses again. A choice at step 0 is not kept, so slots used once (TF's eager
        gradients) leave nothing in ``memory``. Without a layout, a part of fewer than two
        dimensions is chosen for without a row model, as the member that codes it later codes
        it (message.encode gives a row model only to a matrix's shape), rather than searched
        for matrices (encoders/row_search.py). The stream names its encoder either way."""
        if layout is None and len(shape) < 2:
            layout = ()
        member = self._reused(memory, slot, step)
        if member is not None:
            return encode(member, layout)
        message = encode(self, layout)
        if step > 0:
            memory[slot] = (self, self.member(message.stream.encoder_id), step)
        return message

    def _reused(self, memory, slot, step):
        """The member chosen for ``slot`` at an earlier step that codes it at ``step`` without
        choosing (``encode_part``), or None."""
        chooser, member, chosen_at = memory.get(slot, (None, None, 0))
        if chooser is self and 0 < step - chosen_at < self.rechoose_every:
            return member
        return None

    def batch_member(self, memory, slot, step):
        """The member ``encode_part`` reuses for ``slot`` at ``step``, where it codes device
        tensors in batches; else None (a step that chooses encodes through
        ``encode_part``)."""
        member = self._reused(memory, slot, step)
        return None if member is None else member.batch_member(memory, slot, step)

    def estimate(self, levels, layout=None):
        """{encoder name: ``Sized``} for 1-D levels (non-empty); ``ans`` may use the row model
        of ``layout`` (encoders/rows.py; None: of the matrices ``find_layout`` finds, an empty
        one: no row model)."""
        lo, hi = level_range(levels)
        k = self.shs.k
        tokens = token_counts(levels, self.rla.chunk_levels, contexts=True)
        base, window, rlh_counts, ends, symbols, chunk_runs, *_ = tokens
        level_counts = np.zeros(window + 1, dtype=np.int64)
        zero_runs = np.zeros(k + 1, dtype=np.int64)
        rle_bits, qsgd_bits, chunks = token_statistics(levels, ends, symbols.size, chunk_runs,
                                                       base, window, k, level_counts, zero_runs)
        vbits = value_bits(levels.dtype)
        n_esc = int(level_counts[window])
        sizes = {}

        def put(name, payload_bits, param_bytes=0, plan=None):
            sizes[name] = Sized(wire.OVERHEAD_BYTES + param_bytes + (payload_bits + 7) // 8, plan)

        # huffman and sh: a level plan applied to the full histogram.
        h_plan = LevelPlan.from_counts(base, window, level_counts)
        put("huffman", plan_bits(h_plan, level_counts, vbits), _param_bytes(h_plan.code))
        sh_plan = self.sh.plan(levels)
        if sh_plan.window == window:
            put("sh", plan_bits(sh_plan, level_counts, vbits), _param_bytes(sh_plan.code),
                sh_plan)
        # rlh: joint token histogram.
        escape = window * RUN_BUCKETS
        r_code = Code.from_counts(rlh_counts, escape)
        esc_bits = r_code.lengths[np.searchsorted(r_code.symbols, escape)] \
            if rlh_counts[escape] else 0
        put("rlh", rlh_payload_bits(rlh_counts, r_code, window)
            + int(rlh_counts[escape]) * (int(esc_bits) + vbits + 2 * 16), _param_bytes(r_code))
        # shs: model lengths applied to non-zero levels and to the zero-run chunking.
        s_plan = self.shs.plan(levels)
        if s_plan.base == base and s_plan.window == window:
            s_len = s_plan.lengths
            nz = level_counts[:window].copy()
            if 0 <= -base < window:
                nz[-base] = 0
            bits = int(np.dot(nz, s_len[:window])) + n_esc * (int(s_len[window + k]) + vbits)
            bits += int(np.dot(zero_runs[1:k], s_len[window:window + k - 1]))
            bits += chunks * int(s_len[window + k - 1])
            put("shs", bits, _param_bytes(s_plan.code), s_plan)
        # per-symbol Elias codes: code length of each level times its count.
        for enc in self.elias:
            per_level = elias_level_bits(enc.kind, base, window)
            put(enc.name, int(np.dot(level_counts[:window], per_level)) + n_esc * 65)
        put("elias_rle", rle_bits)
        put("qsgd_elias", qsgd_bits)
        put("raw", levels.size * fixed_width(lo, hi), 4)
        # ans: the information of the levels under their normalized frequencies, per class of
        # blocks where that pays (exact up to the final states), when no level escapes.
        if n_esc == 0 and window <= ANS_MAX_WINDOW:
            found = find_layout(levels, (lo, hi)) if layout is None else layout
            a_plan, a_bytes = self.ans.sized_plan(levels, found)
            sizes["ans"] = Sized(wire.OVERHEAD_BYTES + a_bytes, a_plan)
        # rla: the same for rlh's run-length tokens (the plan keeps them).
        r_plan, r_bytes = self.rla.sized_plan(levels, tokens)
        sizes["rla"] = Sized(wire.OVERHEAD_BYTES + r_bytes, r_plan)
        return sizes

    def choose(self, levels, layout=None):
        """(name, plan) of the encoder with the smallest estimated stream for 1-D levels
        (non-empty). Where ``ans`` and ``rla`` lie within CLOSE of each other, ans's estimate
        (from sampled blocks) is replaced by its count over every block. An ``ans`` plan not
        chosen gives its buffer back (ans.py ``release``)."""
        sizes = self.estimate(levels, layout)
        name = min(sizes, key=lambda n: sizes[n].bytes)
        rival = RIVALS.get(name)
        if rival in sizes and sizes[rival].bytes <= CLOSE * sizes[name].bytes:
            plan = sizes["ans"].plan
            sizes["ans"] = Sized(wire.OVERHEAD_BYTES + self.ans.counted_bytes(levels, plan),
                                 plan)
            name = min(name, rival, key=lambda n: sizes[n].bytes)
        if name != "ans" and "ans" in sizes:
            release(sizes["ans"].plan)
        return name, sizes[name].plan

    def members(self):
        """The encoders this object chooses among (its own instances)."""
        return [self.huffman, self.rlh, self.sh, self.shs, self.elias_rle, self.qsgd_elias,
                self.raw, self.ans, self.rla, *self.elias]

    def _member(self, attribute, value):
        """The member whose ``attribute`` ("name" or "encoder_id") is ``value``."""
        for enc in self.members():
            if getattr(enc, attribute) == value:
                return enc
        raise KeyError(value)

    def member(self, encoder_id):
        """This object's own encoder of ``encoder_id`` (the ``wire.Encoded.encoder_id`` of a
        stream it wrote), configured as this object configures it."""
        return self._member("encoder_id", encoder_id)

    def encoded(self, levels, stream=None, layout=None):
        """As Encoder.encoded, where levels without a ``layout`` are searched for matrices
        (``estimate``); device levels are copied to the host first (the choice needs
        statistics the device kernels do not gather yet), and chosen for without a row model,
        as the encoders' device paths code them (``Encoder.encode``)."""
        if is_device_array(levels):
            levels = copy_to_host(as_device_array(levels), stream_or_default(stream))
            layout = ()
        levels = check_levels(levels)
        if layout is not None:
            layout = check_layout(layout, levels.size)
        if levels.size == 0:
            self.last_choice = "raw"
            return self.raw.encoded(levels)
        name, plan = self.choose(levels, layout)
        self.last_choice = name
        emitted = self._emitted(levels, name, plan)
        release(plan)
        return emitted

    def _emitted(self, levels, name, plan):
        """The stream of encoder ``name`` for ``levels`` with its ``plan`` (or none)."""
        enc = self._member("name", name)
        if plan is None:
            return enc._result(levels.dtype, levels.size, *enc._encode(levels))
        if enc is self.shs:
            return enc._result(levels.dtype, levels.size, *emit_shs(levels, plan))
        if enc is self.ans or enc is self.rla:
            return enc._result(levels.dtype, levels.size, *enc.emit(levels, plan))
        return enc._result(levels.dtype, levels.size, *emit(levels, plan))
