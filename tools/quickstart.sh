#!/usr/bin/env bash
# The main job on a fresh Debian machine: install dependencies (apt), build tnmt, and translate
# sample sentences with a model. Until the bundled demo model exists this uses the small
# random test model in tests/golden/data/tiny, so the output is not a real translation yet.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
bazel build //tools/tnmt
model="${TNMT_MODEL:-tests/golden/data/tiny}"
printf 'A man is riding a bicycle.\nTwo dogs play in the snow.\n' |
  bazel-bin/tools/tnmt/tnmt translate --model "$model" --beam-size 4 --scores
