"""The TensorFlow adapter under real Horovod (horovodrun --gloo, 2 to 4 ranks): no mocks."""
import functools
import json

import pytest

from horovod_run import assert_raised_on_every_rank, excerpt, horovodrun, python_run
from overflow_runs import assert_skipped_once_and_trained
from pufferfish_runs import assert_pufferfish_matches_full_rank

pytest.importorskip("horovod.tensorflow", exc_type=ImportError)

# Multi-rank jobs under real Horovod: `pytest -m "not horovod"` leaves them out.
pytestmark = pytest.mark.horovod


@pytest.mark.parametrize("n_ranks,modes", [
    (2, "tape eager@rlh,ans,auto optimizer@rlh,ans,auto sum@rlh,ans,auto tape:two_phase fused "
        "fused_eager:two_phase@rlh,auto fused_sum@rlh"),
    (3, "tape:two_phase eager:two_phase@rlh,ans,auto optimizer:two_phase@rlh,ans,auto "
        "sum:two_phase@rlh,ans,auto fused:two_phase@rlh,ans,auto"),
    (4, "tape:two_phase@rlh,ans,auto")])
def test_every_rank_gets_the_exact_reduction_of_all_round_trips(n_ranks, modes):
    """Horovod's tape and optimizer (one bucket per gradient) and our tape (fused buckets), in
    a tf.function and eagerly, Average and Sum: every reduced gradient is exactly what the
    exchange defines (tests/workers/tf_exact.py). Every encoder runs the tape on each exchange;
    the other routes are the same whatever the encoder, and a few encoders of different kinds
    run them."""
    rc, out = horovodrun(n_ranks, "tests/workers/tf_exact.py", *modes.split())
    assert rc == 0 and "OK" in out, excerpt(out)


@pytest.mark.parametrize("n_ranks,encoder", [(3, "mixed")])
def test_adaptive_routing_of_fused_buckets_agrees_on_every_rank(n_ranks, encoder):
    """Our tape with route="adaptive" (rlh, ans and auto by rank): every route probed, the float32 one equal to Horovod's
    allreduce, each encoded route written by its encoder, one route chosen by every rank,
    variables identical at every step (tests/workers/tf_routes.py)."""
    rc, out = horovodrun(n_ranks, "tests/workers/tf_routes.py", encoder, timeout=300)
    assert rc == 0 and "OK routes" in out, excerpt(out)


SEEDS = (0, 1, 2)


def run_example(compression, mode, epochs=8, *options, env=None):
    """The RESULTs of one launch of the TensorFlow example on 2 ranks, one per seed of SEEDS."""
    rc, out = horovodrun(2, "examples/tensorflow2_digits.py", "--compression", compression,
                         "--mode", mode, "--epochs", epochs, "--seed", *SEEDS, *options,
                         timeout=900, env=env)
    assert rc == 0, excerpt(out)
    runs = [json.loads(l.split("RESULT ", 1)[1]) for l in out.splitlines() if "RESULT " in l]
    assert [r["seed"] for r in runs] == list(SEEDS), excerpt(out)
    return runs


# The Keras routes: Keras 3 (horovod_huffman.tensorflow.keras) and legacy tf-keras (Horovod's
# own horovod.tensorflow.keras, through horovod_huffman.tensorflow.legacy_keras).
KERAS = {"keras3": {"TF_USE_LEGACY_KERAS": "0"}, "legacy": {"TF_USE_LEGACY_KERAS": "1"}}


@functools.lru_cache(maxsize=None)
def uncompressed_runs():
    """Uncompressed training through the plain tape, the baseline of every route: each route
    takes the same step from the same start on the same batches (the same SGD with momentum;
    tf_exact.py and tf_fit.py check each route's reduction exactly), so their uncompressed
    runs differ by rounding alone: the tape and ``fit`` give the same accuracy on each seed,
    the TF1 optimizer's mean is 0.3 points lower (2-core VM)."""
    return run_example("none", "tape", env=KERAS["keras3"])


@pytest.mark.parametrize("mode,keras", [("fit", "keras3"), ("fit", "legacy")])
def test_training_matches_uncompressed_accuracy(mode, keras):
    """Mean test accuracy over three seeds within 2 points of uncompressed training: single runs
    of this small problem differ by up to 3 points from seed to seed either way. ``fit``:
    model.fit with Horovod's Keras DistributedOptimizer and callbacks on each Keras route. (The
    plain tape's accuracy with ``rlh`` is the Pufferfish test's below. The tape, which a Keras
    ``train_step`` uses, and the TF1 optimizer are checked to reduce exactly by tf_exact.py,
    so they train as these do.)"""
    runs = {"none": uncompressed_runs(), "rlh": run_example("rlh", mode, env=KERAS[keras])}
    assert all(r["identical_parameters"] for rs in runs.values() for r in rs)
    mean = {c: sum(r["test_accuracy"] for r in rs) / len(rs) for c, rs in runs.items()}
    assert mean["rlh"] >= mean["none"] - 0.02, mean
    assert all(r["stats"]["ratio"] > 10 for r in runs["rlh"])


