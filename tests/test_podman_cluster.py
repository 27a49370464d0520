"""The CPU image built and run for real: podman builds docker/Dockerfile on a base made locally
(debootstrap minbase bookworm, standing in for python:3.11-slim-bookworm), podman-compose starts
docker/docker-compose.yml with 2 workers, and the digits job runs across the containers with Gloo
and with MPI. The GPU image (docker/Dockerfile.gpu) builds on the same base, and what in it needs
no GPU runs. It runs wherever podman and podman-compose are installed (root:
`WITH_PODMAN=1 bash scripts/install_system.sh`, `.venv/bin/pip install podman-compose`), else it
skips; podman keeps the base image and the build's layers, so only the first build is cold
(docs/cluster.md has the times). HH_PODMAN=0 skips it on a machine that has podman:

    .venv/bin/python -m pytest -q -m podman tests/test_podman_cluster.py
"""
import os
import json
import re
import shutil
import subprocess
import sys

import pytest

from horovod_run import ROOT, excerpt

BASE = "localhost/hh-bookworm-python:3.11"
WHEELS = os.environ.get("HH_TORCH_WHEELS", "/opt/wheels")
# podman-compose is a PyPI package: the venv's, as the other tools (tests/test_docker_files.py).
COMPOSE = shutil.which("podman-compose", path=os.path.dirname(sys.executable)) or \
    shutil.which("podman-compose")

pytestmark = [
    pytest.mark.podman,
    pytest.mark.horovod,
    pytest.mark.skipif(os.environ.get("HH_PODMAN") == "0", reason="HH_PODMAN=0"),
    pytest.mark.skipif(shutil.which("podman") is None or COMPOSE is None or os.geteuid() != 0,
                       reason="needs root, podman and podman-compose (WITH_PODMAN=1 bash "
                              "scripts/install_system.sh; pip install podman-compose)"),
]


