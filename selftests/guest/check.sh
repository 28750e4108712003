# SPDX-License-Identifier: GPL-2.0
# `make check`: KUnit suites (run when rodp.ko loads) and the kselftests; TAP into results/.
# Each test program and phase prints "== NAME (N s)" when it ends and records its time in
# results/times (the host's summary prints the table).
# /mnt/rodp/part says which of the host's two guests this is (scripts/run.sh): "a" runs the
# rodp_* programs but those in /mnt/rodp/b-programs, "b" runs those, then tools and pyverbs;
# without it (one guest) everything runs.
. /mnt/rodp/lib.sh
timing boot 0,0
make_netdevs
res=/mnt/rodp/results
kml_clear
t0=$(now)
modprobe rodp || echo "modprobe rodp failed"
timing "modprobe rodp (KUnit)" "$t0"
mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null
part=$(cat /mnt/rodp/part 2>/dev/null || echo all)
b_programs=" $(cat /mnt/rodp/b-programs 2>/dev/null) "
# Guest B beside guest A boots with KUnit disabled: A keeps the suites' log, counted once.
# Later loads of rodp.ko (the tests reload it a dozen times) run no suites: the filter
# matches none.
if [ ! -e /mnt/rodp/no-kunit ]; then
	dmesg > "$res/kunit.dmesg"
	echo 'rodp_reloads_run_no_suites' > /sys/module/kunit/parameters/filter_glob
fi
filter=$(cat /mnt/rodp/filter 2>/dev/null || echo '*')
[ "$filter" = '*' ] && tests='rodp_*' || tests=$filter
# stamp PROGRAM: copies a kselftest program's output and records each of its tests' time,
# from its RUN line to the next one (or the end), as "PROGRAM/TEST" in results/times: the
# host's summary lists the slowest.
stamp() {
	scur=
	while IFS= read -r sline; do
		printf '%s\n' "$sline"
		case $sline in
		"#  RUN "*) ;;
		*) continue ;;
		esac
		stamp_end "$1"
		scur=${sline#"#  RUN"}
		scur=${scur#"${scur%%[! ]*}"}
		scur=${scur% ...}
		sstart=${sup%.*}
	done
	stamp_end "$1"
}
# stamp_end PROGRAM: records the test under way (if any) as ending now (sup: the uptime).
stamp_end() {
	read -r sup _ < /proc/uptime
	[ -z "$scur" ] || printf '%s/%s\t%s\n' "$1" "$scur" $((${sup%.*} - sstart)) >> "$res/times"
}
# RODP_TESTS may name several globs, separated by spaces.
for t in $(for g in $tests; do echo /mnt/rodp/tests/$g; done); do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	case $part/$b_programs in
	a/*" $name "*) continue ;;
	b/*" $name "*) ;;
	b/*) continue ;;
	esac
	echo "== $name"
	t0=$(now)
	rm -f /tmp/test.rc
	{
		"$t" 2>&1
		echo "$?" > /tmp/test.rc
	} | stamp "$name" > "$res/$name.tap"
	echo "$name exit $(cat /tmp/test.rc 2>/dev/null || echo none)" >> "$res/exits"
	cat "$res/$name.tap"
	# A test that died mid-way must not leave a stalled FUSE daemon behind (an ODP fault
	# waiting for it would hang link deletion and rmmod): abort and unmount what is left.
	for c in /sys/fs/fuse/connections/*/abort; do
		[ -e "$c" ] || continue
		echo "$name left FUSE connection ${c%/abort} behind: aborted"
		echo 1 > "$c"
	done
	awk '$3 ~ /^fuse/ { print $2 }' /proc/mounts | xargs -r -n1 umount -l
	timing "$name" "$t0"
	echo "== $name ($el s)"
done
# rdma-core's and perftest's programs (not filtered out by RODP_TESTS=rodp_*).
case "$part/$filter" in
a/*) ;;
*tools*|*/'*')
	echo "== tools"; t0=$(now)
	. /mnt/rodp/tools.sh
	timing tools "$t0"; echo "== tools ($el s)" ;;
esac
case "$part/$filter" in
a/*) ;;
*pyverbs*|*/'*')
	echo "== pyverbs"; t0=$(now)
	. /mnt/rodp/pyverbs.sh
	timing pyverbs "$t0"; echo "== pyverbs ($el s)" ;;
esac
# Leave nothing behind, so that the log shows any splat teardown would cause.
t0=$(now)
rdma_links_delete
rmmod rodp 2>/dev/null || true
kml_report
timing "teardown, kmemleak scan" "$t0"
exit 0
