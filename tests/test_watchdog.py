"""The watchdog behind the decoding tests' time limit (horovod_huffman/tools/watchdog.py) ends a
process stuck in a kernel that holds no GIL, and does not count Numba's compiling."""
import os
import subprocess
import sys
import time

from horovod_huffman.tools.watchdog import HANG_EXIT_STATUS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPIN = """
import numba, time
from horovod_huffman.tools.watchdog import watchdog

@numba.njit(nogil=True, cache=False)
def spin(x):                 # never returns for x > 0, and the optimizer cannot tell
    while x > 0:
        x = (x * 6364136223846793005 + 1442695040888963407) | 1
    return x

spin(0)                      # compiled before the clock starts
dog = watchdog()
dog.begin("spin", 2)
spin(1)
"""

COMPILING = """
import time
from numba.core import event
from horovod_huffman.tools.watchdog import watchdog

dog = watchdog()
dog.begin("compiling", 1)
with event.trigger_event("numba:compile", data={}):
    time.sleep(4)            # four times the limit, all of it compiling
time.sleep(0.3)
dog.end()
print("ended", round(dog.compile_seconds))
"""


def run(code):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    return proc, time.monotonic() - t0


def test_a_kernel_that_never_returns_ends_the_process_with_every_stack():
    proc, _ = run(SPIN)
    assert proc.returncode == HANG_EXIT_STATUS, proc.stderr[-2000:]
    assert "HANG: spin ran over 2 s" in proc.stderr
    assert "Current thread" in proc.stderr or "Thread 0x" in proc.stderr   # faulthandler's dump


def test_time_spent_compiling_does_not_count():
    proc, _ = run(COMPILING)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ended", "4"]
