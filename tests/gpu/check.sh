#!/usr/bin/env bash
# The GPU check: runs every bundled CUDA test (each compares the CUDA results with the CPU
# kernels on random data), the GPU benchmark (bench/gpu/gpu_bench.cc), then the kernel tests
# once more under compute-sanitizer memcheck where it exists, and prints a short table last.
# Meant for a GPU machine with the CUDA libraries but no Bazel: build the bundle first with
# tests/gpu/build_bundle.sh on the development machine.
#   tests/gpu/check.sh [BUNDLE_DIR]    (default build/gpu-bundle)
# The full log goes to $OUT (the device runner's output folder) or else bench/results/, as
# gpu-check-DATE-CARD.txt. Takes about 2-4 minutes on an H200.
# Exit status: 0 if every test passed (a test that skipped for want of a GPU counts as failed
# here) and the benchmark ran.
set -uo pipefail
bundle="${1:-build/gpu-bundle}"
results="${OUT:-bench/results}"
mkdir -p "$results"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
log="$results/gpu-check-$(date -u +%Y-%m-%d)-${card:-no-GPU}.txt"
: > "$log"
say() { echo "$*" | tee -a "$log"; }

export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# CUDA libraries that neither the bundle nor /usr/local/cuda provides (an image may carry
# cuBLAS or NCCL only inside Python's nvidia-* wheels): add the folders that hold them.
missing=$(for b in "$bundle"/bin/*; do ldd "$b" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u)
for lib in $missing; do
  found=$(find /usr /opt -xdev -name "$lib" 2>/dev/null | head -1)
  if [[ -n "$found" ]]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
    say "library $lib from $(dirname "$found")"
  else
    say "library $lib: not found on this machine"
  fi
done

{
  echo "== machine"
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv 2>&1
  uname -r
  for b in "$bundle"/bin/*; do ldd "$b"; done 2>&1 | grep -E 'cuda|cublas|nccl' | sort -u
} >> "$log" 2>&1

elapsed() { awk -v s="$1" -v e="$(date +%s%N)" 'BEGIN {printf "%.1f", (e - s) / 1e9}'; }
# The whole check stops starting work after TNMT_GPU_CHECK_BUDGET seconds (default 420), so
# that it ends inside a device runner's limit even when something hangs.
budget=${TNMT_GPU_CHECK_BUDGET:-420}
limit_for() { local left=$((budget - SECONDS)); echo $((left < $1 ? left : $1)); }
run() {  # run NAME SECONDS CMD...: appends the output to the log; sets rc and secs
  local name=$1 limit
  limit=$(limit_for "$2")
  shift 2
  if ((limit < 10)); then rc=124; secs=0; say "== $name: no time left"; return; fi
  say "== $name: $*"
  local start=$(date +%s%N)
  timeout "$limit" "$@" >> "$log" 2>&1
  rc=$?
  secs=$(elapsed "$start")
}

status=0
rows=()
for test in "$bundle"/bin/*_test; do
  name=$(basename "$test")
  run "$name" 90 "$test"
  if [[ $rc -eq 124 ]]; then verdict=TIMEOUT; status=1
  elif [[ $rc -ne 0 ]]; then verdict="FAILED($rc)"; status=1
  elif sed -n "/^== $name:/,\$p" "$log" |
    grep -qE 'SKIPPED: no CUDA device|^\[  SKIPPED \] [0-9]+ tests?, listed below'; then
    verdict=SKIPPED; status=1
  else verdict=PASSED; fi
  rows+=("$(printf '%-28s %-8s %6.1fs' "$name" "$verdict" "$secs")")
done

bench_out="$results/gpu_bench.txt"
say "== gpu_bench"
start=$(date +%s%N)
blimit=$(limit_for 200)
if ((blimit >= 10)); then
  timeout "$blimit" "$bundle/bin/gpu_bench" 2>&1 | tee "$bench_out" >> "$log"
  rc=${PIPESTATUS[0]}
else
  echo "no time left" > "$bench_out"
  rc=124
fi
secs=$(elapsed "$start")
if [[ $rc -eq 124 ]]; then verdict=TIMEOUT; status=1
elif [[ $rc -ne 0 ]]; then verdict="FAILED($rc)"; status=1
elif grep -q "SKIPPED: no CUDA device" "$bench_out"; then verdict=SKIPPED; status=1
else verdict=RAN; fi
rows+=("$(printf '%-28s %-8s %6.1fs' gpu_bench "$verdict" "$secs")")

# Memory checking of our own kernels (cuBLAS's are left out: slow under the sanitizer), while
# the budget lasts.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -n "$sanitizer" && -z "${TNMT_GPU_CHECK_NO_SANITIZER:-}" ]]; then
  for name in attention_test decode_ops_test train_ops_test elementwise_test context_test; do
    [[ -x "$bundle/bin/$name" ]] || continue
    run "memcheck $name" 90 "$sanitizer" --tool memcheck --leak-check no --error-exitcode 99 \
      "$bundle/bin/$name" --gtest_filter=-*OutOfMemory*
    if [[ $rc -eq 124 ]]; then verdict=TIMEOUT
    elif [[ $rc -eq 99 ]]; then verdict=ERRORS; status=1
    elif [[ $rc -ne 0 ]]; then verdict=FAILED; status=1
    else verdict=CLEAN; fi
    rows+=("$(printf '%-28s %-8s %6.1fs' "memcheck $name" "$verdict" "$secs")")
  done
fi

{
  echo
  echo "GPU check on ${card:-no GPU} ($(date -u +%Y-%m-%dT%H:%MZ)); full log: $log"
  printf '%-28s %-8s %7s\n' test result time
  printf '%s\n' "${rows[@]}"
  grep '^RESULT' "$bench_out" 2>/dev/null | awk '{printf "%-44s %10s %s\n", $2, $3, $4}'
} | tee -a "$log"
exit $status
