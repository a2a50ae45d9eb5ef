#!/usr/bin/env bash
# lab.sh builds and tears down the network-namespace lab that `make demo` and
# the end-to-end tests use: one L2 segment (a bridge in a switch namespace)
# joining a dispatcher, clients and backends, with labhttpd on every backend
# (HTTP on :80, and its UDP responder on :53).
#
# Topology (P = $LAB_PREFIX, default "dlb"):
#
#   ${P}c1 .. ${P}cK   clients      dlbeth0 198.18.0.(10+i)/24
#   ${P}d              dispatcher   dlbeth0 198.18.0.2/24 (its NFA)
#   ${P}b1 .. ${P}bN   backends     dlbeth0 198.18.0.(20+i)/24, VIP 198.18.0.100/32 on lo
#   ${P}sw             switch       bridge dlbbr0 with one port ${P}-<role> per namespace
#
# With -r N (opt-in), a second segment for NAT servers behind a router:
#
#   ${P}r              router       dlbeth0 198.18.0.254/24 on dlbbr0 (port ${P}-r),
#                                   dlbeth1 198.18.1.1/24 on dlbbr1 (port ${P}-r1), forwarding on
#   ${P}n1 .. ${P}nN   NAT servers  dlbeth0 198.18.1.(10+i)/24 on dlbbr1, default route via 198.18.1.1
#
# and the dispatcher routes 198.18.1.0/24 via 198.18.0.254. The NAT return
# address 198.18.0.3 is NOT configured: dlbd puts it on the dispatcher.
#
# With -6 (opt-in), IPv6 on the lab links (otherwise it stays disabled):
# 2001:2::/64 on segment A (dispatcher ::2, clients ::11.., backends ::21..,
# router ::fe, VIP 2001:2::100/128 on every backend's lo) and 2001:2:1::/64
# on the NAT segment (router ::1, NAT servers ::11..). Addresses are added
# with nodad, and router advertisements, autoconfiguration, DAD and router
# solicitations are off, so the lab is deterministic. Linux answers neighbour
# solicitations only for addresses on the receiving interface, so a backend
# never answers for the VIP on its lo (IPv6 needs no arp_ignore equivalent).
#
# With -x N (opt-in, 2..4), scale-out: N dispatchers behind a router doing
# ECMP, the clients on a segment of their own behind that router:
#
#   ${P}d, ${P}d2 ..   dispatchers  dlbeth0 198.18.0.2/24, 198.18.0.(2+i)/24 for d<i>
#                                   (d2 is 198.18.0.4: .3 is the NAT return address)
#   ${P}r              router       dlbeth0 198.18.0.254/24 on dlbbr0 (port ${P}-r),
#                                   dlbeth2 198.18.2.1/24 on dlbbr2 (port ${P}-r2), forwarding on,
#                                   ECMP hashing on the 5-tuple (fib_multipath_hash_policy=1)
#   ${P}c1 ..          clients      dlbeth0 198.18.2.(10+i)/24 on dlbbr2, default route via 198.18.2.1
#
# Backends and dispatchers route 198.18.2.0/24 via the router. The router
# has no route to the VIP: a BGP daemon the test starts in ${P}r learns it
# from the dispatchers. Every dispatcher's switch-side port runs the
# pass-through XDP program, as ${P}d's does.
#
# The VIP is NOT put on the dispatcher: dlbd does that. Backends carry it on lo
# with arp_ignore=1/arp_announce=2 so they never answer ARP for it (direct
# server return by MAC rewrite).
#
# Rules kept here: every namespace and link is named with the prefix (which
# must start with "dlb"), every address is in 198.18.0.0/23 or 2001:2::/48,
# links are created directly inside their namespaces (nothing ever appears in
# the root namespace), and `down` kills only the PIDs this script recorded.
set -euo pipefail

