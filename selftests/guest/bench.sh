# SPDX-License-Identifier: GPL-2.0
# `make bench`: perftest, bench_odp and bench_xmw against kernel rxe, then against rodp, in this
# one guest boot (never both loaded: see Documentation/rodp.rst), and the guest's memcpy bandwidth
# as the ceiling.
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

# RODP_BENCH_PARTS limits the run to some of perftest, odp and xmw (default: all three).
parts=" ${RODP_BENCH_PARTS:-perftest odp xmw} "
has() { case $parts in *" $1 "*) return 0 ;; esac; return 1; }

# run DRIVER: both devices of DRIVER on the veth pair; one line "prog:size value" per case.
run() {
	drv=$1
	rdma link add ${drv}0 type $drv netdev veth0
	rdma link add ${drv}1 type $drv netdev veth1
	if has perftest; then
		for c in $cases; do
			echo "$c $(measure ${drv}0 ${drv}1 ${c%%:*} ${c##*:})"
		done > "$res/bench.$drv"
	fi
	# ODP: first touch, prefetch, ODP vs pinned vs implicit, invalidation (bench_odp.c).
	if has odp; then
		timeout 1800 /mnt/rodp/tests/bench_odp ${drv}0 ${drv}1 ${RODP_BENCH_ODP_MB:-1024} \
			> "$res/bench.odp.$drv" 2> "$res/bench.odp.$drv.err" || true
	fi
	# Extended memory windows: a matrix column and a 2-D tile moved by SGE lists, by packing,
	# and through a layout window (bench_xmw.c; the last is rodp's alone).
	if has xmw; then
		timeout 600 /mnt/rodp/tests/bench_xmw ${drv}0 ${drv}1 \
			> "$res/bench.xmw.$drv" 2> "$res/bench.xmw.$drv.err" || true
	fi
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
: > "$res/bench.xmw.rxe"
: > "$res/bench.xmw.rodp"
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

# Both drivers' figures ("name value" lines of FILE.rxe and FILE.rodp) and rodp/rxe, for an
# awk program whose END block calls figures() and then prints its targets.
figures='
	FILENAME == ARGV[1] { rxe[$1] = $2; next }
	{ rodp[$1] = $2; order[++n] = $1 }
	function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "n/a" }
	function figures(   i, k) {
		printf "%-26s %12s %12s %9s\n", "figure", "rxe", "rodp", "rodp/rxe"
		for (i = 1; i <= n; i++) {
			k = order[i]
			printf "%-26s %12s %12s %9s\n", k, rxe[k], rodp[k], ratio(rodp[k], rxe[k])
		}
	}'

echo "== make bench: ODP, rodp vs rxe (${RODP_BENCH_ODP_MB:-1024} MiB first-touch range)"
awk "$figures"'
	END {
		figures()
		print "targets (rodp):"
		printf "  first touch vs rxe        %6s  (>= 2)\n", ratio(rodp["first_touch_pages_per_s"], rxe["first_touch_pages_per_s"])
		printf "  prefetch speeds first xfer %5s  (>= 5; 16 MiB)\n", ratio(rodp["first_xfer_us"], rodp["first_xfer_prefetched_us"])
		printf "  prefetch speeds first page %5s  (>= 5; 4 KiB messages)\n", ratio(rodp["first_page_us"], rodp["first_page_prefetched_us"])
		printf "  ODP / pinned steady state %6s  (>= 0.95)\n", ratio(rodp["odp_MBps"], rodp["pinned_MBps"])
		printf "  implicit / explicit       %6s  (>= 0.95)\n", ratio(rodp["implicit_MBps"], rodp["odp_MBps"])
	}' "$res/bench.odp.rxe" "$res/bench.odp.rodp" | tee "$res/bench.odp.table"

echo "== make bench: extended memory windows (usec per object moved by RDMA WRITE; lower is better)"
awk "$figures"'
	END {
		figures()
		print "targets (rodp; a speed-up is the slower way'"'"'s time over the layout'"'"'s):"
		split("column tile", o, " ")
		for (j = 1; j <= 2; j++) {
			printf "  %-6s layout vs SGE lists %6s  (>= 3)\n", o[j], ratio(rodp[o[j] "_sge_us"], rodp[o[j] "_layout_us"])
			printf "  %-6s layout vs packing   %6s  (>= 1.2)\n", o[j], ratio(rodp[o[j] "_pack_us"], rodp[o[j] "_layout_us"])
		}
	}' "$res/bench.xmw.rxe" "$res/bench.xmw.rodp" | tee "$res/bench.xmw.table"
