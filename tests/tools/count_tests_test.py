#!/usr/bin/env python3
"""tools/count_tests.py on recorded `bazel test` outputs and test.xml files (count_tests/):
real gtest 1.12 files (passed, failed, GTEST_SKIP in a test and in SetUp, DISABLED_), Bazel's
own test.xml of shell and Python tests (passed, exited 1, crashed, one whose log ends
"SKIPPED: ...", each "ok:", "FAIL:" and "skip:" line of a log one case), the
CUDA tests SKIPPED by the default build and then run without a GPU by the CUDA build, the fuzz
tests from another output base, shards, FLAKY, FAILED TO BUILD with a stale test.xml, NO STATUS,
and a test Bazel failed after all its cases passed."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
D = os.path.join(HERE, "count_tests")
TOOL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "count_tests.py")

failures = 0


def check(ok, what, detail=""):
    global failures
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok else f"\n  {detail}"))
    failures += not ok


def count(*runs):
    args = [sys.executable, TOOL]
    for log, testlogs in runs:
        args += ["--run", os.path.join(D, log), os.path.join(D, testlogs)]
    r = subprocess.run(args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


ALL = (("main.log", "main-testlogs"), ("cuda.log", "cuda-testlogs"),
       ("fuzz.log", "fuzz-testlogs"))
rc, out, err = count(*ALL)
lines = out.splitlines()
check(rc == 0, "count_tests.py exits 0", err)
# passed: mixed 1, sharded 8+1, metrics 8, crashed 3, web 1, flaky 8, cuda context 1, fuzz 1,
#         train_resume 3 ("ok:" lines), serve_lifecycle 2, hf_marian 2 ("ok    " lines)
# failed: mixed 1, sharded 1, scheduler 1, crashed 1 (Bazel FAILED, cases passed), stale 1,
#         no status 1, cli_help 1 (exited 1, no log), flaky 1, serve_lifecycle 1 (crashed after
#         its "ok:" lines, no "FAIL:"), hf_marian 1 ("FAIL  " line)
# skipped: mixed 4 (GTEST_SKIP, DISABLED_, 2 in SetUp), sharded 4, json_api_fuzz 1 (SKIPPED),
#          golden_drift 1 (log ends SKIPPED:), cuda context 2, cuda gemm 3, train_resume 2
#          ("skip:" lines)
check(lines[-1:] == ["39 passed, 10 failed, 17 skipped"], "closing line: test cases",
      out)
want_all = """3 target(s) skipped every case:
  //tests/fuzz:json_api_fuzz_test: 1 case(s) skipped (Bazel: SKIPPED (incompatible with this build))
  //tests/golden:golden_drift_test: 1 case(s) skipped (SKIPPED: no torch (deploy/install-deps.sh installs Debian's python3-torch))
  //kernels/cuda:gemm_test: 3 case(s) skipped (SKIPPED: no CUDA device)"""
check(want_all in out, "targets that skipped every case are listed with the reason", out)
want_some = """4 target(s) skipped some cases:
  //engine:mixed_test: 4 of 6 cases skipped (SKIPPED: no CUDA device)
  //engine:sharded_test: 4 of 14 cases skipped (SKIPPED: no CUDA device)
  //tests:train_resume_test: 2 of 5 cases skipped (skip: mpirun not installed (two MPI ranks vs one process))
  //kernels/cuda:context_test: 2 of 3 cases skipped (SKIPPED: no CUDA device)"""
check(want_some in out, "targets that skipped some cases are listed", out)

# Without the CUDA and fuzz runs those targets stay Bazel's SKIPPED: one case each.
rc, out, err = count(ALL[0])
check(out.splitlines()[-1:] == ["37 passed, 10 failed, 15 skipped"]
      and "5 target(s) skipped every case" in out,
      "default build only: the 4 SKIPPED targets count 1 skipped case each", out)

rc, out, err = count(("fuzz.log", "main-testlogs"))
check(out.splitlines()[-1:] == ["1 passed, 0 failed, 0 skipped"] and "no test.xml" not in out,
      "a PASSED target without a test.xml counts one passed case", out)

rc, out, err = count(("no-such.log", "main-testlogs"))
check(rc != 0, "a missing log is an error (exit non-zero)", out + err)

print(f"count_tests_test: {failures} failure(s)")
sys.exit(1 if failures else 0)
