#!/usr/bin/env bash
# Installs, on Debian, what dlb's lab, demo and tests need when it is
# missing, and changes nothing when it is all there.
#
#   deps.sh lab    iproute2 (ip), util-linux (nsenter), ethtool: the lab and demo
#   deps.sh test   the lab's tools, plus the real servers the advisor tests
#                  probe (dnsmasq, vsftpd, exim4, dovecot, slapd, python3's
#                  http.server, openssl s_server)
#
# The test servers' packages would start system-wide daemons on install;
# they are installed with services held back (policy-rc.d), because each
# test starts its own instance from a private configuration on a random
# port and stops it again.
set -euo pipefail

set_="${1:-lab}"
missing=()
need() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || missing+=("$2"); }

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
	[ -e /usr/lib/dovecot/pop3 ] || missing+=(dovecot-pop3d)
	need slapd slapd
fi
((${#missing[@]} == 0)) && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${missing[*]}; run as root (or: apt-get install ${missing[*]})" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	made_policy=1
fi
cleanup() { [ "$made_policy" = 1 ] && rm -f "$policy"; }
trap cleanup EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
