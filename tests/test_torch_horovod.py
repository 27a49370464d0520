"""The PyTorch adapter under real Horovod (horovodrun --gloo, 2 and 3 ranks): no mocks."""
import functools
import itertools
import json
import re
import time

import pytest

from horovod_run import assert_raised_on_every_rank, cuda_missing, excerpt, horovodrun
from overflow_runs import assert_skipped_once_and_trained
from pufferfish_runs import assert_pufferfish_matches_full_rank

pytest.importorskip("horovod.torch", exc_type=ImportError)

# Multi-rank jobs under real Horovod: `pytest -m "not horovod"` leaves them out.
pytestmark = pytest.mark.horovod


# What the adapter adds to an exchange (groups, several backward passes, a predivide factor,
# op=Sum, sparse gradients, error feedback, empty shards) is the same whatever the encoder:
# every encoder runs each exchange and dtype plainly, and a few of different kinds (the
# Huffman family, rANS, and auto's choice) run the rest.
FEW = "@rlh,ans,auto"


@pytest.mark.parametrize("n_ranks,cases", [
    (2, ("float32:allgather:plain", "float32:allgather:groups,bpps2,predivide,sum,sparse_as_dense,"
         "client_feedback,terngrad" + FEW, "float16:allgather:plain", "bfloat16:allgather:plain",
         "bfloat16:allgather:groups" + FEW, "float32:two_phase:plain",
         "float32:two_phase:feedback,client_feedback,terngrad" + FEW)),
    (3, ("float32:allgather:plain", "float32:allgather:groups,sum" + FEW,
         "float32:two_phase:plain",
         "float32:two_phase:feedback,tiny,groups,bpps2,predivide,sum,sparse_as_dense" + FEW,
         "bfloat16:two_phase:plain")),
    (4, ("float32:two_phase:plain,feedback,tiny" + FEW,)),
])
def test_every_rank_gets_the_exact_reduction_of_all_round_trips(n_ranks, cases):
    """Cases DTYPE:EXCHANGE:VARIANTS[@ENCODERS] (tests/workers/torch_exact.py), one launch per
    rank count."""
    rc, out = horovodrun(n_ranks, "tests/workers/torch_exact.py", *cases)
    assert rc == 0, excerpt(out)
    for case in cases:
        assert f"OK {case} " in out, (case, excerpt(out))


