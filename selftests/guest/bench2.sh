# SPDX-License-Identifier: GPL-2.0
# `make bench` between two hosts: perftest across guests A (server) and B (client) over their
# socket link (pair.sh), rxe<->rxe, rodp<->rodp and rodp<->rxe (rodp on A, rxe on B) in one
# boot, printed side by side with ratios. Like with like: the rodp<->rodp figure is compared with
# the rxe<->rxe figure on the same kernel and link.
# Bandwidth cases run for 5 s (perftest -D 5): BW average (MiB/s), message rate (Mpps) and the
# client's CPU use (perftest --cpu_util, the whole guest's, from /proc/stat); the client's device
# counters give its packets per second (sent + received, over the client's wall time, its
# connection setup included). Latency cases: t_typical (usec) over 1000 iterations.
# A case PROG:SIZE:e runs with perftest -e: each side sleeps on its completion channel instead
# of polling its CQ. With one vCPU a polling perftest holds the CPU until its time slice ends,
# and the driver's work (both drivers move packets in kernel work items) waits for that; asleep,
# it leaves the CPU to the driver at once, so these figures measure the drivers more than the
# scheduler. perftest has no events for WRITE nor with -D, so these run a fixed count (-n).
. /mnt/rodp/pair.sh
. /mnt/rodp/storage.sh
# RODP_BENCH_CASES and RODP_BENCH_PAIRS (space-separated, same forms) run a subset.
cases=${RODP_BENCH_CASES:-"ib_write_bw:65536 ib_read_bw:65536 ib_send_bw:65536 ib_write_bw:4096
ib_atomic_bw:8 ib_read_bw:65536:e ib_send_bw:65536:e ib_atomic_bw:8:e
ib_write_lat:8 ib_read_lat:8 ib_send_lat:8 ib_read_lat:8:e ib_send_lat:8:e"}
pairs=${RODP_BENCH_PAIRS:-"rxe:rxe rodp:rodp rodp:rxe"}

# pkts: the device's sent + received packet counters.
pkts() {
	c=/sys/class/infiniband/$dev/ports/1/hw_counters
	echo $(($(cat $c/sent_pkts) + $(cat $c/rcvd_pkts)))
}

# client PROG ARGS: runs the client half and prints "FIGURE MPPS CPU PKT/S" (n/a where
# perftest gives none).
client() {
	prog=$1
	shift
	p0=$(pkts) t0=$(date +%s.%N)
	timeout 120 "$prog" -d "$dev" -x "$gid" "$@" "$addr_a" > /tmp/bench.c 2>&1
	p1=$(pkts) t1=$(date +%s.%N)
	pps=$(echo "$p0 $p1 $t0 $t1" | awk '{ printf "%.0f", ($2 - $1) / ($4 - $3) }')
	case $prog in
	*_lat) awk -v pps="$pps" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ { v = $5 }
		END { print (v != "" ? v : "n/a"), "n/a", "n/a", pps }' /tmp/bench.c ;;
	*) awk -v pps="$pps" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {
			v = $4; m = $5; u = (NF >= 6) ? $6 : "n/a" }
		END { print (v != "" ? v : "n/a"), (m != "" ? m : "n/a"), (u != "" ? u : "n/a"), pps }' /tmp/bench.c ;;
	esac
	grep -q . /tmp/bench.c && sed 's/^/# client: /' /tmp/bench.c >&2
}