def sh(cmd, timeout=1800, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def versions():
    with open(os.path.join(ROOT, "docker", "versions.env")) as f:
        return dict(line.strip().split("=", 1) for line in f
                    if line.strip() and not line.startswith("#"))


def base():
    """The locally made Python base both images are built on."""
    if subprocess.run(["podman", "image", "exists", BASE]).returncode != 0:
        sh(["bash", "-c", f"""set -e; root=$(mktemp -d)
            debootstrap --variant=minbase --include=python-is-python3,python3-pip,python3-venv,python3-dev \\
                bookworm "$root"
            rm -f "$root"/usr/lib/python3.11/EXTERNALLY-MANAGED
            tar -C "$root" -c . | podman import - {BASE}; rm -rf "$root" """])
    return BASE


def build(dockerfile, tag, *args, timeout=1800):
    """podman build of ``dockerfile`` with every pin of versions.env, the certificates and pip's
    settings of this machine mounted in, and ``args`` after those."""
    pins = [a for k, v in versions().items() for a in ("--build-arg", f"{k}={v}")]
    sh(["podman", "--runtime", "runc", "build", "--format", "docker", "--network", "host",
        "-f", dockerfile, "-t", tag, *pins, *args,
        "-v", "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro",
        *(["-v", "/etc/pip.conf:/etc/pip.conf:ro"] if os.path.exists("/etc/pip.conf") else []), "."],
       timeout=timeout)
    return tag


@pytest.fixture(scope="module")
def image():
    return build("docker/Dockerfile", "horovod-huffman:cpu", "--build-arg",
                 f"CPU_BASE_IMAGE={base()}", "--build-arg", f"TORCH_FIND_LINKS={WHEELS}",
                 "-v", f"{WHEELS}:{WHEELS}:ro")


def containers(service):
    """Names of the compose project's running or exited containers of ``service``."""
    out = sh(["podman", "ps", "-a", "--filter", "label=com.docker.compose.project=horovod-huffman",
              "--filter", f"label=com.docker.compose.service={service}", "--format",
              "{{.Names}}"])
    return sorted(out.split())


def eth0_bytes(container):
    """(received, sent) bytes of a running container's eth0 since it started."""
    return tuple(int(sh(["podman", "exec", container, "cat",
                         f"/sys/class/net/eth0/statistics/{d}_bytes"]))
                 for d in ("rx", "tx"))


def remove_project(compose, env):
    """Every container of the compose project gone, then its network and volumes. podman-compose's
    ``down`` knows only the first container of a scaled service, so a second worker would live
    on into the next run (its image and traffic counters from before). The launcher goes first:
    it requires the workers (compose's depends_on), and podman refuses to remove a required
    container even when the one requiring it is named in the same ``rm``."""
    launchers = containers("launcher")
    if launchers:
        sh(["podman", "rm", "-f", *launchers])
    ids = sh(["podman", "ps", "-a", "-q", "--filter",
              "label=com.docker.compose.project=horovod-huffman"]).split()
    if ids:
        sh(["podman", "rm", "-f", *ids])
    subprocess.run([*compose, "down", "-v"], capture_output=True, cwd=ROOT, env=env)


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_digits_job_across_two_containers(image, controller):
    """The launcher runs the README's digits job on 2 worker containers; each worker's own
    network interface carries at least half the encoded bytes rank 0 reports sending, and sends
    less than the uncompressed fp32 gradients would take."""
    compose = [COMPOSE, "-f", "docker/docker-compose.yml"]
    env = dict(os.environ, WORKERS="2", CONTROLLER=controller)
    remove_project(compose, env)
    try:
        sh([*compose, "up", "-d", "--scale", "worker=2"], env=env, timeout=600)
        launcher, = containers("launcher")
        code = sh(["podman", "wait", launcher], timeout=1200).split()[-1]
        out = sh(["podman", "logs", launcher])
        assert code == "0", excerpt(out)
        traffic = {w: eth0_bytes(w) for w in containers("worker")}
    finally:
        remove_project(compose, env)
    # rank 0's line, behind horovodrun's prefix ("[0]<stdout>:" with gloo, "[1,0]<stdout>:" mpi)
    lines = re.findall(r"RESULT (\{.*\})", out)
    assert lines, excerpt(out)
    result = json.loads(lines[-1])
    assert result["ranks"] == 2 and result["identical_parameters"], result
    assert result["test_accuracy"] >= 0.95, result          # README: 98.06% at 2 ranks
    sent = result["stats"]["sent_bytes"]
    print(f"{controller}: rank 0 sent {sent} encoded bytes ({result['stats']['ratio']:.1f}x "
          f"smaller); worker eth0 (rx, tx) bytes: {traffic}")
    assert len(traffic) == 2
    for rx, tx in traffic.values():                        # each worker sends and receives
        assert min(rx, tx) >= sent // 2, traffic            # the other's gradients, encoded:
        assert tx < result["stats"]["raw_bytes"], traffic   # less than fp32 gradients would be


def test_image_holds_kernels_compiled_in_the_build(image):
    """The build context leaves the host's Numba cache out (.dockerignore), so every cache index
    in the image was written by its own `python -m horovod_huffman.tools.compile`: a container's first
    training step loads the kernels instead of compiling them."""
    out = sh(["podman", "run", "--rm", "--entrypoint", "sh", image, "-c",
              "ls /opt/horovod-huffman/kernels/__pycache__"])
    assert sum(name.endswith(".nbi") for name in out.split()) >= 20, out


def test_gpu_image_builds_horovod_with_nccl_and_runs_the_device_kernels():
    """docker/Dockerfile.gpu on the same locally made base, its CUDA stack from PyPI's packages
    (torch's CUDA wheel, cuda-toolkit[nvcc], numba-cuda): Horovod's build with NCCL operations
    succeeds against it, the image's torch is a CUDA build, and, with no GPU needed, the device
    kernels pass tests/test_gpu.py under Numba's CUDA simulator inside the image."""
    tag = build("docker/Dockerfile.gpu", "horovod-huffman:gpu", "--build-arg",
                f"GPU_BASE_IMAGE={base()}", timeout=3600)
    checks = ("import torch, numba.cuda, horovod.torch as hvd; "
              "assert torch.version.cuda, torch.__version__; "
              "assert hvd.nccl_built() and hvd.gloo_built() and hvd.mpi_built(); "
              "print('torch', torch.__version__, 'CUDA', torch.version.cuda, "
              "'NCCL', '.'.join(map(str, torch.cuda.nccl.version())), 'Horovod NCCL built')")
    out = sh(["podman", "run", "--rm", "--network", "none", "--entrypoint", "bash",
              "-v", f"{ROOT}/tests:/opt/horovod-huffman/tests:ro", "-e", "NUMBA_ENABLE_CUDASIM=1",
              tag, "-c", f"python -c \"{checks}\" && python -m pytest -q -p no:cacheprovider "
              f"-n 2 tests/test_gpu.py"], timeout=1800)
    print(out[-3000:])
    assert "Horovod NCCL built" in out and " passed" in out, excerpt(out)
