"""The framework-free exchange core: frames, error feedback, the allgather and two-phase
exchanges and routing, run for N in-process ranks (horovod_huffman.exchange.local)."""
import os
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import horovod_huffman as hh
from horovod_huffman.exchange.allreduce import (Job, allgather_sum, choose, reduce_scatter_sum,
                                       two_phase_sum)
from horovod_huffman.exchange.array_ops import HostOps
from horovod_huffman.exchange.buckets import BucketPlan, bucket_layout
from horovod_huffman.codec.encoders.auto import RECHOOSE_EVERY
from horovod_huffman.exchange.codec_state import Codec
from horovod_huffman.exchange.frames import MismatchError, error_frame, frame, frames, split_frames
from horovod_huffman.exchange.array_ops import contract
from horovod_huffman.exchange.local import LocalGroup, run_ranks
from horovod_huffman.codec.message import encode
from horovod_huffman.exchange.routing import ROUTES, Router, check_route_mode, is_encoded

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "workers"))
from corrupting import flip_middles  # noqa: E402
from expected import expected_sum, round_trip  # noqa: E402

SEED = 11


def _message(k):
    """The Message of a k-coordinate gradient."""
    return encode(hh.QSGD(levels=4, seed=k).quantize(np.linspace(-1, 1, k, dtype=np.float32)))


def test_frames_split_back_in_rank_order_into_the_messages_pack_writes():
    msgs = [_message(k) for k in (3, 0, 700)]
    buf, sizes = frames([("w", 4, m) for m in msgs])
    assert sizes == [len(frame("w", 4, m)) for m in msgs] and sum(sizes) == buf.size
    for got, m in zip(split_frames(buf, 3, "w", 4), msgs):
        want = np.empty(m.nbytes, np.uint8)
        m.write(want, 0)
        np.testing.assert_array_equal(got, want)
        assert hh.unpack(got).numel == m.stream.n


@pytest.mark.parametrize("name,step", [("other", 4), ("w", 5)])
def test_frames_from_another_parameter_or_step_raise(name, step):
    buf = np.concatenate([frame("w", 4, _message(2)), frame(name, step, _message(2))])
    with pytest.raises(MismatchError, match="rank 1"):
        split_frames(buf, 2, "w", 4)


@pytest.mark.parametrize("error", [hh.DecodeError("bad payload"), MismatchError("other plan")])
def test_an_error_frame_raises_the_senders_error_naming_it(error):
    buf = np.concatenate([frame("w", 0, _message(2)), error_frame("w", 0, error)])
    with pytest.raises(type(error), match=f"rank 1 failed on 'w'.*{error}"):
        split_frames(buf, 2, "w", 0)


@given(st.binary(max_size=80))
def test_bad_gathered_bytes_raise_decode_error(data):
    try:
        split_frames(np.frombuffer(data, np.uint8), 2, "w", 0)
    except (hh.DecodeError, MismatchError):
        return
    raise AssertionError("accepted garbage")


@given(st.integers(1, 127), st.integers(0, 2**32))
def test_contracted_residual_never_exceeds_the_input(s, seed):
    x = np.random.default_rng(seed).standard_normal(1000).astype(np.float32)
    qt = contract(x, hh.QSGD(levels=s, bucket_size=64).quantize(x, seed=seed))
    r = x - hh.dequantize(qt)
    for b in range(0, 1000, 64):
        assert np.linalg.norm(r[b:b + 64]) <= np.linalg.norm(x[b:b + 64]) * (1 + 1e-5)


def bucket_of(size, align):
    (bucket,) = BucketPlan([("w", size, "float32")], size, align).buckets
    return bucket


def codecs(n, levels=4, align=64, **kwargs):
    return [Codec(encoder="rlh", quantizer=hh.QSGD(levels=levels, bucket_size=align),
                  seed=SEED + r, **kwargs) for r in range(n)]


def exchange(kind, codec, group, rank, bucket, work, align, step=0, coll=None, job=None):
    """Rank ``rank``'s exchange of ``bucket`` over ``group`` (or over ``coll``, its
    collectives), as ``job`` (default: the bucket's at ``step``)."""
    job = Job(bucket.key, bucket.tag, step, 1, bucket.numel, 4 * bucket.numel) if job is None \
        else job
    coll = group.member(rank) if coll is None else coll
    if kind == "two_phase":
        return two_phase_sum(codec, HostOps, coll, job, work, align)
    return allgather_sum(codec, HostOps, coll, job, work)


