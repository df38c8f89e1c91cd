#!/usr/bin/env bash
# Runs the whole tnmt test suite on a fresh Debian machine: installs what is missing (apt),
# builds everything, runs every test, and ends with one line "N passed, N failed" (Bazel test
# targets). Exits non-zero if any test failed or did not build.
set -uo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
deploy/install-py-tools.sh  # PyPI tools for //tests/deploy (kubernetes-validate) into build/py-tools
log=$(mktemp)
bazel test --test_summary=short --keep_going //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE)' "$log")
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi  # e.g. a build error before any test ran
rm -f "$log"
echo "$passed passed, $failed failed"
exit $rc
