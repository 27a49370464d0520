"""Horovod's own synthetic benchmark (``examples/pytorch/pytorch_synthetic_benchmark.py`` from
Horovod's sdist: ResNet-50 on random images, on the GPU) with a horovod-huffman compressor.

    horovodrun --gloo -np 2 python benchmarks/synthetic_gpu.py --script PATH \\
        --compression rlh [-- BENCHMARK ARGS]

The script runs unmodified (``runpy``), with two things set from outside it:

- ``--compression ENCODER``: ``hvd.Compression.none``, which the script passes to
  ``hvd.DistributedOptimizer`` without ``--fp16-allreduce``, is this package's
  ``Compression.<ENCODER>`` (QSGD s = 8, buckets of 512, then that encoder). ``none`` and
  ``fp16`` leave Horovod's own compressors (``fp16`` passes ``--fp16-allreduce``).
- ``torch.cuda.set_device(local_rank)`` takes local rank modulo the GPUs there, so that ranks
  can share one GPU (with one GPU, every rank runs on it).

Rank 0 prints the script's own output (img/sec) and then ``RESULT {json}``: the compression,
the ranks, the images per second and, for an encoder, the compressor's own times and bytes
(``HuffmanCompressor.stats``). With a Horovod built without GPU operations, tensors that
Horovod itself reduces (``none``, ``fp16``, the encoder's two-element placeholders) are staged
through host memory by Horovod; an encoder's gradients are quantized and coded on the GPU, and
only their encoded bytes reach the host.
"""
import argparse
import json
import re
import types

from run_script import run_capturing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", required=True, help="pytorch_synthetic_benchmark.py")
    p.add_argument("--compression", default="none", help="none, fp16 or an encoder name")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the benchmark's arguments")
    args = p.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest

    import torch
    import horovod.torch as hvd
    from horovod_huffman.torch import Compression

    set_device = torch.cuda.set_device
    torch.cuda.set_device = lambda device: set_device(int(device) % torch.cuda.device_count())
    compressor = None
    if args.compression == "fp16":
        rest = ["--fp16-allreduce", *rest]
    elif args.compression != "none":
        compressor = getattr(Compression, args.compression)
        hvd.Compression = types.SimpleNamespace(none=compressor, fp16=compressor)

    lines = run_capturing(args.script, rest)
    if hvd.rank() != 0:
        return
    result = {"compression": args.compression, "ranks": hvd.size(),
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    for _, line in lines:
        m = re.search(r"Img/sec per GPU: ([\d.]+) \+-([\d.]+)", line)
        if m:
            result["img_per_sec_per_rank"] = float(m.group(1))
            result["ci"] = float(m.group(2))
    if compressor is not None:
        result["stats"] = compressor.stats()["total"]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
