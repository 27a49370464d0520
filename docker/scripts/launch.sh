#!/usr/bin/env bash
# launch.sh [options] -- COMMAND...: run COMMAND as a Horovod job over SSH on the cluster's hosts.
#   --hosts H1,H2,...   worker addresses (default: every address the name in --service resolves to)
#   --service NAME      DNS name of the workers (docker compose: the service name; default worker)
#   --expect N          wait until N workers resolve and accept SSH, and fail if fewer do
#                       (default: 1 or the --hosts count)
#   --wait S            seconds to wait for the workers to resolve (default 120)
#   --slots S           ranks per host (default 1)
#   --controller C      gloo (horovodrun --gloo), mpi (horovodrun --mpi) or mpirun (Open MPI's own
#                       launcher) (default gloo)
#   --keys DIR          shared SSH material (default /cluster/ssh; ssh-keys.sh)
#   --port P            workers' sshd port (default 2222)
#   --iface IF          network interface the ranks talk on (default eth0)
# The compose launcher and the multi-host test (tests/test_multihost.py) both run this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hosts="" service=worker expect="" slots=1 controller=gloo keys=/cluster/ssh port=2222 iface=eth0
wait_s=120
while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) hosts=$2; shift 2 ;;
        --service) service=$2; shift 2 ;;
        --expect) expect=$2; shift 2 ;;
        --wait) wait_s=$2; shift 2 ;;
        --slots) slots=$2; shift 2 ;;
        --controller) controller=$2; shift 2 ;;
        --keys) keys=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --iface) iface=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "launch.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "launch.sh: no command given (launch.sh [options] -- COMMAND...)" >&2; exit 2; }

# getent fails while the name does not resolve yet (or never: a network without DNS); that is
# "no worker found", not an error that would end the script (set -e, pipefail) without a word.
resolve() {
    { getent ahostsv4 "$service" || true; } | awk '{print $1}' | sort -u -t. -k1,1n -k2,2n -k3,3n -k4,4n
}
waited="given by --hosts"
if [ -z "$hosts" ]; then
    want=${expect:-1}
    waited="resolved as $service within ${wait_s} s"
    for _ in $(seq "$wait_s"); do
        found=$(resolve | wc -l)
        [ "$found" -ge "$want" ] && break
        sleep 1
    done
    hosts=$(resolve | paste -sd, -)
    [ -n "$hosts" ] || { echo "launch.sh: no host resolves as $service within ${wait_s} s" \
        "(is there DNS on the containers' network? podman: the dnsname plugin)" >&2; exit 1; }
fi
IFS=, read -r -a host_list <<<"$hosts"
# Fewer workers than expected is an error, never a smaller job: a job on fewer ranks would
# train, compress and reduce something else than what was asked for, and exit 0.
if [ -n "$expect" ] && [ "${#host_list[@]}" -lt "$expect" ]; then
    echo "launch.sh: only ${#host_list[@]} of the $expect expected workers ($hosts, $waited);" \
        "start them all (docker compose up --scale worker=$expect) or pass" \
        "--expect ${#host_list[@]}" >&2
    exit 1
fi

"$here/ssh-client.sh" "$keys" "$port"
export PATH="$keys/bin:$PATH"
for h in "${host_list[@]}"; do                 # wait for every worker's sshd
    for i in $(seq 60); do
        ssh -o BatchMode=yes "$h" true 2>/dev/null && break
        [ "$i" = 60 ] && { echo "launch.sh: no SSH on $h:$port" >&2; exit 1; }
        sleep 1
    done
done
np=$(( ${#host_list[@]} * slots ))
spec=$(printf "%s:$slots," "${host_list[@]}"); spec=${spec%,}
echo "launch.sh: $np ranks on $spec ($controller)"
case "$controller" in
    gloo|mpi)
        exec horovodrun --"$controller" -np "$np" -H "$spec" --network-interface "$iface" "$@" ;;
    mpirun)
        exec mpirun --allow-run-as-root -np "$np" -H "$spec" --bind-to none --map-by slot \
            --mca plm_rsh_agent "$keys/bin/ssh" --mca btl_tcp_if_include "$iface" \
            --mca oob_tcp_if_include "$iface" -x PATH -x LD_LIBRARY_PATH -x PYTHONPATH "$@" ;;
    *) echo "launch.sh: controller must be gloo, mpi or mpirun" >&2; exit 2 ;;
esac
