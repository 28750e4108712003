# SPDX-License-Identifier: GPL-2.0
# The two-guest phase of `make check` (scripts/run.sh check2). This script runs in both guests
# (pair.sh sets them up). Each case names the RDMA driver on each side and a role
# function; the role's server half runs on A, its client half on B. The guests keep in step
# through barriers over the link (peer.py): every wait has a time limit, so a hung or crashed
# peer fails the run rather than stalling it. A writes results/check2.tap (a case passes when
# both halves exit 0); both guests record their times, kernel log and kmemleak report.
. /mnt/rodp/pair.sh
. /mnt/rodp/storage.sh
timing boot 0,0
# RODP_TESTS2: globs of case names ("ibv_rc_pingpong rxe-rxe"); default all.
filter2=${RODP_TESTS2:-*}
kml_clear

# Roles: ROLE server|client|ready ARGS. "ready" succeeds once the server half (started on A)
# accepts clients. Each sees dev and gid (this guest's device) and addr_a (the server), and
# runs its programs through run (120 s each at most).
run() { timeout 120 "$@"; }

# verbs PROG ARGS: a libibverbs example (ibv_rc_pingpong, ...); the two exchange their QP
# addresses over TCP port 18515 before the RDMA traffic. An argument "rodp:X" passes X only on
# a rodp side: the matrix puts ODP (-o, -O, -P) on rodp's side. With -c the server checks the
# first byte of each page of what it received last and only prints "invalid data in page N"
# (its exit status stays 0): a server that prints it fails the case. rxe's own ODP receive path
# (7.3) writes every packet of a message at the start of its page, so an rxe server with -o
# receives a message of several packets wrongly from any sender (Documentation/rodp.rst, the
# wire section): -o stays off rxe's side.
verbs() {
	side=$1 prog=$2
	shift 2
	for a do
		shift
		case $a in
		rodp:*) if [ "$mine" = rodp ]; then set -- "$@" "${a#rodp:}"; fi ;;
		*) set -- "$@" "$a" ;;
		esac
	done
	case $side in
	server)
		run "$prog" -d "$dev" -g "$gid" "$@" > /tmp/verbs.out 2>&1
		vrc=$?
		cat /tmp/verbs.out
		if grep -q "invalid data" /tmp/verbs.out; then vrc=1; fi
		return $vrc
		;;
	client) run "$prog" -d "$dev" -g "$gid" "$@" "$addr_a" ;;
	ready) waitfor 60 listen 18515 "$spid" ;;
	esac
}

# perf PROG ARGS: a perftest program (ib_read_lat, ...), the same exchange on port 18515; the
# GID index is its -x. The bandwidth cases pass -N (no peak figure): otherwise the server
# prints "WARNING: BW peak won't be measured", which reads like a kernel warning in the log.
# All pass -F: perftest calibrates its cycle counter against gettimeofday (get_clock.c, a
# linear regression over 200 samples) and without -F exits with "Can't produce a report" when
# the fit is poor (r^2 < 0.9), which an emulated guest's clock sometimes gives; check wants
# the transfer, not the figures (bench2.sh keeps the check).
perf() {
	side=$1 prog=$2
	shift 2
	case $side in
	server) run "$prog" -d "$dev" -x "$gid" -F "$@" ;;
	client) run "$prog" -d "$dev" -x "$gid" -F "$@" "$addr_a" ;;
	ready) waitfor 60 listen 18515 "$spid" ;;
	esac
}

# udaddy ARGS: rdma_cm's UD example: SIDR to A's address over QP1, then datagrams each way.
udaddy_role() {
	side=$1
	shift
	case $side in
	server) run udaddy -b "$addr_a" "$@" ;;
	client) run udaddy -s "$addr_a" "$@" ;;
	ready) poll 60 cm_listening ;;
	esac
}

# ucmatose ARGS: rdma_cm's RC example: connections over the CM's MADs, then SENDs each way.
ucmatose_role() {
	side=$1
	shift
	case $side in
	server) run ucmatose -b "$addr_a" "$@" ;;
	client) run ucmatose -s "$addr_a" "$@" ;;
	ready) poll 60 cm_listening ;;
	esac
}

