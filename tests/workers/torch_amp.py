"""Worker: training under a loss scaler (``torch.amp.GradScaler``) through the stock
hvd.DistributedOptimizer, with one overflow step.

The digits MLP trains STEPS full-shard steps on every rank; at step OVERFLOW rank 0's scaled loss
is multiplied by 1e38, so its gradients overflow to Inf, as an fp16 step does when the loss
scale is too high. The scaler must skip that step on every rank (the reduced gradients are
non-finite) and only that one: error feedback that kept the overflow in its residual would make
every later step non-finite too, and the scaler would skip them all.

Usage: torch_amp.py COMPRESSION [COMPRESSION ...], each "none" or "<encoder>:<exchange>" (error
feedback on, QSGD s = 8). Rank 0 prints one ``RESULT {...}`` line per compression
(overflow_steps.result).
"""
import json
import sys

import torch
import horovod.torch as hvd

from horovod_huffman.tools.bench.traces import digits_data, mlp
from horovod_huffman.torch import Compression
from overflow_steps import LR, OVERFLOW, STEPS, compression, result   # beside this file


def run(name, data):
    rank, n = hvd.rank(), hvd.size()
    x, y, test_x, test_y = data
    x, y = x[rank::n], y[rank::n]
    torch.manual_seed(0)
    model = mlp(torch)
    comp = compression(name, Compression, rank)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                   named_parameters=model.named_parameters(), compression=comp)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    scaler = torch.amp.GradScaler("cpu")
    skipped, losses = [], []
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        scaled = scaler.scale(loss)
        if step == OVERFLOW and rank == 0:
            scaled = scaled * 1e38                  # overflows float32 in backward
        scaled.backward()
        opt.synchronize()
        scaler.unscale_(opt)
        with opt.skip_synchronize():
            before = scaler.get_scale()
            scaler.step(opt)
        scaler.update()
        if scaler.get_scale() < before:
            skipped.append(step)
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    identical = all(torch.equal(flat, other) for other in hvd.allgather_object(flat))
    return result(name, comp, skipped, losses, accuracy, identical)


def main():
    hvd.init()
    torch.set_num_threads(1)
    data = tuple(torch.from_numpy(a) for a in digits_data())
    for name in sys.argv[1:]:
        outcome = run(name, data)
        if hvd.rank() == 0:
            print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
