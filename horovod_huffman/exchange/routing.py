"""Adaptive routing: gradients go the way measured to be fastest, encoded with the codec's
encoder, encoded with ``rlh``, as float16 or as float32, and every rank takes the same way. The
``rlh`` route is there because the coders that send the fewest bytes (``ans``, ``rla``,
``auto``) cost more CPU time, which pays only where the link, not the cores, bounds the step;
for a codec of ``rlh`` itself it is the encoded route again. The dense routes are the
framework's own allreduce of the gradients (Horovod's ``Compression.none`` and ``.fp16``),
fused by Horovod. The routes do not depend on the encoder, so ranks whose encoders differ
(their streams name the encoder) still probe and decide alike.

A ``Router`` holds, per key (the PyTorch adapter uses one key for all of an optimizer's buckets,
which share one route per step), the training step each route gives: the period from one step's
start to the next step's, which holds the step's compute, the codec's CPU time (taken from
training where cores are few) and the link, credited to the route of the first step. It runs in
three phases by step number, which is the same on every rank:

- probing: steps 0 .. 4 * PROBE_ROUNDS - 1 go through the four routes (encoded, rlh, fp16,
  fp32), in reverse order in odd rounds, so that no route's timings all come from steps that
  follow the same route (a float32 step on a slow link can slow the step after it); the first
  round only warms up (first calls, first allocations) and is not timed;
- deciding: at the next step, the ranks allreduce their shortest period per route (a
  4-element sum; the shortest, because pauses between steps, such as an evaluation, only
  lengthen periods), and every rank picks the route with the least sum, the same on every
  rank because every rank reads the same sums, never its own clock alone;
- routed: the key keeps that route, and probes again every ``reprobe_steps`` steps, so a link
  that changes speed is followed.
"""
import numpy as np

# An adapter's ``route=``: every bucket encoded, or each step's buckets routed by a Router.
ROUTE_MODES = ("encoded", "adaptive")
# The Router key of a model's buckets, which share one route per step.
BUCKETS_KEY = "buckets"
# "encoded": the codec's encoder; "rlh": encoded with rlh instead; the dense routes.
FAST_ROUTE = "rlh"
ROUTES = ("encoded", FAST_ROUTE, "fp16", "fp32")
ENCODED_ROUTES = ("encoded", FAST_ROUTE)
# Rounds of probing per decision: the first warms up, the others are timed.
PROBE_ROUNDS = 4
# Steps between two decisions (probing included).
REPROBE_STEPS = 1000


def check_route_mode(route):
    """``route`` if it is one of ROUTE_MODES, else ValueError."""
    if route not in ROUTE_MODES:
        raise ValueError(f"route must be one of {', '.join(ROUTE_MODES)}, got {route!r}")
    return route


def is_encoded(route):
    """Whether ``route`` sends the buckets through the compressed exchange."""
    return route in ENCODED_ROUTES


class Router:
    """Chooses a route per key from step timings every rank agrees on."""

    def __init__(self, probe_rounds=PROBE_ROUNDS, reprobe_steps=REPROBE_STEPS):
        if probe_rounds < 2 or reprobe_steps <= len(ROUTES) * probe_rounds:
            raise ValueError(f"probe_rounds ({probe_rounds}) must be >= 2 and reprobe_steps "
                             f"({reprobe_steps}) longer than the probing")
        self.probe_rounds, self.reprobe_steps = int(probe_rounds), int(reprobe_steps)
        self.chosen = {}        # key -> route
        self.periods = {}       # key -> {route: rank-summed seconds} of its last decision
        self._times = {}        # key -> {route: [seconds, ...]}
        self._last = {}         # key -> (step, route, start) of its last step
        self._decided = {}      # key -> the step of its last decision

    def route(self, key, step, start, first, agree):
        """The route of an exchange of ``key`` at ``step``, started at ``start`` (seconds):
        ``first`` for the step's first exchange of the key, which times the step; at a
        decision step the first exchange to ask calls ``agree(times)``, which must return the
        elementwise sum of ``times`` over the ranks (a collective every rank makes there)."""
        if first:
            self.observe(key, step, start)
        route = self.plan(key, step)
        if route is None:
            if self._decided.get(key) != step:
                self.decide(key, agree(self.local_times(key)))
                self._decided[key] = step
            route = self.chosen[key]
        if first:
            self.started(key, step, route, start)
        return route

    def plan(self, key, step):
        """The route of ``key``'s exchange at ``step``, or None when the ranks must agree on
        one now (``decide``)."""
        phase = step % self.reprobe_steps
        probing = len(ROUTES) * self.probe_rounds
        if phase < probing:
            order = ROUTES if (phase // len(ROUTES)) % 2 == 0 else ROUTES[::-1]
            return order[phase % len(ROUTES)]
        if phase == probing:
            return None
        return self.chosen[key]

    def observe(self, key, step, start):
        """``key``'s ``step`` starts at ``start`` (seconds): the period since its previous start
        is credited to the previous step's route (timed probe rounds only)."""
        last = self._last.pop(key, None)
        if last is not None and last[0] == step - 1:
            phase = last[0] % self.reprobe_steps
            if len(ROUTES) <= phase < len(ROUTES) * self.probe_rounds:
                self._times.setdefault(key, {}).setdefault(last[1], []).append(start - last[2])

    def started(self, key, step, route, start):
        """Remember the route and start of ``key``'s ``step``."""
        self._last[key] = (step, route, start)

    def local_times(self, key):
        """This rank's shortest period per route of ``key``'s timed probes, in ROUTES order."""
        times = self._times.pop(key, {})
        return np.array([min(times[r]) if times.get(r) else np.inf for r in ROUTES],
                        dtype=np.float64)

    def decide(self, key, summed):
        """The route with the least rank-summed time: the same on every rank."""
        self.periods[key] = dict(zip(ROUTES, map(float, summed)))
        self.chosen[key] = ROUTES[int(np.argmin(summed))]
        return self.chosen[key]
