#!/usr/bin/env bash
# lab.sh builds and tears down the network-namespace lab that `make demo` and
# the end-to-end tests use: one L2 segment (a bridge in a switch namespace)
# joining a dispatcher, clients and backends, with labhttpd on every backend.
#
# Topology (P = $LAB_PREFIX, default "dlb"):
#
#   ${P}c1 .. ${P}cK   clients      dlbeth0 198.18.0.(10+i)/24
#   ${P}d              dispatcher   dlbeth0 198.18.0.2/24 (its NFA)
#   ${P}b1 .. ${P}bN   backends     dlbeth0 198.18.0.(20+i)/24, VIP 198.18.0.100/32 on lo
#   ${P}sw             switch       bridge dlbbr0 with one port ${P}-<role> per namespace
#
# The VIP is NOT put on the dispatcher: dlbd does that. Backends carry it on lo
# with arp_ignore=1/arp_announce=2 so they never answer ARP for it (direct
# server return by MAC rewrite).
#
# Rules kept here: every namespace and link is named with the prefix (which
# must start with "dlb"), every address is in 198.18.0.0/24, links are created
# directly inside their namespaces (nothing ever appears in the root
# namespace), and `down` kills only the PIDs this script recorded.
set -euo pipefail

readonly PROG=${0##*/}
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
REPO_DIR=$(cd -- "$SCRIPT_DIR/.." && pwd)
readonly REPO_DIR

readonly P=${LAB_PREFIX:-dlb}
readonly LAB_BIN=${LAB_BIN:-$REPO_DIR/bin}
readonly LAB_RUN=${LAB_RUN:-/run/${P}-lab}
# bpffs directory of the pass-through XDP links on the switch side.
readonly XDP_PIN=/sys/fs/bpf/${P}-labxdp

readonly SW_NS=${P}sw
readonly D_NS=${P}d
readonly BRIDGE=dlbbr0
readonly IFACE=dlbeth0
readonly NET=198.18.0
readonly PLEN=24
readonly NFA=$NET.2
readonly VIP=$NET.100
readonly MAC_PREFIX=02:d1:b0:00:00 # namespace-side veths: ...:<host part in hex>
readonly PEER_MAC_PREFIX=02:d1:b0:00:01 # switch-side veths
readonly BRIDGE_MAC=02:d1:b0:00:ff:00
readonly CLIENT_BASE=10 # c<i> is $NET.(10+i)
readonly BACKEND_BASE=20 # b<i> is $NET.(20+i)
readonly MAX_CLIENTS=9 # keeps clients below the backends' range
readonly MAX_BACKENDS=79 # keeps backends below the VIP
readonly DEFAULT_BACKENDS=3
readonly DEFAULT_CLIENTS=1
readonly READY_TIMEOUT_DS=50 # tenths of a second to wait for labhttpd
readonly STOP_TIMEOUT_DS=50 # tenths of a second to wait for SIGTERM to work

usage() {
	cat <<EOF
usage: $PROG COMMAND [ARGS]

Network-namespace lab for dlb: one L2 segment (bridge $BRIDGE in ${P}sw) joining
a dispatcher (${P}d, NFA $NFA), clients (${P}c1.., $NET.11..) and backends
(${P}b1.., $NET.21..) that run labhttpd on :80 and carry the VIP $VIP on lo.

commands:
  up [-n BACKENDS] [-c CLIENTS]  create the lab (default $DEFAULT_BACKENDS backends, $DEFAULT_CLIENTS client;
                                 at most $MAX_BACKENDS and $MAX_CLIENTS) and start labhttpd on every backend
  down                           remove everything the lab made, even if half-created;
                                 idempotent; kills only PIDs it recorded
  exec ROLE CMD [ARG...]         run CMD in ROLE's network namespace (nsenter --net);
                                 ROLE is d, sw, c1..cK or b1..bN
  env [-n BACKENDS] [-c CLIENTS] print shell-sourceable LAB_* variables describing the lab
                                 (counts default to the running lab's, else the defaults)
  backend-start NAME [ARG...]    start labhttpd on backend NAME (b1..bN); ARGs are appended to
                                 "-listen :80 -name NAME" (later flags win)
  backend-stop NAME              stop labhttpd on backend NAME (SIGTERM, then SIGKILL after 5 s)
  help                           show this text

environment:
  LAB_PREFIX  prefix of every namespace and switch port, must start with "dlb" (now: $P)
  LAB_BIN     directory holding labhttpd and labclient (now: $LAB_BIN)
              build them with: go build -o bin/ ./scripts/labhttpd ./scripts/labclient
  LAB_RUN     PID files, logs and state (now: $LAB_RUN)

examples:
  sudo $PROG up -n 3
  sudo $PROG exec c1 curl -s http://$NET.21/
  sudo $PROG exec c1 "\$LAB_BIN/labclient" -url http://$VIP/ -n 1000 -c 20
  eval "\$($PROG env)"; echo "\$LAB_BACKEND_ADDRS"
  sudo $PROG down
EOF
}

die() {
	printf '%s: %s\n' "$PROG" "$*" >&2
	exit 1
}

usage_error() {
	printf '%s: %s\n' "$PROG" "$*" >&2
	printf 'run "%s help" for usage\n' "$PROG" >&2
	exit 2
}

info() { printf '%s\n' "$*" >&2; }

check_prefix() {
	[[ $P =~ ^dlb[a-z0-9]*$ ]] ||
		usage_error "LAB_PREFIX '$P' must start with 'dlb' and contain only [a-z0-9]"
	# The longest name is the switch port of the last backend, ${P}-b79.
	((${#P} + 4 <= 15)) || usage_error "LAB_PREFIX '$P' is too long (interface names max 15 chars)"
}

require_root() {
	((EUID == 0)) || die "must run as root (try: sudo $PROG $*)"
}

require_tools() {
	local t
	for t in ip nsenter ethtool sysctl setsid; do
		command -v "$t" >/dev/null || die "required tool '$t' not found"
	done
}

# ns_re matches exactly the namespaces this prefix owns.
ns_re() { printf '^%s(sw|d|c[0-9]+|b[0-9]+)$' "$P"; }

# lab_namespaces prints the lab's existing namespaces: clients and backends
# first, then the dispatcher, then the switch.
lab_namespaces() {
	local re name names=()
	re=$(ns_re)
	while read -r name _; do
		[[ $name =~ $re ]] && names+=("$name")
	done < <(ip netns list 2>/dev/null)
	((${#names[@]})) || return 0
	printf '%s\n' "${names[@]}" | sort -V | awk -v d="$D_NS" -v sw="$SW_NS" '
		$0 == d { last1 = $0; next }
		$0 == sw { last2 = $0; next }
		{ print }
		END { if (last1 != "") print last1; if (last2 != "") print last2 }'
}

# hex2 prints a host number as two hex digits.
hex2() { printf '%02x' "$1"; }

# role_ns prints the namespace for ROLE (d, sw, cN, bN) or fails.
role_ns() {
	case $1 in
	d | sw) printf '%s%s' "$P" "$1" ;;
	c[1-9] | c[1-9][0-9] | b[1-9] | b[1-9][0-9]) printf '%s%s' "$P" "$1" ;;
	*) return 1 ;;
	esac
}

# backend_ns NAME prints backend NAME's namespace, or exits with a usage error.
backend_ns() {
	[[ $1 =~ ^b[1-9][0-9]?$ ]] || usage_error "'$1' is not a backend name (b1..b$MAX_BACKENDS)"
	role_ns "$1"
}

# in_ns NS CMD... runs CMD in the network namespace NS. nsenter, unlike
# `ip netns exec`, does not remount /sys, so bpffs pinning keeps working.
in_ns() {
	local ns=$1
	shift
	nsenter --net="/run/netns/$ns" -- "$@"
}

# sysctl_ns NS KEY=VALUE... sets sysctls inside NS.
sysctl_ns() {
	local ns=$1
	shift
	in_ns "$ns" sysctl -q -w "$@" >/dev/null
}

# parse_counts FROM_STATE [-n N] [-c K] sets NB and NC from the options, else
# (if FROM_STATE is 1) from the running lab's state, else the defaults.
NB=
NC=
parse_counts() {
	local from_state=$1 opt OPTIND=1
	shift
	while getopts ':n:c:' opt; do
		case $opt in
		n) NB=$OPTARG ;;
		c) NC=$OPTARG ;;
		:) usage_error "option -$OPTARG needs a value" ;;
		*) usage_error "unknown option -$OPTARG" ;;
		esac
	done
	shift $((OPTIND - 1))
	(($# == 0)) || usage_error "unexpected arguments: $*"
	if ((from_state)) && [[ -z $NB || -z $NC ]] && [[ -r $LAB_RUN/state ]]; then
		local key val
		while IFS='=' read -r key val; do
			case $key in
			BACKENDS) [[ -n $NB ]] || NB=$val ;;
			CLIENTS) [[ -n $NC ]] || NC=$val ;;
			esac
		done <"$LAB_RUN/state"
	fi
	NB=${NB:-$DEFAULT_BACKENDS}
	NC=${NC:-$DEFAULT_CLIENTS}
	valid_count "$NB" "$MAX_BACKENDS" || usage_error "backends: '$NB' is not in 1..$MAX_BACKENDS"
	valid_count "$NC" "$MAX_CLIENTS" || usage_error "clients: '$NC' is not in 1..$MAX_CLIENTS"
	# Strip leading zeros so "03" means 3, not octal.
	NB=$((10#$NB))
	NC=$((10#$NC))
}

# valid_count N MAX: is N a decimal number in 1..MAX?
valid_count() {
	[[ $1 =~ ^[0-9]{1,3}$ ]] && ((10#$1 >= 1 && 10#$1 <= $2))
}

# --- processes -----------------------------------------------------------------

# recorded_pid FILE prints the PID in FILE if it is still the labhttpd we
# started (checked by executable name and network namespace), else fails.
recorded_pid() {
	local file=$1 ns=$2 pid exe
	[[ -r $file ]] || return 1
	read -r pid <"$file" || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	[[ ${exe##*/} == labhttpd ]] || return 1
	if [[ -e /run/netns/$ns ]]; then
		[[ $(ip netns identify "$pid" 2>/dev/null) == "$ns" ]] || return 1
	fi
	printf '%s' "$pid"
}

# alive PID: is PID running? A zombie counts as exited: this script's servers
# are detached, and their reaper (PID 1) may take a while to collect them.
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

# stop_pid PID waits for PID to exit after SIGTERM, using SIGKILL as a last resort.
stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < STOP_TIMEOUT_DS; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	info "pid $pid ignored SIGTERM; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 10; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	info "warning: pid $pid did not exit"
}

# http_ok NS ADDR PORT: does labhttpd answer GET / from inside NS?
http_ok() {
	local ns=$1 addr=$2 port=$3
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 1 nsenter --net="/run/netns/$ns" -- bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "GET / HTTP/1.0\r\nHost: %s\r\n\r\n" "$1" >&3
		IFS= read -r line <&3 || exit 1
		[[ $line == "HTTP/1."?" 200"* ]]' _ "$addr" "$port" 2>/dev/null
}

# backend_listen_addr ARG... prints the host and port labhttpd will listen on
# as "HOST|PORT" (HOST may be empty), following Go flag syntax: last -listen wins.
backend_listen_addr() {
	local listen=:80 a
	while (($#)); do
		a=$1
		shift
		case $a in
		-listen | --listen)
			if (($#)); then
				listen=$1
				shift
			fi
			;;
		-listen=* | --listen=*) listen=${a#*=} ;;
		esac
	done
	printf '%s|%s' "${listen%:*}" "${listen##*:}"
}

# backend_start NAME [ARG...] starts labhttpd in backend NAME's namespace and
# waits (bounded) until it answers.
backend_start() {
	local name=$1
	shift
	local ns pidfile log pid i host port addr
	ns=$(backend_ns "$name")
	[[ -e /run/netns/$ns ]] || die "namespace $ns does not exist (is the lab up? try: $PROG up)"
	[[ -x $LAB_BIN/labhttpd ]] || die "$LAB_BIN/labhttpd not found; build it with: go build -o bin/ ./scripts/labhttpd ./scripts/labclient (or set LAB_BIN)"
	pidfile=$LAB_RUN/$name.pid
	log=$LAB_RUN/$name.log
	if pid=$(recorded_pid "$pidfile" "$ns"); then
		die "labhttpd for $name is already running (pid $pid)"
	fi
	rm -f "$pidfile"
	mkdir -p "$LAB_RUN"
	# setsid -f detaches the server from this script's session and terminal;
	# the inner bash records its own PID and execs labhttpd, so the PID file
	# holds the server's PID.
	# shellcheck disable=SC2016 # expanded by the inner bash
	setsid -f nsenter --net="/run/netns/$ns" -- \
		bash -c 'echo $$ >"$1.tmp" && mv "$1.tmp" "$1" && shift && exec "$@"' _ "$pidfile" \
		"$LAB_BIN/labhttpd" -listen :80 -name "$name" "$@" </dev/null >>"$log" 2>&1
	IFS='|' read -r host port <<<"$(backend_listen_addr "$@")"
	addr=$host
	[[ -n $addr && $addr != 0.0.0.0 ]] || addr=$NET.$((BACKEND_BASE + ${name#b}))
	for ((i = 0; i < READY_TIMEOUT_DS; i++)); do
		if pid=$(recorded_pid "$pidfile" "$ns") && http_ok "$ns" "$addr" "$port"; then
			info "$name: labhttpd pid $pid answering on $addr:$port"
			return 0
		fi
		if [[ -r $pidfile ]] && read -r pid <"$pidfile" && ! alive "$pid"; then
			break # it started and died
		fi
		sleep 0.1
	done
	info "$name: labhttpd did not answer on $addr:$port; last lines of $log:"
	tail -n 5 "$log" >&2 || true
	return 1
}

backend_stop() {
	local name=$1 ns pidfile pid
	ns=$(backend_ns "$name")
	pidfile=$LAB_RUN/$name.pid
	if pid=$(recorded_pid "$pidfile" "$ns"); then
		stop_pid "$pid"
		info "$name: labhttpd pid $pid stopped"
	else
		info "$name: labhttpd is not running"
	fi
	rm -f "$pidfile"
}

# --- up / down -----------------------------------------------------------------

# add_ns NS creates a namespace with lo up and IPv6 off for links made later.
add_ns() {
	local ns=$1
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	sysctl_ns "$ns" net.ipv6.conf.default.disable_ipv6=1
}

# add_port ROLE ADDR_HOST creates ROLE's veth: dlbeth0 in the role's
# namespace with $NET.ADDR_HOST/24, and its peer ${P}-ROLE on the bridge.
add_port() {
	local role=$1 host=$2 ns peer
	ns=$(role_ns "$role")
	peer=$P-$role
	# Created directly in the two namespaces, so no name is ever taken in
	# the root namespace.
	ip link add "$IFACE" netns "$ns" address "$MAC_PREFIX:$(hex2 "$host")" type veth \
		peer name "$peer" netns "$SW_NS" address "$PEER_MAC_PREFIX:$(hex2 "$host")"

	sysctl_ns "$SW_NS" "net.ipv6.conf.$peer.disable_ipv6=1"
	ip -n "$SW_NS" link set "$peer" master "$BRIDGE"
	# Native-mode XDP_TX/redirect into a veth needs NAPI on the receiving
	# peer, which GRO turns on.
	in_ns "$SW_NS" ethtool -K "$peer" gro on >/dev/null
	ip -n "$SW_NS" link set "$peer" up

	sysctl_ns "$ns" "net.ipv6.conf.$IFACE.disable_ipv6=1"
	# Locally generated packets would otherwise leave with partial
	# checksums that break once an XDP program forwards them.
	in_ns "$ns" ethtool -K "$IFACE" tx off >/dev/null
	ip -n "$ns" addr add "$NET.$host/$PLEN" dev "$IFACE"
	ip -n "$ns" link set "$IFACE" up
}

cmd_up() {
	parse_counts 0 "$@"
	require_root up "$@"
	require_tools
	local missing=() b
	for b in labhttpd labclient labxdp; do
		[[ -x $LAB_BIN/$b ]] || missing+=("$LAB_BIN/$b")
	done
	((${#missing[@]} == 0)) ||
		die "missing ${missing[*]}; build with: make build (or set LAB_BIN)"
	local existing
	existing=$(lab_namespaces | tr '\n' ' ')
	[[ -z $existing ]] ||
		die "lab namespaces already exist: ${existing% }; run '$PROG down' first"
	local f name pid
	for f in "$LAB_RUN"/*.pid; do
		[[ -e $f ]] || continue
		name=${f##*/}
		name=${name%.pid}
		if pid=$(recorded_pid "$f" "$P$name"); then
			die "labhttpd for $name (pid $pid, recorded in $f) is still running; run '$PROG down' first"
		fi
	done

	# From here on, any failure (or ^C) removes what was made.
	UP_DONE=0
	trap 'on_up_exit' EXIT
	trap 'exit 130' INT TERM

	rm -rf "$LAB_RUN"
	mkdir -p "$LAB_RUN"
	printf 'PREFIX=%s\nBACKENDS=%s\nCLIENTS=%s\n' "$P" "$NB" "$NC" >"$LAB_RUN/state"

	local i
	add_ns "$SW_NS"
	ip -n "$SW_NS" link add "$BRIDGE" address "$BRIDGE_MAC" type bridge \
		stp_state 0 forward_delay 0 mcast_snooping 0
	sysctl_ns "$SW_NS" "net.ipv6.conf.$BRIDGE.disable_ipv6=1"
	ip -n "$SW_NS" link set "$BRIDGE" up

	add_ns "$D_NS"
	add_port d 2
	# The dispatcher's peer runs a pass-through XDP program: native-mode
	# XDP_TX into a veth is only processed when the receiving veth runs XDP
	# itself (see scripts/labxdp).
	in_ns "$SW_NS" "$LAB_BIN/labxdp" -pin "$XDP_PIN" "$P-d"
	for ((i = 1; i <= NC; i++)); do
		add_ns "${P}c$i"
		add_port "c$i" $((CLIENT_BASE + i))
	done
	for ((i = 1; i <= NB; i++)); do
		local ns=${P}b$i
		add_ns "$ns"
		add_port "b$i" $((BACKEND_BASE + i))
		# The VIP on lo, never announced or answered for on the wire.
		ip -n "$ns" addr add "$VIP/32" dev lo
		sysctl_ns "$ns" \
			net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
			net.ipv4.conf.lo.arp_ignore=1 net.ipv4.conf.lo.arp_announce=2 \
			"net.ipv4.conf.$IFACE.arp_ignore=1" "net.ipv4.conf.$IFACE.arp_announce=2"
	done
	for ((i = 1; i <= NB; i++)); do
		backend_start "b$i"
	done

	UP_DONE=1
	trap - EXIT INT TERM
	info "lab up: prefix $P, dispatcher ${P}d ($NFA), $NC client(s) from $NET.$((CLIENT_BASE + 1)), $NB backend(s) from $NET.$((BACKEND_BASE + 1)), VIP $VIP (not configured on the dispatcher)"
	info "state and logs in $LAB_RUN; remove with: $PROG down"
}

UP_DONE=1
on_up_exit() {
	local rc=$?
	if ((UP_DONE == 0)); then
		info "$PROG: up failed; removing what was created"
		cmd_down >/dev/null 2>&1 || true
		((rc != 0)) || rc=1
	fi
	exit "$rc"
}

cmd_down() {
	(($# == 0)) || usage_error "down takes no arguments"
	require_root down
	local f name ns pid removed=0 failed=0 left
	if [[ -d $LAB_RUN ]]; then
		for f in "$LAB_RUN"/*.pid; do
			[[ -e $f ]] || continue
			name=${f##*/}
			name=${name%.pid}
			ns=$P$name
			if pid=$(recorded_pid "$f" "$ns"); then
				stop_pid "$pid"
				info "stopped $name (pid $pid)"
			fi
			rm -f "$f"
		done
	fi
	# Clients and backends first, then the dispatcher and the switch; the
	# veth pairs go with their namespaces.
	for ns in $(lab_namespaces); do
		left=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || true
		if [[ -n $left ]]; then
			info "warning: processes not started by $PROG still run in $ns (pids ${left% }); they keep its network namespace alive after removal"
		fi
		if ip netns del "$ns"; then
			removed=$((removed + 1))
		else
			failed=1
		fi
	done
	rm -rf "$LAB_RUN" "$XDP_PIN"
	if ((removed > 0)); then
		info "lab down: removed $removed namespace(s) with prefix $P"
	else
		info "lab down: nothing to remove for prefix $P"
	fi
	((failed == 0)) || die "some namespaces could not be removed"
}

cmd_exec() {
	(($# >= 2)) || usage_error "usage: $PROG exec ROLE CMD [ARG...]"
	local role=$1 ns
	shift
	ns=$(role_ns "$role") || usage_error "unknown role '$role' (want d, sw, c1..c$MAX_CLIENTS or b1..b$MAX_BACKENDS)"
	[[ -e /run/netns/$ns ]] || die "namespace $ns does not exist (is the lab up? try: $PROG up)"
	exec nsenter --net="/run/netns/$ns" -- "$@"
}

# shq VALUE prints VALUE single-quoted for the shell.
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# var NAME VALUE prints one sourceable assignment.
var() { printf '%s=%s\n' "$1" "$(shq "$2")"; }

cmd_env() {
	parse_counts 1 "$@"
	local i up=0 role host ns
	local c_ns=() c_addr=() c_mac=() b_name=() b_ns=() b_addr=() b_mac=() b_peer=()
	[[ -r $LAB_RUN/state ]] && up=1
	var LAB_PREFIX "$P"
	var LAB_UP "$up"
	var LAB_BIN "$LAB_BIN"
	var LAB_RUN "$LAB_RUN"
	var LAB_SCRIPT "$SCRIPT_DIR/$PROG"
	var LAB_SUBNET "$NET.0/$PLEN"
	var LAB_PREFIXLEN "$PLEN"
	var LAB_VIP "$VIP"
	var LAB_NFA "$NFA"
	var LAB_IF "$IFACE"
	var LAB_SWITCH_NS "$SW_NS"
	var LAB_BRIDGE "$BRIDGE"
	var LAB_BRIDGE_MAC "$BRIDGE_MAC"
	var LAB_DISPATCHER_NS "$D_NS"
	var LAB_DISPATCHER_IF "$IFACE"
	var LAB_DISPATCHER_ADDR "$NFA"
	var LAB_DISPATCHER_MAC "$MAC_PREFIX:$(hex2 2)"
	var LAB_DISPATCHER_PEER "$P-d"
	var LAB_CLIENTS "$NC"
	for ((i = 1; i <= NC; i++)); do
		role=c$i host=$((CLIENT_BASE + i)) ns=$P$role
		c_ns+=("$ns") c_addr+=("$NET.$host") c_mac+=("$MAC_PREFIX:$(hex2 "$host")")
		var "LAB_C${i}_NS" "$ns"
		var "LAB_C${i}_ADDR" "$NET.$host"
		var "LAB_C${i}_MAC" "$MAC_PREFIX:$(hex2 "$host")"
		var "LAB_C${i}_PEER" "$P-$role"
	done
	var LAB_CLIENT_NS "${c_ns[*]}"
	var LAB_CLIENT_ADDRS "${c_addr[*]}"
	var LAB_CLIENT_MACS "${c_mac[*]}"
	var LAB_BACKENDS "$NB"
	for ((i = 1; i <= NB; i++)); do
		role=b$i host=$((BACKEND_BASE + i)) ns=$P$role
		b_name+=("$role") b_ns+=("$ns") b_addr+=("$NET.$host")
		b_mac+=("$MAC_PREFIX:$(hex2 "$host")") b_peer+=("$P-$role")
		var "LAB_B${i}_NAME" "$role"
		var "LAB_B${i}_NS" "$ns"
		var "LAB_B${i}_ADDR" "$NET.$host"
		var "LAB_B${i}_MAC" "$MAC_PREFIX:$(hex2 "$host")"
		var "LAB_B${i}_PEER" "$P-$role"
	done
	var LAB_BACKEND_NAMES "${b_name[*]}"
	var LAB_BACKEND_NS "${b_ns[*]}"
	var LAB_BACKEND_ADDRS "${b_addr[*]}"
	var LAB_BACKEND_MACS "${b_mac[*]}"
	var LAB_BACKEND_PEERS "${b_peer[*]}"
}

main() {
	check_prefix
	(($# > 0)) || {
		usage >&2
		exit 2
	}
	local cmd=$1
	shift
	case $cmd in
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	exec) cmd_exec "$@" ;;
	env) cmd_env "$@" ;;
	backend-start)
		(($# >= 1)) || usage_error "usage: $PROG backend-start NAME [labhttpd ARG...]"
		require_root backend-start
		backend_start "$@"
		;;
	backend-stop)
		(($# == 1)) || usage_error "usage: $PROG backend-stop NAME"
		require_root backend-stop
		backend_stop "$1"
		;;
	help | -h | --help) usage ;;
	*) usage_error "unknown command '$cmd'" ;;
	esac
}

main "$@"
