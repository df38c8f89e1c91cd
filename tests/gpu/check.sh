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
#      CPU, BLEU when sacrebleu is importable, sentences/s), float16 again with the beam
#      bookkeeping on the GPU (TNMT_GPU_BEAM=1: the same lines), and `tnmt serve --device cuda`
#      answering over gRPC as the local GPU translation does;
#   3. the engine benchmark: translate_bench on a random Transformer-base (32k vocabulary), beam
#      4, float16 and bfloat16, batch 1 (300 sentences), 32 and 256 (3,000 sentences each), and
#      float16 at batch 1 and 32 again with the decode step replayed as CUDA graphs, and with
#      graphs and the beam bookkeeping on the GPU (TNMT_GPU_BEAM=1);
#   4. training: `tnmt train` of Transformer-base on Multi30k on the GPU in bfloat16, float16
#      and float32 for a fixed number of steps, then bfloat16 with 4x the batch and the small
#      preset in float32 (tokens/s, where an update's time goes, estimated TFLOP/s and the
#      fraction of the card's measured matmul peak, loss falling);
#   5. the kernel benchmark (bench/gpu/gpu_bench.cc);
#   6. peers on the same card, when python3 imports torch and sentencepiece (and transformers
#      for decoding; else each is skipped with a line saying so): transformers `generate`,
#      float16, beam 4 (bench/gpu/hf_decode_peer.py) on step 3's random Transformer-base
#      (`translate_bench --export`, then `tnmt export --to hf-marian`) and sources, outputs
#      forced to the same 30 tokens, at batch 1, 32 and 256; the same on the demo model over
#      Multi30k test_2016_flickr at natural lengths, at ~32 and ~256 sentences a batch, beside
#      `tnmt translate` on the GPU; PyTorch training (bench/torch_train_peer.py: bfloat16
#      autocast, scaled_dot_product_attention, fused Adam) of Transformer-base on tnmt's own
#      batches of step 4's bfloat16 runs, eager, then torch.compile while its time lasts
#      (each run bounded: decoding 90 s and 60 s, training 60 s, torch.compile 150 s; ~4
#      minutes in all on an H100/H200 as planned). The table gives tnmt/peer ratios. A peer's
#      failure is shown, but does not fail the check;
#   7. compute-sanitizer memcheck of our kernels while time remains.
# A short table comes last. The full log goes to $OUT (the device runner's output folder) or
# else bench/results/, as gpu-check-DATE-CARD.txt. Exit status 0 if every test passed (a test
# that skipped for want of a GPU counts as failed here) and every end-to-end step ran.
# Environment: TNMT_GPU_CHECK_BUDGET (seconds, 450); TNMT_GPU_CHECK_NO_SANITIZER=1 skips 7;
# TNMT_GPU_CHECK_NO_PEERS=1 skips 6, TNMT_GPU_CHECK_NO_COMPILE=1 its torch.compile run;
# TNMT_PEER_PYTHON (python3) runs the peers; TNMT_GPU_CHECK_PEERS_ON_CPU=1 runs them on the
# CPU at toy sizes (their wiring, on a machine without a GPU: no numbers to keep).
# TNMT_GPU_TIMING (default 1 here) is passed to the engine benchmarks and the training runs
# (steps 3 and 4): their logs then hold where every millisecond went (docs/gpu.md); 0 turns it off.
set -uo pipefail
bundle="$(cd "${1:-build/gpu-bundle}" && pwd)"
cd "$(dirname "$0")/../.."  # repository root: tests read models/demo and tests/golden
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
# Without a GPU the script still runs end to end (a dry run of the bundle and the script): the
# tests report their own skips, every step that needs the card is listed as SKIPPED "no GPU",
# the CPU-side steps run, the log goes to /tmp unless $OUT is set, and the exit status is 1.
results="${OUT:-bench/results}"
[[ -z $card && -z ${OUT:-} ]] && results=/tmp/tnmt-gpu-check-results
mkdir -p "$results"
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
ld_outside=${LD_LIBRARY_PATH:-}  # the machine's own, for the Python peers (step 6)
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

