#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Counts KUnit and kselftest results and fails on kernel splats in the guest's serial log.

usage: summarize.py RESULTS_DIR SERIAL_LOG
The last line printed is "N passed, N failed, N skipped".
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
        counts[1] += 1
        fails.append(f"{name}: ran {sum(counts)} of {plan} planned tests (crashed or hung?)")
    return counts, fails


def main():
    results, log = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    total = [0, 0, 0]
    fails = []
    dmesg = results / "kunit.dmesg"
    c, f = kunit(dmesg.read_text(errors="replace") if dmesg.exists() else "")
    if sum(c) == 0:
        c[1] += 1
        f.append("kunit: no rodp suite ran (did rodp.ko load?)")
    total = [a + b for a, b in zip(total, c)]
    fails += f
    taps = sorted(results.glob("*.tap"))
    if not taps:
        total[1] += 1
        fails.append("kselftest: no test program ran")
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
    for f in fails:
        print("FAIL", f)
    print(f"{total[0]} passed, {total[1]} failed, {total[2]} skipped")
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
