#!/usr/bin/env bash
# OPUS-MT-shaped benchmark: tnmt against CTranslate2 on a Hugging Face Marian model of OPUS-MT's
# shape (6+6 layers, d_model 512, d_ff 2048, 8 heads, swish, tied embeddings, a vocabulary of
# about 58,000 pieces), made here with transformers from a fixed seed (bench/make_opus_model.py:
# random weights, SentencePiece models trained on a synthetic corpus) and converted by each
# engine's own importer: `tnmt import --from hf-marian`, and CTranslate2's
# ct2-transformers-converter, float32 and --quantization int8 (bench/ct2_transformers_converter.py
# runs it under build/py-hf's transformers).
#
# Both engines translate the same sources (100 sentences of exactly 15 pieces) with the outputs
# forced to OUT_LEN decoder steps: tnmt `--min-length OUT_LEN-1 --max-length-offset OUT_LEN-16`
# (OUT_LEN-1 pieces, then the </s> forced at the length limit), CTranslate2
# min_decoding_length = max_decoding_length = OUT_LEN (OUT_LEN pieces, no </s>: its last step
# picks a piece where tnmt's takes </s>); both are credited OUT_LEN tokens per sentence. Greedy
# and beam 4, 1 and 2 threads, float32 and int8 (tnmt --compute-type; CTranslate2 the model
# converted for that type, loaded with that compute_type). Each run is a whole process (`tnmt translate --input F`, or
# Python + ctranslate2 translating the same file: bench/ct2_translate_file.py), all sources at
# once; wall time from /usr/bin/time, engines alternating, best of REPEAT runs.
#
# "outputs identical": sentences whose first OUT_LEN-1 pieces are the same in both engines. tnmt's
# pieces come from one untimed run per compute type and decoding with --token-scores; every timed
# tnmt run must print that run's text, and every run must have the forced length, or the row
# says so. Beam rows may differ where the engines compute the same: at the last step tnmt ranks
# the beam's hypotheses with </s> appended, CTranslate2 with its best piece. int8 rows differ
# by design (each engine quantizes in its own way).
#
#   deploy/install-py-tools.sh   (once: build/py-hf with transformers, build/py-tools with
#                                 ctranslate2)
#   bazel build //tools/tnmt      (the binary this script runs; it does not build it)
#   bench/run_opus_bench.sh
# Environment:
#   THREADS="1 2"   DECODING="greedy beam4"   TYPES="float32 int8"   REPEAT=2
#   SENTENCES=100   OUT_LEN=40   SEED=1 (the model's and the data's)
#   QUICK=1         a smoke run: 8 sentences, 1 repetition, the table written to $WORK only
#   ISA=avx2        caps both engines at AVX2 on an AVX-512 machine (bench/cap-isa.sh)
#   TNMT=bazel-bin/tools/tnmt/tnmt   PY_HF=build/py-hf/bin/python3
#   PYTHON=build/py-tools/bin/python3 (ctranslate2, sentencepiece)
#   MODEL_DIR=build/opus-bench-seed$SEED (the model, kept for the next run; git-ignored)
#   WORK=DIR (default: a new temp dir)
#   RESULT=FILE (default: bench/results/opus-shape-DATE-CPU[-capped-avx2].txt)
set -euo pipefail
cd "$(dirname "$0")/.."
command_line="$(for v in QUICK ISA THREADS DECODING TYPES REPEAT SENTENCES OUT_LEN SEED; do
  if [[ -n "${!v:-}" ]]; then printf '%s=%q ' "$v" "${!v}"; fi; done)bench/run_opus_bench.sh"
QUICK="${QUICK:-}"
THREADS="${THREADS:-1 2}"
DECODING="${DECODING:-greedy beam4}"
TYPES="${TYPES:-float32 int8}"
REPEAT="${REPEAT:-$([[ -n $QUICK ]] && echo 1 || echo 2)}"
SENTENCES="${SENTENCES:-$([[ -n $QUICK ]] && echo 8 || echo 100)}"
OUT_LEN="${OUT_LEN:-40}"
SEED="${SEED:-1}"
SOURCE_PIECES=15
TNMT="${TNMT:-bazel-bin/tools/tnmt/tnmt}"
PY_HF="${PY_HF:-build/py-hf/bin/python3}"
PYTHON="${PYTHON:-build/py-tools/bin/python3}"
MODEL_DIR="${MODEL_DIR:-build/opus-bench-seed$SEED}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_opus_bench.XXXXXX)}"
ISA="${ISA:-}"
source bench/cap-isa.sh
cap_isa run_opus_bench
mkdir -p "$WORK" "$MODEL_DIR"
[[ -x $TNMT ]] || { echo "run_opus_bench: $TNMT not found: bazel build //tools/tnmt" >&2; exit 2; }
for py in "$PY_HF" "$PYTHON"; do
  [[ -x $py ]] || { echo "run_opus_bench: $py not found: deploy/install-py-tools.sh" >&2; exit 2; }
done
(( OUT_LEN > SOURCE_PIECES + 1 )) || { echo "run_opus_bench: OUT_LEN must exceed $((SOURCE_PIECES + 1))" >&2; exit 2; }

# ---- the model, in each engine's format (each step skipped when done) ----------------------
"$PY_HF" bench/make_opus_model.py "$MODEL_DIR" --seed "$SEED" --sources "$SENTENCES" \
  --source-pieces "$SOURCE_PIECES"
