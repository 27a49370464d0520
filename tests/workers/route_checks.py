"""What the adaptive-routing workers (torch_routes.py, tf_routes.py) check alike."""
from horovod_huffman.exchange.routing import BUCKETS_KEY, FAST_ROUTE, ROUTES


def counted(encoder, written, key):
    """Count the streams ``encoder`` writes under ``written[key]``."""
    encoded = encoder.encoded

    def counting(*args, **kwargs):
        written[key] += 1
        return encoded(*args, **kwargs)
    encoder.encoded = counting


def expected_writers(encoder_name, route):
    """Which encoders write streams on a step of ``route``: the compressor's own ("own") and
    the rlh route's ("rlh"), for a compressor whose encoder is ``encoder_name``."""
    if encoder_name != FAST_ROUTE:
        return {"own": route == "encoded", "rlh": route == FAST_ROUTE}
    return {"own": route in ("encoded", FAST_ROUTE), "rlh": False}


def check_agreed(seen, router, rank, allgather_object):
    """Every route was taken (``seen``) and every rank chose the same one; prints "OK routes
    <chosen>" on rank 0."""
    assert seen == set(ROUTES), seen
    chosen = router.chosen
    assert list(chosen) == [BUCKETS_KEY], chosen
    assert all(c == chosen for c in allgather_object(chosen)), chosen
    if rank == 0:
        print("OK routes", sorted(chosen.items()), flush=True)