elapsed() { awk -v s="$1" -v e="$(date +%s%N)" 'BEGIN {printf "%.3f", (e - s) / 1e9}'; }
budget=${TNMT_GPU_CHECK_BUDGET:-450}
gpu_timing=${TNMT_GPU_TIMING:-1}
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
gpu_skip() { secs=0; row "$1" SKIPPED "no GPU"; status=1; }  # gpu_skip STEP: a step needing the card
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
    if [[ -z $card ]]; then gpu_skip "translate demo cuda $dtype"; continue; fi
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
  # Beam search on the GPU (TNMT_GPU_BEAM=1, docs/gpu.md): the default path's float16 lines.
  if [[ -z $card ]]; then
    gpu_skip "translate demo cuda float16 gpu-beam"
  else
    run "translate cuda float16 TNMT_GPU_BEAM=1" 120 env TNMT_GPU_BEAM=1 "$TNMT" translate --model models/demo \
      --device cuda --dtype float16 --input "$src" --output "$work/float16-gpu-beam.txt"
    v=$(verdict_of)
    same=$(paste -d '\t' "$work/float16.txt" "$work/float16-gpu-beam.txt" 2>/dev/null | awk -F '\t' '$1 == $2 {n++} END {print n + 0}')
    [[ $v == OK && $same -ne $lines ]] && v=MISMATCH
    [[ $v == OK ]] || status=1
    row "translate demo cuda float16 gpu-beam" "$v" "$(awk -v n="$lines" -v s="$secs" 'BEGIN {printf "%.1f sent/s", n / s}'), identical to float16 $same/$lines"
  fi
  # The server with the demo model on the GPU: the same translations as local float16 decoding
  # (first 100 lines, through gRPC), /metrics answers, SIGTERM drains and exits 0.
  if [[ -z $card ]]; then
    gpu_skip "serve demo cuda float16"
  else
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
  fi
else
  say "== translate: skipped (no test_2016_flickr.en in the bundle: run tools/get-multi30k.sh before build_bundle.sh)"
  status=1
fi

# 3. Engine benchmark: random Transformer-base, 32k vocabulary, beam 4, outputs fixed length.
bench_out_len=30
bench_model=(--vocab 32000 --src-len 28 --out-len "$bench_out_len")  # step 6 exports this model
declare -A engine_tps train_tps  # tnmt's tokens/s, for the peers' ratios
bench_engine() {  # bench_engine DTYPE BATCH [graphs|gpu-beam]: one translate_bench run, a row and a PERF line
  local dtype=$1 batch=$2 graphs=${3:-} sentences=3000 label="$1 batch $2${3:+ $3}"
  ((batch == 1)) && sentences=300
  if [[ -z $card ]]; then gpu_skip "bench base $label"; return; fi
  local res="$work/tb-$dtype-$batch${graphs:+-$graphs}.txt"
  run "translate_bench $label" 60 env TNMT_GPU_TIMING="$gpu_timing" TNMT_GPU_BEAM=$([[ $graphs == gpu-beam ]] && echo 1 || echo 0) \
    "$B/bin/translate_bench" --device cuda --dtype "$dtype" \
    $([[ -n $graphs ]] || echo --no-cuda-graphs) "${bench_model[@]}" --beam 4 --batch "$batch" \
    --sentences "$sentences" --no-gemm --check 0 --result "$res"
  local v tps
  v=$(verdict_of); [[ $v == OK ]] || status=1
  tps=$(awk -F= '$1 == "tokens_per_s" {printf "%.0f", $2}' "$res" 2>/dev/null)
  row "bench base $label" "$v" "${tps:-?} target tok/s ($sentences sentences)"
  [[ -n "$tps" ]] && perf+=("engine_tokens_per_s dtype=$dtype batch=$batch${graphs:+ $graphs} $tps")
  [[ -n "$tps" ]] && engine_tps[$dtype/$batch${graphs:+/$graphs}]=$tps
}
if [[ -x "$B/bin/translate_bench" ]]; then
  for dtype in float16 bfloat16; do
    for batch in 1 32 256; do bench_engine "$dtype" "$batch"; done
  done
  # CUDA graphs of the decode step (the engine's default): the same runs replayed as graphs.
  for batch in 1 32 256; do bench_engine float16 "$batch" graphs; done
  # The same with the beam bookkeeping on the GPU (TNMT_GPU_BEAM=1; graphs on).
  for batch in 1 32 256; do bench_engine float16 "$batch" gpu-beam; done
