"""Worker: one step through the stock hvd.DistributedOptimizer for every encoder; checks that each
rank's gradient equals the rank-ordered mean (or sum) of every rank's
dequantize(decode(encode(quantize(g)))) exactly, and that parameters end identical.

Usage: torch_exact.py DTYPE VARIANT [VARIANT ...]; prints "OK <n> checks" on success.
"""
import copy
import sys

import numpy as np
import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.exchange import derive_seed
from horovod_huffman.torch import Compression

LEVELS, BUCKET, MIN_NUMEL, SEED = 4, 64, 100, 1000


class Net(torch.nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 24, sparse=sparse)     # 1200 coords
        self.fc1 = torch.nn.Linear(24, 64)                          # 1536 + bias 64 (plain)
        self.fc2 = torch.nn.Linear(64, 5)                           # 320 + bias 5 (plain)

    def forward(self, idx):
        return self.fc2(torch.relu(self.fc1(self.embed(idx).mean(1))))


def batch(rank):
    g = torch.Generator().manual_seed(rank)
    return torch.randint(0, 50, (16, 7), generator=g), torch.randint(0, 5, (16,), generator=g)


def local_grads(model, rank, passes):
    ref = copy.deepcopy(model)
    for k in range(passes):
        x, y = batch(rank + 10 * k)
        torch.nn.functional.cross_entropy(ref(x).float(), y).backward()
    return {n: (p.grad.to_dense() if p.grad.is_sparse else p.grad).clone()
            for n, p in ref.named_parameters()}


def run_case(encoder, dtype, variant):
    rank, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = Net(sparse=variant == "sparse_as_dense").to(dtype)
    passes = 2 if variant == "bpps2" else 1
    grads = local_grads(model, rank, passes)
    kwargs = {"named_parameters": model.named_parameters(), "backward_passes_per_step": passes}
    if variant == "groups":
        kwargs["num_groups"] = 2
    if variant == "predivide":
        kwargs["gradient_predivide_factor"] = 2.0
    if variant == "sum":
        kwargs["op"] = hvd.Sum
    if variant == "sparse_as_dense":
        kwargs["sparse_as_dense"] = True
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET),
                             error_feedback=False, min_numel=MIN_NUMEL, seed=SEED + rank)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   compression=comp, **kwargs)
    for k in range(passes):
        x, y = batch(rank + 10 * k)
        torch.nn.functional.cross_entropy(model(x).float(), y).backward()
    opt.synchronize()

    # Expected: every rank's round trip of its own quantized gradient, summed in rank order.
    mine = {}
    for name, g in grads.items():
        if g.numel() < MIN_NUMEL:
            continue
        host = g.to(torch.float32).numpy() if dtype != torch.float32 else g.numpy()
        qt = hh.QSGD(levels=LEVELS, bucket_size=BUCKET).quantize(
            host, seed=derive_seed(SEED + rank, name, 0))
        qt = hh.unpack(hh.pack(qt, hh.get_encoder(encoder, seed=0) if encoder in ("sh", "shs", "auto")
                               else encoder))
        mine[name] = hh.dequantize(qt)
    everyone = hvd.allgather_object(mine)
    checks = 0
    for name, p in model.named_parameters():
        got = p.grad.to_dense() if p.grad.is_sparse else p.grad
        if name in mine:
            total = everyone[0][name].copy()
            for other in everyone[1:]:
                np.add(total, other[name], out=total)
            expected = torch.from_numpy(total)
            if variant != "sum":
                expected.mul_(1.0 / n)
            expected = expected.reshape(got.shape).to(dtype)
            assert torch.equal(got, expected), (encoder, variant, name,
                                                (got.float() - expected.float()).abs().max())
        else:
            ref = hvd.allreduce(grads[name].float(), op=hvd.Sum if variant == "sum" else hvd.Average,
                                name=f"check.{encoder}.{variant}.{name}")
            # Plain allreduce path: same values up to the rounding of the gradient's dtype.
            tol = torch.finfo(got.dtype).eps * 4
            assert torch.allclose(got.float(), ref.to(got.dtype).float(), rtol=tol, atol=1e-6), \
                (name, variant)
        checks += 1
    opt.step()
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    assert all(torch.equal(flat, o) for o in hvd.allgather_object(flat)), (encoder, variant)
    return checks + 1


def main():
    hvd.init()
    torch.set_num_threads(1)
    dtype = getattr(torch, sys.argv[1])
    checks = 0
    for variant in sys.argv[2:]:
        for encoder in hh.ENCODERS:
            checks += run_case(encoder, dtype, variant)
    if hvd.rank() == 0:
        print(f"OK {checks} checks", flush=True)


if __name__ == "__main__":
    main()
