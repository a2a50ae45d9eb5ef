#!/usr/bin/env bash
# dlb scale-out demo: three dispatchers behind a router doing ECMP. It
# builds a lab (scripts/lab.sh -x 3: a client behind a router namespace,
# three dispatchers and four HTTP backends on one segment), runs a dlbd in
# each dispatcher namespace, configures them identically with dlbctl (each
# announcing the VIP over BGP with its own router id), starts FRR's bgpd
# (or, without FRR, BIRD 2) in the router namespace, sends traffic through
# the VIP, loses one dispatcher under load and shows that no connection
# broke; then removes everything again.
#
# Usage: make demo   (or: bash scripts/demo-scaleout.sh after "make build"), as root.
set -euo pipefail

export LAB_PREFIX=${LAB_PREFIX:-dlbdemox}
# shellcheck source=scripts/demo-lib.sh
source "$(dirname "$0")/demo-lib.sh"
# Before the trap below: a demo that finds the lab in use leaves it alone.
demo_claim_lab /sys/fs/bpf/"${LAB_PREFIX}"-d1 /sys/fs/bpf/"${LAB_PREFIX}"-d2 /sys/fs/bpf/"${LAB_PREFIX}"-d3

router=
if [ -x /usr/lib/frr/bgpd ] && [ -x /usr/lib/frr/zebra ]; then
	router=frr
elif command -v bird >/dev/null; then
	router=bird
else
	echo "demo: the scale-out scene needs FRR or BIRD 2 (make test-deps installs both); skipped" >&2
	exit 0
fi

# The routers run as their own user (FRR) and need a directory they can
# reach: not under a private temporary directory.
run=$(mktemp -d /tmp/dlbdemox.XXXXXX)
chmod 755 "$run"
pids=()

