"""Gradient traces from real models trained on data that ships offline.

- ``mlp-digits`` and ``cnn-digits``: scikit-learn's handwritten digits (8x8 images).
- ``lstm-stdlib``: a character-level LSTM on the Python standard library's own source files.

Each trace is the flattened gradient of every parameter, gathered at steps spread over a short
training run and concatenated until it holds ``n_coords`` coordinates (float32), with its
layout: the (rows, row length) of every parameter in it, as the exchange knows them
(encoders/rows.py).
"""
import os
import sysconfig
from collections import namedtuple

import numpy as np


def _torch():
    try:
        import torch
    except ImportError as e:   # pragma: no cover - exercised only without the bench extra
        raise SystemExit("the benchmark needs torch: pip install 'horovod-huffman[bench]'") from e
    return torch


def digits_data():
    """(train x, train y, test x, test y) of sklearn's digits: x float32 (N, 64) in [0, 1]."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)          # (N, 64): 8x8 images, flattened
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    x, y = x[order], y[order]
    split = int(0.8 * len(y))
    return x[:split], y[:split], x[split:], y[split:]


def stdlib_text(max_bytes=4 << 20):
    """Up to ``max_bytes`` of ASCII from the standard library's .py files, in sorted order."""
    root = sysconfig.get_paths()["stdlib"]
    chunks, size = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "test", "tests"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), "rb") as f:
                    data = f.read()
                chunks.append(data)
                size += len(data)
                if size >= max_bytes:
                    return b"".join(chunks)[:max_bytes]
    return b"".join(chunks)


def mlp(torch):
    nn = torch.nn
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def cnn(torch):
    nn = torch.nn
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 16, 128), nn.ReLU(), nn.Linear(128, 10))


class CharLSTM:
    """Factory for the character model: embedding 64, 2-layer LSTM, linear head over 128 bytes."""

    VOCAB = 128

    def __init__(self, hidden=320):
        self.hidden = hidden

    def __call__(self, torch):
        nn = torch.nn
        hidden, vocab = self.hidden, self.VOCAB

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(vocab, 64)
                self.lstm = nn.LSTM(64, hidden, num_layers=2, batch_first=True)
                self.head = nn.Linear(hidden, vocab)

            def forward(self, x):
                out, _ = self.lstm(self.embed(x))
                return self.head(out).reshape(-1, vocab)

        return Model()


class Trace(namedtuple("Trace", "grad layout")):
    """A trace: ``grad`` (1-D float32) and ``layout`` ((rows, row length) pairs covering it from
    its start, each parameter of shape (out, ...) out rows; the last one cut to whole rows)."""
    __slots__ = ()


def _flat_grad(model):
    """(the flattened gradient of every parameter, their layout)."""
    grads = [p.grad.detach() for p in model.parameters() if p.grad is not None]
    layout = [(g.shape[0], g[0].numel()) if g.dim() > 1 else (1, g.numel()) for g in grads]
    return np.concatenate([g.reshape(-1).numpy() for g in grads]), layout


def _cut(layout, n):
    """``layout`` cut to its first ``n`` levels (whole rows)."""
    out, at = [], 0
    for rows, length in layout:
        rows = min(rows, (n - at) // length)
        if rows <= 0:
            break
        out.append((rows, length))
        at += rows * length
    return out


def _collect(model, batches, loss_fn, opt, n_coords, every):
    """Train on ``batches`` and concatenate gradients taken every ``every`` steps."""
    grads, layout, total = [], [], 0
    for step, (xb, yb) in enumerate(batches):
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        if step % every == every - 1:
            g, shapes = _flat_grad(model)
            grads.append(g)
            layout += shapes
            total += g.size
            if total >= n_coords:
                break
        opt.step()
    return Trace(np.concatenate(grads)[:n_coords].astype(np.float32), _cut(layout, n_coords))


def digits_trace(kind, n_coords, seed=0):
    torch = _torch()
    torch.manual_seed(seed)
    xtr, ytr, _, _ = digits_data()
    model = (mlp if kind == "mlp" else cnn)(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.from_numpy(xtr), torch.from_numpy(ytr)
    gen = torch.Generator().manual_seed(seed)

    def batches():
        while True:
            for idx in torch.randperm(len(y), generator=gen).split(64):
                yield x[idx], y[idx]

    return _collect(model, batches(), torch.nn.functional.cross_entropy, opt, n_coords, every=5)


def _lstm(seed, seq_len, batch):
    """(model, optimizer, endless batches) of the char-LSTM on the stdlib text."""
    torch = _torch()
    torch.manual_seed(seed)
    text = np.frombuffer(stdlib_text(), dtype=np.uint8) % CharLSTM.VOCAB
    data = torch.from_numpy(text.astype(np.int64))
    model = CharLSTM()(torch)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(seed)

    def batches():
        while True:
            starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
            xb = torch.stack([data[s:s + seq_len] for s in starts])
            yb = torch.stack([data[s + 1:s + seq_len + 1] for s in starts]).reshape(-1)
            yield xb, yb

    return model, opt, batches()


def lstm_trace(n_coords, seed=0, seq_len=64, batch=16):
    model, opt, batches = _lstm(seed, seq_len, batch)
    return _collect(model, batches, _torch().nn.functional.cross_entropy, opt, n_coords,
                    every=5)


def lstm_gradients(steps, n_coords, seed=0, seq_len=64, batch=16):
    """(step, Trace of the first ``n_coords`` coordinates of the gradient) at each of ``steps``
    (counted from 1, in order) of the training ``lstm_trace`` samples; its trace is step 5's."""
    torch = _torch()
    model, opt, batches = _lstm(seed, seq_len, batch)
    for step, (xb, yb) in enumerate(batches, 1):
        if step > max(steps):
            return
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        if step in steps:
            grad, layout = _flat_grad(model)
            yield step, Trace(grad[:n_coords].astype(np.float32), _cut(layout, n_coords))
        opt.step()


TRACES = {
    "mlp-digits": lambda n: digits_trace("mlp", n),
    "cnn-digits": lambda n: digits_trace("cnn", n),
    "lstm-stdlib": lambda n: lstm_trace(n),
}
