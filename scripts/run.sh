#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Boots the test kernel in QEMU with rodp.ko, the selftests and a guest script shared over 9p.
#   scripts/run.sh demo|check|bench   runs selftests/guest/<name>.sh in the guest
#   scripts/run.sh check2             only the two-guest phase (selftests/guest/check2.sh in
#                                     two guests linked by one virtio-net NIC each)
#   RODP_BENCH_HOSTS=1|2|"1 2"        `bench`: the one-guest benchmark (bench.sh), the two-guest
#                                     one (bench2.sh, in check2's pair of guests), or both
#                                     (default)
#   RODP_TESTS=glob                   `check` runs only the selftests matching glob (in two
#                                     guests at once, A and B: see split); the
#                                     two-guest phase runs after them when
#                                     RODP_TESTS is unset or one of its globs matches "check2"
#   RODP_TESTS2=glob                  the two-guest cases to run (default all)
#   RODP_REPEAT2=N                    each of those cases N times in a row (default 1)
#   RODP_COUNTERS2=1                  each guest's device counters after every case
#   RODP_PAIR_CPUS=N                  vCPUs of each of the two guests (default 1)
#   RODP_PAIR_LINK=tcp|udp            their socket link's transport (default tcp for check2,
#                                     udp for bench2: see pair)
#   RODP_ROOTFS=image                 the guests' root filesystem instead of the one
#                                     scripts/rootfs.sh builds (one with perf, say)
# The guests' serial logs are kept in $RODP_CACHE/logs/<name>.log; the exit status is the guest
# script's, and for `check` also fails on any kernel splat in a log or a failed test.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

task=${1:?usage: run.sh demo|check|check2|bench}
# A guest's time limit, a hung guest's only end: about 1.3 times what the slowest machine seen
# needed (2026-11-27: guest B of check about 2,300 s, the two-guest phase about 1,850 s).
limit=${RODP_GUEST_TIMEOUT:-3000}
limit2=${RODP_GUEST2_TIMEOUT:-2400}
[ -f "$RODP_TOP/selftests/guest/$task.sh" ] || die "no guest script selftests/guest/$task.sh"

# Where the time goes: each host step and guest run, printed in the summary.
mkdir -p "$RODP_CACHE"
work=$(mktemp -d "$RODP_CACHE/run.XXXX")
rootfs_pid=
# A run that ends early (a failed kernel build) stops the root filesystem's build too (its own
# process group: setsid below).
trap '[ -z "$rootfs_pid" ] || kill -- -"$rootfs_pid" 2>/dev/null; rm -rf "$work"' EXIT
times=$work/host-times
: > "$times"
t_start=$(date +%s)
since() { echo $(($(date +%s) - $1)); }
# timed NAME CMD...: runs CMD, records its wall time as "host: NAME".
timed() {
	local name=$1 t0 rc=0
	shift
	t0=$(date +%s)
	"$@" || rc=$?
	printf 'host: %s\t%s\n' "$name" "$(since "$t0")" >> "$times"
	return $rc
}

timed setup "$RODP_TOP/scripts/setup.sh"
# The benchmark runs on the same kernel without its debug options (KASAN, lockdep, ...), with
# the module built from a copy of the sources so the test build is left alone.
# RODP_BENCH_KERNEL=test runs `bench` on the test kernel (to try the scripts without building
# the second kernel; its figures then include the debug checks' cost).
flavor=test
[ "$task" = bench ] && flavor=${RODP_BENCH_KERNEL:-bench}
# The root filesystem (downloads and dpkg, about 2 minutes cold) is built while the kernel is:
# "host: rootfs" is then only the wait for it after the kernel.
if [ -z "${RODP_ROOTFS:-}" ]; then
	setsid -w "$RODP_TOP/scripts/rootfs.sh" > "$work/rootfs" &
	rootfs_pid=$!
fi
t0=$(date +%s)
kdir=$("$RODP_TOP/scripts/kernel.sh" $flavor)
printf 'host: kernel\t%s\n' "$(since "$t0")" >> "$times"
t0=$(date +%s)
if [ -n "$rootfs_pid" ]; then
	rrc=0
	wait "$rootfs_pid" || rrc=$?
	rootfs_pid=
	[ $rrc = 0 ] || die "building the root filesystem failed"
	rootfs=$(cat "$work/rootfs")
