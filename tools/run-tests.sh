#!/usr/bin/env bash
# Runs the whole tnmt test suite on a fresh Debian machine: installs what is missing (apt),
# builds everything, runs every test, and ends with one line "N passed, N failed, N skipped"
# counting test cases (tools/count_tests.py: each gtest case, each "ok:"/"FAIL:"/"skip:" check
# a shell or Python test prints) over every run below; skipped means "did not run": a case that
# called GTEST_SKIP (a CUDA test without a GPU), a "skip:" check (a missing tool, a CPU feature),
# a shell/Python test whose last line is "SKIPPED: ...", a target
# Bazel skipped as incompatible (the CUDA tests without nvcc, the fuzz tests without
# clang/libFuzzer). Before that line it lists the targets that skipped every case and those that
# skipped some. Stops at once, with a message, if an install step fails. Exits non-zero if any
# test failed or did not build. TNMT_NO_CUDA_BUILD=1 skips the CUDA build.
set -uo pipefail
cd "$(dirname "$0")/.."
# An install step that fails stops the run: tests without their tools would fail or skip for
# the wrong reason. The closing line then counts that step as the one failure.
install_step() {
  "$@"
  local status=$?
  if ((status != 0)); then
    echo "run-tests: $* failed (exit $status): not running the tests; fix the install and run" \
      "tools/run-tests.sh again" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
}
install_step deploy/install-deps.sh
# Pinned Python tools into build/py-tools, build/py-hf and build/py-client (tests/deploy,
# tests/convert, tests/golden, tests/clients).
install_step deploy/install-py-tools.sh
logs=$(mktemp -d)
runs=()  # count_tests.py --run arguments: each bazel test output and its bazel-testlogs
# The image test builds and serves the CPU image (deploy/build-image.sh gpu builds the GPU images;
# building them here too would add ~25 min on 2 cores).
bazel test --test_summary=short --keep_going --test_env=TNMT_IMAGE_TEST_KINDS=cpu //... 2>&1 | tee "$logs/main"
rc=${PIPESTATUS[0]}
runs+=(--run "$logs/main" "$(readlink -f bazel-testlogs)")
# Where nvcc is installed (/usr/local/cuda), everything also builds with --config=cuda (the
# CUDA kernels, engine and trainer, and every binary linked with them), and the CUDA tests
# run: without a GPU their GPU cases skip ("SKIPPED: no CUDA device") and only their CPU-side
# cases run; tests/gpu/check.sh runs them on a GPU. Without nvcc the default build above lists
# them as SKIPPED (incompatible).
cuda_tests=()
if [[ -x /usr/local/cuda/bin/nvcc && -z "${TNMT_NO_CUDA_BUILD:-}" ]]; then
  mapfile -t cuda_tests < <(bazel query 'attr(target_compatible_with, "cuda_build", kind("cc_test", //...))' 2>/dev/null)
  { bazel build --config=cuda --keep_going //... &&
    bazel test --config=cuda --test_summary=short --keep_going "${cuda_tests[@]}"; } 2>&1 | tee "$logs/cuda"
  cuda_rc=${PIPESTATUS[0]}
  ((rc == 0)) && rc=$cuda_rc
  runs+=(--run "$logs/cuda" "$(readlink -f bazel-testlogs)")
fi
# The fuzz tests (tests/fuzz, ~30 s each) build only with clang's libFuzzer, in an output base
# of their own (tests/fuzz/bazel-fuzz.sh); the gcc build above skips them (SKIPPED, counted
# as skipped unless they run here). Without clang, lld and libclang-rt they stay skipped.
mapfile -t fuzz_tests < <(bazel query 'tests(//tests/fuzz:all)' 2>/dev/null)
if fuzz_why=$(tests/fuzz/bazel-fuzz.sh check); then
  tests/fuzz/bazel-fuzz.sh test --test_summary=short --keep_going "${fuzz_tests[@]}" 2>&1 | tee "$logs/fuzz"
  fuzz_rc=${PIPESTATUS[0]}
  ((rc == 0)) && rc=$fuzz_rc
  runs+=(--run "$logs/fuzz" "$(tests/fuzz/bazel-fuzz.sh info bazel-testlogs 2>/dev/null)")
  tests/fuzz/bazel-fuzz.sh shutdown
else
  echo "tests/fuzz: ${#fuzz_tests[@]} tests $fuzz_why"
fi
counts=$(python3 tools/count_tests.py "${runs[@]}")
count_rc=$?
rm -rf "$logs"
echo "$counts" | sed '$d'
read -r passed _ failed _ skipped _ <<< "$(echo "$counts" | tail -n 1)"
if ((count_rc != 0)) || [[ ! $passed =~ ^[0-9]+$ || ! $failed =~ ^[0-9]+$ || ! $skipped =~ ^[0-9]+$ ]]; then
  echo "run-tests: tools/count_tests.py could not count the tests (exit $count_rc)" >&2
  passed=0 failed=1 skipped=0
  ((rc == 0)) && rc=1
fi
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi  # e.g. a build error before any test ran
echo "$passed passed, $failed failed, $skipped skipped"
exit $rc