readonly PROG=${0##*/}
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
REPO_DIR=$(cd -- "$SCRIPT_DIR/.." && pwd)
readonly REPO_DIR

readonly P=${LAB_PREFIX:-dlb}
readonly LAB_BIN=${LAB_BIN:-$REPO_DIR/bin}
readonly LAB_RUN=${LAB_RUN:-/run/${P}-lab}
# bpffs of the pass-through XDP links on the switch side: a private bpffs
# instance the lab mounts itself (a fresh machine has none on /sys/fs/bpf)
# and unmounts in `down`, which also detaches the links.
readonly XDP_PIN=$LAB_RUN/bpffs

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
# NAT segment (-r): a router between segment A and a second bridge.
readonly ROUTER_NS=${P}r
readonly NAT_BRIDGE=dlbbr1
readonly NAT_BRIDGE_MAC=02:d1:b0:00:ff:01
readonly ROUTER_NAT_IFACE=dlbeth1 # the router's interface on the NAT segment
readonly ROUTER_HOST=254 # the router is $NET.254 on segment A
readonly ROUTER_ADDR=$NET.$ROUTER_HOST
readonly NAT_NET=198.18.1
readonly NAT_GW_HOST=1 # the router is $NAT_NET.1 on the NAT segment
readonly NAT_GATEWAY=$NAT_NET.$NAT_GW_HOST
readonly RETURN_ADDR=$NET.3 # dlbd's NAT return address: never configured here
readonly NAT_MAC_PREFIX=02:d1:b0:00:02 # NAT-segment veths: ...:<host part in hex>
readonly NAT_PEER_MAC_PREFIX=02:d1:b0:00:03 # their switch-side peers
readonly NAT_BASE=10 # n<i> is $NAT_NET.(10+i)
readonly MAX_NATSERVERS=9
# IPv6 (-6): the host part is written with the same decimal digits as IPv4.
readonly NET6=2001:2: # segment A: $NET6:<host>/64
readonly NAT_NET6=2001:2:1: # NAT segment: $NAT_NET6:<host>/64
readonly PLEN6=64
readonly NFA6=$NET6:2
readonly VIP6=$NET6:100
readonly RETURN_ADDR6=$NET6:3 # never configured here
readonly ROUTER_ADDR6=$NET6:fe
readonly NAT_GATEWAY6=$NAT_NET6:1
# Scale-out (-x): more dispatchers, and a client segment behind the router.
readonly MAX_DISPATCHERS=4
readonly CLIENT_BRIDGE=dlbbr2
readonly CLIENT_BRIDGE_MAC=02:d1:b0:00:ff:02
readonly ROUTER_CLIENT_IFACE=dlbeth2 # the router's interface on the client segment
readonly CLIENT_NET=198.18.2
readonly CLIENT_GW_HOST=1
readonly CLIENT_GATEWAY=$CLIENT_NET.$CLIENT_GW_HOST
readonly CLIENT_NET6=2001:2:2: # -x with -6: the client segment's $CLIENT_NET6:<host>/64
readonly CLIENT_GATEWAY6=$CLIENT_NET6:$CLIENT_GW_HOST
readonly CLIENT_MAC_PREFIX=02:d1:b0:00:04 # client-segment veths
readonly CLIENT_PEER_MAC_PREFIX=02:d1:b0:00:05
readonly READY_TIMEOUT_DS=50 # tenths of a second to wait for labhttpd
readonly STOP_TIMEOUT_DS=50 # tenths of a second to wait for SIGTERM to work

usage() {
	cat <<EOF
usage: $PROG COMMAND [ARGS]

Network-namespace lab for dlb: one L2 segment (bridge $BRIDGE in ${P}sw) joining
a dispatcher (${P}d, NFA $NFA), clients (${P}c1.., $NET.11..) and backends
(${P}b1.., $NET.21..) that run labhttpd on :80 and carry the VIP $VIP on lo.

commands:
  up [-n BACKENDS] [-c CLIENTS] [-r NATSERVERS] [-x DISPATCHERS] [-6]
                                 create the lab (default $DEFAULT_BACKENDS backends, $DEFAULT_CLIENTS client;
                                 at most $MAX_BACKENDS and $MAX_CLIENTS) and start labhttpd on every backend;
                                 -r N (0..$MAX_NATSERVERS, default 0) adds a router ${P}r ($ROUTER_ADDR, $NAT_GATEWAY)
                                 and N NAT servers ${P}n1.. ($NAT_NET.11..) on bridge $NAT_BRIDGE, running
                                 labhttpd too; -6 enables IPv6: ${NET6}:/$PLEN6 (NFA $NFA6, VIP $VIP6)
                                 and ${NAT_NET6}:/$PLEN6 on the NAT segment; -x N (2..$MAX_DISPATCHERS) makes N
                                 dispatchers (${P}d, ${P}d2.., $NFA, $NET.4..) and puts the clients on
                                 $CLIENT_NET.0/$PLEN (with -6 also ${CLIENT_NET6}:/$PLEN6) behind the router ${P}r,
                                 which does ECMP (scale-out; dispatcher d<i> is $NET.(2+i) and ${NET6}:(2+i))
  down [--stale]                 remove everything the lab made, even if half-created;
                                 idempotent; kills only PIDs it recorded, and with --stale
                                 every process left in the lab's namespaces too (a lab whose
                                 owner was killed before it could stop what it started there)
  exec ROLE CMD [ARG...]         run CMD in ROLE's network namespace (nsenter --net);
                                 ROLE is d, d2..dX, sw, c1..cK, b1..bN, r or n1..nN
  relink ROLE                    delete ROLE's dlbeth0 (d, c1..cK or b1..bN) and create it again
                                 with the same name, MAC and addresses but a new index, as a
                                 driver reload or a hot-plugged NIC does
  env [-n BACKENDS] [-c CLIENTS] [-r NATSERVERS] [-x DISPATCHERS] [-6]
                                 print shell-sourceable LAB_* variables describing the lab
                                 (counts default to the running lab's, else the defaults)
  backend-start NAME [ARG...]    start labhttpd on backend or NAT server NAME (b1..bN, n1..nN);
                                 ARGs are appended to "-listen :80 -name NAME -udp :53" (later flags win)
  backend-stop NAME              stop labhttpd on NAME (SIGTERM, then SIGKILL after 5 s)
  help                           show this text

environment:
  LAB_PREFIX  prefix of every namespace and switch port, must start with "dlb" (now: $P)
  LAB_BIN     directory holding labhttpd and labclient (now: $LAB_BIN)
              build them with: go build -o bin/ ./scripts/labhttpd ./scripts/labclient
  LAB_RUN     PID files, logs and state (now: $LAB_RUN)

examples:
  sudo $PROG up -n 3
  sudo $PROG up -n 2 -r 2 -6
  sudo $PROG exec c1 curl -s http://$NET.21/
  sudo $PROG exec c1 "\$LAB_BIN/labclient" -url http://$VIP/ -n 1000 -c 20
  sudo $PROG exec d "\$LAB_BIN/labclient" -url http://$NAT_NET.11/ -n 10
  sudo $PROG exec c1 "\$LAB_BIN/labclient" -url 'http://[${NET6}:21]/' -n 10
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
	for t in ip nsenter ethtool sysctl setsid mount umount mountpoint; do
		command -v "$t" >/dev/null || die "required tool '$t' not found"
	done
}

# ns_re matches exactly the namespaces this prefix owns.
ns_re() { printf '^%s(sw|d|d[2-9]|r|c[0-9]+|b[0-9]+|n[0-9]+)$' "$P"; }

# lab_namespaces prints the lab's existing namespaces: clients, backends and
# NAT servers first, then the router, the dispatcher, and the switch.
lab_namespaces() {
	local re name names=()
	re=$(ns_re)
	while read -r name _; do
		[[ $name =~ $re ]] && names+=("$name")
	done < <(ip netns list 2>/dev/null)
	((${#names[@]})) || return 0
	printf '%s\n' "${names[@]}" | sort -V | awk -v r="$ROUTER_NS" -v d="$D_NS" -v sw="$SW_NS" '
		$0 == r { last0 = $0; next }
		$0 == d { last1 = $0; next }
		$0 == sw { last2 = $0; next }
		{ print }
		END {
			if (last0 != "") print last0
			if (last1 != "") print last1
			if (last2 != "") print last2
		}'
}

# hex2 prints a host number as two hex digits.
hex2() { printf '%02x' "$1"; }

# role_ns prints the namespace for ROLE (d, sw, r, cN, bN, nN) or fails.
role_ns() {
	case $1 in
	d | sw | r | d[2-9]) printf '%s%s' "$P" "$1" ;;
	c[1-9] | c[1-9][0-9] | b[1-9] | b[1-9][0-9] | n[1-9]) printf '%s%s' "$P" "$1" ;;
	*) return 1 ;;
	esac
}

# backend_ns NAME prints the namespace of backend or NAT server NAME, or
# exits with a usage error.
backend_ns() {
	[[ $1 =~ ^(b[1-9][0-9]?|n[1-9])$ ]] ||
		usage_error "'$1' is not a backend or NAT server name (b1..b$MAX_BACKENDS, n1..n$MAX_NATSERVERS)"
	role_ns "$1"
}

# server_addr NAME prints the IPv4 address of backend or NAT server NAME.
server_addr() {
	case $1 in
	b*) printf '%s' "$NET.$((BACKEND_BASE + ${1#b}))" ;;
	n*) printf '%s' "$NAT_NET.$((NAT_BASE + ${1#n}))" ;;
	esac
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

