"""Worker (1 process, Horovod of size 1, a torch.distributed group of 1 over Gloo): every
```python block of README.md and docs/*.md runs as written, in a namespace holding what its prose
assumes (a model, an optimizer, a gradient...), and then a check that what it built works: one
training step, or the codec's round trip.

Which namespace a block gets is decided by what it uses (CONTEXTS, first match); a block that
matches none fails the run, so a new example gets a context, not a pass. A block that needs a
CUDA GPU runs where torch sees one and is counted as not run elsewhere.
Prints "RAN n OF m EXAMPLES" and one line per block not run."""
import glob
import os
import re
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                   # noqa: E402
import tensorflow as tf              # noqa: E402
import keras                         # noqa: E402
import torch                         # noqa: E402
import torch.distributed as dist     # noqa: E402
from torch import nn                 # noqa: E402
import horovod.tensorflow as hvd_tf  # noqa: E402
import horovod.torch as hvd_torch    # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def examples():
    """(file, line, code) of every python block, README.md first."""
    paths = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for path in paths:
        with open(path) as f:
            text = f.read()
        for m in BLOCK.finditer(text):
            yield os.path.relpath(path, ROOT), text.count("\n", 0, m.start()) + 1, m.group(1)


def torch_step(model, opt):
    """One SGD step on random data; the parameters must move and stay finite."""
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(8, next(model.parameters()).shape[-1])
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    after = list(model.parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after)), "no parameter moved"
    assert all(torch.isfinite(a).all() for a in after)


def mlp():
    """Four layers: Pufferfish keeps the first and the last full-rank and factorizes the rest."""
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def keras_mlp():
    return keras.Sequential([keras.Input((64,)), *(keras.layers.Dense(64, activation="relu")
                                                   for _ in range(3)), keras.layers.Dense(10)])


def data(n=32):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 64)).astype(np.float32), rng.integers(0, 10, n)


# ---- one namespace and one check per kind of example -----------------------------------------

def torch_horovod():
    model = mlp()
    return {"hvd": hvd_torch, "torch": torch, "model": model,
            "opt": torch.optim.SGD(model.parameters(), lr=0.1)}


def check_torch_horovod(ns):
    compression = ns["opt"]._compression                 # Horovod's optimizer holds it so
    assert type(compression).__module__.startswith("horovod_huffman"), compression
    torch_step(ns["model"], ns["opt"])


def torch_pufferfish():
    model = mlp()

    def train_one_epoch(model, opt):
        torch_step(model, opt)
    return {"hvd": hvd_torch, "torch": torch, "model": model, "lr": 0.1, "epochs": 2,
            "warmup_epochs": 1, "train_one_epoch": train_one_epoch}


def check_torch_pufferfish(ns):
    assert any(type(m).__name__ == "LowRankLinear" for m in ns["model"].modules()), ns["model"]
    torch_step(ns["model"], ns["opt"])


def tf_tape():
    x, y = data()
    return {"tf": tf, "hvd": hvd_tf, "model": keras_mlp(), "x": x, "y": y,
            "loss_fn": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}


def check_tf_tape(ns):
    grads, variables = ns["grads"], ns["model"].trainable_variables
    assert len(grads) == len(variables) and all(g is not None for g in grads)
    assert all(np.isfinite(np.asarray(g)).all() for g in grads)
    keras.optimizers.SGD(0.1).apply_gradients(zip(grads, variables))


def tf_pufferfish():
    def make_train_step(model):
        opt = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))
            return loss
        return step
    return {"tf": tf, "model": keras_mlp(), "make_train_step": make_train_step}


def check_tf_pufferfish(ns):
    assert any(type(layer).__name__ == "LowRankDense" for layer in ns["model"].layers)
    assert np.isfinite(float(ns["step"](*data())))


def keras_fit():
    x, y = data()
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
    return {"keras": keras, "model": model, "x": x, "y": y}


def check_keras_fit(ns):
    assert ns["model"].optimizer.iterations.numpy() > 0


def ddp():
    return {"torch": torch, "model": mlp()}


def check_plain_step(ns):
    """A training step of the wrapped model with a plain optimizer (DDP, FSDP2)."""
    model = ns["model"]
    torch_step(model, torch.optim.SGD(model.parameters(), lr=0.1))


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 64), nn.Linear(64, 10)])

    def forward(self, x):
        return self.layers[1](torch.relu(self.layers[0](x)))


def fsdp():
    return {"torch": torch, "model": Layers()}


def codec():
    return {"np": np, "grad": np.random.default_rng(0).standard_normal(5000).astype(np.float32)}


def check_codec(ns):
    assert np.array_equal(ns["levels"], ns["qt"].levels)
    assert np.asarray(ns["approx"]).shape == ns["grad"].shape


def gpu():
    return {"levels_on_gpu": torch.randint(-8, 9, (5000,), dtype=torch.int8, device="cuda"),
            "flat_levels": torch.randint(-8, 9, (7000,), dtype=torch.int8, device="cuda"),
            "sizes": [5000, 0, 2000], "grad_on_gpu": torch.randn(5000, device="cuda")}


def check_gpu(ns):
    assert np.array_equal(ns["levels"].copy_to_host(), ns["levels_on_gpu"].cpu().numpy())
    parts = np.split(ns["flat_levels"].cpu().numpy(), np.cumsum(ns["sizes"])[:-1])
    assert all(np.array_equal(ns["hh"].decode(b), p) for b, p in zip(ns["bufs"], parts))


# (what the block uses, namespace, check, why it cannot run here or None): first match wins.
CONTEXTS = [
    ("levels_on_gpu", gpu, check_gpu,
     None if torch.cuda.is_available() else "needs torch with a real CUDA GPU"),
    ("DistributedDataParallel", ddp, check_plain_step, None),
    ("fully_shard", fsdp, check_plain_step, None),
    ("horovod_huffman.tensorflow import switch_to_low_rank", tf_pufferfish, check_tf_pufferfish,
     None),
    ("switch_to_low_rank", torch_pufferfish, check_torch_pufferfish, None),
    ("horovod_huffman.tensorflow.keras", keras_fit, check_keras_fit, None),
    ("DistributedGradientTape", tf_tape, check_tf_tape, None),
    ("hvd.DistributedOptimizer", torch_horovod, check_torch_horovod, None),
    ("hh.pack", codec, check_codec, None),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    hvd_tf.init()
    hvd_torch.init()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    ran = total = 0
    for path, line, code in examples():
        total += 1
        where = f"{path}:{line}"
        context = next((c for c in CONTEXTS if c[0] in code), None)
        assert context is not None, f"{where}: no context in CONTEXTS runs this example"
        _, namespace, check, not_here = context
        if not_here:
            print(f"NOT RUN {where}: {not_here}")
            continue
        ns = namespace()
        try:
            exec(compile(code, where, "exec"), ns)
            check(ns)
        except Exception as e:
            raise AssertionError(f"{where} ({namespace.__name__}) failed: {e!r}") from e
        print(f"ran {where} ({namespace.__name__})")
        ran += 1
    dist.destroy_process_group()
    # Each framework's Horovod has its own background thread and controller over one MPI: both
    # stop before the interpreter exits, or one finalizes MPI under the other's thread.
    hvd_torch.shutdown()
    hvd_tf.shutdown()
    print(f"RAN {ran} OF {total} EXAMPLES", flush=True)


if __name__ == "__main__":
    main()
