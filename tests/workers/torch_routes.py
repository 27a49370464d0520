"""Worker: adaptive routing through the stock hvd.DistributedOptimizer, with the encoder named
by argv[1] (default rlh; "mixed": rlh, ans and auto by rank, whose streams name their
encoder). Over the probing steps the buckets go encoded, encoded with rlh, as
float16 and as float32; the float32 steps are Horovod's own allreduce of the gradient (compared
exactly on 2 ranks), the compressor's encoder writes the streams of the encoded steps and, for
an encoder other than rlh, an rlh encoder those of the rlh steps; every rank decides the same
route, and parameters stay identical on all ranks at every step. Prints "OK routes <chosen>" on
rank 0.
"""
import sys

import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.exchange.routing import BUCKETS_KEY, FAST_ROUTE, PROBE_ROUNDS, ROUTES
from horovod_huffman.torch import Compression
from route_checks import check_agreed, counted, expected_writers  # beside this file


def main():
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    name = sys.argv[1] if len(sys.argv) > 1 else "rlh"
    if name == "mixed":
        name = ("rlh", "ans", "auto")[hvd.rank() % 3]
    encoder = hh.get_encoder(name)
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=8, bucket_size=128),
                             route="adaptive", bucket_bytes=4 * 10000, seed=hvd.rank())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), compression=comp)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # Streams written this step by the compressor's encoder ("own") and by the rlh route's.
    written = {"own": 0, "rlh": 0}
    # auto writes a stream itself where it chooses, and through the encoder it chose for a
    # bucket on the steps that reuse that choice (Codec.encode).
    for own in [encoder] + (encoder.members() if encoder.name == "auto" else []):
        counted(own, written, "own")
    if encoder.name != FAST_ROUTE:
        counted(comp.codec.for_route(FAST_ROUTE).encoder, written, "rlh")
    gen = torch.Generator().manual_seed(hvd.rank())
    # This rank's own gradients, taken as autograd hands them over: on the float32 route
    # Horovod reduces p.grad in place while backward goes on, so p.grad read after backward
    # may already hold part of the sum.
    local = {}
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: local.__setitem__(name, g.detach().clone()))
    seen = set()
    for step in range(len(ROUTES) * PROBE_ROUNDS + 2):
        written.update(own=0, rlh=0)
        x, y = torch.randn(32, 64, generator=gen), torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.synchronize()
        state = comp._states[opt]
        route = state.router.plan(BUCKETS_KEY, step) or state.router.chosen[BUCKETS_KEY]
        seen.add(route)
        if route == "fp32":
            for name, p in model.named_parameters():
                ref = hvd.allreduce(local[name], op=hvd.Average, name=f"ref.{step}.{name}")
                # Exact on 2 ranks (a + b either way); from 3 on, Horovod's fused allreduce of the
                # optimizer and this per-tensor one may add in different orders.
                same = torch.equal(p.grad, ref) if hvd.size() == 2 else \
                    torch.allclose(p.grad, ref, rtol=1e-6, atol=1e-7)
                assert same, (step, name, (p.grad - ref).abs().max())
        expect = expected_writers(encoder.name, route)
        assert {k: n > 0 for k, n in written.items()} == expect, (step, route, written)
        with opt.skip_synchronize():
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        assert all(torch.equal(flat, o) for o in hvd.allgather_object(flat)), step
    check_agreed(seen, state.router, hvd.rank(), hvd.allgather_object)



if __name__ == "__main__":
    main()