fi

# 4. Training on Multi30k (the demo model's vocabulary) for a fixed number of steps:
# Transformer-base in each dtype, then base in bfloat16 with 4x the batch (does the step's
# cost grow with the tokens or stay per update?) and the demo model's size (small) in float32;
# tokens/s from the trainer's metrics (the windows after the first log).
train_steps=60 train_log_every=10  # tokens/s over steps 11-60; the peer times the same batches
train_case() {  # train_case PRESET DTYPE MAX_TOKENS
  local preset=$1 dtype=$2 tokens=$3 label="train $1 cuda $2"
  [[ $tokens == 8192 ]] || label="train $preset cuda $dtype, $tokens tokens"
  if [[ -z $card ]]; then gpu_skip "$label"; return; fi
  local dir="$work/train-$preset-$dtype-$tokens"
  mkdir -p "$dir"
  run "$label" 75 env TNMT_GPU_TIMING="$gpu_timing" "$TNMT" train --train-source "$B/data/train.en" \
    --train-target "$B/data/train.de" --spm-model models/demo/spm.model --preset "$preset" \
    --max-tokens "$tokens" --max-steps "$train_steps" --log-every-steps "$train_log_every" --save-dir "$dir" \
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
  [[ -n "$tps" ]] && train_tps[$preset/$dtype/$tokens]=$tps
  [[ -n "$tps" && -n "$params" ]] && train_flops+=("$dtype $tps $params $preset,$tokens")
}
if [[ -f "$B/data/train.en" && -x "$TNMT" ]]; then
  for dtype in bfloat16 float16 float32; do train_case base "$dtype" 8192; done
  train_case base bfloat16 32768
  train_case small float32 8192
fi

# 5. Kernel benchmark.
bench_out="$results/gpu_bench.txt"
if [[ -z $card ]]; then
  gpu_skip gpu_bench
elif [[ -x "$B/bin/gpu_bench" ]]; then
  run gpu_bench 150 "$B/bin/gpu_bench"
  sed -n '/^== gpu_bench:/,$p' "$log" > "$bench_out"
  v=$(verdict_of)
  [[ $v == OK ]] && grep -q "SKIPPED: no CUDA device" "$bench_out" && v=SKIPPED
  [[ $v == OK ]] || status=1
  row gpu_bench "$v"
fi

