"""Adaptive routing: each bucket goes the way measured to be fastest, encoded, float16 or
float32, and every rank takes the same way.

A ``Router`` holds, per bucket, the wall time of its exchange by each route (from the exchange's
start on the worker to its sum, so codec time and link time both count). It runs in three
phases per bucket, by the bucket's step number, which is the same on every rank:

- probing: steps 0 .. 3 * PROBE_ROUNDS - 1 cycle through the routes (encoded, fp16, fp32, ...);
  the first round only warms up (first calls, first allocations) and is not timed;
- deciding: at the next step, the ranks allreduce their mean time per route (a 3-element sum),
  and every rank picks the route with the least sum, the same on every rank because every
  rank reads the same sums, never its own clock alone;
- routed: the bucket keeps that route, and probes again every ``reprobe_steps`` steps, so a
  link that changes speed is followed.
"""
import time

import numpy as np

from .allreduce import dense_sum

ROUTES = ("encoded", "fp16", "fp32")
# Rounds of probing per decision: the first warms up, the others are timed.
PROBE_ROUNDS = 3
# Steps between two decisions (probing included).
REPROBE_STEPS = 1000


class Router:
    """Chooses each bucket's route from timings every rank agrees on."""

    def __init__(self, probe_rounds=PROBE_ROUNDS, reprobe_steps=REPROBE_STEPS):
        if probe_rounds < 2 or reprobe_steps <= len(ROUTES) * probe_rounds:
            raise ValueError(f"probe_rounds ({probe_rounds}) must be >= 2 and reprobe_steps "
                             f"({reprobe_steps}) longer than the probing")
        self.probe_rounds, self.reprobe_steps = int(probe_rounds), int(reprobe_steps)
        self.chosen = {}        # bucket key -> route
        self._times = {}        # bucket key -> {route: [seconds, ...]}

    def plan(self, key, step):
        """The route of ``key``'s exchange at ``step``, or None when the ranks must agree on
        one now (``decide``)."""
        phase = step % self.reprobe_steps
        probing = len(ROUTES) * self.probe_rounds
        if phase < probing:
            return ROUTES[phase % len(ROUTES)]
        if phase == probing:
            return None
        return self.chosen[key]

    def record(self, key, step, route, seconds):
        """Time one exchange of ``key`` by ``route`` (kept only for the timed probe rounds)."""
        phase = step % self.reprobe_steps
        if len(ROUTES) <= phase < len(ROUTES) * self.probe_rounds:
            self._times.setdefault(key, {}).setdefault(route, []).append(seconds)

    def local_times(self, key):
        """This rank's mean seconds per route of ``key``'s timed probes, in ROUTES order."""
        times = self._times.pop(key, {})
        return np.array([np.mean(times[r]) if times.get(r) else np.inf for r in ROUTES],
                        dtype=np.float64)

    def decide(self, key, summed):
        """The route with the least rank-summed time: the same on every rank."""
        self.chosen[key] = ROUTES[int(np.argmin(summed))]
        return self.chosen[key]


def routed_sum(router, encoded, codec, ops, coll, job, work):
    """Reduce a bucket by the route ``router`` plans for it (generator); ``encoded`` is the
    generator function of the encoded exchange, called as ``encoded(codec, ops, coll, job,
    work)``."""
    route = router.plan(job.key, job.step)
    if route is None:
        pending = coll.allreduce(router.local_times(job.key), f"{job.key}.route")
        yield pending
        route = router.decide(job.key, pending.wait())
    t0 = time.perf_counter()
    if route == "encoded":
        total = yield from encoded(codec, ops, coll, job, work)
    else:
        total = yield from dense_sum(codec, ops, coll, job, work, half=route == "fp16")
    router.record(job.key, job.step, route, time.perf_counter() - t0)
    return total
