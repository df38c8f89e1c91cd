#!/usr/bin/env bash
# Runs the whole tnmt test suite on a fresh Debian machine: installs what is missing (apt),
# builds everything, runs every test, and ends with one line "N passed, N failed, N skipped"
# (Bazel test targets; with nvcc present the CUDA build and its tests count too, and a CUDA test
# that found no GPU counts as skipped; the fuzz tests count as skipped without clang/libFuzzer).
# Exits non-zero if any test failed or did not build. TNMT_NO_CUDA_BUILD=1 skips the CUDA build.
set -uo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
deploy/install-py-tools.sh  # pinned Python tools into build/py-tools, build/py-hf and build/py-client (tests/deploy, tests/convert, tests/clients)
log=$(mktemp)
# The image test builds and serves the CPU image (deploy/build-image.sh gpu builds the GPU images;
# building them here too would add ~25 min on 2 cores).
bazel test --test_summary=short --keep_going --test_env=TNMT_IMAGE_TEST_KINDS=cpu //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# Where nvcc is installed (/usr/local/cuda), everything also builds with --config=cuda (the
# CUDA kernels, engine and trainer, and every binary linked with them), and the CUDA tests
# run: without a GPU each prints "SKIPPED: no CUDA device" and passes; tests/gpu/check.sh runs
# them on a GPU.
cuda_tests=()
if [[ -x /usr/local/cuda/bin/nvcc && -z "${TNMT_NO_CUDA_BUILD:-}" ]]; then
  mapfile -t cuda_tests < <(bazel query 'attr(target_compatible_with, "cuda_build", kind("cc_test", //...))' 2>/dev/null)
  { bazel build --config=cuda --keep_going //... &&
    bazel test --config=cuda --test_summary=short --keep_going "${cuda_tests[@]}"; } 2>&1 | tee -a "$log"
  cuda_rc=${PIPESTATUS[0]}
  ((rc == 0)) && rc=$cuda_rc
fi
# The fuzz tests (tests/fuzz, ~30 s each) build only with clang's libFuzzer, in an output base
# of their own (tests/fuzz/bazel-fuzz.sh); the gcc build above skips them. Without clang,
# lld and libclang-rt they count as skipped.
mapfile -t fuzz_tests < <(bazel query 'tests(//tests/fuzz:all)' 2>/dev/null)
fuzz_skipped=0
if fuzz_why=$(tests/fuzz/bazel-fuzz.sh check); then
  tests/fuzz/bazel-fuzz.sh test --test_summary=short --keep_going "${fuzz_tests[@]}" 2>&1 | tee -a "$log"
  fuzz_rc=${PIPESTATUS[0]}
  ((rc == 0)) && rc=$fuzz_rc
  tests/fuzz/bazel-fuzz.sh shutdown
else
  echo "tests/fuzz: ${#fuzz_tests[@]} tests $fuzz_why"
  fuzz_skipped=${#fuzz_tests[@]}
fi
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
# A CUDA test that ran without a GPU skipped every case (GTEST_SKIP "SKIPPED: no CUDA device"):
# Bazel calls it PASSED, but a skipped test is not a passed one.
skipped=0
for t in "${cuda_tests[@]}"; do
  tlog="bazel-testlogs/${t#//}"
  tlog="${tlog/://}/test.log"
  if grep -q '^\[  PASSED  \] 0 tests' "$tlog" 2> /dev/null && grep -q '^\[  SKIPPED \]' "$tlog"; then
    skipped=$((skipped + 1))
  fi
done
passed=$((passed - skipped))
skipped=$((skipped + fuzz_skipped))
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE)' "$log")
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi  # e.g. a build error before any test ran
rm -f "$log"
echo "$passed passed, $failed failed, $skipped skipped"
exit $rc
