"""Real multi-host Horovod jobs without Docker: hosts are network namespaces joined by veth pairs
(scripts/netns_cluster.sh), each running the worker's sshd; the launcher is the compose cluster's
docker/scripts/launch.sh, which starts the ranks over SSH with ``horovodrun -H`` (or mpirun).
Needs root, iproute2, OpenSSH's sshd, unshare and nsenter; skipped otherwise."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from horovod_run import PYTHONPATH, ROOT, excerpt, mpi_missing, tool

pytest.importorskip("horovod.torch", exc_type=ImportError)

CLUSTER = os.path.join(ROOT, "scripts", "netns_cluster.sh")
LAUNCH = os.path.join(ROOT, "docker", "scripts", "launch.sh")
STATE = "/tmp/hh-netns-test"


def missing():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for name in ("ip", "tc", "unshare", "nsenter", "ssh"):
        if shutil.which(name) is None:
            return f"{name} not installed"
    if not os.path.exists("/usr/sbin/sshd"):
        return "OpenSSH server not installed (scripts/install_system.sh)"
    if tool("horovodrun") is None:
        return "horovodrun not installed"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        return "creating namespaces is not permitted here (needs CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    return None


# Multi-host jobs under real Horovod: `pytest -m "not horovod"` leaves them out.
pytestmark = [pytest.mark.horovod,
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]


def cluster(*args):
    env = dict(os.environ, HH_CLUSTER_DIR=STATE)
    return subprocess.run(["bash", CLUSTER, *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def hosts():
    up = cluster("up", "3", "1gbit")
    if up.returncode != 0:
        cluster("down")
        pytest.fail(f"could not start the namespaced hosts:\n{up.stdout}{up.stderr}")
    yield ["hh1", "hh2", "hh3"]
    cluster("down")


def launch(hosts, controller="gloo", epochs=1):
    """RESULT of the digits example run across ``hosts`` from host 1 (as the compose launcher)."""
    bindir = os.path.dirname(sys.executable)
    command = ["bash", CLUSTER, "exec", "1", "env", f"PATH={bindir}:{os.environ['PATH']}",
               f"PYTHONPATH={PYTHONPATH}", "OMP_NUM_THREADS=1", LAUNCH, "--hosts", ",".join(hosts),
               "--keys", os.path.join(STATE, "ssh"), "--controller", controller, "--",
               sys.executable, os.path.join(ROOT, "examples", "pytorch_digits.py"),
               "--compression", "rlh", "--epochs", str(epochs)]
    proc = subprocess.run(command, env=dict(os.environ, HH_CLUSTER_DIR=STATE), cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, excerpt(out)
    line = next((line for line in out.splitlines() if "RESULT " in line), None)
    assert line is not None, excerpt(out)
    # raw_decode: under MPI another rank's output may follow on the same line.
    return json.JSONDecoder().raw_decode(line.split("RESULT ", 1)[1])[0], out


@pytest.mark.parametrize("n_hosts", [2, 3])
def test_gloo_job_across_hosts_keeps_parameters_identical(hosts, n_hosts):
    result, out = launch(hosts[:n_hosts])
    assert f"launch.sh: {n_hosts} ranks on" in out
    assert result["ranks"] == n_hosts and result["identical_parameters"]
    assert result["stats"]["bits_per_coord"] < 4


@pytest.mark.parametrize("controller", ["mpi", "mpirun"])
def test_mpi_job_across_hosts_keeps_parameters_identical(hosts, controller):
    if mpi_missing():
        pytest.skip(mpi_missing())
    result, _ = launch(hosts[:2], controller=controller)
    assert result["ranks"] == 2 and result["identical_parameters"]


def test_ranks_really_run_on_their_own_hosts(hosts):
    """The job's traffic crosses the veth links: every host sent and received bytes."""
    before = {line.split()[0]: line.split()[1:] for line in cluster("bytes").stdout.splitlines()}
    launch(hosts[:3])
    after = {line.split()[0]: line.split()[1:] for line in cluster("bytes").stdout.splitlines()}
    for host in ("1", "2", "3"):
        sent = int(after[host][0]) - int(before[host][0])
        received = int(after[host][1]) - int(before[host][1])
        assert sent > 100_000 and received > 100_000, (host, sent, received)
