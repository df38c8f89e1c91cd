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

# The recipe as trained, with machine-specific paths reduced to file names.
python3 - "$run/train_config.json" > "$tmp/model/train_config.json" << 'EOF'
import json, os, sys
c = json.load(open(sys.argv[1]))
for k in ("train_source", "train_target", "valid_source", "valid_target", "save_dir", "spm_model", "metrics_file"):
    if c.get(k):
        c[k] = os.path.basename(c[k])
print(json.dumps(c, indent=2, sort_keys=True))
EOF
# The whole training log up to the newest averaged checkpoint (a resumed run repeats the steps
# after its last checkpoint; the later record of a step wins in the table below).
python3 - "$run/metrics.jsonl" "$final_step" > "$tmp/model/training-log.jsonl" << 'EOF'
import json, sys
last = int(sys.argv[2])
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("step", 0) <= last:
        print(json.dumps(m, sort_keys=True))
EOF
valid_table=$(python3 - "$tmp/model/training-log.jsonl" << 'EOF'
import json, sys
seen = {}
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("event") != "validation":
        continue
    seen[m["step"]] = m
for step in sorted(seen):
    m = seen[step]
    print(f"| {step} | {m['dev_ppl']:.2f} | {m.get('dev_bleu', float('nan')):.1f} |")
EOF
)

cat > "$tmp/model/README.md" << EOF
# Demo model: English → German, Multi30k

A Transformer trained by \`tnmt train\` with [models/recipes/multi30k-small.json](../recipes/multi30k-small.json)
(the "small" preset: d_model 256, 4 heads, d_ff 1024, 3+3 layers, post-norm as in the paper,
joint SentencePiece vocabulary of 8000 pieces, dropout 0.3, label smoothing 0.1) on the 29,000
training pairs of Multi30k Task 1, on a 2-core CPU. This directory is what \`tnmt serve\` serves
when no \`--model\` is given.

| | |
|---|---|
| test BLEU (test_2016_flickr, 1000 sentences, beam 4, α 0.6) | **$(printf '%.1f' "$bleu")** |
| sacreBLEU signature | \`${signature//|/\\|}\` |
| weights | average of ${last} checkpoints (${averaged% }), float16, ${size} KiB |
| training steps | ${final_step} |

Reproduce: \`tools/get-multi30k.sh\` (the data, into data/multi30k), \`tnmt train --config
models/recipes/multi30k-small.json\` (checkpoints in runs/multi30k-small), then \`tools/make-demo-model.sh SAVE_DIR ${last}\`, which also recomputes the score
above. \`train_config.json\` is the recipe as trained; \`training-log.jsonl\` is the trainer's
log (training loss, tokens/s and learning rate every 20 steps, validations, checkpoints). Dev
perplexity and dev BLEU (first 300 sentences of val, beam 4) at each validation:

| step | dev perplexity | dev BLEU |
|---|---|---|
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
