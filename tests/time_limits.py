"""The time limit of the tests that decode (``pytestmark = DECODING``), so that a decoder that
does not return fails the run within seconds instead of stalling it.

The limit counts the test's call alone, Numba compiling aside (horovod_huffman/tools/watchdog.py,
started by tests/conftest.py): past it the watchdog prints every thread's stack and ends the
pytest process, which fails the run. A decoder stuck in a kernel holds the GIL released, so
only a thread can see it; pytest-timeout's signal would never land.
"""
import pytest

DECODING_SECONDS = 30
"""Seconds a decoding test may run, compiling aside. The slowest such test takes 2.4 s on a
2-core VM with both cores busy (tests/test_gpu.py on Numba's CUDA simulator has its own)."""

DECODING = pytest.mark.decoding(seconds=DECODING_SECONDS)