else
	rootfs=$RODP_ROOTFS
fi
printf 'host: rootfs\t%s\n' "$(since "$t0")" >> "$times"
# The selftests (gcc) are built while the module is (one rustc, most of its time): they share
# nothing, and each keeps one core busy.
timed "make selftests" make -s -C "$RODP_TOP/selftests" KDIR="$kdir" >&2 &
selftests_pid=$!
mrc=0
if [ $flavor = test ]; then
	timed "make modules" make -s -C "$RODP_TOP" KDIR="$kdir" modules >&2 || mrc=$?
	ko=$RODP_TOP/rodp.ko
else
	mo=$RODP_CACHE/module-$flavor
	rm -rf "$mo"
	mkdir -p "$mo"
	# Sources only (tracked or new, not ignored): no objects of the test build.
	git -C "$RODP_TOP" ls-files --cached --others --exclude-standard Kbuild Makefile rust include |
		tar -C "$RODP_TOP" -cf - -T - | tar -C "$mo" -xf -
	make -s -C "$mo" KDIR="$kdir" modules >&2 || mrc=$?
	ko=$mo/rodp.ko
fi
src=0
wait "$selftests_pid" || src=$?
[ $mrc = 0 ] || die "building the module failed"
[ $src = 0 ] || die "building the selftests failed"
case $task in check|check2) timed "rustfmt check" "$RODP_TOP/scripts/fmt.sh" --check "$kdir" ;; esac

kver=$(cat "$kdir/include/config/kernel.release")
# The share every guest sees at /mnt/rodp (made once, then copied as hard links per guest).
share=$work/share
mkdir -p "$share/results" "$share/modules"
cp -a "$kdir/modinst/lib" "$share/modules/"
mkdir -p "$share/modules/lib/modules/$kver/extra"
cp "$ko" "$share/modules/lib/modules/$kver/extra/"
depmod -b "$share/modules" "$kver"
cp "$RODP_TOP/selftests/guest/init.sh" "$share/guest-init"
cp "$RODP_TOP/selftests/guest/lib.sh" "$RODP_TOP/selftests/guest/tools.sh" \
	"$RODP_TOP/selftests/guest/pyverbs.sh" "$RODP_TOP/selftests/pyverbs-gaps" \
	"$RODP_TOP/selftests/pyverbs-must-pass" "$RODP_TOP/selftests/guest/peer.py" \
	"$RODP_TOP/selftests/guest/pair.sh" "$RODP_TOP/selftests/guest/storage.sh" \
	"$RODP_TOP/selftests/guest/$task.sh" "$share/"
[ "$task" = check ] && cp "$RODP_TOP/selftests/guest/check2.sh" "$share/"
[ "$task" = bench ] && cp "$RODP_TOP/selftests/guest/bench2.sh" "$share/"
cp -a "$RODP_TOP/selftests/build" "$share/tests"
printf '%s\n' "$limit" > "$share/limit"
# RODP_* settings reach the guest scripts (lib.sh reads them).
# Quoted, so that a value with spaces (RODP_TESTS='a b') reads back as one word.
env | sed -n 's/^\(RODP_[A-Za-z0-9_]*\)=.*/\1/p' | while read -r v; do
	printf '%s=%q\n' "$v" "$(printenv "$v")"
done > "$share/env"
# RODP_TESTS: a glob of selftest names for `check` (default: all).
printf '%s\n' "${RODP_TESTS:-*}" > "$share/filter"

# guest_share NAME TASK: a copy of the share for one guest (hard links; its own results/).
guest_share() {
	local d=$work/share-$1
	cp -al "$share" "$d"
	rm -rf "$d/results"
	mkdir -p "$d/results"
	printf '%s\n' "$2" > "$d/task"
	echo "$d"
}

