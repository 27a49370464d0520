"""PyTorch DistributedDataParallel with horovod_huffman.torch.ddp's communication hook, on real
torch.distributed process groups over Gloo, launched by torchrun (tests/workers/ddp_*.py)."""
import json
import os
import re
import subprocess
import sys

import pytest

from horovod_run import PYTHONPATH, cuda_missing, excerpt, torchrun

pytest.importorskip("torch.distributed", exc_type=ImportError)

pytestmark = pytest.mark.ddp


@pytest.mark.parametrize("n_ranks,cases", [
    (2, ("allgather:rlh:float64", "two_phase:ans:float32", "auto:rlh:bfloat16")),
    (4, ("auto:auto:float32",)),
])
def test_every_bucket_gets_the_exact_mean_and_the_ranks_stay_identical(n_ranks, cases):
    """Four steps with uneven compute between ranks: every bucket's result is exactly the
    exchange's sum over the ranks' buckets divided by N, before and after DDP rebuilds its
    buckets (one, then several), and the parameters agree on every rank; cases
    EXCHANGE:ENCODER:DTYPE, one launch for each rank count (``auto`` takes the allgather at 2
    ranks and the two-phase exchange at 4)."""
    rc, out = torchrun(n_ranks, "tests/workers/ddp_exact.py", *cases)
    assert rc == 0, excerpt(out)
    for case in cases:
        assert out.count(f"OK {case} 8 checks") == n_ranks, (case, excerpt(out))


@pytest.mark.skipif(cuda_missing() is not None, reason=str(cuda_missing()))
def test_cuda_buckets_are_coded_on_the_gpu_and_get_the_exact_mean():
    """The hook's CUDA branch: 2 ranks on one GPU with Gloo, the model and its buckets on the
    GPU, quantized, coded and decoded there with only the encoded bytes on the host; every
    bucket's result is the host's exact mean, bit for bit, on the bucket's device, for float32,
    float16 and bfloat16 gradients, and the parameters agree on every rank."""
    cases = ("allgather:rlh:float32:cuda", "two_phase:ans:float16:cuda",
             "auto:auto:bfloat16:cuda")
    rc, out = torchrun(2, "tests/workers/ddp_exact.py", *cases)
    assert rc == 0, excerpt(out)
    for case in cases:
        assert out.count(f"OK {case} 8 checks") == 2, (case, excerpt(out))


def test_a_corrupted_stream_makes_every_rank_raise():
    """Rank 1's bytes are corrupted after they were checksummed: backward raises on both ranks
    (the hook's Future carries the DecodeError), for both exchanges, and nothing hangs."""
    rc, out = torchrun(2, "tests/workers/ddp_faults.py", "allgather", "two_phase", timeout=120)
    assert rc == 0, excerpt(out)
    for exchange in ("allgather", "two_phase"):
        assert out.count(f"RAISED {exchange}") == 2, excerpt(out)
    assert "NOT RAISED" not in out, excerpt(out)


def test_the_digits_example_trains_with_the_hook():
    """examples/pytorch_digits_ddp.py under torchrun, 2 ranks, rlh: the digits CNN trains to the
    Horovod route's accuracy range at about 1 bit per coordinate, identical on both ranks."""
    rc, out = torchrun(2, "examples/pytorch_digits_ddp.py", "--compression", "rlh", "--epochs", 8)
    assert rc == 0, excerpt(out)
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["identical_parameters"], result
    assert result["test_accuracy"] >= 0.95, result
    assert result["stats"]["bits_per_coord"] < 1.5, result


def test_ddp_options_and_a_restored_checkpoint():
    """TernGrad with error feedback, 2 ranks: plain, no_sync accumulation, static_graph,
    find_unused_parameters (DDP's own collectives beside the hook's) and
    gradient_as_bucket_view each train with identical parameters on both ranks; the model,
    optimizer and hook state saved after step 2 and restored give step 3 again exactly."""
    rc, out = torchrun(2, "tests/workers/ddp_features.py")
    assert rc == 0, excerpt(out)
    assert out.count("OK 6 checks") == 2, excerpt(out)


def test_the_hook_needs_no_horovod():
    """With Horovod missing (its modules blocked), horovod_huffman.torch.ddp and Pufferfish's
    layers import and the hook's State builds; Horovod's compressors raise ImportError saying
    so."""
    code = ("import sys; sys.modules['horovod'] = None; sys.modules['horovod.torch'] = None\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
            "from horovod_huffman.torch import ddp, factorize, Compression\n"
            "ddp.State(encoder='rlh')\n"
            "try:\n    Compression.rlh\nexcept ImportError as e:\n    print('RAISED', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RAISED" in proc.stdout and "horovod_huffman.torch.ddp" in proc.stdout, proc.stdout


def test_adaptive_routing_decides_alike_on_every_rank():
    """route="adaptive", 2 ranks, 20 steps: every route is probed, the ranks decide one from
    their summed timings, the same on both, and the parameters agree."""
    rc, out = torchrun(2, "tests/workers/ddp_routes.py")
    assert rc == 0, excerpt(out)
    # (unanchored: the ranks' lines may interleave)
    assert len(re.findall(r"OK (encoded|rlh|fp16|fp32)", out)) == 2, excerpt(out)


def test_a_rebuilt_bucket_drops_the_residuals_of_its_old_layout():
    """One rank, TernGrad with error feedback: bucket 0 reduced once with parameters of shape
    (10, 20), then again with the same 200 coordinates as (20, 10) (DDP's rebuild) gives what a
    hook state without a residual gives at that step, while a second step with the layout
    unchanged does not (its residual is added)."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import horovod_huffman as hh
    from horovod_huffman.exchange.local import run_ranks
    from horovod_huffman.torch import ddp

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    try:
        grads = torch.from_numpy(np.random.default_rng(0).standard_normal(200).astype(np.float32))

        def state():
            return ddp.State(quantizer=hh.TernGrad(bucket_size=64), error_feedback=True, seed=1)

        def second_step(first_shapes, second_shapes):
            s = state()
            run_ranks([s._exchange(0, first_shapes, grads, 800, 0, 0.0, None)])
            return run_ranks([s._exchange(0, second_shapes, grads, 800, 1, 0.0, None)])[0]

        fresh = state()
        fresh.codec.steps["horovod_huffman.ddp.0"] = 1        # the same step, no residual
        without = run_ranks([fresh._exchange(0, ((20, 10),), grads, 800, 1, 0.0, None)])[0]
        assert torch.equal(second_step(((10, 20),), ((20, 10),)), without)
        assert not torch.equal(second_step(((20, 10),), ((20, 10),)), without)
    finally:
        dist.destroy_process_group()


def test_fsdp_reduce_scatter_gives_every_rank_its_exact_mean_shard():
    """FSDP2 (fully_shard, three FSDP modules) with horovod_huffman.torch.fsdp's reduce-scatter,
    2 ranks: after each of 3 steps every rank's gradient shard of every parameter equals the
    mean of the ranks' quantized shards exactly, rows that do not split evenly included; a
    corrupted stream makes backward raise DecodeError on both ranks."""
    rc, out = torchrun(2, "tests/workers/fsdp_exact.py", timeout=180)
    assert rc == 0, excerpt(out)
    assert out.count("OK fsdp 18 checks") == 2, excerpt(out)
    assert out.count("RAISED fsdp") == 2 and "NOT RAISED" not in out, excerpt(out)