# rping ARGS: rdma_cm (the kernel's CM over QP1) to A's address, data verified.
rping_role() {
	side=$1
	shift
	case $side in
	server) run rping -s -a "$addr_a" -V "$@" ;;
	client) run rping -c -a "$addr_a" -V "$@" ;;
	ready) poll 60 cm_listening ;;
	esac
}

# wire_ops ARGS: selftests/wire_ops.c, TCP port 18516 for the exchange. Without ARGS: ATOMIC
# WRITE and FLUSH from B into A's memory, read back and compared on both sides. With -v: A
# vanishes (takes its link down for 6 s) after B's first WRITE, and B's next WRITE must end in
# RETRY_EXC_ERR within the time its QP's timeout and retry_cnt imply. With -s: 48 WRITEs and a
# SEND each way at once (pipelined), the data compared on both sides; -r N: N such rounds.
# nfs_role SIDE VERSION [down]: NFS over RDMA (storage.sh). The client mounts the server's
# export, writes 4 MiB of random data, then 32 small files from four writers at once,
# unmounts, mounts again and reads everything back with three readers at once (each half of
# the data, the small files), runs NFS_FIO_SECS of verified random I/O on another file (fio),
# then writes the data's checksum to the export; the server waits for that file and checks its
# own copy against it. With "down" the server takes its link down for 10 s once the first MiB
# has arrived: the client's transport reconnects once the link is back and the copy goes on (a
# hard mount), the data intact.
# link_blip SECS: takes this guest's NIC down for SECS seconds.
link_blip() {
	ip link set "$nic" down
	sleep "$1"
	ip link set "$nic" up
}

NFS_MB=4 NFS_FIO_SECS=5
nfs_role() {
	side=$1 vers=$2 down=${3:-}
	case $side in
	server)
		nfs_up 64 || return 1
		if [ -n "$down" ]; then
			waitfor 120 size /srv/nfs/data 1048576
			echo "link down at $(stat -c %s /srv/nfs/data 2>/dev/null) bytes"
			link_blip 10
		fi
		nrc=1
		if waitfor 300 file /srv/nfs/done; then
			sleep 1
			echo "client: $(cat /srv/nfs/done)"
			echo "server: $(sha256sum < /srv/nfs/data)"
			[ "$(cat /srv/nfs/done)" = "$(sha256sum < /srv/nfs/data)" ] && nrc=0
		fi
		nfs_down
		return $nrc
		;;
	ready) waitfor 60 line /proc/fs/nfsd/portlist rdma "$spid" ;;
	client)
		nfs_mount "$vers" || return 1
		head -c ${NFS_MB}M /dev/urandom > /tmp/nfs.data
		nrc=0
		# Not t0: case2_once's start, which its timing line needs.
		now_read
		ct0=$now_s
		timeout 300 cp /tmp/nfs.data /mnt/nfs/data || nrc=1
		now_read
		echo "copied in $((now_s - ct0)) s"
		# Four writers at once, eight small files each.
		wpids=
		for w in 1 2 3 4; do
			(for i in $(seq 8); do echo "file $w.$i" > /mnt/nfs/f$w.$i || exit 1; done) &
			wpids="$wpids $!"
		done
		for w in $wpids; do wait "$w" || nrc=1; done
		run umount /mnt/nfs || nrc=1
		nfs_mount "$vers" || return 1
		# Read back by three readers at once: the data's two halves and the small files.
		half=$((NFS_MB * 512 * 1024))
		run cmp -n $half /tmp/nfs.data /mnt/nfs/data & r1=$!
		run cmp -i $half /tmp/nfs.data /mnt/nfs/data & r2=$!
		(
			for w in 1 2 3 4; do for i in $(seq 8); do
				read -r line < /mnt/nfs/f$w.$i
				[ "$line" = "file $w.$i" ] || { echo "f$w.$i differs"; exit 1; }
			done; done
		) & r3=$!
		wait $r1 || nrc=1
		wait $r2 || nrc=1
		wait $r3 || nrc=1
		# Verified random I/O on a file of the export, 8 in flight.
		fio_verify /mnt/nfs/fio.dat 0 4M $NFS_FIO_SECS 8 || nrc=1
		rm -f /mnt/nfs/fio.dat
		grep -E 'xprtrdma|proto=rdma' /proc/self/mountstats | head -2
		[ $nrc = 0 ] && sha256sum < /tmp/nfs.data > /mnt/nfs/done
		run umount /mnt/nfs || nrc=1
		rm -f /tmp/nfs.data
		return $nrc
		;;
	esac
}

