import os

# Without a GPU, the device kernels run on Numba's CUDA simulator (tests/test_gpu.py keeps the
# inputs small). This must happen before Numba is first imported.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# CI runs many examples once; local runs stay quick. Deadlines off: first calls JIT-compile.
settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=40, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_configure(config):
    config.addinivalue_line("markers", "horovod: runs jobs under real Horovod (horovodrun, mpirun, "
                            "network namespaces); `pytest -m \"not horovod\"` runs the rest, "
                            "in a few minutes")
    config.addinivalue_line("markers", "ddp: runs jobs of several ranks under torchrun "
                            "(DistributedDataParallel over Gloo); run one at a time, as the "
                            "horovod ones")
    config.addinivalue_line("markers", "podman: builds the CPU image with podman and runs the compose "
                            "cluster where podman is installed (about 13 minutes cold, under a "
                            "minute with podman's layer cache); HH_PODMAN=0 skips it")
    config.addinivalue_line("markers", "large: tensors past 2**31 levels and payloads past 2**31 "
                            "bits (tests/test_large.py: up to 6 GiB each); `-m \"not large\"` "
                            "leaves them out")
    config.addinivalue_line("markers", "decoding(seconds): the test's call may run `seconds` "
                            "seconds, Numba compiling aside, or the watchdog ends the run "
                            "(tests/time_limits.py)")
    # pytest captures stderr while a test runs, and a process the watchdog ends never shows
    # what it captured: the watchdog reports to stderr as it is here, before any capture.
    global _hang_report
    _hang_report = os.fdopen(os.dup(2), "w")


_hang_report = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("decoding")
    if marker is None:
        yield
        return
    from horovod_huffman.tools.watchdog import watchdog
    dog = watchdog()
    dog.report = _hang_report
    dog.begin(item.nodeid, marker.kwargs["seconds"])
    try:
        yield
    finally:
        dog.end()


# The only skips a run may have, each with why this machine cannot run the test. A test that
# skips for any other reason (a framework that failed to install, MPI missing, a tool the dev
# extra should have brought) is a test this machine could run and did not: the run fails
# (``pytest_sessionfinish``), so a broken set-up cannot pass as green. Keys are substrings of
# the skip's reason.
ALLOWED_SKIPS = {
    "needs torch with a real CUDA GPU":
        "no GPU here: the device path's kernels run on Numba's CUDA simulator instead "
        "(tests/test_gpu.py); these tests hand real CUDA tensors to the adapters (test_gpu.py) "
        "and train on them under Horovod (test_torch_horovod.py); benchmarks/gpu_checks.sh "
        "runs them on a GPU machine",
    "needs root, podman and podman-compose":
        "the container cluster needs podman, which set-up installs only with WITH_PODMAN=1 "
        "(about 13 minutes cold; docs/cluster.md)",
    "HH_PODMAN=0": "the container cluster, turned off by its own switch",
    "the CPU has no AVX-512 F/BW":
        "the AVX-512 run finder's test needs the instructions; its scalar twin runs everywhere",
}
_skips = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else \
            str(report.longrepr)
        _skips.append((report.nodeid, reason))


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):          # an xdist worker: its controller judges
        return
    unexpected = [(node, reason) for node, reason in _skips
                  if not any(allowed in reason for allowed in ALLOWED_SKIPS)]
    if unexpected and os.environ.get("HH_ALLOW_ANY_SKIP") != "1":
        lines = "\n".join(f"  {node}: {reason}" for node, reason in unexpected)
        session.config.get_terminal_writer().line(
            f"\n{len(unexpected)} test(s) skipped for a reason outside tests/conftest.py's "
            f"ALLOWED_SKIPS (this machine could run them; fix the set-up, or set "
            f"HH_ALLOW_ANY_SKIP=1 to accept):\n{lines}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
