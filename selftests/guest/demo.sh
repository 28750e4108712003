# SPDX-License-Identifier: GPL-2.0
# `make run`: create rodp0 on a veth and show it as rdma-core and iproute2 see it.
set -e
. /mnt/rodp/lib.sh
make_netdevs
echo "== rdma link add rodp0 type rodp netdev veth0"
rdma link add rodp0 type rodp netdev veth0
echo "== rdma link show"; rdma link show
echo "== rdma dev"; rdma dev
echo "== ibv_devices"; ibv_devices
echo "== ibv_devinfo -v -d rodp0"; ibv_devinfo -v -d rodp0
rdma link delete rodp0
