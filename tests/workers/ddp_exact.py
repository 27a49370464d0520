"""Worker (torchrun, Gloo): DistributedDataParallel with horovod_huffman.torch.ddp's hook.

At every step, every bucket DDP hands the hook comes back as exactly the exchange's sum over
ranks divided by the world size, computed here from every rank's bucket (gathered
uncompressed) with the public API (expected.py), at that bucket's step: one bucket at step 0,
then the several DDP rebuilds them into. Rank 1 computes slower (it sleeps before backward).
After 4 steps every rank holds the same parameters. With ``:cuda`` the model and its buckets
are on the GPU (every rank on GPU ``rank % count``): the hook codes them there, and the
results are those of the host's arithmetic, bit for bit.

Usage: torchrun --nproc_per_node N ddp_exact.py EXCHANGE:ENCODER:DTYPE[:cuda] ...; prints
"OK <case> <n> checks" for each case, one after another in one launch.
"""
import sys
import time
import types

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.torch import ddp
from expected import expected_sum       # beside this file

LEVELS, BUCKET, SEED = 4, 64, 1000


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 24)                     # 1200 coords
        self.fc1 = torch.nn.Linear(24, 64)                          # 1536 + bias 64
        self.fc2 = torch.nn.Linear(64, 5)                           # 320 + bias 5

    def forward(self, idx):
        return self.fc2(torch.relu(self.fc1(self.embed(idx).mean(1))))


def batch(rank, step, device):
    g = torch.Generator().manual_seed(100 * step + rank)
    return (torch.randint(0, 50, (16, 7), generator=g).to(device),
            torch.randint(0, 5, (16,), generator=g).to(device))


def check(exchange, encoder, dtype, device, rank, size):
    """Four steps of one case; returns the checks made."""
    kind = exchange if exchange != "auto" else ("allgather" if size <= 3 else "two_phase")
    torch.manual_seed(0)
    # ~1000 coordinates a bucket after DDP's rebuild: several
    model = DDP(Net().to(device, dtype), bucket_cap_mb=0.001 * dtype.itemsize)
    state = ddp.State(encoder=encoder, quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET),
                      seed=SEED + rank, exchange=exchange)
    seen = []

    def recording(state, bucket):
        work = torch.float64 if dtype == torch.float64 else torch.float32     # as the hook's
        seen.append((bucket.index(), bucket.buffer().detach().to("cpu", work).numpy().copy()))
        future = ddp.hook(state, bucket)
        return future.then(lambda f: seen.append((bucket.index(), f.value())) or f.value())

    model.register_comm_hook(state, recording)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    checks, calls = 0, {}
    for step in range(4):
        seen.clear()
        x, y = batch(rank, step, device)
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        if rank == 1:
            time.sleep(0.2)                  # uneven compute: rank 0 reaches its hooks first
        loss.backward()
        inputs = {i: b for i, b in seen if isinstance(b, np.ndarray)}
        results = {i: r for i, r in seen if not isinstance(r, np.ndarray)}
        assert sorted(inputs) == sorted(results), (sorted(inputs), sorted(results))
        assert step == 0 or len(inputs) >= 2, f"{len(inputs)} buckets after DDP's rebuild"
        everyone = [None] * size
        dist.all_gather_object(everyone, inputs)
        for i in sorted(inputs):
            bucket = types.SimpleNamespace(key=f"horovod_huffman.ddp.{i}", size=inputs[i].size)
            total, _, _ = expected_sum([everyone[r][i] for r in range(size)],
                                       [SEED + r for r in range(size)], bucket, kind, encoder,
                                       LEVELS, BUCKET, step=calls.get(i, 0))
            calls[i] = calls.get(i, 0) + 1
            want = torch.from_numpy(total / size).to(dtype)
            got = results[i]
            assert got.device == device, (got.device, device)
            got = got.cpu()
            assert got.dtype == dtype and torch.equal(got, want), \
                (exchange, encoder, dtype, step, i, float((got.float() - want.float()).abs().max()))
            checks += 1
        opt.step()
        opt.zero_grad()
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()]).cpu()
    gathered = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(g, gathered[0]) for g in gathered), "parameters differ between ranks"
    return checks + 1


def main():
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    for case in sys.argv[1:]:
        exchange, encoder, dtype, *where = case.split(":")
        device = torch.device("cpu")
        if where == ["cuda"]:
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        checks = check(exchange, encoder, getattr(torch, dtype), device, rank, size)
        print(f"OK {case} {checks} checks", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
