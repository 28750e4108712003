# SPDX-License-Identifier: GPL-2.0
# `make bench`: perftest and bench_odp against kernel rxe, then against rodp, in this one guest
# boot (never both loaded: see Documentation/rodp.rst), and the guest's memcpy bandwidth as the
# ceiling.
# Bandwidth in MB/s (perftest's BW average), latency in usec (perftest's t_typical).
. /mnt/rodp/lib.sh
make_netdevs
res=/mnt/rodp/results
cases="ib_write_bw:4096 ib_write_bw:65536 ib_write_bw:1048576 ib_read_bw:65536
ib_send_bw:65536 ib_atomic_bw:8 ib_write_lat:8 ib_read_lat:8 ib_send_lat:8 ib_write_lat:65536"

# measure SERVER_DEV CLIENT_DEV PROG SIZE: one perftest run; prints the client's figure.
measure() {
	sdev=$1 cdev=$2 prog=$3 size=$4
	case $prog in
	*_lat) args="-n 2000 -s $size" ;;
	ib_atomic_bw) args="-n 2000" ;;
	*) [ "$size" -ge 1048576 ] && args="-n 200 -s $size" || args="-n 2000 -s $size" ;;
	esac
	timeout 600 $prog -d "$sdev" -x 1 $args > /tmp/bench.s 2>&1 &
	spid=$!
	sleep 1
	timeout 600 $prog -d "$cdev" -x 1 $args 127.0.0.1 > /tmp/bench.c 2>&1
	wait $spid
	case $prog in
	*_lat) awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ { v = $5 } END { print v ? v : "n/a" }' /tmp/bench.c ;;
	*) awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { v = $4 } END { print v ? v : "n/a" }' /tmp/bench.c ;;
	esac
}

# run DRIVER: both devices of DRIVER on the veth pair; one line "prog:size value" per case.
run() {
	drv=$1
	rdma link add ${drv}0 type $drv netdev veth0
	rdma link add ${drv}1 type $drv netdev veth1
	for c in $cases; do
		echo "$c $(measure ${drv}0 ${drv}1 ${c%%:*} ${c##*:})"
	done > "$res/bench.$drv"
	# ODP: first touch, prefetch, ODP vs pinned vs implicit, invalidation (bench_odp.c).
	timeout 1800 /mnt/rodp/tests/bench_odp ${drv}0 ${drv}1 ${RODP_BENCH_ODP_MB:-1024} \
		> "$res/bench.odp.$drv" 2> "$res/bench.odp.$drv.err" || true
	rdma link delete ${drv}0
	rdma link delete ${drv}1
}

memcpy=$(/mnt/rodp/tests/bench_memcpy)
# RODP_BENCH_DRIVERS limits the run (default: both).
drivers=${RODP_BENCH_DRIVERS:-rxe rodp}
: > "$res/bench.rxe"
: > "$res/bench.rodp"
: > "$res/bench.odp.rxe"
: > "$res/bench.odp.rodp"
case $drivers in *rxe*) modprobe rdma_rxe && run rxe; rmmod rdma_rxe ;; esac
case $drivers in *rodp*) modprobe rodp && run rodp; rmmod rodp ;; esac

echo "== make bench: rodp vs rxe, same guest boot (single-thread memcpy: $memcpy MB/s)"
awk -v memcpy="$memcpy" '
	FILENAME == ARGV[1] { rxe[$1] = $2; next }
	{
		split($1, k, ":"); lat = k[1] ~ /_lat$/
		r = rxe[$1]; ratio = (r > 0 && $2 > 0) ? sprintf("%.2f", $2 / r) : "n/a"
		unit = lat ? "usec" : "MB/s"
		pct = (!lat && $2 > 0) ? sprintf("%.0f%%", 100 * $2 / memcpy) : ""
		printf "%-14s %8s %5s %12s %12s %8s %10s\n", k[1], k[2], unit, r, $2, ratio, pct
	}' "$res/bench.rxe" "$res/bench.rodp" > "$res/bench.table"
printf "%-14s %8s %5s %12s %12s %8s %10s\n" test bytes unit rxe rodp rodp/rxe "of memcpy"
cat "$res/bench.table"

echo "== make bench: ODP, rodp vs rxe (${RODP_BENCH_ODP_MB:-1024} MiB first-touch range)"
awk '
	FILENAME == ARGV[1] { rxe[$1] = $2; next }
	{ rodp[$1] = $2; order[++n] = $1 }
	function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "n/a" }
	END {
		printf "%-26s %12s %12s %9s\n", "figure", "rxe", "rodp", "rodp/rxe"
		for (i = 1; i <= n; i++) {
			k = order[i]
			printf "%-26s %12s %12s %9s\n", k, rxe[k], rodp[k], ratio(rodp[k], rxe[k])
		}
		print "targets (rodp):"
		printf "  first touch vs rxe        %6s  (>= 2)\n", ratio(rodp["first_touch_pages_per_s"], rxe["first_touch_pages_per_s"])
		printf "  prefetch speeds first xfer %5s  (>= 5; 16 MiB)\n", ratio(rodp["first_xfer_us"], rodp["first_xfer_prefetched_us"])
		printf "  prefetch speeds first page %5s  (>= 5; 4 KiB messages)\n", ratio(rodp["first_page_us"], rodp["first_page_prefetched_us"])
		printf "  ODP / pinned steady state %6s  (>= 0.95)\n", ratio(rodp["odp_MBps"], rodp["pinned_MBps"])
		printf "  implicit / explicit       %6s  (>= 0.95)\n", ratio(rodp["implicit_MBps"], rodp["odp_MBps"])
	}' "$res/bench.odp.rxe" "$res/bench.odp.rodp" | tee "$res/bench.odp.table"