@given(st.sampled_from(["allgather", "two_phase"]), st.integers(1, 6), st.integers(1, 2500),
       st.sampled_from([16, 64]), st.integers(0, 2**32))
def test_every_rank_gets_exactly_the_sum_the_exchange_defines(kind, n, numel, align, seed):
    """Any rank count, any size (shards empty when the bucket has fewer blocks than ranks)."""
    bucket = bucket_of(numel, align)
    rng = np.random.default_rng(seed)
    works = [np.zeros(bucket.size, np.float32) for _ in range(n)]
    for w in works:
        w[:numel] = rng.standard_normal(numel)
    group = LocalGroup(n)
    sums = run_ranks([exchange(kind, c, group, r, bucket, works[r], align)
                      for r, c in enumerate(codecs(n, align=align))])
    expected, _, _ = expected_sum(works, [SEED + r for r in range(n)], bucket, kind, "rlh", 4, align)
    for s in sums:
        np.testing.assert_array_equal(s, expected)


@pytest.mark.parametrize("kind", ["allgather", "two_phase"])
def test_a_jobs_layout_shrinks_rank_one_buckets_and_keeps_the_sum(kind):
    """Buckets of a 96 x 200 weight whose gradients are rank one with one profile on every
    rank (so their sum is too), and a bias: with the job's layout ``ans`` codes every part (the
    allgather's, each shard, each summed shard) against its rows' predictions; the sum is the
    same as without it, in fewer bytes."""
    n, align = 3, 64
    plan = BucketPlan([("w", 96 * 200, "float32"), ("b", 200, "float32")], 1 << 20, align)
    (bucket,) = plan.buckets
    layout = bucket_layout(bucket, {"w": 96})
    assert layout == ((96, 200), (1, 200))
    rng = np.random.default_rng(3)
    profile = rng.standard_normal(200)
    works = []
    for _ in range(n):
        w = np.zeros(bucket.size, np.float32)
        w[:96 * 200] = np.outer(rng.standard_normal(96), profile).ravel()
        w[96 * 200:96 * 200 + 200] = rng.standard_normal(200)
        works.append(w)
    runs = {}
    for with_layout in (False, True):
        cs = [Codec(encoder="ans", quantizer=hh.QSGD(levels=16, bucket_size=align),
                    seed=SEED + r) for r in range(n)]
        job = Job(bucket.key, bucket.tag, 0, 2, bucket.numel, 4 * bucket.numel,
                  layout=layout if with_layout else None)
        group = LocalGroup(n)
        sums = run_ranks([exchange(kind, c, group, r, bucket, works[r], align, job=job)
                          for r, c in enumerate(cs)])
        runs[with_layout] = (sums, sum(c.statistics.total.sent_bytes + c.statistics.current.sent_bytes for c in cs))
    for a, b in zip(runs[False][0], runs[True][0]):
        np.testing.assert_array_equal(a, b)
    assert runs[True][1] < 0.75 * runs[False][1]


def test_server_error_feedback_keeps_exactly_the_requantization_error():
    n, align = 3, 64
    bucket = bucket_of(1000, align)
    rng = np.random.default_rng(0)
    works = [rng.standard_normal(bucket.size).astype(np.float32) for _ in range(n)]
    group, cs = LocalGroup(n), codecs(n, align=align, server_error_feedback=True)
    sums = run_ranks([exchange("two_phase", c, group, r, bucket, works[r], align)
                      for r, c in enumerate(cs)])
    expected, residuals, _ = expected_sum(works, [SEED + r for r in range(n)], bucket, "two_phase",
                                       "rlh", 4, align, feedback=True)
    for r, c in enumerate(cs):
        np.testing.assert_array_equal(sums[r], expected)
        np.testing.assert_array_equal(c.feedback.residuals[(bucket.key, "server", r)], residuals[r])


