"""Data-parallel training of a small CNN on scikit-learn's digits with PyTorch's
DistributedDataParallel, its gradients Huffman-coded by horovod_huffman.torch.ddp's hook.

    torchrun --nproc_per_node 2 examples/pytorch_digits_ddp.py --compression rlh --epochs 8

The same model, data, shards and optimizer as examples/pytorch_digits.py, which runs under
Horovod; ``--compression none`` is DDP's own allreduce, ``fp16`` and ``bf16`` DDP's own
compression hooks. Rank 0 prints per-epoch loss, test accuracy and compression statistics,
and the same ``RESULT {...}`` JSON line.
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.tools.bench.traces import cnn, digits_data
from horovod_huffman.torch import ddp
from codec_options import add_codec_options, quantizer      # beside this script

COMPRESSIONS = ["none", "fp16", "bf16"] + list(hh.ENCODERS)


def register(model, name, args, seed):
    """The hook of ``name`` on ``model``: None (DDP's allreduce), DDP's fp16/bf16 hooks, or
    horovod_huffman's, whose State is returned (it holds the statistics)."""
    if name == "none":
        return None
    if name in ("fp16", "bf16"):
        model.register_comm_hook(None, getattr(default_hooks, f"{name}_compress_hook"))
        return None
    # A distinct seed per rank: ranks must not share their random rounding.
    state = ddp.State(encoder=name, quantizer=quantizer(args),
                      error_feedback=args.error_feedback or None,
                      seed=seed * 65536 + dist.get_rank(), exchange=args.exchange)
    model.register_comm_hook(state, ddp.hook)
    return state


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compression", default="rlh", choices=COMPRESSIONS)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="scaled by the number of ranks")
    add_codec_options(p)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    train(args, args.seed, digits_data())
    dist.destroy_process_group()


def train(args, seed, data):
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    xtr, ytr, xte, yte = data
    shard = np.arange(rank, len(ytr), size)
    x, y = torch.from_numpy(xtr[shard]), torch.from_numpy(ytr[shard])
    x_test, y_test = torch.from_numpy(xte), torch.from_numpy(yte)
    model = DDP(cnn(torch))                        # DDP broadcasts rank 0's parameters
    state = register(model, args.compression, args, seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    gen = torch.Generator().manual_seed(seed + rank)
    steps = len(y) // args.batch_size             # the same on every rank
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(len(y), generator=gen)
        total = 0.0
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        train_loss = torch.tensor(total / steps)
        dist.all_reduce(train_loss)
        model.eval()
        with torch.no_grad():
            logits = model.module(x_test)
            test_loss = torch.nn.functional.cross_entropy(logits, y_test).item()
            acc = (logits.argmax(1) == y_test).float().mean().item()
        model.train()
        if rank == 0:
            line = f"epoch {epoch + 1}: train loss {train_loss.item() / size:.4f}, " \
                   f"test loss {test_loss:.4f}, test accuracy {100 * acc:.2f}%"
            if state is not None:
                t = state.stats()["total"]
                line += f", {t['bits_per_coord']:.3f} bits/coord, {t['ratio']:.1f}x smaller"
            print(line, flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    if rank == 0:
        result = {"compression": args.compression, "ranks": size, "seed": seed,
                  "test_accuracy": acc, "test_loss": test_loss,
                  "identical_parameters": all(torch.equal(flat, o) for o in everyone),
                  "seconds": time.perf_counter() - t0,
                  "parameters": sum(p.numel() for p in model.parameters())}
        if state is not None:
            result["stats"] = state.stats()["total"]
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
