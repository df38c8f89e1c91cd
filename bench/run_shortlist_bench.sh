#!/usr/bin/env bash
# Vocabulary-shortlist benchmark: tnmt translating with and without a shortlist
# (`tnmt translate --shortlist`, built by `tnmt shortlist` from the training corpus), against
# CTranslate2 on the same weights (no shortlist), in one run on one machine.
#
# Part 1, real work: the demo model (English->German) on Multi30k test_2016_flickr (1000
# sentences), the table built from Multi30k's training set (29,000 pairs; the build is timed),
# float32, greedy and beam 4 (alpha 0.6), THREADS threads; every output scored by sacreBLEU.
# Whole processes (`tnmt translate --input F`, Python + ctranslate2 translating the same file:
# bench/ct2_translate_file.py), 4096 source tokens at once in both, engines alternating, best of
# REPEAT runs.
# Part 2, speed only (when OPUS_DIR holds bench/run_opus_bench.sh's model): the OPUS-MT-shaped
# random-weight model (58,000 pieces), the table built from the synthetic corpus its
# SentencePiece models were trained on, 100 sources of 15 pieces with outputs forced to OUT_LEN
# decoder steps in both engines as bench/run_opus_bench.sh does (random weights: the shortlist
# changes which pieces come out, never how many).
#
#   bench/setup.sh                      (once: ctranslate2, sentencepiece, sacrebleu)
#   bazel build //tools/tnmt            (the binary this script runs; it does not build it)
#   bench/run_shortlist_bench.sh DATA_DIR
#     DATA_DIR  holds train.{en,de}.gz and test_2016_flickr.{en,de}.gz (tools/get-multi30k.sh)
# Environment:
#   MODEL=models/demo   THREADS=1   DECODING="beam4 greedy"   REPEAT=3
#   PER_SOURCE="20 50"  the tables (one per --per-source; --frequent FREQUENT=100)
#   OPUS_DIR=build/opus-bench-seed1 (part 2 skipped when it has no tnmt/ and ct2-float32/)
#   OUT_LEN=40   TNMT=bazel-bin/tools/tnmt/tnmt   PYTHON=build/py-tools/bin/python3
#   WORK=DIR (default: a new temp dir)   RESULT=FILE (default: the table on stdout only)
#   NOTE="..." a line for the results file (e.g. what else ran on the machine)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:?usage: bench/run_shortlist_bench.sh DATA_DIR, holding the Multi30k train and test_2016_flickr .en.gz and .de.gz}"
MODEL="${MODEL:-models/demo}"
THREADS="${THREADS:-1}"
DECODING="${DECODING:-beam4 greedy}"
REPEAT="${REPEAT:-3}"
PER_SOURCE="${PER_SOURCE:-20 50}"
FREQUENT="${FREQUENT:-100}"
OPUS_DIR="${OPUS_DIR:-build/opus-bench-seed1}"
OUT_LEN="${OUT_LEN:-40}"
TNMT="${TNMT:-bazel-bin/tools/tnmt/tnmt}"
PYTHON="${PYTHON:-build/py-tools/bin/python3}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_shortlist_bench.XXXXXX)}"
mkdir -p "$WORK"
[[ -x $TNMT ]] || { echo "run_shortlist_bench: $TNMT not found: bazel build //tools/tnmt" >&2; exit 2; }
"$PYTHON" -c 'import ctranslate2, sentencepiece, sacrebleu' ||
  { echo "run_shortlist_bench: $PYTHON lacks ctranslate2, sentencepiece or sacrebleu (bench/setup.sh)" >&2; exit 2; }
for f in train.en.gz train.de.gz test_2016_flickr.en.gz test_2016_flickr.de.gz; do
  [[ -f "$DATA/$f" ]] || { echo "run_shortlist_bench: $DATA/$f not found" >&2; exit 2; }
done
zcat "$DATA/train.en.gz" > "$WORK/train.en"
zcat "$DATA/train.de.gz" > "$WORK/train.de"
zcat "$DATA/test_2016_flickr.en.gz" > "$WORK/src.en"
zcat "$DATA/test_2016_flickr.de.gz" > "$WORK/ref.de"
"$PYTHON" tools/convert/export_ctranslate2.py "$MODEL" "$WORK/ct2" --force > /dev/null

