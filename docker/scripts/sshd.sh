#!/usr/bin/env bash
# sshd.sh DIR PORT [PIDFILE]: run a worker's sshd in the foreground on PORT, accepting the
# cluster key from DIR (ssh-keys.sh), root login by key only. Used by the worker containers and,
# one per network namespace, by the multi-host test.
set -euo pipefail
dir=${1:?usage: sshd.sh DIR PORT [PIDFILE]}
port=${2:?usage: sshd.sh DIR PORT [PIDFILE]}
pidfile=${3:-$dir/sshd-$port.pid}
"$(dirname "$0")/ssh-keys.sh" "$dir"
mkdir -p /run/sshd
config="$dir/sshd_config-$port-$$"
cat >"$config" <<CONF
Port $port
HostKey $dir/host_ed25519
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $pidfile
# horovodrun and mpirun pass the ranks' environment on the command line; keep what ssh sends.
AcceptEnv *
CONF
exec /usr/sbin/sshd -D -e -f "$config"
