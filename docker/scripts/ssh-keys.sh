#!/usr/bin/env bash
# ssh-keys.sh DIR: the cluster's shared SSH material in DIR, generated on first use (idempotent,
# safe when several hosts start at once): a client key every launcher uses (id_ed25519), the
# authorized_keys every worker accepts, and the host key the workers' sshd presents.
set -euo pipefail
dir=${1:?usage: ssh-keys.sh DIR}
mkdir -p "$dir"
chmod 700 "$dir"
(
    flock 9
    [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C horovod-huffman -f "$dir/id_ed25519"
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C horovod-huffman-host -f "$dir/host_ed25519"
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    chmod 600 "$dir/id_ed25519" "$dir/host_ed25519" "$dir/authorized_keys"
) 9>"$dir/.lock"