# nvme_role SIDE [srq] [down]: NVMe over Fabrics over RDMA (storage.sh): A's target exports
# 16 MiB; B writes 4 MiB of random data with O_DIRECT, disconnects and connects again, reads
# the data back and compares, runs NVME_FIO_SECS of verified 4 KiB random I/O at queue depth
# 32 (fio), then writes a marker with the data's SHA-256 into the last block and disconnects;
# A waits for the marker and checks its file against it. With "srq" the target's receives go
# through kernel SRQs on A's device (at least one must exist while the host is connected).
# With "down" A takes its link down for 10 s once the first MiB has arrived: B's controller
# must reconnect by itself (nvme_connect's 2 s reconnect delay) and the write go on, the data
# intact.
NVME_FIO_SECS=5
nvme_role() {
	side=$1
	shift
	srq= down=
	for o do
		case $o in srq) srq=srq ;; down) down=1 ;; esac
	done
	case $side in
	server)
		nvme_up 16 $srq || return 1
		if [ -n "$down" ]; then
			waitfor 120 data $NVME_IMG 1048576
			echo "link down after the first MiB"
			link_blip 10
		fi
		nrc=1 srqs=0
		for i in $(seq 150); do
			# The SRQs live while a host is connected: counted every 2 s while waiting for
			# the marker (a byte not zero in the last block).
			waitfor 2 data $NVME_IMG $((4095 * 4096)) && w=0 || w=1
			n=$(nvme_srqs)
			[ "$n" -gt "$srqs" ] && srqs=$n
			[ $w = 0 ] || continue
			m=$(dd if=$NVME_IMG bs=4096 skip=4095 count=1 2>/dev/null | tr -d '\0')
			case $m in
			DONE*)
				echo "client: $m"
				s=$(head -c 4M $NVME_IMG | sha256sum)
				echo "server: $s"
				[ "$m" = "DONE $s" ] && nrc=0
				echo "SRQs on $dev at most: $srqs"
				if [ -n "$srq" ] && [ "$srqs" = 0 ]; then nrc=1; fi
				break
				;;
			esac
			sleep 0.5
		done
		nvme_down || nrc=1
		return $nrc
		;;
	ready) poll 60 cm_listening ;;
	client)
		nvme_connect || return 1
		nrc=1
		recon0=$(dmesg | grep -c "Successfully reconnected")
		head -c 4M /dev/urandom > /tmp/nvme.data
		# With "down" the same 4 MiB are written again until the controller has reconnected
		# by itself (at most 90 s): the link may go down after a pass has ended.
		now_read
		ct0=$now_s passes=0 wrc=0 recon=0
		while :; do
			run dd if=/tmp/nvme.data of="$nvme_blk" bs=64k oflag=direct status=none ||
				{ wrc=1; break; }
			passes=$((passes + 1))
			recon=$(($(dmesg | grep -c "Successfully reconnected") - recon0))
			[ -n "$down" ] && [ "$recon" = 0 ] || break
			now_read
			[ $((now_s - ct0)) -lt 90 ] || break
		done
		now_read
		echo "written $passes time(s) in $((now_s - ct0)) s"
		if [ -n "$down" ]; then
			echo "the controller reconnected by itself $recon time(s)"
			[ "$recon" -ge 1 ] || wrc=1
		fi
		[ $wrc = 0 ] && nvme_disconnect && nvme_connect &&
			run dd if="$nvme_blk" of=/tmp/nvme.back bs=64k count=64 iflag=direct \
				status=none &&
			cmp /tmp/nvme.data /tmp/nvme.back && nrc=0
		# Verified random I/O at queue depth 32 in the namespace's third quarter.
		[ $nrc = 0 ] && { fio_verify "$nvme_blk" 8M 4M $NVME_FIO_SECS 32 || nrc=1; }
		{ printf 'DONE %s' "$(sha256sum < /tmp/nvme.data)"; head -c 4096 /dev/zero; } |
			head -c 4096 > /tmp/nvme.mark
		run dd if=/tmp/nvme.mark of="$nvme_blk" bs=4096 seek=4095 oflag=direct status=none ||
			nrc=1
		rm -f /tmp/nvme.data /tmp/nvme.back /tmp/nvme.mark
		nvme_disconnect || nrc=1
		return $nrc
		;;
	esac
}

