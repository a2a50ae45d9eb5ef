#!/usr/bin/env bash
# dlb demo: builds a lab of network namespaces (a client, a dispatcher and
# three HTTP backends on one L2 segment, plus two NAT servers behind a
# router on a second subnet, IPv4 and IPv6), runs dlbd in the dispatcher
# namespace, configures it with dlbctl exactly as an operator would, sends
# real HTTP requests through the cluster addresses (MAC forwarding, NAT,
# IPv6, affinity), shows what the dispatcher and the backends saw (its
# reports, and the Prometheus metrics and web console dlbd serves), and
# removes everything again.
#
# Usage: make demo   (or: bash scripts/demo.sh after "make build"), as root.
set -euo pipefail

export LAB_PREFIX=${LAB_PREFIX:-dlbdemo}
# shellcheck source=scripts/demo-lib.sh
source "$(dirname "$0")/demo-lib.sh"
# Before the trap below: a demo that finds the lab in use leaves it alone.
demo_claim_lab "/sys/fs/bpf/${LAB_PREFIX}"
requests=${DEMO_REQUESTS:-3000}
# Where dlbd serves /metrics and the web console: the dispatcher
# namespace's loopback.
metrics=127.0.0.1:9917

run=$(mktemp -d /tmp/dlbdemo.XXXXXX)
sock=$run/dlbd.sock
pindir=/sys/fs/bpf/${LAB_PREFIX}
dlbd_pid=

