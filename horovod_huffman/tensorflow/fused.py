"""Fused buckets for the TensorFlow entry points that see all of a step's gradients at once:
``horovod_huffman.tensorflow.DistributedGradientTape`` and
``horovod_huffman.tensorflow.keras.DistributedOptimizer``.

``FusedReduce`` takes the place of Horovod's ``_allreduce_grads(grads, vars)``. It puts the
gradients into the PyTorch adapter's buckets (``buckets.BucketPlan`` of ``bucket_bytes`` of float32,
aligned to the quantizer's bucket size, in the reverse of the variables' order, with each
gradient's rows as the layout), so a bucket's bytes are the PyTorch adapter's for the same names
and gradients. Each bucket is exchanged by the graph stages of ``HuffmanCompressor``: a stage
that copies the bucket's gradients into its buffer and runs the exchange to its first collective,
Horovod's ``alltoall`` (two-phase) and ``allgather`` ops, and a last stage that returns every
gradient's slice of the scaled sum.

Overlap: the stages are stateless graph ops, ordered only by their data, so a bucket's exchange
starts as soon as its gradients exist, while backward computes the next ones, and a bucket is
encoded while Horovod's background thread moves the bytes of the one before. The stages of all
buckets share one lock: one runs at a time. Eagerly, the reduction runs as a ``tf.function``, as
Horovod's own does.

With ``route="adaptive"`` every step's buckets take one route, the same on every rank, as in the
PyTorch adapter (routing.Router): encoded, encoded with ``rlh``, or Horovod's allreduce in
float16 or float32. A stateful stage at the step's start times the step and plans its route;
at a decision step the ranks' probe times are summed by a Horovod allreduce in the graph (under
a ``tf.cond`` that is true on every rank at once); each bucket is a ``tf.switch_case`` on the
route.

Gradients that skip the codec (not floating point, of unknown size, under ``min_numel``) and
``tf.IndexedSlices`` (unless ``sparse_as_dense``) go through Horovod's own allreduce with the
op, fused by Horovod.
"""
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd

from ..adapters import sent_uncompressed
from ..exchange.buckets import BucketPlan, bucket_layout
from ..exchange.routing import BUCKETS_KEY, FAST_ROUTE, ROUTES, Router
from .compressor import op_name

__all__ = ["FusedReduce", "fused_reduce", "variable_names"]


def fused_reduce(compressor, op=hvd.Average, process_set=hvd.global_process_set,
                 sparse_as_dense=False, gradient_predivide_factor=1.0, name="DistributedFused"):
    """The ``FusedReduce`` of ``compressor`` with these settings, built on first use and kept
    in ``compressor.fused``, so that a tape made anew every step reuses its plans and traced
    functions."""
    key = (op, process_set.process_set_id, bool(sparse_as_dense),
           float(gradient_predivide_factor), name)
    reduce = compressor.fused.get(key)
    if reduce is None:
        reduce = compressor.fused[key] = FusedReduce(
            compressor, op, process_set, sparse_as_dense, gradient_predivide_factor, name)
    return reduce