# qemu_cmd SHARE MEM CPUS [KUNIT]: the guest's QEMU command line (without accelerator and
# NICs) in the array qemu; KUNIT=off boots with KUnit disabled (rodp.ko then loads without
# running its suites).
qemu_cmd() {
	local kunit="kunit.enable=1 kunit.autorun=1"
	[ "${4:-}" = off ] && kunit="kunit.enable=0"
	qemu=(qemu-system-x86_64 -M pc -m "$2" -smp "$3" -nographic -no-reboot
	      -kernel "$kdir/arch/x86/boot/bzImage"
	      -drive "file=$rootfs,if=virtio,format=raw,snapshot=on"
	      -fsdev "local,id=fs0,path=$1,security_model=none"
	      -device virtio-9p-pci,fsdev=fs0,mount_tag=rodp
	      -append "root=/dev/vda rw console=ttyS0 init=/sbin/rodp-init panic=-1 $kunit no5lvl acpi=noirq")
}
# no5lvl: with QEMU's "max" CPU the kernel would switch to 5-level paging, and an interrupt
# that lands in early boot (identify_cpu) then trips KASAN on the irq descriptor's lock
# ("wild-memory-access", seen once in a 7.3.4 boot before any module loaded). User space here
# needs 47-bit addresses only.
# acpi=noirq: PCI interrupts are routed from the BIOS's table, not by ACPI. Evaluating the
# machine's _PRT method ended each time in AE_AML_LOOP_TIMEOUT, after ACPICA's 30 s limit on a
# loop, once per PCI device enabled (two or three per boot: 60 to 90 s of every boot, seen on
# 2026-11-27 with a 7.x kernel and QEMU 10's "pc"); the virtio devices use MSI-X anyway.

# KVM only when it really boots a guest here: the probe must reach init within seconds.
accel_file="$RODP_CACHE/accel"
if [ ! -f "$accel_file" ]; then
	accel=tcg
	if [ -w /dev/kvm ]; then
		probe=$(guest_share probe probe)
		qemu_cmd "$probe" 4G 2
		if timeout 20 "${qemu[@]}" -nic none -accel kvm -cpu host 2>&1 | grep -q -m1 RODP-GUEST-UP; then accel=kvm; fi
	fi
	echo "$accel" > "$accel_file"
	log "accelerator: $accel"
fi
accel=$(cat "$accel_file")
# Under TCG, "rep movsb" is emulated one byte at a time: with FSRM/ERMS advertised (as "max"
# does) the kernel's memcpy uses it and copies at a quarter of the speed of its plain 64-bit
# loop. The benchmark hides the two flags so both drivers' copies run at the emulator's best.
cpu=max,-fsrm,-erms
if [ "$accel" = kvm ]; then accel_args=(-accel kvm -cpu host); else accel_args=(-accel tcg -cpu "${RODP_QEMU_CPU:-$cpu}"); fi

mkdir -p "$RODP_CACHE/logs"
# RODP_RUN_ID keeps the logs of runs from several checkouts at once apart.
logname() { echo "$RODP_CACHE/logs/$1${RODP_RUN_ID:+-$RODP_RUN_ID}.log"; }
summary=()

# The single guest: demo or bench.
single() {
	local d logf rc
	d=$(guest_share 1 "$task")
	logf=$(logname "$task")
	qemu_cmd "$d" 4G 2
	log "booting guest ($accel) for '$task'; serial log: $logf"
	timeout $((limit + 120)) "${qemu[@]}" "${accel_args[@]}" -nic none </dev/null 2>&1 |
		tee "$logf" | sed -n '/^RODP-GUEST-UP/,$p' | grep -v '^\[' || true
	rc=$(cat "$d/rc" 2>/dev/null || echo 124)
	summary+=("$d/results" "$logf")
	return "$rc"
}

