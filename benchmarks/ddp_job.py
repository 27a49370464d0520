"""One rank of the DDP time-to-accuracy benchmark (benchmarks/ddp_e2e.py): train a model with
PyTorch's DistributedDataParallel and one communication hook for a fixed number of steps,
evaluating it every few steps, and report from rank 0 a ``RESULT {json}`` line.

Hooks: ``allreduce`` (DDP's own, no hook), DDP's ``fp16`` and ``bf16`` compression hooks,
``powersgd1`` / ``powersgd4`` (DDP's PowerSGD hook at matrix rank 1 or 4, error feedback and
warm start on, plain allreduce for the first ``--powersgd-start`` steps), and this package's
hook with an encoder (``rlh``, ``ans``, ...), with ``--exchange`` and ``--route``.

The clock: each step is timed from its start to the end of ``optimizer.step()``, which waits
for every bucket's hook, so the codec's time is in it; evaluation is not. The result holds:

- ``curve``: (steps, training seconds, metric) after every ``--eval-every`` steps and the last
  one, rank 0's clock; the
  metric is the test accuracy (cnn: the digits test set) or the validation loss (lstm: a fixed
  batch from the held-out end of the stdlib text, which the model does not train on);
- ``step_s``: mean step time after ``--warmup`` steps, the ranks' mean;
- ``wire_bytes_per_step``: bytes the ranks sent on ``--iface`` per step after warm-up, summed
  over ranks (every rank is one host);
- ``identical_parameters`` and, for this package's hook, ``bits_per_coord``.

Ranks meet through torch.distributed's environment variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; GLOO_SOCKET_IFNAME picks the interface):

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 python benchmarks/ddp_job.py \\
        --model lstm --hook rlh
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod_huffman as hh
from horovod_huffman.tools.bench.traces import CharLSTM, cnn
from horovod_huffman.torch import ddp
from job_data import (digits_batches, digits_test, interface_bytes,      # beside this script
                      text_batches, text_validation)

BUILT_IN = ["allreduce", "fp16", "bf16", "powersgd1", "powersgd4"]
HOOKS = BUILT_IN + list(hh.ENCODERS)
# DDP's PowerSGD hook issues collectives from Gloo's completion callbacks, in whatever order
# buckets complete; with more than one bucket the ranks' collectives then mismatch (Gloo aborts
# with "Received data size doesn't match expected size" on the char model at DDP's default
# buckets, 2 ranks). So it runs with one bucket, this many MiB (larger than either model).
POWERSGD_BUCKET_MB = 64


def register(model, args, rank):
    """Put ``args.hook`` on ``model``; returns this package's State, else None."""
    if args.hook == "allreduce":
        return None
    if args.hook in ("fp16", "bf16"):
        model.register_comm_hook(None, getattr(default_hooks, f"{args.hook}_compress_hook"))
        return None
    if args.hook.startswith("powersgd"):
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(args.hook[len("powersgd"):]),
            start_powerSGD_iter=args.powersgd_start, random_seed=args.seed)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    state = ddp.State(encoder=args.hook,
                      quantizer=hh.QSGD(levels=args.levels, bucket_size=args.bucket_size),
                      error_feedback=args.error_feedback or None, seed=args.seed * 65536 + rank,
                      exchange=args.exchange, route=args.route)
    model.register_comm_hook(state, ddp.hook)
    return state


def task(model_name, seed, rank, size):
    """(model, optimizer factory, batches, evaluate) for ``model_name``; ``evaluate(module)``
    gives the test accuracy (cnn) or the validation loss (lstm)."""
    torch.manual_seed(seed)
    if model_name == "cnn":
        x_test, y_test = digits_test()

        def accuracy(module):
            return (module(x_test).argmax(1) == y_test).float().mean().item()
        return (cnn(torch), lambda p: torch.optim.SGD(p, lr=0.02 * size, momentum=0.9),
                digits_batches(32, seed, rank, size), accuracy)
    x_val, y_val = text_validation(64, 128)

    def validation_loss(module):
        return torch.nn.functional.cross_entropy(module(x_val), y_val).item()
    return (CharLSTM()(torch), lambda p: torch.optim.Adam(p, lr=2e-3),
            text_batches(16, 64, seed, rank, held_out=True), validation_loss)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["cnn", "lstm"], default="cnn")
    p.add_argument("--hook", choices=HOOKS, default="rlh")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20, help="steps left out of step_s and wire")
    p.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
    p.add_argument("--iface", default="eth0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--levels", type=int, default=16, help="QSGD levels s")
    p.add_argument("--bucket-size", type=int, default=512, help="QSGD bucket (coordinates)")
    p.add_argument("--error-feedback", action="store_true",
                   help="this package's hook: error feedback on (default off: QSGD is unbiased)")
    p.add_argument("--exchange", choices=["auto", "allgather", "two_phase"], default="auto")
    p.add_argument("--route", choices=["encoded", "adaptive"], default="encoded")
    p.add_argument("--powersgd-start", type=int, default=10,
                   help="PowerSGD's start_powerSGD_iter: steps of plain allreduce first")
    args = p.parse_args()
    if args.warmup >= args.steps:
        p.error("--warmup must be below --steps")

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, size = dist.get_rank(), dist.get_world_size()
    module, make_optimizer, batches, evaluate = task(args.model, args.seed, rank, size)
    model = DDP(module, bucket_cap_mb=POWERSGD_BUCKET_MB if args.hook.startswith("powersgd")
                else None)                             # DDP broadcasts rank 0's parameters
    state = register(model, args, rank)
    opt = make_optimizer(model.parameters())

    clock, times, curve = 0.0, [], []
    for step in range(args.steps):
        if step == args.warmup:
            dist.barrier()                             # the counted window starts together
            sent0 = interface_bytes(args.iface)[0]
        x, y = next(batches)
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        clock += times[-1]
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            with torch.no_grad():
                model.eval()
                curve.append((step + 1, clock, evaluate(model.module)))
                model.train()
    sent1 = interface_bytes(args.iface)[0]
    counted = args.steps - args.warmup
    totals = torch.tensor([sent1 - sent0, float(np.mean(times[args.warmup:]))],
                          dtype=torch.float64)
    dist.all_reduce(totals)
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    if rank == 0:
        result = {"model": args.model, "hook": args.hook, "levels": args.levels,
                  "exchange": args.exchange,
                  "route": args.route, "ranks": size, "params": int(flat.numel()),
                  "steps": args.steps, "step_s": float(totals[1]) / size,
                  "wire_bytes_per_step": float(totals[0]) / counted, "curve": curve,
                  "identical_parameters": all(torch.equal(flat, o) for o in everyone)}
        if state is not None:
            result["bits_per_coord"] = state.stats()["total"]["bits_per_coord"]
            if state.router is not None:
                result["routes_chosen"] = state.router.chosen
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