# 6. Peers on the same card (see the header). The Python peers run with the machine's own
# libraries, not the bundle's; the bundled tnmt and translate_bench make their inputs.
peer_py=${TNMT_PEER_PYTHON:-python3}
peer_src="$B/bench"
[[ -f "$peer_src/gpu/hf_decode_peer.py" ]] || peer_src=bench
if [[ -n $ld_outside ]]; then peer_env=(env LD_LIBRARY_PATH="$ld_outside"); else peer_env=(env -u LD_LIBRARY_PATH); fi
peer=("${peer_env[@]}" "$peer_py")
peer_field() {  # peer_field STEP KIND KEY: KEY's values on the "PEER KIND" lines of STEP's log
  sed -n "/^== $1:/,\$p" "$log" | grep "^PEER $2 " | grep -oE " $3=[^ ]*" | cut -d= -f2
}
peer_verdict() {  # peer_verdict STEP: after its run, OK, TIMEOUT, FAILED(rc) or SKIPPED (a peer's "SKIPPED: why")
  local v
  v=$(verdict_of)
  [[ $v == OK ]] && sed -n "/^== $1:/,\$p" "$log" | grep -q ': SKIPPED: ' && v=SKIPPED
  echo "$v"
}
peer_skipped() { sed -n "/^== $1:/,\$p" "$log" | grep -m1 -oE ': SKIPPED: .*' | cut -c12-; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else printf "?"}'; }
ns_since() { echo $(($(date +%s%N) - $1)); }
if [[ -n ${TNMT_GPU_CHECK_NO_PEERS:-} ]]; then
  say "== peers: skipped (TNMT_GPU_CHECK_NO_PEERS)"
elif ! torch_version=$("${peer[@]}" -c 'import torch, sentencepiece; print(torch.__version__)' 2> /dev/null); then
  say "== peers: skipped ($peer_py cannot import torch and sentencepiece)"
  secs=0
  row "peers (PyTorch, transformers)" SKIPPED "no torch/sentencepiece in $peer_py"
