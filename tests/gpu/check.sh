#!/usr/bin/env bash
# The GPU check: runs every bundled CUDA test (CUDA results compared with the CPU kernels inside
# each test) and prints a table last. Meant for a lent GPU machine (nvcc and CUDA libraries, no
# Bazel): build the bundle first with tests/gpu/build_bundle.sh on the development machine.
#   tests/gpu/check.sh [BUNDLE_DIR]    (default build/gpu-bundle)
# Exit status: 0 if every test passed (a test that skipped counts as not passed here).
set -uo pipefail
bundle="${1:-build/gpu-bundle}"
results="${OUT:-bench/results}"
mkdir -p "$results"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '_')
log="$results/gpu-check-$(date +%Y-%m-%d)-${card:-no_gpu}.txt"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
status=0
rows=()
for test in "$bundle"/bin/*; do
  name=$(basename "$test")
  start=$(date +%s.%N)
  output=$(timeout 300 "$test" 2>&1)
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$output" >> "$log"
  if [[ $rc -ne 0 ]]; then verdict=FAILED; status=1
  elif grep -q "SKIPPED" <<< "$output"; then verdict=SKIPPED; status=1
  else verdict=PASSED; fi
  rows+=("$(printf '%-28s %-8s %6.1fs' "$name" "$verdict" "$secs")")
done
{
  echo "GPU check on ${card:-no GPU} ($(date -u +%Y-%m-%dT%H:%MZ))"
  printf '%-28s %-8s %7s\n' test result time
  printf '%s\n' "${rows[@]}"
} | tee -a "$log"
exit $status
