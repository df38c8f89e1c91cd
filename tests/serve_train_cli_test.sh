#!/usr/bin/env bash
# The command lines of `tnmt serve`, `tnmt train` and `tnmt average`:
#   a. --help states exactly one default per flag (serve's --model: the bundled demo model);
#   b. serve --config: keys spelled with '_' or '-' (http_port works), an unknown key or a bad
#      value names the file and the key, invalid JSON its line and column; --http-port -1 logs
#      "HTTP off"; --max-tokens is a deprecated name of --max-input-length (a warning, the
#      value is used); a missing --model directory exits 2 naming the model and the directory,
#      a raw Hugging Face Marian directory exits 2 saying how to convert it;
#   c. train: a bad --preset/--dropout is blamed on the flag, not on the --config file; a bad
#      key of the file names the file and the key as spelled; invalid JSON gives line and
#      column; a file with '-' keys trains; each validation is a readable line of its own
#      (also under the live progress line on a terminal) and grad_norm is logged without
#      clipping; resuming with another model names the differing keys before reading the data;
#   d. average: a missing --checkpoints directory says so; inputs given wrongly (none, both
#      ways, --last with directories, a missing directory) are refused naming the problem.
# Usage: serve_train_cli_test.sh TNMT MODEL_DIR SPM_MODEL
set -u
TNMT="$1"
MODEL="$2"
SPM="$3"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; }
trap cleanup EXIT

# refused NAME EXPECTED_TEXT COMMAND...: COMMAND exits 2 and its stderr contains EXPECTED_TEXT.
refused() {
  local name="$1" want="$2"; shift 2
  timeout 30 "$@" > /dev/null 2> "$TMP/$name.err"
  local rc=$?
  if [[ $rc -eq 2 ]] && grep -qF -- "$want" "$TMP/$name.err"; then
    echo "  $(head -c 240 "$TMP/$name.err")"
    return 0
  fi
  echo "  exit $rc, stderr: $(head -c 400 "$TMP/$name.err")"
  return 1
}

echo "== a. --help: one default per flag"
for cmd in serve train average; do
  "$TNMT" $cmd --help > "$TMP/help.$cmd"
  check "tnmt $cmd --help exits 0" test $? -eq 0
  bad=$(grep -E '^  --' "$TMP/help.$cmd" | awk '{ n = gsub(/\(default/, "&"); if (n != 1) print }')
  check "tnmt $cmd --help: every flag states one default${bad:+ (not: $bad)}" test -z "$bad"
done
check "serve --model: the bundled demo model, once" \
  bash -c "grep -E '^  --model  ' '$TMP/help.serve' | grep -q '(default: the bundled demo model, named demo)$'"
check "serve lists --max-input-length" grep -q -- '--max-input-length' "$TMP/help.serve"
check "train --vocab-size: its real default 8000" grep -qE -- '^  --vocab-size .*\(default: 8000\)$' "$TMP/help.train"
check "train --d-model: from the preset (not 0)" grep -qE -- '^  --d-model .*\(default: from --preset\)$' "$TMP/help.train"
check "train --[no-]valid-bleu: on" grep -qE -- '^  --\[no-\]valid-bleu .*\(default: on\)$' "$TMP/help.train"

echo "== b. serve"
printf '{"http_port": -1, "port": 0, "host": "127.0.0.1", "models": {"tiny": "%s"}, "max_batch_rows": 8, "grace-seconds": 2}\n' \
  "$MODEL" > "$TMP/serve.json"
"$TNMT" serve --config "$TMP/serve.json" --threads 1 --ready-file "$TMP/ready" 2> "$TMP/serve.log" &
pid=$!
pids+=("$pid")
for _ in $(seq 300); do
  [[ -s "$TMP/ready" ]] && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
check "a config file with http_port, max_batch_rows (underscores) starts the server" test -s "$TMP/ready"
check "  its start-up line says HTTP off (not ':-1')" \
  bash -c "grep -q 'gRPC on 127.0.0.1:[0-9]*, HTTP off; loading 1 model' '$TMP/serve.log' && ! grep -q ':-1' '$TMP/serve.log'"
kill -TERM "$pid"
wait "$pid"
check "  and exits 0 on SIGTERM" test $? -eq 0

