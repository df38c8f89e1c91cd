#!/usr/bin/env bash
# Serving benchmark (issue "serving"): `tnmt serve` under closed-loop gRPC load from
# bench/serve_load.cc, with continuous batching on and off, at 1, 8 and 64 concurrent clients.
#
#   bench/run_serve_bench.sh                 # everything; prints one table at the end
#   SECONDS=10 MODEL=tiny bench/run_serve_bench.sh
#
# One server per batching mode (fresh process, free ports from --port 0 / --http-port 0, ready
# when its --ready-file appears); the client counts run one after another against it, each for
# SECONDS. Each client sends one Translate request, waits for the answer, sends the next.
# After each mode the server gets SIGTERM and must exit 0 (else the script exits 1 at the end).
# Environment:
#   MODEL=base        "base": a random Transformer-base (6+6 layers, 512/2048, 8 heads, vocab
#                     8000), exported by translate_bench like bench/run_translate_bench.sh does,
#                     with a SentencePiece model (8000 pieces) trained by spm_train on DATA's
#                     train.{en,de}.gz (random weights: outputs usually run to the maximum
#                     length, source length + 50). "tiny": tests/golden/data/tiny (2+2 layers,
#                     d_model 32; fast, mostly measures the server). Anything else: a model
#                     directory (config.json, model.safetensors, spm.model).
#   SECONDS=20        load duration per (mode, clients) row (bash's SECONDS as set by the caller).
#   CLIENTS="1 8 64"  concurrent closed-loop clients per row.
#   MODES="on off"    --continuous-batching / --no-continuous-batching.
#   TEXTS=1           texts per Translate request.
#   BEAM=0            beam size per request (0: the model's default, 4 for both models above).
#   MAX_LENGTH=0      DecodingOptions.max_length (0: the model's default).
#   DEADLINE_MS=120000  per-request deadline (64 clients on the base model queue for ~15-25 s).
#   THREADS=0         server compute threads (--threads; 0: all cores).
#   DATA=data/multi30k  corpus for the base model's SentencePiece model (tools/get-multi30k.sh);
#                     its test_2016_flickr.en.gz is also the default INPUT.
#   OFFLINE=1         also time `tnmt translate` on INPUT with the same threads and server flags'
#                     --compute-type, once before the servers start and once after they stop, and
#                     show each row's sentences/s as a share of the mean of the two (the VMs this
#                     runs on change speed from minute to minute; 0: skip; needs INPUT).
#   INPUT=FILE        source sentences, one per line (default: DATA's test set if present, else
#                     serve_load's ~30 built-in sentences).
#   SERVE_ARGS=...    extra `tnmt serve` flags (e.g. "--max-batch-rows 128").
#   LOAD_ARGS=...     extra serve_load flags (e.g. "--deadline-ms 60000").
#   WORK=DIR          where the model, logs and per-row JSON go (default: a new temp dir).
#   PYTHON=python3    interpreter for the table.
#   TNMT=PATH         the tnmt binary to serve and time (default: the one built here).
set -euo pipefail
# SECONDS is bash's own clock too: take the caller's value from the environment itself.
DURATION="$(printenv SECONDS || true)"
DURATION="${DURATION:-20}"
cd "$(dirname "$0")/.."

MODEL="${MODEL:-base}"
CLIENTS="${CLIENTS:-1 8 64}"
MODES="${MODES:-on off}"
TEXTS="${TEXTS:-1}"
BEAM="${BEAM:-0}"
MAX_LENGTH="${MAX_LENGTH:-0}"
DEADLINE_MS="${DEADLINE_MS:-120000}"
THREADS="${THREADS:-0}"
DATA="${DATA:-data/multi30k}"
OFFLINE="${OFFLINE:-1}"
SERVE_ARGS="${SERVE_ARGS:-}"
LOAD_ARGS="${LOAD_ARGS:-}"
PYTHON="${PYTHON:-$(command -v python3)}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_serve_bench.XXXXXX)}"
mkdir -p "$WORK"
echo "== work dir: $WORK"
REV="$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
[[ -z "$(git status --porcelain -- server engine kernels tools/tnmt 2>/dev/null)" ]] || REV+=" + uncommitted server/engine changes"