# `check` runs its work as two guests at once, one vCPU each (the host has two cores; one
# guest of two vCPUs kept only 1.02-1.11 of them busy): guest A runs KUnit and the rodp_*
# programs, guest B the programs in b_programs (self-contained: they depend on no other
# program having run in the same boot), then tools.sh and pyverbs.sh. Each guest has its own
# share (results/, and "part": a or b, which check.sh reads). When both boot, B boots with
# KUnit disabled and a file "no-kunit" in its share (A runs the suites, the summary counts
# them once). RODP_TESTS decides which guests boot:
# A when a selected rodp_* program is not in b_programs (or nothing is selected for B, so that
# KUnit still runs), B when tools, pyverbs or a program in b_programs is selected.
# Balanced on the measured times of a full run (2026-11-27: A ~1,450 s, B ~1,390 s; then
# rodp_cm lost a 40 s wait in address resolution and tools 6 cases and the same wait, about
# 45 s on A and 80 s on B, and rodp_rereg, 47 s, moved to B). On a machine about twice as
# slow (2026-11-27, later) with every program passing: A about 2,900 s with rodp_mmap (432 s
# there; rodp_leak alone 636 s), B about 2,100 s without it; so rodp_mmap stays on B. On
# 2026-11-29 (full run, 3,841 s) A's programs took 1,965 s and B's 1,728 s, B ending about
# 260 s before A; rodp_net (108 s) moved to B. Later that day the fixtures stopped starting
# programs for the veth pair and the rdma tool (selftests/rodp_test.h): that took 40-55 % off
# most programs, which fill A, and less off B's tools and pyverbs; rodp_stress (175 s, mostly
# its fixed-length traffic) moved to A. Then (full run of 2026-11-29, 2,434 s) A's programs
# took 1,086 s and B's 1,001; rodp_device was to lose about 40 s: rodp_uc and rodp_odp_cost
# (39 s) moved to B. The next full run: A's programs 915 s, B's 923 s.
b_programs="rodp_device rodp_data rodp_mmap rodp_odp rodp_rereg rodp_net rodp_flush"
b_programs="$b_programs rodp_uc rodp_odp_cost"
printf '%s\n' "$b_programs" > "$share/b-programs"
# split_parts: "a", "b" or "a b", the guests RODP_TESTS asks for.
split_parts() {
	local g t n a= b= progs=("$RODP_TOP"/selftests/build/rodp_*) -
	set -f # globs of test names, not of files here
	for g in ${RODP_TESTS:-rodp_* tools pyverbs}; do
		case $g in *tools*|*pyverbs*) b=b ;; esac
		for t in "${progs[@]}"; do
			n=${t##*/}
			[ -x "$t" ] || continue
			# shellcheck disable=SC2254
			case $n in $g) ;; *) continue ;; esac
			case " $b_programs " in *" $n "*) b=b ;; *) a=a ;; esac
		done
	done
	[ -n "$b" ] || a=a
	echo $a $b
}
split() {
	local p d logf rc=0 pids=() dirs=() parts
	parts=$(split_parts)
	for p in $parts; do
		d=$(guest_share "check-$p" check)
		echo "$p" > "$d/part"
		logf=$(logname "check-$p")
		# rodp_odp_stress and rodp_odp_cost want 4 GiB; tools and pyverbs do with 3.
		if [ "$p" = a ]; then
			qemu_cmd "$d" 4G 1
		elif [ "$parts" = b ]; then
			qemu_cmd "$d" 3G 1
		else
			touch "$d/no-kunit"
			qemu_cmd "$d" 3G 1 off
		fi
		log "booting guest $p ($accel) for 'check'; serial log: $logf"
		# Each guest's lines on the terminal as they come, prefixed with its name.
		( timeout $((limit + 120)) "${qemu[@]}" "${accel_args[@]}" -nic none </dev/null 2>&1 |
			tee "$logf" | sed -un '/^RODP-GUEST-UP/,$p' | grep --line-buffered -v '^\[' |
			sed -u "s/^/$p| /" || true ) &
		pids+=($!)
		dirs+=("$d")
		summary+=("$d/results" "$logf")
	done
	for p in "${pids[@]}"; do wait "$p" || true; done
	for d in "${dirs[@]}"; do
		[ "$(cat "$d/rc" 2>/dev/null || echo 124)" = 0 ] || rc=1
	done
	return $rc
}

