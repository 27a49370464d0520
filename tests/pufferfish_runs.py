"""What the examples' Pufferfish runs must show, under either framework."""


def assert_pufferfish_matches_full_rank(runs):
    """``runs``: {"full", "pufferfish", "pufferfish+rlh": [RESULT of each seed]}. Parameters
    identical on every rank after the switch and at the end, over 3x fewer of them, and mean
    test accuracy within 1 point of full-rank training."""
    for name in ("pufferfish", "pufferfish+rlh"):
        for r in runs[name]:
            assert r["identical_after_switch"] and r["identical_parameters"], (name, r)
            assert r["parameters"] * 3 < r["full_rank_parameters"], r
    mean = {name: sum(r["test_accuracy"] for r in rs) / len(rs) for name, rs in runs.items()}
    assert mean["pufferfish"] >= mean["full"] - 0.01, mean
    assert mean["pufferfish+rlh"] >= mean["full"] - 0.01, mean