targets=(//tools/tnmt //bench:serve_load)
[[ "$MODEL" != base ]] || targets+=(//bench:translate_bench)
bazel build "${targets[@]}"
BIN="$(bazel info bazel-bin 2>/dev/null)"
TNMT="${TNMT:-$BIN/tools/tnmt/tnmt}"  # TNMT=PATH: another build of tnmt (A/B runs)
LOAD="$BIN/bench/serve_load"

# 1. The model.
case "$MODEL" in
  tiny)
    MODEL_DIR="$(pwd)/tests/golden/data/tiny"
    MODEL_DESC="tiny golden model (2+2 layers, d_model 32, vocab 256)"
    ;;
  base)
    MODEL_DIR="$WORK/model"
    MODEL_DESC="random Transformer-base (6+6 layers, 512/2048, 8 heads, vocab 8000; SentencePiece from multi30k train)"
    if [[ ! -e "$MODEL_DIR/spm.model" ]]; then
      command -v spm_train > /dev/null || { echo "MODEL=base needs spm_train (or use MODEL=tiny)" >&2; exit 1; }
      [[ -e "$DATA/train.en.gz" && -e "$DATA/train.de.gz" ]] ||
        { echo "MODEL=base needs $DATA/train.{en,de}.gz (set DATA, or use MODEL=tiny)" >&2; exit 1; }
      mkdir -p "$MODEL_DIR"
      echo "== exporting the random Transformer-base model"
      "$BIN/bench/translate_bench" --export "$MODEL_DIR" --export-only > "$WORK/export.log"
      echo "== training its SentencePiece model (8000 pieces) on $DATA"
      zcat "$DATA/train.en.gz" "$DATA/train.de.gz" > "$WORK/spm_corpus.txt"
      spm_train --input="$WORK/spm_corpus.txt" --model_prefix="$MODEL_DIR/spm" --vocab_size=8000 \
          --model_type=unigram --character_coverage=1.0 --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3 \
          --minloglevel=2 > "$WORK/spm_train.log" 2>&1
    fi
    ;;
  *)
    MODEL_DIR="$MODEL"
    MODEL_DESC="$MODEL"
    ;;
esac
for f in config.json model.safetensors spm.model; do
  [[ -e "$MODEL_DIR/$f" ]] || { echo "model directory $MODEL_DIR has no $f" >&2; exit 1; }
done

INPUT="${INPUT:-}"
if [[ -z "$INPUT" && -e "$DATA/test_2016_flickr.en.gz" ]]; then
  zcat "$DATA/test_2016_flickr.en.gz" > "$WORK/input.txt"
  INPUT="$WORK/input.txt"
fi
INPUT_DESC="$INPUT"
[[ -n "$INPUT_DESC" ]] || INPUT_DESC="the built-in sentences of serve_load"

# 2. Offline reference: the same sentences through `tnmt translate`, same threads and beam,
# before the servers start and again after they stop (offline_run appends to offline_sps).
offline_sps=""
offline_run() {
  [[ "$OFFLINE" == 1 && -n "$INPUT" ]] || return 0
  local compute=float32 offline_threads="$THREADS" beam_flag=() start end sps
  [[ "$SERVE_ARGS" =~ --compute-type[=\ ]([a-z0-9]+) ]] && compute="${BASH_REMATCH[1]}"
  [[ "$offline_threads" != 0 ]] || offline_threads="$(nproc)"
  [[ "$BEAM" == 0 ]] || beam_flag=(--beam-size "$BEAM")
  start=$(date +%s.%N)
  "$TNMT" translate --model "$MODEL_DIR" --threads "$offline_threads" --compute-type "$compute" "${beam_flag[@]}" \
      --input "$INPUT" --output "$WORK/offline.out" --no-progress 2> "$WORK/offline.log"
  end=$(date +%s.%N)
  sps=$("$PYTHON" -c "import sys; print(sum(1 for l in open(sys.argv[1]) if l.strip()) / (float(sys.argv[3]) - float(sys.argv[2])))" \
      "$INPUT" "$start" "$end")
  echo "== offline ($1): tnmt translate --threads $offline_threads --compute-type $compute: $sps sentences/s"
  offline_sps="${offline_sps:+$offline_sps,}$sps"
}
offline_run before

# 3. One server per mode, every client count against it.
server_pid=""
cleanup() { if [[ -n "$server_pid" ]]; then kill -TERM "$server_pid" 2> /dev/null || true; fi; }
trap cleanup EXIT

