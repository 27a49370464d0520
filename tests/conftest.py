import os

# Without a GPU, the device kernels run on Numba's CUDA simulator (tests/test_gpu.py keeps the
# inputs small). This must happen before Numba is first imported.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from hypothesis import settings  # noqa: E402

# CI runs many examples once; local runs stay quick. Deadlines off: first calls JIT-compile.
settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=40, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_configure(config):
    config.addinivalue_line("markers", "horovod: runs jobs under real Horovod (horovodrun, mpirun, "
                            "network namespaces); `pytest -m \"not horovod\"` runs the rest, "
                            "in a few minutes")
    config.addinivalue_line("markers", "podman: builds the CPU image with podman and runs the compose "
                            "cluster where podman is installed (about 13 minutes cold, under a "
                            "minute with podman's layer cache); HH_PODMAN=0 skips it")
