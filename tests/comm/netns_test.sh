#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, each with its own
# host name (a UTS namespace), two ranks in each. Rank 0's bootstrap listens on the first
# namespace's address; ranks on different "hosts" talk TCP across the veth, ranks on the same
# one shared memory, so the TCP transport and the hierarchical algorithm run across hosts.
# Each world runs comm_worker's correctness matrix (--quick): once with the automatic
# algorithm choice, once with KILN_COMM_ALGO=hierarchical, once with ring; then the fault
# worlds (run_fault), then the network-fault worlds (lossy and congested links, partitions).
#
#   netns_test.sh COMM_WORKER [matrix|faults|lossy|partitions]   (default: all four)
#
# Needs root and `ip netns`; otherwise exits 77 (ctest: skipped). Cleans up after itself.
set -uo pipefail

usage="usage: netns_test.sh COMM_WORKER [matrix|faults|lossy|partitions]"
worker=${1:?$usage}
what=${2:-all}
case $what in matrix | faults | lossy | partitions | all) ;; *) echo "$usage"; exit 2 ;; esac
skip() { echo "SKIP: $*"; exit 77; }

[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
[[ -x $worker ]] || { echo "FAIL: no worker at $worker"; exit 1; }
if [[ $what == lossy || $what == partitions ]]; then
  command -v nft >/dev/null || skip "nft (nftables) is not installed: scripts/install-deps.sh installs it"
  command -v tc >/dev/null || skip "tc (iproute2) is not installed"
fi

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

# verdict NAME START BAD: the world's result line; counts a failure.
verdict() {
  if (($3)); then
    echo "[ FAIL ] $1 ($((SECONDS - $2)) s)"
    failures=$((failures + 1))
  else
    echo "[  OK  ] $1 ($((SECONDS - $2)) s)"
  fi
}

# check_fault_line NAME RANK: prints rank RANK's FAULT line (kept in $fault_line); false, with
# the reason, when there is none, when its AllReduce did not fail or when the message does not
# name the operation.
check_fault_line() {
  local name=$1 i=$2 ok=0
  fault_line=$(grep -m1 '^FAULT rank=' "$tmp/$name.$i.out")
  echo "    ${fault_line:0:220}"
  if [[ -z $fault_line ]]; then
    echo "  rank $i: no fault report:"; tail -n 5 "$tmp/$name.$i.err" | sed 's/^/    /'; return 1
  fi
  [[ $fault_line =~ code=0\  ]] && { echo "  rank $i: its AllReduce did not fail"; ok=1; }
  [[ $fault_line =~ AllReduce ]] || { echo "  rank $i: the message does not name the operation"; ok=1; }
  return $ok
}

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
  ((bad)) || grep -h " cases, " "$tmp/$name.0.out" | sed 's/^/    /'
  verdict "$name" "$start" "$bad"
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
    check_fault_line "$name" "$i" || bad=1
    [[ -z $fault_line ]] && continue
    local line=$fault_line
    [[ $line =~ rank\ $victim[^0-9] ]] || { echo "  rank $i: the message does not name rank $victim"; bad=1; }
    [[ $line =~ "has not started this operation" ]] && saw_behind=1
    local secs=${line#*seconds=}
    secs=${secs%% *}
    awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s <= t + 1.5) }' ||
      { echo "  rank $i: failed after $secs s, the timeout is $timeout_s s"; bad=1; }
  done
  if [[ $kind == hang ]] && ((!saw_behind)); then
    echo "  no survivor saw that rank $victim has not started the AllReduce"; bad=1
  fi
  verdict "$name" "$start" "$bad"
}

# ---- Network faults --------------------------------------------------------------------
# tc netem is what the issue names, and this kernel has no sch_netem (a VM without loadable
# modules). What it has does most of the job: nftables' `numgen random` drops a share of the
# packets leaving a namespace (random loss), tbf queues packets beyond a rate and drops what
# overflows its queue (congestion: queueing delay, losses in bursts), and a rule dropping
# every packet cuts the link (a partition). A fixed added latency and reordering have no
# substitute here (docs/reliability.md).