def test_error_feedback_carries_the_residual_forward():
    codec = Codec(encoder="rlh", quantizer=hh.QSGD(levels=1, bucket_size=64), error_feedback=True,
                  seed=7)
    g = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    bucket, group = bucket_of(256, 64), LocalGroup(1)
    sent = np.zeros_like(g)
    errors, residuals = {}, []
    for t in range(1, 801):
        (total,) = run_ranks([exchange("allgather", codec, group, 0, bucket, g, 64, t - 1)])
        sent += total
        residuals.append(np.linalg.norm(codec.feedback.residuals[(bucket.key, "all")]) / np.linalg.norm(g))
        errors[t] = np.abs(sent / t - g).max()
    # What was sent sums to the gradients minus one bounded residual, so the average converges
    # to the gradient as 1/T (plain error feedback on QSGD s=1 would grow without bound here).
    assert max(residuals) < 20
    assert errors[800] < 0.6 * errors[200] and errors[800] < 0.1


def _feedback_steps(kind, n, grads_at, steps, align=64, numel=2048, dtype=np.float32):
    """Run the steps ``steps`` (a count, or the step numbers) of ``kind`` over n ranks with
    client and server error feedback; the sums and every rank's residuals (a copy of
    ``ErrorFeedback.residuals``) after each step. ``grads_at(step, rank)``: that rank's gradient."""
    bucket, group = bucket_of(numel, align), LocalGroup(n)
    cs = codecs(n, align=align, error_feedback=True)
    sums, kept = [], []
    for t in range(steps) if isinstance(steps, int) else steps:
        works = [np.asarray(grads_at(t, r), dtype=dtype) for r in range(n)]
        sums.append(run_ranks([exchange(kind, c, group, r, bucket, works[r], align, t)
                               for r, c in enumerate(cs)]))
        kept.append([{k: v.copy() for k, v in c.feedback.residuals.items()} for c in cs])
    return sums, kept


def _same_residuals(a, b):
    assert [sorted(r) for r in a] == [sorted(r) for r in b]
    for ra, rb in zip(a, b):
        for key in ra:
            np.testing.assert_array_equal(ra[key], rb[key])


@pytest.mark.parametrize("kind,n", [("allgather", 2), ("two_phase", 2), ("two_phase", 3)])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_step_is_reduced_non_finite_and_keeps_every_residual(kind, n, bad):
    """An overflow step (one Inf on rank 0 at step 2) reduces to a non-finite bucket on every
    rank, so a loss scaler sees it; every residual, client and server, stays as after step 1,
    and the steps after it are finite again."""
    rng = np.random.default_rng(5)
    grads = [[rng.standard_normal(2048).astype(np.float32) for _ in range(n)] for _ in range(6)]
    grads[2][0][700] = bad

    sums, kept = _feedback_steps(kind, n, lambda t, r: grads[t][r], 6)
    for t, per_rank in enumerate(sums):
        for total in per_rank:
            assert np.isfinite(total).all() == (t != 2), t
    assert all(np.isnan(total[640:704]).all() for total in sums[2])
    _same_residuals(kept[2], kept[1])
    assert kept[1][0]                                       # there were residuals to keep
    # the steps after it are exactly those of a run that never had step 2
    skipped, _ = _feedback_steps(kind, n, lambda t, r: grads[t][r], [0, 1, 3, 4, 5])
    for t in (3, 4, 5):
        for got, want in zip(sums[t], skipped[t - 1]):
            np.testing.assert_array_equal(got, want)


def test_a_first_step_overflow_leaves_no_residual():
    sums, kept = _feedback_steps("allgather", 2, lambda t, r: np.full(2048, np.inf if t == 0
                                                                       else 1.0), 2)
    assert kept[0] == [{}, {}] and np.isnan(sums[0][0]).all()
    assert np.isfinite(sums[1][0]).all() and kept[1][0]