# unload_role: the end of the storage cases (storage.sh's storage_unload on both sides).
unload_role() {
	case $1 in
	server | client) storage_unload ;;
	ready) true ;;
	esac
}

ops_role() {
	side=$1
	shift
	case $side in
	server) run /mnt/rodp/tests/wire_ops -d "$dev" -g "$gid" "$@" ;;
	client) run /mnt/rodp/tests/wire_ops -d "$dev" -g "$gid" "$@" -c "$addr_a" ;;
	ready) waitfor 60 listen 18516 "$spid" ;;
	esac
}

# v6 / vlan SIDE ROLE ARGS: ROLE over this guest's IPv6 address / its VLAN 18 address: the
# GID the programs use for RDMA (their TCP exchange stays on IPv4).
via() {
	vside=$1 vaddr=$2 vfn=$3
	shift 3
	[ "$vside" = ready ] && { $vfn ready "$@"; return; }
	g0=$gid vrc=0
	gid=$(gid_of "$vaddr") || return 1
	$vfn "$vside" "$@" || vrc=$?
	gid=$g0
	return $vrc
}
v6() {
	vs=$1
	shift
	via "$vs" "$addr6" "$@"
}
vlan() {
	vs=$1
	shift
	via "$vs" "$addrv" "$@"
}

# lossy ROLE ARGS...: ROLE over a bad link. netem on this guest's NIC (both guests run it)
# drops 2 % of the packets it sends, duplicates 1 %, delays them by 2 ms and sends every fourth
# at once, ahead of the delayed ones; afterwards the qdisc's counts (dropped, duplicated) and
# the RDMA device's counters show what the transport had to mend. One kind of packet passes
# unharmed: the CM's DREQ (a MAD to QP1). An rdma_cm program that destroys its ID right after
# rdma_disconnect() (rping's client) takes the DREQ's retransmissions with it (cm.c cancels
# the MAD of an ID in DREQ_SENT when it is destroyed), so a lost DREQ would leave the server
# connected and waiting for ever, whatever the device; every other CM message is retried by
# the CM while its ID lives, and goes through netem like the rest.
lossy() {
	netem_run dreq "loss 2% duplicate 1% delay 2ms reorder 25% 50%" "$@" || return 1
	[ "$1" = client ] && [ "$2" = rping_role ] || return 0
	# rping's client sends one DREQ: the filter must have seen it (else a lost DREQ would be
	# back to a hang in one run of fifty).
	nsent=$(sed -n '/^class prio 1:1 /{n;s/.* bytes \([0-9]*\) pkt.*/\1/p;}' /tmp/netem.class)
	echo "DREQs spared: ${nsent:-none}"
	[ "${nsent:-0}" -ge 1 ]
}

# netem_qdisc SPARE NETEM: NETEM as this guest's NIC's root qdisc. With SPARE "dreq", the root
# is a prio qdisc whose second band holds netem and whose first, plain, band takes only the
# CM's DREQs: IPv4 without options (the kernel sends none), UDP to port 4791, BTH destination
# QP 1 (bytes 4-7 of the BTH, at 32), and in the MAD after BTH and DETH (at 48) management
# class 7 (CM, at 49) and attribute 0x0015 (DREQ, at 64).
netem_qdisc() {
	if [ "$1" != dreq ]; then
		# shellcheck disable=SC2086 # the options are words
		tc qdisc replace dev "$nic" root netem $2
		return
	fi
	tc qdisc replace dev "$nic" root handle 1: prio bands 2 \
		priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 &&
		# shellcheck disable=SC2086 # the options are words
		tc qdisc add dev "$nic" parent 1:2 handle 20: netem $2 &&
		tc filter add dev "$nic" parent 1: protocol ip prio 1 u32 \
			match ip protocol 17 0xff match ip dport 4791 0xffff \
			match u32 0x00000001 0x00ffffff at 32 match u8 0x07 0xff at 49 \
			match u16 0x0015 0xffff at 64 flowid 1:1
}

