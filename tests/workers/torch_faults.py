"""Worker: faults that every rank must report promptly, never hang on.

Usage: torch_faults.py CASE [EXCHANGE], CASE one of
  corrupt: rank 1's link flips a byte of each frame it sends -> DecodeError on every rank;
  mismatch: rank 1 quantizes in buckets of another size, so its bucket plan differs ->
           MismatchError on every rank;
  adasum:  op=hvd.Adasum -> ValueError naming Adasum on every rank;
  min:     op=hvd.Min -> ValueError naming the supported ops on every rank.
Prints "RAISED <rank> <exception type>: <message>" and exits 0 when the expected error came.
"""
import sys

import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.exchange.frames import MismatchError
from horovod_huffman.torch import Compression
from corrupting import corrupt_outgoing_frames          # beside this file


def main():
    case = sys.argv[1]
    exchange = sys.argv[2] if len(sys.argv) > 2 else "auto"
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    if case == "corrupt" and hvd.rank() == 1:
        corrupt_outgoing_frames()
    bucket = 128 if case == "mismatch" and hvd.rank() == 1 else 64
    comp = Compression.build(encoder="rlh", quantizer=hh.QSGD(levels=8, bucket_size=bucket),
                             exchange=exchange)
    op = {"corrupt": hvd.Average, "mismatch": hvd.Average, "adasum": hvd.Adasum,
          "min": getattr(hvd, "Min", None)}[case]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=comp,
                                   op=op)
    expected = {"corrupt": hh.DecodeError, "mismatch": MismatchError, "adasum": ValueError,
                "min": ValueError}[case]
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(hvd.rank()))
    try:
        model(x).square().mean().backward()
        opt.step()
    except expected as e:
        print(f"RAISED {hvd.rank()} {type(e).__name__}: {e}", flush=True)
        # Stay in Horovod until every rank has reported: a rank that exits at once shuts
        # Horovod down under a rank still in its backward pass, which then raises
        # HorovodInternalError ("Horovod has been shut down") instead of its own error. (A
        # barrier, not hvd.join: in one CI run of the op=Min case Horovod shut down while a
        # rank waited in join.)
        hvd.barrier()
        return 0
    print(f"NO ERROR on rank {hvd.rank()}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