cleanup() {
	set +e
	if [ -n "$dlbd_pid" ] && kill -0 "$dlbd_pid" 2>/dev/null; then
		"$bin/dlbctl" --socket "$sock" executor stop >/dev/null 2>&1
		kill "$dlbd_pid" 2>/dev/null
		wait "$dlbd_pid" 2>/dev/null
	fi
	rm -rf "$pindir"
	"$lab" down >/dev/null 2>&1
	rm -rf "$run"
	demo_release_bpffs
	demo_release_lab
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ctl() {
	printf '$ dlbctl %s\n' "$*"
	"$bin/dlbctl" --socket "$sock" "$@"
}

step "lab: client, dispatcher and 3 backends on one segment (198.18.0.0/24, 2001:2::/64), 2 NAT servers behind a router (198.18.1.0/24)"
"$lab" up -n 3 -c 1 -r 2 -6
eval "$("$lab" env)"

step "start dlbd in the dispatcher namespace ($LAB_DISPATCHER_NS)"
"$lab" exec d "$bin/dlbd" --socket "$sock" --state-dir "$run/state" --pin-dir "$pindir" \
	--metrics-address "$metrics" >"$run/dlbd.log" 2>&1 &
dlbd_pid=$!
for _ in $(seq 50); do
	[ -S "$sock" ] && break
	sleep 0.1
done
[ -S "$sock" ] || { cat "$run/dlbd.log"; echo "demo: dlbd did not start" >&2; exit 1; }
echo "metrics:     http://$metrics/metrics"
echo "web console: http://$metrics/"
echo "(both in namespace $LAB_DISPATCHER_NS: e.g. ip netns exec $LAB_DISPATCHER_NS curl http://$metrics/metrics)"

# http_get PATH: GET http://$metrics/PATH from the dispatcher namespace
# (bash's /dev/tcp: no HTTP client needed), body only.
http_get() {
	"$lab" exec d bash -c 'exec 3<>/dev/tcp/${1%:*}/${1#*:} &&
		printf "GET %s HTTP/1.0\r\nHost: dlbd\r\n\r\n" "$2" >&3 && sed "1,/^\r\$/d" <&3' http_get "$metrics" "$1"
}

step "configure the dispatcher with dlbctl"
ctl executor start --interface "$LAB_IF"
ctl executor set nfa "$LAB_NFA"
ctl cluster add "$LAB_VIP" --configure
ctl port add "$LAB_VIP@80" --protocol tcp
ctl server add "$LAB_VIP@80@$LAB_B1_ADDR" --weight 10
ctl server add "$LAB_VIP@80@$LAB_B2_ADDR" --weight 10
ctl server add "$LAB_VIP@80@$LAB_B3_ADDR" --weight 20
ctl executor report

step "$requests HTTP requests from the client to http://$LAB_VIP/ (a new TCP connection each)"
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n "$requests" -c 20

step "what the dispatcher counted"
ctl server report
ctl port report

step "the operator takes b3 down: 1000 more requests avoid it"
ctl server down "$LAB_VIP@80@$LAB_B3_ADDR"
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 1000 -c 20
ctl server up "$LAB_VIP@80@$LAB_B3_ADDR"

step "the manager and an http advisor: weights follow load and health"
ctl advisor start http "$LAB_VIP@80" --interval 1 --fall 2 --rise 2 --connecttimeout 1 --receivetimeout 1
ctl manager set interval 1
ctl manager start
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 2000 -c 20 -duration 3s >/dev/null
sleep 1 # a manager cycle sees the traffic
ctl manager report

# wait_state SERVER STATE: poll the server report until SERVER is in STATE.
wait_state() {
	for _ in $(seq 100); do
		"$bin/dlbctl" --socket "$sock" server report "$LAB_VIP@80@$1" -o json | grep -q "\"state\": \"$2\"" && return 0
		sleep 0.1
	done
	echo "demo: $1 did not become $2" >&2
	return 1
}

step "b2's HTTP server stops: its advisor marks it down, new connections go elsewhere"
"$lab" backend-stop b2
wait_state "$LAB_B2_ADDR" failed
ctl advisor report
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 1000 -c 20

step "b2's HTTP server is back: after 2 good probes it rejoins"
"$lab" backend-start b2 >/dev/null
wait_state "$LAB_B2_ADDR" up
ctl advisor report
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 1000 -c 20
sleep 2 # two manager cycles
ctl manager report

step "monitoring: what Prometheus scrapes from http://$metrics/metrics (a few of its lines)"
http_get /metrics >"$run/metrics.txt"
grep -E '^dlb_(server_new_connections_total|server_state|server_weight|advisor_state|events_total)\{' \
	"$run/metrics.txt" | sed 's/^/  /'
echo "  ... $(grep -vc '^#' "$run/metrics.txt") series in all; the web console at http://$metrics/ shows them live"

step "packet trace: 12 packets of new connections to $LAB_VIP@80, with the executor's verdict, reason and server, then a pcapng file"
printf '$ dlbctl executor trace --cluster %s@80 --count 12\n' "$LAB_VIP"
"$bin/dlbctl" --socket "$sock" executor trace --cluster "$LAB_VIP@80" --count 12 --duration 20s 2>"$run/trace.err" &
trace=$!
sleep 0.5 # the trace starts
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 5 -c 1 >/dev/null
wait "$trace" || true
grep -v '^tracing' "$run/trace.err" | sed 's/^/  /'
printf '$ dlbctl executor trace --cluster %s --count 40 -w %s\n' "$LAB_VIP" "$run/trace.pcapng"
"$bin/dlbctl" --socket "$sock" executor trace --cluster "$LAB_VIP" --count 40 --duration 20s -w "$run/trace.pcapng" 2>/dev/null &
trace=$!
sleep 0.5
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 20 -c 2 >/dev/null
wait "$trace" || true
if command -v tcpdump >/dev/null; then
	echo "$ tcpdump -r trace.pcapng -nn | head -4   (each packet's comment holds the verdict: Wireshark shows it)"
	tcpdump -r "$run/trace.pcapng" -nn 2>/dev/null | head -4 | sed 's/^/  /'
fi

step "NAT: port 81 goes to two servers on another subnet, behind a router"
ctl port add "$LAB_VIP@81" --method nat
ctl server add "$LAB_VIP@81@$LAB_N1_ADDR+$LAB_N2_ADDR" --returnaddress "$LAB_RETURN_ADDR" --router "$LAB_ROUTER_ADDR" --mapport 80
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP:81/" -n 1000 -c 20
ctl server report "$LAB_VIP@81@"

step "IPv6: cluster $LAB_VIP6 on the same three backends"
ctl executor set nfa "$LAB_NFA6"
ctl cluster add "$LAB_VIP6" --configure
ctl port add "$LAB_VIP6@80"
ctl server add "$LAB_VIP6@80@$LAB_B1_ADDR6+$LAB_B2_ADDR6+$LAB_B3_ADDR6"
"$lab" exec c1 "$bin/labclient" -url "http://[$LAB_VIP6]/" -n 1000 -c 20

step "affinity: with a stickytime the client keeps its server"
ctl port set "$LAB_VIP@80" --stickytime 60
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -n 200 -c 1
sleep 2.5 # record counts and NAT pool use come from dlbd's sweep, every 2 s
ctl port report "$LAB_VIP@80"
ctl executor report

step "done; removing the lab"
