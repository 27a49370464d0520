"""``python -m horovod_huffman.tools.bench``: sizes and speeds of every encoder on real gradients.

For each trace (bench/traces.py) and quantizer (QSGD s in {1, 2, 4, 8, 16, 127}, TernGrad) it
reports, per encoder: bits per coordinate, ratio to the levels' zeroth-order entropy, ratio to
``elias_rle`` and ``elias_gamma`` (the paper's comparison), and encode/decode speed in M levels/s
on one core (best of ``--repeats`` in each of ``--passes`` passes), with zstd -1, zstd -19 and
lz4 on the same int8 levels measured in the same run. ``ans`` and ``auto`` are measured again
with the trace's layout (``+layout``: the row model, encoders/rows.py). Then it checks the
targets and prints the machine.
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

import horovod_huffman as hh
from horovod_huffman.tools.bench import device as device_bench, traces as tr
from horovod_huffman.codec.encoders import check
from horovod_huffman.codec.params import value_bits

QUANTIZERS = {f"qsgd-s{s}": (lambda s: lambda: hh.QSGD(levels=s, seed=0))(s)
              for s in (1, 2, 4, 8, 16, 127)}
QUANTIZERS["terngrad"] = lambda: hh.TernGrad(seed=0)
ENCODERS = list(hh.ENCODERS)
REFERENCES = ["zstd-1", "zstd-19", "lz4"]
# Encoders measured a second time with the trace's layout.
WITH_LAYOUT = ["ans", "auto"]
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numba
    return (f"{cpu}, {os.cpu_count()} cores visible, one used; Python {platform.python_version()}, "
            f"NumPy {np.__version__}, Numba {numba.__version__}, {platform.system()} {platform.release()}")


def entropy_bits(levels):
    """Zeroth-order entropy of the levels in bits per coordinate."""
    _, counts = np.unique(levels, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def make_encoder(name):
    return hh.get_encoder(name, seed=0) if name in ("sh", "shs", "auto") else hh.get_encoder(name)


def measure_encoder(name, levels, repeats, layout=None):
    enc = make_encoder(name)
    buf = enc.encode(levels, layout=layout)
    assert np.array_equal(hh.decode(buf), levels), name
    t_enc = best_time(lambda: make_encoder(name).encode(levels, layout=layout), repeats)
    t_dec = best_time(lambda: hh.decode(buf), repeats)
    return {"bytes": buf.size, "enc_s": t_enc, "dec_s": t_dec,
            "choice": getattr(enc, "last_choice", None)}


def measure_reference(name, levels, repeats):
    import lz4.frame
    import zstandard
    raw = levels.astype(np.int8).tobytes() if levels.dtype == np.int8 else levels.tobytes()
    if name.startswith("zstd"):
        level = int(name.split("-")[1])
        comp = zstandard.ZstdCompressor(level=level)
        dec = zstandard.ZstdDecompressor()
        packed = comp.compress(raw)
        reps = 1 if level > 10 else repeats
        t_enc = best_time(lambda: comp.compress(raw), reps)
        t_dec = best_time(lambda: dec.decompress(packed), repeats)
    else:
        packed = lz4.frame.compress(raw)
        t_enc = best_time(lambda: lz4.frame.compress(raw), repeats)
        t_dec = best_time(lambda: lz4.frame.decompress(packed), repeats)
    return {"bytes": len(packed), "enc_s": t_enc, "dec_s": t_dec, "choice": None}


def compile_times():
    """Seconds for import + first encode/decode of every encoder: with an empty Numba cache
    (compiles every kernel) and again with the cache it just filled."""
    code = ("import time; t=time.perf_counter(); import numpy as np, horovod_huffman as hh; "
            "x=np.arange(-3, 4, dtype=np.int8).repeat(9); "
            "[hh.decode(hh.get_encoder(n).encode(x)) for n in hh.ENCODERS]; "
            "hh.unpack(hh.pack(hh.QSGD().quantize(np.ones(9, np.float32)))); "
            "print(time.perf_counter()-t)")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold", "warm"):
            res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, check=True)
            out[label] = float(res.stdout.strip().splitlines()[-1])
    return out


def measure_row(levels, repeats, layout):
    """Every encoder and reference, WITH_LAYOUT's encoders with ``layout``, and ``auto``'s
    statistics pass, on one tensor."""
    row = {"H0": entropy_bits(levels), "n": levels.size}
    for name in ENCODERS:
        row[name] = measure_encoder(name, levels, repeats)
    for name in WITH_LAYOUT:
        row[name + "+layout"] = measure_encoder(name, levels, repeats, layout)
    for name in REFERENCES:
        row[name] = measure_reference(name, levels, repeats)
    plan, _ = make_encoder("rla").sized_plan(levels)
    row["rla_information"] = plan.information_bits(value_bits(levels.dtype))
    row["rla_payload"] = check(make_encoder("rla").encode(levels)).payload_bits
    auto = make_encoder("auto")
    row["auto_choose_s"] = best_time(lambda: auto.estimate(levels), repeats)
    return row


def faster(row, other):
    """``row`` with each time replaced by ``other``'s where that is shorter (same tensor)."""
    for key, value in other.items():
        if key == "auto_choose_s":
            row[key] = min(row[key], value)
        elif isinstance(value, dict):
            for t in ("enc_s", "dec_s"):
                row[key][t] = min(row[key][t], value[t])
    return row


