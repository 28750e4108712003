# SPDX-License-Identifier: GPL-2.0
# Unchanged rdma-core and perftest programs against rodp, as TAP: each case runs a server and a
# client process and passes when both exit 0. Sourced by check.sh after lib.sh.

tools_n=0
tools_tap=$res/tools.tap
: > "$tools_tap.body"

# server_ready PID [TCP_PORT]: waits until the server PID listens on TCP_PORT (at most 10 s, or
# until it has ended), or a second without TCP_PORT (rdma_cm servers listen on no socket).
server_ready() {
	if [ -z "${2:-}" ]; then
		sleep 1
		return
	fi
	waitfor 10 listen "$2" "$1" || true
}

# pair NAME SERVER_CMD CLIENT_CMD [TCP_PORT]: starts the server, then the client once the
# server is ready (server_ready); passes when both exit 0 within 120 s. perftest gives up when it cannot calibrate its cycle counter
# against the clock ("Can't produce a report", r^2 < 0.9: the emulated TSC drifts under load);
# that says nothing about the device, so such a run is repeated once.
pair() {
	name=$1
	tools_n=$((tools_n + 1))
	pair_t0=$(now)
	for attempt in 1 2; do
		log=$(mktemp)
		timeout 120 $2 > "$log.s" 2>&1 &
		spid=$!
		server_ready $spid "${4:-}"
		crc=0 src=0
		timeout 120 $3 > "$log.c" 2>&1 || crc=$?
		wait $spid || src=$?
		if [ $src -eq 0 ] && [ $crc -eq 0 ]; then
			echo "ok $tools_n $name" >> "$tools_tap.body"
		elif [ $attempt = 1 ] && grep -q "Can't produce a report" "$log.s" "$log.c"; then
			echo "# $name: perftest could not calibrate its clock; once more" >> "$tools_tap.body"
			rm -f "$log" "$log.s" "$log.c"
			continue
		else
			echo "not ok $tools_n $name # server $src, client $crc" >> "$tools_tap.body"
			sed 's/^/# server: /' "$log.s" >> "$tools_tap.body"
			sed 's/^/# client: /' "$log.c" >> "$tools_tap.body"
		fi
		rm -f "$log" "$log.s" "$log.c"
		break
	done
	timing "tools/$name" "$pair_t0"
}

# tool NAME SERVER_DEV CLIENT_DEV PROG ARGS...: PROG -d SERVER_DEV ARGS, then
# PROG -d CLIENT_DEV ARGS 127.0.0.1 (out-of-band connection setup over TCP, on the default
# port of rdma-core's examples and of perftest, 18515).
tool() {
	name=$1 sdev=$2 cdev=$3 prog=$4
	shift 4
	pair "$name" "$prog -d $sdev $*" "$prog -d $cdev $* 127.0.0.1" 18515
}

# A test before may have taken a veth down, which drops its permanent neighbour entry.
local_arp
rdma link add rodp0 type rodp netdev veth0
rdma link add rodp1 type rodp netdev veth1
for pair in "rodp0 rodp0" "rodp0 rodp1"; do
	set -- $pair
	s=$1 c=$2
	tool "ibv_rc_pingpong $s-$c" $s $c ibv_rc_pingpong -g 1 -n 50
	tool "ibv_ud_pingpong $s-$c" $s $c ibv_ud_pingpong -g 1 -n 50 -s 512
	tool "ibv_srq_pingpong $s-$c" $s $c ibv_srq_pingpong -g 1 -n 50
	tool "ibv_rc_pingpong inline $s-$c" $s $c ibv_rc_pingpong -g 1 -n 50 -s 64
done
# perftest's default size is 64 KiB for the bandwidth programs (a case of its own would repeat
# the 65536 one) and 2 bytes for the latency programs; a latency at 1 MiB is a bandwidth case.
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat; do
	case $t in
	ib_atomic_bw) sizes=default ;;
	*_bw) sizes="4096 65536 1048576" ;;
	*) sizes="default 4096 65536" ;;
	esac
	for sz in $sizes; do
		if [ "$sz" = default ]; then szarg=; else szarg="-s $sz"; fi
		tool "$t $sz rodp0-rodp1" rodp0 rodp1 $t -x 1 -n 50 $szarg
	done
done
# On-demand paging: rdma-core's ODP ping-pong and perftest's --odp, rodp0 to rodp1.
tool "ibv_rc_pingpong odp rodp0-rodp1" rodp0 rodp1 ibv_rc_pingpong -g 1 -n 50 -o
tool "ibv_rc_pingpong odp prefetch rodp0-rodp1" rodp0 rodp1 ibv_rc_pingpong -g 1 -n 50 -o -P
tool "ibv_rc_pingpong implicit odp rodp0-rodp1" rodp0 rodp1 ibv_rc_pingpong -g 1 -n 50 -O
for t in ib_write_bw ib_read_bw ib_send_bw; do
	tool "$t odp 65536 rodp0-rodp1" rodp0 rodp1 $t -x 1 -n 50 -s 65536 --odp
done
# rdma_cm (connection setup through the kernel's CM over rodp's QP1): the server binds
# veth0's address; the client connects to it from rodp0, or with veth1's address from rodp1.
for p in "rodp0 10.0.0.1" "rodp1 10.0.0.2"; do
	set -- $p
	pair "rping rodp0-$1" "rping -s -a 10.0.0.1 -p 7174 -C 20 -S 4096 -V" \
		"rping -c -a 10.0.0.1 -I $2 -p 7174 -C 20 -S 4096 -V"
done
# librdmacm's examples: RC connections, and UD (SIDR) address exchange.
pair "ucmatose rodp0-rodp0" "ucmatose -b 10.0.0.1 -c 2 -C 20" "ucmatose -s 10.0.0.1 -c 2 -C 20"
pair "udaddy rodp0-rodp0" "udaddy -b 10.0.0.1" "udaddy -s 10.0.0.1"
rdma link delete rodp0
rdma link delete rodp1
{
	echo "TAP version 13"
	echo "1..$tools_n"
	cat "$tools_tap.body"
} > "$tools_tap"
rm -f "$tools_tap.body"
cat "$tools_tap"
