#!/usr/bin/env bash
# tools/recipe-search.sh end to end on a synthetic corpus: two recipes side by side for a few
# seconds, every average scored on the dev set with sacreBLEU, the best one written as a loadable
# float16 model; a second call resumes the runs; a recipe that fails is reported while the
# others are scored; bad arguments are refused naming the problem, before anything trains. Then
# tools/make-demo-model.sh builds a demo-model directory from one of the runs (into a temporary
# OUT): float16 weights that translate, dev and test BLEU from sacreBLEU, the README and the
# training history without machine paths.
set -u
TNMT="$(pwd)/$1"
repo="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
PY="${TNMT_PY_TOOLS:-$repo/build/py-tools}/bin/python3"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
if ! "$PY" -c 'import sacrebleu' 2> /dev/null; then
  echo "FAIL: no sacrebleu in $PY (deploy/install-py-tools.sh installs it)"
  exit 1
fi
tests/tools/synthetic_corpus.sh 600 7 "$TMP/train.en" "$TMP/train.de"
head -30 "$TMP/train.en" > "$TMP/valid.en"
head -30 "$TMP/train.de" > "$TMP/valid.de"
common="--train-source $TMP/train.en --train-target $TMP/train.de --vocab-size 60 --preset tiny"
# Flags on several lines, as a long recipe would be written.
common+="
  --max-tokens 256 --warmup-steps 50 --lr-scale 0.3 --dropout 0.1 --save-every-steps 3 --keep-last 20
  --valid-every-steps 0 --log-every-steps 5"
export TNMT PYTHON="$PY" DEV_SOURCE="$TMP/valid.en" DEV_TARGET="$TMP/valid.de" THREADS=1 LAST="1 2 4"
search=tools/recipe-search.sh

$search "$TMP/out" 12 "a=$common --seed 1" "b=$common --seed 2 --max-steps 6" > "$TMP/first.log" 2>&1
rc=$?
cat "$TMP/first.log"
check "exits 0" test "$rc" -eq 0
check "b ended at its max-steps, before the time limit" grep -q "done at step 6" "$TMP/out/b.log"
check "a was stopped by SIGTERM with a final checkpoint" grep -q "stop requested" "$TMP/out/a.log"
check "every average of a scored" bash -c "for k in 1 2 4; do grep -qE \"^[0-9.]+ a \$k\$\" $TMP/out/scores.txt || exit 1; done"
check "b's averages scored (b has 2 checkpoints: no last 4)" bash -c "grep -qE '^[0-9.]+ b 2$' $TMP/out/scores.txt && ! grep -qE ' b 4$' $TMP/out/scores.txt"
check "scores best first" bash -c "sort -k1,1nr -c $TMP/out/scores.txt"
read -r best name k < "$TMP/out/scores.txt"
check "the best is announced" grep -q "best: $name, last $k ($best)" "$TMP/first.log"
check "the best names its $k checkpoints" test "$(wc -l < "$TMP/out/best/averaged.txt")" -eq "$k"
check "the best is stored in float16" grep -q '"dtype": *"F16"' <(head -c 4000 "$TMP/out/best/model.safetensors" | tr -d '\0')
echo "a b c d e" | "$TNMT" translate --model "$TMP/out/best" --quiet > "$TMP/best.out" 2> "$TMP/best.err"
check "the best model translates" test -s "$TMP/best.out"
# The score of a's newest checkpoint, recomputed here: the same number.
"$TNMT" average --checkpoints "$TMP/out/a" --last 1 --output "$TMP/a1" > /dev/null 2>&1
"$TNMT" translate --model "$TMP/a1" --input "$TMP/valid.en" --output "$TMP/a1.hyp" --quiet
want=$("$PY" -c 'import sys, sacrebleu; h = open(sys.argv[1]).read().splitlines(); r = open(sys.argv[2]).read().splitlines(); print("%.2f" % sacrebleu.corpus_bleu(h, [r]).score)' "$TMP/a1.hyp" "$TMP/valid.de")
check "a's last checkpoint scored as sacreBLEU scores its dev translation ($want)" grep -qE "^$want a 1$" "$TMP/out/scores.txt"
check "no work files left" bash -c "! ls $TMP/out | grep -q '^avg-'"

# A demo model from run a (the synthetic dev set stands in for both of Multi30k's sets).
mkdir -p "$TMP/data"
for set in val test_2016_flickr; do
  gzip -c "$TMP/valid.en" > "$TMP/data/$set.en.gz"
  gzip -c "$TMP/valid.de" > "$TMP/data/$set.de.gz"
