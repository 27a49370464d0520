"""Worker: one step through the stock hvd.DistributedOptimizer for every encoder; checks that each
rank's gradient is exactly what the compressed exchange defines, computed here from every rank's
local gradients and the compressor's bucket plan:

- allgather: the rank-ordered mean (or sum) of every rank's dequantize(decode(encode(quantize(
  bucket)))), sliced at the gradient's slot;
- two_phase: for shard j, rank j's requantization of the rank-ordered sum of every rank's
  dequantized shard j; with error feedback ("feedback"), rank j's server residual is exactly the
  error of that requantization; "tiny" puts every gradient in a bucket of its own, down to a
  5-coordinate bias, whose shards are empty on all ranks but one;
- "client_feedback": client and server error feedback on: every rank sends its pieces
  contracted, and each rank's client residuals are exactly the errors of what it sent;
- "terngrad": TernGrad (buckets of 64) in place of QSGD;
- "cuda": the model, its batches and its gradients on the GPU (ranks may share one): the
  adapter's device path, whose quantization and coding give the host's bits.

Usage: torch_exact.py CASE [CASE ...], CASE = DTYPE:EXCHANGE:VARIANT[,VARIANT...][@ENCODERS];
ENCODERS (comma-separated; default: every encoder) limits a case to those encoders. The cases
run one after another in one launch, and rank 0 prints "OK <case> <n> checks" after each.
"""
import copy
import sys

import numpy as np
import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.torch import Compression
from expected import expected_sum, staged       # beside this file

LEVELS, BUCKET, SEED = 4, 64, 1000
BUCKET_BYTES = 4 * 2000          # several buckets for Net's ~4.1K coordinates


class Net(torch.nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 24, sparse=sparse)     # 1200 coords
        self.fc1 = torch.nn.Linear(24, 64)                          # 1536 + bias 64
        self.fc2 = torch.nn.Linear(64, 5)                           # 320 + bias 5

    def forward(self, idx):
        return self.fc2(torch.relu(self.fc1(self.embed(idx).mean(1))))


def batch(rank, device):
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randint(0, 50, (16, 7), generator=g), torch.randint(0, 5, (16,), generator=g)
    return x.to(device), y.to(device)


def dense(grad):
    """A host copy of a (possibly sparse) gradient."""
    return (grad.to_dense() if grad.is_sparse else grad).cpu()


def local_grads(model, rank, passes, device):
    ref = copy.deepcopy(model)
    for k in range(passes):
        x, y = batch(rank + 10 * k, device)
        torch.nn.functional.cross_entropy(ref(x).float(), y).backward()
    return {n: dense(p.grad).clone() for n, p in ref.named_parameters()}


def run_case(encoder, dtype, exchange, variant):
    rank, n = hvd.rank(), hvd.size()
    device = "cuda" if variant == "cuda" else "cpu"
    torch.manual_seed(0)
    model = Net(sparse=variant == "sparse_as_dense").to(dtype).to(device)
    passes = 2 if variant == "bpps2" else 1
    grads = local_grads(model, rank, passes, device)
    kwargs = {"named_parameters": model.named_parameters(), "backward_passes_per_step": passes}
    if variant == "groups":
        kwargs["num_groups"] = 2
    if variant == "predivide":
        kwargs["gradient_predivide_factor"] = 2.0
    if variant == "sum":
        kwargs["op"] = hvd.Sum
    if variant == "sparse_as_dense":
        kwargs["sparse_as_dense"] = True
    client = variant == "client_feedback"
    feedback = variant == "feedback" or client
    quantizer = "terngrad" if variant == "terngrad" else "qsgd"
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET)
                             if quantizer == "qsgd" else hh.TernGrad(bucket_size=BUCKET),
                             error_feedback=client, seed=SEED + rank, exchange=exchange,
                             bucket_bytes=4 if variant == "tiny" else BUCKET_BYTES)
    comp.codec.feedback.server = feedback
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   compression=comp, **kwargs)
    for k in range(passes):
        x, y = batch(rank + 10 * k, device)
        torch.nn.functional.cross_entropy(model(x).float(), y).backward()
    opt.synchronize()

    (plan,) = comp.plans
    assert len(plan.buckets) >= (5 if variant == "tiny" else 2), plan
    everyone = hvd.allgather_object(grads)
    assert all(p.grad.device.type == device for p in model.parameters()), device
    got = {name: dense(p.grad) for name, p in model.named_parameters()}
    checks = 0
    for bucket in plan.buckets:
        buffers = [staged({k: g.float().numpy() for k, g in grads.items()}, bucket)
                   for grads in everyone]
        total, residuals, clients = expected_sum(
            buffers, [SEED + r for r in range(n)], bucket, exchange, encoder, LEVELS, BUCKET,
            feedback, client, quantizer)
        for slot in bucket.slots:
            expected = torch.from_numpy(total[slot.offset:slot.offset + slot.numel])
            if variant != "sum":
                expected = expected * (1.0 / n)
            expected = expected.reshape(got[slot.name].shape).to(dtype)
            assert torch.equal(got[slot.name], expected), (
                encoder, exchange, variant, slot.name,
                (got[slot.name].float() - expected.float()).abs().max())
            checks += 1
        if feedback and exchange == "two_phase":
            kept = comp.codec.feedback.residuals[(bucket.key, "server", rank)]
            np.testing.assert_array_equal(kept, residuals[rank])
            checks += 1
        for state, residual in clients[rank].items():
            np.testing.assert_array_equal(comp.codec.feedback.residuals[(bucket.key, *state)], residual)
            checks += 1
        assert not client or clients[rank], "client error feedback kept no residual"
    # After an explicit synchronize(), Horovod's step() would reduce every (already reduced)
    # gradient a second time unless told not to (docs/torch-adapter.md, "synchronize()").
    with opt.skip_synchronize():
        opt.step()
    flat = torch.cat([p.detach().float().cpu().reshape(-1) for p in model.parameters()])
    assert all(torch.equal(flat, o) for o in hvd.allgather_object(flat)), (encoder, variant)
    return checks + 1


def main():
    hvd.init()
    torch.set_num_threads(1)
    for case in sys.argv[1:]:
        spec, _, encoders = case.partition("@")
        dtype, exchange, variants = spec.split(":")
        checks = 0
        for variant in variants.split(","):
            for encoder in encoders.split(",") if encoders else hh.ENCODERS:
                checks += run_case(encoder, getattr(torch, dtype), exchange, variant)
        if hvd.rank() == 0:
            print(f"OK {case} {checks} checks", flush=True)


if __name__ == "__main__":
    main()
