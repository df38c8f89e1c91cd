#!/usr/bin/env python3
"""Counts the test cases of one or more `bazel test` runs: passed, failed and skipped.

    count_tests.py --run LOG TESTLOGS [--run LOG TESTLOGS ...]

LOG is what `bazel test --test_summary=short` printed; TESTLOGS the bazel-testlogs directory
of that run (`readlink -f bazel-testlogs` right after it). tools/run-tests.sh calls this once
for all its runs. A target that appears in several runs counts once, with its status in the
last run that lists it (the CUDA and fuzz targets are SKIPPED in the default build, then run in
builds of their own).

Per target, from the status Bazel printed for it:
  PASSED, FAILED, FLAKY, TIMEOUT  each test case in TESTLOGS/<package>/<name>/test.xml (and
          shard_*_of_*/test.xml) counts once: a case with a <failure> or <error> failed; one
          that did not run (gtest's GTEST_SKIP: result="skipped" and <skipped>, a DISABLED_
          test: status="notrun") is skipped; the others passed. A test Bazel calls failed
          whose cases all passed (a crash after the last case, a flaky retry) counts one
          failure more. A shell or Python test (Bazel writes its test.xml: one case) counts
          the checks its test.log reports: each line "ok: ..." passed, "FAIL: ..." failed,
          "skip: ..." skipped (Python's "ok    ..." and "FAIL  ..." too); a log whose last line
          starts with "SKIPPED:" adds one skipped case (the test ran none of its checks); a
          failed test counts at least one failure; a log with no such lines, one case.
  SKIPPED (a target incompatible with this build, e.g. the CUDA tests without nvcc)
          one skipped case.
  anything else (FAILED TO BUILD, NO STATUS, INCOMPLETE, ...)  one failed case; its test.xml,
          if any, is from an earlier run and is not read.
Prints the targets that skipped every case and those that skipped some (with gtest's first
skip message), then the line "N passed, N failed, N skipped" (test cases; skipped: did not run).
"""

import argparse
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

# "//pkg:name   (cached) PASSED in 0.4s", "//pkg:name   FLAKY, failed in 1 out of 2 in 3.1s",
# "//pkg:name   FAILED TO BUILD", "//pkg:name   NO STATUS", "//pkg:name   SKIPPED".
STATUS_LINE = re.compile(r"^(//[^\s:]*:\S+)\s+(?:\(cached\) )?([A-Z][A-Z_ ]*?)(?:,| in |\s*$)")
READ_XML = {"PASSED", "FAILED", "FLAKY", "TIMEOUT"}


def statuses(log_path):
    """{label: status} from one `bazel test` output, in order of appearance (last one wins)."""
    out = {}
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = STATUS_LINE.match(line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2).strip()
    return out


def target_dir(testlogs, label):
    pkg, name = label[2:].split(":", 1)
    return os.path.join(testlogs, pkg, name)


def count_xml(xml_path, log_path):
    """(passed, failed, skipped, first skip message) of one test.xml."""
    root = ET.parse(xml_path).getroot()
    passed = failed = skipped = 0
    message = ""
    cases = list(root.iter("testcase"))
    for case in cases:
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif (case.get("status") == "notrun" or case.get("result") in ("skipped", "suppressed")
              or case.find("skipped") is not None):
            skipped += 1
            if not message:
                el = case.find("skipped")
                text = el.get("message", "") if el is not None else "not run (disabled)"
                lines = [s for s in text.splitlines() if s.strip()]
                # gtest's message starts with FILE:LINE; the reason follows.
                message = (lines[1] if len(lines) > 1 else lines[0] if lines else "").strip()
        else:
            passed += 1
    # Bazel's own test.xml for a test that wrote none (sh_test, py_test, a crashed binary): one
    # case, no gtest attributes. Its log says more: see log_cases.
    generated = root.tag == "testsuites" and "name" not in root.attrib
    if generated and len(cases) == 1:
        return log_cases(log_path, passed == 1)
    return passed, failed, skipped, message


