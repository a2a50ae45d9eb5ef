#!/usr/bin/env bash
# Installs, on Debian, what dlb's lab, demo and tests need when it is
# missing, and changes nothing when it is all there.
#
#   deps.sh lab    iproute2 (ip), util-linux (nsenter), ethtool: the lab and demo
#   deps.sh test   the lab's tools, plus the real servers the advisor tests
#                  probe (dnsmasq, vsftpd, exim4, dovecot, slapd, python3's
#                  http.server, openssl s_server), what the package test
#                  uses (systemd-analyze, man, strace), what the monitoring
#                  tests use (prometheus and promtool, headless chromium), and the
#                  routers the scale-out tests peer with (FRR's bgpd and zebra, BIRD 2)
#
# The test servers' packages would start system-wide daemons on install;
# they are installed with services held back: a policy-rc.d that refuses
# every start is put in place for the install, unless one already exists
# (the usual Debian container images ship one), and removed afterwards only
# if this script made it. Each test starts its own instance from a private
# configuration on a random port and stops it again.
#
# Exit status: 0 when everything is there (installed now or before), 1 when
# something is missing and cannot be installed (not root, apt failed).
#
# For its own tests (scripts/deps_test.go) the script reads:
#   DLB_DEPS_PATH   where commands are looked for (default: $PATH plus the
#                   sbin directories, where Debian puts ethtool and slapd)
#   DLB_DEPS_ROOT   prefix of the files it checks (default: none)
#   DLB_POLICY_RC   the policy-rc.d it may create (default /usr/sbin/policy-rc.d)
set -euo pipefail

set_="${1:-lab}"
case $set_ in
lab | test) ;;
*)
	echo "usage: deps.sh lab|test" >&2
	exit 2
	;;
esac

search=${DLB_DEPS_PATH:-$PATH:/usr/sbin:/sbin}
root=${DLB_DEPS_ROOT:-}
policy=${DLB_POLICY_RC:-/usr/sbin/policy-rc.d}

missing=()
# add PACKAGE: PACKAGE is missing (named once however many of its files are).
add() {
	local p
	for p in "${missing[@]}"; do
		[ "$p" = "$1" ] && return 0
	done
	missing+=("$1")
}
# need COMMAND PACKAGE: PACKAGE is missing unless COMMAND is found.
need() { PATH=$search command -v "$1" >/dev/null 2>&1 || add "$2"; }
# need_file FILE PACKAGE: PACKAGE is missing unless FILE exists.
need_file() { [ -e "$root$1" ] || add "$2"; }

need ip iproute2
need nsenter util-linux
need ethtool ethtool
if [ "$set_" = test ]; then
	need dnsmasq dnsmasq-base
	need python3 python3
	need openssl openssl
	need vsftpd vsftpd
	need exim4 exim4-daemon-light
	need dovecot dovecot-imapd
	need_file /usr/lib/dovecot/pop3 dovecot-pop3d
	need slapd slapd
	# The package test: the units' checks, the man pages, dlbd's syscalls,
	# and what the package depends on.
	need systemd-analyze systemd
	need man man-db
	need strace strace
	need adduser adduser
	# The monitoring tests: a real Prometheus scraping dlbd, promtool
	# checking the exposition, and a headless browser on the console.
	need prometheus prometheus
	need promtool prometheus
	need chromium chromium
	# The scale-out tests: routers doing ECMP over the dispatchers.
	need vtysh frr
	need bird bird2
fi
if ((${#missing[@]} == 0)); then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${missing[*]}; run as root (or: apt-get install ${missing[*]})" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
made_policy=0
cleanup() {
	if [ "$made_policy" = 1 ]; then
		rm -f "$policy"
	fi
}
trap cleanup EXIT
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	made_policy=1
fi
if ! apt-get update -qq; then
	echo "deps: apt-get update failed; cannot install ${missing[*]}" >&2
	exit 1
fi
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
	echo "deps: apt-get install ${missing[*]} failed" >&2
	exit 1
fi
exit 0
