# SPDX-License-Identifier: GPL-2.0
# The kernel's storage over RDMA between the two guests (issue 14), sourced after pair.sh by
# check2.sh (correctness) and bench2.sh (throughput): an NFS server and an NVMe over Fabrics
# target on A (the server), their clients on B. Each function uses pair.sh's addr_a, addr_b,
# dev and nic, and returns non-zero on a failure.

# nfs_up MB: A's NFS server exporting a tmpfs of MB MiB at /srv/nfs to B, listening on RDMA
# port 20049 (rpcbind and rpc.mountd run for the export table and NFSv3's MOUNT).
nfs_up() {
	modprobe nfsd && modprobe rpcrdma || return 1
	mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd || return 1
	mkdir -p /srv/nfs
	mount -t tmpfs -o "size=${1}m" tmpfs /srv/nfs || return 1
	: > /etc/exports
	echo 10 > /proc/fs/nfsd/nfsv4gracetime
	echo 10 > /proc/fs/nfsd/nfsv4leasetime
	rpcbind && exportfs -o rw,no_root_squash,insecure,no_subtree_check,fsid=1 \
		"$addr_b:/srv/nfs" && rpc.mountd && rpc.nfsd --rdma=20049 4 || return 1
	# A fresh server has no clients whose state it could reclaim: the NFSv4 grace period (90 s
	# of NFS4ERR_GRACE to a client's first OPEN) ends at once, as nfsdcld would end it
	# (nfsdcld itself did not attach in time here: nfsd waits 1 s for it). The grace time
	# above bounds it if this fails.
	echo Y > /proc/fs/nfsd/v4_end_grace
	cat /proc/fs/nfsd/portlist
}

# nfs_down: stops A's server and drops the export's contents.
nfs_down() {
	rpc.nfsd 0
	exportfs -ua
	pkill rpc.mountd
	pkill rpcbind
	umount /srv/nfs
}

# nfs_mount VERS: B mounts A's export at /mnt/nfs with NFS version VERS over RDMA (xprtrdma:
# its FRWR registrations run on B's device).
nfs_mount() {
	modprobe rpcrdma || return 1
	mkdir -p /mnt/nfs
	timeout 120 mount -t nfs -o "vers=$1,proto=rdma,port=20049,nolock" "$addr_a:/srv/nfs" \
		/mnt/nfs
}

NVME_IMG=/tmp/nvme.img
NVME_NQN=rodp-check2
NVMET=/sys/kernel/config/nvmet

# nvme_up MB [srq]: A's NVMe over Fabrics target: a file of MB MiB on tmpfs as namespace 1 of
# subsystem NVME_NQN, on RDMA port 4420 of A's address. With "srq", nvmet-rdma's receives go
# to kernel SRQs (its use_srq=1, a parameter read at load time).
nvme_up() {
	modprobe -r nvmet-rdma 2>/dev/null
	if [ -n "${2:-}" ]; then
		modprobe nvmet-rdma use_srq=1 || return 1
	else
		modprobe nvmet-rdma || return 1
	fi
	echo "use_srq: $(cat /sys/module/nvmet_rdma/parameters/use_srq)"
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
	truncate -s "${1}M" $NVME_IMG
	sub=$NVMET/subsystems/$NVME_NQN
	mkdir $sub $sub/namespaces/1 $NVMET/ports/1 || return 1
	echo 1 > $sub/attr_allow_any_host
	echo $NVME_IMG > $sub/namespaces/1/device_path
	echo 1 > $sub/namespaces/1/enable
	echo rdma > $NVMET/ports/1/addr_trtype
	echo ipv4 > $NVMET/ports/1/addr_adrfam
	echo "$addr_a" > $NVMET/ports/1/addr_traddr
	echo 4420 > $NVMET/ports/1/addr_trsvcid
	ln -s $sub $NVMET/ports/1/subsystems/$NVME_NQN
}

# nvme_srqs: how many SRQs A's device has now.
nvme_srqs() { rdma resource show srq 2>/dev/null | grep -c "dev $dev "; }

