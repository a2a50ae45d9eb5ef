#!/usr/bin/env bash
# Runs the executor's data-path tests (pkg/datapath, privileged) under
# Debian 12's own kernels, each booted in qemu (software emulation: no KVM
# needed), to find which releases' verifiers accept the executor. The
# development machine runs one kernel; an operator's Debian 12 runs 6.1 by
# default, or 6.12 from bookworm-security.
#
#   kernels.sh [PACKAGE...]
#
# PACKAGE names a Debian kernel image package (linux-image-6.1.0-50-amd64);
# by default the newest 6.1 (Debian 12's default) and the newest 6.12 that
# apt offers. Each is downloaded (apt-get download, not installed) into
# bin/kernels; the test binary, busybox, the host's ip, ethtool and
# nsenter and the kernel's veth, tc and bridge modules make the initramfs;
# the guest runs the tests as init and powers off. DLB_KERNEL_TESTS is the
# -test.run pattern (default: the executor's case table, a few hundred
# packets of every kind, the guard, its real traffic through veth pairs,
# lookups past another key's tag and into second buckets,
# and the stack model checked against the kernel's own count);
# DLB_KERNEL_TIMEOUT the seconds a guest may take (default 1800).
#
# Runs apt-get update, then installs the lab's tools (deps.sh lab),
# qemu-system-x86, busybox-static, cpio and xz-utils when missing (needs
# root, as the tests do). Exit status: 0 when every kernel at or above the
# executor's minimum (datapath.MinKernel) passes, 1 otherwise; a kernel
# below it is reported, pass or fail, and does not fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

if [ "$(id -u)" -ne 0 ]; then
	echo "kernels.sh: needs root (apt-get, and the tests run privileged)" >&2
	exit 1
fi
# The kernel packages are looked up in apt's lists: a fresh machine has none.
apt-get update -qq
bash scripts/deps.sh lab # ip, nsenter and ethtool, copied into the guest
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
[ -x /bin/busybox ] || missing+=(busybox-static)
command -v cpio >/dev/null || missing+=(cpio)
command -v xz >/dev/null || missing+=(xz-utils)
if [ ${#missing[@]} -gt 0 ]; then
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

min=$(sed -n 's/^const MinKernel = "\(.*\)"$/\1/p' pkg/datapath/kernel.go)
[ -n "$min" ] || { echo "kernels.sh: no MinKernel in pkg/datapath/kernel.go" >&2; exit 1; }
tests=${DLB_KERNEL_TESTS:-'^TestPrivileged(DatapathTable|NATRealTraffic|IPv6MACRealTraffic|Guard|StackModel|TagCollision|SpillCounts|SpillCountsPairEviction|SpillCountsNAT|AllocPastFullRun|AllocPastFullHalf)$'}
limit=${DLB_KERNEL_TIMEOUT:-1800}
work=$PWD/bin/kernels
mkdir -p "$work"

newest() { apt-cache search --names-only "$1" | awk '{print $1}' | sort -V | tail -1; }
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	pkgs=("$(newest '^linux-image-6\.1\.0-[0-9]+-amd64$')" "$(newest '^linux-image-6\.12\.[0-9]+\+deb12-amd64$')")
fi

CGO_ENABLED=0 go test -trimpath -c -o "$work/dp.test" ./pkg/datapath/ # static: the initramfs has no libc

# below A B: release A is older than release B.
below() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }

# The guest's files but each kernel's modules: busybox, the test binary,
# and the host's ip, ethtool and nsenter (the real-traffic tests run them)
# with the libraries they link.
base=$(mktemp -d)
trap 'rm -rf "$base" "${root:-}"' EXIT
mkdir -p "$base"/{bin,proc,sys,dev,tmp,run,mod,work}
cp /bin/busybox "$base/bin/"
for c in sh mount insmod poweroff sed tr uname ls sort; do ln -s busybox "$base/bin/$c"; done
for c in ip ethtool nsenter; do
	b=$(PATH=$PATH:/usr/sbin:/sbin command -v $c)
	cp "$b" "$base/bin/"
	ldd "$b" | grep -o '/[^ ]*' | xargs -r cp --parents -L -t "$base"
done
cp "$work/dp.test" "$base/work/"
cat >"$base/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run; mount -t bpf bpf /sys/fs/bpf
for m in $(ls /mod | sort -n); do insmod /mod/$m; done
cd /work
echo "== kernel $(uname -r)"
DLB_REQUIRE_PRIVILEGED=1 ./dp.test -test.count=1 -test.v -test.failfast -test.timeout 60m -test.run "$(sed -n 's/.*dlbtests=\([^ ]*\).*/\1/p' /proc/cmdline)"
echo "== exit $?"
poweroff -f
EOF
chmod +x "$base/init"

status=0
for pkg in "${pkgs[@]}"; do
	[ -n "$pkg" ] || { echo "kernels.sh: apt offers no such kernel" >&2; status=1; continue; }
	kv=${pkg#linux-image-}
	dir=$work/$kv
	if [ ! -f "$dir/boot/vmlinuz-$kv" ]; then
		rm -rf "$dir" && mkdir -p "$dir"
		(cd "$dir" && apt-get download -q "$pkg" 2>/dev/null && dpkg-deb -x ./*.deb . && rm -f ./*.deb)
	fi
	root=$(mktemp -d)
	cp -a "$base/." "$root/"
	# Modules in load order (what they need first); none when built in.
	n=0
	for m in drivers/net/veth net/sched/sch_ingress net/sched/cls_bpf net/llc/llc net/802/stp net/bridge/bridge; do
		f=$(ls "$dir/lib/modules/$kv/kernel/$m".ko* 2>/dev/null | head -1)
		[ -n "$f" ] || continue
		n=$((n + 1))
		case $f in
		*.xz) xz -dc "$f" >"$root/mod/$n.ko" ;;
		*) cp "$f" "$root/mod/$n.ko" ;;
		esac
	done
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd-$kv.gz"
	rm -rf "$root"
	log=$work/$kv.log
	start=$SECONDS
	timeout "$limit" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 4096 -nographic -no-reboot \
		-kernel "$dir/boot/vmlinuz-$kv" -initrd "$work/initrd-$kv.gz" \
		-append "console=ttyS0 panic=-1 quiet dlbtests=$tests" >"$log" 2>&1 || true
	took=$((SECONDS - start))
	release=${kv%-amd64}
	release=${release%%-*}
	release=${release%%+*}
	if grep -q '^== exit 0' "$log"; then
		result=passed
	else
		result=FAILED
	fi
	why=$(grep -m1 -o 'the verifier of Linux [^;]*' "$log" || true)
	if below "$release" "$min"; then
		note="below the minimum $min: reported only"
	else
		note="at or above the minimum $min"
		[ $result = passed ] || status=1
	fi
	echo "$pkg: $result in $took s ($note)${why:+; $why}; log: $log"
	grep -E '^--- (PASS|FAIL)' "$log" | sed 's/^/    /' || true
done
exit $status
