#!/usr/bin/env bash
# `tnmt shortlist` and `tnmt translate --shortlist` on the tiny golden model: a table built from a
# small corpus translates every line; a table allowing the whole vocabulary gives the same output
# and scores as none; bad tables and flags exit 2 (1 for an unreadable corpus) naming the file or
# flag and the problem. `tnmt serve --model-shortlists`: served as locally, a bad table refused.
set -u
TNMT="$1"
MODEL="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}

printf 'Das Mädchen geht über die Straße.\nZoë sieht heute den Hund!\nEin Mann liest.\n' > "$TMP/src.txt"
printf 'The girl crosses the street.\nZoe sees the dog today!\nA man reads.\n' > "$TMP/tgt.txt"
"$TNMT" shortlist --model "$MODEL" --source "$TMP/src.txt" --target "$TMP/tgt.txt" --output "$TMP/lex.txt" \
  --per-source 5 --frequent 20 2> "$TMP/build.err"
check "shortlist builds a table (exit 0)" test $? -eq 0
check "  a versioned tnmt shortlist file" test "$(head -1 "$TMP/lex.txt")" = "tnmt-shortlist 1"
check "  says how it was estimated" grep -q "^# p(target | source) by IBM Model 1, 5 EM iterations" "$TMP/lex.txt"
check "  reports what it wrote" grep -q "wrote $TMP/lex.txt (3 pairs" "$TMP/build.err"

"$TNMT" translate --model "$MODEL" --threads 1 --shortlist "$TMP/lex.txt" < "$TMP/src.txt" > "$TMP/short.out"
check "translate --shortlist exits 0" test $? -eq 0
check "  one line per input line" test "$(wc -l < "$TMP/short.out")" -eq 3

# Every id but pad (0) allowed: the same output and scores as the whole vocabulary.
vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/config.json"))["vocab_size"])' "$MODEL")
pad=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1] + "/config.json")); print(c.get("pad_id", 0))' "$MODEL")
{
  echo "tnmt-shortlist 1"; echo "vocab_size $vocab"
  ids=$(seq 0 $((vocab - 1)) | grep -vx "$pad" | tr '\n' ' ')
  echo "frequent $((vocab - 1)) $ids" | sed 's/ $//'
  echo "end"
} > "$TMP/all.txt"
for flags in "--beam-size 1 --scores" "--beam-size 4 --n-best 4"; do
  # shellcheck disable=SC2086
  "$TNMT" translate --model "$MODEL" --threads 1 $flags < "$TMP/src.txt" > "$TMP/plain.out"
  # shellcheck disable=SC2086
  "$TNMT" translate --model "$MODEL" --threads 1 $flags --shortlist "$TMP/all.txt" < "$TMP/src.txt" > "$TMP/all.out"
  check "whole-vocabulary shortlist: same output and scores ($flags)" cmp -s "$TMP/plain.out" "$TMP/all.out"
done

expect_usage() {  # expect_usage DESCRIPTION MESSAGE ARGS...: exit 2 and MESSAGE on stderr
  local what="$1" message="$2"; shift 2
  "$TNMT" "$@" < "$TMP/src.txt" > /dev/null 2> "$TMP/err"
  local rc=$?
  check "$what: exit 2 naming the problem" bash -c "test $rc -eq 2 && grep -qF -- '$message' '$TMP/err'" \
    || cat "$TMP/err"
}
printf 'tnmt-shortlist 1\nvocab_size %d\nfrequent 1 4\nsource 3 2 5\nend\n' "$vocab" > "$TMP/cut.txt"
printf 'tnmt-shortlist 1\nvocab_size %d\nfrequent 1 %d\nend\n' "$vocab" "$vocab" > "$TMP/range.txt"
printf 'tnmt-shortlist 1\nvocab_size 99999\nend\n' > "$TMP/vocab.txt"
head -c 300 "$TMP/lex.txt" > "$TMP/truncated.txt"
printf '\x00\x01garbage' > "$TMP/garbage.txt"
expect_usage "missing table" "shortlist $TMP/none.txt: cannot open" translate --model "$MODEL" --shortlist "$TMP/none.txt"
expect_usage "garbage table" "line 1: not a tnmt shortlist file" translate --model "$MODEL" --shortlist "$TMP/garbage.txt"
expect_usage "truncated table" "shortlist $TMP/truncated.txt" translate --model "$MODEL" --shortlist "$TMP/truncated.txt"
expect_usage "line cut short" "line 4: \"source\" declares 2 ids but the line has 1" translate --model "$MODEL" --shortlist "$TMP/cut.txt"
expect_usage "id out of range" "line 3: target id $vocab is outside [0, $vocab)" translate --model "$MODEL" --shortlist "$TMP/range.txt"
expect_usage "wrong vocabulary" "built for a vocabulary of 99999 pieces, but the model has $vocab" translate --model "$MODEL" --shortlist "$TMP/vocab.txt"
expect_usage "--shortlist with --server" "--shortlist applies to local translation, not with --server" translate --server localhost:1 --shortlist "$TMP/lex.txt"
expect_usage "--shortlist with --ensemble" "--shortlist applies to one model, not with --ensemble" translate --model "$MODEL" --ensemble "$MODEL" --shortlist "$TMP/lex.txt"
expect_usage "--shortlist empty" "--shortlist needs a file name" translate --model "$MODEL" --shortlist=
expect_usage "shortlist without --model" "--model is required" shortlist --source "$TMP/src.txt" --target "$TMP/tgt.txt" --output "$TMP/x"
expect_usage "shortlist --per-source 0" "--per-source must be >= 1, got 0" shortlist --model "$MODEL" --source "$TMP/src.txt" --target "$TMP/tgt.txt" --output "$TMP/x" --per-source 0
expect_usage "shortlist --iterations 99" "--iterations must be in [0, 50], got 99" shortlist --model "$MODEL" --source "$TMP/src.txt" --target "$TMP/tgt.txt" --output "$TMP/x" --iterations 99
expect_usage "shortlist of a missing model" "--model: $TMP/nomodel: model directory does not exist" shortlist --model "$TMP/nomodel" --source "$TMP/src.txt" --target "$TMP/tgt.txt" --output "$TMP/x"
head -2 "$TMP/tgt.txt" > "$TMP/short_tgt.txt"
"$TNMT" shortlist --model "$MODEL" --source "$TMP/src.txt" --target "$TMP/short_tgt.txt" --output "$TMP/x" 2> "$TMP/err"
rc=$?
check "corpus sides of different lengths: exit 1 naming both" bash -c "test $rc -eq 1 && grep -qF 'differ in length: $TMP/short_tgt.txt ends at line 2' '$TMP/err'"
"$TNMT" shortlist --model "$MODEL" --source "$TMP/nosrc" --target "$TMP/tgt.txt" --output "$TMP/x" 2> "$TMP/err"
rc=$?
check "missing corpus: exit 1 naming it" bash -c "test $rc -eq 1 && grep -qF -- '--source $TMP/nosrc: cannot open' '$TMP/err'"

