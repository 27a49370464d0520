"""Worker: adaptive routing through the stock hvd.DistributedOptimizer, with the encoder named
by argv[1] (default rlh). Over the probing steps the buckets go encoded, encoded with rlh (where
the encoder is another), as float16 and as float32; the float32 steps are Horovod's own
allreduce of the gradient (compared exactly on 2 ranks), the rlh steps send rlh streams, every
rank decides the same route, and parameters stay identical on all ranks at every step. Prints
"OK routes <chosen>" on rank 0.
"""
import sys

import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.routing import FAST_ROUTE, PROBE_ROUNDS, routes_for
from horovod_huffman.torch import ROUTER_KEY, Compression


def main():
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    encoder = hh.get_encoder(sys.argv[1] if len(sys.argv) > 1 else "rlh")
    routes = routes_for(encoder.name)
    # Streams the compressor's own encoder wrote, counted.
    written, encoded = [0], encoder.encoded
    encoder.encoded = lambda *a, **k: (written.__setitem__(0, written[0] + 1), encoded(*a, **k))[1]
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=8, bucket_size=128),
                             route="adaptive", bucket_bytes=4 * 10000, seed=hvd.rank())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), compression=comp)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    gen = torch.Generator().manual_seed(hvd.rank())
    # This rank's own gradients, taken as autograd hands them over: on the float32 route
    # Horovod reduces p.grad in place while backward goes on, so p.grad read after backward
    # may already hold part of the sum.
    local = {}
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: local.__setitem__(name, g.detach().clone()))
    seen = set()
    for step in range(len(routes) * PROBE_ROUNDS + 2):
        written[0] = 0
        x, y = torch.randn(32, 64, generator=gen), torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.synchronize()
        state = comp._states[opt]
        route = state.router.plan(ROUTER_KEY, step) or state.router.chosen[ROUTER_KEY]
        seen.add(route)
        if route == "fp32":
            for name, p in model.named_parameters():
                ref = hvd.allreduce(local[name], op=hvd.Average, name=f"ref.{step}.{name}")
                # Exact on 2 ranks (a + b either way); from 3 on, Horovod's fused allreduce of the
                # optimizer and this per-tensor one may add in different orders.
                same = torch.equal(p.grad, ref) if hvd.size() == 2 else \
                    torch.allclose(p.grad, ref, rtol=1e-6, atol=1e-7)
                assert same, (step, name, (p.grad - ref).abs().max())
        if encoder.name != FAST_ROUTE:
            # The compressor's encoder writes every stream of its own route's steps and none
            # of the rlh route's.
            assert (written[0] > 0) == (route == "encoded"), (step, route, written)
        with opt.skip_synchronize():
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        assert all(torch.equal(flat, o) for o in hvd.allgather_object(flat)), step
    assert seen >= set(routes), seen
    chosen = state.router.chosen
    assert list(chosen) == [ROUTER_KEY], chosen
    assert all(c == chosen for c in hvd.allgather_object(chosen)), chosen
    if hvd.rank() == 0:
        print("OK routes", sorted(chosen.items()), flush=True)


if __name__ == "__main__":
    main()
