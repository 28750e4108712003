# SPDX-License-Identifier: GPL-2.0
# The two-guest setup, sourced by check2.sh and bench2.sh in both guests: A (198.18.0.1) and B
# (198.18.0.2), each with one virtio-net NIC, the two linked by a QEMU socket netdev and
# nothing else. Also IPv6 (2001:2::a, 2001:2::b: 2001:2::/48 is the IPv6 benchmarking range)
# and VLAN 18 (198.18.1.1, 198.18.1.2) on the same link. Provides the barrier (sync_peer) and
# the driver switch (use_driver).
. /mnt/rodp/lib.sh
res=/mnt/rodp/results
role=$(cat /mnt/rodp/role)
addr_a=198.18.0.1
addr_b=198.18.0.2
[ "$role" = a ] && addr=$addr_a || addr=$addr_b
addr6=2001:2::$role
[ "$role" = a ] && addrv=198.18.1.1 || addrv=198.18.1.2

# The NIC is the virtio-net device (CONFIG_DUMMY adds dummy0; names say nothing).
nic=
for n in /sys/class/net/*; do
	[ "$(basename "$(readlink -f "$n/device/driver" 2>/dev/null)")" = virtio_net ] && nic=${n##*/}
done
echo "guest $role: NIC ${nic:-none}, $addr"
ip link set "$nic" up
ip addr add "$addr/24" dev "$nic"
# A case may take the link down and up again (check2.sh's vanish): static IPv6 addresses stay.
sysctl -qw "net.ipv6.conf.$nic.keep_addr_on_down=1"
ip -6 addr add "$addr6/64" dev "$nic" nodad
ip link add link "$nic" name vl18 type vlan id 18
ip link set vl18 up
ip addr add "$addrv/24" dev vl18

# sync_peer TAG [VALUE] [TIMEOUT]: the barrier; prints the peer's VALUE, fails without a peer
# (TIMEOUT seconds, 240 unless given). One peer.py serves every barrier of this guest, through
# two FIFOs on descriptors 7 (requests) and 8 (answers); if it ends, every later barrier fails
# (7 is opened read-write, so that a write to it never meets a FIFO without a reader: SIGPIPE
# would end this script). A request is one line: a VALUE's line breaks become spaces.
rm -f /tmp/peer.in /tmp/peer.out
mkfifo /tmp/peer.in /tmp/peer.out
python3 /mnt/rodp/peer.py "$role" --serve < /tmp/peer.in > /tmp/peer.out &
exec 7<> /tmp/peer.in 8< /tmp/peer.out
sync_peer() {
	printf '%s %s\t%s\n' "${3:-240}" "$1" "$(printf '%s' "${2:-}" | tr '\n\t' '  ')" >&7 ||
		return 1
	IFS= read -r peer_line <&8 || { echo "peer.py: gone" >&2; return 1; }
	case $peer_line in
	"0 "*) printf '%s\n' "${peer_line#0 }" ;;
	*) printf '%s\n' "${peer_line#1 }" >&2; return 1 ;;
	esac
}

# cm_listening: an rdma_cm ID of this guest listens (rping's, NVMe's target, ...).
cm_listening() { rdma resource show cm_id 2>/dev/null | grep -q LISTEN; }

# gid_of ADDR: the index of the RoCE v2 GID of ADDR (an IPv4 address in its IPv4-mapped form)
# in dev's GID table, which ib_core fills a moment after the link appears.
gid_of() {
	case $1 in *:*) g=$1 ;; *) g=::ffff:$1 ;; esac
	for i in $(seq 20); do
		ibv_devinfo -v -d "$dev" | sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*$g, RoCE v2.*/\1/p" |
			head -1 | grep . && return 0
		sleep 0.5
	done
	echo "$dev: no RoCE v2 GID for $1" >&2
	ibv_devinfo -v -d "$dev" >&2
	return 1
}

# use_driver DRIVER: this guest's RDMA device is DRIVER0 on the NIC (rdma_rxe and rodp are
# never loaded together); sets dev and gid (the index of the RoCE v2 GID of this guest's
# IPv4 address).
cur_drv=
use_driver() {
	[ "$cur_drv" = "$1" ] && return 0
	rdma_links_delete
	case $cur_drv in rxe) rmmod rdma_rxe ;; rodp) rmmod rodp ;; esac
	cur_drv=
	case $1 in rxe) modprobe rdma_rxe ;; *) modprobe "$1" ;; esac || return 1
	rdma link add "${1}0" type "$1" netdev "$nic" || return 1
	dev=${1}0
	gid=$(gid_of "$addr") || return 1
	cur_drv=$1
}
