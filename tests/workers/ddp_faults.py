"""Worker (torchrun, Gloo): a rank whose outgoing bytes are corrupted after they were
checksummed (corrupting.py) makes backward raise on every rank, through DDP's hook Future,
at the first step; each rank prints "RAISED <error>".

Usage: torchrun --nproc_per_node N ddp_faults.py EXCHANGE
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.torch import ddp
from corrupting import corrupt_outgoing_frames      # beside this file


def main():
    exchange = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        corrupt_outgoing_frames()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 3)))
    model.register_comm_hook(ddp.State(encoder="rlh", quantizer=hh.QSGD(levels=4),
                                       exchange=exchange), ddp.hook)
    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(rank))
    try:
        model(x).square().mean().backward()
    except Exception as e:                      # DDP re-raises the hook's error as its own
        text = str(e)
        assert "DecodeError" in text or "checksum" in text or "corrupt" in text, text
        print("RAISED", text.splitlines()[0][:200], flush=True)
    else:
        print("NOT RAISED", flush=True)


if __name__ == "__main__":
    main()
