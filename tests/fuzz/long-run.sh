#!/usr/bin/env bash
# A long fuzzing run of both targets (json_api_fuzzer, http_fuzzer) side by side on one CPU
# core at the lowest priority, so that the machine stays usable for building.
#   tests/fuzz/long-run.sh SECONDS [CORE]      e.g. tests/fuzz/long-run.sh 7200 1
# Builds the fuzzers (tests/fuzz/bazel-fuzz.sh), then runs each for SECONDS of wall time
# pinned to CORE (default: the last one), under nice -n 19. The corpora grow in
# build/fuzz/corpus/<target>/ (seeded from tests/fuzz/corpus/<target>/ and kept across runs);
# crash, leak, timeout and out-of-memory inputs go to tests/fuzz/findings/<target>/ (ignored
# by git); the full libFuzzer output is in build/fuzz/<target>.log. Ends with each target's
# final statistics and its findings, and exits non-zero if there are any.
# To replay a finding: <bazel-bin>/tests/fuzz/<target> tests/fuzz/findings/<target>/crash-...
# (<bazel-bin>: tests/fuzz/bazel-fuzz.sh info bazel-bin).
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?usage: tests/fuzz/long-run.sh SECONDS [CORE]}
core=${2:-$(($(nproc) - 1))}
tests/fuzz/bazel-fuzz.sh build //tests/fuzz:json_api_fuzzer //tests/fuzz:http_fuzzer || exit 1
bin=$(tests/fuzz/bazel-fuzz.sh info bazel-bin 2> /dev/null)/tests/fuzz
mkdir -p build/fuzz
# Copies, so that a rebuild during the run does not touch the running binaries.
pids=()
for target in json_api http; do
  cp -f "$bin/${target}_fuzzer" "build/fuzz/${target}_fuzzer"
  mkdir -p "build/fuzz/corpus/$target" "tests/fuzz/findings/$target"
  nice -n 19 taskset -c "$core" "build/fuzz/${target}_fuzzer" -max_total_time="$seconds" -timeout=60 \
    -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 -dict="tests/fuzz/$target.dict" \
    -artifact_prefix="tests/fuzz/findings/$target/" \
    "build/fuzz/corpus/$target" "tests/fuzz/corpus/$target" > "build/fuzz/$target.log" 2>&1 &
  pids+=($!)
done
echo "long-run: json_api pid ${pids[0]}, http pid ${pids[1]}, on core $core for $seconds s; logs in build/fuzz/"
status=0
for i in 0 1; do wait "${pids[$i]}" || status=1; done
for target in json_api http; do
  echo "== $target"
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::|^Done ' "build/fuzz/$target.log"
  grep -E '^(==[0-9]+==ERROR|SUMMARY|[a-z_]+_fuzzer: property violated)' "build/fuzz/$target.log"
  echo "corpus: $(ls "build/fuzz/corpus/$target" | wc -l) inputs; findings: $(ls "tests/fuzz/findings/$target" | wc -l)"
done
exit $status
