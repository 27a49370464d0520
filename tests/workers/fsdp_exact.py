"""Worker (torchrun, Gloo): FSDP2 (``fully_shard``) with horovod_huffman.torch.fsdp's
reduce-scatter, three FSDP modules (one with a parameter whose rows do not split evenly over the
ranks). For three steps of SGD with uneven compute between ranks, every rank's gradient shard of
every parameter equals exactly the mean over ranks of what each rank quantized of that shard
(its local gradient in FSDP's reduce-scatter layout, through QSGD and rlh), recomputed here from
every rank's local gradients with the public API only. Then a rank whose outgoing bytes are
corrupted makes backward raise DecodeError on every rank. Prints "OK fsdp K checks" and
"RAISED fsdp <error>" (or "NOT RAISED fsdp").

Usage: torchrun --nproc_per_node N fsdp_exact.py
"""
import copy
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import horovod_huffman as hh
from horovod_huffman.torch import fsdp
from corrupting import corrupt_outgoing_frames, end_torch_worker  # beside this file
from expected import round_trip

LEVELS, BUCKET, SEED, STEPS = 4, 64, 100, 3


def make_model(mesh):
    """(the sharded model, its FSDP modules in ``fsdp.install``'s order, a plain replica)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(), torch.nn.Linear(64, 29),
                                torch.nn.ReLU(), torch.nn.Linear(29, 3))
    replica = copy.deepcopy(model)
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, [model, model[0], model[2]], replica


def shard_layout(grads, n):
    """FSDP's reduce-scatter input for one module: the module's parameters' gradients, each
    padded with zero rows to a multiple of ``n`` rows and cut into ``n`` row blocks; shard j is
    every parameter's block j, flat, in parameter order. Returns the ``n`` shards."""
    shards = [[] for _ in range(n)]
    for g in grads:
        rows = -(-g.shape[0] // n) * n
        padded = torch.zeros((rows,) + tuple(g.shape[1:]), dtype=g.dtype)
        padded[:g.shape[0]] = g
        for j, block in enumerate(padded.chunk(n)):
            shards[j].append(block.reshape(-1))
    return [torch.cat(s).numpy() for s in shards]


def expected_shard(local_grads, unit, key, step, me, n):
    """The mean over ranks of each rank's quantized shard ``me`` of ``unit``'s gradients,
    summed in rank order in float32; ``local_grads``: every rank's {parameter name: gradient}."""
    total = None
    for r, grads in enumerate(local_grads):
        x = shard_layout([grads[name] for name in unit], n)[me]
        part = hh.dequantize(round_trip(x, SEED + r, f"{key}/shard{me}", "rlh", LEVELS, BUCKET,
                                        step=step))
        total = part if total is None else total + part
    total /= np.float32(n)
    return total


def check_steps(rank, n, mesh):
    model, units, replica = make_model(mesh)
    state = fsdp.State(encoder="rlh", quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET),
                       seed=SEED + rank)
    assert fsdp.install(model, state) == 3
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # Each FSDP module's own parameters, in its order: a child's are its own, the root's the
    # rest (named as in the replica).
    names = [n for n, _ in model.named_parameters()]
    owned = {index: [name for name in names if name.startswith(prefix)]
             for index, prefix in enumerate(["4.", "0.", "2."])}
    checks = 0
    for step in range(STEPS):
        x = torch.randn(8, 40, generator=torch.Generator().manual_seed(10 * step + rank))
        with torch.no_grad():
            for p, q in zip(replica.parameters(), model.parameters()):
                p.copy_(q.full_tensor())
        replica.zero_grad()
        replica(x).square().mean().backward()
        local = {name: p.grad.clone() for name, p in replica.named_parameters()}
        everyone = [None] * n
        dist.all_gather_object(everyone, local)
        if rank == 1:
            time.sleep(0.2)                              # uneven compute between ranks
        opt.zero_grad()
        model(x).square().mean().backward()
        grads = dict(model.named_parameters())
        for index, unit in owned.items():
            want = expected_shard(everyone, unit, f"horovod_huffman.fsdp.{index}", step, rank, n)
            pos = 0
            for name in unit:
                full = local[name].shape
                rows = -(-full[0] // n)
                block = want[pos:pos + rows * int(np.prod(full[1:], dtype=np.int64))]
                pos += block.size
                got = grads[name].grad.to_local()
                kept = got.shape[0]                  # the last rank's block may hold fewer rows
                np.testing.assert_array_equal(
                    got.numpy(), block.reshape((rows,) + tuple(full[1:]))[:kept],
                    err_msg=f"step {step} {name}")
                checks += 1
        opt.step()
    assert state.stats()["total"]["bits_per_coord"] < 4
    return checks


def main():
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    print(f"OK fsdp {check_steps(rank, n, mesh)} checks", flush=True)

    model, _, _ = make_model(mesh)
    fsdp.install(model, fsdp.State(encoder="rlh", quantizer=hh.QSGD(levels=LEVELS)))
    if rank == 1:
        corrupt_outgoing_frames()
    try:
        model(torch.randn(8, 40)).square().mean().backward()
        print("NOT RAISED fsdp", flush=True)
    except hh.DecodeError as e:
        print(f"RAISED fsdp {str(e).splitlines()[0][:200]}", flush=True)
    end_torch_worker()


if __name__ == "__main__":
    main()