server_failures=0
for mode in $MODES; do
  case "$mode" in
    on) batching=--continuous-batching ;;
    off) batching=--no-continuous-batching ;;
    *) echo "MODES: 'on' or 'off', not '$mode'" >&2; exit 2 ;;
  esac
  ready="$WORK/ready.$mode"
  rm -f "$ready"
  # shellcheck disable=SC2086
  "$TNMT" serve --model "bench=$MODEL_DIR" --port 0 --http-port 0 --ready-file "$ready" \
      --threads "$THREADS" "$batching" --grace-seconds 60 $SERVE_ARGS 2> "$WORK/server.$mode.log" &
  server_pid=$!
  for _ in $(seq 600); do
    [[ -e "$ready" ]] && break
    kill -0 "$server_pid" 2> /dev/null || { echo "server ($mode) died; log:" >&2; cat "$WORK/server.$mode.log" >&2; exit 1; }
    sleep 0.5
  done
  [[ -e "$ready" ]] || { echo "server ($mode) not ready after 300 s; log:" >&2; cat "$WORK/server.$mode.log" >&2; exit 1; }
  read -r grpc_port http_port < "$ready"
  echo "== continuous batching $mode: server pid $server_pid, gRPC :$grpc_port, HTTP :$http_port"
  for c in $CLIENTS; do
    echo "== batching $mode, $c client(s), ${DURATION} s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    rc=0
    # shellcheck disable=SC2086
    "$LOAD" --target "localhost:$grpc_port" --clients "$c" --channels "$(( c < 4 ? c : 4 ))" \
        --seconds "$DURATION" --texts-per-request "$TEXTS" --beam-size "$BEAM" --max-length "$MAX_LENGTH" \
        --deadline-ms "$DEADLINE_MS" \
        ${INPUT:+--input "$INPUT"} --json $LOAD_ARGS > "$WORK/load.$mode.c$c.json" || rc=$?
    echo "   $(cat "$WORK/load.$mode.c$c.json")"
    [[ $rc == 0 ]] || echo "   (serve_load exit $rc: some requests failed)"
  done
  curl -s "http://localhost:$http_port/metrics" > "$WORK/metrics.$mode.txt" || true
  kill -TERM "$server_pid"
  rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  echo "== server ($mode) exited $rc after SIGTERM"
  if [[ $rc != 0 ]]; then
    server_failures=$((server_failures + 1))
    echo "server exit status $rc, expected 0; log tail:" >&2
    tail -5 "$WORK/server.$mode.log" >&2
  fi
  echo "$rc" > "$WORK/server_exit.$mode"
done
offline_run after

# 4. One table.
"$PYTHON" - "$WORK" "$MODES" "$CLIENTS" "$DURATION" "$REV" "$MODEL_DESC" "$INPUT_DESC" "$TEXTS" "$BEAM" "$THREADS" "${offline_sps:-0}" <<'EOF'
import json, os, sys
work, modes, clients, duration, rev, model, inp, texts, beam, threads, offline_runs = sys.argv[1:]
offline_runs = [float(x) for x in offline_runs.split(",")]
offline = sum(offline_runs) / len(offline_runs)
print()
print(f"tnmt serve built from {rev}; model: {model}")
print(f"Load: serve_load closed loop, {duration} s per row, {texts} text(s) per request, beam "
      f"{beam if beam != '0' else 'model default'}; input: {inp}; server threads: "
      f"{threads if threads != '0' else 'all cores'}; {os.cpu_count()} cores here.")
print()
if offline:
    runs = " before and ".join(f"{x:.1f}" for x in offline_runs)
    print(f"Offline `tnmt translate` of the same input, same threads: {offline:.1f} sentences/s "
          f"(the mean of {runs} after the servers ran).")
    print()
hdr = (f"{'batching':<9} {'clients':>7} {'requests':>8} {'req/s':>8} {'sent/s':>8} {'offline':>7} {'tok/s':>8} "
       f"{'p50 ms':>8} {'p99 ms':>8} {'failures':<24} {'server exit':>11}")
print(hdr)
print("-" * len(hdr))
for mode in modes.split():
    exit_path = f"{work}/server_exit.{mode}"
    server_exit = open(exit_path).read().strip() if os.path.exists(exit_path) else "?"
    for c in clients.split():
        path = f"{work}/load.{mode}.c{c}.json"
        try:
            r = json.loads(open(path).read())
        except (OSError, ValueError):
            print(f"{mode:<9} {c:>7} {'(no result: see ' + path + ')'}")
            continue
        fails = ", ".join(f"{k} {v}" for k, v in r["failures"].items()) or "0"
        lat = r["latency_ms"]
        share = f"{100 * r['sentences_per_s'] / offline:.0f}%" if offline else "-"
        print(f"{mode:<9} {c:>7} {r['requests']:>8} {r['requests_per_s']:>8.2f} "
              f"{r['sentences_per_s']:>8.2f} {share:>7} {r['tokens_per_s']:>8.1f} {lat['p50']:>8.1f} "
              f"{lat['p99']:>8.1f} {fails:<24} {server_exit:>11}")
print("req/s, sent/s (sentences), tok/s (generated target tokens, </s> excluded): OK requests "
      "/ wall time of the row; offline: sent/s as a share of offline translation.\np50/p99: client-side latency of OK requests. 'server exit': the "
      "server's exit status after SIGTERM (0 expected).")
EOF
echo "(logs, metrics and per-row JSON: $WORK)"
[[ $server_failures == 0 ]]
