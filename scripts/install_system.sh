#!/usr/bin/env bash
# System packages for multi-host runs: Open MPI (Horovod's MPI controller and mpirun), OpenSSH
# (horovodrun -H starts remote ranks over SSH) and iproute2 (network namespaces and tc for the
# multi-host test and benchmark). Debian/Ubuntu packages; needs root (or sudo). Idempotent.
# WITH_PODMAN=1 adds, for tests/test_podman_cluster.py (not in the images), podman, runc,
# debootstrap and the CNI dnsname plugin (DNS on the compose network: the launcher finds the
# workers by their service name), and a containers.conf for a root host without
# CAP_SYS_RESOURCE and with hybrid cgroups: explicit ulimits, and runc (crun refuses that cgroup
# layout). podman-compose comes from PyPI: .venv/bin/pip install podman-compose.
set -euo pipefail

packages=(openmpi-bin libopenmpi-dev openssh-server openssh-client iproute2)
if [ "${WITH_PODMAN:-0}" = 1 ]; then
    packages+=(podman runc debootstrap golang-github-containernetworking-plugin-dnsname)
    conf=/etc/containers/containers.conf
    if [ ! -e "$conf" ] && [ "$(id -u)" = 0 ]; then
        mkdir -p /etc/containers
        printf '[containers]\ndefault_ulimits = ["nofile=10000:10000", "nproc=4096:4096"]\n[engine]\nruntime = "runc"\n' >"$conf"
    fi
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages present: ${packages[*]}"
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    else
        echo "set-up failed: not root and no sudo, so cannot install ${missing[*]}; install them" \
             "(apt-get install ${missing[*]}) or run as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
