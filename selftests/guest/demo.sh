# SPDX-License-Identifier: GPL-2.0
# `make run`: create rodp0 on a veth and show it as rdma-core and iproute2 see it, then run an
# RC ping-pong between two processes (pinned, explicit ODP and implicit ODP, with the ODP
# counters before and after), and rping connecting through rdma_cm.
set -e
. /mnt/rodp/lib.sh
make_netdevs
echo "== rdma link add rodp0 type rodp netdev veth0"
rdma link add rodp0 type rodp netdev veth0
echo "== rdma link show"; rdma link show
echo "== rdma dev"; rdma dev
echo "== ibv_devices"; ibv_devices
echo "== ibv_devinfo -v -d rodp0"; ibv_devinfo -v -d rodp0
echo "== ibv_rc_pingpong, two processes on rodp0"
pingpong ibv_rc_pingpong rodp0 rodp0 -n 1000
# The device's ODP counters: sysfs (odp_stats/) and debugfs.
odp_counters() {
	for f in /sys/class/infiniband/rodp0/odp_stats/* /sys/kernel/debug/rodp/rodp0/odp_stats/*; do
		printf '  %-34s %s\n' "$(basename "$f")" "$(cat "$f")"
	done
}
echo "== ODP counters before"; odp_counters
echo "== ibv_rc_pingpong -o (explicit ODP MRs, faulted in on first touch)"
pingpong ibv_rc_pingpong rodp0 rodp0 -n 1000 -o
echo "== ibv_rc_pingpong -O -P (implicit ODP MRs, prefetched)"
pingpong ibv_rc_pingpong rodp0 rodp0 -n 1000 -O -P
echo "== ODP counters after"; odp_counters
echo "== rping over rdma_cm (kernel CM on rodp0's QP1), 5 verified ping-pongs"
rping -s -a 10.0.0.1 -C 5 -V > /tmp/rping.s 2>&1 &
sleep 1
rping -c -a 10.0.0.1 -C 5 -v -V
wait $! && echo "rping server: done"
rdma link delete rodp0