# link_filter RULE: packets leaving either namespace through the veth meet the nft rule RULE
# (for example "numgen random mod 100 < 5 drop"); empty: none.
link_filter() {
  local rule=$1 ns dev
  for side in a b; do
    if [[ $side == a ]]; then ns=$ns_a dev=$veth_a; else ns=$ns_b dev=$veth_b; fi
    ip netns exec "$ns" nft delete table inet kiln_link 2>/dev/null
    [[ -z $rule ]] && continue
    ip netns exec "$ns" nft add table inet kiln_link || return 1
    ip netns exec "$ns" nft add chain inet kiln_link out '{ type filter hook output priority 0; }' || return 1
    ip netns exec "$ns" nft add rule inet kiln_link out oifname "$dev" $rule || return 1
  done
}

# link_shape TBF_ARGS: a tbf qdisc at both ends of the veth ("rate 200mbit burst 32kb limit
# 64kb"); empty: removed.
link_shape() {
  local ns dev
  for side in a b; do
    if [[ $side == a ]]; then ns=$ns_a dev=$veth_a; else ns=$ns_b dev=$veth_b; fi
    if [[ -z $1 ]]; then
      ip -n "$ns" link show "$dev" >/dev/null 2>&1 && tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
    else
      # shellcheck disable=SC2086
      tc -n "$ns" qdisc replace dev "$dev" root tbf $1 || return 1
    fi
  done
  true
}