src="$MODEL_DIR/sources-${SENTENCES}x$SOURCE_PIECES.txt"
if [[ ! -f "$MODEL_DIR/tnmt/config.json" ]]; then
  "$TNMT" import --from hf-marian "$MODEL_DIR/hf" --output "$MODEL_DIR/tnmt" --force
fi
# ct2-transformers-converter needs transformers (build/py-hf) and ctranslate2 (build/py-tools):
# py-hf's interpreter with ctranslate2 alone on its path (py-tools' numpy would shadow Debian's,
# which Debian's torch is built against).
ct2_path="$WORK/ct2-path"
mkdir -p "$ct2_path"
site="$("$PYTHON" -c 'import ctranslate2, os; print(os.path.dirname(os.path.dirname(ctranslate2.__file__)))')"
for p in "$site"/ctranslate2 "$site"/ctranslate2.libs; do [[ -e $p ]] && ln -sfn "$p" "$ct2_path/"; done
for ct in $TYPES; do
  if [[ ! -f "$MODEL_DIR/ct2-$ct/model.bin" ]]; then
    PYTHONPATH="$ct2_path" PYTHONWARNINGS=ignore "$PY_HF" bench/ct2_transformers_converter.py \
      --model "$MODEL_DIR/hf" --output_dir "$MODEL_DIR/ct2-$ct.tmp" --quantization "$ct" --force
    mv "$MODEL_DIR/ct2-$ct.tmp" "$MODEL_DIR/ct2-$ct"
  fi
done

# ---- runs --------------------------------------------------------------------------------
tnmt_len=(--min-length $((OUT_LEN - 1)) --max-length-offset $((OUT_LEN - SOURCE_PIECES - 1)))
# run NAME CMD...: one timed whole-process run; appends "NAME wall_s rss_kb" to $WORK/runs.
run() {
  local name="$1"; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" 2> "$WORK/$name.err" > /dev/null ||
    { echo "run_opus_bench: $name failed:"; tail -5 "$WORK/$name.err"; exit 1; } >&2
  echo "$name $(cat "$WORK/time")" >> "$WORK/runs"
}
beam_of() { [[ $1 == greedy ]] && echo 1 || echo "${1#beam}"; }
for ct in $TYPES; do
  for d in $DECODING; do
    "$TNMT" translate --model "$MODEL_DIR/tnmt" --threads "${THREADS%% *}" --beam-size "$(beam_of "$d")" \
      --compute-type "$ct" "${tnmt_len[@]}" --token-scores --input "$src" \
      --output "$WORK/check-$ct-$d.txt" --no-progress
  done
done
: > "$WORK/runs"
for r in $(seq "$REPEAT"); do
  for t in $THREADS; do
    for d in $DECODING; do
      for ct in $TYPES; do
        run "tnmt-$ct-$d-$t-$r" "$TNMT" translate --model "$MODEL_DIR/tnmt" --threads "$t" \
          --beam-size "$(beam_of "$d")" --compute-type "$ct" "${tnmt_len[@]}" --input "$src" \
          --output "$WORK/tnmt-$ct-$d-$t-$r.hyp" --no-progress
        run "ct2-$ct-$d-$t-$r" "$PYTHON" bench/ct2_translate_file.py --ct2 "$MODEL_DIR/ct2-$ct" \
          --spm "$MODEL_DIR/hf/source.spm" --source-eos --input "$src" --output "$WORK/ct2-$ct-$d-$t-$r.hyp" \
          --threads "$t" --beam-size "$(beam_of "$d")" --length-penalty 1 --compute-type "$ct" \
          --min-decoding-length "$OUT_LEN" --max-decoding-length "$OUT_LEN" --pieces
      done
    done
  done
done

# ---- the table ----------------------------------------------------------------------------
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
if [[ -z ${RESULT:-} ]]; then
  if [[ -n $QUICK ]]; then
    RESULT="$WORK/opus-shape.txt"
  else
    tag="$(tr 'A-Z' 'a-z' <<< "$cpu" | grep -o -m1 -E 'epyc|xeon|ryzen|core' || echo cpu)"
    RESULT="bench/results/opus-shape-$(date +%F)-$tag${ISA:+-capped-$ISA}.txt"
  fi
fi
{
  echo "# OPUS-MT-shaped model: tnmt against CTranslate2, $(date +%F)"
  echo "command: $command_line"
  echo "machine: $cpu, $(nproc) cores; AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no); VNNI: $(grep -q -E 'avx512_vnni|avx_vnni' /proc/cpuinfo && echo yes || echo no); AMX: $(grep -q amx_int8 /proc/cpuinfo && echo yes || echo no)${ISA:+; both engines capped at $ISA}"
  echo "tnmt: $("$TNMT" --version); threads: $THREADS"
  echo "CTranslate2 $("$PYTHON" -c 'import ctranslate2; print(ctranslate2.__version__)') (bench/ct2_translate_file.py), converted by ct2-transformers-converter under transformers $("$PY_HF" -c 'import transformers; print(transformers.__version__)')"
} > "$WORK/header.txt"
"$PYTHON" bench/opus_bench_table.py --work "$WORK" --model-info "$MODEL_DIR/model_info.json" \
  --sentences "$SENTENCES" --source-pieces "$SOURCE_PIECES" --out-len "$OUT_LEN" \
  --repeat "$REPEAT" --types "$TYPES" --threads "$THREADS" --decoding "$DECODING" > "$WORK/table.txt"
mkdir -p "$(dirname "$RESULT")"
cat "$WORK/header.txt" "$WORK/table.txt" | tee "$RESULT"
echo "run_opus_bench: wrote $RESULT (work dir $WORK)"
