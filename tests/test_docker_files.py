"""Static checks of the container files, which no Docker engine builds here: hadolint on the
Dockerfiles, the compose specification's schema on the compose files, shellcheck on every script
the containers and the multi-host test run, and one place for the pinned versions. The scripts
themselves run for real in tests/test_multihost.py."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCKER = os.path.join(ROOT, "docker")
DOCKERFILES = ["Dockerfile", "Dockerfile.gpu"]
COMPOSE = ["docker-compose.yml", "docker-compose.gpu.yml"]
SCRIPTS = sorted(glob.glob(os.path.join(DOCKER, "scripts", "*.sh")) +
                 glob.glob(os.path.join(DOCKER, "*.sh")) +
                 glob.glob(os.path.join(ROOT, "scripts", "*.sh")) + [os.path.join(ROOT, ".ci", "run")])


def tool(name):
    path = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (the dev extra installs it)")
    return path


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def versions():
    with open(os.path.join(DOCKER, "versions.env")) as f:
        return dict(line.strip().split("=", 1) for line in f
                    if line.strip() and not line.startswith("#"))


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_passes_hadolint(name):
    rc, out = run([tool("hadolint"), "--failure-threshold", "warning",
                   os.path.join(DOCKER, name)])
    assert rc == 0, out


@pytest.mark.parametrize("name", COMPOSE)
def test_compose_file_matches_the_compose_specification(name):
    rc, out = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                   os.path.join(DOCKER, name)])
    assert rc == 0, out


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_script_passes_shellcheck(path):
    rc, out = run([tool("shellcheck"), "--severity=warning", path])
    assert rc == 0, out


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_build_argument_is_pinned_in_versions_env(name):
    with open(os.path.join(DOCKER, name)) as f:
        args = re.findall(r"^ARG (\w+)", f.read(), re.M)
    assert args and set(args) <= set(versions()), set(args) - set(versions())


def test_compose_passes_every_build_argument_from_versions_env():
    assert os.path.realpath(os.path.join(DOCKER, ".env")) == \
        os.path.realpath(os.path.join(DOCKER, "versions.env"))      # compose's interpolation file
    with open(os.path.join(DOCKER, "docker-compose.yml")) as f:
        compose = f.read()
    for name in DOCKERFILES:
        with open(os.path.join(DOCKER, name)) as f:
            for key in re.findall(r"^ARG (\w+)", f.read(), re.M):
                assert f"{key}: ${{{key}}}" in compose, key


def test_package_pins_come_from_versions_env():
    for path in ("setup.py", "scripts/install_horovod.sh"):
        with open(os.path.join(ROOT, path)) as f:
            assert "versions.env" in f.read(), path
    import torch
    assert torch.__version__.split("+")[0] == versions()["TORCH_VERSION"]


@pytest.mark.parametrize("workers", [["--service", "localhost", "--wait", "1"],
                                     ["--hosts", "10.0.0.1,10.0.0.2"]], ids=["resolved", "given"])
def test_launcher_refuses_to_start_on_fewer_workers_than_expected(workers):
    """A cluster that came up short must not train on fewer ranks and exit 0: launch.sh fails,
    naming the workers it found, before it starts any job (here: ``true``)."""
    found = 1 if "localhost" in workers else 2
    expect = found + 1
    rc, out = run(["bash", os.path.join(DOCKER, "scripts", "launch.sh"), *workers,
                   "--expect", str(expect), "--", "true"])
    assert rc == 1, out
    assert f"only {found} of the {expect} expected workers" in out, out


def test_launcher_fails_with_a_message_when_no_worker_resolves():
    """A worker name that never resolves (a network without DNS) ends the wait with a message
    naming it, not a silent exit."""
    rc, out = run(["bash", os.path.join(DOCKER, "scripts", "launch.sh"), "--service",
                   "no-such-worker.invalid", "--wait", "2", "--expect", "2", "--", "true"])
    assert rc == 1, out
    assert "no host resolves as no-such-worker.invalid within 2 s" in out, out


def test_host_caches_and_build_outputs_stay_out_of_the_build_context():
    """The images COPY package folders whose __pycache__ holds this machine's Numba cache (137
    files once): .dockerignore keeps every cache and build output out of the context."""
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        patterns = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    for needed in (".venv", ".git", "**/__pycache__", "**/*.nbi", "**/*.nbc", "**/*.pyc",
                   "*.egg-info", "build", "dist"):
        assert needed in patterns, needed


def shared_steps(name):
    """The instructions after a Dockerfile's "# ---- The same steps" marker, comments dropped."""
    with open(os.path.join(DOCKER, name)) as f:
        text = f.read()
    assert "# ---- The same steps" in text, name
    tail = text.split("# ---- The same steps", 1)[1]
    return [line for line in tail.splitlines()[1:] if line.strip() and not line.startswith("#")]


def test_gpu_image_shares_the_cpu_images_steps():
    """Only the base and the frameworks differ: the system packages, Horovod's build, the
    package and the kernel compile are the same instructions, which the CPU build proves."""
    steps = {name: shared_steps(name) for name in DOCKERFILES}
    assert steps["Dockerfile"] == steps["Dockerfile.gpu"]
    assert any("install_horovod.sh" in line for line in steps["Dockerfile"])
    assert any("horovod_huffman.tools.compile" in line for line in steps["Dockerfile"])
    system = "WORKDIR /opt/horovod-huffman\nCOPY scripts/install_system.sh scripts/\n" \
             "RUN bash scripts/install_system.sh && rm -rf /var/lib/apt/lists/*\n"
    for name in DOCKERFILES:
        with open(os.path.join(DOCKER, name)) as f:
            assert system in f.read(), name
