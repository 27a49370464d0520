"""A faulty link, shared by the fault tests: the bytes a rank hands the network differ from
the bytes it checksummed; the fault workers' loop over their cases; and how a torch.distributed
worker ends after a backward that raised."""
import os
import sys
from contextlib import contextmanager

from horovod_huffman.exchange import allreduce
from horovod_huffman.exchange.frames import FRAME


def flip_middles(data, sizes):
    """Flip one byte in the middle of the body of each of the consecutive ``sizes``-byte
    frames in ``data`` (a uint8 array, changed in place and returned); a frame without a body
    (a rank's scatter frame to itself) is left as it is."""
    pos = 0
    for size in sizes:
        body = size - FRAME.size
        if body > 0:
            data[pos + FRAME.size + body // 2] ^= 0x5A
        pos += size
    return data


def corrupt_outgoing_frames():
    """From now on every frame this process sends (allreduce.py's ``frame`` and ``frames``)
    has a byte flipped after it was written; returns a function that mends the link."""
    write_one, write_many = allreduce.frame, allreduce.frames

    def frame(*args):
        data = write_one(*args)
        return flip_middles(data, [data.size])

    def frames(items):
        data, sizes = write_many(items)
        return flip_middles(data, sizes), sizes

    def mend():
        allreduce.frame, allreduce.frames = write_one, write_many

    allreduce.frame, allreduce.frames = frame, frames
    return mend


@contextmanager
def corrupted_link(active):
    """Within the block, this process's outgoing frames are corrupted where ``active``
    (``corrupt_outgoing_frames``); the link is mended after it."""
    mend = corrupt_outgoing_frames() if active else None
    try:
        yield
    finally:
        if mend:
            mend()


def raised_expected(label, rank, corrupt, step, errors, cause):
    """Whether ``step()``, this process's link corrupted where ``corrupt``, raised one of
    ``errors`` whose ``cause(error)`` (the text to report) is not None. Prints "RAISED <rank>
    <label> <cause>", or why the case failed on this rank."""
    try:
        with corrupted_link(corrupt):
            step()
    except errors as e:
        found = cause(e)
        if found is not None:
            print(f"RAISED {rank} {label} {found}", flush=True)
            return True
        print(f"WRONG ERROR on rank {rank} in {label}: {str(e)[:500]}", flush=True)
        return False
    print(f"NO ERROR on rank {rank} in {label}", flush=True)
    return False


def run_cases(cases, run_case, wait):
    """A fault worker's exit status: 0 when ``run_case(*case.split(":"))`` (whether the case
    raised its expected error on this rank) is true for every one of ``cases``, run in turn,
    with ``wait()`` (every rank done) after each; else 1."""
    raised = []
    for case in cases:
        raised.append(run_case(*case.split(":")))
        wait()
    return 0 if all(raised) else 1


def end_torch_worker():
    """End a torch.distributed worker whose last backward raised from a comm hook or a
    custom reduce-scatter, once every rank has reported: after such a backward, torch's own
    teardown (DDP's reducer, Gloo's threads) now and then ends in std::terminate ("terminate
    called without an active exception"; seen on the 2-core VM, also after
    destroy_process_group), after everything the worker checks is done. So every rank waits
    for the others, then leaves without tearing down the interpreter."""
    import torch.distributed as dist
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)
