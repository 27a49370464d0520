"""Worker: faults that every rank must report promptly, never hang on.

Usage: torch_faults.py CASE:EXCHANGE [CASE:EXCHANGE ...], the cases one after another in one
launch, CASE one of
  corrupt: rank 1's link flips a byte of each frame it sends -> DecodeError on every rank;
  mismatch: rank 1 quantizes in buckets of another size, so its bucket plan differs ->
           MismatchError on every rank;
  adasum:  op=hvd.Adasum -> ValueError naming Adasum on every rank;
  min:     op=hvd.Min -> ValueError naming the supported ops on every rank.
Every rank prints "RAISED <rank> <case>:<exchange> <exception type>: <message>" for each case
that raised its expected error, and the worker exits 0 when every case did. A raise is agreed
by every rank (the exchanges' status allreduce), so no collective of a case is left in flight
when the next case starts.
"""
import sys

import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.exchange.frames import MismatchError
from horovod_huffman.torch import Compression
from corrupting import raised_expected, run_cases          # beside this file

EXPECTED = {"corrupt": hh.DecodeError, "mismatch": MismatchError, "adasum": ValueError,
            "min": ValueError}


def run_case(case, exchange):
    """Whether one step of ``case`` raised its expected error on this rank."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    bucket = 128 if case == "mismatch" and hvd.rank() == 1 else 64
    comp = Compression.build(encoder="rlh", quantizer=hh.QSGD(levels=8, bucket_size=bucket),
                             exchange=exchange)
    op = {"corrupt": hvd.Average, "mismatch": hvd.Average, "adasum": hvd.Adasum,
          "min": getattr(hvd, "Min", None)}[case]
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(hvd.rank()))

    def step():
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(),
                                       compression=comp, op=op)
        model(x).square().mean().backward()
        opt.step()

    return raised_expected(f"{case}:{exchange}", hvd.rank(), case == "corrupt" and hvd.rank() == 1,
                           step, EXPECTED[case], lambda e: f"{type(e).__name__}: {e}")


def main():
    hvd.init()
    # After each case, and before exiting, every rank waits for the others: a rank that exits
    # at once shuts Horovod down under a rank still in its backward pass, which then raises
    # HorovodInternalError ("Horovod has been shut down") instead of its own error. (A
    # barrier, not hvd.join: in one CI run of the op=Min case Horovod shut down while a rank
    # waited in join.)
    return run_cases(sys.argv[1:], run_case, hvd.barrier)


if __name__ == "__main__":
    sys.exit(main())