echo '{"htp_port": 1}' > "$TMP/unknown.json"
check "an unknown key names the file and the key" \
  refused unknown "$TMP/unknown.json: unknown key \"htp_port\"" "$TNMT" serve --config "$TMP/unknown.json"
echo '{"port": "x"}' > "$TMP/value.json"
check "a bad value names the file and the key" \
  refused value "$TMP/value.json: \"port\" expects an integer" "$TNMT" serve --config "$TMP/value.json"
printf '{\n  "port": 0,\n  "threads": ,\n  "host": "x"\n}\n' > "$TMP/syntax.json"
check "invalid JSON names the line and column" \
  refused syntax "$TMP/syntax.json:3:14: invalid JSON" "$TNMT" serve --config "$TMP/syntax.json"
echo '{"max_queue": 1, "max-queue": 2}' > "$TMP/twice.json"
check "one setting in both spellings is an error naming both" \
  refused twice 'both given (the same setting)' "$TNMT" serve --config "$TMP/twice.json"
check "  (both spellings named)" bash -c "grep -qF '\"max_queue\"' '$TMP/twice.err' && grep -qF '\"max-queue\"' '$TMP/twice.err'"

check "--max-tokens: deprecated, its value is used (0 is refused as --max-input-length)" \
  refused maxtokens "--max-input-length must be positive, got 0" "$TNMT" serve --model "tiny=$MODEL" --max-tokens 0
check "  with a warning naming the new flag" grep -q -- "--max-tokens is deprecated: use --max-input-length" "$TMP/maxtokens.err"
check "--max-tokens and --max-input-length together: refused" \
  refused both "give --max-input-length only" "$TNMT" serve --model "tiny=$MODEL" --max-tokens 5 --max-input-length 6
check "a missing model directory exits 2 naming the model and the directory" \
  refused missing 'model "x": /nonexistent: no such directory' "$TNMT" serve --model x=/nonexistent --port 0 --http-port -1
mkdir -p "$TMP/hf"
printf '{"model_type": "marian", "architectures": ["MarianMTModel"], "d_model": 64}\n' > "$TMP/hf/config.json"
check "a raw Hugging Face Marian directory: exit 2 with how to convert it" \
  refused hf "looks like a Hugging Face Marian directory, not a tnmt model: convert it with \`tnmt import --from hf-marian $TMP/hf --output MODEL_DIR\`" \
  "$TNMT" serve --model "opus=$TMP/hf" --port 0 --http-port -1
check "  also with --on-missing-model=wait (the directory is there; waiting cannot help)" \
  refused hf2 "looks like a Hugging Face Marian directory" "$TNMT" serve --model "opus=$TMP/hf" --on-missing-model=wait --port 0 --http-port -1
printf 'x\n' | "$TNMT" translate --model "$TMP/hf" > /dev/null 2> "$TMP/hf3.err"
check "  and tnmt translate says the same" grep -q "looks like a Hugging Face Marian directory" "$TMP/hf3.err"
check "--on-missing-model takes exit or wait" \
  refused onmissing "--on-missing-model must be exit or wait" "$TNMT" serve --model "tiny=$MODEL" --on-missing-model=maybe
check "serve --compute-type int16: refused naming the flag and the values" \
  refused ctype "--compute-type int16: expected float32 or int8" "$TNMT" serve --model "tiny=$MODEL" --compute-type int16
check "serve --model-compute-types for an unknown model: refused naming it" \
  refused ctype2 '--model-compute-types other=int8: no model named "other"' "$TNMT" serve --model "tiny=$MODEL" --model-compute-types other=int8
check "serve --model-compute-types with a bad type: refused naming the flag" \
  refused ctype3 "--model-compute-types tiny=fp8: --compute-type fp8: expected float32 or int8" "$TNMT" serve --model "tiny=$MODEL" --model-compute-types tiny=fp8

echo "== c. train"
DATA="$TMP/data"
mkdir -p "$DATA"
tests/tools/synthetic_corpus.sh 200 5 "$DATA/train.en" "$DATA/train.de"
head -5 "$DATA/train.en" > "$DATA/dev.en"
head -5 "$DATA/train.de" > "$DATA/dev.de"
cat > "$TMP/train.json" << EOF
{"train-source": "$DATA/train.en", "train-target": "$DATA/train.de",
 "valid-source": "$DATA/dev.en", "valid-target": "$DATA/dev.de", "spm-model": "$SPM",
 "preset": "tiny", "max-tokens": 256, "warmup_steps": 10, "max-steps": 4, "valid-every-steps": 2,
 "valid_max_sentences": 3, "log-every-steps": 1, "threads": 1, "save-dir": "$TMP/run"}