class FusedReduce:
    """Horovod's ``allreduce_grads(grads, vars=None, use_generic_names=False)`` through
    ``compressor``'s codec in fused buckets.

    op: ``hvd.Average`` (the sum over ``process_set`` divided by its size) or ``hvd.Sum``.
    gradient_predivide_factor: as Horovod's (with op=Average its pre- and postscale cancel, so
    the result is the average whatever the factor). With one rank the gradients come back as
    they are, as from Horovod's allreduce.
    """

    def __init__(self, compressor, op=hvd.Average, process_set=hvd.global_process_set,
                 sparse_as_dense=False, gradient_predivide_factor=1.0, name="DistributedFused"):
        if op not in (hvd.Average, hvd.Sum):
            raise ValueError(f"horovod-huffman reduces with Average or Sum (op=hvd.Average, "
                             f"op=hvd.Sum), not op={op}")
        self.compressor = compressor
        self.op = op
        self.process_set = process_set
        self.sparse_as_dense = sparse_as_dense
        self.name = name
        if op == hvd.Average:
            self._prescale, self._postscale = 1.0 / gradient_predivide_factor, \
                gradient_predivide_factor
        else:
            self._prescale = self._postscale = 1.0
        self._plans = {}
        self._eager = {}

    def __call__(self, grads, vars=None, use_generic_names=False):  # noqa: A002 (Horovod's name)
        grads = list(grads)
        if self.process_set.size() == 1 or not self.process_set.included():
            return grads
        names = variable_names(vars, len(grads))
        if tf.executing_eagerly():
            fn = self._eager.get(names)
            if fn is None:
                fn = self._eager[names] = tf.function(
                    lambda grads: self._reduce(grads, names))
            return list(fn(grads))
        return self._reduce(grads, names)

    @property
    def plans(self):
        """The ``BucketPlan`` of every list of gradients reduced so far."""
        return [state.plan for state in self._plans.values()]

    @property
    def routers(self):
        """With ``route="adaptive"``, the ``routing.Router`` of every plan (``plans``' order)."""
        return [state.router for state in self._plans.values()]

    # ---- the graph ---------------------------------------------------------------------------

    def _reduce(self, grads, names):
        with tf.name_scope(self.name + "_Allreduce"):
            if self.sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                         for g in grads]
            out = list(grads)
            encoded = [i for i, g in enumerate(grads) if self._encodes(g)]
            state = self._plan(names, grads, encoded)
            index = {names[i]: i for i in encoded}
            skipped = [i for i, g in enumerate(grads) if g is not None and names[i] not in index]
            route = None if state.router is None or not state.plan.buckets else \
                self._route(state)
            for bucket in state.plan.buckets:
                members = [index[slot.name] for slot in bucket.slots]
                member_grads = [grads[i] for i in members]
                layout = bucket_layout(bucket, state.rows)
                if route is None:
                    sums = self._encoded(bucket, layout, member_grads)
                else:
                    sums = tf.switch_case(route, [
                        lambda: self._encoded(bucket, layout, member_grads),
                        lambda: self._encoded(bucket, layout, member_grads, FAST_ROUTE),
                        lambda: self._dense(member_grads, tf.float16),
                        lambda: self._dense(member_grads, tf.float32)],
                        name=op_name(bucket.key) + "_route")
                for i, total in zip(members, sums):
                    out[i] = total
            # Horovod's own allreduce for the rest, after the buckets' collectives in the graph.
            for i in skipped:
                out[i] = self._horovod_allreduce(grads[i])
            return out

    def _encodes(self, grad):
        if grad is None or isinstance(grad, tf.IndexedSlices):
            return False
        return not sent_uncompressed(grad.shape.num_elements(), grad.dtype.is_floating,
                                     self.compressor.fused_min_numel)

    def _plan(self, names, grads, encoded):
        """The ``_PlanState`` of the encoded gradients ``encoded`` (indices), built once per
        list of names and shapes: the PyTorch adapter's plan for the same entries."""
        key = tuple((names[i], tuple(grads[i].shape), grads[i].dtype.name) for i in encoded)
        found = self._plans.get(key)
        if found is None:
            device = "cuda" if self.compressor.on_gpu else "cpu"
            entries = [(names[i], grads[i].shape.num_elements(),
                        f"{_work(grads[i].dtype).name}@{device}") for i in reversed(encoded)]
            align = getattr(self.compressor.codec.quantizer, "bucket_size", None) or 1
            plan = BucketPlan(entries, capacity=max(self.compressor.bucket_bytes // 4, 1),
                              align=align)
            rows = {names[i]: grads[i].shape[0] if grads[i].shape.rank > 1 else 1
                    for i in encoded}
            found = self._plans[key] = _PlanState(
                plan, rows, Router() if self.compressor.route == "adaptive" else None)
        return found

    def _encoded(self, bucket, layout, members, route="encoded"):
        """The graph of one bucket's compressed exchange on the encoded ``route``
        (routing.ENCODED_ROUTES): every member's reduced gradient, in its shape and dtype."""
        comp = self.compressor
        work = _work(members[0].dtype)
        scale = 1.0 / self.process_set.size() if self.op == hvd.Average else 1.0
        spans = [(slot.offset, slot.numel) for slot in bucket.slots]

        def finish(received):
            with comp.lock:
                return comp.outgoing(comp.finish(bucket.key, received), scale, work, spans)

        gathered = comp.exchange_stages(
            bucket, layout, [tf.cast(m, work) for m in members],
            [m.shape.num_elements() * m.dtype.size for m in members], self.process_set,
            stateful=False, route=route)
        sums = comp.stage(finish, [gathered], [work] * len(members),
                          op_name(bucket.key) + "_decode", stateful=False)
        return [tf.cast(tf.reshape(total, tf.shape(m)), m.dtype)
                for total, m in zip(sums, members)]

    def _dense(self, members, dtype):
        """Horovod's allreduce of a bucket's gradients as ``dtype`` (the float16 and float32
        routes), fused by Horovod, with the op; back in each gradient's dtype."""
        sent = [tf.cast(m, dtype) for m in members]
        out = hvd.grouped_allreduce(sent, op=self.op, prescale_factor=self._prescale,
                                    postscale_factor=self._postscale,
                                    process_set=self.process_set)
        return [tf.cast(o, m.dtype) for o, m in zip(out, members)]

    def _route(self, state):
        """The graph of the step's route (an int32 index into ``routing.ROUTES``), the same on
        every rank: a stateful stage times the step and plans its route (routing.Router), at a
        decision step Horovod's allreduce sums the ranks' probe times, and a second stage
        decides."""
        comp, router = self.compressor, state.router

        def begin():
            with comp.lock:
                step, start = state.steps, time.perf_counter()
                state.steps += 1
                router.observe(BUCKETS_KEY, step, start)
                route = router.plan(BUCKETS_KEY, step)
                state.started = (step, start)
                if route is None:
                    return router.local_times(BUCKETS_KEY), True
                return np.full(len(ROUTES), ROUTES.index(route), np.float64), False

        def end(times, agree):
            with comp.lock:
                step, start = state.started
                route = router.decide(BUCKETS_KEY, times) if agree else ROUTES[int(times[0])]
                router.started(BUCKETS_KEY, step, route, start)
                return np.int32(ROUTES.index(route))

        name = op_name(f"{self.name}.route")
        times, agree = comp.stage(begin, [], [tf.float64, tf.bool], name + "_plan",
                                  stateful=True)
        times.set_shape([len(ROUTES)])
        summed = tf.cond(agree, lambda: hvd.allreduce(times, op=hvd.Sum, name=name + "_agree",
                                                      process_set=self.process_set),
                         lambda: times)
        route = comp.stage(end, [summed, agree], tf.int32, name + "_decide", stateful=True)
        route.set_shape([])
        return route

    def _horovod_allreduce(self, grad):
        cast = grad.dtype == tf.bfloat16 and not isinstance(grad, tf.IndexedSlices)
        sent = tf.cast(grad, tf.float32) if cast else grad
        out = hvd.allreduce(sent, op=self.op, prescale_factor=self._prescale,
                            postscale_factor=self._postscale, process_set=self.process_set)
        return tf.cast(out, tf.bfloat16) if cast else out


class _PlanState:
    """One list of gradients' bucket ``plan``, each gradient's ``rows``, and with adaptive
    routing its ``router`` and step count."""

    def __init__(self, plan, rows, router):
        self.plan, self.rows, self.router = plan, rows, router
        self.steps = 0
        self.started = None


def _work(dtype):
    """The work dtype of a gradient: float64 for float64, else float32."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def variable_names(variables, count=None):
    """The names the buckets know the gradients of ``variables`` by (tf.Variables, or None for
    ``count`` unnamed gradients), the same on every rank: each variable's name without its
    ``:0`` (for the tf.Variable behind a Keras 3 variable, its path), ``#k`` added to the k-th
    repeat of a name; ``grad_<i>`` for a source without a name (a watched tensor outside any
    graph)."""
    count = len(variables) if count is None else count
    names, seen = [], {}
    for i in range(count):
        var = variables[i] if variables is not None else None
        try:
            name = var.name.split(":")[0] if var is not None else f"grad_{i}"
        except (AttributeError, ValueError):
            name = f"grad_{i}"
        k = seen.get(name, 0)
        seen[name] = k + 1
        names.append(name if k == 0 else f"{name}#{k}")
    return tuple(names)
