"""Data and wire counters shared by the benchmarks' training jobs (train_job.py under Horovod,
ddp_job.py under torch.distributed): each rank's stream of training batches, a held-out set, and
the bytes sent on a network interface. Batches are identical for a (seed, rank) whatever the
framework, so the two jobs train on the same data."""
import numpy as np
import torch

from horovod_huffman.tools.bench.traces import CharLSTM, digits_data, stdlib_text

# The char model trains on the stdlib text before this fraction and is validated after it.
TEXT_TRAIN_FRACTION = 0.95


def interface_bytes(iface):
    """(sent, received) bytes of ``iface`` in this process's network namespace."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == iface:
                fields = rest.split()
                return int(fields[8]), int(fields[0])
    return 0, 0


def digits_batches(batch, seed, rank, size):
    """Endless (x, y) batches of ``batch`` digits from rank's shard (every size-th training
    image, from the rank-th), reshuffled each epoch; incomplete batches are skipped."""
    xtr, ytr, _, _ = digits_data()
    shard = np.arange(rank, len(ytr), size)
    x, y = torch.from_numpy(xtr[shard]), torch.from_numpy(ytr[shard])
    gen = torch.Generator().manual_seed(seed + rank)
    while True:
        for idx in torch.randperm(len(y), generator=gen).split(batch):
            if len(idx) == batch:
                yield x[idx], y[idx]


def digits_test():
    """The digits test set, (x, y) tensors."""
    _, _, xte, yte = digits_data()
    return torch.from_numpy(xte), torch.from_numpy(yte)


def _text():
    """The stdlib text as int64 byte classes, and the index where its validation part begins."""
    text = np.frombuffer(stdlib_text(), dtype=np.uint8) % CharLSTM.VOCAB
    return torch.from_numpy(text.astype(np.int64)), int(len(text) * TEXT_TRAIN_FRACTION)


def _windows(data, starts, seq_len):
    return (torch.stack([data[s:s + seq_len] for s in starts]),
            torch.stack([data[s + 1:s + seq_len + 1] for s in starts]).reshape(-1))


def text_batches(batch, seq_len, seed, rank, held_out=False):
    """Endless (x, y) batches of ``batch`` windows of ``seq_len`` bytes at random offsets, each
    byte's target the next byte; from the whole text, or with ``held_out`` from its training
    part only (before TEXT_TRAIN_FRACTION)."""
    data, cut = _text()
    end = cut if held_out else len(data)
    gen = torch.Generator().manual_seed(seed + rank)
    while True:
        yield _windows(data, torch.randint(0, end - seq_len - 1, (batch,), generator=gen),
                       seq_len)


def text_validation(batch, seq_len):
    """A fixed (x, y) batch of ``batch`` evenly spaced windows from the validation part of the
    text (after TEXT_TRAIN_FRACTION)."""
    data, cut = _text()
    return _windows(data, torch.linspace(cut, len(data) - seq_len - 2, batch).long(), seq_len)
