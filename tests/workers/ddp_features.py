"""Worker (torchrun, Gloo): DDP's options with horovod_huffman.torch.ddp's hook, TernGrad with error
feedback. For each of plain, no_sync accumulation, static_graph, find_unused_parameters
(a head unused by the loss) and gradient_as_bucket_view: 4 steps, then the parameters agree on
every rank. Then a checkpoint: 2 steps, the model, optimizer and hook state saved; a 3rd step;
the checkpoint restored, and the 3rd step again gives the same parameters.

Usage: torchrun --nproc_per_node N ddp_features.py; prints "OK <n> checks".
"""
import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.torch import ddp

OPTIONS = {"plain": {}, "no_sync": {}, "static_graph": {"static_graph": True},
           "find_unused_parameters": {"find_unused_parameters": True},
           "gradient_as_bucket_view": {"gradient_as_bucket_view": True}}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 4)
        self.unused = torch.nn.Linear(32, 4)          # only find_unused_parameters leaves it

    def forward(self, x):
        return self.head(self.body(x))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(12, 30, generator=g), torch.randint(0, 4, (12,), generator=g)


def build(base, options, rank):
    model = DDP(copy.deepcopy(base), bucket_cap_mb=0.004, **options)
    state = ddp.State(encoder="rlh", quantizer=hh.TernGrad(bucket_size=64), error_feedback=True,
                      seed=7 + rank)
    model.register_comm_hook(state, ddp.hook)
    return model, state, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def step(model, opt, rank, k, accumulate=False):
    opt.zero_grad()
    if accumulate:                                   # a micro-batch without communication
        with model.no_sync():
            x, y = batch(rank + 50, k)
            torch.nn.functional.cross_entropy(model(x), y).backward()
    x, y = batch(rank, k)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def agree(model, size):
    mine = flat(model)
    everyone = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(everyone, mine)
    return all(torch.equal(mine, other) for other in everyone)


def main():
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    base = Net()
    checks = 0
    for name, options in OPTIONS.items():
        if name != "find_unused_parameters":
            base.unused.requires_grad_(False)        # DDP would wait for its gradients
        model, state, opt = build(base, options, rank)
        for k in range(4):
            step(model, opt, rank, k, accumulate=name == "no_sync")
        assert agree(model, size), f"{name}: parameters differ between ranks"
        assert state.stats()["total"]["coords"] > 0, name
        base.unused.requires_grad_(True)
        checks += 1
    base.unused.requires_grad_(False)
    model, state, opt = build(base, {}, rank)
    for k in range(2):
        step(model, opt, rank, k)
    saved = copy.deepcopy({"model": model.module.state_dict(), "opt": opt.state_dict(),
                           "hook": state.state_dict()})
    assert saved["hook"]["residuals"], "error feedback kept no residual"
    step(model, opt, rank, 2)
    after = flat(model)
    # Restored into the same DDP model: a DDP model built anew starts from buckets of its own
    # (every parameter, in the model's order) and rebuilds them after its first step.
    model.module.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    state.load_state_dict(saved["hook"])
    step(model, opt, rank, 2)
    assert torch.equal(flat(model), after), "the restored job took another step"
    checks += 1
    print(f"OK {checks} checks", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