# nvme_down: takes A's target down once the host has disconnected, in the order that keeps
# lockdep quiet: nvmet runs a command that arrived before the CM's ESTABLISHED event inside
# the CM's handler (under the listener's handler_mutex, and it takes nvmet_config_sem), while
# unlinking a port takes nvmet_config_sem and then destroys the listener (its handler_mutex):
# a circular dependency in nvmet, whatever the device. So: the host's queues (their QPs) go
# first, then the device (rdma_cm destroys the listener itself on DEVICE_REMOVAL), and only
# then the port is unlinked; the device comes back for what follows.
nvme_down() {
	nrc=0
	for i in $(seq 150); do
		rdma resource show qp link "$dev/1" 2>/dev/null | grep -q 'type RC' || break
		sleep 0.2
	done
	rdma resource show qp link "$dev/1" 2>/dev/null | grep 'type RC' && nrc=1
	rdma link delete "$dev"
	sub=$NVMET/subsystems/$NVME_NQN
	rm -f $NVMET/ports/1/subsystems/$NVME_NQN
	rmdir $NVMET/ports/1
	echo 0 > $sub/namespaces/1/enable
	rmdir $sub/namespaces/1 $sub
	rm -f $NVME_IMG
	rdma link add "$dev" type "${dev%0}" netdev "$nic" || nrc=1
	return $nrc
}

# nvme_connect: B connects to A's target (nvme-rdma: its registrations are FRWR on B's
# device) and sets nvme_blk to the namespace's block device. A controller whose link fails
# tries to reconnect every 2 s (10 by default) and gives up after 60 s (600).
nvme_connect() {
	modprobe nvme-rdma || return 1
	hostnqn=nqn.2014-08.org.nvmexpress:uuid:$(cat /proc/sys/kernel/random/uuid)
	timeout 120 nvme connect -t rdma -a "$addr_a" -s 4420 -n $NVME_NQN --hostnqn="$hostnqn" \
		--reconnect-delay=2 --ctrl-loss-tmo=60 || return 1
	nvme_blk=
	for i in $(seq 100); do
		for b in /sys/class/nvme/nvme*/nvme*n1; do
			[ -e "$b" ] && [ "$(cat "${b%/*}/subsysnqn")" = $NVME_NQN ] &&
				nvme_blk=/dev/${b##*/}
		done
		[ -n "$nvme_blk" ] && [ -b "$nvme_blk" ] && break
		sleep 0.2
	done
	echo "namespace: ${nvme_blk:-none}"
	[ -n "$nvme_blk" ]
}

# nvme_disconnect: B disconnects.
nvme_disconnect() { timeout 120 nvme disconnect -n $NVME_NQN; }

# storage_unload: unloads the RDMA storage modules this guest loaded (the NVMe host or target
# and NFS's RDMA transport, both sides of which are in rpcrdma) once their users are gone:
# each must let go of every RDMA device and object it held, and what it allocated and leaked
# is then unreferenced for the run's final kmemleak scan. Fails if one stays.
storage_unload() {
	urc=0
	mountpoint -q /proc/fs/nfsd && umount /proc/fs/nfsd
	for m in nvme_rdma nvmet_rdma rpcrdma; do
		[ -d /sys/module/$m ] || continue
		modprobe -r $m || urc=1
		[ -d /sys/module/$m ] && { echo "$m stays loaded"; urc=1; }
	done
	# What ib_core itself keeps (QP1 and its PD and CQ) stays; nothing of the storage users may.
	left=$(rdma resource show | grep " $dev: ")
	echo "RDMA resources on $dev: $left"
	# "mr 0/8388607": in use, then the device's limit.
	for r in cm_id mr srq ctx; do
		echo "$left" | grep -qE " $r 0(/| |\$)" || { echo "$r left on $dev"; urc=1; }
	done
	return $urc
}

# fio_verify FILE OFFSET SIZE SECS DEPTH: SECS seconds of 4 KiB random writes over SIZE bytes
# of FILE (a block device or a file) from OFFSET, O_DIRECT, DEPTH in flight (libaio), each
# block carrying its own CRC32C header and read back and checked 64 writes later (fio's
# verify_backlog; a mismatch ends fio with an error). Prints fio's summary lines.
fio_verify() {
	timeout $(($4 + 120)) fio --name=verify --filename="$1" --offset="$2" --size="$3" \
		--rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth="$5" \
		--verify=crc32c --verify_backlog=64 --verify_fatal=1 --time_based --runtime="$4" \
		> /tmp/fio.out 2>&1
	frc=$?
	grep -E 'IOPS=|err=|verify|fio:' /tmp/fio.out
	[ $frc = 0 ] || cat /tmp/fio.out
	return $frc
}