CASE_LINE = re.compile(r"^(ok|FAIL|skip)(?::|\s)\s*(.*)$")


def log_cases(log_path, bazel_passed):
    """(passed, failed, skipped, first skip message) of a shell or Python test from its log.

    The tests print one line per check: "ok: what" (or "ok    what"), "FAIL: what", and
    "skip: what and why" for a check that did not run (a missing tool, a CPU feature). Each
    such line is one case. A passing test whose last line starts with "SKIPPED:" ran none of
    its checks: one skipped case. A test Bazel failed counts at least one failure (it may have
    crashed before printing one); a test with no such lines counts as one case."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip("\n") for line in f]
    except OSError:
        lines = []
    passed = failed = skipped = 0
    message = ""
    for line in lines:
        m = CASE_LINE.match(line)
        if not m:
            continue
        if m.group(1) == "ok":
            passed += 1
        elif m.group(1) == "FAIL":
            failed += 1
        else:
            skipped += 1
            message = message or "skip: " + m.group(2).strip()
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if bazel_passed and last.startswith("SKIPPED:"):
        return passed, failed, skipped + 1, message or last
    if not bazel_passed and failed == 0:
        failed = 1
    if passed + failed + skipped == 0:
        passed = 1
    return passed, failed, skipped, message


def count_target(label, status, testlogs):
    """(passed, failed, skipped, note)"""
    if status == "SKIPPED":
        return 0, 0, 1, "Bazel: SKIPPED (incompatible with this build)"
    if status not in READ_XML:
        return 0, 1, 0, status
    d = target_dir(testlogs, label)
    xmls = sorted(glob.glob(os.path.join(d, "shard_*_of_*", "test.xml")))
    if not xmls and os.path.isfile(os.path.join(d, "test.xml")):
        xmls = [os.path.join(d, "test.xml")]
    p = f = s = 0
    note = ""
    for x in xmls:
        try:
            a, b, c, m = count_xml(x, os.path.join(os.path.dirname(x), "test.log"))
        except (ET.ParseError, OSError) as e:
            a, b, c, m = 0, 1, 0, ""
            note = note or f"unreadable {os.path.relpath(x, testlogs)}: {e}"
        p, f, s = p + a, f + b, s + c
        note = note or m
    if not xmls:  # no test.xml: the target counts as one case with Bazel's status
        note = "no test.xml"
        if status == "PASSED":
            p += 1
        else:
            f += 1
    elif status != "PASSED" and f == 0:
        f += 1
        note = note or f"Bazel: {status} with every case passed"
    return p, f, s, note


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", nargs=2, action="append", metavar=("LOG", "TESTLOGS"),
                    required=True, help="a bazel test output and its bazel-testlogs directory")
    args = ap.parse_args(argv)
    targets = {}
    for log, testlogs in args.run:
        for label, status in statuses(log).items():
            targets.pop(label, None)  # keep the order of the last run that lists it
            targets[label] = (status, testlogs)
    total = [0, 0, 0]
    all_skipped, some_skipped = [], []
    for label, (status, testlogs) in targets.items():
        p, f, s, note = count_target(label, status, testlogs)
        total[0] += p
        total[1] += f
        total[2] += s
        if s and not p and not f:
            all_skipped.append(f"  {label}: {s} case(s) skipped" + (f" ({note})" if note else ""))
        elif s:
            some_skipped.append(f"  {label}: {s} of {p + f + s} cases skipped"
                                + (f" ({note})" if note else ""))
    if all_skipped:
        print(f"{len(all_skipped)} target(s) skipped every case:")
        print("\n".join(all_skipped))
    if some_skipped:
        print(f"{len(some_skipped)} target(s) skipped some cases:")
        print("\n".join(some_skipped))
    print(f"{total[0]} passed, {total[1]} failed, {total[2]} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
