#!/usr/bin/env bash
# ssh-client.sh DIR PORT: make plain `ssh` (as horovodrun and mpirun call it) use the cluster key
# and port without touching ~/.ssh: writes DIR/ssh_config and DIR/bin/ssh, a wrapper that adds
# -F DIR/ssh_config. Put DIR/bin first on PATH (launch.sh does).
set -euo pipefail
dir=${1:?usage: ssh-client.sh DIR PORT}
port=${2:?usage: ssh-client.sh DIR PORT}
"$(dirname "$0")/ssh-keys.sh" "$dir"
mkdir -p "$dir/bin"
cat >"$dir/ssh_config" <<CONF
Host *
    Port $port
    User root
    IdentityFile $dir/id_ed25519
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    ConnectTimeout 10
CONF
cat >"$dir/bin/ssh" <<WRAP
#!/bin/sh
exec /usr/bin/ssh -F "$dir/ssh_config" "\$@"
WRAP
chmod +x "$dir/bin/ssh"
