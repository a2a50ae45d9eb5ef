# shellcheck shell=bash
# What the demo scripts (demo.sh, demo-scaleout.sh, demo-ha.sh) share:
# sourced by each after it set LAB_PREFIX's default. It sets repo, bin,
# lab and bpffs_was_mounted, checks for root and the binaries, and
# defines step and demo_release_bpffs.

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

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
# step prints a scene's title.
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
