"""The pass/fail log the tests of tests/convert share: one line per check, counted.

    from check_log import check, summary
    check(ok, "what was checked", "detail printed on failure")
    return summary("name_test")   # prints the counts; 1 if any check failed, else 0
"""

import sys

checks = 0
failures = 0


def check(ok, what, detail=""):
    global checks, failures
    checks += 1
    if ok:
        print(f"ok    {what}")
    else:
        failures += 1
        print(f"FAIL  {what}" + (f"\n      {detail}" if detail else ""))
    sys.stdout.flush()


def summary(name, extra=""):
    print(f"{name}: {checks} checks, {failures} failure(s){extra}")
    return 1 if failures else 0
