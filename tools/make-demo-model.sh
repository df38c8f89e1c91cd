#!/usr/bin/env bash
# Builds the bundled demo model (models/demo) from a Multi30k training run of a recipe in
# models/recipes: averages the newest checkpoints into half precision, scores the dev set (val)
# and test_2016_flickr with sacreBLEU (independent of tnmt's own BLEU), and writes the README
# (model, recipe, validation log, BLEU, terms of use, citation) next to the weights.
#
#   tools/make-demo-model.sh RUN_DIR [LAST] [DATA_DIR]
#     RUN_DIR   the recipe's save_dir (checkpoints, metrics.jsonl, train_config.json)
#     LAST      checkpoints to average (default 5)
#     DATA_DIR  Multi30k files (default data/multi30k: tools/get-multi30k.sh fetches them)
# Paths given on the command line or in OUT, TNMT and PYTHON are relative to the current
# directory. Environment: UPTO, a step: only the checkpoints up to it count (the newest LAST of
# those are averaged, and the training log ends there), for a run that went on past the chosen
# checkpoints; RECIPE, the recipe's file name under models/recipes (default
# multi30k-small.json, or multi30k-continue.json for a run that continued models/demo with
# --init-model); OUT, where the model goes (default models/demo); TNMT, the tnmt binary (default
# bazel-bin/tools/tnmt/tnmt: bazel build //tools/tnmt); PYTHON, a python3 with sacrebleu (default
# python3; deploy/install-py-tools.sh puts one in build/py-tools).
set -euo pipefail
# Paths given by the caller are relative to where it runs; the defaults to the repository root.
from_caller() { if [[ $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "$PWD/$1"; fi; }
run=$(from_caller "${1:?usage: tools/make-demo-model.sh RUN_DIR [LAST] [DATA_DIR]}")
last="${2:-5}"
data=${3:+$(from_caller "$3")}
tnmt=${TNMT:+$(from_caller "$TNMT")}
out=${OUT:+$(from_caller "$OUT")}
python=${PYTHON:-python3}
[[ $python == */* ]] && python=$(from_caller "$python")
cd "$(dirname "$0")/.."
data=${data:-data/multi30k}
tnmt=${tnmt:-bazel-bin/tools/tnmt/tnmt}
out=${out:-models/demo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$python" -m sacrebleu --version > /dev/null 2>&1 ||
  { echo "make-demo-model: $python has no sacrebleu (pip install sacrebleu, or set PYTHON)" >&2; exit 1; }
[[ -x $tnmt ]] || { echo "make-demo-model: no tnmt binary at $tnmt (bazel build //tools/tnmt, or set TNMT)" >&2; exit 1; }
# The run's checkpoints (up to UPTO), oldest first; the newest LAST of them are averaged.
mapfile -t steps < <(ls -d "$run"/step-* | sort | while read -r d; do
  n=$(basename "$d" | sed 's/^step-0*//'); n=${n:-0}
  [[ -z ${UPTO:-} ]] || ((n <= UPTO)) && echo "$d"
done)
((${#steps[@]} >= last)) || { echo "make-demo-model: fewer than $last checkpoints in $run${UPTO:+ up to step $UPTO}" >&2; exit 1; }
chosen=("${steps[@]: -$last}")
"$tnmt" average "${chosen[@]}" --output "$tmp/model" --dtype float16
for set in val test_2016_flickr; do
  zcat "$data/$set.en.gz" > "$tmp/$set.en"
  zcat "$data/$set.de.gz" > "$tmp/$set.de"
  "$tnmt" translate --model "$tmp/model" --beam-size 4 --input "$tmp/$set.en" --output "$tmp/$set.hyp" --no-progress
  "$python" -m sacrebleu "$tmp/$set.de" -i "$tmp/$set.hyp" -m bleu > "$tmp/$set.bleu"
done
json_field() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
bleu=$(json_field "$tmp/test_2016_flickr.bleu" score)
dev_bleu=$(json_field "$tmp/val.bleu" score)
signature=$(json_field "$tmp/test_2016_flickr.bleu" signature)
dev_sentences=$(wc -l < "$tmp/val.en")
averaged=$(printf '%s\n' "${chosen[@]}" | xargs -n1 basename | tr '\n' ' ')
final_step=$(basename "${chosen[-1]}" | sed 's/^step-0*//')
size=$(du -k "$tmp/model/model.safetensors" | cut -f1)

# The configs of every stage and the whole training log (tools/demo_model_history.py).
recipe_flag=()
[[ -n ${RECIPE:-} ]] && recipe_flag=(--recipe "$RECIPE")
history=$("$python" tools/demo_model_history.py "${recipe_flag[@]}" "$run" "$tmp/model" "$final_step" $averaged)
field() { printf '%s' "$history" | "$python" -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
valid_table=$(field valid_rows)
stage_table=$(field stage_rows)
total_steps=$(field total_steps)
model=$(field model)
recipe=$(field recipe)
stage=$(field stage)
valid_sentences=$(field valid_sentences)
if ((valid_sentences > 0)); then valid_set="first $valid_sentences sentences of val"; else valid_set="the whole of val"; fi
steps_note=""
((stage == 1)) || steps_note=" (steps count from the start of each stage)"
if ((stage == 1)); then
  how="Trained in one \`tnmt train\` run, ending in an average of its last checkpoints:"
  reproduce="Reproduce: \`tools/get-multi30k.sh\` (the data, into data/multi30k); \`tnmt train
--config models/recipes/$recipe --max-steps STEPS\` (STEPS from the table), then
\`RECIPE=$recipe tools/make-demo-model.sh RUN_DIR LAST\` (RUN_DIR: the recipe's save_dir),
which writes models/demo and recomputes its BLEU. \`train_config.json\` holds the run's settings
as trained; \`training-log.jsonl\` is the trainer's log (training loss, tokens/s and learning rate
every 20 steps, validations, checkpoints)."
else
  how="Trained in stages, each a \`tnmt train\` run ending in an average of its last checkpoints; a
later stage starts from the model of the one before (\`--init-model\`, fresh optimizer):"
  reproduce="Reproduce: \`tools/get-multi30k.sh\` (the data, into data/multi30k); stage 1: \`tnmt train
--config models/recipes/RECIPE --max-steps STEPS\` (RECIPE: the first row's), then \`RECIPE=RECIPE
tools/make-demo-model.sh RUN_DIR LAST\` (RUN_DIR: the recipe's save_dir), which writes
models/demo and recomputes its BLEU; each later stage: \`tnmt train --config
models/recipes/$recipe --max-steps STEPS\` (from models/demo, into its save_dir), then
\`RECIPE=$recipe tools/make-demo-model.sh RUN_DIR LAST\` (STEPS, LAST and \`--seed\` from the
table). The \`train_config*.json\` files are the stages'
settings as trained; \`training-log.jsonl\` is the trainer's log of every stage (training loss,
tokens/s and learning rate every 20 steps, validations, checkpoints; \`\"stage\"\` in each
record)."
fi

# A stage trained on distilled targets says where they come from.
if grep -q '"train_target": *"[^"]*distilled' "models/recipes/$recipe" 2> /dev/null; then
  reproduce="$reproduce The targets of the stage trained with \`$recipe\` are an ensemble's
translations of the training sources (\`data/multi30k/train.distilled.de.gz\`; which models,
and the command, in [models/recipes/README.md](../recipes/README.md), distillation in
[docs/training.md](../../docs/training.md#distillation-from-an-ensemble))."
fi

cat > "$tmp/model/README.md" << EOF
# Demo model: English → German, Multi30k

A Transformer trained by \`tnmt train\` with [models/recipes/$recipe](../recipes/$recipe)
($model) on the 29,000 training pairs of Multi30k Task 1. This directory is what \`tnmt serve\`
serves when no \`--model\` is given.

| | |
|---|---|
| test BLEU (test_2016_flickr, 1000 sentences, beam 4, α 0.6) | **$(printf '%.1f' "$bleu")** |
| dev BLEU (val, $dev_sentences sentences, the same decoding; the set the model was chosen on) | $(printf '%.1f' "$dev_bleu") |
| sacreBLEU signature | \`${signature//|/\\|}\` |
| weights | average of ${last} checkpoints (${averaged% }), float16, ${size} KiB |
| training steps | ${total_steps} |

$how

| stage | run | steps | checkpoints averaged | config |
|---|---|---|---|---|
$stage_table

$reproduce Dev perplexity and dev BLEU ($valid_set, beam 4) at each validation$steps_note:

| stage | step | dev perplexity | dev BLEU |
|---|---|---|---|
$valid_table

## Data: terms of use and citation

Multi30k is partially derived from Flickr30k. Its authors provide it solely for researchers and
educators for **non-commercial research and/or educational purposes**; use of the underlying
images must abide by the Flickr Terms of Use. The same restriction applies to this model,
which is derived from the data. Source: https://github.com/multi30k/dataset

    @inproceedings{elliott-etal-2016-multi30k,
      title     = {Multi30K: Multilingual English-German Image Descriptions},
      author    = {Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia},
      booktitle = {Proceedings of the 5th Workshop on Vision and Language},
      year      = {2016},
      pages     = {70--74}
    }
EOF
rm -rf "$out.old"
[[ -d "$out" ]] && mv "$out" "$out.old"
mv "$tmp/model" "$out"
rm -rf "$out.old"
echo "make-demo-model: wrote $out (dev BLEU $dev_bleu, test BLEU $bleu, $size KiB weights)"
