#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, each with its own
# host name (a UTS namespace), two ranks in each. Rank 0's bootstrap listens on the first
# namespace's address; ranks on different "hosts" talk TCP across the veth, ranks on the same
# one shared memory, so the TCP transport and the hierarchical algorithm run across hosts.
# Each world runs comm_worker's correctness matrix (--quick): once with the automatic
# algorithm choice, once with KILN_COMM_ALGO=hierarchical, once with ring; then the fault
# worlds (run_fault).
#
#   netns_test.sh COMM_WORKER [matrix|faults]   (default: both)
#
# Needs root and `ip netns`; otherwise exits 77 (ctest: skipped). Cleans up after itself.
set -uo pipefail

worker=${1:?usage: netns_test.sh COMM_WORKER [matrix|faults]}
what=${2:-all}
case $what in matrix | faults | all) ;; *) echo "usage: netns_test.sh COMM_WORKER [matrix|faults]"; exit 2 ;; esac
skip() { echo "SKIP: $*"; exit 77; }

[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
[[ -x $worker ]] || { echo "FAIL: no worker at $worker"; exit 1; }

id=$$
ns_a=kiln-comm-a-$id
ns_b=kiln-comm-b-$id
veth_a=vkc${id}a
veth_b=vkc${id}b
veth_a=${veth_a:0:15}
veth_b=${veth_b:0:15}
subnet=10.$((200 + id % 50)).$((id / 50 % 250)).
addr_a=${subnet}1
addr_b=${subnet}2
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  ip link del "$veth_a" 2>/dev/null
  true
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$ns_a" 2>/dev/null || skip "ip netns add failed (no network namespace support here)"
ip netns add "$ns_b" || { echo "FAIL: ip netns add $ns_b"; exit 1; }
set -e
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
set +e
# The link comes up asynchronously; wait until the namespaces reach each other (the ranks'
# connects retry until KILN_COMM_TIMEOUT anyway).
if command -v ping >/dev/null; then
  for _ in $(seq 50); do
    ip netns exec "$ns_a" ping -c1 -W1 "$addr_b" >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
echo "namespaces $ns_a ($addr_a) and $ns_b ($addr_b) joined by $veth_a/$veth_b"

tmp=$(mktemp -d)
trap 'cleanup; rm -rf "$tmp"' EXIT

# run_world NAME [VAR=VALUE ...]: 4 ranks, 0-1 on host a, 2-3 on host b.
failures=0
run_world() {
  local name=$1
  shift
  local port=$((20000 + (RANDOM % 20000)))
  local start=$SECONDS
  pids=()
  for rank in 0 1 2 3; do
    local ns=$ns_a host=kiln-host-a
    if ((rank >= 2)); then ns=$ns_b host=kiln-host-b; fi
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" \
      env KILN_RANK=$rank KILN_WORLD_SIZE=4 KILN_ROOT_ADDR="$addr_a:$port" KILN_COMM_TIMEOUT=20 "$@" \
      timeout -s KILL 90 "$worker" matrix --quick >"$tmp/$name.$rank.out" 2>"$tmp/$name.$rank.err" &
    pids+=($!)
  done
  local bad=0
  for i in 0 1 2 3; do
    if ! wait "${pids[$i]}"; then
      bad=1
      echo "  rank $i failed:"
      tail -n 5 "$tmp/$name.$i.out" "$tmp/$name.$i.err" | sed 's/^/    /'
    fi
  done
  pids=()
  if ((bad)); then
    echo "[ FAIL ] $name ($((SECONDS - start)) s)"
    failures=$((failures + 1))
  else
    grep -h " cases, " "$tmp/$name.0.out" | sed 's/^/    /'
    echo "[  OK  ] $name ($((SECONDS - start)) s)"
  fi
}

# run_fault NAME KIND VICTIM [VAR=VALUE ...]: a rank SIGKILLed in the middle of an AllReduce
# (kill), or alive with its stream blocked so that it never starts the next one (hang): the
# three others must fail within KILN_COMM_TIMEOUT (2 s, 1.5 s of slack) with a message naming
# the victim. For a hang, one of them must have seen that the victim has not started the
# operation: the first host's ranks see a victim of the second one only through its TCP status
# channel, across the veth (and with KILN_COMM_TRANSPORT=tcp its own host's rank too).
run_fault() {
  local name=$1 kind=$2 victim=$3 timeout_s=2
  shift 3
  local port=$((20000 + (RANDOM % 20000)))
  local start=$SECONDS
  pids=()
  for rank in 0 1 2 3; do
    local ns=$ns_a host=kiln-host-a
    if ((rank >= 2)); then ns=$ns_b host=kiln-host-b; fi
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" \
      env KILN_RANK=$rank KILN_WORLD_SIZE=4 KILN_ROOT_ADDR="$addr_a:$port" KILN_COMM_TIMEOUT=$timeout_s "$@" \
      timeout -s KILL 40 "$worker" fault "$kind" $victim >"$tmp/$name.$rank.out" 2>"$tmp/$name.$rank.err" &
    pids+=($!)
  done
  local bad=0 survivors=() saw_behind=0
  for i in 0 1 2 3; do ((i == victim)) || survivors+=("$i"); done
  for i in "${survivors[@]}"; do { wait "${pids[$i]}"; } 2>/dev/null; done
  # A hung victim never exits by itself: timeout(1) passes the TERM on to it.
  kill -TERM "${pids[$victim]}" 2>/dev/null
  { wait "${pids[$victim]}"; } 2>/dev/null
  pids=()
  for i in "${survivors[@]}"; do
    local line
    line=$(grep -m1 '^FAULT rank=' "$tmp/$name.$i.out")
    echo "    ${line:0:220}"
    if [[ -z $line ]]; then
      echo "  rank $i: no fault report:"; tail -n 5 "$tmp/$name.$i.err" | sed 's/^/    /'; bad=1; continue
    fi
    [[ $line =~ code=0\  ]] && { echo "  rank $i: its AllReduce did not fail"; bad=1; }
    [[ $line =~ rank\ $victim[^0-9] ]] || { echo "  rank $i: the message does not name rank $victim"; bad=1; }
    [[ $line =~ AllReduce ]] || { echo "  rank $i: the message does not name the operation"; bad=1; }
    [[ $line =~ "has not started this operation" ]] && saw_behind=1
    local secs=${line#*seconds=}
    secs=${secs%% *}
    awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s <= t + 1.5) }' ||
      { echo "  rank $i: failed after $secs s, the timeout is $timeout_s s"; bad=1; }
  done
  if [[ $kind == hang ]] && ((!saw_behind)); then
    echo "  no survivor saw that rank $victim has not started the AllReduce"; bad=1
  fi
  if ((bad)); then
    echo "[ FAIL ] $name ($((SECONDS - start)) s)"
    failures=$((failures + 1))
  else
    echo "[  OK  ] $name ($((SECONDS - start)) s)"
  fi
}

worlds=0
if [[ $what != faults ]]; then
  run_world auto
  run_world hierarchical KILN_COMM_ALGO=hierarchical
  run_world ring KILN_COMM_ALGO=ring
  worlds=3
fi
if [[ $what != matrix ]]; then
  run_fault fault_kill_rank3 kill 3
  run_fault fault_hang_rank3 hang 3
  run_fault fault_hang_rank3_tcp hang 3 KILN_COMM_TRANSPORT=tcp
  worlds=$((worlds + 3))
fi
echo "$worlds worlds over two namespaces, $failures failed"
((failures == 0))