cleanup() {
	set +e
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	for f in "$run"/router/*.pid; do
		[ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	sleep 0.2
	rm -rf /sys/fs/bpf/"${LAB_PREFIX}"-d1 /sys/fs/bpf/"${LAB_PREFIX}"-d2 /sys/fs/bpf/"${LAB_PREFIX}"-d3
	"$lab" down >/dev/null 2>&1
	rm -rf "$run"
	demo_release_bpffs
	demo_release_lab
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ctl N ARGS: dlbctl against dispatcher N, shown as the operator types it.
ctl() {
	local n=$1
	shift
	printf '[d%s]$ dlbctl %s\n' "$n" "$*"
	"$bin/dlbctl" --socket "$run/d$n/dlbd.sock" "$@"
}
quiet() {
	local n=$1
	shift
	"$bin/dlbctl" --socket "$run/d$n/dlbd.sock" "$@"
}
# hops prints the router's next hops to the VIP.
hops() { ip -n "$LAB_ROUTER_NS" route show "$LAB_VIP/32" | sed 's/^/    /'; }
hop_count() { ip -n "$LAB_ROUTER_NS" route show "$LAB_VIP/32" | grep -c via || true; }
wait_hops() {
	for _ in $(seq 300); do
		[ "$(hop_count)" = "$1" ] && return 0
		sleep 0.1
	done
	echo "demo: the router did not get $1 next hops to the VIP" >&2
	return 1
}

step "lab: a client behind a router, three dispatchers and four backends on one segment (scripts/lab.sh -x 3)"
"$lab" up -n 4 -c 1 -x 3
eval "$("$lab" env)"

step "start a dlbd in each dispatcher namespace"
for n in 1 2 3; do
	mkdir -p "$run/d$n"
	ns_var=LAB_D${n}_NS
	nsenter --net="/run/netns/${!ns_var}" "$bin/dlbd" --socket "$run/d$n/dlbd.sock" --state-dir "$run/d$n/state" \
		--pin-dir "/sys/fs/bpf/${LAB_PREFIX}-d$n" >"$run/d$n/dlbd.log" 2>&1 &
	pids+=($!)
done
for n in 1 2 3; do
	for _ in $(seq 50); do
		[ -S "$run/d$n/dlbd.sock" ] && break
		sleep 0.1
	done
done

step "configure them alike (file save on one, file load on the others); each announces the VIP with its own router id"
servers="$LAB_B1_ADDR+$LAB_B2_ADDR+$LAB_B3_ADDR+$LAB_B4_ADDR"
ctl 1 executor start --interface "$LAB_IF" --xdp-mode generic
ctl 1 cluster add "$LAB_VIP" --announce yes
ctl 1 port add "$LAB_VIP@80"
ctl 1 server add "$LAB_VIP@80@$servers" --weight 10
ctl 1 advisor start http "$LAB_VIP@80" --interval 1 --fall 2 --rise 1
ctl 1 file save "$run/dlb.cfg"
for n in 2 3; do
	ctl "$n" file load "$run/dlb.cfg"
done
for n in 1 2 3; do
	addr_var=LAB_D${n}_ADDR
	ctl "$n" executor set nfa "${!addr_var}"
	ctl "$n" bgp set --asn 65001 --routerid "${!addr_var}"
	ctl "$n" bgp neighbor add "$LAB_ROUTER_ADDR" --remote-as 65000
done

step "start $router in the router namespace ($LAB_ROUTER_NS), ECMP over the dispatchers"
mkdir -p "$run/router"
if [ "$router" = frr ]; then
	{
		printf 'frr defaults datacenter\nhostname dlbdemo\nrouter bgp 65000\n bgp router-id %s\n' "$LAB_ROUTER_ADDR"
		printf ' no bgp ebgp-requires-policy\n neighbor dlb peer-group\n neighbor dlb remote-as 65001\n neighbor dlb timers 3 9\n'
		for a in $LAB_DISPATCHER_ADDRS; do printf ' neighbor %s peer-group dlb\n' "$a"; done
		printf ' address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\n'
	} >"$run/router/bgpd.conf"
	printf 'hostname dlbdemo\n' >"$run/router/zebra.conf"
	chown -R frr:frr "$run/router"
	sed 's/^/    /' "$run/router/bgpd.conf"
	for d in zebra bgpd; do
		nsenter --net="/run/netns/$LAB_ROUTER_NS" /usr/lib/frr/$d -d -f "$run/router/$d.conf" -i "$run/router/$d.pid" \
			-z "$run/router/zserv.api" --vty_socket "$run/router" -A 127.0.0.1 -P 0 --log "file:$run/router/$d.log"
	done
else
	{
		printf 'router id %s;\nprotocol device { }\n' "$LAB_ROUTER_ADDR"
		printf 'protocol kernel { ipv4 { import none; export all; }; merge paths on; }\n'
		printf 'template bgp dlb {\n  local %s as 65000;\n  hold time 9; keepalive time 3; connect retry time 2;\n' "$LAB_ROUTER_ADDR"
		printf '  error wait time 1, 10;\n  ipv4 { import all; export none; };\n}\n'
		i=0
		for a in $LAB_DISPATCHER_ADDRS; do
			i=$((i + 1))
			printf 'protocol bgp d%s from dlb { neighbor %s as 65001; }\n' "$i" "$a"
		done
	} >"$run/router/bird.conf"
	sed 's/^/    /' "$run/router/bird.conf"
	nsenter --net="/run/netns/$LAB_ROUTER_NS" bird -c "$run/router/bird.conf" -s "$run/router/bird.ctl" -P "$run/router/bird.pid"
fi
wait_hops 3
ctl 1 bgp report
echo "the router's route to the VIP:"
hops

step "3000 HTTP requests from the client (a new connection each): the router spreads them, each dispatcher picks the same server for a flow"
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 3000 -c 20
for n in 1 2 3; do
	printf 'dispatcher %s scheduled %s connections\n' "$n" \
		"$(quiet "$n" port report -o json | grep -o '"new_connections": [0-9]*' | head -1 | grep -o '[0-9]*$')"
done

step "300 keep-alive connections for 25 s; meanwhile dispatcher 2's link goes down, and comes back"
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -keepalive -c 300 -interval 500ms -duration 25s -timeout 30s \
	>"$run/keepalive.txt" 2>&1 &
ka=$!
sleep 3
echo "ip link set dlbeth0 down (in $LAB_D2_NS)"
ip -n "$LAB_D2_NS" link set dlbeth0 down
t0=$(date +%s.%N)
wait_hops 2
printf 'the router dropped dispatcher 2 after %.1f s (hold time 9 s):\n' "$(echo "$(date +%s.%N) - $t0" | bc)"
hops
sleep 2
echo "ip link set dlbeth0 up (in $LAB_D2_NS)"
ip -n "$LAB_D2_NS" link set dlbeth0 up
wait_hops 3
echo "dispatcher 2 is back:"
hops
wait "$ka" || true
sed 's/^/    /' "$run/keepalive.txt"
broken=$(grep -o 'broken [0-9]*' "$run/keepalive.txt" | grep -o '[0-9]*$')
if [ "$broken" = 0 ]; then
	echo "no connection broke: the flows that moved to another dispatcher, and back, kept their servers"
else
	echo "demo: $broken keep-alive connections broke" >&2
	exit 1
fi

step "done; removing the lab"