prof_start() {
	command -v perf > /dev/null || return 0
	echo 0 > /proc/sys/kernel/kptr_restrict
	echo -1 > /proc/sys/kernel/perf_event_paranoid
	perf record -a -F 499 -o /tmp/perf.data -- sleep 4 > /dev/null 2>&1 &
	ppid=$!
}
prof_end() {
	command -v perf > /dev/null || return 0
	wait $ppid
	perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym --percent-limit 0.7 2>/dev/null |
		grep -v '^$' | grep -v '^#' | head -45 | sed "s/^/# perf $1 $role: /"
}
: > "$res/bench2.raw"
n=0
# pair_up PAIR TAG: this guest's side of PAIR (A:B) as its device, both sides agreeing at the
# barrier TAG; fails (printing why) when either side has none. Exits without a peer.
pair_up() {
	[ "$role" = a ] && mine=${1%%:*} || mine=${1##*:}
	rc=0
	use_driver "$mine" > /tmp/setup 2>&1 || { rc=1; cat /tmp/setup; }
	peer=$(sync_peer "$2" $rc) || exit 1
	[ $rc = 0 ] && [ "$peer" = 0 ] || { echo "$1: no devices"; return 1; }
}
for p in $pairs; do
	pair_up "$p" "setup $p" || continue
	for c in $cases; do
		n=$((n + 1))
		prog=${c%%:*} size=${c#*:}
		mode=${size#*:} size=${size%%:*}
		[ "$mode" = "$size" ] && mode=
		case $prog:$mode in
		*_lat:) args="-n 1000 -s $size" ;;
		*_lat:e) args="-e -n 1000 -s $size" ;;
		ib_atomic_bw:) args="-D 5 --cpu_util" ;;
		ib_atomic_bw:e) args="-e -n 2000" ;;
		*:e) args="-e -n 200 -s $size" ;;
		*) args="-D 5 --cpu_util -s $size" ;;
		esac
		if [ "$role" = a ]; then
			# shellcheck disable=SC2086
			timeout 120 "$prog" -d "$dev" -x "$gid" $args > /tmp/bench.s 2>&1 &
			spid=$!
			waitfor 30 listen 18515 "$spid"
			sync_peer "ready $n" > /dev/null || exit 1
			prof_start
			wait $spid || sed 's/^/# server: /' /tmp/bench.s
			prof_end "$p $c"
			fig=$(sync_peer "done $n") || exit 1
			echo "$p $c $fig" | tee -a "$res/bench2.raw"
		else
			sync_peer "ready $n" > /dev/null || exit 1
			prof_start
			# shellcheck disable=SC2086
			fig=$(client "$prog" $args 2> /tmp/bench.log)
			prof_end "$p $c"
			sync_peer "done $n" "$fig" > /dev/null || exit 1
			case $fig in n/a*) cat /tmp/bench.log ;; esac
		fi
	done
done

# Storage (issue 14), like with like (rxe<->rxe, rodp<->rodp): B reads and writes A's NFS
# export (NFSv4.2, O_DIRECT, 1 MiB requests, 4 in flight) and A's NVMe over Fabrics namespace
# (1 MiB sequential writes and reads, 4 in flight; 4 KiB random reads, 32 in flight), each
# for RODP_BENCH_STORAGE_SECS (10) seconds with selftests/bench_blk. Then the verified runs
# make check is too slow for under TCG's debug kernel: RODP_BENCH_VERIFY_MB (256) MiB of
# random data copied to the export and written to the namespace, read back after a remount
# or a reconnect and compared (the figure is the MiB/s of each way, "FAIL" on a mismatch),
# and RODP_BENCH_FIO_SECS (60) seconds of fio's verified 4 KiB random writes at queue depth
# 32 on the namespace (storage.sh's fio_verify; IOPS, or "FAIL"). RODP_BENCH_STORAGE=0 leaves
# all of it out; RODP_BENCH_STORAGE_PAIRS chooses the pairs.
: > "$res/bench2.storage"
bb=/mnt/rodp/tests/bench_blk
secs=${RODP_BENCH_STORAGE_SECS:-10}
vmb=${RODP_BENCH_VERIFY_MB:-256}
fsecs=${RODP_BENCH_FIO_SECS:-60}
# wire_state WHEN: this guest's device counters, qdisc, NIC and UDP drop counts (where packets
# were lost), for the log.
wire_state() {
	echo "-- $role $1"
	rdma statistic show link "$dev/1" 2>/dev/null | tr -s ' \n' ' '
	echo
	tc -s qdisc show dev "$nic"
	ip -s link show "$nic"
	nstat -az 2>/dev/null | awk '$1 ~ /^(Udp|Ip)/ && $1 ~ /Err|Discard|Drop|NoPorts/ && $2 > 0'
}

