# shellcheck shell=bash
# What the demo scripts (demo.sh, demo-scaleout.sh, demo-ha.sh) share:
# sourced by each after it set LAB_PREFIX's default. It sets repo, bin,
# lab and bpffs_was_mounted, checks for root and the binaries, and
# defines step, demo_claim_lab and demo_release_bpffs.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${LAB_BIN:-$repo/bin}
export LAB_BIN=$bin
lab="$repo/scripts/lab.sh"

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: needs root (it creates network namespaces and loads XDP programs); run: sudo make demo" >&2
	exit 1
fi
for b in dlbd dlbctl labhttpd labclient labxdp; do
	if [ ! -x "$bin/$b" ]; then
		echo "demo: $bin/$b is missing; run: make build" >&2
		exit 1
	fi
done

# dlbd mounts bpffs on /sys/fs/bpf when nothing is mounted there, as on a
# fresh machine; demo_release_bpffs unmounts it again when the demo is
# done, if it is empty.
bpffs_was_mounted=0
if mountpoint -q /sys/fs/bpf; then bpffs_was_mounted=1; fi

# demo_release_bpffs unmounts the bpffs a dlbd of the demo mounted, once
# empty (maps.debug and progs.debug are the kernel's own iterators).
demo_release_bpffs() {
	if [ "$bpffs_was_mounted" = 0 ] && mountpoint -q /sys/fs/bpf &&
		[ -z "$(ls -A /sys/fs/bpf | grep -vx -e maps.debug -e progs.debug)" ]; then
		umount /sys/fs/bpf
	fi
}

# demo_claim_lab PIN_DIR...: takes the demo's lab (LAB_PREFIX) for this
# run. One demo of a kind at a time: the lab's owner is the demo whose PID
# /run/lock/LAB_PREFIX.pid holds while it runs (a lock on a file would be
# held on by the backends a killed demo left behind, which inherit it). A
# lab found without a live owner is one a previous run left when it was
# killed before it could remove it (SIGKILL, a closed container): it goes
# first, with what still runs in it (dlbd, routers, backends) and the pin
# directories PIN_DIR. demo_release_lab gives the lab up.
demo_claim_lab() {
	demo_owner=/run/lock/${LAB_PREFIX}.pid
	mkdir -p /run/lock
	local me=${0##*/}
	if ! (
		flock 9
		pid=$(cat "$demo_owner" 2>/dev/null) || pid=
		if [ -n "$pid" ] && [ "$pid" != $$ ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$me"; then
			exit 1
		fi
		echo $$ >"$demo_owner"
	) 9<>"$demo_owner"; then
		echo "demo: another $me (pid $(cat "$demo_owner")) is running in the lab ${LAB_PREFIX}; wait for it to end" >&2
		exit 1
	fi
	if ip netns list 2>/dev/null | grep -Eq "^${LAB_PREFIX}(sw|d)( |\$)"; then
		echo "demo: removing the lab ${LAB_PREFIX} a previous demo left (it was killed before it could)"
		"$lab" down --stale >/dev/null
	fi
	rm -rf "$@"
}

# demo_release_lab gives up the lab demo_claim_lab took.
demo_release_lab() {
	if [ -n "${demo_owner:-}" ] && [ "$(cat "$demo_owner" 2>/dev/null)" = $$ ]; then
		rm -f "$demo_owner"
	fi
}

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
# step prints a scene's title.
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
