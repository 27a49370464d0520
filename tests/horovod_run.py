"""Launch a script under real Horovod (horovodrun --gloo) from a test, with a timeout."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def horovodrun(n_ranks, script, *args, timeout=600):
    """(returncode, combined output) of ``horovodrun --gloo -np N python script args``."""
    runner = shutil.which("horovodrun", path=os.path.dirname(sys.executable)) or shutil.which("horovodrun")
    if runner is None:
        pytest.skip("horovodrun not installed (scripts/install_horovod.sh)")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    cmd = [runner, "--gloo", "-np", str(n_ranks), sys.executable, os.path.join(ROOT, script),
           *map(str, args)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def python_run(script, *args, timeout=600):
    """(returncode, output) of ``python script args`` as a single process (Horovod size 1)."""
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr
