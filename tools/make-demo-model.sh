#!/usr/bin/env bash
# Builds the bundled demo model (models/demo) from a Multi30k training run of
# models/recipes/multi30k-small.json: averages the newest checkpoints into half precision,
# scores test_2016_flickr with sacreBLEU (independent of tnmt's own BLEU), and writes the
# README (config, validation log, test BLEU, terms of use, citation) next to the weights.
#
#   tools/make-demo-model.sh RUN_DIR [LAST] [DATA_DIR]
#     RUN_DIR   the recipe's save_dir (checkpoints, metrics.jsonl, train_config.json)
#     LAST      checkpoints to average (default 5)
#     DATA_DIR  Multi30k files (default data/multi30k: tools/get-multi30k.sh fetches them)
# Needs: a built tnmt (bazel build //tools/tnmt) and `python3 -m sacrebleu` (pip install sacrebleu).
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:?usage: tools/make-demo-model.sh RUN_DIR [LAST] [DATA_DIR]}"
last="${2:-5}"
data="${3:-data/multi30k}"
tnmt=bazel-bin/tools/tnmt/tnmt
out=models/demo
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 -m sacrebleu --version > /dev/null || { echo "make-demo-model: needs python3 -m sacrebleu" >&2; exit 1; }
"$tnmt" average --checkpoints "$run" --last "$last" --output "$tmp/model" --dtype float16
zcat "$data/test_2016_flickr.en.gz" > "$tmp/test.en"
zcat "$data/test_2016_flickr.de.gz" > "$tmp/test.de"
"$tnmt" translate --model "$tmp/model" --beam-size 4 --input "$tmp/test.en" --output "$tmp/test.hyp"
bleu_json=$(python3 -m sacrebleu "$tmp/test.de" -i "$tmp/test.hyp" -m bleu)
bleu=$(printf '%s' "$bleu_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["score"])')
signature=$(printf '%s' "$bleu_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["signature"])')
averaged=$(ls -d "$run"/step-* | sort | tail -n "$last" | xargs -n1 basename | tr '\n' ' ')
final_step=$(ls -d "$run"/step-* | sort | tail -n 1 | sed 's/.*step-0*//')
size=$(du -k "$tmp/model/model.safetensors" | cut -f1)

# The configs of every stage and the whole training log (tools/demo_model_history.py).
history=$(python3 tools/demo_model_history.py "$run" "$tmp/model" "$final_step" $averaged)
field() { printf '%s' "$history" | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
valid_table=$(field valid_rows)
stage_table=$(field stage_rows)
total_steps=$(field total_steps)

cat > "$tmp/model/README.md" << EOF
# Demo model: English → German, Multi30k

A Transformer trained by \`tnmt train\` with [models/recipes/multi30k-small.json](../recipes/multi30k-small.json)
and [multi30k-small-continue.json](../recipes/multi30k-small-continue.json)
(the "small" preset: d_model 256, 4 heads, d_ff 1024, 3+3 layers, post-norm as in the paper,
joint SentencePiece vocabulary of 8000 pieces, dropout 0.3, label smoothing 0.1) on the 29,000
training pairs of Multi30k Task 1, on a 2-core CPU. This directory is what \`tnmt serve\` serves
when no \`--model\` is given.

| | |
|---|---|
| test BLEU (test_2016_flickr, 1000 sentences, beam 4, α 0.6) | **$(printf '%.1f' "$bleu")** |
| sacreBLEU signature | \`${signature//|/\\|}\` |
| weights | average of ${last} checkpoints (${averaged% }), float16, ${size} KiB |
| training steps | ${total_steps} (stages below) |

Trained in stages, each a \`tnmt train\` run ending in an average of its last checkpoints; a
later stage starts from the model of the one before (\`--init-model\`, fresh optimizer):

| stage | run | steps | checkpoints averaged | config |
|---|---|---|---|---|
$stage_table

Reproduce: \`tools/get-multi30k.sh\` (the data, into data/multi30k); stage 1: \`tnmt train
--config models/recipes/multi30k-small.json --max-steps STEPS\` (checkpoints in
runs/multi30k-small), then \`tools/make-demo-model.sh runs/multi30k-small LAST\`, which writes
models/demo and recomputes its test score; each later stage: \`tnmt train --config
models/recipes/multi30k-small-continue.json --max-steps STEPS\` (from models/demo, into
runs/multi30k-small-continue), then \`tools/make-demo-model.sh runs/multi30k-small-continue
LAST\` (STEPS, LAST and \`--seed\` from the table). The \`train_config*.json\` files are the stages'
settings as trained; \`training-log.jsonl\` is the trainer's log of every stage (training loss,
tokens/s and learning rate every 20 steps, validations, checkpoints; \`"stage"\` in each
record). Dev perplexity and dev BLEU (first 300 sentences of val, beam 4) at each validation
(steps count from the start of each stage):

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
echo "make-demo-model: wrote $out (test BLEU $bleu, $size KiB weights)"
