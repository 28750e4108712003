# SPDX-License-Identifier: GPL-2.0
# Helpers for the guest scripts.

# The host's RODP_* settings (see scripts/run.sh).
[ -f /mnt/rodp/env ] && . /mnt/rodp/env

# A veth pair for the rodp devices: veth0 <-> veth1, up, with IPv4 addresses.
make_netdevs() {
	ip link add veth0 type veth peer name veth1 2>/dev/null || true
	ip addr add 10.0.0.1/24 dev veth0 2>/dev/null || true
	ip addr add 10.0.0.2/24 dev veth1 2>/dev/null || true
	ip link set veth0 up
	ip link set veth1 up
	local_arp
}

# Both ends of the veth live in this namespace: let ARP between them work (ib_core resolves a
# destination MAC for every RoCE address vector, rodp0 <-> rodp1 included), and give each end
# a permanent neighbour entry for the other. Without those, an address resolution from
# 10.0.0.2 to 10.0.0.1 (rdma_cm bound to rodp1) often waited 15 to 45 s: the ARP answer on a
# veth pair arrives before ib_core's addr.c has queued its request, so the neighbour update
# that would wake it is missed and the request waits for some other neighbour's update.
local_arp() {
	for c in all default veth0 veth1; do
		sysctl -qw net.ipv4.conf.$c.accept_local=1 net.ipv4.conf.$c.rp_filter=0 2>/dev/null
	done
	ip neigh replace 10.0.0.1 dev veth1 lladdr "$(cat /sys/class/net/veth0/address)" \
		nud permanent 2>/dev/null
	ip neigh replace 10.0.0.2 dev veth0 lladdr "$(cat /sys/class/net/veth1/address)" \
		nud permanent 2>/dev/null
	true
}

# pingpong PROG SERVER_DEV CLIENT_DEV [ARGS...]: runs a libibverbs example's server on one
# device and its client on another (or the same) on this host, over GID index 1 (the IPv4
# address of the server's netdev); prints both outputs and fails if either fails.
pingpong() {
	prog=$1 sdev=$2 cdev=$3
	shift 3
	out=$(mktemp)
	timeout 120 "$prog" -d "$sdev" -g 1 "$@" > "$out.s" 2>&1 &
	spid=$!
	sleep 1
	crc=0 src=0
	timeout 120 "$prog" -d "$cdev" -g 1 "$@" 127.0.0.1 > "$out.c" 2>&1 || crc=$?
	wait $spid || src=$?
	echo "-- server ($sdev):"; cat "$out.s"
	echo "-- client ($cdev):"; cat "$out.c"
	rm -f "$out.s" "$out.c" "$out"
	[ $src -eq 0 ] && [ $crc -eq 0 ]
}

# waitfor SECS CONDITION...: selftests/waitfor.c, a wait that polls without starting a program
# each time (its comment says why): listen PORT, file PATH, size PATH BYTES, data PATH OFFSET
# (a byte not zero in the 4 KiB there), line PATH WORD, each with an optional PID whose end
# ends the wait; or exit PID.
waitfor() { /mnt/rodp/tests/waitfor "$@"; }

# poll SECS CMD...: runs CMD every half second until it succeeds (0), SECS have passed or the
# server spid has ended (1), for conditions waitfor cannot see.
poll() {
	p_n=$(($1 * 2))
	shift
	while [ $p_n -gt 0 ]; do
		"$@" && return 0
		kill -0 "$spid" 2>/dev/null || return 1
		sleep 0.5
		p_n=$((p_n - 1))
	done
	return 1
}

# now: a reading of the clocks, "SECONDS,BUSY": the guest's uptime (under TCG its clock follows
# the host's) and the CPU time its vCPUs have spent busy (not idle), both in seconds. Shell
# builtins only (now_read sets now_s and now_b): under TCG each program started costs about
# 0.2 s of the vCPU, and these run around every test and case.
now_read() {
	# "cpu user nice system idle iowait irq softirq steal ...", in 1/100 s
	read -r _ n_u n_n n_s _ _ n_i n_si n_st _ < /proc/stat
	read -r now_s _ < /proc/uptime
	now_s=${now_s%.*} now_b=$(((n_u + n_n + n_s + n_i + n_si + n_st) / 100))
}
now() {
	now_read
	echo "$now_s,$now_b"
}

# timing NAME START: records the time since START (a reading of now) in results/times, as
# NAME<TAB>SECONDS<TAB>BUSY VCPU SECONDS ("PHASE/PART" is a part of PHASE, which has a line of
# its own; the host's summary prints the table); sets el to the seconds.
timing() {
	now_read
	el=$((now_s - ${2%,*}))
	printf '%s\t%s\t%s\n' "$1" "$el" $((now_b - ${2#*,})) >> /mnt/rodp/results/times
}

# Kernel memory leaks (the test kernel scans only when asked: no DEBUG_KMEMLEAK_AUTO_SCAN):
# kml_clear forgets what boot left (before the module under test loads); kml_report scans once
# every test has run and every device and module is gone (an object is reported once it has
# been unreferenced for 5 s across two scans) and keeps the report and the kernel log in
# results/ for the host's summary.
kml=/sys/kernel/debug/kmemleak
kml_clear() {
	mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug
	[ -w $kml ] && echo clear > $kml
	true
}
kml_report() {
	if [ -w $kml ]; then
		echo scan > $kml; sleep 6; echo scan > $kml
		cat $kml > /mnt/rodp/results/kmemleak.txt
	else
		echo "kmemleak unavailable" > /mnt/rodp/results/kmemleak.txt
	fi
	dmesg > /mnt/rodp/results/final.dmesg
}

# rdma_links_delete: deletes every RDMA link (rodp's and rxe's), so that the log shows any
# splat teardown would cause.
rdma_links_delete() {
	# Every RDMA device here is a link of one of the two drivers (sysfs, not rdma -j piped to
	# an interpreter that takes a second to start under TCG).
	for d in /sys/class/infiniband/*; do
		[ -e "$d" ] || continue
		rdma link delete "${d##*/}" || true
	done
}