EOF
check "--preset huge on the command line is blamed on --preset" \
  refused preset '--preset must be base, big, small or tiny (got "huge")' "$TNMT" train --config "$TMP/train.json" --preset huge
check "  not on the config file" bash -c "! grep -q train.json '$TMP/preset.err'"
check "--dropout 2 on the command line is blamed on --dropout" \
  refused dropout "--dropout must be in [0, 1) (got 2.0)" "$TNMT" train --config "$TMP/train.json" --dropout 2
sed 's/"max-steps": 4/"max-steps": 0/' "$TMP/train.json" > "$TMP/zero.json"
check "a bad key of the file names the file and the key as spelled there" \
  refused zero "$TMP/zero.json: \"max-steps\" must be positive (got 0)" "$TNMT" train --config "$TMP/zero.json"
printf '{\n  "preset": "tiny",\n  "save_dir": oops\n}\n' > "$TMP/badtrain.json"
check "invalid JSON names the line and column" \
  refused badjson "$TMP/badtrain.json:3:15: invalid JSON" "$TNMT" train --config "$TMP/badtrain.json"

"$TNMT" train --config "$TMP/train.json" 2> "$TMP/train.log"
check "a config file with '-' keys trains to step 4" test -d "$TMP/run/step-00000004"
check "  each validation is a readable line of its own" \
  grep -qE '^tnmt train: validation at step 2: dev loss [0-9.]+, ppl [0-9.]+, BLEU [0-9.]+ \([0-9.]+ s\)$' "$TMP/train.log"
check "  not the raw JSON record" bash -c "! grep -q '{\"dev_' '$TMP/train.log'"
check "  grad_norm logged without clipping, and not 0" /usr/bin/python3 -c '
import json, sys
norms = [r.get("grad_norm") for r in map(json.loads, open(sys.argv[1])) if r["event"] == "train"]
print("  grad_norm:", norms)
sys.exit(0 if norms and all(isinstance(n, float) and n > 0 for n in norms) else 1)' "$TMP/run/metrics.jsonl"
if command -v script > /dev/null; then
  # On a terminal the live progress line ends before the validation line starts.
  rm -rf "$TMP/tty-run"
  script -qec "'$TNMT' train --config '$TMP/train.json' --save-dir '$TMP/tty-run'" /dev/null < /dev/null > "$TMP/tty.log" 2>&1
  check "on a terminal the validation line starts a line of its own (after the progress line)" \
    bash -c "grep -q 'step 2/4' '$TMP/tty.log' && tr '\r' '\n' < '$TMP/tty.log' | grep -q '^tnmt train: validation at step 2: dev loss' &&
             ! grep -a 'validation at step' '$TMP/tty.log' | grep -q 'ETA'"
else
  echo "skip: no 'script' command to give the trainer a terminal"
fi

check "resuming with another model is refused naming the keys" \
  refused resume "d_model: checkpoint 32, config 64" "$TNMT" train --config "$TMP/train.json" --d-model 64 --max-steps 6
check "  before the training data is read" bash -c "! grep -q 'training pairs' '$TMP/resume.err'"

echo "== d. average"
check "average --checkpoints /nonexistent: no such directory" \
  refused average "/nonexistent: no such directory" "$TNMT" average --checkpoints /nonexistent --output "$TMP/avg"
check "average without inputs says what to give" \
  refused average-none "give --checkpoints (a training run) or the directories to average" "$TNMT" average --output "$TMP/avg"
check "average with --checkpoints and directories refuses both" \
  refused average-both "not both" "$TNMT" average --checkpoints "$TMP" --output "$TMP/avg" "$TMP"
check "average with directories refuses --last" \
  refused average-last "--last applies to --checkpoints" "$TNMT" average --last 2 --output "$TMP/avg" "$TMP" "$TMP"
check "average of a missing directory names it" \
  refused average-missing "/nonexistent/config.json" "$TNMT" average --output "$TMP/avg" /nonexistent
check "  and writes nothing" test ! -e "$TMP/avg"

echo "$fails failure(s)"
test "$fails" -eq 0