done
OUT="$TMP/demo" RECIPE=multi30k-wide.json tools/make-demo-model.sh "$TMP/out/a" 2 "$TMP/data" > "$TMP/demo.log" 2>&1
rc=$?
cat "$TMP/demo.log"
check "make-demo-model exits 0" test "$rc" -eq 0
check "make-demo-model reports dev and test BLEU" grep -qE "wrote $TMP/demo \(dev BLEU [0-9.]+, test BLEU [0-9.]+" "$TMP/demo.log"
check "the demo model is stored in float16" grep -q '"dtype": *"F16"' <(head -c 4000 "$TMP/demo/model.safetensors" | tr -d '\0')
echo "a b c d e" | "$TNMT" translate --model "$TMP/demo" --quiet > "$TMP/demo.out" 2> "$TMP/demo.err"
check "the demo model translates" test -s "$TMP/demo.out"
readme="$TMP/demo/README.md"
check "its README names the recipe" grep -q 'models/recipes/multi30k-wide.json' "$readme"
check "its README describes the model from its config" grep -q 'post-norm as in the paper, joint SentencePiece vocabulary of 60 pieces' "$readme"
check "its README gives test and dev BLEU and the signature" bash -c "grep -q '^| test BLEU' $readme && grep -q '^| dev BLEU (val, 30 sentences' $readme && grep -q 'tok:13a' $readme"
check "its README names the 2 averaged checkpoints" grep -qE 'average of 2 checkpoints \(step-[0-9]+ step-[0-9]+\)' "$readme"
check "one stage, from random weights" grep -qE '^\| 1 \| `multi30k-wide.json --max-steps [0-9]+` from random weights \(seed 1\)' "$readme"
check "no machine paths in its config or README" bash -c "! grep -q '$TMP' $TMP/demo/train_config.json $readme"
check "the training log ends with the averaged checkpoints and the recipe" bash -c "tail -n 1 $TMP/demo/training-log.jsonl | grep -q '\"recipe\": \"multi30k-wide.json\"'"
# Paths relative to where it is called from, not to the repository.
(cd "$TMP" && OUT=demo3 "$repo/tools/make-demo-model.sh" out/a 2 data) > "$TMP/demo3.log" 2>&1
check "make-demo-model takes paths relative to the caller" bash -c "grep -q 'wrote $TMP/demo3 ' $TMP/demo3.log && test -s $TMP/demo3/model.safetensors"
OUT="$TMP/demo2" PYTHON=/bin/false tools/make-demo-model.sh "$TMP/out/a" 2 "$TMP/data" > "$TMP/demo2.log" 2>&1
check "make-demo-model without sacrebleu: refused, naming it" bash -c "! test -e $TMP/demo2 && grep -q 'has no sacrebleu' $TMP/demo2.log"

# Again: a resumes; a recipe that fails is reported, a is still scored.
$search "$TMP/out" 6 "a=$common --seed 1" "c=$common --preset nope" > "$TMP/second.log" 2>&1
rc=$?
cat "$TMP/second.log"
check "second call exits 0" test "$rc" -eq 0
check "a resumed" grep -q "resumed from step" "$TMP/out/a.log"
check "the failing recipe is reported" grep -qE "^c: tnmt train failed \(exit [0-9]+\)" "$TMP/second.log"
check "the failing recipe's error is shown" grep -q "^tnmt train: --preset must be" "$TMP/second.log"
check "a scored again" grep -qE '^[0-9.]+ a 1$' "$TMP/out/scores.txt"

# Bad arguments: exit 2, naming the problem, nothing trained.
bad() {  # WHAT PATTERN ARGS...
  local what=$1 pattern=$2; shift 2
  "$@" > "$TMP/bad.log" 2>&1
  local rc=$?
  check "$what: exit 2" test "$rc" -eq 2
  check "$what: says so" grep -q -- "$pattern" "$TMP/bad.log"
}
bad "no recipes" "usage" $search "$TMP/bad1" 5
bad "seconds not a number" "SECONDS must be a whole number" $search "$TMP/bad1" 5s "a=$common"
bad "recipe without a name" "is not NAME='TRAIN FLAGS'" $search "$TMP/bad1" 5 "$common"
bad "missing dev file" "no dev file /nonexistent" env DEV_SOURCE=/nonexistent $search "$TMP/bad1" 5 "a=$common"
bad "python without sacrebleu" "has no sacrebleu" env PYTHON=/bin/false $search "$TMP/bad1" 5 "a=$common"
bad "no tnmt binary" "no tnmt binary at /nonexistent" env TNMT=/nonexistent $search "$TMP/bad1" 5 "a=$common"
check "nothing trained for bad arguments" test ! -e "$TMP/bad1/a"

echo "$fails failed"
[[ $fails -eq 0 ]]
