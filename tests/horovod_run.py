"""Launch a multi-rank script from a test, with a timeout: under real Horovod
(``horovodrun --gloo`` by default, ``horovodrun --mpi``, or Open MPI's own ``mpirun``), or
under torch's own launcher (``torchrun``) for DistributedDataParallel."""
import functools
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout first, then whatever this process was given (a machine's carried packages).
PYTHONPATH = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
CONTROLLERS = ("gloo", "mpi", "mpirun")

# horovodrun, as its own script runs it, but asking torch's Horovod extension first. Before it
# launches, horovodrun asks the extensions in a child process whether Horovod was built with
# Gloo (or MPI), TensorFlow's first: importing TensorFlow makes that 6 s of every launch on a
# 2-core VM, 3 s with torch's. Every extension of one build gives the same answer.
HOROVODRUN = ("import sys; from horovod.common import util; "
              "util.EXTENSIONS.sort(key=lambda name: name != 'torch'); "
              "from horovod.runner.launch import run_commandline; "
              "sys.argv[0] = 'horovodrun'; sys.exit(run_commandline())")


def tool(name):
    """Path of a launcher, preferring the one next to this Python (the venv's)."""
    return shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)


@functools.lru_cache(maxsize=None)
def mpi_missing():
    """Why MPI jobs cannot run here (None when they can)."""
    if tool("mpirun") is None:
        return "Open MPI's mpirun is not installed (scripts/install_system.sh)"
    probe = subprocess.run([sys.executable, "-c", "import horovod.torch as h; print(h.mpi_built())"],
                           capture_output=True, text=True, timeout=120)
    if probe.stdout.strip() != "True":
        return "Horovod was built without MPI (scripts/install_horovod.sh builds it with MPI)"
    return None


def horovodrun(n_ranks, script, *args, timeout=600, controller="gloo", env=None):
    """(returncode, combined output) of ``python script args`` on ``n_ranks`` local ranks;
    ``env``: variables added to this process's environment."""
    if tool("horovodrun") is None:
        pytest.skip("horovodrun not installed (scripts/install_horovod.sh)")
    if controller != "gloo" and mpi_missing():
        pytest.skip(mpi_missing())
    extra = dict(env or {})
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1", **extra)
    command = [sys.executable, os.path.join(ROOT, script), *map(str, args)]
    if controller == "mpirun":
        launch = [tool("mpirun"), "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                  "-np", str(n_ranks), "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "PATH"]
        launch += [item for name in extra for item in ("-x", name)]
    else:
        launch = [sys.executable, "-c", HOROVODRUN, f"--{controller}", "-np", str(n_ranks)]
    proc = subprocess.run(launch + command, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def torchrun(n_ranks, script, *args, timeout=300):
    """(returncode, combined output) of ``python script args`` on ``n_ranks`` local ranks
    started by torch's launcher (``python -m torch.distributed.run``, rendezvous on a free
    local port)."""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={n_ranks}", os.path.join(ROOT, script), *map(str, args)]
    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def python_run(script, *args, timeout=600):
    """(returncode, output) of ``python script args`` as a single process (Horovod size 1)."""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def cuda_missing():
    """Why a launched job cannot train on CUDA here (None where it can): the jobs that run
    an adapter's CUDA branch, which the CUDA simulator cannot stand in for (torch's CUDA
    tensors), run only on a machine with a GPU and count as skipped elsewhere."""
    import torch
    return None if torch.cuda.is_available() else "needs torch with a real CUDA GPU"


def excerpt(out, tail=3000, first=3000):
    """What a failed job's output shows of its cause: the first traceback any rank printed (a job
    that one rank brings down ends with the others' shut-down tracebacks, which hide it), then the
    output's last ``tail`` characters."""
    start = out.find("Traceback (most recent call last)")
    if start < 0 or start >= len(out) - tail:
        return out[-tail - first:]
    start = out.rfind("\n", 0, start) + 1
    return out[start:start + first] + "\n[...]\n" + out[-tail:]


def assert_raised_on_every_rank(out, n_ranks, cases):
    """Every rank's first RAISED line of each case (a fault worker's output) names its
    error."""
    for case, error in cases.items():
        for rank in range(n_ranks):
            lines = [l for l in out.splitlines() if f"RAISED {rank} {case} " in l]
            assert lines and error in lines[0], (case, rank, excerpt(out))
