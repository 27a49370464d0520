"""Worker: a rank killed with SIGKILL in the middle of a step, after backward handed its
buckets to the exchange and before the optimizer's step waits for them.

Usage: torch_kill.py EXCHANGE. Every rank prints "STEP <rank> <step>" after each step; rank 1
prints "KILL <unix time>" and kills itself at step KILL_STEP. The other ranks must not finish a
step after it and must exit non-zero promptly (the test times it).
"""
import os
import signal
import sys
import time

import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.torch import Compression

KILL_STEP = 3


def main():
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    comp = Compression.build(encoder="rlh", quantizer=hh.QSGD(levels=8), exchange=sys.argv[1],
                             bucket_bytes=4 * 4096)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=comp)
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(hvd.rank()))
    y = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(hvd.rank()))
    for step in range(100):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if step == KILL_STEP and hvd.rank() == 1:
            print(f"KILL {time.time()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.step()
        print(f"STEP {hvd.rank()} {step}", flush=True)


if __name__ == "__main__":
    main()
