"""What the overflow-step runs (tests/workers/torch_amp.py, tf_amp.py) must show, under either
framework."""
import json
import math

from horovod_run import excerpt


def assert_skipped_once_and_trained(out, grad_bytes):
    """``out``: a launch's output with the RESULT of "none", "rlh:allgather" and
    "rlh:two_phase". The scaler skips step 20 and no other in every run; losses after it stay
    finite, parameters identical, the residuals finite; the compressed runs encode gradients of
    ``grad_bytes`` bytes a coordinate and end within 10% of the uncompressed run's training
    loss and 3 points of its test accuracy."""
    runs = {r["compression"]: r for r in
            (json.loads(l.split("RESULT ", 1)[1]) for l in out.splitlines() if "RESULT " in l)}
    base = runs.pop("none", None)
    assert base and base["skipped"] == [20] and len(runs) == 2, excerpt(out)
    for name, r in runs.items():
        assert r["skipped"] == [20] and r["finite_after"] and r["identical_parameters"], r
        assert r["grad_bytes"] == grad_bytes, r
        assert r["residual_norms"] and all(math.isfinite(v) for v in r["residual_norms"].values())
        assert r["final_loss"] <= 1.10 * base["final_loss"], (name, r, base)
        assert r["accuracy"] >= base["accuracy"] - 0.03, (name, r, base)