# parse_counts FROM_STATE [-n N] [-c K] [-r R] [-x X] [-6] sets NB, NC, NR,
# NX and V6 from the options, else (if FROM_STATE is 1) from the running
# lab's state, else the defaults (NR=0, NX=1, V6=0).
NB=
NC=
NR=
NX=
V6=
parse_counts() {
	local from_state=$1 opt OPTIND=1
	shift
	while getopts ':n:c:r:x:6' opt; do
		case $opt in
		n) NB=$OPTARG ;;
		c) NC=$OPTARG ;;
		r) NR=$OPTARG ;;
		x) NX=$OPTARG ;;
		6) V6=1 ;;
		:) usage_error "option -$OPTARG needs a value" ;;
		*) usage_error "unknown option -$OPTARG" ;;
		esac
	done
	shift $((OPTIND - 1))
	(($# == 0)) || usage_error "unexpected arguments: $*"
	if ((from_state)) && [[ -z $NB || -z $NC || -z $NR || -z $NX || -z $V6 ]] && [[ -r $LAB_RUN/state ]]; then
		local key val
		while IFS='=' read -r key val; do
			case $key in
			BACKENDS) [[ -n $NB ]] || NB=$val ;;
			CLIENTS) [[ -n $NC ]] || NC=$val ;;
			NATSERVERS) [[ -n $NR ]] || NR=$val ;;
			DISPATCHERS) [[ -n $NX ]] || NX=$val ;;
			IPV6) [[ -n $V6 ]] || V6=$val ;;
			esac
		done <"$LAB_RUN/state"
	fi
	NB=${NB:-$DEFAULT_BACKENDS}
	NC=${NC:-$DEFAULT_CLIENTS}
	NR=${NR:-0}
	NX=${NX:-1}
	[[ $V6 == 1 ]] || V6=0
	valid_count "$NB" "$MAX_BACKENDS" || usage_error "backends: '$NB' is not in 1..$MAX_BACKENDS"
	valid_count "$NC" "$MAX_CLIENTS" || usage_error "clients: '$NC' is not in 1..$MAX_CLIENTS"
	[[ $NR =~ ^0{1,3}$ ]] || valid_count "$NR" "$MAX_NATSERVERS" ||
		usage_error "NAT servers: '$NR' is not in 0..$MAX_NATSERVERS"
	# Strip leading zeros so "03" means 3, not octal.
	NB=$((10#$NB))
	NC=$((10#$NC))
	NR=$((10#$NR))
	valid_count "$NX" "$MAX_DISPATCHERS" || usage_error "dispatchers: '$NX' is not in 1..$MAX_DISPATCHERS"
	NX=$((10#$NX))
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
	# A `make build` while the lab runs replaces the binary: the kernel
	# then names it "labhttpd (deleted)", and it is still ours to stop.
	exe=${exe% (deleted)}
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
	local host=${listen%:*}
	host=${host#[}
	host=${host%]}
	printf '%s|%s' "$host" "${listen##*:}"
}

# backend_start NAME [ARG...] starts labhttpd (HTTP on :80, UDP responder on
# :53) in backend NAME's namespace and waits (bounded) until HTTP answers.
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
		"$LAB_BIN/labhttpd" -listen :80 -name "$name" -udp :53 "$@" </dev/null >>"$log" 2>&1
	IFS='|' read -r host port <<<"$(backend_listen_addr "$@")"
	addr=$host
	[[ -n $addr && $addr != 0.0.0.0 && $addr != :: ]] || addr=$(server_addr "$name")
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
# With -6, links made later are also kept quiet once IPv6 is enabled on
# them: no router advertisements or solicitations, no autoconfiguration,
# no duplicate address detection (not even for the link-local address).
add_ns() {
	local ns=$1
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	sysctl_ns "$ns" net.ipv6.conf.default.disable_ipv6=1
	if ((V6)); then
		sysctl_ns "$ns" net.ipv6.conf.default.accept_ra=0 net.ipv6.conf.default.autoconf=0 \
			net.ipv6.conf.default.router_solicitations=0 net.ipv6.conf.default.accept_dad=0 \
			net.ipv6.conf.default.dad_transmits=0
	fi
}

# add_link NS IFNAME HOST BRIDGE MAC_PREFIX PEER PEER_MAC_PREFIX CIDR [CIDR6]
# creates a veth: IFNAME in NS with MAC MAC_PREFIX:<HOST in hex> and the IPv4
# address CIDR (and, if given, the IPv6 address CIDR6, which also enables
# IPv6 on IFNAME), and its peer PEER in the switch namespace, on BRIDGE.
add_link() {
	local ns=$1 ifname=$2 host=$3 bridge=$4 mac_prefix=$5 peer=$6 peer_mac_prefix=$7 cidr=$8 cidr6=${9:-}
	# Created directly in the two namespaces, so no name is ever taken in
	# the root namespace.
	ip link add "$ifname" netns "$ns" address "$mac_prefix:$(hex2 "$host")" type veth \
		peer name "$peer" netns "$SW_NS" address "$peer_mac_prefix:$(hex2 "$host")"

	# The bridge ports carry IPv6 frames without IPv6 of their own.
	sysctl_ns "$SW_NS" "net.ipv6.conf.$peer.disable_ipv6=1"
	ip -n "$SW_NS" link set "$peer" master "$bridge"
	# Native-mode XDP_TX/redirect into a veth needs NAPI on the receiving
	# peer, which GRO turns on.
	in_ns "$SW_NS" ethtool -K "$peer" gro on >/dev/null
	ip -n "$SW_NS" link set "$peer" up

	if [[ -n $cidr6 ]]; then
		sysctl_ns "$ns" "net.ipv6.conf.$ifname.disable_ipv6=0"
	else
		sysctl_ns "$ns" "net.ipv6.conf.$ifname.disable_ipv6=1"
	fi
	# Locally generated packets would otherwise leave with partial
	# checksums that break once an XDP program forwards them; and with rx
	# offload a veth marks what it receives "checksum unnecessary", so a
	# wrong checksum would never show in TcpInCsumErrors/UdpInCsumErrors.
	in_ns "$ns" ethtool -K "$ifname" tx off rx off >/dev/null
	ip -n "$ns" addr add "$cidr" dev "$ifname"
	[[ -z $cidr6 ]] || ip -n "$ns" -6 addr add "$cidr6" dev "$ifname" nodad
	ip -n "$ns" link set "$ifname" up
}

# add_port ROLE ADDR_HOST [ADDR6] creates ROLE's veth on segment A: dlbeth0
# in the role's namespace with $NET.ADDR_HOST/24 (and, with -6, ADDR6/64,
# by default $NET6:ADDR_HOST), and its peer ${P}-ROLE on the bridge.
add_port() {
	local role=$1 host=$2 ns cidr6=
	ns=$(role_ns "$role")
	((V6)) && cidr6=${3:-$NET6:$host}/$PLEN6
	add_link "$ns" "$IFACE" "$host" "$BRIDGE" "$MAC_PREFIX" "$P-$role" "$PEER_MAC_PREFIX" \
		"$NET.$host/$PLEN" "$cidr6"
}

# add_nat_port ROLE ADDR_HOST [ADDR6] [IFNAME] [PEER] is add_port for the
# NAT segment: IFNAME (default dlbeth0) with $NAT_NET.ADDR_HOST/24 (and, with
# -6, ADDR6/64, by default $NAT_NET6:ADDR_HOST), its peer PEER (default
# ${P}-ROLE) on bridge $NAT_BRIDGE.
add_nat_port() {
	local role=$1 host=$2 ns cidr6=
	ns=$(role_ns "$role")
	((V6)) && cidr6=${3:-$NAT_NET6:$host}/$PLEN6
	add_link "$ns" "${4:-$IFACE}" "$host" "$NAT_BRIDGE" "$NAT_MAC_PREFIX" "${5:-$P-$role}" \
		"$NAT_PEER_MAC_PREFIX" "$NAT_NET.$host/$PLEN" "$cidr6"
}

# add_router creates the router namespace (once) with its port on segment
# A, forwarding on.
add_router() {
	[[ -e /run/netns/$ROUTER_NS ]] && return 0
	add_ns "$ROUTER_NS"
	add_port r "$ROUTER_HOST" "$ROUTER_ADDR6"
	sysctl_ns "$ROUTER_NS" net.ipv4.ip_forward=1
	((V6 == 0)) || sysctl_ns "$ROUTER_NS" net.ipv6.conf.all.forwarding=1
}

# dispatcher_ns I prints the namespace of dispatcher I (1 is ${P}d).
dispatcher_ns() {
	if (($1 == 1)); then printf '%s' "$D_NS"; else printf '%sd%s' "$P" "$1"; fi
}

# dispatcher_addr I prints the address of dispatcher I.
dispatcher_addr() {
	if (($1 == 1)); then printf '%s' "$NFA"; else printf '%s' "$NET.$((2 + $1))"; fi
}

# dispatcher_addrs prints the dispatchers' addresses, comma-separated.
dispatcher_addrs() {
	local i out=()
	for ((i = 1; i <= NX; i++)); do out+=("$(dispatcher_addr "$i")"); done
	local IFS=,
	printf '%s' "${out[*]}"
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

	bpffs_down
	rm -rf "$LAB_RUN"
	mkdir -p "$LAB_RUN"
	bpffs_up
	printf 'PREFIX=%s\nBACKENDS=%s\nCLIENTS=%s\nNATSERVERS=%s\nDISPATCHERS=%s\nIPV6=%s\n' \
		"$P" "$NB" "$NC" "$NR" "$NX" "$V6" >"$LAB_RUN/state"

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
	for ((i = 2; i <= NX; i++)); do
		add_ns "${P}d$i"
		add_port "d$i" $((2 + i))
		in_ns "$SW_NS" "$LAB_BIN/labxdp" -pin "$XDP_PIN" "$P-d$i"
	done
	if ((NX > 1)); then
		# Scale-out: the clients sit behind the router, on their own
		# segment; the router spreads flows to the VIP over the
		# dispatchers by ECMP once a BGP daemon installs the route.
		ip -n "$SW_NS" link add "$CLIENT_BRIDGE" address "$CLIENT_BRIDGE_MAC" type bridge \
			stp_state 0 forward_delay 0 mcast_snooping 0
		sysctl_ns "$SW_NS" "net.ipv6.conf.$CLIENT_BRIDGE.disable_ipv6=1"
		ip -n "$SW_NS" link set "$CLIENT_BRIDGE" up
		add_router
		local cidr6=
		((V6 == 0)) || cidr6=$CLIENT_GATEWAY6/$PLEN6
		add_link "$ROUTER_NS" "$ROUTER_CLIENT_IFACE" "$CLIENT_GW_HOST" "$CLIENT_BRIDGE" "$CLIENT_MAC_PREFIX" "$P-r2" \
			"$CLIENT_PEER_MAC_PREFIX" "$CLIENT_GATEWAY/$PLEN" "$cidr6"
		sysctl_ns "$ROUTER_NS" net.ipv4.fib_multipath_hash_policy=1
		((V6 == 0)) || sysctl_ns "$ROUTER_NS" net.ipv6.fib_multipath_hash_policy=1
		for ((i = 1; i <= NC; i++)); do
			add_ns "${P}c$i"
			((V6 == 0)) || cidr6=$CLIENT_NET6:$((CLIENT_BASE + i))/$PLEN6
			add_link "${P}c$i" "$IFACE" $((CLIENT_BASE + i)) "$CLIENT_BRIDGE" "$CLIENT_MAC_PREFIX" "$P-c$i" \
				"$CLIENT_PEER_MAC_PREFIX" "$CLIENT_NET.$((CLIENT_BASE + i))/$PLEN" "$cidr6"
			ip -n "${P}c$i" route add default via "$CLIENT_GATEWAY" dev "$IFACE"
			((V6 == 0)) || ip -n "${P}c$i" -6 route add default via "$CLIENT_GATEWAY6" dev "$IFACE"
		done
		for ((i = 1; i <= NX; i++)); do
			ip -n "$(dispatcher_ns "$i")" route add "$CLIENT_NET.0/$PLEN" via "$ROUTER_ADDR" dev "$IFACE"
			((V6 == 0)) || ip -n "$(dispatcher_ns "$i")" -6 route add "$CLIENT_NET6:/$PLEN6" via "$ROUTER_ADDR6" dev "$IFACE"
		done
	else
		for ((i = 1; i <= NC; i++)); do
			add_ns "${P}c$i"
			add_port "c$i" $((CLIENT_BASE + i))
		done
	fi
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
		# Linux answers neighbour solicitations only for addresses on the
		# interface they arrive on, so the IPv6 VIP on lo stays silent too.
		((V6 == 0)) || ip -n "$ns" -6 addr add "$VIP6/128" dev lo nodad
		((NX == 1)) || ip -n "$ns" route add "$CLIENT_NET.0/$PLEN" via "$ROUTER_ADDR" dev "$IFACE"
		((NX == 1 || V6 == 0)) || ip -n "$ns" -6 route add "$CLIENT_NET6:/$PLEN6" via "$ROUTER_ADDR6" dev "$IFACE"
	done
	if ((NR > 0)); then
		ip -n "$SW_NS" link add "$NAT_BRIDGE" address "$NAT_BRIDGE_MAC" type bridge \
			stp_state 0 forward_delay 0 mcast_snooping 0
		sysctl_ns "$SW_NS" "net.ipv6.conf.$NAT_BRIDGE.disable_ipv6=1"
		ip -n "$SW_NS" link set "$NAT_BRIDGE" up

		add_router
		add_nat_port r "$NAT_GW_HOST" "$NAT_GATEWAY6" "$ROUTER_NAT_IFACE" "$P-r1"

		# NAT replies go to the client by a routing-table lookup in the
		# executor (no clientgateway here), which needs forwarding on;
		# on every dispatcher (-x: a high-availability pair serves NAT
		# too).
		local dns
		for ((i = 1; i <= NX; i++)); do
			dns=$(dispatcher_ns "$i")
			sysctl_ns "$dns" net.ipv4.conf.all.forwarding=1 net.ipv4.conf.all.accept_local=1 "net.ipv4.conf.$IFACE.accept_local=1" \
				net.ipv4.conf.all.send_redirects=0 "net.ipv4.conf.$IFACE.send_redirects=0"
			((V6 == 0)) || sysctl_ns "$dns" net.ipv6.conf.all.forwarding=1
			ip -n "$dns" route add "$NAT_NET.0/$PLEN" via "$ROUTER_ADDR" dev "$IFACE"
			((V6 == 0)) || ip -n "$dns" -6 route add "$NAT_NET6:/$PLEN6" via "$ROUTER_ADDR6" dev "$IFACE"
		done
		for ((i = 1; i <= NR; i++)); do
			local ns=${P}n$i
			add_ns "$ns"
			add_nat_port "n$i" $((NAT_BASE + i))
			ip -n "$ns" route add default via "$NAT_GATEWAY" dev "$IFACE"
			((V6 == 0)) || ip -n "$ns" -6 route add default via "$NAT_GATEWAY6" dev "$IFACE"
		done
	fi
	for ((i = 1; i <= NB; i++)); do
		backend_start "b$i"
	done
	for ((i = 1; i <= NR; i++)); do
		backend_start "n$i"
	done

	UP_DONE=1
	trap - EXIT INT TERM
	local cnet=$NET
	((NX == 1)) || cnet=$CLIENT_NET
	info "lab up: prefix $P, dispatcher ${P}d ($NFA), $NC client(s) from $cnet.$((CLIENT_BASE + 1)), $NB backend(s) from $NET.$((BACKEND_BASE + 1)), VIP $VIP (not configured on the dispatcher)"
	((NX == 1)) || info "scale-out: $NX dispatchers ($(dispatcher_addrs)), clients on $CLIENT_NET.0/$PLEN behind the router $ROUTER_NS ($ROUTER_ADDR, $CLIENT_GATEWAY); no route to the VIP until BGP brings one"
	((NR == 0)) || info "NAT: router $ROUTER_NS ($ROUTER_ADDR, $NAT_GATEWAY), $NR NAT server(s) from $NAT_NET.$((NAT_BASE + 1)); return address $RETURN_ADDR not configured"
	local cnet6=$NET6
	((NX == 1)) || cnet6=$CLIENT_NET6
	((V6 == 0)) || info "IPv6: NFA $NFA6, VIP $VIP6 (not configured on the dispatcher), clients from $cnet6:$((CLIENT_BASE + 1)), backends from $NET6:$((BACKEND_BASE + 1))"
	info "state and logs in $LAB_RUN; remove with: $PROG down"
}

# bpffs_up mounts the lab's own bpffs instance on $XDP_PIN.
bpffs_up() {
	mkdir -p "$XDP_PIN"
	mount -t bpf "${P}lab" "$XDP_PIN" || die "cannot mount a bpf file system on $XDP_PIN"
}

# bpffs_down unpins the lab's XDP links (which detaches them) and unmounts
# the lab's bpffs, if mounted. A mount another process holds for a moment
# (CI once found it busy while other labs ran beside it: EBUSY, cause not
# found) is tried again for a second, then detached lazily: the instance is
# the lab's alone, and its directory must be left empty for removal.
bpffs_down() {
	mountpoint -q "$XDP_PIN" 2>/dev/null || return 0
	# Only the lab's links: maps.debug and progs.debug are the kernel's own.
	rm -f "$XDP_PIN"/link_*
	local i
	for ((i = 0; i < 10; i++)); do
		umount "$XDP_PIN" 2>/dev/null && return 0
		sleep 0.1
	done
	if umount -l "$XDP_PIN"; then
		info "$XDP_PIN was busy: detached lazily"
	else
		info "warning: could not unmount $XDP_PIN"
	fi
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
	local stale=0
	case $# in
	0) ;;
	1) [[ $1 == --stale ]] || usage_error "down takes no argument but --stale" && stale=1 ;;
	*) usage_error "down takes no argument but --stale" ;;
	esac
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
		if [[ -n $left ]] && ((stale)); then
			for pid in $left; do
				stop_pid "$pid"
			done
			info "stopped what was left in $ns (pids ${left% })"
			left=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || true
		fi
		if [[ -n $left ]]; then
			info "warning: processes not started by $PROG still run in $ns (pids ${left% }); they keep its network namespace alive after removal"
		fi
		if ip netns del "$ns"; then
			removed=$((removed + 1))
		else
			failed=1
		fi
	done
	bpffs_down
	rm -rf "$LAB_RUN"
	if ((removed > 0)); then
		info "lab down: removed $removed namespace(s) with prefix $P"
	else
		info "lab down: nothing to remove for prefix $P"
	fi
	((failed == 0)) || die "some namespaces could not be removed"
}

# cmd_relink ROLE deletes ROLE's lab interface and creates it again with
# the same name, MAC and addresses, as a driver reload, a hot-plugged NIC
# or a recreated veth does: the interface gets a new index, and whatever
# else was on it (addresses dlbd put there, XDP programs, neighbour
# entries) is gone. ROLE is d (the dispatcher), cN or bN.
cmd_relink() {
	(($# == 1)) || usage_error "usage: $PROG relink ROLE"
	require_root relink
	local role=$1 ns host
	parse_counts 1
	case $role in
	d) host=2 ;;
	c[1-9]) host=$((CLIENT_BASE + ${role#c})) ;;
	b[1-9] | b[1-9][0-9]) host=$((BACKEND_BASE + ${role#b})) ;;
	*) usage_error "relink: unknown role '$role' (want d, c1..c$MAX_CLIENTS or b1..b$MAX_BACKENDS)" ;;
	esac
	ns=$(role_ns "$role")
	[[ -e /run/netns/$ns ]] || die "namespace $ns does not exist (is the lab up? try: $PROG up)"
	# Deleting one end of a veth deletes its peer: the switch port goes too.
	# (It may be gone already: a test deleted it to see dlbd notice.)
	if ip -n "$ns" link show "$IFACE" >/dev/null 2>&1; then
		ip -n "$ns" link del "$IFACE"
	fi
	rm -f "$XDP_PIN/link_$P-$role"
	add_port "$role" "$host"
	case $role in
	d)
		in_ns "$SW_NS" "$LAB_BIN/labxdp" -pin "$XDP_PIN" "$P-d"
		if ((NR > 0)); then
			sysctl_ns "$D_NS" "net.ipv4.conf.$IFACE.accept_local=1" "net.ipv4.conf.$IFACE.send_redirects=0"
			ip -n "$D_NS" route add "$NAT_NET.0/$PLEN" via "$ROUTER_ADDR" dev "$IFACE"
			((V6 == 0)) || ip -n "$D_NS" -6 route add "$NAT_NET6:/$PLEN6" via "$ROUTER_ADDR6" dev "$IFACE"
		fi
		;;
	b*) sysctl_ns "$ns" "net.ipv4.conf.$IFACE.arp_ignore=1" "net.ipv4.conf.$IFACE.arp_announce=2" ;;
	esac
	info "$role: $IFACE deleted and created again (index $(ip -n "$ns" -o link show "$IFACE" | cut -d: -f1))"
}

cmd_exec() {
	(($# >= 2)) || usage_error "usage: $PROG exec ROLE CMD [ARG...]"
	local role=$1 ns
	shift
	ns=$(role_ns "$role") || usage_error "unknown role '$role' (want d, sw, r, c1..c$MAX_CLIENTS, b1..b$MAX_BACKENDS or n1..n$MAX_NATSERVERS)"
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
	local cnet=$NET cmac=$MAC_PREFIX
	if ((NX > 1)); then
		cnet=$CLIENT_NET cmac=$CLIENT_MAC_PREFIX
	fi
	for ((i = 1; i <= NC; i++)); do
		role=c$i host=$((CLIENT_BASE + i)) ns=$P$role
		c_ns+=("$ns") c_addr+=("$cnet.$host") c_mac+=("$cmac:$(hex2 "$host")")
		var "LAB_C${i}_NS" "$ns"
		var "LAB_C${i}_ADDR" "$cnet.$host"
		var "LAB_C${i}_MAC" "$cmac:$(hex2 "$host")"
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
	# -x: the dispatchers (1 is the one above), the router and the
	# client segment.
	var LAB_DISPATCHERS "$NX"
	if ((NX > 1)); then
		local d_ns=() d_addr=() host
		for ((i = 1; i <= NX; i++)); do
			host=2
			((i == 1)) || host=$((2 + i))
			d_ns+=("$(dispatcher_ns "$i")") d_addr+=("$(dispatcher_addr "$i")")
			var "LAB_D${i}_NS" "$(dispatcher_ns "$i")"
			var "LAB_D${i}_ADDR" "$(dispatcher_addr "$i")"
			((V6 == 0)) || var "LAB_D${i}_ADDR6" "$NET6:$host"
			var "LAB_D${i}_MAC" "$MAC_PREFIX:$(hex2 "$host")"
			((i == 1)) && var "LAB_D${i}_PEER" "$P-d" || var "LAB_D${i}_PEER" "$P-d$i"
		done
		var LAB_DISPATCHER_NSES "${d_ns[*]}"
		var LAB_DISPATCHER_ADDRS "${d_addr[*]}"
		var LAB_ROUTER_NS "$ROUTER_NS"
		var LAB_ROUTER_ADDR "$ROUTER_ADDR"
		var LAB_ROUTER_CLIENT_IF "$ROUTER_CLIENT_IFACE"
		var LAB_CLIENT_SUBNET "$CLIENT_NET.0/$PLEN"
		var LAB_CLIENT_GATEWAY "$CLIENT_GATEWAY"
		if ((V6)); then
			var LAB_ROUTER_ADDR6 "$ROUTER_ADDR6"
			var LAB_CLIENT_SUBNET6 "$CLIENT_NET6:/$PLEN6"
			var LAB_CLIENT_GATEWAY6 "$CLIENT_GATEWAY6"
		fi
	fi
	var LAB_BACKEND_NAMES "${b_name[*]}"
	var LAB_BACKEND_NS "${b_ns[*]}"
	var LAB_BACKEND_ADDRS "${b_addr[*]}"
	var LAB_BACKEND_MACS "${b_mac[*]}"
	var LAB_BACKEND_PEERS "${b_peer[*]}"

	# -6: printed only when IPv6 is on.
	var LAB_IPV6 "$V6"
	if ((V6)); then
		local c_addr6=() b_addr6=() cnet6=$NET6
		((NX == 1)) || cnet6=$CLIENT_NET6
		var LAB_SUBNET6 "$NET6:/$PLEN6"
		var LAB_PREFIXLEN6 "$PLEN6"
		var LAB_VIP6 "$VIP6"
		var LAB_NFA6 "$NFA6"
		var LAB_DISPATCHER_ADDR6 "$NFA6"
		var LAB_RETURN_ADDR6 "$RETURN_ADDR6"
		for ((i = 1; i <= NC; i++)); do
			c_addr6+=("$cnet6:$((CLIENT_BASE + i))")
			var "LAB_C${i}_ADDR6" "$cnet6:$((CLIENT_BASE + i))"
		done
		var LAB_CLIENT_ADDRS6 "${c_addr6[*]}"
		for ((i = 1; i <= NB; i++)); do
			b_addr6+=("$NET6:$((BACKEND_BASE + i))")
			var "LAB_B${i}_ADDR6" "$NET6:$((BACKEND_BASE + i))"
		done
		var LAB_BACKEND_ADDRS6 "${b_addr6[*]}"
	fi

	# -r: printed only when there are NAT servers.
	var LAB_NATSERVERS "$NR"
	if ((NR > 0)); then
		local n_name=() n_ns=() n_addr=() n_addr6=() n_mac=() n_peer=()
		var LAB_ROUTER_NS "$ROUTER_NS"
		var LAB_ROUTER_IF "$IFACE"
		var LAB_ROUTER_ADDR "$ROUTER_ADDR"
		var LAB_ROUTER_MAC "$MAC_PREFIX:$(hex2 "$ROUTER_HOST")"
		var LAB_ROUTER_PEER "$P-r"
		var LAB_ROUTER_NAT_IF "$ROUTER_NAT_IFACE"
		var LAB_ROUTER_NAT_MAC "$NAT_MAC_PREFIX:$(hex2 "$NAT_GW_HOST")"
		var LAB_ROUTER_NAT_PEER "$P-r1"
		var LAB_NAT_BRIDGE "$NAT_BRIDGE"
		var LAB_NAT_SUBNET "$NAT_NET.0/$PLEN"
		var LAB_NAT_GATEWAY "$NAT_GATEWAY"
		var LAB_RETURN_ADDR "$RETURN_ADDR"
		if ((V6)); then
			var LAB_ROUTER_ADDR6 "$ROUTER_ADDR6"
			var LAB_NAT_SUBNET6 "$NAT_NET6:/$PLEN6"
			var LAB_NAT_GATEWAY6 "$NAT_GATEWAY6"
		fi
		for ((i = 1; i <= NR; i++)); do
			role=n$i host=$((NAT_BASE + i)) ns=$P$role
			n_name+=("$role") n_ns+=("$ns") n_addr+=("$NAT_NET.$host")
			n_mac+=("$NAT_MAC_PREFIX:$(hex2 "$host")") n_peer+=("$P-$role")
			var "LAB_N${i}_NAME" "$role"
			var "LAB_N${i}_NS" "$ns"
			var "LAB_N${i}_ADDR" "$NAT_NET.$host"
			var "LAB_N${i}_MAC" "$NAT_MAC_PREFIX:$(hex2 "$host")"
			var "LAB_N${i}_PEER" "$P-$role"
			if ((V6)); then
				n_addr6+=("$NAT_NET6:$host")
				var "LAB_N${i}_ADDR6" "$NAT_NET6:$host"
			fi
		done
		var LAB_NATSERVER_NAMES "${n_name[*]}"
		var LAB_NATSERVER_NS "${n_ns[*]}"
		var LAB_NATSERVER_ADDRS "${n_addr[*]}"
		var LAB_NATSERVER_MACS "${n_mac[*]}"
		var LAB_NATSERVER_PEERS "${n_peer[*]}"
		((V6 == 0)) || var LAB_NATSERVER_ADDRS6 "${n_addr6[*]}"
	fi
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
	relink) cmd_relink "$@" ;;
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
