"""The time limit of the tests that decode (``pytestmark = DECODING``), so that a decoder that
does not return fails the run instead of stalling it."""
import pytest

# A decoder that does not return holds the main thread in a kernel (native code, the GIL
# released), where pytest-timeout's signal never lands: its thread method ends the run instead,
# printing every thread's stack. 600 s: a module's first tests compile its decoders cold in a
# few minutes on a 2-core VM; after that each test takes seconds.
DECODING = pytest.mark.timeout(600, method="thread")
