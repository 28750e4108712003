# SPDX-License-Identifier: GPL-2.0
# rdma-core's Python suite (pyverbs' tests, unchanged) against rodp and then kernel rxe in this
# one guest boot, never both loaded. Writes results/pyverbs.tap: one line per test, failing
# where rodp fails a test rxe passes or one of selftests/pyverbs-must-pass (unless
# selftests/pyverbs-gaps gives the reason); prints both pass/fail/skip tables. Sourced by
# check.sh after lib.sh (rodp is loaded on entry and on return). RODP_PYVERBS names the tests
# to run (unittest names, "tests.test_odp" say; default all).

py_src=/usr/share/doc/rdma-core/tests
py_dir=/tmp/pyverbs-tests
rm -rf "$py_dir"
cp -r "$py_src" "$py_dir"
find "$py_dir" -name '*.gz' -exec gunzip -f {} +

# py_run DRIVER: one device DRIVER0 on veth0; prints "test status" lines (ok, FAIL, ERROR,
# skip) into results/pyverbs.DRIVER.
py_run() {
	drv=$1
	py_t0=$(now)
	rdma link add ${drv}0 type $drv netdev veth0
	# shellcheck disable=SC2086 # RODP_PYVERBS: test names (unittest's), several words
	(cd "$py_dir" && timeout 1800 python3 run_tests.py --dev ${drv}0 --gid 1 -v \
		${RODP_PYVERBS:-}) \
		> "$res/pyverbs.$drv.log" 2>&1
	# The device's counters, for a failure's story (retries, RNR NAKs, faults).
	rdma statistic show link ${drv}0/1 | tr -s ' \n' ' ' | sed "s/^/pyverbs: $drv counters: /"
	echo
	rdma link delete ${drv}0
	timing "pyverbs/$drv" "$py_t0"
	python3 - "$res/pyverbs.$drv.log" > "$res/pyverbs.$drv" <<'PY'
import re, sys
# unittest -v prints "name (id) ... status"; a test with a docstring prints "name (id)" alone
# and "first docstring line ... status" on the next line; output a test prints itself may come
# between the "..." and the status, which then starts a later line.
status = r"(ok|FAIL|ERROR|skipped|expected failure)"
pending = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(test\S+) \((\S+)\)(?: \S.*)? \.\.\. ?(.*)", line)
    d = re.match(r"(test\S+) \((\S+)\)\s*$", line)
    if m:
        pending, rest = m.group(2), m.group(3)
    elif d:
        pending = d.group(2)
        continue
    elif pending:
        e = re.search(r" \.\.\. ?(.*)$", line)
        rest = e.group(1) if e else line
    else:
        continue
    s = re.match(status, rest.strip())
    if s:
        st = {"skipped": "skip", "expected failure": "skip"}.get(s.group(1), s.group(1))
        print(f"{pending} {st}")
        pending = None
PY
}

# The huge-page ODP tests need 2 MiB pages allocated (64 MiB).
echo 32 > /proc/sys/vm/nr_hugepages
py_run rodp
# rxe's result decides nothing for a test rodp passes (see the table below), so rxe runs only
# the tests rodp did not pass: those skipped on both take no time, and the rest (about half
# the suite's time) is saved. If rodp's run did not finish (no "Ran N tests" line: a hang or
# a crash left tests unreported), rxe runs everything. In the table, rxe's "-" is a test
# it did not run.
rmmod rodp
modprobe rdma_rxe
if grep -q '^Ran [0-9]* tests\? in' "$res/pyverbs.rodp.log"; then
	# Not the mlx5 and EFA provider tests either (about half of those rodp skips): they
	# skip on any other provider, rxe's included.
	rest=$(awk '$2 != "ok" && $1 !~ /^tests\.test_(mlx5|efa)/ { print $1 }' \
		"$res/pyverbs.rodp" | tr '\n' ' ')
	if [ -n "$rest" ]; then RODP_PYVERBS=$rest py_run rxe; else : > "$res/pyverbs.rxe"; fi
else
	py_run rxe
fi
rmmod rdma_rxe
modprobe rodp

# What failed on rodp, and why (unittest's report after the list of tests).
sed -n '/^=====/,$p' "$res/pyverbs.rodp.log" | head -200
python3 - "$res/pyverbs.rxe" "$res/pyverbs.rodp" "$res/pyverbs.tap" /mnt/rodp/pyverbs-gaps \
	/mnt/rodp/pyverbs-must-pass <<'PY'
import collections, re, sys
def load(p):
    r = collections.OrderedDict()
    for line in open(p):
        name, st = line.split()
        r[name] = st
    return r
rxe, rodp, out = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
def rules(path):
    return [l.rstrip("\n").split("\t", 1) for l in open(path)
            if l.strip() and not l.startswith("#")]
gaps, musts = rules(sys.argv[4]), rules(sys.argv[5])
def gap(name):
    return next((why for pat, why in gaps if re.search(pat, name)), None)
def must(name):
    return any(re.search(pat, name) for pat, _ in musts)
for label, res in (("rxe", rxe), ("rodp", rodp)):
    c = collections.Counter(res.values())
    print(f"pyverbs on {label:4}: {c['ok']:4} passed {c['FAIL'] + c['ERROR']:4} failed "
          f"{c['skip']:4} skipped of {len(res)}")
lines = []
for i, name in enumerate(sorted(set(rxe) | set(rodp)), 1):
    a, b = rxe.get(name, "-"), rodp.get(name, "absent")
    if b == "ok":
        lines.append(f"ok {i} {name}")
    elif (a == "ok" or must(name)) and gap(name):
        lines.append(f"ok {i} {name} # SKIP {gap(name)}")
    elif a == "ok":
        lines.append(f"not ok {i} {name} # rxe passes, rodp {b}")
    elif must(name):
        lines.append(f"not ok {i} {name} # rodp must pass (pyverbs-must-pass), rodp {b}, rxe {a}")
    else:
        lines.append(f"ok {i} {name} # SKIP rodp {b}, rxe {a}")
    print(f"{name:90} rxe {a:6} rodp {b}")
with open(out, "w") as f:
    f.write("TAP version 13\n1..%d\n%s\n" % (len(lines), "\n".join(lines)))
PY
