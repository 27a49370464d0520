"""Worker (torchrun, Gloo): DDP with horovod_huffman.torch.ddp's hook and route="adaptive".
20 steps: the probe rounds take every route (encoded, rlh, fp16, fp32), the ranks decide one
from their summed timings, the same on every rank, and keep it; the parameters agree on every
rank. Prints "OK <route>" (the route chosen).

Usage: torchrun --nproc_per_node N ddp_routes.py
"""
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.exchange.routing import PROBE_ROUNDS, ROUTES
from horovod_huffman.torch import ddp


def main():
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 3)), bucket_cap_mb=0.02)
    state = ddp.State(encoder="ans", quantizer=hh.QSGD(levels=8), route="adaptive")
    model.register_comm_hook(state, ddp.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(len(ROUTES) * PROBE_ROUNDS + 4):
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(16, 40, generator=g), torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    periods = state.router.periods["buckets"]
    assert sorted(periods) == sorted(ROUTES) and all(np.isfinite(list(periods.values()))), periods
    chosen = [None] * size
    dist.all_gather_object(chosen, state.router.chosen["buckets"])
    assert len(set(chosen)) == 1, chosen
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(flat, other) for other in everyone), "parameters differ"
    print(f"OK {chosen[0]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
