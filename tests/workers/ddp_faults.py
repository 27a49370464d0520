"""Worker (torchrun, Gloo): a rank whose outgoing bytes are corrupted after they were
checksummed (corrupting.py) makes backward raise on every rank, through DDP's hook Future,
at the first step; each rank prints "RAISED <exchange> <error>", for each exchange in turn (a
fresh model and hook state each).

Usage: torchrun --nproc_per_node N ddp_faults.py EXCHANGE ...
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.torch import ddp
from corrupting import corrupt_outgoing_frames, end_torch_worker  # beside this file


def raises(exchange, rank):
    """Whether one step's backward raised, and what."""
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 3)))
    model.register_comm_hook(ddp.State(encoder="rlh", quantizer=hh.QSGD(levels=4),
                                       exchange=exchange), ddp.hook)
    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(rank))
    try:
        model(x).square().mean().backward()
    except Exception as e:                      # DDP re-raises the hook's error as its own
        return str(e)
    return None


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        corrupt_outgoing_frames()
    for exchange in sys.argv[1:]:
        text = raises(exchange, rank)
        if text is None:
            print(f"NOT RAISED {exchange}", flush=True)
            continue
        assert "checksum" in text or "DecodeError" in text, text
        print(f"RAISED {exchange} {text.splitlines()[0][:200]}", flush=True)
    end_torch_worker()


if __name__ == "__main__":
    main()
