#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The guest's PID 1 after /sbin/rodp-init mounted the share: set up, run the task, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The minimal image has no poweroff(8): ask the kernel directly (LINUX_REBOOT_CMD_POWER_OFF).
off() { sync; python3 -c 'import ctypes; ctypes.CDLL(None).reboot(0x4321fedc)'; }
echo RODP-GUEST-UP
task=$(cat /mnt/rodp/task)
[ "$task" = probe ] && off
limit=$(cat /mnt/rodp/limit)
kver=$(uname -r)
mkdir -p /lib/modules/$kver
mount --bind /mnt/rodp/modules/lib/modules/$kver /lib/modules/$kver
ip link set lo up
# libibverbs loads every provider its configuration directory names once a program meets a
# device no loaded provider claims: 17 libraries with immediate binding, 1.5 ms more than the
# rxe provider alone natively, and TCG starts programs about 150 times slower. rodp and
# rdma_rxe are both driven by the rxe provider, the only one kept here (the image itself is
# unchanged).
set --
for f in /etc/libibverbs.d/*.driver; do
	case $f in */rxe.driver) ;; *) set -- "$@" "$f" ;; esac
done
mkdir -p /etc/libibverbs.d.unused
[ $# = 0 ] || mv "$@" /etc/libibverbs.d.unused/
# POSIX shared memory (rdma-core's Python rdma_cm tests use it).
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
cd /mnt/rodp
timeout -k 10 "$limit" sh "/mnt/rodp/$task.sh"
rc=$?
echo "$rc" > /mnt/rodp/rc
sync
echo "RODP-GUEST-DONE rc=$rc"
off
