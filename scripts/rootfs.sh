#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds the guest's root filesystem image once (Debian unstable: rdma-core >= 59, so that
# ibv_advise_mr reaches the kernel through the rxe provider) and prints its path.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

suite=unstable
pkgs=rdma-core,ibverbs-utils,ibverbs-providers,rdmacm-utils,perftest,python3-pyverbs,iproute2,kmod,procps,psmisc,nfs-kernel-server,nfs-common,nvme-cli,fio
key=$(printf '%s\n' "$suite" "$pkgs" "$(cat "$RODP_TOP/scripts/rootfs.sh")" | sha256sum | cut -c1-16)
img="$RODP_CACHE/rootfs-$key.ext4"
if [ -f "$img" ]; then echo "$img"; exit 0; fi

exec 8>"$RODP_CACHE/rootfs.lock"
flock 8
if [ -f "$img" ]; then echo "$img"; exit 0; fi
log "building guest root filesystem ($suite)"
dir=$(mktemp -d "$RODP_CACHE/rootfs.XXXX")
trap 'rm -rf "$dir"' EXIT
# The guest's init only mounts the share and hands over to the runner's script, so the image
# never needs rebuilding when the test flow changes.
mmdebstrap --variant=minbase --include="$pkgs" --aptopt='Acquire::Check-Valid-Until "false"' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--customize-hook='cat > "$1/sbin/rodp-init" <<INIT
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /mnt/rodp
mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 rodp /mnt/rodp
exec /bin/sh /mnt/rodp/guest-init
INIT
chmod 755 "$1/sbin/rodp-init"; echo rodp-guest > "$1/etc/hostname"' \
	"$suite" "$dir/root" "$(debian_mirror)" >&2
dpkg-query --admindir="$dir/root/var/lib/dpkg" -W rdma-core >&2
mke2fs -q -t ext4 -L rodproot -d "$dir/root" "$dir/img" 2G >&2 # stdout carries only the path
mv "$dir/img" "$img"
for old in "$RODP_CACHE"/rootfs-*.ext4; do [ "$old" = "$img" ] || rm -f "$old"; done
echo "$img"