def run(args):
    from tqdm import tqdm
    import torch
    torch.set_num_threads(1)
    results = {}       # (trace, quantizer) -> {"H0": bits, name: measurement}
    jobs = [(t, q) for t in args.traces for q in args.quantizers]
    with tqdm(total=len(args.traces) + args.passes * len(jobs), desc="benchmark",
              unit="step") as bar:
        grads = {}
        for t in args.traces:
            bar.set_postfix_str(f"training {t}")
            grads[t] = tr.TRACES[t](args.coords)
            bar.update()
        levels = {(t, q): QUANTIZERS[q]().quantize(grads[t].grad).levels for t, q in jobs}
        # Passes over every tensor: this VM has slow phases of seconds, longer than one
        # tensor's repeats; the best of passes minutes apart is the machine's speed.
        for p in range(args.passes):
            for t, q in jobs:
                bar.set_postfix_str(f"pass {p + 1}: {t} {q}")
                row = measure_row(levels[(t, q)], args.repeats, grads[t].layout)
                results[(t, q)] = faster(results[(t, q)], row) if p else row
                bar.update()
    return results


def bits(row, name):
    return 8 * row[name]["bytes"] / row["n"]


def speed(row, name, key):
    return row["n"] / row[name][key] / 1e6


def tables(results, compile_s, args):
    lines = []
    add = lines.append
    add(f"Machine: {machine()}.")
    add(f"Run: `python -m horovod_huffman.tools.bench --coords {args.coords} --repeats {args.repeats} "
        f"--passes {args.passes}` on {datetime.date.today().isoformat()}; {args.coords} "
        "coordinates per tensor; speeds are the best of the repeats of every pass, one core, "
        "including framing and the checksum.")
    add("")
    add(f"Numba compile, import + first call of every encoder: {compile_s['cold']:.1f} s with an "
        f"empty cache, {compile_s['warm']:.2f} s once cached (`cache=True`).")
    for (t, q), row in results.items():
        add("")
        add(f"### {t}, {q} (H0 = {row['H0']:.3f} bits/coord)")
        add("")
        add("| encoder | bits/coord | x H0 | x elias_rle | x elias_gamma | encode M/s | decode M/s |")
        add("|---|---:|---:|---:|---:|---:|---:|")
        for name in ENCODERS + [n + "+layout" for n in WITH_LAYOUT] + REFERENCES:
            b = bits(row, name)
            label = name + (f" ({row[name]['choice']})" if row[name]["choice"] else "")
            add(f"| {label} | {b:.3f} | {b / row['H0'] if row['H0'] else float('inf'):.2f} | "
                f"{b / bits(row, 'elias_rle'):.2f} | {b / bits(row, 'elias_gamma'):.2f} | "
                f"{speed(row, name, 'enc_s'):.0f} | {speed(row, name, 'dec_s'):.0f} |")
    add("")
    add("### Targets")
    add("")
    add("| tensor | huffman enc/dec M/s | rlh enc/dec M/s | ans enc/dec M/s | rla enc/dec M/s | "
        "ans+layout enc/dec M/s | zstd -1 enc/dec M/s | ans / H0 | "
        "rla payload / its information | auto / best | auto / min(H0, zstd -19) | "
        "auto+layout / min(H0, zstd -19) | auto choose cost / encode-all | "
        "rlh < elias_rle, qsgd_elias |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (t, q), row in results.items():
        candidates = [n for n in ENCODERS if n != "auto"]
        best = min(row[n]["bytes"] for n in candidates)
        encode_all = sum(row[n]["enc_s"] for n in candidates)
        rlh_ok = row["rlh"]["bytes"] < min(row["elias_rle"]["bytes"], row["qsgd_elias"]["bytes"])
        floor = min(row["H0"], bits(row, "zstd-19"))
        add(f"| {t} {q} | {speed(row, 'huffman', 'enc_s'):.0f} / {speed(row, 'huffman', 'dec_s'):.0f} | "
            f"{speed(row, 'rlh', 'enc_s'):.0f} / {speed(row, 'rlh', 'dec_s'):.0f} | "
            f"{speed(row, 'ans', 'enc_s'):.0f} / {speed(row, 'ans', 'dec_s'):.0f} | "
            f"{speed(row, 'rla', 'enc_s'):.0f} / {speed(row, 'rla', 'dec_s'):.0f} | "
            f"{speed(row, 'ans+layout', 'enc_s'):.0f} / "
            f"{speed(row, 'ans+layout', 'dec_s'):.0f} | "
            f"{speed(row, 'zstd-1', 'enc_s'):.0f} / {speed(row, 'zstd-1', 'dec_s'):.0f} | "
            f"{bits(row, 'ans') / row['H0'] if row['H0'] else float('inf'):.4f} | "
            f"{row['rla_payload'] / row['rla_information']:.4f} | "
            f"{row['auto']['bytes'] / best:.4f} | "
            f"{bits(row, 'auto') / floor if floor else float('inf'):.4f} | "
            f"{bits(row, 'auto+layout') / floor if floor else float('inf'):.4f} | "
            f"{row['auto_choose_s'] / encode_all:.3f} | {'yes' if rlh_ok else 'NO'} |")
    return lines


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    traces = sorted({t for t, _ in results})
    quants = list(dict.fromkeys(q for _, q in results))
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.5), squeeze=False)
    for ax, t in zip(axes[0], traces):
        for name in ["huffman", "rlh", "sh", "shs", "elias_rle", "qsgd_elias", "elias_gamma",
                     "zstd-1", "zstd-19"]:
            ax.plot(quants, [bits(results[(t, q)], name) for q in quants], marker="o", label=name)
        ax.plot(quants, [results[(t, q)]["H0"] for q in quants], "k--", label="H0")
        ax.set_yscale("log")
        ax.set_title(t)
        ax.set_ylabel("bits per coordinate")
        ax.tick_params(axis="x", rotation=45)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_markdown(path, lines, begin=BEGIN, end=END):
    """Replace the text between the ``begin`` and ``end`` markers of ``path`` with ``lines``."""
    text = open(path).read() if os.path.exists(path) else f"# Benchmarks\n\n{begin}\n{end}\n"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1] if end in rest else ""
    with open(path, "w") as f:
        f.write(head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m horovod_huffman.tools.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coords", type=int, default=1 << 20, help="coordinates per tensor (1M)")
    p.add_argument("--repeats", type=int, default=5, help="timing repeats, best kept")
    p.add_argument("--passes", type=int, default=3,
                   help="passes over all tensors, best of all passes' repeats kept")
    p.add_argument("--traces", nargs="+", default=list(tr.TRACES), choices=list(tr.TRACES))
    p.add_argument("--quantizers", nargs="+", default=list(QUANTIZERS), choices=list(QUANTIZERS))
    p.add_argument("--plot", metavar="PNG", help="write bits/coordinate plots to this file")
    p.add_argument("--markdown", metavar="MD", help="write the tables into this file "
                   f"between {BEGIN} and {END}")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: GPU pipeline throughput (bench/device.py) instead")
    device_bench.add_arguments(p)
    args = p.parse_args(argv)
    if args.device == "cuda":
        return device_bench.main(args, write_markdown)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    compile_s = compile_times()
    results = run(args)
    lines = tables(results, compile_s, args)
    print("\n".join(lines))
    if args.plot:
        plot(results, args.plot)
        print(f"plot written to {args.plot}")
    if args.markdown:
        write_markdown(args.markdown, lines)
        print(f"tables written to {args.markdown}")
    return 0
