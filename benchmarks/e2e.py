"""End-to-end benchmark: data-parallel training across N hosts (2 by default; --hosts 2 4 8)
whose links are shaped to 100 Mbit/s, 1 Gbit/s and 10 Gbit/s (10 Mbit/s on request), for every
compression.

Hosts are network namespaces (scripts/netns_cluster.sh, root only) running the workers' sshd;
each job is launched from host 1 with the compose cluster's launcher (docker/scripts/launch.sh,
``horovodrun --gloo -H``) and runs benchmarks/train_job.py: the digits CNN and the stdlib-text
LSTM for a fixed number of steps. Reported per (link, model, compression): mean step time after
warm-up, bytes on the wire per host and step (the hosts' interfaces), final training loss. Writes a table
into docs/benchmarks.md (--markdown) and a plot of step time against bandwidth (--plot).

    sudo .venv/bin/python benchmarks/e2e.py --markdown docs/benchmarks.md --plot docs/e2e-step-time.png
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The ranks' PYTHONPATH: the checkout, then whatever this process was given.
PYTHONPATH = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))

from horovod_huffman.tools.bench.run import write_markdown  # noqa: E402
from horovod_huffman.exchange.buckets import DEFAULT_BUCKET_BYTES  # noqa: E402

CLUSTER = os.path.join(ROOT, "scripts", "netns_cluster.sh")
LAUNCH = os.path.join(ROOT, "docker", "scripts", "launch.sh")
STATE = "/tmp/hh-netns-e2e"
# A compression is Compression.<name>, or ENCODER/EXCHANGE (allgather, two_phase) or
# ENCODER/adaptive (Compression.build(route="adaptive")); pufferfish[+ENCODER]: the model
# factorized (train_job.py --pufferfish), its gradients sent by fp32 allreduce or ENCODER.
COMPRESSIONS = ["none", "fp16", "huffman", "rlh", "sh", "shs", "elias_rle", "qsgd_elias", "ans",
                "rla", "auto", "rlh/allgather", "rlh/two_phase", "rlh/adaptive", "auto/adaptive",
                "pufferfish", "pufferfish+rlh"]
HUFFMAN_BASED = ["huffman", "rlh", "sh", "shs", "auto", "auto/adaptive", "rlh/allgather",
                 "rlh/two_phase", "rlh/adaptive", "pufferfish+rlh"]
RATES = {"10mbit": 0.01, "100mbit": 0.1, "1gbit": 1.0, "10gbit": 10.0}       # link -> Gbit/s
DEFAULT_RATES = ["100mbit", "1gbit", "10gbit"]
BEGIN, END = "<!-- bench-e2e:begin -->", "<!-- bench-e2e:end -->"


def cluster(*args):
    proc = subprocess.run(["bash", CLUSTER, *args], env=dict(os.environ, HH_CLUSTER_DIR=STATE),
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"netns_cluster.sh {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def run_job(n_hosts, model, compression, args):
    bindir = os.path.dirname(sys.executable)
    encoder, _, how = compression.partition("/")
    options = []
    if how in ("allgather", "two_phase"):
        options = ["--exchange", how]
    elif how == "adaptive":
        options = ["--route", "adaptive"]
    if encoder.startswith("pufferfish"):
        encoder = encoder.partition("+")[2] or "none"
        options.append("--pufferfish")
    hosts = ",".join(f"hh{i}" for i in range(1, n_hosts + 1))
    cmd = ["bash", CLUSTER, "exec", "1", "env", f"PATH={bindir}:{os.environ['PATH']}",
           f"PYTHONPATH={PYTHONPATH}", "OMP_NUM_THREADS=1", LAUNCH, "--hosts", hosts,
           "--keys", os.path.join(STATE, "ssh"), "--", sys.executable,
           os.path.join(ROOT, "benchmarks", "train_job.py"), "--model", model,
           "--compression", encoder, *options, "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--last", str(args.last), "--levels", str(args.levels),
           "--bucket-bytes", str(args.bucket_bytes), "--step-timeline", str(args.step_timeline)]
    if args.error_feedback:
        cmd.append("--error-feedback")
    proc = subprocess.run(cmd, env=dict(os.environ, HH_CLUSTER_DIR=STATE), cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    line = next((line for line in out.splitlines() if "RESULT " in line), None)
    for timeline in (line for line in out.splitlines() if "TIMELINE " in line):
        print(f"{model}/{compression}: {timeline.split('TIMELINE ', 1)[1]}", flush=True)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{n_hosts} hosts {model}/{compression} failed:\n{out[-3000:]}")
    return json.loads(line.split("RESULT ", 1)[1])


def table(results, args):
    bucket_option = "" if args.bucket_bytes == DEFAULT_BUCKET_BYTES else \
        f" --bucket-bytes {args.bucket_bytes}"
    lines = [f"Machine: {machine()}; N hosts = N network namespaces on it, one rank each (one "
             "thread), linked through a bridge, every link shaped with tc tbf. With 4 or more "
             "hosts the ranks share the machine's cores, so step times there include CPU "
             "oversubscription (wire bytes do not).",
             f"Run: `python benchmarks/e2e.py --hosts {' '.join(map(str, args.hosts))} "
             f"--rates {' '.join(args.rates)} --models {' '.join(args.models)} --steps "
             f"{args.steps} --warmup {args.warmup} --last {args.last} --levels {args.levels}"
             f"{' --error-feedback' if args.error_feedback else ''}{bucket_option}` on "
             f"{time.strftime('%Y-%m-%d')}; QSGD s = {args.levels}, buckets of 512, error "
             f"feedback {'on' if args.error_feedback else 'off (QSGD is unbiased)'}; step time = "
             "mean over the steps after warm-up; wire = bytes one host sent per step (mean over "
             "hosts, at the first link speed); final loss = training loss over the last "
             f"{args.last} steps, mean of the ranks (at the first link speed).", ""]
    for model in args.models:
        for n in args.hosts:
            lines += [f"### {model}, {n} hosts", "",
                      "| compression | params | " +
                      " | ".join(f"step ms @ {r}" for r in args.rates) +
                      " | wire KB/host/step | final loss | loss vs none | speed-up vs none @ "
                      f"{args.rates[0]} |",
                      "|---|" + "---:|" * (len(args.rates) + 5)]
            for c in args.compressions:
                rows = [results.get((n, r, model, c)) for r in args.rates]
                if None in rows:
                    continue
                base = results.get((n, args.rates[0], model, "none"))
                loss = rows[0]["final_loss"]
                rel = f"{100 * (loss / base['final_loss'] - 1):+.1f}%" if base else "-"
                speed = f"{base['step_s'] / rows[0]['step_s']:.2f}x" if base else "-"
                lines.append(f"| {c} | {rows[0]['params']} | " +
                             " | ".join(f"{1e3 * r['step_s']:.0f}" for r in rows) +
                             f" | {rows[0]['wire_bytes_per_step'] / n / 1e3:.0f} | {loss:.4f} | "
                             f"{rel} | {speed} |")
            lines.append("")
    return lines


def machine():
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def plot(results, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(args.models), figsize=(6 * len(args.models), 4.5))
    axes = axes if len(args.models) > 1 else [axes]
    for ax, model in zip(axes, args.models):
        for c in args.compressions:
            n = args.hosts[0]
            points = [(RATES[r], results[(n, r, model, c)]["step_s"] * 1e3) for r in args.rates
                      if (n, r, model, c) in results]
            if points:
                style = "-" if c in HUFFMAN_BASED else "--"
                ax.plot(*zip(*points), style, marker="o", label=c)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("link bandwidth (Gbit/s)")
        ax.set_ylabel("step time (ms)")
        ax.set_title(f"{model}, {args.hosts[0]} hosts")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", nargs="+", type=int, default=[2], help="host counts to run")
    p.add_argument("--rates", nargs="+", default=DEFAULT_RATES, choices=list(RATES))
    p.add_argument("--models", nargs="+", default=["cnn", "lstm"], choices=["cnn", "lstm"])
    p.add_argument("--compressions", nargs="+", default=COMPRESSIONS, choices=COMPRESSIONS)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed first steps (the adaptive routes probe for 16)")
    p.add_argument("--last", type=int, default=20, help="steps averaged into the final loss")
    p.add_argument("--levels", type=int, default=16, help="QSGD levels s")
    p.add_argument("--bucket-bytes", type=int, default=DEFAULT_BUCKET_BYTES,
                   help="float32 bytes per fused bucket")
    p.add_argument("--step-timeline", type=int, default=0, metavar="K",
                   help="print each job's last K steps' timelines (train_job.py)")
    p.add_argument("--error-feedback", action="store_true",
                   help="error feedback on (default off: QSGD is unbiased)")
    p.add_argument("--markdown", metavar="MD")
    p.add_argument("--plot", metavar="PNG")
    p.add_argument("--json", metavar="PATH", help="also dump the raw results")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("the end-to-end benchmark needs root (network namespaces, tc)")
        return 2
    results = sweep(args, args.compressions, lambda n, model, c: run_job(n, model, c, args),
                    "e2e benchmark")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"hosts": n, "rate": r, **v} for (n, r, _, _), v in results.items()], f,
                      indent=1)
    publish(table(results, args), args, lambda path: plot(results, args, path),
            "step time against bandwidth", BEGIN, END)
    return 0


def sweep(args, variants, run_one, desc):
    """{(hosts, rate, model, variant): run_one(hosts, model, variant)} over ``args.hosts``,
    ``args.rates`` and ``args.models``: each host count's cluster up around its jobs, its links
    reshaped for each rate."""
    from tqdm import tqdm
    results = {}
    jobs = len(args.hosts) * len(args.rates) * len(args.models) * len(variants)
    with tqdm(total=jobs, desc=desc, unit="job") as bar:
        for n in args.hosts:
            print(cluster("up", str(n), args.rates[0]).strip())
            try:
                for rate in args.rates:
                    cluster("shape", rate)
                    for model in args.models:
                        for variant in variants:
                            bar.set_postfix_str(f"{n} hosts {rate} {model} {variant}")
                            results[(n, rate, model, variant)] = run_one(n, model, variant)
                            bar.update()
            finally:
                cluster("down")
    return results


def publish(lines, args, draw, caption, begin, end):
    """Print the table ``lines``; ``draw(path)`` the plot into ``args.plot`` and write both into
    ``args.markdown`` between ``begin`` and ``end``, where asked."""
    print("\n".join(lines))
    if args.plot:
        draw(args.plot)
        lines.append(f"![{caption}]({os.path.basename(args.plot)})")
    if args.markdown:
        write_markdown(args.markdown, lines, begin, end)

if __name__ == "__main__":
    sys.exit(main())
