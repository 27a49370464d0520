"""Time Horovod allgathers of a fixed size between ranks whose links are shaped, with each
rank joining after its own random delay, as ranks do after backward. Prints, from rank 0, the
milliseconds from the last rank joining to each rank's completion, per step and summarized.

``--one-way``: only rank 0 sends its bytes (the others send one byte each), so each link
carries the data in one direction only.

    bash scripts/netns_cluster.sh up 2 100mbit
    bash scripts/netns_cluster.sh exec 1 env PATH=$PWD/.venv/bin:$PATH PYTHONPATH=$PWD \\
        docker/scripts/launch.sh --hosts hh1,hh2 --keys /tmp/hh-netns/ssh -- \\
        $PWD/.venv/bin/python $PWD/benchmarks/allgather_probe.py --bytes 381000

docs/benchmarks.md ("Where a 100 Mbit/s step goes") has what it measured.
"""
import argparse
import random
import statistics
import time

import torch
import horovod.torch as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=int, default=381000, help="bytes each rank sends")
    p.add_argument("--steps", type=int, default=70)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the summary")
    p.add_argument("--skew-ms", type=float, default=30.0, help="largest random join delay")
    p.add_argument("--one-way", action="store_true", help="only rank 0 sends --bytes")
    args = p.parse_args()
    hvd.init()
    rng = random.Random(0)          # the same delays on every rank: each takes its own
    size = args.bytes if hvd.rank() == 0 or not args.one_way else 1
    data = torch.zeros(size, dtype=torch.uint8)
    times = []
    for step in range(args.steps):
        delays = [rng.uniform(0, args.skew_ms / 1e3) for _ in range(hvd.size())]
        hvd.allreduce(torch.zeros(1), name="probe.barrier")     # delays count from here
        time.sleep(0.05 + delays[hvd.rank()])
        joined = time.perf_counter()
        handle = hvd.allgather_async(data, name=f"probe.{step % 4}")
        while not hvd.poll(handle):         # poll as the exchange's worker does
            time.sleep(1e-4)
        hvd.synchronize(handle)
        times.append((joined, time.perf_counter()))
    ranks = hvd.allgather_object(times)
    if hvd.rank() != 0:
        return
    done = []
    for step in range(args.warmup, args.steps):
        last = max(r[step][0] for r in ranks)
        after = [1e3 * (r[step][1] - last) for r in ranks]
        done += after
        print(f"step {step}: ms after the last rank joined: "
              + ", ".join(f"rank {k} {ms:.1f}" for k, ms in enumerate(after)))
    slow = sum(ms > 1.5 * statistics.median(done) for ms in done)
    print(f"SUMMARY {args.bytes} bytes{' one way' if args.one_way else ''}: median "
          f"{statistics.median(done):.1f} ms, max {max(done):.1f}, {slow} of {len(done)} "
          "rank-steps over 1.5x the median")


if __name__ == "__main__":
    main()