# The server's per-model shortlist: every request to the model uses it.
expect_usage "--model-shortlists of an unknown model" "--model-shortlists other=$TMP/lex.txt: no model named \"other\"" \
  serve --model "tiny=$MODEL" --model-shortlists "other=$TMP/lex.txt" --port 0 --http-port -1
serve_with() {  # serve_with TABLE: a server of $MODEL named tiny with that shortlist; sets SERVER, SERVER_PID
  rm -f "$TMP/ready"
  "$TNMT" serve --model "tiny=$MODEL" --model-shortlists "tiny=$1" --threads 1 --port 0 --http-port -1 \
    --ready-file "$TMP/ready" 2> "$TMP/serve.log" &
  SERVER_PID=$!
  for _ in $(seq 300); do [[ -s "$TMP/ready" ]] || ! kill -0 $SERVER_PID 2> /dev/null && break; sleep 0.1; done
  SERVER="127.0.0.1:$(cut -d' ' -f1 "$TMP/ready" 2> /dev/null)"
}
trap 'kill -KILL $SERVER_PID 2> /dev/null' EXIT
serve_with "$TMP/all.txt"
check "server with a whole-vocabulary shortlist ready" test -s "$TMP/ready"
"$TNMT" translate --model "$MODEL" --threads 1 --scores < "$TMP/src.txt" > "$TMP/plain.out"
"$TNMT" translate --server "$SERVER" --scores < "$TMP/src.txt" > "$TMP/served-all.out"
check "  served output and scores equal the unrestricted ones" cmp -s "$TMP/served-all.out" "$TMP/plain.out"
kill -TERM $SERVER_PID; wait $SERVER_PID
serve_with "$TMP/lex.txt"
check "server with a built shortlist ready" test -s "$TMP/ready"
for i in 1 2 3; do  # one sentence at a time: its candidates are its own, as in a local run of that line
  sed -n "${i}p" "$TMP/src.txt" > "$TMP/one.txt"
  "$TNMT" translate --model "$MODEL" --threads 1 --scores --shortlist "$TMP/lex.txt" < "$TMP/one.txt" > "$TMP/one.local"
  "$TNMT" translate --server "$SERVER" --scores < "$TMP/one.txt" > "$TMP/one.served"
  check "  line $i served with the shortlist as locally with it" cmp -s "$TMP/one.served" "$TMP/one.local"
done
kill -TERM $SERVER_PID; wait $SERVER_PID
check "server stopped cleanly" test $? -eq 0
printf 'tnmt-shortlist 1\nvocab_size 7\nend\n' > "$TMP/bad.txt"
"$TNMT" serve --model "tiny=$MODEL" --model-shortlists "tiny=$TMP/bad.txt" --port 0 --http-port -1 2> "$TMP/err" &
SERVER_PID=$!
want="not ready: model \"tiny\": shortlist $TMP/bad.txt line 2: built for a vocabulary of 7 pieces"
for _ in $(seq 100); do grep -qF "$want" "$TMP/err" && break; sleep 0.1; done
check "server does not load a shortlist of another vocabulary, naming the model and the file" grep -qF "$want" "$TMP/err"
kill -TERM $SERVER_PID; wait $SERVER_PID

echo "$fails failed"
[[ $fails -eq 0 ]]
