#!/usr/bin/env bash
# The GPU check (issue 6), for a GPU machine with the CUDA libraries but no Bazel, gRPC or
# network: build the bundle first with tests/gpu/build_bundle.sh on the development machine.
#   tests/gpu/check.sh [BUNDLE_DIR]    (default build/gpu-bundle; run from anywhere)
# In order, each step bounded in time, the whole check stopping new work after
# TNMT_GPU_CHECK_BUDGET seconds (default 450, so that it ends inside an 8-minute slot):
#   1. every CUDA test binary (kernels, the CUDA engine, the CUDA trainer, NCCL), each
#      comparing the GPU against the CPU code;
#   2. end-to-end translation: `tnmt translate` of Multi30k test_2016_flickr with the bundled
#      demo model on the CPU and on the GPU in float32/float16/bfloat16 (identical lines vs the
#      CPU, BLEU when sacrebleu is importable, sentences/s), and `tnmt serve --device cuda`
#      answering over gRPC as the local GPU translation does;
#   3. the engine benchmark: translate_bench on a random Transformer-base (32k vocabulary), beam
#      4, float16 and bfloat16, batch 1 (300 sentences), 32 and 256 (3,000 sentences each), and
#      float16 at batch 1 and 32 again with the decode step replayed as CUDA graphs;
#   4. training: `tnmt train` of Transformer-base on Multi30k on the GPU in bfloat16, float16
#      and float32 for a fixed number of steps, then bfloat16 with 4x the batch and the small
#      preset in float32 (tokens/s, where an update's time goes, estimated TFLOP/s and the
#      fraction of the card's measured matmul peak, loss falling);
#   5. the kernel benchmark (bench/gpu/gpu_bench.cc);
#   6. compute-sanitizer memcheck of our kernels while time remains.
# A short table comes last. The full log goes to $OUT (the device runner's output folder) or
# else bench/results/, as gpu-check-DATE-CARD.txt. Exit status 0 if every test passed (a test
# that skipped for want of a GPU counts as failed here) and every end-to-end step ran.
set -uo pipefail
bundle="$(cd "${1:-build/gpu-bundle}" && pwd)"
cd "$(dirname "$0")/../.."  # repository root: tests read models/demo and tests/golden
results="${OUT:-bench/results}"
mkdir -p "$results"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
log="$results/gpu-check-$(date -u +%Y-%m-%d)-${card:-no-GPU}.txt"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
work=$(mktemp -d /tmp/tnmt-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The bundle: bin/, lib/, data/ packed by build_bundle.sh (xz, or Python's lzma without it).
B="$work/bundle"
mkdir -p "$B"
if [[ -f "$bundle/bundle.tar.xz" ]]; then
  if command -v xz > /dev/null; then
    xz -dc "$bundle/bundle.tar.xz" | tar -C "$B" -xf -
  else
    python3 -c 'import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
      "$bundle/bundle.tar.xz" "$B"
  fi
else
  cp -r "$bundle"/. "$B"/
fi
say "bundle: $(cat "$bundle/REVISION" 2>/dev/null || echo '?') ($(ls "$B/bin" | wc -l) binaries)"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TNMT_SPM_LIBRARY="$B/lib/libtnmt_spm.so"
# CUDA libraries that neither the bundle nor /usr/local/cuda provides (an image may carry
# cuBLAS or NCCL only inside Python's nvidia-* wheels): add the folders that hold them.
missing=$(for b in "$B"/bin/*; do ldd "$b" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u)
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
  nproc
  for b in "$B"/bin/*; do ldd "$b"; done 2>&1 | grep -E 'cuda|cublas|nccl' | sed 's/ (0x[0-9a-f]*)$//' | sort -u
} >> "$log" 2>&1

elapsed() { awk -v s="$1" -v e="$(date +%s%N)" 'BEGIN {printf "%.1f", (e - s) / 1e9}'; }
budget=${TNMT_GPU_CHECK_BUDGET:-450}
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
train_flops=()  # "dtype tokens/s parameters" of each training run
rows=()   # test / step results
perf=()   # measured numbers
row() { rows+=("$(printf '%-34s %-10s %6.1fs %s' "$1" "$2" "$secs" "${3:-}")"); }
verdict_of() {  # exit status -> verdict; a failure fails the check
  if [[ $rc -eq 124 ]]; then echo TIMEOUT; elif [[ $rc -ne 0 ]]; then echo "FAILED($rc)"; else echo OK; fi
}

# 1. Tests.
for test in "$B"/bin/*_test; do
  name=$(basename "$test")
  run "$name" 120 "$test"
  v=$(verdict_of)
  note=""
  if [[ $v == OK ]]; then
    # A test skipped for want of a GPU fails the check; one that needs more GPUs than this
    # machine has (NCCL across devices) is only noted.
    out=$(sed -n "/^== $name:/,\$p" "$log")
    skipped=$(grep -cE '^\[  SKIPPED \] [A-Za-z_/.]+.* \([0-9]+ ms\)$' <<< "$out")
    needs_gpus='^needs [0-9]+ GPUs, found [0-9]+$'
    for_gpus=$(grep -cE "$needs_gpus" <<< "$out")
    if grep -q 'SKIPPED: no CUDA device' <<< "$out" || ((skipped > for_gpus)); then
      v=SKIPPED
    else
      v=PASSED
      ((skipped > 0)) && note="$skipped skipped: $(grep -m1 -E "$needs_gpus" <<< "$out")"
    fi
  fi
  [[ $v == PASSED ]] || status=1
  row "$name" "$v" "$note"
done

# 2. End-to-end translation with the demo model.
TNMT="$B/bin/tnmt"
src="$B/data/test_2016_flickr.en"
ref="$B/data/test_2016_flickr.de"
if [[ -f "$src" && -x "$TNMT" ]]; then
  lines=$(wc -l < "$src")
  run "translate cpu" 120 "$TNMT" translate --model models/demo --device cpu --input "$src" --output "$work/cpu.txt"
  v=$(verdict_of); [[ $v == OK ]] || status=1
  cpu_secs=$secs
  row "translate demo cpu ($(nproc) threads)" "$v" "$(awk -v n="$lines" -v s="$secs" 'BEGIN {printf "%.1f sent/s", n / s}')"
  for dtype in float32 float16 bfloat16; do
    run "translate cuda $dtype" 120 "$TNMT" translate --model models/demo --device cuda --dtype "$dtype" \
      --input "$src" --output "$work/$dtype.txt"
    v=$(verdict_of); [[ $v == OK ]] || status=1
    same=$(paste -d '\t' "$work/cpu.txt" "$work/$dtype.txt" 2>/dev/null | awk -F '\t' '$1 == $2 {n++} END {print n + 0}')
    note="$(awk -v n="$lines" -v s="$secs" 'BEGIN {printf "%.1f sent/s", n / s}'), identical to cpu $same/$lines"
    if [[ -s "$work/$dtype.txt" && -f "$ref" ]] && python3 -c 'import sacrebleu' 2> /dev/null; then
      bleu=$(python3 -c 'import sys, sacrebleu; h = open(sys.argv[1]).read().splitlines(); r = open(sys.argv[2]).read().splitlines(); print("%.1f" % sacrebleu.corpus_bleu(h, [r]).score)' "$work/$dtype.txt" "$ref")
      note+=", BLEU $bleu"
    fi
    # float32 must agree with the CPU on nearly every line (summation order differs); half
    # precision may change a few beams.
    if [[ $v == OK && $dtype == float32 && $((same * 100)) -lt $((lines * 95)) ]]; then v=MISMATCH; status=1; fi
    if [[ $v == OK && $dtype != float32 && $((same * 100)) -lt $((lines * 80)) ]]; then v=MISMATCH; status=1; fi
    row "translate demo cuda $dtype" "$v" "$note"
  done
  # The server with the demo model on the GPU: the same translations as local float16 decoding
  # (first 100 lines, through gRPC), /metrics answers, SIGTERM drains and exits 0.
  head -100 "$src" > "$work/serve.en"
  head -100 "$work/float16.txt" > "$work/serve.want" 2> /dev/null
  say "== serve cuda float16"
  start=$(date +%s%N)
  "$TNMT" serve --model demo=models/demo --device cuda --dtype float16 --port 0 --http-port 0 \
    --ready-file "$work/ready" >> "$log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    [[ -s "$work/ready" ]] && break
    kill -0 "$server" 2> /dev/null || break
    sleep 0.1
  done
  v=FAILED
  if [[ -s "$work/ready" ]]; then
    read -r grpc_port http_port < "$work/ready"
    timeout 60 "$TNMT" translate --server "localhost:$grpc_port" --input "$work/serve.en" \
      --output "$work/serve.got" >> "$log" 2>&1
    same=$(paste -d '\t' "$work/serve.want" "$work/serve.got" | awk -F '\t' '$1 == $2 {n++} END {print n + 0}')
    metrics=$(timeout 5 python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
      "http://localhost:$http_port/metrics" 2> /dev/null | grep -c '^tnmt_' || true)
    kill -TERM "$server"
    wait "$server"
    rc=$?
    [[ $rc -eq 0 && $same -eq 100 && $metrics -gt 0 ]] && v=OK
    note="via gRPC identical to local float16 $same/100, $metrics metric lines, SIGTERM exit $rc"
  else
    kill -KILL "$server" 2> /dev/null
    note="not ready"
  fi
  secs=$(elapsed "$start")
  [[ $v == OK ]] || status=1
  row "serve demo cuda float16" "$v" "$note"
else
  say "== translate: skipped (no test_2016_flickr.en in the bundle: run tools/get-multi30k.sh before build_bundle.sh)"
  status=1
fi

# 3. Engine benchmark: random Transformer-base, 32k vocabulary, beam 4, outputs fixed length.
bench_engine() {  # bench_engine DTYPE BATCH [graphs]: one translate_bench run, a row and a PERF line
  local dtype=$1 batch=$2 graphs=${3:-} sentences=3000 label="$1 batch $2${3:+ $3}"
  ((batch == 1)) && sentences=300
  local res="$work/tb-$dtype-$batch${graphs:+-graphs}.txt"
  run "translate_bench $label" 60 "$B/bin/translate_bench" --device cuda --dtype "$dtype" \
    $([[ -n $graphs ]] || echo --no-cuda-graphs) --vocab 32000 --src-len 28 --out-len 30 --beam 4 --batch "$batch" \
    --sentences "$sentences" --no-gemm --check 0 --result "$res"
  local v tps
  v=$(verdict_of); [[ $v == OK ]] || status=1
  tps=$(awk -F= '$1 == "tokens_per_s" {printf "%.0f", $2}' "$res" 2>/dev/null)
  row "bench base $label" "$v" "${tps:-?} target tok/s ($sentences sentences)"
  [[ -n "$tps" ]] && perf+=("engine_tokens_per_s dtype=$dtype batch=$batch${graphs:+ $graphs} $tps")
}
if [[ -x "$B/bin/translate_bench" ]]; then
  for dtype in float16 bfloat16; do
    for batch in 1 32 256; do bench_engine "$dtype" "$batch"; done
  done
  # CUDA graphs of the decode step (the engine's default): the same runs replayed as graphs.
  for batch in 1 32 256; do bench_engine float16 "$batch" graphs; done
fi

# 4. Training on Multi30k (the demo model's vocabulary) for a fixed number of steps:
# Transformer-base in each dtype, then base in bfloat16 with 4x the batch (does the step's
# cost grow with the tokens or stay per update?) and the demo model's size (small) in float32;
# tokens/s from the trainer's metrics (the windows after the first log).
train_case() {  # train_case PRESET DTYPE MAX_TOKENS
  local preset=$1 dtype=$2 tokens=$3 label="train $1 cuda $2"
  [[ $tokens == 8192 ]] || label="train $preset cuda $dtype, $tokens tokens"
  local dir="$work/train-$preset-$dtype-$tokens"
  mkdir -p "$dir"
  run "$label" 75 "$TNMT" train --train-source "$B/data/train.en" \
    --train-target "$B/data/train.de" --spm-model models/demo/spm.model --preset "$preset" \
    --max-tokens "$tokens" --max-steps 60 --log-every-steps 10 --save-dir "$dir" \
    --save-every-steps 100000 --valid-every-steps 100000 --device cuda --dtype "$dtype"
  local v tps loss phases params m="$dir/metrics.jsonl"
  v=$(verdict_of); [[ $v == OK ]] || status=1
  # One pass over the train events: tokens/s (the windows after the first), the loss from the
  # first to the last, and where an update's time goes (ms per update; on the GPU,
  # forward_backward is the time to queue the work and reduce the wait for it).
  IFS='|' read -r tps loss phases < <(grep '"event":"train"' "$m" 2>/dev/null | python3 -c 'import json, sys
v = [json.loads(l) for l in sys.stdin]
w = v[1:]
keys = ["data_ms", "forward_backward_ms", "reduce_ms", "update_ms"]
tps = "%.0f" % (sum(j["tokens_per_second"] for j in w) / len(w)) if w else ""
loss = "%.2f -> %.2f" % (v[0]["loss"], v[-1]["loss"]) if v else ""
phases = ", ".join("%s %.1f" % (k[:-3], sum(j[k] for j in w) / len(w)) for k in keys) + " ms/update" if w and all(k in w[0] for k in keys) else ""
print(tps, loss, phases, sep="|")' 2>/dev/null)
  params=$(sed -n "/^== $label:/,\$p" "$log" | grep -oE 'model: [0-9]+ parameters' | head -1 | grep -oE '[0-9]+')
  row "$label" "$v" "${tps:-?} tok/s, loss ${loss:-?}${phases:+; $phases}"
  [[ -n "$tps" ]] && perf+=("train_tokens_per_s preset=$preset dtype=$dtype max_tokens=$tokens $tps")
  [[ -n "$tps" && -n "$params" ]] && train_flops+=("$dtype $tps $params $preset,$tokens")
}
if [[ -f "$B/data/train.en" && -x "$TNMT" ]]; then
  for dtype in bfloat16 float16 float32; do train_case base "$dtype" 8192; done
  train_case base bfloat16 32768
  train_case small float32 8192
fi

# 5. Kernel benchmark.
bench_out="$results/gpu_bench.txt"
if [[ -x "$B/bin/gpu_bench" ]]; then
  run gpu_bench 150 "$B/bin/gpu_bench"
  sed -n '/^== gpu_bench:/,$p' "$log" > "$bench_out"
  v=$(verdict_of)
  [[ $v == OK ]] && grep -q "SKIPPED: no CUDA device" "$bench_out" && v=SKIPPED
  [[ $v == OK ]] || status=1
  row gpu_bench "$v"
fi

# 6. Memory checking of our own kernels (cuBLAS's are left out: slow under the sanitizer).
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -n "$sanitizer" && -z "${TNMT_GPU_CHECK_NO_SANITIZER:-}" ]]; then
  for name in attention_test decode_ops_test step_ops_test train_ops_test train_backward_test convert_test elementwise_test context_test; do
    [[ -x "$B/bin/$name" ]] || continue
    run "memcheck $name" 90 "$sanitizer" --tool memcheck --leak-check no --error-exitcode 99 \
      "$B/bin/$name" --gtest_filter=-*OutOfMemory*
    if [[ $rc -eq 124 ]]; then v=TIMEOUT
    elif [[ $rc -eq 99 ]]; then v=ERRORS; status=1
    elif [[ $rc -ne 0 ]]; then v=FAILED; status=1
    else v=CLEAN; fi
    row "memcheck $name" "$v"
  done
fi

{
  echo
  echo "GPU check on ${card:-no GPU} ($(date -u +%Y-%m-%dT%H:%MZ), ${SECONDS}s); full log: $log"
  printf '%-34s %-10s %7s %s\n' step result time notes
  printf '%s\n' "${rows[@]}"
  printf '%s\n' "${perf[@]}" | sed 's/^/PERF /'
  # Training matmul rate: ~6 FLOPs per parameter per token (forward 2, backward 4; attention
  # scores left out, small at these lengths), against this card's GEMM peak of the same dtype.
  for t in "${train_flops[@]}"; do
    read -r dtype tps params what <<< "$t"
    peak=$(awk -v k="gemm_peak_8192_$dtype" '$1 == "RESULT" && $2 == k {print $3}' "$bench_out" 2>/dev/null)
    awk -v d="$dtype" -v t="$tps" -v p="$params" -v w="$what" -v peak="${peak:-0}" 'BEGIN {
      f = 6 * p * t / 1e12
      if (peak > 0) printf "PERF train_matmul %s dtype=%s %.1f TFLOP/s = %.1f%% of the measured %s peak %.0f TFLOP/s\n", w, d, f, 100 * f / peak, d, peak
      else printf "PERF train_matmul %s dtype=%s %.1f TFLOP/s (no GEMM peak measured)\n", w, d, f }'
  done
  grep '^RESULT' "$bench_out" 2>/dev/null | awk '{printf "%-44s %10s %s\n", $2, $3, $4}'
} | tee -a "$log"
exit $status
