#!/usr/bin/env bash
# Installs, on Debian, the tools the lab, the demo and the tests need when
# they are missing: iproute2 (ip), util-linux (nsenter) and ethtool. It
# changes nothing when they are all there, and only asks for root when it
# has something to install.
set -euo pipefail

missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v ethtool >/dev/null || missing+=(ethtool)
((${#missing[@]} == 0)) && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${missing[*]}; run as root (or: apt-get install ${missing[*]})" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