# shallow ROLE ARGS...: ROLE over a slow link with a shallow queue: netem on this guest's NIC
# sends at 2 Mbit/s and holds at most 200 packets, fewer than a message of 1 MiB has at path
# MTU 1024 (as make bench's UDP link between the guests, whose host socket holds about 190).
# A requester that keeps at most 128 packets unacknowledged (rodp, rxe) never fills it: the
# case fails if the queue dropped a packet.
shallow() {
	netem_run - "rate 2mbit limit 200" "$@" || return 1
	[ "$1" = ready ] && return 0
	ndrop=$(sed -n 's/.*dropped \([0-9]*\),.*/\1/p' /tmp/netem.stats | head -1)
	echo "shallow queue dropped ${ndrop:-?} packets"
	[ "$ndrop" = 0 ]
}

# netem_run SPARE NETEM ROLE FN ARGS...: FN's ROLE with netem NETEM on this guest's NIC
# (SPARE: see netem_qdisc; "-" for none); prints the qdisc's counts (also into
# /tmp/netem.stats), its classes' (into /tmp/netem.class) and the device's counters afterwards.
netem_run() {
	lspare=$1 lopts=$2 lside=$3 lfn=$4
	shift 4
	[ "$lside" = ready ] && { $lfn ready "$@"; return; }
	netem_qdisc "$lspare" "$lopts" || return 1
	$lfn "$lside" "$@" &
	lpid=$!
	# A program still running after 100 s is stuck: its QPs' state (the PSNs each side is
	# at) and its rdma_cm IDs go to the log before run's time limit ends it.
	if ! waitfor 100 exit $lpid; then
		rdma -dd resource show qp
		rdma resource show cm_id
	fi
	lrc=0
	wait $lpid || lrc=$?
	tc -s qdisc show dev "$nic" | tee /tmp/netem.stats
	# The DREQs spared went through class 1:1.
	tc -s class show dev "$nic" | tee /tmp/netem.class
	tc qdisc del dev "$nic" root
	rdma statistic show link "$dev/1"
	return $lrc
}

# failed_state: after a failed case, what this guest's device and NIC saw (device counters,
# NIC and neighbour state, the IP and UDP layers' drop counts), for the log.
failed_state() {
	echo "-- guest $role after the failure:"
	rdma statistic show link "$dev/1" 2>/dev/null | tr -s ' \n' ' '
	echo
	ip -color=never -s link show "$nic"
	ip -color=never neigh show dev "$nic"
	nstat -az 2>/dev/null | awk '$1 ~ /^(Udp|Ip)/ && $1 ~ /Err|Discard|Drop|NoPorts/ && $2 > 0'
}

# case2 NAME DRIVER_A DRIVER_B ROLE ARGS...: one case, named "NAME DRIVER_A-DRIVER_B".
n=0 planned=0 lost=0
case2() {
	name="$1 $2-$3" drv_a=$2 drv_b=$3 fn=$4
	shift 4
	want=0
	set -f # the globs match case names, not files
	for g in $filter2; do
		# shellcheck disable=SC2254
		case $name in $g) want=1 ;; esac
	done
	set +f
	[ $want = 1 ] || return 0
	# RODP_REPEAT2=N runs each chosen case N times (to measure how often a flaky one fails).
	for _ in $(seq "${RODP_REPEAT2:-1}"); do case2_once "$@"; done
}