@pytest.mark.parametrize("big,dtype,ranks", [
    (1e200, np.float64, [1]),       # the sum of squares overflows float64: scale NaN
    (1e60, np.float64, [1]),        # a finite norm whose scale overflows float32: Inf
    (3e38, np.float32, [0, 1]),     # float32 scales, but the sum over ranks overflows
])
def test_a_finite_gradient_too_large_for_the_wire_is_an_overflow_not_a_poison(big, dtype,
                                                                               ranks):
    """Finite gradients beyond what the float32 scales (or the float32 sum) hold: the bucket is
    reduced as non-finite, as an overflow, the residuals stay, and the next step is finite."""
    rng = np.random.default_rng(1)
    base = [rng.standard_normal(2048) for _ in range(3)]

    def grads_at(t, r):
        g = base[t].copy()
        if t == 1 and r in ranks:
            g[:64] = big
        return g

    sums, kept = _feedback_steps("allgather", 2, grads_at, 3, dtype=dtype)
    assert all(not np.isfinite(total[:64]).all() for total in sums[1])
    _same_residuals(kept[1], kept[0])
    assert all(np.isfinite(total).all() for total in sums[2])


def test_error_feedback_defaults_to_the_quantizer_bias():
    assert not Codec(quantizer=hh.QSGD()).feedback.client
    assert Codec(quantizer=hh.TernGrad(clip=2.5)).feedback.client
    assert Codec(quantizer=hh.TernGrad(clip=2.5)).feedback.server
    assert not Codec(quantizer=hh.TernGrad()).feedback.client
    assert not Codec(quantizer=hh.TernGrad(), error_feedback=True,
                     server_error_feedback=False).feedback.server


@pytest.mark.parametrize("kind", ["allgather", "two_phase"])
def test_a_corrupt_rank_makes_every_rank_raise_naming_it(kind):
    """A byte of everything rank 1 sends is flipped after it was written: DecodeError on every
    rank, rank 1 included (its own message comes back through the collective)."""
    n, bucket = 3, bucket_of(3000, 64)
    group = LocalGroup(n)
    members = [group.member(r) for r in range(n)]
    members[1] = FlippingLink(members[1])
    works = [np.random.default_rng(r).standard_normal(bucket.size).astype(np.float32)
             for r in range(n)]
    out = run_ranks([exchange(kind, c, group, r, bucket, works[r], 64, coll=members[r])
                     for r, c in enumerate(codecs(n))], return_exceptions=True)
    for r, result in enumerate(out):
        assert isinstance(result, hh.DecodeError) and "rank 1" in str(result), (r, result)


class FlippingLink:
    """A rank's collectives, with a byte in the middle of each frame it sends flipped."""

    def __init__(self, member):
        self.member, self.size, self.rank = member, member.size, member.rank

    def allgather(self, data, name):
        return self.member.allgather(flip_middles(data.copy(), [data.size]), name)

    def alltoall(self, data, splits, name):
        return self.member.alltoall(flip_middles(data.copy(), splits), splits, name)

    def allreduce(self, data, name):
        return self.member.allreduce(data, name)


@pytest.mark.parametrize("kind", ["allgather", "two_phase"])
def test_ranks_with_different_plans_raise_mismatch_on_every_rank(kind):
    n, group = 3, LocalGroup(3)
    buckets = [bucket_of(3000, 64), bucket_of(3000, 64), bucket_of(2999, 64)]
    out = run_ranks([exchange(kind, c, group, r, buckets[r], np.ones(buckets[r].size, np.float32),
                              64) for r, c in enumerate(codecs(n))], return_exceptions=True)
    assert all(isinstance(e, MismatchError) for e in out), out


def _reduce_scatter(codec, coll, work, bounds, step=0, tag=7):
    return reduce_scatter_sum(codec, HostOps, coll, Job("w", tag, step, 1, work.size,
                                                        4 * work.size), work, bounds)


@given(st.integers(1, 5), st.integers(0, 2000), st.integers(0, 2**32))
def test_reduce_scatter_gives_each_rank_exactly_its_shard_of_the_quantized_sum(n, shard, seed):
    """n equal shards of any size (FSDP's cut, not a multiple of the quantizer's buckets): rank
    j gets the rank-ordered sum of every rank's quantized shard j."""
    rng = np.random.default_rng(seed)
    works = [rng.standard_normal(n * shard).astype(np.float32) for _ in range(n)]
    bounds = [j * shard for j in range(n + 1)]
    group = LocalGroup(n)
    out = run_ranks([_reduce_scatter(c, group.member(r), works[r], bounds)
                     for r, c in enumerate(codecs(n))])
    for j, total in enumerate(out):
        want = None
        for r in range(n):
            part = hh.dequantize(round_trip(works[r][bounds[j]:bounds[j + 1]], SEED + r,
                                            f"w/shard{j}", "rlh", 4, 64))
            want = part if want is None else want + part
        np.testing.assert_array_equal(total, want)


