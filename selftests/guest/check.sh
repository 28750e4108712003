# SPDX-License-Identifier: GPL-2.0
# `make check`: KUnit suites (run when rodp.ko loads) and the kselftests; TAP into results/.
. /mnt/rodp/lib.sh
make_netdevs
res=/mnt/rodp/results
# Kernel memory leaks: forget what boot left (rodp is not loaded yet), scan after the tests.
kml=/sys/kernel/debug/kmemleak
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug
[ -w $kml ] && echo clear > $kml
modprobe rodp || echo "modprobe rodp failed"
mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null
dmesg > "$res/kunit.dmesg"
filter=$(cat /mnt/rodp/filter 2>/dev/null || echo '*')
[ "$filter" = '*' ] && tests='rodp_*' || tests=$filter
# RODP_TESTS may name several globs, separated by spaces.
for t in $(for g in $tests; do echo /mnt/rodp/tests/$g; done); do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	echo "== $name"
	"$t" > "$res/$name.tap" 2>&1
	echo "$name exit $?" >> "$res/exits"
	cat "$res/$name.tap"
	# A test that died mid-way must not leave a stalled FUSE daemon behind (an ODP fault
	# waiting for it would hang link deletion and rmmod): abort and unmount what is left.
	for c in /sys/fs/fuse/connections/*/abort; do
		[ -e "$c" ] || continue
		echo "$name left FUSE connection ${c%/abort} behind: aborted"
		echo 1 > "$c"
	done
	awk '$3 ~ /^fuse/ { print $2 }' /proc/mounts | xargs -r -n1 umount -l
done
# rdma-core's and perftest's programs (not filtered out by RODP_TESTS=rodp_*).
case "$filter" in
*tools*|'*') echo "== tools"; . /mnt/rodp/tools.sh ;;
esac
case "$filter" in
*pyverbs*|'*') echo "== pyverbs"; . /mnt/rodp/pyverbs.sh ;;
esac
# Leave nothing behind, so that the log shows any splat teardown would cause.
for d in $(rdma -j link show 2>/dev/null | python3 -c 'import json,sys; print(" ".join(l["ifname"].split("/")[0] for l in json.load(sys.stdin)))'); do
	rdma link delete "$d" || true
done
rmmod rodp 2>/dev/null || true
# An object is reported once it has been unreferenced for 5 s across two scans.
if [ -w $kml ]; then
	echo scan > $kml; sleep 6; echo scan > $kml
	cat $kml > "$res/kmemleak.txt"
else
	echo "kmemleak unavailable" > "$res/kmemleak.txt"
fi
dmesg > "$res/final.dmesg"
exit 0
