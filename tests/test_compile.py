"""``python -m horovod_huffman.tools.compile``: processes sharing a kernel cache take turns, and the
one that waited finds every kernel cached."""
import glob
import os
import re
import shutil
import subprocess
import sys

from horovod_run import PYTHONPATH

# Kernel modules whose cache entries the shared cache starts without, so that the first process
# compiles them (about 20 s on a 2-core VM) and loads the rest: the turns show without a cold
# compile of everything (minutes).
UNCACHED = ("quantize", "elias")


def kernel_cache(env):
    """The kernels' cache directory under ``env`` (NUMBA_CACHE_DIR's subdirectory for them)."""
    code = "import horovod_huffman.kernels as k; print(k._cache_directory())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_processes_sharing_a_cache_take_turns_and_the_later_one_only_loads(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=PYTHONPATH)
    own = dict(os.environ, PYTHONPATH=PYTHONPATH)
    shared = kernel_cache(env)                      # created and stamped for these sources
    for path in glob.glob(os.path.join(kernel_cache(own), "*.nb[ic]")):
        if not os.path.basename(path).startswith(tuple(m + "." for m in UNCACHED)):
            shutil.copy(path, shared)
    procs = [subprocess.Popen([sys.executable, "-m", "horovod_huffman.tools.compile"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    times = []
    for out in outs:
        m = re.search(r"\(([\d.]+) s; ([\d.]+) s waiting for the lock\)", out)
        assert m, out
        times.append((float(m.group(1)), float(m.group(2))))
    (first, _), (later, waited) = sorted(times, key=lambda t: t[1])
    # The later process waited for most of the first one's compile, then only loaded.
    assert waited > 0.5 * first, times
    assert later < 0.5 * first, times
    for module in UNCACHED:
        assert glob.glob(os.path.join(shared, module + ".*.nbc")), module


def test_a_cache_compiled_from_other_kernel_sources_is_dropped(tmp_path):
    """Kernels inline one another's functions across files, and Numba's cache index checks
    only a function's own file: at import, a cache stamped with another hash of the kernel
    sources is removed and stamped anew; one stamped with this hash is kept."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=PYTHONPATH)

    directory = kernel_cache(env)
    stamp = os.path.join(directory, "horovod_huffman.kernels.sources")
    with open(stamp) as f:
        current = f.read()
    cached = os.path.join(directory, "kernel.nbi")
    open(cached, "w").close()
    kernel_cache(env)
    assert os.path.exists(cached)
    with open(stamp, "w") as f:
        f.write("other sources")
    kernel_cache(env)
    assert not os.path.exists(cached)
    with open(stamp) as f:
        assert f.read() == current