def test_a_failed_reduce_scatter_raises_on_every_rank():
    """Rank 1's bytes corrupted: the ranks that decode them raise DecodeError naming rank 1,
    and rank 1 raises too. A rank tagging its frames as another parameter: MismatchError on
    every rank."""
    n, shard = 3, 1000
    works = [np.random.default_rng(r).standard_normal(n * shard).astype(np.float32)
             for r in range(n)]
    bounds = [j * shard for j in range(n + 1)]
    group = LocalGroup(n)
    members = [group.member(r) for r in range(n)]
    members[1] = FlippingLink(members[1])
    out = run_ranks([_reduce_scatter(c, members[r], works[r], bounds)
                     for r, c in enumerate(codecs(n))], return_exceptions=True)
    assert all(isinstance(e, hh.DecodeError) for e in out), out
    assert "rank 1" in str(out[0]) and "2 rank(s) could not decode" in str(out[1]), out
    group = LocalGroup(n)
    out = run_ranks([_reduce_scatter(c, group.member(r), works[r], bounds, tag=7 + (r == 2))
                     for r, c in enumerate(codecs(n))], return_exceptions=True)
    assert all(isinstance(e, MismatchError) for e in out), out


def test_a_non_finite_shard_keeps_every_ranks_residuals():
    """With error feedback, an Inf in rank 0's shard 1 at step 1 makes only rank 1's sum
    non-finite; both ranks keep the residuals of step 0, and the next step settles again."""
    n, shard = 2, 512
    rng = np.random.default_rng(3)
    grads = [[rng.standard_normal(n * shard).astype(np.float32) for _ in range(n)]
             for _ in range(3)]
    grads[1][0][shard + 5] = np.inf
    cs, bounds, kept = codecs(n, error_feedback=True), [0, shard, 2 * shard], []
    for t in range(3):
        group = LocalGroup(n)
        out = run_ranks([_reduce_scatter(c, group.member(r), grads[t][r], bounds, step=t)
                         for r, c in enumerate(cs)])
        assert [bool(np.isfinite(x).all()) for x in out] == [True, t != 1], t
        kept.append([{k: v.copy() for k, v in c.feedback.residuals.items()} for c in cs])
    assert len(kept[0][0]) == n
    _same_residuals(kept[1], kept[0])
    assert not np.array_equal(kept[2][0][("w", "client", 0)], kept[0][0][("w", "client", 0)])


def test_allgather_counts_statistics_and_spans():
    bucket, group, cs = bucket_of(600, 64), LocalGroup(2), codecs(2)
    works = [np.random.default_rng(r).standard_normal(bucket.size).astype(np.float32)
             for r in range(2)]
    run_ranks([exchange("allgather", c, group, r, bucket, works[r], 64) for r, c in enumerate(cs)])
    sent = cs[0].statistics.end_step().as_dict()
    assert sent["coords"] == 600 and sent["raw_bytes"] == 2400 and 0 < sent["bits_per_coord"] < 32
    spans = {}
    for _, phase, start, end in cs[0].statistics.trace:
        spans[phase] = spans.get(phase, 0.0) + end - start
    assert list(spans) == ["encode", "network", "decode"]
    # the step's seconds are its spans' (the network's wait is in neither)
    assert sent["encode_s"] == pytest.approx(spans["encode"], rel=1e-9)
    assert sent["decode_s"] == pytest.approx(spans["decode"], rel=1e-9)
    assert cs[0].statistics.total.coords == 600 and cs[0].statistics.current.coords == 0


def test_routing_probes_every_route_then_every_rank_takes_the_same():
    """Two ranks' routers over 8 probe steps (2 rounds, the second timed, in reverse order) and
    a decision from the summed periods: rank 0 alone would pick fp16, the sum picks encoded on
    both."""
    routers = [Router(probe_rounds=2, reprobe_steps=100) for _ in range(2)]
    period = {"encoded": [0.35, 0.2], "rlh": [0.4, 0.3], "fp16": [0.3, 0.3], "fp32": [0.9, 0.8]}
    clock, seen = [0.0, 0.0], []
    for step in range(9):
        for rank, router in enumerate(routers):
            router.observe("b", step, clock[rank])
        routes = [router.plan("b", step) for router in routers]
        seen.append(routes[0])
        if step < 8:
            for rank, router in enumerate(routers):
                router.started("b", step, routes[rank], clock[rank])
                clock[rank] += period[routes[rank]][rank]
    assert seen == list(ROUTES) + list(ROUTES[::-1]) + [None]
    times = [router.local_times("b") for router in routers]
    assert ROUTES[int(np.argmin(times[0]))] == "fp16"
    assert [router.decide("b", times[0] + times[1]) for router in routers] == ["encoded"] * 2
    assert routers[0].plan("b", 7) == "encoded" and routers[0].plan("b", 100) == "encoded"


def test_routing_may_choose_to_encode_with_rlh():
    assert [is_encoded(r) for r in ROUTES] == [True, True, False, False]
    router = Router(probe_rounds=2, reprobe_steps=100)
    period = {"encoded": 0.3, "rlh": 0.2, "fp16": 0.4, "fp32": 0.5}
    clock, seen = 0.0, []
    for step in range(2 * len(ROUTES) + 1):
        router.observe("b", step, clock)
        route = router.plan("b", step)
        seen.append(route)
        if route is not None:
            router.started("b", step, route, clock)
            clock += period[route]
    assert seen[-1] is None and None not in seen[:-1]
    assert router.decide("b", router.local_times("b")) == "rlh"
    assert router.periods["b"] == pytest.approx(period)


def test_a_steps_exchanges_take_one_route_and_agree_once_per_decision():
    """Router.route, two exchanges a step (the first times the step): both take the step's
    route; at the decision step the ranks' timings are summed once (``agree``), whichever
    exchange asks first; the route chosen is the fastest probed."""
    router = Router(probe_rounds=2, reprobe_steps=100)
    period = {"encoded": 0.3, "rlh": 0.2, "fp16": 0.4, "fp32": 0.5}
    agreed, clock = [], 0.0

    def agree(times):
        agreed.append(times)
        return times

    for step in range(2 * len(ROUTES) + 2):
        first = router.route("b", step, clock, True, agree)
        assert router.route("b", step, clock, False, agree) == first
        clock += period[first]
    assert len(agreed) == 1 and router.chosen["b"] == "rlh" == first
    with pytest.raises(ValueError, match="route"):
        check_route_mode("fastest")


