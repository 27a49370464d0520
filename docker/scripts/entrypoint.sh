#!/usr/bin/env bash
# Container entrypoint.
#   worker      the worker's sshd on $SSH_PORT (default 2222) with the shared keys in $SSH_DIR
#               (default /cluster/ssh, a volume every container mounts; generated on first start)
#   launcher    wait for $WORKERS workers (service name $WORKER_SERVICE, default worker), then
#               run $TRAIN_COMMAND (default: the digits example with rlh) across all of them
#               with $CONTROLLER (gloo | mpi | mpirun, default gloo) and $SLOTS ranks per worker
#   anything else is executed as given.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ssh_dir=${SSH_DIR:-/cluster/ssh}
port=${SSH_PORT:-2222}
case "${1:-worker}" in
    worker)
        exec "$here/sshd.sh" "$ssh_dir" "$port" ;;
    launcher)
        read -r -a command <<<"${TRAIN_COMMAND:-python examples/pytorch_digits.py --compression rlh --epochs 8}"
        exec "$here/launch.sh" --service "${WORKER_SERVICE:-worker}" --expect "${WORKERS:-2}" \
            --slots "${SLOTS:-1}" --controller "${CONTROLLER:-gloo}" --keys "$ssh_dir" \
            --port "$port" --iface "${IFACE:-eth0}" -- "${command[@]}" ;;
    *)
        exec "$@" ;;
esac
