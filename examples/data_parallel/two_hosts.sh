#!/usr/bin/env bash
# data_parallel across two "hosts" joined by a slow link: two network namespaces and a veth
# pair whose both ends are rate-limited with a token bucket (tc tbf; default 1 Gbit/s), one
# rank in each (TCP between them). Here, unlike with ranks on one machine's shared memory,
# moving gradients takes wire time rather than CPU, which is what overlap hides in real
# multi-host training.
#
#   two_hosts.sh DATA_PARALLEL [RATE] [data_parallel options...]
#   e.g. two_hosts.sh build/release/examples/data_parallel/data_parallel 1gbit --batch 256
#
# RANKS_PER_HOST=2 (default 1) runs two ranks in each namespace: 4 ranks, shared memory
# within a "host" and TCP across, so the all-reduce is the hierarchical one.
#
# Needs root, iproute2 (ip, tc) and util-linux (unshare); cleans up after itself.
set -uo pipefail

bin=${1:?usage: two_hosts.sh DATA_PARALLEL [RATE] [data_parallel options...]}
rate=${2:-1gbit}
shift 2 2>/dev/null || shift $#
[[ $(id -u) == 0 ]] || { echo "two_hosts.sh: needs root (network namespaces)"; exit 1; }
for cmd in ip tc unshare; do
  command -v $cmd >/dev/null || { echo "two_hosts.sh: $cmd is not installed"; exit 1; }
done
[[ -x $bin ]] || { echo "two_hosts.sh: no data_parallel at $bin"; exit 1; }
per_host=${RANKS_PER_HOST:-1}
[[ $per_host =~ ^[1-9][0-9]*$ ]] || { echo "two_hosts.sh: RANKS_PER_HOST=$per_host is not a count"; exit 1; }
world=$((2 * per_host))

id=$$
ns=(kiln-dp-a-$id kiln-dp-b-$id)
veth=(vdp${id}a vdp${id}b)
subnet=10.$((200 + id % 50)).$((id / 50 % 250)).
addr=(${subnet}1 ${subnet}2)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null; done
  true
}
trap cleanup EXIT
trap 'exit 1' INT TERM

set -e
for i in 0 1; do ip netns add "${ns[$i]}"; done
ip link add "${veth[0]:0:15}" type veth peer name "${veth[1]:0:15}"
for i in 0 1; do
  v=${veth[$i]:0:15}
  ip link set "$v" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "$v"
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" link set "$v" up
  ip netns exec "${ns[$i]}" tc qdisc add dev "$v" root tbf rate "$rate" burst 256kb latency 100ms
done
set +e
echo "two hosts: ${ns[0]} (${addr[0]}) and ${ns[1]} (${addr[1]}), veth rate-limited to $rate each way, $per_host rank(s) each"

port=$((20000 + RANDOM % 20000))
out=$(mktemp)
for ((rank = 0; rank < world; rank++)); do
  host=$((rank / per_host))
  ip netns exec "${ns[$host]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "dp-host-$host" \
    env KILN_RANK=$rank KILN_WORLD_SIZE=$world KILN_ROOT_ADDR="${addr[0]}:$port" KILN_COMM_TIMEOUT=60 \
    KILN_NUM_THREADS=${KILN_NUM_THREADS:-1} \
    timeout -s KILL 600 "$bin" --processes "$@" >"$out.$rank" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()
cat "$out.0"
if [[ $status != 0 ]]; then
  for ((rank = 1; rank < world; rank++)); do echo "--- rank $rank:"; cat "$out.$rank"; done
fi
rm -f "$out" "$out".*
exit $status
