"""Horovod's own TensorFlow 2 synthetic benchmarks (``examples/tensorflow2/`` of Horovod's
repository: ``tensorflow2_synthetic_benchmark.py``, a tape in a ``tf.function``, and
``tensorflow2_keras_synthetic_benchmark.py``, ``model.fit``) with a horovod-huffman compressor,
changed only as the README says, from outside the script:

    horovodrun --gloo -np 2 python benchmarks/horovod_tf2.py --script PATH \\
        --compression rlh --route fused [-- BENCHMARK ARGS]

- ``--compression ENCODER``: the script's ``hvd.Compression.none`` is this package's
  ``Compression.<ENCODER>``; ``none`` and ``fp16`` leave Horovod's own (``fp16`` passes
  ``--fp16-allreduce``).
- ``--route fused``: the tape script's ``hvd.DistributedGradientTape`` is
  ``horovod_huffman.tensorflow.DistributedGradientTape``, and the Keras script's
  ``import horovod.tensorflow.keras as hvd`` is ``horovod_huffman.tensorflow.keras`` (Keras 3);
  ``--route horovod``: Horovod's own tape, or Horovod's own Keras module (legacy Keras: run
  with ``TF_USE_LEGACY_KERAS=1``).

The tape script calls Keras 2's ``opt.variables()`` and broadcasts Keras variables, so it runs
under legacy Keras only (``TF_USE_LEGACY_KERAS=1``), on either route. Keras 3's ``compile``
rejects the Keras script's ``experimental_run_tf_function`` argument, which legacy Keras
ignores; on the fused route it is dropped. TensorFlow runs on one thread per rank. Rank 0
prints the script's own output and then ``RESULT {json}``: the compression, route, ranks and
images per second per rank, from the times of the script's iteration lines (the first one,
which holds the warm-up in the Keras script, left out).
"""
import argparse
import json
import os
import re
import sys
import types

from run_script import run_capturing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", required=True, help="one of Horovod's tensorflow2 benchmarks")
    p.add_argument("--compression", default="none", help="none, fp16 or an encoder name")
    p.add_argument("--route", choices=["fused", "horovod"], default="fused")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the benchmark's arguments")
    args = p.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    keras_script = "keras" in os.path.basename(args.script)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import horovod.tensorflow as hvd
    import horovod_huffman.tensorflow as hh_tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    compressor = None if args.compression in ("none", "fp16") else \
        getattr(hh_tf.Compression, args.compression)
    if args.compression == "fp16":
        rest = ["--fp16-allreduce", *rest]
    names = {} if compressor is None else \
        {"Compression": types.SimpleNamespace(none=compressor, fp16=compressor)}
    if keras_script:
        if args.route == "fused":
            import horovod_huffman.tensorflow.keras as module
            _drop_compile_argument(tf, "experimental_run_tf_function")
        else:
            import horovod_huffman.tensorflow.legacy_keras  # noqa: F401 (tf-keras for Horovod)
            import horovod.tensorflow.keras as module
        _as_seen_by_script("horovod.tensorflow.keras", module, names)
    else:
        if args.route == "fused":
            names["DistributedGradientTape"] = hh_tf.DistributedGradientTape
        _as_seen_by_script("horovod.tensorflow", hvd, names)

    lines = run_capturing(args.script, rest)
    if hvd.rank() == 0:
        # The scripts print img/sec to 0.1; the times of their "Iter #k" lines give more
        # digits: images per iteration over the time between two iterations' ends.
        ends = [t for t, line in lines if re.match(r"Iter #\d+:", line)]
        batch = int(next(re.search(r"(\d+)", l).group(1) for _, l in lines
                         if l.startswith("Batch size")))
        per_iter = batch * _option(rest, "--num-batches-per-iter", 10)
        rates = [per_iter / (b - a) for a, b in zip(ends, ends[1:])]
        print("RESULT " + json.dumps({
            "script": os.path.basename(args.script), "compression": args.compression,
            "route": args.route, "ranks": hvd.size(),
            "img_per_s_per_rank": sum(rates) / len(rates) if rates else None,
            "iterations": len(rates)}), flush=True)


def _option(argv, name, default):
    """The integer value of ``name`` in ``argv``, else ``default``."""
    return int(argv[argv.index(name) + 1]) if name in argv else default


def _as_seen_by_script(name, module, names):
    """Make ``import <name>`` give the script a copy of ``module`` with ``names`` replaced; the
    packages imported before (horovod_huffman's included) keep the module itself."""
    seen = types.ModuleType(name)
    seen.__dict__.update(module.__dict__)
    seen.__dict__.update(names)
    sys.modules[name] = seen
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, seen)


def _drop_compile_argument(tf, name):
    """Keras 3's ``Model.compile`` without the legacy-only keyword ``name``."""
    compile_ = tf.keras.Model.compile

    def compile(self, *args, **kwargs):
        kwargs.pop(name, None)
        return compile_(self, *args, **kwargs)
    tf.keras.Model.compile = compile


if __name__ == "__main__":
    sys.exit(main())