else
  hf_version=$("${peer[@]}" -c 'import transformers; print(transformers.__version__)' 2> /dev/null)
  peer_device=cuda peer_dtype=bfloat16 peer_preset=base natural_copies=4
  natural_batches=(32 256)
  dec_args=(--batch-sizes "1,32,256" --seconds 8)
  natural_args=(--seconds 8)
  train_args=(--warmup "$train_log_every" --steps $((train_steps - train_log_every)))
  if [[ -n ${TNMT_GPU_CHECK_PEERS_ON_CPU:-} ]]; then  # the wiring only, at toy sizes
    peer_device=cpu peer_dtype=float32 peer_preset=tiny natural_copies=0
    natural_batches=(4 8)
    dec_args=(--batch-sizes 1 --sentences 1 --seconds 1 --threads 2)
    natural_args=(--seconds 1 --sentences 16 --threads 2)
    train_args=(--warmup 1 --steps 2 --threads 2)
  fi
  say "== peers: $peer_py with torch $torch_version, transformers ${hf_version:-(not importable)}, on $peer_device"

  # Decoding, step 3's model and sources: transformers on the same weights, lengths forced.
  if [[ -z $hf_version ]]; then
    secs=0
    row "peer decode (transformers)" SKIPPED "$peer_py cannot import transformers"
  elif [[ -x "$B/bin/translate_bench" && -x "$TNMT" ]]; then
    base="$work/peer-base"
    mkdir -p "$base"
    run "peer export base" 60 "$B/bin/translate_bench" "${bench_model[@]}" --sentences 3000 --no-gemm \
      --export "$base" --export-only
    # prepare is plain Python (no torch) that runs the bundled tnmt: the bundle's libraries.
    [[ $rc -eq 0 ]] && run "peer prepare base" 30 "$peer_py" "$peer_src/gpu/hf_decode_peer.py" prepare \
      --tnmt "$TNMT" --model "$base" --output "$base.hf"
    if [[ $rc -eq 0 ]]; then
      run "peer decode base" 90 "${peer[@]}" "$peer_src/gpu/hf_decode_peer.py" run --model "$base.hf" \
        --ids "$base/sources.txt" --out-len "$bench_out_len" --label base --device "$peer_device" "${dec_args[@]}"
      v=$(peer_verdict "peer decode base")
      note=""
      dtype=$(peer_field "peer decode base" decode dtype | head -1)
      while read -r batch tps; do
        graphs=${engine_tps[float16/$batch/graphs]:-} plain=${engine_tps[float16/$batch]:-}
        note+="b$batch ${tps%.*} "
        line="peer_decode base $dtype beam=4 batch=$batch forced=$bench_out_len: transformers ${tps%.*} tok/s; "
        line+="tnmt ${graphs:-?} (graphs) = $(ratio "$graphs" "$tps"), ${plain:-?} (no graphs) = $(ratio "$plain" "$tps")"
        perf+=("$line")
      done < <(paste -d ' ' <(peer_field "peer decode base" decode batch) <(peer_field "peer decode base" decode tokens_per_s))
      note=${note:+${note}tok/s, $dtype beam 4, forced lengths}
      [[ $v == SKIPPED ]] && note=$(peer_skipped "peer decode base")
      row "peer decode base (transformers)" "$v" "$note"
    else
      row "peer decode base (transformers)" FAILED "no Hugging Face export of the bench model (log)"
    fi
  fi

  # Decoding, real work: the demo model on Multi30k test_2016_flickr at natural lengths.
  # tnmt translate on $natural_copies copies of it, at ~N sentences a batch (--max-batch-tokens
  # = N x the mean source length), its time less a one-line run's (process, model, CUDA).
  if [[ -n $hf_version && -f "$src" && -x "$TNMT" ]]; then
    demo_hf="$work/peer-demo.hf"
    run "peer prepare demo" 30 "$peer_py" "$peer_src/gpu/hf_decode_peer.py" prepare \
      --tnmt "$TNMT" --model models/demo --output "$demo_hf"
    if ((natural_copies > 0)); then
      for ((i = 0; i < natural_copies; ++i)); do cat "$src"; done > "$work/peer-natural.en"
    else
      head -16 "$src" > "$work/peer-natural.en"
    fi
    head -1 "$src" > "$work/peer-one.en"
    n_lines=0 n_src=0
    read -r n_lines n_src < <("${peer[@]}" "$peer_src/gpu/hf_decode_peer.py" count --model "$demo_hf" \
      --side source --text "$work/peer-natural.en" 2> /dev/null | awk '/^PEER count/ {
        for (i = 3; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] } print f["lines"], f["tokens"] }')
    t=$(date +%s%N)
    run "peer tnmt translate one line" 60 "$TNMT" translate --model models/demo --device "$peer_device" \
      --input "$work/peer-one.en" --output "$work/peer-one.txt"
    one_ns=$(ns_since "$t")
    declare -A tnmt_sps tnmt_tps
    for n in "${natural_batches[@]}"; do
      ((n_lines > 0)) || break  # the sources could not be counted (log)
      t=$(date +%s%N)
      run "peer tnmt translate batch $n" 60 "$TNMT" translate --model models/demo --device "$peer_device" \
        --max-batch-tokens $((n * n_src / n_lines)) --input "$work/peer-natural.en" --output "$work/peer-natural-$n.txt"
      ns=$(($(ns_since "$t") - one_ns))
      out_tokens=$("${peer[@]}" "$peer_src/gpu/hf_decode_peer.py" count --model "$demo_hf" \
        --text "$work/peer-natural-$n.txt" 2> /dev/null | grep -oE ' tokens=[0-9]+' | cut -d= -f2)
      if [[ $rc -eq 0 && $ns -gt 0 ]]; then
        tnmt_sps[$n]=$(awk -v l="$n_lines" -v ns="$ns" 'BEGIN {printf "%.1f", l / ns * 1e9}')
        tnmt_tps[$n]=$(awk -v t="${out_tokens:-0}" -v ns="$ns" 'BEGIN {printf "%.0f", t / ns * 1e9}')
      fi
    done
    run "peer decode demo" 60 "${peer[@]}" "$peer_src/gpu/hf_decode_peer.py" run --model "$demo_hf" \
      --text "$src" --batch-sizes "$(IFS=,; echo "${natural_batches[*]}")" --label demo \
      --device "$peer_device" "${natural_args[@]}"
    v=$(peer_verdict "peer decode demo")
    note=""
    dtype=$(peer_field "peer decode demo" decode dtype | head -1)
    while read -r batch sps tps; do
      note+="b$batch $sps "
      line="peer_decode demo $dtype beam=4 natural batch~$batch: transformers $sps sent/s (${tps%.*} tok/s); "
      line+="tnmt ${tnmt_sps[$batch]:-?} sent/s (~${tnmt_tps[$batch]:-?} tok/s) = $(ratio "${tnmt_sps[$batch]:-}" "$sps")"
      perf+=("$line")
    done < <(paste -d ' ' <(peer_field "peer decode demo" decode batch) \
      <(peer_field "peer decode demo" decode sentences_per_s) <(peer_field "peer decode demo" decode tokens_per_s))
    note=${note:+${note}sent/s, natural lengths}
    [[ $v == SKIPPED ]] && note=$(peer_skipped "peer decode demo")
    row "peer decode demo (transformers)" "$v" "$note"
  fi

  # Training: PyTorch on tnmt's batches of step 4's Transformer-base bfloat16 runs.
  peer_train() {  # peer_train MAX_TOKENS SECONDS [--compile]
    local tokens=$1 limit mode=eager v tps status same tnmt name
    [[ ${3:-} == --compile ]] && mode=compile
    name="peer train $peer_preset $peer_dtype $tokens $mode"
    limit=$(limit_for "$2")
    run "$name" "$2" "${peer[@]}" "$peer_src/torch_train_peer.py" --device "$peer_device" --dtype "$peer_dtype" \
      --preset "$peer_preset" --train-source "$B/data/train.en" --train-target "$B/data/train.de" \
      --spm-model models/demo/spm.model --max-tokens "$tokens" --time-limit $((limit - 5)) \
      --tnmt-save-dir "$work/train-base-bfloat16-$tokens" "${train_args[@]}" ${3:-}
    v=$(peer_verdict "$name")
    tps=$(peer_field "$name" train tokens_per_s | head -1)
    status=$(peer_field "$name" train status | head -1)
    [[ $v == OK && $status == timeout ]] && v=TIMEOUT
    same=$(sed -n "/^== $name:/,\$p" "$log" | grep -oE "batches (NOT the same as|the same as|not compared with) tnmt's.*" | head -1)
    tnmt=${train_tps[$peer_preset/$peer_dtype/$tokens]:-}
    note="${tps:+torch $tps tok/s${status:+ ($status)}, tnmt ${tnmt:-?} = $(ratio "$tnmt" "$tps")}${same:+; $same}"
    [[ $v == SKIPPED ]] && note=$(peer_skipped "$name")
    row "$name" "$v" "$note"
    [[ -n $tps && $tps != 0 ]] &&
      perf+=("peer_train $peer_preset $peer_dtype max_tokens=$tokens torch $mode: $tps tok/s; tnmt ${tnmt:-?} = $(ratio "$tnmt" "$tps")")
  }
  if [[ -f "$B/data/train.en" ]]; then
    peer_train 8192 60
    peer_train 32768 60
    [[ -n ${TNMT_GPU_CHECK_NO_COMPILE:-} ]] || peer_train 8192 150 --compile
  fi
fi

# 7. Memory checking of our own kernels (cuBLAS's are left out: slow under the sanitizer).
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -z $card ]]; then
  gpu_skip "memcheck (compute-sanitizer)"
elif [[ -n "$sanitizer" && -z "${TNMT_GPU_CHECK_NO_SANITIZER:-}" ]]; then
  for name in attention_test embedding_test topk_test step_ops_test reduce_test convert_test elementwise_test context_test \
      adam_devices_test attention_devices_test dropout_devices_test elementwise_devices_test embedding_devices_test \
      loss_devices_test step_ops_devices_test topk_devices_test; do
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
  ((${#perf[@]})) && printf '%s\n' "${perf[@]}" | sed 's/^/PERF /'
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
