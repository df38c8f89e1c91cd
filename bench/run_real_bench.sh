#!/usr/bin/env bash
# Real-work translation benchmark: a trained model translating real sentences with natural
# output lengths, tnmt against CTranslate2 on the same weights, in one run on one machine.
# Default: the bundled demo model (English->German) on Multi30k test_2016_flickr (1000
# sentences), beam 4 (alpha 0.6) and greedy, 1 and 2 threads; tnmt float32 and int8
# (--compute-type) against CTranslate2 float32 and int8 (compute_type); each CTranslate2 row
# is compared with the tnmt row of the same type. Each run is a whole process (`tnmt translate
# --input F`, or Python + ctranslate2 translating the same file), 4096 source tokens at once
# in both (tnmt adds sentences as others finish, CTranslate2 translates batches of that size);
# wall time and peak RSS from /usr/bin/time. Runs alternate engines and the table shows the
# best of REPEAT runs (the least disturbed), with the spread.
#
#   bench/run_real_bench.sh DATA_DIR
#     DATA_DIR  holds test_2016_flickr.en.gz and test_2016_flickr.de.gz (tools/get-multi30k.sh)
# Environment:
#   MODEL=models/demo   THREADS="1 2"   DECODING="beam4 greedy"   REPEAT=3
#   TNMT_TYPES="float32 int8"   CT2_TYPES="float32 int8"  (empty: no CTranslate2 rows)
#   ISA=avx2            caps both engines at AVX2 on an AVX-512 machine (bench/cap-isa.sh), to
#                       measure what CPUs without AVX-512 get
#   PYTHON=build/py-tools/bin/python3 (deploy/install-py-tools.sh: ctranslate2, sentencepiece);
#   BLEU needs sacrebleu importable by $PYTHON (pip install sacrebleu), else it shows "-".
#   WORK=DIR (default: a new temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:?usage: bench/run_real_bench.sh DATA_DIR, holding test_2016_flickr.en.gz and .de.gz}"
MODEL="${MODEL:-models/demo}"
THREADS="${THREADS:-1 2}"
DECODING="${DECODING:-beam4 greedy}"
REPEAT="${REPEAT:-3}"
CT2_TYPES="${CT2_TYPES-float32 int8}"
TNMT_TYPES="${TNMT_TYPES:-float32 int8}"
PYTHON="${PYTHON:-build/py-tools/bin/python3}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_real_bench.XXXXXX)}"
ISA="${ISA:-}"
source bench/cap-isa.sh
cap_isa run_real_bench
mkdir -p "$WORK"
for f in test_2016_flickr.en.gz test_2016_flickr.de.gz; do
  [[ -f "$DATA/$f" ]] || { echo "run_real_bench: $DATA/$f not found" >&2; exit 2; }
done
zcat "$DATA/test_2016_flickr.en.gz" > "$WORK/src.en"
zcat "$DATA/test_2016_flickr.de.gz" > "$WORK/ref.de"

bazel build //tools/tnmt > /dev/null 2>&1 || bazel build //tools/tnmt
TNMT="$(bazel info bazel-bin 2>/dev/null)/tools/tnmt/tnmt"
if [[ -n "$CT2_TYPES" ]]; then
  "$PYTHON" -c 'import ctranslate2, sentencepiece' || { echo "run_real_bench: $PYTHON lacks ctranslate2 (deploy/install-py-tools.sh)" >&2; exit 2; }
  "$PYTHON" tools/convert/export_ctranslate2.py "$MODEL" "$WORK/ct2" --force > /dev/null
fi

# run NAME CMD...: one timed whole-process run; appends "NAME wall_s rss_kb" to $WORK/runs.
run() {
  local name="$1"; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" 2> "$WORK/$name.err" > /dev/null ||
    { echo "run_real_bench: $name failed:"; tail -5 "$WORK/$name.err"; exit 1; } >&2
  echo "$name $(cat "$WORK/time")" >> "$WORK/runs"
}
: > "$WORK/runs"
for r in $(seq "$REPEAT"); do
  for t in $THREADS; do
    for d in $DECODING; do
      beam=4; [[ $d == greedy ]] && beam=1
      for ct in $TNMT_TYPES; do
        run "tnmt-$ct-$d-$t" "$TNMT" translate --model "$MODEL" --threads "$t" --beam-size "$beam" --compute-type "$ct" \
          --max-batch-tokens 4096 --input "$WORK/src.en" --output "$WORK/tnmt-$ct-$d-$t.hyp" --no-progress
      done
      for ct in $CT2_TYPES; do
        run "ct2-$ct-$d-$t" "$PYTHON" bench/ct2_translate_file.py --ct2 "$WORK/ct2" --input "$WORK/src.en" \
          --output "$WORK/ct2-$ct-$d-$t.hyp" --threads "$t" --beam-size "$beam" --compute-type "$ct"
      done
    done
  done
done

echo "== $(lscpu | sed -n 's/^Model name: *//p'); AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no); VNNI: $(grep -q avx512_vnni /proc/cpuinfo && echo yes || echo no); AMX: $(grep -q amx_int8 /proc/cpuinfo && echo yes || echo no)${ISA:+; capped at $ISA}; tnmt: $("$TNMT" --version)"
echo "== model $MODEL, $(grep -c . "$WORK/src.en") sentences, best of $REPEAT runs; work dir $WORK"
"$PYTHON" - "$WORK" "$MODEL/spm.model" << 'PY'
import collections, os, sys
work, spm = sys.argv[1], sys.argv[2]
import sentencepiece
sp = sentencepiece.SentencePieceProcessor(model_file=spm)
try:
    import sacrebleu
except ImportError:
    sacrebleu = None
refs = [l.rstrip("\n") for l in open(os.path.join(work, "ref.de"), encoding="utf-8")]
runs = collections.defaultdict(list)
for line in open(os.path.join(work, "runs")):
    name, wall, rss = line.split()
    runs[name].append((float(wall), int(rss)))
rows = []
for name, rs in runs.items():
    engine, ctype, dec, threads = name.split("-")
    hyps = [l.rstrip("\n") for l in open(os.path.join(work, name + ".hyp"), encoding="utf-8")]
    sents = sum(1 for h in hyps if h.strip())
    tokens = sum(len(sp.encode(h)) + 1 for h in hyps if h.strip())
    best = min(w for w, _ in rs)
    rss = max(r for _, r in rs) / 1024
    bleu = f"{sacrebleu.corpus_bleu(hyps, [refs]).score:.2f}" if sacrebleu else "-"
    rows.append((int(threads), dec, engine, ctype, best, max(w for w, _ in rs), sents / best, tokens / best, rss, bleu))
rows.sort(key=lambda r: (r[0], r[1] != "beam4", r[2] != "tnmt", r[3]))
print("| threads | decoding | engine | weights | wall s (best, worst) | sentences/s | target tokens/s | peak RSS MiB | BLEU | tnmt speed vs this |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    tn = [x for x in rows if x[0] == r[0] and x[1] == r[1] and x[2] == "tnmt" and x[3] == r[3]]
    ratio = f"{r[4] and tn[0][4] and r[4] / tn[0][4]:.2f}x" if tn and r[2] != "tnmt" else ""
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} ({r[5]:.2f}) | {r[6]:.1f} | {r[7]:.0f} | {r[8]:.0f} | {r[9]} | {ratio} |")
PY
