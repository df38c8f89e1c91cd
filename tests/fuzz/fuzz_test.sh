#!/usr/bin/env bash
# Runs one libFuzzer binary for a bounded time over its committed corpus (a Bazel sh_test; see
# tests/fuzz/BUILD). Usage: fuzz_test.sh FUZZER CORPUS_DIR DICT [libFuzzer flags...]
# New inputs go to a scratch corpus in $TEST_TMPDIR (the committed one is read only); a crash,
# leak, timeout or sanitizer report fails the test, and the input is kept in
# $TEST_UNDECLARED_OUTPUTS_DIR. FUZZ_SECONDS (default 25) sets the time.
set -uo pipefail
fuzzer=$1 corpus=$2 dict=$3
shift 3
scratch="${TEST_TMPDIR:-$(mktemp -d)}/corpus"
artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}"
mkdir -p "$scratch" "$artifacts"
log="${TEST_TMPDIR:-/tmp}/fuzz.log"
"$fuzzer" -max_total_time="${FUZZ_SECONDS:-25}" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
  -dict="$dict" -artifact_prefix="$artifacts/" "$@" "$scratch" "$corpus" > "$log" 2>&1
rc=$?
# libFuzzer's progress lines are many; the start, the end and any report are what matter.
grep -E '^(INFO: (Seed|Loaded|-max_len)|#[0-9]+[[:space:]]+(INITED|DONE)|Done )' "$log"
if ((rc != 0)); then
  echo "FAIL: $(basename "$fuzzer") exited $rc; its report:"
  grep -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)' "$log" | tail -n 80
  echo "inputs kept in $artifacts: $(ls "$artifacts" 2> /dev/null | tr '\n' ' ')"
  exit 1
fi
grep -E '^stat::' "$log"
echo "PASS: $(basename "$fuzzer"): $(ls "$corpus" | wc -l) seeds, $(ls "$scratch" | wc -l) new inputs, no findings"
