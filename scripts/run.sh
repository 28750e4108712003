#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Boots the test kernel in QEMU with rodp.ko, the selftests and a guest script shared over 9p.
#   scripts/run.sh demo|check|bench   runs selftests/guest/<name>.sh in the guest
#   RODP_TESTS=glob                   `check` runs only the selftests matching glob
# The guest's serial log is kept in $RODP_CACHE/logs/<name>.log; the exit status is the guest
# script's, and for `check` also fails on any kernel splat in the log.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

task=${1:?usage: run.sh demo|check|bench}
limit=${RODP_GUEST_TIMEOUT:-2400}
[ -f "$RODP_TOP/selftests/guest/$task.sh" ] || die "no guest script selftests/guest/$task.sh"

"$RODP_TOP/scripts/setup.sh"
# The benchmark runs on the same kernel without its debug options (KASAN, lockdep, ...), with
# the module built from a copy of the sources so the test build is left alone.
flavor=test
[ "$task" = bench ] && flavor=bench
kdir=$("$RODP_TOP/scripts/kernel.sh" $flavor)
rootfs=$("$RODP_TOP/scripts/rootfs.sh")
if [ $flavor = test ]; then
	make -s -C "$RODP_TOP" KDIR="$kdir" modules >&2
	ko=$RODP_TOP/rodp.ko
else
	mo=$RODP_CACHE/module-$flavor
	rm -rf "$mo"
	mkdir -p "$mo"
	# Sources only (tracked or new, not ignored): no objects of the test build.
	git -C "$RODP_TOP" ls-files --cached --others --exclude-standard Kbuild Makefile rust include |
		tar -C "$RODP_TOP" -cf - -T - | tar -C "$mo" -xf -
	make -s -C "$mo" KDIR="$kdir" modules >&2
	ko=$mo/rodp.ko
fi
make -s -C "$RODP_TOP/selftests" KDIR="$kdir" >&2
if [ "$task" = check ]; then "$RODP_TOP/scripts/fmt.sh" --check "$kdir"; fi

kver=$(cat "$kdir/include/config/kernel.release")
share=$(mktemp -d "$RODP_CACHE/share.XXXX")
trap 'rm -rf "$share"' EXIT
mkdir -p "$share/results" "$share/modules"
cp -a "$kdir/modinst/lib" "$share/modules/"
mkdir -p "$share/modules/lib/modules/$kver/extra"
cp "$ko" "$share/modules/lib/modules/$kver/extra/"
depmod -b "$share/modules" "$kver"
cp "$RODP_TOP/selftests/guest/init.sh" "$share/guest-init"
cp "$RODP_TOP/selftests/guest/lib.sh" "$RODP_TOP/selftests/guest/tools.sh" \
	"$RODP_TOP/selftests/guest/pyverbs.sh" "$RODP_TOP/selftests/pyverbs-gaps" \
	"$RODP_TOP/selftests/pyverbs-must-pass" \
	"$RODP_TOP/selftests/guest/$task.sh" "$share/"
cp -a "$RODP_TOP/selftests/build" "$share/tests"
printf '%s\n' "$task" > "$share/task"
printf '%s\n' "$limit" > "$share/limit"
# RODP_* settings reach the guest scripts (lib.sh reads them).
env | grep '^RODP_' > "$share/env" || true
# RODP_TESTS: a glob of selftest names for `check` (default: all).
printf '%s\n' "${RODP_TESTS:-*}" > "$share/filter"

qemu=(qemu-system-x86_64 -M pc -m 4G -smp 2 -nographic -no-reboot -nic none
      -kernel "$kdir/arch/x86/boot/bzImage"
      -drive "file=$rootfs,if=virtio,format=raw,snapshot=on"
      -fsdev "local,id=fs0,path=$share,security_model=none"
      -device virtio-9p-pci,fsdev=fs0,mount_tag=rodp
      -append "root=/dev/vda rw console=ttyS0 init=/sbin/rodp-init panic=-1 kunit.enable=1 kunit.autorun=1 no5lvl")
# no5lvl: with QEMU's "max" CPU the kernel would switch to 5-level paging, and an interrupt
# that lands in early boot (identify_cpu) then trips KASAN on the irq descriptor's lock
# ("wild-memory-access", seen once in a 7.3.4 boot before any module loaded). User space here
# needs 47-bit addresses only.

# KVM only when it really boots a guest here: the probe must reach init within seconds.
accel_file="$RODP_CACHE/accel"
if [ ! -f "$accel_file" ]; then
	accel=tcg
	if [ -w /dev/kvm ]; then
		printf 'probe\n' > "$share/task"
		if timeout 20 "${qemu[@]}" -accel kvm -cpu host 2>&1 | grep -q -m1 RODP-GUEST-UP; then accel=kvm; fi
		printf '%s\n' "$task" > "$share/task"
	fi
	echo "$accel" > "$accel_file"
	log "accelerator: $accel"
fi
accel=$(cat "$accel_file")
# Under TCG, "rep movsb" is emulated one byte at a time: with FSRM/ERMS advertised (as "max"
# does) the kernel's memcpy uses it and copies at a quarter of the speed of its plain 64-bit
# loop. The benchmark hides the two flags so both drivers' copies run at the emulator's best.
cpu=max
[ "$task" = bench ] && cpu=max,-fsrm,-erms
if [ "$accel" = kvm ]; then qemu+=(-accel kvm -cpu host); else qemu+=(-accel tcg -cpu "${RODP_QEMU_CPU:-$cpu}"); fi

mkdir -p "$RODP_CACHE/logs"
# RODP_RUN_ID keeps the logs of runs from several checkouts at once apart.
logf="$RODP_CACHE/logs/$task${RODP_RUN_ID:+-$RODP_RUN_ID}.log"
log "booting guest ($accel) for '$task'; serial log: $logf"
timeout $((limit + 120)) "${qemu[@]}" </dev/null 2>&1 | tee "$logf" | sed -n '/^RODP-GUEST-UP/,$p' | grep -v '^\[' || true

rc=$(cat "$share/rc" 2>/dev/null || echo 124)
if [ "$task" = check ]; then
	python3 "$RODP_TOP/scripts/summarize.py" "$share/results" "$logf" || rc=1
fi
exit "$rc"
