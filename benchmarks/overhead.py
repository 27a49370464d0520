"""What compression costs per training step on a real model where it cannot win on bandwidth:
ResNet-50 (25.6M parameters) trained on random images by 2 ranks on this machine over loopback.

Jobs (TensorFlow's is Keras's ResNet50 without weights):

- ``torch``: the stock ``hvd.DistributedOptimizer``;
- ``tf``: ``horovod_huffman.tensorflow.DistributedGradientTape`` (fused buckets) in a
  ``tf.function``;
- ``keras``: Keras 3 ``model.fit`` with ``horovod_huffman.tensorflow.keras.DistributedOptimizer``
  (fused buckets);
- ``tf-horovod``: Horovod's own ``hvd.DistributedGradientTape`` (one exchange per gradient);
- ``keras-legacy``: legacy Keras (tf-keras) ``model.fit`` with Horovod's own
  ``horovod.tensorflow.keras.DistributedOptimizer`` (one exchange per gradient).

    .venv/bin/python benchmarks/overhead.py            # torch and tf under horovodrun: step
                                                       # times and the compressor's cost
    .venv/bin/python benchmarks/overhead.py --jobs tf keras tf-horovod keras-legacy
    .venv/bin/python benchmarks/overhead.py --jobs torch --repeats 5   # the median of 5 pairs
    horovodrun --gloo -np 2 python benchmarks/overhead.py --job torch --compression rlh

The compressor's cost per step is (step with compression - step uncompressed) / step
uncompressed, mean over the timed steps of every rank; with ``--repeats`` the two jobs run
alternately, so that slow phases of the machine fall on both.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resnet50(torch):
    """ResNet-50 (He et al. 2016; torchvision's layout: bottlenecks [3, 4, 6, 3], 25.6M
    parameters), written out here because torchvision's wheels do not import over CPU torch."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = 4 * width
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(True), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def torch_job(args):
    import torch
    import horovod.torch as hvd
    from horovod_huffman.torch import Compression

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = resnet50(torch)
    compression = getattr(Compression, args.compression) if args.exchange == "auto" else \
        Compression.build(encoder=args.compression, exchange=args.exchange)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(args.batch, 3, args.image, args.image)
    y = torch.randint(0, 1000, (args.batch,))
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    report(hvd.rank(), hvd.size(), args, times, sum(p.numel() for p in model.parameters()),
           compression, lambda v: hvd.allgather_object(v))


def tf_job(args):
    """The project's tape (``tf``) or Horovod's (``tf-horovod``) in a ``tf.function``."""
    tf, hvd, compression = tf_setup(args)
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(args.image, args.image, 3))
    opt = tf.keras.optimizers.SGD(0.01)
    x = tf.random.normal((args.batch, args.image, args.image, 3))
    y = tf.random.uniform((args.batch,), 0, 1000, dtype=tf.int64)
    variables = model.trainable_variables
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=False)
    if args.job == "tf":
        from horovod_huffman.tensorflow import DistributedGradientTape
        sources = variables
    else:
        DistributedGradientTape = hvd.DistributedGradientTape
        # Keras 3 variables: Horovod 0.28's tape takes the underlying tf.Variables.
        sources = [v.value for v in variables]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, sources)
        opt.apply_gradients(zip(grads, variables))

    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    params = int(sum(v.shape.num_elements() for v in variables))
    report(hvd.rank(), hvd.size(), args, times, params, compression,
           lambda v: hvd.allgather_object(v))


def keras_job(args):
    """``model.fit``: Keras 3 through horovod_huffman.tensorflow.keras (``keras``), or legacy
    Keras through Horovod's own horovod.tensorflow.keras (``keras-legacy``). A step's time is
    the time between two batches' ends."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if args.job == "keras-legacy" else "0"
    tf, htf, compression = tf_setup(args)
    if args.job == "keras-legacy":
        import horovod_huffman.tensorflow.legacy_keras  # noqa: F401
        import horovod.tensorflow.keras as hvd
    else:
        import horovod_huffman.tensorflow.keras as hvd
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(args.image, args.image, 3))
    x = tf.random.normal((args.batch, args.image, args.image, 3))
    y = tf.random.uniform((args.batch,), 0, 1000, dtype=tf.int64)
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01),
                                                     compression=compression),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=False))
    ends = []

    class Clock(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())

    start = time.perf_counter()
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0, callbacks=[Clock()])
    times = [b - a for a, b in zip([start] + ends[:-1], ends)]
    params = int(sum(v.shape.num_elements() for v in model.trainable_variables))
    report(htf.rank(), htf.size(), args, times, params, compression,
           lambda v: htf.allgather_object(v))


def tf_setup(args):
    """TensorFlow on one thread, Horovod started, and the compression of ``args``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import horovod.tensorflow as hvd
    from horovod_huffman.tensorflow import Compression

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(0)
    compression = getattr(Compression, args.compression) if args.exchange == "auto" else \
        Compression.build(encoder=args.compression, exchange=args.exchange)
    return tf, hvd, compression


JOBS = {"torch": torch_job, "tf": tf_job, "tf-horovod": tf_job, "keras": keras_job,
        "keras-legacy": keras_job}


def report(rank, size, args, times, params, compression, gather):
    timed = times[args.warmup:]
    everyone = gather(sum(timed) / len(timed))
    if rank == 0:
        stats = compression.stats()["total"] if hasattr(compression, "stats") else None
        print("RESULT " + json.dumps({
            "job": args.job, "compression": args.compression, "exchange": args.exchange,
            "ranks": size, "params": params, "step_s": sum(everyone) / len(everyone),
            "stats": stats}), flush=True)


def run(job, compression, exchange, args):
    runner = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    cmd = [runner, "--gloo", "-np", "2", sys.executable, os.path.abspath(__file__), "--job", job,
           "--compression", compression, "--exchange", exchange, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch", str(args.batch), "--image", str(args.image)]
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    line = next((l for l in (out.stdout + out.stderr).splitlines() if "RESULT " in l), None)
    if line is None:
        raise RuntimeError(f"{job} {compression} failed:\n{(out.stdout + out.stderr)[-3000:]}")
    return json.loads(line.split("RESULT ", 1)[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", choices=list(JOBS), help="run one rank of one job")
    p.add_argument("--jobs", nargs="+", default=["torch", "tf"], choices=list(JOBS))
    p.add_argument("--compression", default="rlh")
    p.add_argument("--exchange", default="auto")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16, help="images per rank")
    p.add_argument("--image", type=int, default=128, help="image side in pixels")
    p.add_argument("--repeats", type=int, default=1,
                   help="pairs of jobs (uncompressed, compressed) run alternately per framework; "
                        "the cost reported is the median of the pairs'")
    args = p.parse_args()
    if args.job:
        return JOBS[args.job](args)
    print(f"ResNet-50, 2 ranks on this machine (loopback), batch {args.batch} of "
          f"{args.image}x{args.image} per rank, {args.steps - args.warmup} timed steps")
    print("| job | none step s | rlh step s | compressor cost per step |")
    print("|---|---:|---:|---:|")
    for job in args.jobs:
        costs = []
        for _ in range(args.repeats):
            base = run(job, "none", "auto", args)
            comp = run(job, "rlh", "auto", args)
            costs.append((comp["step_s"] - base["step_s"]) / base["step_s"])
            print(f"| {job} | {base['step_s']:.3f} | {comp['step_s']:.3f} | "
                  f"{100 * costs[-1]:+.1f}% |", flush=True)
        if args.repeats > 1:
            print(f"| {job}: median of {args.repeats} pairs | | | "
                  f"{100 * statistics.median(costs):+.1f}% |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
