"""Worker (3 ranks): an optimizer on process set {0, 1} reduces over those two ranks only.

Ranks 0 and 1 take one step with compression and check the exact mean of their two round trips;
rank 2 is outside the set and only joins the final global barrier. Prints "OK" on rank 0.
"""
import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.torch import Compression
from expected import expected_sum, staged       # beside this file


def main():
    pair = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[pair])
    rank = hvd.rank()
    if pair.included():
        torch.manual_seed(0)
        model = torch.nn.Linear(40, 30)
        x = torch.randn(8, 40, generator=torch.Generator().manual_seed(rank))
        model(x).square().mean().backward()
        g = model.weight.grad.clone()
        model.zero_grad()
        comp = Compression.build(encoder="shs", quantizer=hh.QSGD(levels=4), seed=5 + rank,
                                 min_numel=100)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(),
                                       compression=comp, process_set=pair)
        model(x).square().mean().backward()
        opt.synchronize()
        (plan,) = comp.plans
        (bucket,) = plan.buckets                   # the weight alone: the bias rides allreduce
        both = hvd.allgather(g[None], name="grads", process_set=pair).numpy()
        total, _, _ = expected_sum([staged({"weight": grad}, bucket) for grad in both], [5, 6],
                                bucket, "allgather", "shs", 4, 512)
        expected = (torch.from_numpy(total[:g.numel()]) * 0.5).reshape(g.shape)
        assert torch.equal(model.weight.grad, expected), (model.weight.grad - expected).abs().max()
        with opt.skip_synchronize():
            opt.step()
    hvd.allreduce(torch.zeros(1), name="done")
    if rank == 0:
        print("OK process set", flush=True)


if __name__ == "__main__":
    main()