@pytest.mark.parametrize("kind", ["allgather", "two_phase"])
def test_the_rlh_routes_codec_sends_what_an_rlh_codec_sends_and_shares_its_state(kind):
    """Codec.for_route("rlh") of an ``ans`` codec sends exactly what an rlh codec sends and
    gets the same sum (the streams name their encoder), while the codec's steps, statistics,
    error feedback and choices stay one: the view shares them. "encoded", and the rlh route of
    an rlh codec, give the codec itself."""
    n, bucket = 3, bucket_of(3000, 64)
    works = [np.random.default_rng(r).standard_normal(bucket.size).astype(np.float32)
             for r in range(n)]
    results = {}
    for name, route in [("rlh", "encoded"), ("ans", "rlh"), ("ans", "encoded")]:
        owners = [Codec(encoder=name, quantizer=hh.QSGD(levels=4, bucket_size=64),
                        seed=SEED + r) for r in range(n)]
        cs = [c.for_route(route) for c in owners]
        job = Job(bucket.key, bucket.tag, 0, 1, bucket.numel, 4 * bucket.numel)
        group = LocalGroup(n)
        sums = run_ranks([exchange(kind, c, group, r, bucket, works[r], 64, job=job)
                          for r, c in enumerate(cs)])
        results[name, route] = (sums, [c.statistics.current.sent_bytes for c in owners])
        for owner, c in zip(owners, cs):
            assert (c is owner) == (route == "encoded" or name == "rlh")
            assert c.encoder.name == ("rlh" if route == "rlh" else name)
            assert (c.steps, c.statistics, c.feedback, c.choices) == \
                (owner.steps, owner.statistics, owner.feedback, owner.choices)
            assert c.statistics is owner.statistics and c.feedback is owner.feedback
            assert owner.for_route(route) is c and c.for_route("rlh") is c.for_route("rlh")
    (rlh_sums, rlh_sent), (sums, sent), (ans_sums, ans_sent) = results.values()
    assert sent == rlh_sent and sent != ans_sent
    for a, b, c in zip(rlh_sums, sums, ans_sums):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_auto_chooses_a_parts_encoder_again_only_every_few_steps():
    """Codec.encode keeps auto's choice for a (bucket, part) for RECHOOSE_EVERY steps of
    that bucket (from step 1: a choice at step 0 is not kept), lossless either way; another
    part chooses for itself; Auto(rechoose_every=1) chooses at every step."""
    codec = Codec(encoder="auto", quantizer=hh.QSGD(levels=16, bucket_size=64), seed=SEED)
    rng = np.random.default_rng(0)
    sparse = np.zeros(20000, np.float32)
    sparse[::97] = 1.0
    dense = rng.standard_normal(20000).astype(np.float32)

    def built(work, step, part="all"):
        qt = codec.quantize(HostOps, work, (work.size,), "w", step)
        message = codec.encode(HostOps, qt, Job("w", 1, step), part)
        out = np.empty(message.nbytes, np.uint8)
        message.write(out, 0)
        np.testing.assert_array_equal(hh.unpack(out, max_elements=work.size).levels, qt.levels)
        return message.stream.encoder_id

    dense_choice = built(dense, 0)
    first = built(sparse, 1)
    assert dense_choice != first
    assert built(dense, 1, part="shard1") == dense_choice
    assert [built(dense, step) for step in range(2, RECHOOSE_EVERY + 1)] == \
        [first] * (RECHOOSE_EVERY - 1)
    assert built(dense, RECHOOSE_EVERY + 1) == dense_choice
    codec = Codec(encoder=hh.get_encoder("auto", rechoose_every=1),
                  quantizer=hh.QSGD(levels=16, bucket_size=64), seed=SEED)
    assert [built(work, step) for step, work in enumerate([sparse, sparse, dense], 1)] == \
        [first, first, dense_choice]
    eager = Codec(encoder="auto", quantizer=hh.QSGD(levels=16, bucket_size=64))
    eager.encode(HostOps, eager.quantize(HostOps, dense, (dense.size,), "w", 0), Job("w", 1, 0),
                "all")
    assert not eager.choices


def test_auto_without_a_layout_chooses_as_its_kept_member_codes():
    """A flat bucket of a rank-one matrix and no layout: ``auto`` in the exchange does not
    search for the matrix (its kept member would code without the row model), so the step
    that chooses and the steps that keep its choice send streams of one size."""
    rng = np.random.default_rng(1)
    matrix = np.outer(rng.standard_normal(600), rng.standard_normal(500)).astype(np.float32)
    work = (matrix + 0.05 * rng.standard_normal(matrix.shape)).ravel().astype(np.float32)
    codec = Codec(encoder="auto", quantizer=hh.QSGD(levels=127, bucket_size=512), seed=SEED)
    sizes = []
    for step in (1, 2):
        qt = codec.quantize(HostOps, work, (work.size,), "w", 0)
        message = codec.encode(HostOps, qt, Job("w", 1, step), "all")
        sizes.append(message.nbytes)
    assert sizes[0] == sizes[1]
    searched = hh.get_encoder("auto").encode(qt.levels)
    assert len(searched) < 0.9 * sizes[0]             # what a search would have found


def test_auto_takes_allgather_up_to_three_ranks_and_two_phase_beyond():
    assert [choose("auto", n) for n in (1, 2, 3, 4, 8)] == ["allgather", "allgather",
                                                             "allgather", "two_phase",
                                                             "two_phase"]
    with pytest.raises(ValueError, match="exchange must be"):
        choose("ring", 2)
