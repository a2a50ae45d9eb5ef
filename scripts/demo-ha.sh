#!/usr/bin/env bash
# dlb high-availability demo: a primary and a backup dispatcher. It builds a
# lab (scripts/lab.sh -x 2: a client behind a router, two dispatchers and
# three HTTP backends on one segment), runs a dlbd in each dispatcher
# namespace, configures them alike with dlbctl, pairs them (heartbeats
# authenticated with a shared secret, the router as reach target), sends
# keep-alive traffic through the VIP, kills the active dispatcher (dlbd
# SIGKILLed, its executor detached) and shows the backup take over with the
# connections it replicated, no request failing; then the primary comes
# back and takes its clusters back (recovery auto); then removes everything.
#
# Usage: make demo   (or: bash scripts/demo-ha.sh after "make build"), as root.
set -euo pipefail

export LAB_PREFIX=${LAB_PREFIX:-dlbdemoh}
# shellcheck source=scripts/demo-lib.sh
source "$(dirname "$0")/demo-lib.sh"
# Before the trap below: a demo that finds the lab in use leaves it alone.
demo_claim_lab /sys/fs/bpf/"${LAB_PREFIX}"-d1 /sys/fs/bpf/"${LAB_PREFIX}"-d2

run=$(mktemp -d /tmp/dlbdemoh.XXXXXX)
pids=(0 0 0)

cleanup() {
	set +e
	for pid in "${pids[@]}"; do
		[ "$pid" != 0 ] || continue
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	rm -rf /sys/fs/bpf/"${LAB_PREFIX}"-d1 /sys/fs/bpf/"${LAB_PREFIX}"-d2
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
# state N prints dispatcher N's high-availability state.
state() {
	"$bin/dlbctl" --socket "$run/d$1/dlbd.sock" highavailability status -o json 2>/dev/null |
		grep -o '"state": "[a-z]*"' | head -1 | cut -d'"' -f4
}
# is N STATE: dispatcher N is in STATE.
is() { [ "$(state "$1")" = "$2" ]; }
synced() {
	"$bin/dlbctl" --socket "$run/d$1/dlbd.sock" highavailability status -o json 2>/dev/null | grep -q '"synced": true'
}
wait_for() { # wait_for WHAT CMD...: up to 30 s
	local what=$1
	shift
	for _ in $(seq 300); do
		"$@" && return 0
		sleep 0.1
	done
	echo "demo: $what did not happen within 30 s" >&2
	return 1
}
start_dlbd() {
	local n=$1 ns_var=LAB_D${1}_NS
	mkdir -p "$run/d$n"
	nsenter --net="/run/netns/${!ns_var}" "$bin/dlbd" --socket "$run/d$n/dlbd.sock" --state-dir "$run/d$n/state" \
		--pin-dir "/sys/fs/bpf/${LAB_PREFIX}-d$n" --scripts-dir "$run/d$n/scripts" >>"$run/d$n/dlbd.log" 2>&1 &
	pids[n]=$!
	wait_for "dlbd $n answering" "$bin/dlbctl" --socket "$run/d$n/dlbd.sock" executor report -o json >/dev/null 2>&1
}

step "lab: a client behind a router, two dispatchers and three backends on one segment (scripts/lab.sh -x 2)"
"$lab" up -n 3 -c 1 -x 2
eval "$("$lab" env)"

step "start a dlbd in each dispatcher namespace"
for n in 1 2; do
	mkdir -p "$run/d$n/scripts"
	# An event script: what an operator would hook (mail, a pager...).
	for ev in goActive goStandby; do
		printf '#!/bin/sh\necho "$(date +%%T) %s: $DLB_HA_STATE ($DLB_HA_REASON)" >>%s\n' "$ev" "$run/d$n/events.txt" \
			>"$run/d$n/scripts/$ev"
		chmod 755 "$run/d$n/scripts/$ev"
	done
	start_dlbd "$n"
done

step "configure them alike: the same clusters, ports and servers (file save on one, file load on the other)"
servers="$LAB_B1_ADDR+$LAB_B2_ADDR+$LAB_B3_ADDR"
ctl 1 executor start --interface "$LAB_IF" --xdp-mode generic
ctl 1 cluster add "$LAB_VIP" --configure
ctl 1 port add "$LAB_VIP@80"
ctl 1 server add "$LAB_VIP@80@$servers"
ctl 1 file save "$run/dlb.cfg"
ctl 2 file load "$run/dlb.cfg"
ctl 1 executor set nfa "$LAB_D1_ADDR"
ctl 2 executor set nfa "$LAB_D2_ADDR"

step "pair them: d1 primary, d2 backup, recovery auto; heartbeats with a shared secret; the router as reach target"
head -c 32 /dev/urandom | base64 >"$run/ha.secret"
chmod 600 "$run/ha.secret"
ctl 1 highavailability backup add primary auto 7700
ctl 2 highavailability backup add backup auto 7700
ctl 1 highavailability heartbeat add "$LAB_D1_ADDR" "$LAB_D2_ADDR" --secret-file "$run/ha.secret"
ctl 2 highavailability heartbeat add "$LAB_D2_ADDR" "$LAB_D1_ADDR" --secret-file "$run/ha.secret"
ctl 1 highavailability reach add "$LAB_ROUTER_ADDR"
ctl 2 highavailability reach add "$LAB_ROUTER_ADDR"
wait_for "d1 active" is 1 active
wait_for "d2 standby with a full copy" synced 2
ctl 1 highavailability status
ctl 2 highavailability status

step "300 keep-alive connections for 20 s through the VIP; meanwhile the active dispatcher dies"
"$lab" exec c1 "$bin/labclient" -url "http://$LAB_VIP/" -keepalive -c 300 -interval 200ms -duration 20s -timeout 20s \
	>"$run/keepalive.txt" 2>&1 &
ka=$!
sleep 4
echo "kill -9 dlbd on d1, and remove its pins: its executor leaves the interface"
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
pids[1]=0
rm -rf "/sys/fs/bpf/${LAB_PREFIX}-d1"
t0=$(date +%s.%N)
wait_for "d2 active" is 2 active
printf 'd2 active %.1f s after the kill (the peer is dead after 4 heartbeats of 0.5 s)\n' "$(echo "$(date +%s.%N) - $t0" | bc)"
ctl 2 highavailability status
echo "d2's dlbctl status says what needs attention:"
ctl 2 status
sleep 4

step "d1 comes back: it gets a full copy of d2's tables, then takes its clusters back (recovery auto)"
start_dlbd 1
wait_for "d1 active again" is 1 active
ctl 1 highavailability status
ctl 1 status
wait "$ka" || true
sed 's/^/    /' "$run/keepalive.txt"
for n in 1 2; do
	echo "d$n's event scripts ran:"
	sed 's/^/    /' "$run/d$n/events.txt" 2>/dev/null || true
done
broken=$(grep -o 'broken [0-9]*' "$run/keepalive.txt" | grep -o '[0-9]*$')
failed=$(grep -o 'failed [0-9]*' "$run/keepalive.txt" | head -1 | grep -o '[0-9]*$')
if [ "$broken" = 0 ] && [ "${failed:-0}" = 0 ]; then
	echo "no connection broke and no request failed: the backup served the connections the primary had, and gave them back"
else
	echo "demo: $broken keep-alive connections broke, ${failed:-?} requests failed" >&2
	exit 1
fi

step "done; removing the lab"
