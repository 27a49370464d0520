"""A time limit on code that may never return, Numba compiling aside.

A decoder stuck in a kernel cannot be interrupted: the kernels release the GIL (``nogil``), so
a signal handler never runs, but another thread does. ``Watchdog`` is that thread. Between
``begin(label, seconds)`` and ``end()`` it measures the time not spent compiling (Numba's
``numba:compile`` events, loads from its cache included) and, past ``seconds``, prints the
label and every thread's stack to ``report`` (stderr unless set) and ends the process with exit status 3. Compiling is
left out because a cold compile of every kernel takes minutes on a small machine, while a
decode takes milliseconds to seconds: the limit can then be tight.

One watchdog serves a process (``watchdog()``); ``begin`` and ``end`` are called from one
thread at a time.
"""
import faulthandler
import os
import sys
import threading
import time

HANG_EXIT_STATUS = 3
"""The exit status of a process the watchdog ends."""


class Watchdog:
    def __init__(self):
        from numba.core import event
        self.label, self.seconds, self.started = None, None, None
        self.report = sys.stderr
        """Where a hang is reported: a file with a descriptor (``faulthandler`` writes to it)."""
        self.compiling, self.compile_began, self.compile_seconds = 0, None, 0.0
        self._lock = threading.Lock()
        dog = self

        class Compiles(event.Listener):
            def on_start(self, ev):
                with dog._lock:
                    dog.compiling += 1
                    if dog.compiling == 1:
                        dog.compile_began = time.monotonic()

            def on_end(self, ev):
                with dog._lock:
                    dog.compiling -= 1
                    if dog.compiling == 0:
                        spent = time.monotonic() - dog.compile_began
                        dog.compile_seconds += spent
                        if dog.started is not None:     # the compile does not count
                            dog.started += spent

        event.register("numba:compile", Compiles())
        threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    def begin(self, label, seconds):
        """Start timing ``label``: it may run ``seconds`` seconds, compiling aside."""
        with self._lock:
            self.label, self.seconds, self.started = label, seconds, time.monotonic()

    def end(self):
        with self._lock:
            self.started = None

    def _over(self):
        with self._lock:
            if self.started is None or self.compiling:
                return None
            if time.monotonic() - self.started <= self.seconds:
                return None
            return self.label, self.seconds

    def _watch(self):
        while True:
            time.sleep(0.5)
            over = self._over()
            if over is not None:
                label, seconds = over
                print(f"\nHANG: {label} ran over {seconds} s (compiling aside); the stack of "
                      f"every thread follows", file=self.report, flush=True)
                faulthandler.dump_traceback(file=self.report, all_threads=True)
                self.report.flush()
                os._exit(HANG_EXIT_STATUS)


_dog = None


def watchdog():
    """This process's watchdog, started on first use."""
    global _dog
    if _dog is None:
        _dog = Watchdog()
    return _dog