# TCP segments retransmitted in both namespaces so far (their own counters, /proc/net/snmp).
retransmits() {
  local total=0 n ns
  for ns in "$ns_a" "$ns_b"; do
    n=$(ip netns exec "$ns" awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "RetransSegs") c = i; h = 1 } else print $c }' /proc/net/snmp)
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# Packets the filters' counters saw dropped, both namespaces (a FILTER counts with `counter`).
dropped_packets() {
  local total=0 n ns
  for ns in "$ns_a" "$ns_b"; do
    n=$(ip netns exec "$ns" nft list table inet kiln_link 2>/dev/null | awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") s += $(i + 1) } END { print s + 0 }')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# run_lossy NAME FILTER SHAPE: the correctness matrix over a link with FILTER and SHAPE
# (link_filter, link_shape): every result must be right, and the filter's counter must have
# dropped packets (the losses happened).
run_lossy() {
  local name=$1 before
  link_filter "$2" && link_shape "$3" || { echo "[ FAIL ] $name: cannot set up the link"; failures=$((failures + 1)); return; }
  before=$(retransmits)
  run_world "$name"
  local dropped
  dropped=$(dropped_packets)
  echo "    packets dropped by the filter: $dropped, TCP retransmissions during the world: $(($(retransmits) - before))"
  # None dropped would mean the world above proved nothing about losses.
  ((dropped > 0)) || { echo "[ FAIL ] $name: the link's filter dropped nothing"; failures=$((failures + 1)); }
  link_filter ""
  link_shape ""
}

# start_ranks NAME TIMEOUT WORKER_ARGS...: the four ranks (as run_world), in the background.
start_ranks() {
  local name=$1 timeout_s=$2
  shift 2
  local port=$((20000 + (RANDOM % 20000)))
  pids=()
  for rank in 0 1 2 3; do
    local ns=$ns_a host=kiln-host-a
    if ((rank >= 2)); then ns=$ns_b host=kiln-host-b; fi
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" \
      env KILN_RANK=$rank KILN_WORLD_SIZE=4 KILN_ROOT_ADDR="$addr_a:$port" KILN_COMM_TIMEOUT=$timeout_s \
      timeout -s KILL 60 "$worker" "$@" >"$tmp/$name.$rank.out" 2>"$tmp/$name.$rank.err" &
    pids+=($!)
  done
}

# wait_started NAME: until every rank has printed STARTED (its first operations done), at
# most 30 s; false if one has not.
wait_started() {
  local name=$1 started i
  for _ in $(seq 300); do
    started=0
    for i in 0 1 2 3; do grep -q '^STARTED' "$tmp/$name.$i.out" 2>/dev/null && started=$((started + 1)); done
    ((started == 4)) && return 0
    sleep 0.1
  done
  echo "  the ranks did not all start within 30 s"
  return 1
}

# run_short_partition NAME CUT_AT SECONDS: AllReduces (checked) for 8 s with a 20 s timeout;
# the link is cut CUT_AT s after every rank started its operations, for SECONDS: every rank must ride it out (TCP
# retransmits once the link is back), with right results and its slowest operation at least
# as long as most of the cut.
run_short_partition() {
  local name=$1 cut_at=$2 cut_for=$3 start=$SECONDS bad=0
  start_ranks "$name" 20 endure 8
  wait_started "$name" || bad=1
  sleep "$cut_at"
  link_filter "drop"
  sleep "$cut_for"
  link_filter ""
  for i in 0 1 2 3; do wait "${pids[$i]}" || bad=1; done
  pids=()
  for i in 0 1 2 3; do
    local line
    line=$(grep -m1 '^ENDURE rank=' "$tmp/$name.$i.out")
    echo "    ${line:0:220}"
    [[ $line =~ wrong=0\ code=0\  ]] || { echo "  rank $i: not every operation succeeded with the right sum"; tail -n 3 "$tmp/$name.$i.err" | sed 's/^/    /'; bad=1; continue; }
    local longest=${line#*longest=}
    longest=${longest%% *}
    awk -v l="$longest" -v c="$cut_for" 'BEGIN { exit !(l >= 0.75 * c) }' ||
      { echo "  rank $i: its slowest operation took $longest s: the ${cut_for} s cut was not felt"; bad=1; }
  done
  verdict "$name" "$start" "$bad"
}

# run_long_partition NAME: AllReduces back to back with a 2 s timeout; half a second after
# every rank finished its warm-up the link is cut for good: every rank must fail within the timeout (1.5 s of slack) of the
# cut, with a message naming the operation and a rank.
run_long_partition() {
  local name=$1 timeout_s=2 start=$SECONDS bad=0 cut
  start_ranks "$name" $timeout_s fault partition 0
  wait_started "$name" || bad=1
  sleep 0.5
  link_filter "drop"
  cut=$(date +%s.%N)
  for i in 0 1 2 3; do { wait "${pids[$i]}"; } 2>/dev/null; done
  pids=()
  link_filter ""
  for i in 0 1 2 3; do
    check_fault_line "$name" "$i" || bad=1
    [[ -z $fault_line ]] && continue
    local line=$fault_line
    [[ $line =~ rank\ [0-9] ]] || { echo "  rank $i: the message names no rank"; bad=1; }
    local at=${line#*epoch=}
    at=${at%% *}
    awk -v a="$at" -v c="$cut" -v t="$timeout_s" 'BEGIN { d = a - c; printf "    rank failed %.2f s after the cut\n", d; exit !(d <= t + 1.5) }' ||
      { echo "  rank $i: failed too late after the cut (timeout $timeout_s s)"; bad=1; }
  done
  verdict "$name" "$start" "$bad"
}

worlds=0
if [[ $what == all || $what == matrix ]]; then
  run_world auto
  run_world hierarchical KILN_COMM_ALGO=hierarchical
  run_world ring KILN_COMM_ALGO=ring
  worlds=3
fi
if [[ $what == all || $what == faults ]]; then
  run_fault fault_kill_rank3 kill 3
  run_fault fault_hang_rank3 hang 3
  run_fault fault_hang_rank3_tcp hang 3 KILN_COMM_TRANSPORT=tcp
  worlds=$((worlds + 3))
fi
if [[ $what == all || $what == lossy ]] && command -v nft >/dev/null; then
  run_lossy lossy_1pct "numgen random mod 100 < 1 counter drop" ""
  run_lossy lossy_5pct_congested "numgen random mod 100 < 5 counter drop" "rate 200mbit burst 32kb limit 64kb"
  worlds=$((worlds + 2))
fi
if [[ $what == all || $what == partitions ]] && command -v nft >/dev/null; then
  run_short_partition partition_2s 2 2
  run_long_partition partition_for_good
  worlds=$((worlds + 2))
fi
echo "$worlds worlds over two namespaces, $failures failed"
((failures == 0))
