#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Counts KUnit and kselftest results and fails on kernel splats in the guests' serial logs.

usage: summarize.py [--times HOST_TIMES] RESULTS_DIR SERIAL_LOG [RESULTS_DIR SERIAL_LOG ...]
One RESULTS_DIR and SERIAL_LOG per guest (guests A and B of `make check`, the two guests of
its two-guest phase). Prints where the time went (HOST_TIMES and each guest's results/times),
then the failures; the last line printed is "N passed, N failed, N skipped".
"""
import pathlib
import re
import sys

SPLATS = [
    # The kernel's WARNING lines start the line (WARN, lockdep, RCU); programs' output quoted in
    # the TAP results (perftest's "WARNING: BW peak won't be measured") is prefixed with "#".
    r"^\s*(\[[^\]]*\]\s*)?WARNING:", r"BUG:", r"Oops", r"KASAN:", r"UBSAN:", r"INFO: possible",
    r"possible recursive locking", r"circular locking dependency", r"inconsistent lock state",
    r"refcount_t:", r"sleeping function called from invalid context", r"Kernel panic",
    r"general protection fault", r"list_add corruption", r"list_del corruption", r"ODEBUG:",
    r"stack-protector", r"unregister_netdevice: waiting", r"blocked for more than",
]


def tally(counts, fails, verdict, rest, label):
    """Adds one test line: `verdict` is "ok" or "not ok", `rest` may carry a "# SKIP"."""
    if "# SKIP" in rest:
        counts[2] += 1
    elif verdict == "ok":
        counts[0] += 1
    else:
        counts[1] += 1
        fails.append(label)


def kunit(dmesg):
    """Counts test cases of rodp's KUnit suites (indented `ok` lines under `# Subtest: rodp_`)."""
    counts = [0, 0, 0]
    fails = []
    in_suite = False
    for line in dmesg.splitlines():
        line = re.sub(r"^\[[^\]]*\]\s?", "", line)
        if re.match(r"\s+# Subtest: rodp_", line):
            in_suite = True
            continue
        if in_suite and re.match(r"(not )?ok \d+ rodp_", line):
            in_suite = False
            continue
        m = in_suite and re.match(r"\s+(not ok|ok) \d+ (\S+)(.*)", line)
        if m:
            tally(counts, fails, m.group(1), m.group(3), "kunit " + m.group(2))
    return counts, fails


def tap(text, name):
    """Counts top-level test lines of a kselftest TAP stream."""
    counts = [0, 0, 0]
    fails = []
    plan = None
    for line in text.splitlines():
        m = re.match(r"1\.\.(\d+)", line)
        if m:
            plan = int(m.group(1))
        m = re.match(r"(not ok|ok) \d+ (.*)", line)
        if m:
            tally(counts, fails, m.group(1), m.group(2), f"{name}: {m.group(2)}")
    if plan is None or sum(counts) < plan:
        fails.append(f"{name}: ran {sum(counts)} of {plan} planned tests (crashed or hung?)")
        counts[1] += 1
    return counts, fails


def guest(results, log, label):
    """Counts one guest's results; returns (counts, failures, number of TAP files)."""
    total = [0, 0, 0]
    fails = []
    # A guest of `check` loads rodp and keeps the kernel log of its KUnit suites, but guest B
    # when it runs beside guest A (it boots with KUnit disabled and has "no-kunit" in its share).
    dmesg = results / "kunit.dmesg"
    task = results.parent / "task"
    kunit_guest = task.exists() and task.read_text().strip() == "check"
    if (results.parent / "no-kunit").exists():
        kunit_guest = False
    if dmesg.exists() or kunit_guest:
        c, f = kunit(dmesg.read_text(errors="replace") if dmesg.exists() else "")
        if sum(c) == 0:
            c[1] += 1
            f.append("kunit: no rodp suite ran (did rodp.ko load?)")
        total = [a + b for a, b in zip(total, c)]
        fails += f
    taps = sorted(results.glob("*.tap"))
    for t in taps:
        c, f = tap(t.read_text(errors="replace"), t.stem)
        total = [a + b for a, b in zip(total, c)]
        fails += f
    text = log.read_text(errors="replace") if log.exists() else ""
    if "RODP-GUEST-DONE" not in text:
        total[1] += 1
        fails.append("guest: the test script did not finish (timeout or crash)")
    splats = [l for l in text.splitlines() if any(re.search(p, l) for p in SPLATS)]
    if splats:
        total[1] += 1
        fails.append("kernel log has splats:\n  " + "\n  ".join(splats[:20]))
    leaks = results / "kmemleak.txt"
    leak_text = leaks.read_text(errors="replace") if leaks.exists() else "no kmemleak report"
    if leak_text.strip():
        total[1] += 1
        fails.append("kmemleak:\n  " + "\n  ".join(leak_text.splitlines()[:40]))
    if label:
        fails = [f"[{label}] {f}" for f in fails]
    return total, fails, len(taps)


def read_times(path):
    """NAME<TAB>SECONDS[<TAB>BUSY VCPU SECONDS] lines, in order."""
    rows = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        f = line.split("\t")
        if len(f) >= 2 and all(x.strip().isdigit() for x in f[1:3]):
            rows.append((f[0], int(f[1]), int(f[2]) if len(f) > 2 else None))
    return rows


def print_times(host, guests):
    """The time table: host steps, then each guest's phases with how many of its vCPUs were
    busy on average (parts of a phase, "PHASE/PART": only the slowest)."""
    rows = read_times(host) if host else []
    if not rows and not guests:
        return
    print("time (s):")
    for name, secs, _ in rows:
        print(f"  {secs:6d}        {name}")

    def row(name, secs, busy):
        cpus = f"{busy / secs:4.2f}" if busy is not None and secs else "    "
        print(f"  {secs:6d}  {cpus}    {name}")

    for label, results in guests:
        rows = read_times(results / "times")
        if not rows:
            continue
        print(f"  guest {label} (seconds, busy vCPUs on average):")
        for r in rows:
            if "/" not in r[0]:
                row(*r)
        parts = sorted((r for r in rows if "/" in r[0]), key=lambda r: -r[1])
        if parts:
            print(f"  guest {label}, slowest parts:")
            for r in parts[:25]:
                row(*r)


def main():
    args = sys.argv[1:]
    host = None
    if args[:1] == ["--times"]:
        host = pathlib.Path(args[1])
        args = args[2:]
    if not args or len(args) % 2:
        sys.exit(__doc__)
    runs = [(pathlib.Path(r), pathlib.Path(l)) for r, l in zip(args[::2], args[1::2])]
    total = [0, 0, 0]
    fails = []
    ntaps = 0
    guests = []
    for results, log in runs:
        label = log.stem if len(runs) > 1 else ""
        c, f, n = guest(results, log, label)
        total = [a + b for a, b in zip(total, c)]
        fails += f
        ntaps += n
        guests.append((log.stem, results))
    if not ntaps:
        total[1] += 1
        fails.append("kselftest: no test program ran")
    print_times(host, guests)
    for f in fails:
        print("FAIL", f)
    print(f"{total[0]} passed, {total[1]} failed, {total[2]} skipped")
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