# The two-guest phase (TASK2: check2 or bench2): guests A and B, one vCPU each (two host
# cores; RODP_PAIR_CPUS=N gives each N), one virtio-net NIC each joined by a socket netdev on
# the host's loopback (A listens, B connects), nothing else.
pair() {
	local task2=$1 a b loga logb port pa pb rc=0 cpus=${RODP_PAIR_CPUS:-1}
	limit2=$((limit2 < limit ? limit2 : limit))
	a=$(guest_share a "$task2")
	b=$(guest_share b "$task2")
	echo a > "$a/role"
	echo b > "$b/role"
	echo "$limit2" > "$a/limit"
	echo "$limit2" > "$b/limit"
	loga=$(logname "${task2}a")
	logb=$(logname "${task2}b")
	# The link: a QEMU socket netdev over TCP (A listens, B connects), or with RODP_PAIR_LINK=udp
	# (the default of bench2) over UDP, one datagram per frame. TCP carries every frame (no
	# loss the tests did not make), but Nagle's algorithm holds a small frame while one sent
	# before it is unacknowledged, until the peer's delayed ACK: a ping-pong in which a side
	# sends two frames in a row (an RC ACK, then its own message) waits about 20 ms each time.
	local link=${RODP_PAIR_LINK:-tcp} ports na nb
	[ "$task2" = bench2 ] && link=${RODP_PAIR_LINK:-udp}
	ports=$(python3 -c 'import socket, sys
t = socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM
s = [socket.socket(socket.AF_INET, t) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))' "$link")
	port=${ports% *}
	if [ "$link" = udp ]; then
		na="socket,id=n0,udp=127.0.0.1:${ports#* },localaddr=127.0.0.1:$port"
		nb="socket,id=n0,udp=127.0.0.1:$port,localaddr=127.0.0.1:${ports#* }"
	else
		na="socket,id=n0,listen=127.0.0.1:$port"
		nb="socket,id=n0,connect=127.0.0.1:$port"
	fi
	log "booting two guests ($accel) for '$task2', link over $link on 127.0.0.1:$port; serial logs: $loga $logb"
	# KUnit off: make check's guest A runs the suites; here each load of rodp.ko would.
	qemu_cmd "$a" 2G "$cpus" off
	timeout $((limit2 + 120)) "${qemu[@]}" "${accel_args[@]}" -netdev "$na" \
		-device virtio-net-pci,netdev=n0,mac=52:54:00:52:0d:01 </dev/null > "$loga" 2>&1 &
	pa=$!
	# B connects once A listens (a probe connection would take A's one accept).
	for _ in $(seq 100); do
		[ "$link" = tcp ] || break
		ss -Hltn "sport = :$port" | grep -q . && break
		kill -0 $pa 2>/dev/null || break
		sleep 0.1
	done
	qemu_cmd "$b" 2G "$cpus" off
	timeout $((limit2 + 120)) "${qemu[@]}" "${accel_args[@]}" -netdev "$nb" \
		-device virtio-net-pci,netdev=n0,mac=52:54:00:52:0d:02 </dev/null > "$logb" 2>&1 &
	pb=$!
	# Once one guest has ended (or its QEMU failed), the other gets 5 minutes more: it finishes
	# its teardown in seconds, or it waits at a barrier for a peer that is gone.
	wait -n $pa $pb || true
	for _ in $(seq 300); do
		kill -0 $pa 2>/dev/null || kill -0 $pb 2>/dev/null || break
		sleep 1
	done
	kill $pa $pb 2>/dev/null || true
	wait $pa || true
	wait $pb || true
	for g in a b; do
		sed -n '/^RODP-GUEST-UP/,$p' "$(logname "$task2$g")" | grep -v '^\[' | sed "s/^/$g| /"
	done
	for d in "$a" "$b"; do
		[ "$(cat "$d/rc" 2>/dev/null || echo 124)" = 0 ] || rc=1
	done
	summary+=("$a/results" "$loga" "$b/results" "$logb")
	return $rc
}

# Does RODP_TESTS ask for the two-guest phase?
wants_pair() {
	local g -
	set -f # globs of test names, not of files here
	[ -z "${RODP_TESTS:-}" ] && return 0
	for g in $RODP_TESTS; do
		# shellcheck disable=SC2254
		case check2 in $g) return 0 ;; esac
	done
	return 1
}

rc=0
case $task in
check2) timed "check2 phase" pair check2 || rc=$? ;;
check)
	timed "guests A and B (wall)" split || rc=$?
	if wants_pair; then timed "check2 phase" pair check2 || rc=1; fi ;;
bench)
	case " ${RODP_BENCH_HOSTS:-1 2} " in *" 1 "*) single || rc=$? ;; esac
	case " ${RODP_BENCH_HOSTS:-1 2} " in *" 2 "*) pair bench2 || rc=1 ;; esac ;;
*) single || rc=$? ;;
esac
case $task in
check|check2)
	printf 'host: total\t%s\n' "$(since "$t_start")" >> "$times"
	python3 "$RODP_TOP/scripts/summarize.py" --times "$times" "${summary[@]}" || rc=1 ;;
esac
exit "$rc"