# case2_once ARGS...: case2's case, once (name, drivers and fn already set).
case2_once() {
	if [ "$mode" = count ]; then planned=$((planned + 1)); return 0; fi
	[ $lost = 0 ] || return 0
	n=$((n + 1))
	echo "== $name"
	t0=$(now)
	[ "$role" = a ] && mine=$drv_a || mine=$drv_b
	rc=0
	use_driver "$mine" > /tmp/case.setup 2>&1 || rc=1
	cat /tmp/case.setup
	if ! peer=$(sync_peer "setup $n" $rc); then lost=1; fi
	[ $lost = 1 ] || [ "$peer" = 0 ] || rc=1
	out=/tmp/case.out
	: > $out
	if [ $lost = 1 ]; then
		rc=1
	elif [ "$role" = a ]; then
		ready=1
		if [ $rc = 0 ]; then
			$fn server "$@" > $out 2>&1 &
			spid=$!
			# Up to 60 s for the server to listen (it may also die first): each role's
			# "ready" waits (waitfor, or poll for what waitfor cannot see).
			if $fn ready "$@"; then ready=0; fi
		fi
		sync_peer "ready $n" $ready > /dev/null || lost=1
		if [ $rc = 0 ]; then
			# Without a ready server or a peer no client comes: do not wait for one.
			if [ $ready != 0 ] || [ $lost != 0 ]; then
				pkill -P $spid
				kill $spid 2>/dev/null
			fi
			wait $spid || rc=$?
		fi
		[ $ready = 0 ] || rc=1
	else
		if ! peer=$(sync_peer "ready $n"); then lost=1 rc=1; fi
		if [ $rc = 0 ] && [ "$peer" = 0 ]; then
			$fn client "$@" > $out 2>&1 || rc=$?
		else
			rc=1
			echo "server not ready" > $out
		fi
	fi
	peer=1
	# A storage server waits up to 5 minutes for its client's last word (the role's marker).
	if [ $lost = 0 ]; then peer=$(sync_peer "done $n" $rc 600) || lost=1; fi
	cat $out
	[ $rc = 0 ] && [ "$peer" = 0 ] || failed_state
	# RODP_COUNTERS2=1: each guest's device counters after every case (they add up over the
	# cases of one driver load).
	if [ -n "${RODP_COUNTERS2:-}" ]; then
		echo "-- $dev counters: $(rdma statistic show link "$dev/1" 2>/dev/null | tr -s ' \n' ' ')"
	fi
	timing "$name" "$t0"
	echo "== $name ($el s): here $rc, peer ${peer:-none}"
	[ "$role" = a ] || return 0
	if [ $rc = 0 ] && [ "$peer" = 0 ] && [ $lost = 0 ]; then
		echo "ok $n $name" >> "$res/check2.tap"
	else
		why="server (A) $rc, client (B) ${peer:-none}"
		[ $lost = 0 ] || why="$why; peer lost, the remaining cases did not run"
		echo "not ok $n $name # $why" >> "$res/check2.tap"
		sed 's/^/# server: /' $out >> "$res/check2.tap"
	fi
}