# run NAME CMD...: one timed whole-process run; appends "NAME wall_s rss_kb" to $WORK/runs.
run() {
  local name="$1"; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" 2> "$WORK/$name.err" > /dev/null ||
    { echo "run_shortlist_bench: $name failed:"; tail -5 "$WORK/$name.err"; exit 1; } >&2
  echo "$name $(cat "$WORK/time")" >> "$WORK/runs"
}
beam_of() { [[ $1 == greedy ]] && echo 1 || echo "${1#beam}"; }
: > "$WORK/runs"
: > "$WORK/builds"
for k in $PER_SOURCE; do
  /usr/bin/time -f "%e" -o "$WORK/time" "$TNMT" shortlist --model "$MODEL" --source "$WORK/train.en" \
    --target "$WORK/train.de" --output "$WORK/lex$k.txt" --per-source "$k" --frequent "$FREQUENT" 2> "$WORK/build$k.err"
  echo "demo lex$k $(cat "$WORK/time") $(grep -c '^source ' "$WORK/lex$k.txt")" >> "$WORK/builds"
done
for r in $(seq "$REPEAT"); do
  for t in $THREADS; do
    for d in $DECODING; do
      run "demo-tnmt-none-$d-$t-$r" "$TNMT" translate --model "$MODEL" --threads "$t" --beam-size "$(beam_of "$d")" \
        --max-batch-tokens 4096 --input "$WORK/src.en" --output "$WORK/demo-tnmt-none-$d-$t-$r.hyp" --no-progress
      for k in $PER_SOURCE; do
        run "demo-tnmt-lex$k-$d-$t-$r" "$TNMT" translate --model "$MODEL" --threads "$t" --beam-size "$(beam_of "$d")" \
          --max-batch-tokens 4096 --shortlist "$WORK/lex$k.txt" --input "$WORK/src.en" \
          --output "$WORK/demo-tnmt-lex$k-$d-$t-$r.hyp" --no-progress
      done
      run "demo-ct2-none-$d-$t-$r" "$PYTHON" bench/ct2_translate_file.py --ct2 "$WORK/ct2" --input "$WORK/src.en" \
        --output "$WORK/demo-ct2-none-$d-$t-$r.hyp" --threads "$t" --beam-size "$(beam_of "$d")" --compute-type float32
    done
  done
done

opus=""
if [[ -f "$OPUS_DIR/tnmt/config.json" && -f "$OPUS_DIR/ct2-float32/model.bin" && -f "$OPUS_DIR/corpus.src" ]]; then
  opus=yes
  src="$OPUS_DIR/sources-100x15.txt"
  [[ -f $src ]] || { echo "run_shortlist_bench: $src not found (bench/run_opus_bench.sh makes it)" >&2; exit 2; }
  for k in $PER_SOURCE; do
    /usr/bin/time -f "%e" -o "$WORK/time" "$TNMT" shortlist --model "$OPUS_DIR/tnmt" --source "$OPUS_DIR/corpus.src" \
      --target "$OPUS_DIR/corpus.tgt" --output "$WORK/opus-lex$k.txt" --per-source "$k" --frequent "$FREQUENT" \
      2> "$WORK/opus-build$k.err"
    echo "opus lex$k $(cat "$WORK/time") $(grep -c '^source ' "$WORK/opus-lex$k.txt")" >> "$WORK/builds"
  done
  len=(--min-length $((OUT_LEN - 1)) --max-length-offset $((OUT_LEN - 16)))
  for r in $(seq "$REPEAT"); do
    for t in $THREADS; do
      for d in $DECODING; do
        run "opus-tnmt-none-$d-$t-$r" "$TNMT" translate --model "$OPUS_DIR/tnmt" --threads "$t" --beam-size "$(beam_of "$d")" \
          "${len[@]}" --input "$src" --output "$WORK/opus-tnmt-none-$d-$t-$r.hyp" --no-progress
        for k in $PER_SOURCE; do
          run "opus-tnmt-lex$k-$d-$t-$r" "$TNMT" translate --model "$OPUS_DIR/tnmt" --threads "$t" \
            --beam-size "$(beam_of "$d")" "${len[@]}" --shortlist "$WORK/opus-lex$k.txt" --input "$src" \
            --output "$WORK/opus-tnmt-lex$k-$d-$t-$r.hyp" --no-progress
        done
        run "opus-ct2-none-$d-$t-$r" "$PYTHON" bench/ct2_translate_file.py --ct2 "$OPUS_DIR/ct2-float32" \
          --spm "$OPUS_DIR/hf/source.spm" --source-eos --input "$src" --output "$WORK/opus-ct2-none-$d-$t-$r.hyp" \
          --threads "$t" --beam-size "$(beam_of "$d")" --length-penalty 1 --compute-type float32 \
          --min-decoding-length "$OUT_LEN" --max-decoding-length "$OUT_LEN" --pieces
      done
    done
  done
fi