def test_pufferfish_alone_and_with_rlh_matches_full_rank_accuracy():
    """Keras's CNN factorized after three epochs (3.4x fewer parameters), trained nine more
    through DistributedGradientTape: identical variables on both ranks after the switch and at
    the end, mean test accuracy over three seeds within 1 point of full-rank training. Every run
    decays its learning rate along a cosine (as Pufferfish's own training does): at a constant
    rate the last epoch's accuracy swings by up to 4 points from seed to seed."""
    puffer = ("--pufferfish", "--warmup-epochs", 3)
    runs = {name: run_example(compression, "tape", 12, "--schedule", "cosine", *options)
            for name, compression, options in (("full", "none", ()),
                                               ("pufferfish", "none", puffer),
                                               ("pufferfish+rlh", "rlh", puffer))}
    assert_pufferfish_matches_full_rank(runs)


@pytest.mark.parametrize("keras,n_ranks,exchange", [("keras3", 2, "auto"), ("legacy", 2, "auto"),
                                                    ("keras3", 3, "two_phase")])
def test_keras_fit_reduces_exactly_and_its_callbacks_agree(keras, n_ranks, exchange):
    """model.fit on each Keras route: one SGD step gives w - lr * (mean of the ranks' decoded
    gradients) on every rank; the broadcast callback makes ranks that start apart identical;
    the metric-average callback gives every rank the mean of the ranks' metrics."""
    rc, out = horovodrun(n_ranks, "tests/workers/tf_fit.py", f"exchange={exchange}",
                         env=KERAS[keras])
    assert rc == 0 and "OK" in out, excerpt(out)


def test_horovod_keras_optimizer_refuses_keras_3_instead_of_training_unreduced():
    rc, out = python_run("tests/workers/tf_refusal.py", timeout=300)
    assert rc == 0 and "OK" in out, excerpt(out)


def test_torch_and_tensorflow_adapters_send_the_same_bytes():
    """Both adapters run the same core: for the same gradient, parameter key, seed and step their
    compress() sends the same bytes, and each side's decompress() of them gives the same array.
    (One process, Horovod of size 1 for both frameworks; the multi-rank paths are tested above.)"""
    pytest.importorskip("horovod.torch")
    rc, out = python_run("tests/workers/tf_torch_bytes.py", timeout=300)
    assert rc == 0 and "SAME BYTES" in out, excerpt(out)


def test_an_overflow_step_under_a_loss_scale_optimizer_is_skipped_once():
    """Keras's LossScaleOptimizer over DistributedGradientTape, 2 ranks, error feedback on,
    float16 variables (float16 gradients reach the compressor), rank 0's gradients overflowing
    at step 20 of 60: the scaler skips that step and no other on the allgather and the
    two-phase exchange, as uncompressed; training ends within 10% of the uncompressed loss
    (0.604; compressed 0.611 and 0.621 measured) and 3 points of its test accuracy. (float32
    variables, run by hand: 0.588 against 0.596 and 0.605; torch's test covers float32.)"""
    rc, out = horovodrun(2, "tests/workers/tf_amp.py", "float16", "none", "rlh:allgather",
                         "rlh:two_phase", timeout=600)
    assert rc == 0, excerpt(out)
    assert_skipped_once_and_trained(out, grad_bytes=2.0)


@pytest.mark.parametrize("n_ranks,cases", [
    (2, {"corrupt:auto:horovod": "DecodeError", "min:auto:horovod": "Average or Sum",
         "mismatch:allgather:horovod": "MismatchError", "corrupt:auto:fused": "DecodeError",
         "min:auto:fused": "Average or Sum"}),
    (3, {"corrupt:two_phase:horovod": "DecodeError", "mismatch:two_phase:horovod": "MismatchError",
         "mismatch:two_phase:fused": "MismatchError"})])
def test_faults_raise_promptly_on_every_rank(n_ranks, cases):
    """Cases CASE:EXCHANGE:TAPE (tests/workers/tf_faults.py), one after another in one launch
    per rank count: each raises its error on every rank, and the next case runs."""
    rc, out = horovodrun(n_ranks, "tests/workers/tf_faults.py", *cases, timeout=180)
    assert rc == 0, excerpt(out)
    assert_raised_on_every_rank(out, n_ranks, cases)
