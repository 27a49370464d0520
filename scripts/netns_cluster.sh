#!/usr/bin/env bash
# netns_cluster.sh: several "hosts" on one Linux machine, for the multi-host test and the
# end-to-end benchmark. Host i is network namespace hh<i> with interface eth0 = 10.77.0.<i>/24,
# joined to the others through bridge hhbr0 by a veth pair, and runs the worker's sshd
# (docker/scripts/sshd.sh) on port 2222, exactly as a worker container does. Needs root.
#
#   netns_cluster.sh up N [RATE]   create hosts 1..N (links shaped to RATE, e.g. 100mbit)
#   netns_cluster.sh shape RATE    reshape every link (RATE "none": unshaped)
#   netns_cluster.sh bytes         bytes every host sent and received so far: "i tx rx" lines
#   netns_cluster.sh exec I CMD... run CMD inside host I (its network, hostname and /etc/hosts)
#   netns_cluster.sh down          remove every host, the bridge and the sshd processes
#
# Environment: HH_CLUSTER_DIR (default /tmp/hh-netns): SSH keys, sshd configs, logs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state=${HH_CLUSTER_DIR:-/tmp/hh-netns}
port=2222
subnet=10.77.0

hosts() { ip netns list | awk '/^hh[0-9]+/ {sub("hh", "", $1); print $1}' | sort -n; }

# Token-bucket depth for a link of RATE (e.g. 100mbit, 1gbit), in bytes: 1 ms at the rate, at
# least 16 KB (ten full-size frames). A bucket much deeper than that lets a transfer smaller than
# it leave at the speed of the veth pair after an idle pause (a 4 Mbit bucket sent 361 KB in
# 0.5 ms on a "100 Mbit/s" link), so compressed gradients would never see the link's rate.
# The qdisc's watchdog is an hrtimer, so the bucket need not cover a scheduler tick.
# HH_LINK_LATENCY (default 100ms): the longest a packet may wait in the link's queue, which
# sets the queue's depth (docs/benchmarks.md measures 20ms against 100ms at 10 Mbit/s).
burst_bytes() {
    local rate=$1 bits
    case $rate in
        *gbit) bits=$(( ${rate%gbit} * 1000000000 )) ;;
        *mbit) bits=$(( ${rate%mbit} * 1000000 )) ;;
        *kbit) bits=$(( ${rate%kbit} * 1000 )) ;;
        *) echo "unknown rate $rate (use kbit, mbit or gbit)" >&2; return 1 ;;
    esac
    local bytes=$(( bits / 8 / 1000 ))
    echo $(( bytes > 16000 ? bytes : 16000 ))
}

shape() {
    local rate=$1 i burst=
    [ "$rate" = none ] || burst=$(burst_bytes "$rate")
    for i in $(hosts); do
        for spec in "hhv$i" "netns hh$i eth0"; do
            set -- $spec
            if [ "$1" = netns ]; then run=(ip netns exec "$2"); dev=$3; else run=(); dev=$1; fi
            "${run[@]}" tc qdisc del dev "$dev" root 2>/dev/null || true
            if [ "$rate" != none ]; then
                "${run[@]}" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" \
                    latency "${HH_LINK_LATENCY:-100ms}"
            fi
        done
    done
}

up() {
    local n=$1 rate=${2:-none} i
    down quiet
    mkdir -p "$state"
    "$here/docker/scripts/ssh-keys.sh" "$state/ssh"
    { echo "127.0.0.1 localhost"; for i in $(seq "$n"); do echo "$subnet.$i hh$i"; done; } \
        >"$state/hosts"
    ip link add hhbr0 type bridge
    ip link set hhbr0 up
    for i in $(seq "$n"); do
        ip netns add "hh$i"
        ip link add "hhv$i" type veth peer name eth0 netns "hh$i"
        ip link set "hhv$i" master hhbr0 up
        ip netns exec "hh$i" ip addr add "$subnet.$i/24" dev eth0
        ip netns exec "hh$i" ip link set eth0 up
        ip netns exec "hh$i" ip link set lo up
        # Own hostname (UTS namespace) and /etc/hosts (mount namespace), as in a container:
        # Horovod tells hosts apart by hostname and Gloo resolves it.
        ip netns exec "hh$i" unshare --uts --mount sh -c "hostname hh$i && \
            mount --bind '$state/hosts' /etc/hosts && exec setsid \
            '$here/docker/scripts/sshd.sh' '$state/ssh' $port '$state/sshd-hh$i.pid'" \
            >"$state/sshd-hh$i.log" 2>&1 < /dev/null &
    done
    shape "$rate"
    for i in $(seq "$n"); do                   # sshd listening in every namespace?
        for t in $(seq 50); do
            ip netns exec "hh$i" bash -c "exec 3<>/dev/tcp/$subnet.$i/$port" 2>/dev/null && break
            [ "$t" = 50 ] && { echo "sshd did not start in hh$i:"; cat "$state/sshd-hh$i.log"; exit 1; }
            sleep 0.2
        done
    done
    echo "hosts up: $(hosts | sed "s/^/$subnet./" | paste -sd, -) (links: $rate)"
}

down() {
    local i pid
    for i in $(hosts); do
        if [ -f "$state/sshd-hh$i.pid" ]; then
            pid=$(cat "$state/sshd-hh$i.pid")
            kill "$pid" 2>/dev/null || true
        fi
        # Anything still running in the namespace (ranks of an interrupted job) goes too.
        for pid in $(ip netns pids "hh$i" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip link del "hhv$i" 2>/dev/null || true
        ip netns del "hh$i"
    done
    ip link del hhbr0 2>/dev/null || true
    [ "${1:-}" = quiet ] || echo "hosts down"
}

enter() {           # run a command inside host i (network, hostname and /etc/hosts)
    local i=$1
    shift
    # Entering the mount namespace resets the working directory: go back to the caller's.
    nsenter -t "$(cat "$state/sshd-hh$i.pid")" -n -u -m -- sh -c 'cd "$0" && exec "$@"' "$PWD" "$@"
}

bytes() {
    local i
    for i in $(hosts); do   # the root-side veth sends what host i receives, and vice versa
        echo "$i $(cat /sys/class/net/hhv$i/statistics/rx_bytes) $(cat /sys/class/net/hhv$i/statistics/tx_bytes)"
    done
}

case "${1:-}" in
    up) up "${2:?netns_cluster.sh up N [RATE]}" "${3:-none}" ;;
    shape) shape "${2:?netns_cluster.sh shape RATE}" ;;
    bytes) bytes ;;
    exec) shift; enter "${1:?netns_cluster.sh exec I COMMAND...}" "${@:2}" ;;
    down) down ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
esac