# The cases. Traffic stays small: under TCG an RC ping-pong of 4 KiB takes about 50 ms per
# iteration over this link, UD about 5 ms. A rodp side is a change of the driver column.
cases() {
	# Grouped by drivers (A-B), so that a guest reloads its driver four times in all. In a
	# case "A-B" B is the client: B's device asks, A's answers.
	# rxe with rxe: the reference (the link, the barriers and rdma-core between the guests
	# work without rodp): rdma_cm over QP1, then RC SENDs, READs and WRITEs.
	# Each kind of traffic is here once per pair of drivers: a plain IPv4 ibv_rc_pingpong is
	# not (its SENDs are the IPv6 and VLAN cases', IPv4 RC is every other case's), nor are
	# perftest's latency programs that repeat a bandwidth case's operation (ib_read_lat,
	# ib_atomic_lat, ib_send_lat); ib_write_lat stays, its responder polls memory.
	case2 "rping 3" rxe rxe rping_role -C 3
	# rodp answering rxe. UD, rdma_cm over UD (address and route resolution, SIDR over
	# QP1: MADs as RoCEv2 datagrams), RC SENDs of 4 KiB at MTU 1024 (4 packets each), 64 KiB
	# and 1 MiB SENDs (64 and 1,024 packets) into explicit ODP memory (a responder's missing
	# page is an RNR NAK and a retry), an SRQ shared by 16 QPs and one SEND of 1 MiB through
	# an SRQ, RC over a VLAN (the GID table's entry decides, the netdev tags), UD over IPv6, UC
	# SENDs of 64 KiB (64 packets: UC has no retransmission, the link loses none), UD
	# multicast (wire_ops -m: ibv_attach_mcast alone, the device makes its netdev join the IP
	# group), READs of 64 KiB, atomics, ATOMIC WRITE and FLUSH, an extended window's layout
	# (wire_ops -x: rxe writes, reads and adds through it knowing nothing of layouts; part of
	# it through a nested window). (rdma_cm's mckey is not here: its sender destroys its QP
	# right after posting, before a software device has sent its datagrams.)
	case2 "ibv_ud_pingpong 512" rodp rxe verbs ibv_ud_pingpong -n 5 -s 512
	case2 "udaddy 3" rodp rxe udaddy_role -C 3
	case2 "ibv_rc_pingpong 64K odp" rodp rxe verbs ibv_rc_pingpong -n 5 -s 65536 -c rodp:-o
	case2 "ibv_rc_pingpong 1M odp" rodp rxe verbs ibv_rc_pingpong -n 1 -s 1048576 -c rodp:-o
	case2 "ibv_srq_pingpong 4096" rodp rxe verbs ibv_srq_pingpong -n 5 -s 4096
	case2 "ibv_rc_pingpong 4096 vlan" rodp rxe vlan verbs ibv_rc_pingpong -n 5 -s 4096
	case2 "ibv_ud_pingpong 512 ipv6" rodp rxe v6 verbs ibv_ud_pingpong -n 5 -s 512
	case2 "ibv_uc_pingpong 64K" rodp rxe verbs ibv_uc_pingpong -n 5 -s 65536
	case2 "ibv_srq_pingpong 1M" rodp rxe verbs ibv_srq_pingpong -q 1 -n 1 -s 1048576
	case2 "wire_ops multicast" rodp rxe ops_role -m
	case2 "wire_ops" rodp rxe ops_role
	case2 "wire_ops stream" rodp rxe ops_role -s
	case2 "wire_ops layout" rodp rxe ops_role -x
	case2 "ib_write_bw 64K" rodp rxe perf ib_write_bw -N -n 10 -s 65536
	case2 "ib_read_bw 64K" rodp rxe perf ib_read_bw -N -n 10 -s 65536
	case2 "ib_send_bw 64K" rodp rxe perf ib_send_bw -N -n 10 -s 65536
	case2 "ib_atomic_bw" rodp rxe perf ib_atomic_bw -N -n 20
	case2 "ib_write_bw 64K odp" rodp rxe perf ib_write_bw -N -n 10 -s 65536 --odp
	case2 "ucmatose 2" rodp rxe ucmatose_role -c 2 -C 5
	case2 "lossy wire_ops stream 4" rodp rxe lossy ops_role -s -r 4
	case2 "shallow wire_ops big" rodp rxe shallow ops_role -b
	case2 "nfs 4.2" rodp rxe nfs_role 4.2
	case2 "nvme" rodp rxe nvme_role
	# rodp asking rxe: the same, UC SENDs of 1 MiB and 64 KiB SENDs through an SRQ shared by
	# 4 QPs, rping (rdma_cm RC; SEND, READ and WRITE, data verified), RC over IPv6, and last a
	# peer that vanishes (A takes its link down for 6 s): rodp's requester ends in
	# RETRY_EXC_ERR in time.
	case2 "ibv_ud_pingpong 512" rxe rodp verbs ibv_ud_pingpong -n 5 -s 512
	case2 "udaddy 3" rxe rodp udaddy_role -C 3
	case2 "ibv_rc_pingpong 64K odp" rxe rodp verbs ibv_rc_pingpong -n 5 -s 65536 -c rodp:-o
	case2 "ibv_rc_pingpong 1M odp" rxe rodp verbs ibv_rc_pingpong -n 1 -s 1048576 -c rodp:-o
	case2 "ibv_rc_pingpong 4096 ipv6" rxe rodp v6 verbs ibv_rc_pingpong -n 5 -s 4096
	case2 "ibv_uc_pingpong 1M" rxe rodp verbs ibv_uc_pingpong -n 1 -s 1048576
	case2 "ibv_srq_pingpong 64K" rxe rodp verbs ibv_srq_pingpong -q 4 -n 5 -s 65536
	case2 "rping 3" rxe rodp rping_role -C 3
	case2 "wire_ops" rxe rodp ops_role
	case2 "ib_write_bw 64K" rxe rodp perf ib_write_bw -N -n 10 -s 65536
	case2 "ib_read_bw 64K" rxe rodp perf ib_read_bw -N -n 10 -s 65536
	case2 "ib_send_bw 64K" rxe rodp perf ib_send_bw -N -n 10 -s 65536
	case2 "ib_atomic_bw" rxe rodp perf ib_atomic_bw -N -n 20
	case2 "ib_write_bw 64K odp" rxe rodp perf ib_write_bw -N -n 10 -s 65536 --odp
	case2 "ucmatose 2" rxe rodp ucmatose_role -c 2 -C 5
	case2 "wire_ops vanish" rxe rodp ops_role -v
	case2 "nfs 3" rxe rodp nfs_role 3
	case2 "nvme" rxe rodp nvme_role
	# rodp with rodp: all of it, implicit ODP with prefetch, then a bad link (lossy: 2 %
	# loss, 1 % duplicates, reordering, delay; wire_ops -s checks every word both ways, rping
	# -V every ping), and last the vanishing peer. (Not ibv_rc_pingpong over the bad link: its
	# client destroys its QP as soon as it has the last answer, so when the acknowledgement
	# of that answer is lost the server's last SEND ends in RETRY_EXC_ERR, correctly.)
	case2 "ibv_ud_pingpong 512" rodp rodp verbs ibv_ud_pingpong -n 5 -s 512
	case2 "udaddy 3" rodp rodp udaddy_role -C 3
	case2 "ibv_rc_pingpong 64K odp" rodp rodp verbs ibv_rc_pingpong -n 5 -s 65536 -c rodp:-o
	case2 "ibv_rc_pingpong 64K implicit odp" rodp rodp verbs ibv_rc_pingpong -n 5 -s 65536 -c -o -O -P
	case2 "ibv_rc_pingpong 1M implicit odp" rodp rodp verbs ibv_rc_pingpong -n 1 -s 1048576 -c -o -O -P
	case2 "ibv_srq_pingpong 4096" rodp rodp verbs ibv_srq_pingpong -n 5 -s 4096
	case2 "ibv_rc_pingpong 4096 ipv6" rodp rodp v6 verbs ibv_rc_pingpong -n 5 -s 4096
	case2 "ibv_rc_pingpong 4096 vlan" rodp rodp vlan verbs ibv_rc_pingpong -n 5 -s 4096
	case2 "ibv_uc_pingpong 4096" rodp rodp verbs ibv_uc_pingpong -n 5 -s 4096
	case2 "wire_ops multicast" rodp rodp ops_role -m
	case2 "rping 3" rodp rodp rping_role -C 3
	case2 "ib_write_lat 8K" rodp rodp perf ib_write_lat -n 5 -s 8192
	case2 "wire_ops" rodp rodp ops_role
	case2 "wire_ops stream" rodp rodp ops_role -s
	case2 "wire_ops layout" rodp rodp ops_role -x
	case2 "ib_write_bw 64K" rodp rodp perf ib_write_bw -N -n 10 -s 65536
	case2 "ib_read_bw 64K" rodp rodp perf ib_read_bw -N -n 10 -s 65536
	case2 "ib_send_bw 64K" rodp rodp perf ib_send_bw -N -n 10 -s 65536
	case2 "ib_atomic_bw" rodp rodp perf ib_atomic_bw -N -n 20
	case2 "ib_write_bw 64K odp" rodp rodp perf ib_write_bw -N -n 10 -s 65536 --odp
	case2 "ucmatose 2" rodp rodp ucmatose_role -c 2 -C 5
	case2 "ib_read_bw 64K odp" rodp rodp perf ib_read_bw -N -n 10 -s 65536 --odp
	case2 "ib_send_bw 64K odp" rodp rodp perf ib_send_bw -N -n 10 -s 65536 --odp
	case2 "lossy rping 10" rodp rodp lossy rping_role -C 10 -S 8192
	case2 "lossy wire_ops stream 8" rodp rodp lossy ops_role -s -r 8
	case2 "shallow wire_ops big" rodp rodp shallow ops_role -b
	case2 "wire_ops vanish" rodp rodp ops_role -v
	case2 "nfs 4.2 link down" rodp rodp nfs_role 4.2 down
	case2 "nvme srq link down" rodp rodp nvme_role srq down
	case2 "storage modules unload" rodp rodp unload_role
}

# The first barrier waits for the other guest to boot.
t0=$(now)
if sync_peer hello "" 900 > /dev/null; then
	timing "wait for the peer" "$t0"
	mode=count
	cases
	[ "$role" = a ] && printf 'TAP version 13\n1..%s\n' $planned > "$res/check2.tap"
	mode=run
	cases
else
	echo "no peer"
	[ "$role" = a ] &&
		printf 'TAP version 13\n1..1\nnot ok 1 two guests # no peer\n' > "$res/check2.tap"
fi
t0=$(now)
rdma_links_delete
rmmod rdma_rxe 2>/dev/null
rmmod rodp 2>/dev/null
kml_report
timing "teardown, kmemleak scan" "$t0"
exit 0
