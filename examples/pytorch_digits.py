"""Data-parallel training of a small CNN on scikit-learn's digits with Huffman-coded gradients.

    horovodrun --gloo -np 2 python examples/pytorch_digits.py --compression rlh --epochs 8
    horovodrun --gloo -np 2 python examples/pytorch_digits.py --pufferfish --warmup-epochs 2 \
        --compression rlh                  # Pufferfish's low-rank model, its gradients coded

Each rank trains on its own shard; gradients cross the network through
``hvd.DistributedOptimizer(compression=...)``. Rank 0 prints per-epoch loss, test accuracy and
compression statistics, and a JSON line (``RESULT {...}``) that the tests read: one per
compression and seed (``--compression rlh sh --seed 0 1 2`` trains six times in one launch,
compression by compression).
"""
import argparse
import json
import logging
import time

import numpy as np
import torch
import horovod.torch as hvd

import horovod_huffman as hh
from horovod_huffman.tools.bench.traces import cnn, digits_data
from horovod_huffman.torch import Compression, switch_to_low_rank
from codec_options import add_codec_options, quantizer      # beside this script

COMPRESSIONS = ["none", "fp16"] + list(hh.ENCODERS)


def make_compression(name, args, seed):
    if name in ("none", "fp16"):
        return getattr(Compression, name)
    # A distinct seed per rank: ranks must not share their random rounding.
    return Compression.build(encoder=name, quantizer=quantizer(args),
                             error_feedback=args.error_feedback or None,
                             seed=seed * 65536 + hvd.rank(), exchange=args.exchange)


def identical(model):
    """Whether every rank holds the same parameters (exactly)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    return all(torch.equal(flat, other) for other in hvd.allgather_object(flat))


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compression", default=["rlh"], choices=COMPRESSIONS, nargs="+",
                   help="one or more, trained one after another")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="scaled by the number of ranks")
    add_codec_options(p)
    p.add_argument("--pufferfish", action="store_true",
                   help="after --warmup-epochs of full-rank training, factorize the model "
                        "(Pufferfish) and train the low-rank model")
    p.add_argument("--warmup-epochs", type=int, default=2, help="Pufferfish's vanilla warm-up")
    p.add_argument("--rank-ratio", type=float, default=0.25, help="Pufferfish's rank per output")
    p.add_argument("--extra-bn", action="store_true",
                   help="Pufferfish: a BatchNorm between a convolution's two factors")
    p.add_argument("--seed", type=int, nargs="+", default=[0],
                   help="one training run per seed, one after another, each printing its RESULT")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: one GPU per rank (local rank); gradients take the GPU path")
    args = p.parse_args()

    hvd.init()
    device = torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    data = digits_data()
    for name in args.compression:
        for seed in args.seed:
            train(args, name, seed, data, device)


def train(args, name, seed, data, device):
    """One training run of compression ``name`` from ``seed`` on ``data`` (``digits_data``'s):
    a new model, optimizer and compression."""
    torch.manual_seed(seed)
    xtr, ytr, xte, yte = data
    shard = np.arange(hvd.rank(), len(ytr), hvd.size())
    x, y = torch.from_numpy(xtr[shard]).to(device), torch.from_numpy(ytr[shard]).to(device)
    x_test, y_test = torch.from_numpy(xte).to(device), torch.from_numpy(yte).to(device)

    model = cnn(torch).to(device)

    def make_optimizer(params):
        return torch.optim.SGD(params, lr=args.lr * hvd.size(), momentum=0.9)

    compression = make_compression(name, args, seed)
    opt = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    full_rank_params = sum(p.numel() for p in model.parameters())
    switched_identical = None

    def switch():
        """End of the warm-up: the low-rank model, a fresh DistributedOptimizer."""
        new_opt, report = switch_to_low_rank(model, make_optimizer, rank_ratio=args.rank_ratio,
                                             extra_bn=args.extra_bn, compression=compression)
        if hvd.rank() == 0:
            print(f"pufferfish: {report.summary()}", flush=True)
        return new_opt, identical(model)

    if args.pufferfish and args.warmup_epochs == 0:
        opt, switched_identical = switch()

    gen = torch.Generator().manual_seed(seed + hvd.rank())
    # Every rank takes the same number of steps per epoch (shards differ by at most one sample).
    steps = len(y) // args.batch_size
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(len(y), generator=gen)
        total = 0.0
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size].to(device)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        train_loss = hvd.allreduce(torch.tensor(total / steps), name="train_loss").item()  # host
        test_loss, acc = evaluate(model, x_test, y_test)
        if hvd.rank() == 0:
            line = f"epoch {epoch + 1}: train loss {train_loss:.4f}, test loss {test_loss:.4f}, " \
                   f"test accuracy {100 * acc:.2f}%"
            if hasattr(compression, "stats"):
                t = compression.stats()["total"]
                line += f", {t['bits_per_coord']:.3f} bits/coord, {t['ratio']:.1f}x smaller, " \
                        f"encode {1e3 * t['encode_s']:.0f} ms, decode {1e3 * t['decode_s']:.0f} ms"
            print(line, flush=True)
        if args.pufferfish and epoch + 1 == args.warmup_epochs:
            opt, switched_identical = switch()
    same = identical(model)
    if hvd.rank() == 0:
        result = {"compression": name, "ranks": hvd.size(), "seed": seed,
                  "test_accuracy": acc,
                  "test_loss": test_loss, "identical_parameters": same,
                  "seconds": time.perf_counter() - t0,
                  "parameters": sum(p.numel() for p in model.parameters()),
                  "full_rank_parameters": full_rank_params}
        if args.pufferfish:
            result["identical_after_switch"] = switched_identical
        if hasattr(compression, "stats"):
            result["stats"] = compression.stats()["total"]
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