@pytest.mark.skipif(cuda_missing() is not None, reason=str(cuda_missing()))
@pytest.mark.parametrize("exchange", ["allgather", "two_phase"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_gradients_get_the_exact_reduction_on_every_rank(dtype, exchange):
    """The adapter's device branch under the stock DistributedOptimizer: 2 ranks on one GPU,
    CUDA gradients quantized and coded there (the host's bits), only the encoded bytes on the
    host; every rank's gradient is exactly the reduction torch_exact.py computes on the host,
    and the parameters stay identical."""
    rc, out = horovodrun(2, "tests/workers/torch_exact.py", f"{dtype}:{exchange}:cuda")
    assert rc == 0 and "OK" in out, excerpt(out)


@pytest.mark.parametrize("n_ranks,cases", [
    (2, {"corrupt:allgather": "DecodeError", "adasum:auto": "Adasum",
         "min:auto": "Average or Sum"}),
    (3, {"corrupt:allgather": "DecodeError", "corrupt:two_phase": "DecodeError",
         "mismatch:allgather": "MismatchError", "mismatch:two_phase": "MismatchError"})])
def test_faults_raise_promptly_on_every_rank(n_ranks, cases):
    """Cases CASE:EXCHANGE (tests/workers/torch_faults.py), one after another in one launch per
    rank count: each raises its error on every rank, and the next case runs."""
    rc, out = horovodrun(n_ranks, "tests/workers/torch_faults.py", *cases, timeout=120)
    assert rc == 0, excerpt(out)
    assert_raised_on_every_rank(out, n_ranks, cases)


def test_an_overflow_step_under_a_grad_scaler_is_skipped_once_and_training_goes_on():
    """torch.amp.GradScaler, 2 ranks, error feedback on, rank 0's gradients overflowing at step
    20 of 60: the scaler skips that step and no other, on the allgather and the two-phase
    exchange as uncompressed; losses stay finite, parameters identical, the residuals finite,
    and training ends within 10% of the uncompressed run's loss (1.408, against 1.446 and 1.483
    measured) and 3 points of its test accuracy. Residuals kept through the overflow would make
    every later step non-finite: the scaler would skip all 40 and the loss stay near 2.15."""
    rc, out = horovodrun(2, "tests/workers/torch_amp.py", "none", "rlh:allgather",
                         "rlh:two_phase", timeout=600)
    assert rc == 0, excerpt(out)
    assert_skipped_once_and_trained(out, grad_bytes=4.0)


@pytest.mark.parametrize("exchange", ["allgather", "two_phase"])
def test_a_rank_killed_mid_step_stops_every_other_rank_within_30_s(exchange):
    """Rank 1 of 3 dies by SIGKILL after backward started its buckets' exchanges: no other rank
    finishes a later step, and the job exits non-zero within 30 s of the kill."""
    rc, out = horovodrun(3, "tests/workers/torch_kill.py", exchange, timeout=180)
    ended = time.time()
    steps = [int(step) for _, step in re.findall(r"STEP (\d+) (\d+)", out)]
    killed = [float(t) for t in re.findall(r"KILL ([\d.]+)", out)]
    assert rc != 0 and killed, excerpt(out)
    assert ended - killed[0] < 30, (ended - killed[0], excerpt(out))
    assert steps and all(step <= 3 for step in steps), steps


@pytest.mark.parametrize("n_ranks,encoder", [(2, "auto"), (3, "mixed")])
def test_adaptive_routing_agrees_on_every_rank(n_ranks, encoder):
    rc, out = horovodrun(n_ranks, "tests/workers/torch_routes.py", encoder, timeout=300)
    assert rc == 0 and "OK routes" in out, excerpt(out)


SEEDS = ("--seed", 0, 1, 2)


@functools.lru_cache(maxsize=None)
def run_example(compression, epochs=8, n_ranks=2, *options):
    """The RESULTs of one launch of the PyTorch example, one per compression (a name, or a
    tuple of names trained one after another) and seed in ``options`` (runs are
    deterministic: cached)."""
    names = (compression,) if isinstance(compression, str) else compression
    rc, out = horovodrun(n_ranks, "examples/pytorch_digits.py", "--compression", *names,
                         "--epochs", epochs, *options, timeout=900)
    assert rc == 0, excerpt(out)
    runs = tuple(json.loads(l.split("RESULT ", 1)[1]) for l in out.splitlines() if "RESULT " in l)
    assert [(r["compression"], r["seed"]) for r in runs] == \
        [(name, seed) for name in names for seed in _seeds(options)], excerpt(out)
    return runs


def _seeds(options):
    """The seeds an example's ``options`` give it (its --seed takes several; default 0)."""
    if "--seed" not in options:
        return [0]
    rest = options[options.index("--seed") + 1:]
    return list(itertools.takewhile(lambda option: isinstance(option, int), rest))


def test_training_with_huffman_encoders_matches_uncompressed_accuracy():
    """Seed 0 of every Huffman-family encoder within 2 points of seed 0 uncompressed (the
    first run of the two-phase test's uncompressed launch: each seed's run is the same
    whatever others follow it)."""
    baseline = run_example("none", 8, 2, *SEEDS)[0]
    assert baseline["identical_parameters"] and baseline["seed"] == 0
    for r in run_example(("rlh", "sh", "shs", "huffman")):         # one launch
        name = r["compression"]
        assert r["identical_parameters"], name
        assert r["test_accuracy"] >= baseline["test_accuracy"] - 0.02, (name, r, baseline)
        assert r["stats"]["ratio"] > 10, (name, r["stats"])


def test_two_phase_training_matches_uncompressed_accuracy():
    """Mean test accuracy over three seeds within 2 points of uncompressed training, 2 ranks
    (the two-phase exchange's sums at 3 and 4 ranks are checked exactly above)."""
    runs = {c: run_example(c, 8, 2, *SEEDS, *options)
            for c, options in (("none", ()), ("rlh", ("--exchange", "two_phase")))}
    assert all(r["identical_parameters"] for rs in runs.values() for r in rs)
    mean = {c: sum(r["test_accuracy"] for r in rs) / len(rs) for c, rs in runs.items()}
    assert mean["rlh"] >= mean["none"] - 0.02, mean
    assert all(r["stats"]["ratio"] > 10 for r in runs["rlh"])


PUFFERFISH = ("--pufferfish", "--warmup-epochs", 3)


def test_pufferfish_alone_and_with_rlh_matches_full_rank_accuracy():
    """Three epochs of full-rank warm-up, then nine of the factorized CNN (3.4x fewer
    parameters), on 2 ranks: parameters identical on every rank after the switch and at the
    end, mean test accuracy over three seeds within 1 point of twelve epochs of full-rank
    training."""
    low = run_example(("none", "rlh"), 12, 2, *SEEDS, *PUFFERFISH)      # one launch
    runs = {"full": run_example("none", 12, 2, *SEEDS),
            "pufferfish": [r for r in low if r["compression"] == "none"],
            "pufferfish+rlh": [r for r in low if r["compression"] == "rlh"]}
    assert_pufferfish_matches_full_rank(runs)
    assert all(r["stats"]["ratio"] > 10 for r in runs["pufferfish+rlh"])


def test_pufferfish_with_rlh_on_three_ranks_stays_identical_and_trains():
    """The same schedule on 3 ranks, whose learning rate is 1.5x the 2-rank one (the example
    scales it by the ranks; docs/pufferfish.md): one seed with ``rlh`` keeps every rank's
    parameters identical after the switch and at the end, over 3x fewer of them, and ends
    within 2 points of the same seed's full-rank test accuracy (a diverged run ends far
    below)."""
    (full,) = run_example("none", 12, 3, "--seed", 0)
    (low,) = run_example("rlh", 12, 3, "--seed", 0, *PUFFERFISH)
    assert low["identical_after_switch"] and low["identical_parameters"], low
    assert low["parameters"] * 3 < low["full_rank_parameters"], low
    assert low["test_accuracy"] >= full["test_accuracy"] - 0.02, (low, full)
    assert low["stats"]["ratio"] > 10, low["stats"]


def run_train_job(*options):
    """The RESULT of benchmarks/train_job.py on 2 local ranks (bytes counted on loopback)."""
    rc, out = horovodrun(2, "benchmarks/train_job.py", "--iface", "lo", *options, timeout=300)
    assert rc == 0, excerpt(out)
    return json.loads(next(l for l in out.splitlines() if "RESULT " in l).split("RESULT ", 1)[1])


def test_pufferfish_lstm_ends_within_3_percent_of_the_full_rank_loss():
    """The char-LSTM factorized after 10 full-rank steps (2.6x fewer parameters) ends, 60 steps
    in, with a training loss at most 3% above the full-rank LSTM's."""
    common = ("--model", "lstm", "--compression", "none", "--steps", 60, "--warmup", 15,
              "--last", 10)
    full = run_train_job(*common)
    low = run_train_job(*common, "--pufferfish")
    assert low["identical_parameters"] and low["params"] * 2.5 < full["params"], (low, full)
    assert low["final_loss"] <= 1.03 * full["final_loss"], (low, full)


def test_process_sets_reduce_over_their_members_only():
    rc, out = horovodrun(3, "tests/workers/torch_process_set.py", timeout=120)
    assert rc == 0 and "OK process set" in out, excerpt(out)