# mbps MB T0: MB MiB over the time since T0 (date +%s.%N), in MiB/s.
mbps() { echo "$1 $2 $(date +%s.%N)" | awk '{ printf "%.1f", $1 / ($3 - $2) }'; }
# verified_copy DST REMOUNT_CMD: copies /tmp/verify.data to DST, runs REMOUNT_CMD (in this
# shell: nvme_connect sets nvme_blk), reads DST back and compares; sets v to "WRITE READ"
# (MiB/s), with FAIL for what failed.
verified_copy() {
	v="FAIL FAIL"
	t=$(date +%s.%N)
	dd if=/tmp/verify.data of="$1" bs=1M oflag=direct status=none || return
	vw=$(mbps "$vmb" "$t")
	v="$vw FAIL"
	eval "$2" || return
	t=$(date +%s.%N)
	[ "$1" = "$nvme_blk_old" ] && set -- "$nvme_blk"
	dd if="$1" of=/tmp/verify.back bs=1M count="$vmb" iflag=direct status=none &&
		cmp -s /tmp/verify.data /tmp/verify.back && v="$vw $(mbps "$vmb" "$t")"
	rm -f /tmp/verify.back
}
storage_pairs=${RODP_BENCH_STORAGE_PAIRS:-"rxe:rxe rodp:rodp"}
[ "${RODP_BENCH_STORAGE:-1}" = 0 ] && storage_pairs=
# fig OUT: the second (MiB/s) or first (IOPS, with "iops") figure of bench_blk's output OUT.
fig() { set -- $1 ${2:-}; [ $# -ge 2 ] || { echo n/a; return; }; [ "${3:-}" = iops ] && echo "$1" || echo "$2"; }
for p in $storage_pairs; do
	pair_up "$p" "storage setup $p" || continue
	if [ "$role" = a ]; then
		nfs_up $((160 + vmb)) > /tmp/storage.log 2>&1
		sync_peer "nfs up $p" $? > /dev/null || exit 1
		# B's phases take minutes on a slow kernel: A waits up to half an hour for each.
		figs=$(sync_peer "nfs done $p" "" 1800) || exit 1
		nfs_down >> /tmp/storage.log 2>&1
		nvme_up $((160 + vmb)) >> /tmp/storage.log 2>&1
		sync_peer "nvme up $p" $? > /dev/null || exit 1
		figs="$figs $(sync_peer "nvme done $p" "" 1800)" || exit 1
		wire_state "after the NVMe phase"
		nvme_down >> /tmp/storage.log 2>&1 || cat /tmp/storage.log
		set -- $figs
		for t in nfs_write nfs_read nfs_verified_write nfs_verified_read nvme_write \
			nvme_read nvme_randread nvme_verified_write nvme_verified_read \
			nvme_fio_randwrite; do
			echo "$p $t ${1:-n/a}" >> "$res/bench2.storage"
			shift
		done
	else
		head -c "${vmb}M" /dev/urandom > /tmp/verify.data
		w=n/a r=n/a v="n/a n/a"
		if [ "$(sync_peer "nfs up $p")" = 0 ] && nfs_mount 4.2 > /tmp/storage.log 2>&1; then
			w=$(fig "$($bb write /mnt/nfs/big 128 "$secs" 2>> /tmp/storage.log)")
			# What the writes reached, in MiB (they wrap at 128 MiB).
			mb=$(($(stat -c %s /mnt/nfs/big) >> 20))
			[ $mb -ge 4 ] && r=$(fig "$($bb read /mnt/nfs/big $mb "$secs" 2>> /tmp/storage.log)")
			rm -f /mnt/nfs/big
			nvme_blk_old=
			verified_copy /mnt/nfs/verify \
				"umount /mnt/nfs && nfs_mount 4.2 >> /tmp/storage.log 2>&1"
			umount /mnt/nfs
		fi
		sync_peer "nfs done $p" "$w $r $v" > /dev/null || exit 1
		w=n/a r=n/a q=n/a v="n/a n/a" f=n/a
		if [ "$(sync_peer "nvme up $p")" = 0 ] && nvme_connect >> /tmp/storage.log 2>&1; then
			w=$(fig "$($bb write "$nvme_blk" 128 "$secs" 2>> /tmp/storage.log)")
			wire_state "before the NVMe reads" >> /tmp/storage.log 2>&1
			r=$(fig "$($bb read "$nvme_blk" 128 "$secs" 2>> /tmp/storage.log)")
			wire_state "after the NVMe reads" >> /tmp/storage.log 2>&1
			q=$(fig "$($bb randread "$nvme_blk" 128 "$secs" 2>> /tmp/storage.log)" iops)
			# The namespace's device may have another name after the reconnect.
			nvme_blk_old=$nvme_blk
			verified_copy "$nvme_blk" \
				"nvme_disconnect >> /tmp/storage.log 2>&1 && nvme_connect >> /tmp/storage.log 2>&1"
			# fio's write IOPS ("IOPS=1234" or "IOPS=1.2k"), or FAIL.
			if fio_verify "$nvme_blk" 0 "${vmb}M" "$fsecs" 32 > /tmp/fio.sum 2>&1; then
				f=$(sed -n 's/.*write: IOPS=\([0-9.]*\)\(k*\),.*/\1 \2/p' /tmp/fio.sum |
					awk '{ printf "%.0f", $2 == "k" ? $1 * 1000 : $1 }')
			else
				f=FAIL
				cat /tmp/fio.sum >> /tmp/storage.log
			fi
			nvme_disconnect >> /tmp/storage.log 2>&1
		fi
		rm -f /tmp/verify.data
		sync_peer "nvme done $p" "$w $r $q $v $f" > /dev/null || exit 1
		case "$w $r $q $v $f" in *n/a* | *FAIL*) cat /tmp/storage.log ;; esac
	fi
done

rdma_links_delete
rmmod rdma_rxe 2>/dev/null
rmmod rodp 2>/dev/null
[ "$role" = a ] || exit 0

echo "== make bench: two hosts (guests A and B, one vCPU each, QEMU socket link)"
awk '
	{ fig[$1, $2] = $3; mpps[$1, $2] = $4; cpu[$1, $2] = $5; pps[$1, $2] = $6
	  if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
	function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "n/a" }
	# The figure of pair p in case o: 8-byte atomics by their rate (perftest rounds their
	# MiB/s to two decimals), the rest as perftest gives it.
	function val(p, o) { return o ~ /^ib_atomic/ ? mpps[p, o] : fig[p, o] }
	END {
		printf "%-13s %7s %-5s %5s %10s %10s %9s %10s\n", "test", "bytes", "mode", "unit",
			"rxe-rxe", "rodp-rodp", "rodp/rxe", "rodp-rxe"
		for (i = 1; i <= n; i++) {
			split(order[i], k, ":")
			o = order[i]
			unit = k[1] ~ /_lat$/ ? "usec" : k[1] ~ /^ib_atomic/ ? "Mpps" : "MiB/s"
			printf "%-13s %7s %-5s %5s %10s %10s %9s %10s\n", k[1], k[2],
				k[3] == "e" ? "event" : "poll", unit, val("rxe:rxe", o),
				val("rodp:rodp", o), ratio(val("rodp:rodp", o), val("rxe:rxe", o)),
				val("rodp:rxe", o)
		}
		print ""
		printf "%-13s %7s %-5s %-10s %8s %6s %10s %10s\n", "test", "bytes", "mode", "pair",
			"Mpps", "CPU%", "pkt/s", "CPU s/GiB"
		for (i = 1; i <= n; i++) {
			split(order[i], k, ":")
			if (k[1] ~ /_lat$/)
				continue
			for (j = 1; j <= 3; j++) {
				p = j == 1 ? "rxe:rxe" : j == 2 ? "rodp:rodp" : "rodp:rxe"
				f = fig[p, order[i]]; u = cpu[p, order[i]]
				# CPU seconds per GiB moved: one vCPU busy u % at f MiB/s.
				g = (f + 0 > 0 && u + 0 > 0) ? sprintf("%.1f", u / 100 / (f / 1024)) : "n/a"
				printf "%-13s %7s %-5s %-10s %8s %6s %10s %10s\n", k[1], k[2],
					k[3] == "e" ? "event" : "poll", p,
					mpps[p, order[i]], u, pps[p, order[i]], g
			}
		}
	}' "$res/bench2.raw" | tee "$res/bench2.table"
[ -s "$res/bench2.storage" ] || exit 0
echo
awk '
	{ fig[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
	function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "n/a" }
	END {
		printf "%-20s %-36s %6s %10s %10s %9s\n", "storage", "I/O", "unit", "rxe-rxe",
			"rodp-rodp", "rodp/rxe"
		for (i = 1; i <= n; i++) {
			o = order[i]
			io = o ~ /randread/ ? "4 KiB random read, QD 32" : \
				o ~ /fio/ ? "4 KiB random write, QD 32, verified" : \
				o ~ /verified_read/ ? "verified read back" : \
				o ~ /verified/ ? "1 MiB writes, to verify" : o ~ /read/ ? \
				"1 MiB sequential read" : "1 MiB sequential write"
			printf "%-20s %-36s %6s %10s %10s %9s\n", o, io,
				o ~ /randread|fio/ ? "IOPS" : "MiB/s", fig["rxe:rxe", o], fig["rodp:rodp", o],
				ratio(fig["rodp:rodp", o], fig["rxe:rxe", o])
		}
	}' "$res/bench2.storage" | tee -a "$res/bench2.table"