{
  echo "# Vocabulary shortlist: tnmt with and without, against CTranslate2, $(date +%F)"
  echo "command: MODEL=$MODEL THREADS=\"$THREADS\" DECODING=\"$DECODING\" REPEAT=$REPEAT PER_SOURCE=\"$PER_SOURCE\" FREQUENT=$FREQUENT${opus:+ OPUS_DIR=$OPUS_DIR OUT_LEN=$OUT_LEN} bench/run_shortlist_bench.sh DATA_DIR"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no)"
  echo "tnmt: $("$TNMT" --version); CTranslate2 $("$PYTHON" -c 'import ctranslate2; print(ctranslate2.__version__)'), float32, no shortlist"
  [[ -n ${NOTE:-} ]] && echo "note: $NOTE"
} > "$WORK/header.txt"
"$PYTHON" - "$WORK" "$MODEL/spm.model" "$OUT_LEN" > "$WORK/table.txt" << 'PY'
import collections, os, sys
import sacrebleu, sentencepiece
work, spm, out_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
sp = sentencepiece.SentencePieceProcessor(model_file=spm)
refs = [l.rstrip("\n") for l in open(os.path.join(work, "ref.de"), encoding="utf-8")]
runs = collections.defaultdict(list)
for line in open(os.path.join(work, "runs")):
    name, wall, rss = line.split()
    part, engine, table, dec, threads, rep = name.split("-")
    runs[(part, int(threads), dec, engine, table)].append((float(wall), int(rss), rep))
builds = {}
for line in open(os.path.join(work, "builds")):
    part, table, secs, sources = line.split()
    builds[(part, table)] = (float(secs), int(sources))

def label(engine, table):
    if engine == "ct2":
        return "CTranslate2"
    return "tnmt" if table == "none" else f"tnmt --shortlist (per-source {table[3:]})"

for part in ("demo", "opus"):
    keys = sorted(k for k in runs if k[0] == part)
    if not keys:
        continue
    if part == "demo":
        print("\n## Demo model, Multi30k test_2016_flickr (1000 sentences), float32, natural lengths")
        print("| threads | decoding | engine | wall s (best, worst) | sentences/s | BLEU | speed vs CTranslate2 | speed vs tnmt without |")
    else:
        print(f"\n## OPUS-MT-shaped random model (58k pieces), 100 sources x 15 pieces, outputs forced to {out_len} steps, float32 (speed only)")
        print("| threads | decoding | engine | wall s (best, worst) | target tokens/s | speed vs CTranslate2 | speed vs tnmt without |")
    print("|---|---|---|---|---|---|---|" + ("---|" if part == "demo" else ""))
    order = lambda k: (k[1], k[2] != "beam4", k[3] != "tnmt", k[4] != "none", len(k[4]), k[4])
    for k in sorted(keys, key=order):
        _, threads, dec, engine, table = k
        rs = runs[k]
        best = min(w for w, _, _ in rs)
        worst = max(w for w, _, _ in rs)
        ct2 = min(w for w, _, _ in runs[(part, threads, dec, "ct2", "none")])
        plain = min(w for w, _, _ in runs[(part, threads, dec, "tnmt", "none")])
        vs_ct2 = f"{ct2 / best:.2f}x" if engine == "tnmt" else ""
        vs_plain = f"{plain / best:.2f}x" if engine == "tnmt" and table != "none" else ""
        if part == "demo":
            rep = min(rs)[2]
            hyps = [l.rstrip("\n") for l in open(os.path.join(work, f"{part}-{engine}-{table}-{dec}-{threads}-{rep}.hyp"), encoding="utf-8")]
            bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
            print(f"| {threads} | {dec} | {label(engine, table)} | {best:.2f} ({worst:.2f}) | {len(hyps) / best:.1f} | {bleu:.2f} | {vs_ct2} | {vs_plain} |")
        else:
            print(f"| {threads} | {dec} | {label(engine, table)} | {best:.2f} ({worst:.2f}) | {100 * out_len / best:.0f} | {vs_ct2} | {vs_plain} |")
print("\nTables built by `tnmt shortlist` (IBM Model 1, 5 iterations, --frequent as in the command line):")
for (part, table), (secs, sources) in sorted(builds.items()):
    print(f"- {part} {table}: {secs:.1f} s, {sources} source pieces with a list")
PY
cat "$WORK/header.txt" "$WORK/table.txt"
if [[ -n ${RESULT:-} ]]; then
  mkdir -p "$(dirname "$RESULT")"
  cat "$WORK/header.txt" "$WORK/table.txt" > "$RESULT"
  echo "run_shortlist_bench: wrote $RESULT (work dir $WORK)"
fi
