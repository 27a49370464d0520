"""One rank of the end-to-end benchmark (benchmarks/e2e.py): train a model for a fixed number of
steps with one compression and report, from rank 0, a ``RESULT {json}`` line with the mean step
time after warm-up (seconds), the bytes this job's ranks sent on their network interface during
those steps (from /proc/net/dev, which is per network namespace, i.e. per host), and the final
loss (training loss over the last steps, averaged over ranks). With ``--step-timeline K`` rank 0
also prints the last K steps' timelines: each rank's end of backward and the codec's phases
(encode, network, decode) of every bucket, in ms from the step's earliest start on any rank. The
ranks must share one clock (namespaces or containers on one machine), and the codec keeps its
last TRACE_SPANS spans (statistics.py), which a large K with many buckets can outrun.

    horovodrun -np 2 -H hh1:1,hh2:1 python benchmarks/train_job.py --model lstm --compression rlh
"""
import argparse
import json
import time

import numpy as np
import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.tools.bench.traces import CharLSTM, cnn
from horovod_huffman.exchange.buckets import DEFAULT_BUCKET_BYTES
from horovod_huffman.torch import Compression, switch_to_low_rank
from job_data import digits_batches, interface_bytes, text_batches      # beside this script

COMPRESSIONS = ["none", "fp16"] + list(hh.ENCODERS)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["cnn", "lstm"], default="cnn")
    p.add_argument("--compression", choices=COMPRESSIONS, default="rlh")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="untimed first steps")
    p.add_argument("--last", type=int, default=10, help="steps averaged into the final loss")
    p.add_argument("--iface", default="eth0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--levels", type=int, default=8, help="QSGD levels s")
    p.add_argument("--bucket-size", type=int, default=512)
    p.add_argument("--bucket-bytes", type=int, default=DEFAULT_BUCKET_BYTES,
                   help="float32 bytes per fused bucket")
    p.add_argument("--step-timeline", type=int, default=0, metavar="K",
                   help="print the last K steps' timelines")
    p.add_argument("--exchange", choices=["auto", "allgather", "two_phase"], default="auto")
    p.add_argument("--route", choices=["encoded", "adaptive"], default="encoded")
    p.add_argument("--error-feedback", action="store_true",
                   help="error feedback on (default: only for biased quantizers; QSGD is unbiased)")
    p.add_argument("--pufferfish", action="store_true",
                   help="train full-rank for --pufferfish-warmup steps, then the factorized model")
    p.add_argument("--pufferfish-warmup", type=int, default=None,
                   help="full-rank steps before the switch (default: --warmup - 5; must end "
                        "before the timed steps)")
    args = p.parse_args()
    switch_at = max(args.warmup - 5, 0) if args.pufferfish_warmup is None else \
        args.pufferfish_warmup
    if args.pufferfish and switch_at >= args.warmup:
        p.error("--pufferfish-warmup must end before the timed steps (--warmup)")

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    if args.model == "cnn":
        model = cnn(torch)

        def make_optimizer(params):
            return torch.optim.SGD(params, lr=0.02 * hvd.size(), momentum=0.9)
        batches = digits_batches(32, args.seed, hvd.rank(), hvd.size())
    else:
        model = CharLSTM()(torch)

        def make_optimizer(params):
            return torch.optim.Adam(params, lr=2e-3)
        batches = text_batches(16, 64, args.seed, hvd.rank())
    opt = make_optimizer(model.parameters())
    if args.compression in ("none", "fp16"):
        compression = getattr(Compression, args.compression)
    else:
        compression = Compression.build(
            encoder=args.compression,
            quantizer=hh.QSGD(levels=args.levels, bucket_size=args.bucket_size),
            error_feedback=args.error_feedback or None, seed=args.seed * 65536 + hvd.rank(),
            exchange=args.exchange, route=args.route, bucket_bytes=args.bucket_bytes)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    losses, times, marks = [], [], []
    for step in range(args.steps):
        if args.pufferfish and step == switch_at:
            opt, _ = switch_to_low_rank(model, make_optimizer, compression=compression)
        if step == args.warmup:
            hvd.allreduce(torch.zeros(1), name="sync")       # timed window starts together
            sent0, recv0 = interface_bytes(args.iface)
        x, y = next(batches)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        backward_end = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
        marks.append((t0, backward_end, time.perf_counter()))
        losses.append(loss.item())
    sent1, recv1 = interface_bytes(args.iface)
    timed = args.steps - args.warmup
    totals = hvd.allreduce(torch.tensor([sent1 - sent0, recv1 - recv0,
                                         float(np.mean(losses[-args.last:])),
                                         float(np.mean(times[args.warmup:]))],
                                        dtype=torch.float64), op=hvd.Sum, name="report")
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    same = all(torch.equal(flat, other) for other in hvd.allgather_object(flat))
    if hvd.rank() == 0:
        n = hvd.size()
        result = {"model": args.model, "compression": args.compression,
                  "pufferfish": args.pufferfish,
                  "exchange": args.exchange, "route": args.route, "ranks": n,
                  "params": int(flat.numel()), "steps": args.steps, "timed_steps": timed,
                  "step_s": float(totals[3]) / n,
                  "wire_bytes_per_step": float(totals[0]) / timed,
                  "final_loss": float(totals[2]) / n, "identical_parameters": same}
        state = getattr(compression, "_states", {}).get(opt)       # route="adaptive"
        if state is not None and state.router is not None:
            result["routes_chosen"] = state.router.chosen
            result["route_periods_s"] = {          # rank-summed; None: never timed
                key: {r: t if np.isfinite(t) else None for r, t in periods.items()}
                for key, periods in state.router.periods.items()}
        print("RESULT " + json.dumps(result), flush=True)
    if args.step_timeline:
        spans = list(compression.codec.statistics.trace) if hasattr(compression, "codec") else []
        print_timeline(hvd.allgather_object((marks[-args.step_timeline:], spans)))


def print_timeline(ranks):
    """On rank 0: per step, every rank's step and backward and each codec span that began in
    it, in ms from the step's earliest start; ``ranks``: (marks, spans) per rank, marks (start,
    end of backward, end) per step, spans (key, phase, start, end) in perf_counter seconds."""
    if hvd.rank() != 0:
        return
    for k in range(len(ranks[0][0])):
        zero = min(marks[k][0] for marks, _ in ranks)
        rows = []
        for rank, (marks, spans) in enumerate(ranks):
            start, backward_end, end = (1e3 * (t - zero) for t in marks[k])
            rows.append((start, f"rank {rank} step {start:.1f}-{end:.1f}, backward ends "
                                f"{backward_end:.1f}"))
            rows += [(1e3 * (a - zero), f"rank {rank}   {key} {phase} {1e3 * (a - zero):.1f}-"
                      f"{1e3 * (b - zero):.1f}") for key, phase, a, b in spans
                     if marks[k][0] <= a < marks[k][2]]
        print(f"TIMELINE step -{len(ranks[0][0]) - k}", flush=True)
        for _, row in sorted(rows):
            print("TIMELINE " + row, flush=True)


if __name__ == "__main__":
    main()
