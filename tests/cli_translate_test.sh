#!/usr/bin/env bash
# End-to-end `tnmt translate` on the tiny golden model: stdin/stdout and files, empty lines,
# invalid UTF-8 and a 10,000-token line (per-line errors naming the line, alignment kept,
# exit 1), n-best and scores formats, bad flags and a missing model (exit 2, clear message),
# progress and --quiet; then the same through `tnmt serve` (--server), and `tnmt models`;
# `tnmt score` errors in its own name, one usage error naming --model-name for a server of
# two models; `tnmt jobs` against a server without --state-dir says it has no training API.
set -u
TNMT="$1"
MODEL="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
expect_rc() {  # expect_rc WANT GOT CONDITION...: GOT is WANT and CONDITION holds
  local want="$1" got="$2"; shift 2
  [[ $got -eq $want ]] && "$@"
}

# Five lines: text, empty, invalid UTF-8, 10,000 tokens, text.
{
  printf 'Das Mädchen geht über die Straße.\n'
  printf '\n'
  printf 'bad \xff bytes\n'
  for i in $(seq 10000); do printf 'Haus '; done; printf '\n'
  printf 'Zoë sieht heute den Hund!\n'
} > "$TMP/in.txt"

"$TNMT" translate --model "$MODEL" < "$TMP/in.txt" > "$TMP/out.txt" 2> "$TMP/err.txt"
rc=$?
check "exit status 1 when some lines fail" test "$rc" -eq 1
check "one output line per input line" test "$(wc -l < "$TMP/out.txt")" -eq 5
check "empty line stays empty" test -z "$(sed -n 2p "$TMP/out.txt")"
# Lines 1 and 5 are sentences of tests/golden (make_golden.py's float64 reference): their
# translations are the reference's best beam-4 hypotheses, decoded by spm_decode.
golden_text() {  # the reference's best beam hypothesis for one source sentence, as text
  python3 -c 'import json, sys
cases = json.load(open(sys.argv[1] + "/golden.json"))["cases"]
print(" ".join(str(i) for i in next(c for c in cases if c["text"] == sys.argv[2])["beam"][0]["ids"]))' \
    "$MODEL" "$1" | spm_decode --model="$MODEL/spm.model" --input_format=id
}
want1=$(golden_text 'Das Mädchen geht über die Straße.')
want5=$(golden_text 'Zoë sieht heute den Hund!')
check "first line: the reference translation ($want1)" test -n "$want1" -a "$(sed -n 1p "$TMP/out.txt")" = "$want1"
check "last line: the reference translation ($want5)" test -n "$want5" -a "$(sed -n 5p "$TMP/out.txt")" = "$want5"
check "invalid UTF-8 names line 3" grep -q "input line 3: .*UTF-8" "$TMP/err.txt"
check "long line names line 4" grep -q "input line 4: .*maximum input length" "$TMP/err.txt"
check "  once, not as 'input line 4: line 4:'" bash -c "! grep -q 'input line [0-9]*: line' '$TMP/err.txt'"

# Files in, files out; same result as stdin for the good lines.
printf 'Das Mädchen geht über die Straße.\n\nZoë sieht heute den Hund!\n' > "$TMP/good.txt"
"$TNMT" translate --model "$MODEL" --input "$TMP/good.txt" --output "$TMP/good.out" --threads 1
check "file mode exits 0" test $? -eq 0
check "file mode output matches stdin mode" \
  test "$(sed -n 1p "$TMP/good.out")|$(sed -n 3p "$TMP/good.out")" = "$want1|$want5"

# n-best: 3 lines per input line, numbered from 1 as errors are; the blank line 2 gets one.
"$TNMT" translate --model "$MODEL" --n-best 3 --beam-size 4 < "$TMP/good.txt" > "$TMP/nbest.txt"
check "n-best writes 3 lines per input, one for a blank line" test "$(wc -l < "$TMP/nbest.txt")" -eq 7
check "n-best numbers lines from 1" test "$(cut -d' ' -f1 "$TMP/nbest.txt" | tr '\n' ' ')" = "1 1 1 2 3 3 3 "
check "n-best format" grep -qE '^3 \|\|\| .+ \|\|\| -?[0-9]+\.[0-9]+$' "$TMP/nbest.txt"
check "  the blank line: empty text" grep -qxF '2 |||  ||| 0.000000' "$TMP/nbest.txt"
# --length-penalty-style length: the Hugging Face / fairseq / CTranslate2 normalisation, the
# same locally and through a server (checked below); a bad style is one usage error.
"$TNMT" translate --model "$MODEL" --length-penalty-style length --scores < "$TMP/good.txt" > "$TMP/lp-length.txt"
check "--length-penalty-style length translates" test "$(wc -l < "$TMP/lp-length.txt")" -eq 3
"$TNMT" translate --model "$MODEL" --length-penalty-style wu < "$TMP/good.txt" > /dev/null 2> "$TMP/lp.err"
check "--length-penalty-style wu: exit 2" test $? -eq 2
check "  naming the flag and the values" grep -qF -- '--length-penalty-style: expected "gnmt"' "$TMP/lp.err"
# Moses n-best: IDs from 0, one feature, the same hypotheses and scores as the tnmt format.
"$TNMT" translate --model "$MODEL" --n-best 3 --beam-size 4 --n-best-format moses < "$TMP/good.txt" > "$TMP/moses.txt"
check "moses n-best: IDs from 0" test "$(cut -d' ' -f1 "$TMP/moses.txt" | tr '\n' ' ')" = "0 0 0 1 2 2 2 "
check "moses n-best: 'ID ||| TEXT ||| F0= S ||| S'" \
  bash -c "awk -F ' \\|\\|\\| ' 'NF != 4 || \$3 != \"F0= \" \$4 { bad = 1 } END { exit bad }' '$TMP/moses.txt'"
check "moses n-best: same texts and scores as the tnmt format" \
  test "$(awk -F ' \\|\\|\\| ' '{ print $2 "|" $4 }' "$TMP/moses.txt")" = "$(awk -F ' \\|\\|\\| ' '{ print $2 "|" $3 }' "$TMP/nbest.txt")"
"$TNMT" translate --model "$MODEL" --n-best-format nbest < "$TMP/good.txt" > /dev/null 2> "$TMP/fmt.err"
rc=$?
check "--n-best-format nbest (exit $rc, want 2), naming the values" expect_rc 2 "$rc" \
  bash -c "[[ \$(wc -l < '$TMP/fmt.err') -eq 1 ]] && grep -qF -- '--n-best-format must be tnmt or moses' '$TMP/fmt.err'"
"$TNMT" translate --model "$MODEL" --scores --beam-size 1 < "$TMP/good.txt" > "$TMP/scores.txt"
check "scores format" grep -qE '^-[0-9]+\.[0-9]+ \|\|\| ' "$TMP/scores.txt"

"$TNMT" translate --model "$MODEL" --beam-size 0 < /dev/null 2> "$TMP/e1"
check "beam 0 rejected (exit 2)" test $? -eq 2
check "beam 0 message names --beam-size" grep -qF -- "--beam-size must be in [1, 64]" "$TMP/e1"
"$TNMT" translate --model "$MODEL" --n-best 5 < /dev/null 2> "$TMP/e1b"
rc=$?
check "--n-best beyond the model's beam names --n-best (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- "--n-best 5 exceeds" "$TMP/e1b"
"$TNMT" translate --model "$TMP/missing" < /dev/null 2> "$TMP/e2"
check "missing model exit 2" test $? -eq 2
check "missing model message" grep -q "does not exist" "$TMP/e2"
"$TNMT" translate --model "$MODEL" --bogus 1 < /dev/null 2> "$TMP/e3"
rc=$?
check "unknown flag rejected (exit $rc, want 2)" expect_rc 2 "$rc" grep -q "unknown flag --bogus" "$TMP/e3"
"$TNMT" translate --help > "$TMP/help.txt"
check "--help lists --beam-size" grep -q -- "--beam-size" "$TMP/help.txt"
"$TNMT" translate --model "$MODEL" --device cuda < /dev/null 2> "$TMP/e4"
rc=$?
check "cuda device refused clearly in a CPU build (exit $rc, want 2)" expect_rc 2 "$rc" grep -q "no CUDA support" "$TMP/e4"
"$TNMT" translate --model "$MODEL" --device tpu < /dev/null 2> "$TMP/e5"
rc=$?
check "unknown device names --device (exit $rc, want 2)" expect_rc 2 "$rc" grep -q -- "--device tpu: expected cpu, cuda or cuda:N" "$TMP/e5"
"$TNMT" translate --model "$MODEL" --dtype float16 < /dev/null 2> "$TMP/e6"
rc=$?
check "half precision on the CPU refused (exit $rc, want 2)" expect_rc 2 "$rc" grep -q -- "--dtype float16: the CPU engine computes in float32" "$TMP/e6"

# The input is never destroyed: the same file as --output (by any name, or as redirected stdin)
# is refused before anything is written; a directory is not an input.
printf 'Das Haus ist rot.\nDer Hund.\n' > "$TMP/same.txt"
cp "$TMP/same.txt" "$TMP/same.orig"
"$TNMT" translate --model "$MODEL" --input "$TMP/same.txt" --output "$TMP/same.txt" 2> "$TMP/e7"
check "--output equal to --input refused (exit 2)" test $? -eq 2
check "  saying it is the input file" grep -q -- "--output $TMP/same.txt is the input file" "$TMP/e7"
check "  the input is intact" cmp -s "$TMP/same.txt" "$TMP/same.orig"
ln -sf "$TMP/same.txt" "$TMP/same-link.txt"
"$TNMT" translate --model "$MODEL" --input "$TMP/same.txt" --output "$TMP/./same-link.txt" 2> /dev/null
check "the same file under another name is refused too" test $? -eq 2
"$TNMT" translate --model "$MODEL" --output "$TMP/same.txt" < "$TMP/same.txt" 2> /dev/null
check "stdin redirected from the output file is refused" test $? -eq 2
check "  the input is still intact" cmp -s "$TMP/same.txt" "$TMP/same.orig"
"$TNMT" translate --model "$MODEL" --input "$TMP" > "$TMP/dir.out" 2> "$TMP/e8"
check "a directory as --input refused (exit 2)" test $? -eq 2
check "  saying it is a directory" grep -q "is a directory" "$TMP/e8"
"$TNMT" translate --model "$MODEL" --input "$TMP/nope.txt" 2> "$TMP/e9"
rc=$?
check "a missing --input names it (exit $rc, want 2)" expect_rc 2 "$rc" bash -c "grep -q -- '--input $TMP/nope.txt' $TMP/e9"

# Progress and --quiet: a forced bar ends at the line count; --quiet counts failed lines only.
"$TNMT" translate --model "$MODEL" --progress --input "$TMP/good.txt" > /dev/null 2> "$TMP/p1"
check "--progress draws the bar" grep -q '3/3' "$TMP/p1"
"$TNMT" translate --model "$MODEL" --quiet < "$TMP/in.txt" > /dev/null 2> "$TMP/q1"
check "--quiet: one line on stderr" test "$(wc -l < "$TMP/q1")" -eq 1
check "  counting the failed lines" grep -q "2 line(s) could not be translated (the first: input line 3)" "$TMP/q1"

# Decoding options: a target prefix file, pieces with token scores and alignments, the
# repetition rules, sampling with a seed; bad combinations are one usage error.
printf 'Das\n\nZoe\n' > "$TMP/prefix.txt"
"$TNMT" translate --model "$MODEL" --target-prefix "$TMP/prefix.txt" --token-scores --alignments --input "$TMP/good.txt" > "$TMP/detail.txt"
check "--token-scores --alignments: one line per input line" test "$(wc -l < "$TMP/detail.txt")" -eq 3
check "  'LINE ||| TEXT ||| SCORE ||| PIECES ||| TOKEN_SCORES ||| ALIGNMENT'" \
  awk -F' [|][|][|] ?' 'NR != 2 { np = split($4, p, " "); nt = split($5, t, " "); na = split($6, a, " "); if (np < 1 || nt != np + 1 || na != np) exit 1; for (i = 1; i <= na; i++) if (a[i] !~ ("^[0-9]+-" (i - 1) "$")) exit 1 }' "$TMP/detail.txt"
check "  the blank line keeps its place" grep -qxF '2 |||  ||| 0.000000 |||  |||  |||' "$TMP/detail.txt"
check "  the prefix starts the translation" grep -q '^1 ||| Das' "$TMP/detail.txt"
"$TNMT" translate --model "$MODEL" --no-repeat-ngram-size 2 --repetition-penalty 1.5 --min-length 3 --disable-unk --input "$TMP/good.txt" > "$TMP/rules.txt"
check "repetition rules translate" test "$(wc -l < "$TMP/rules.txt")" -eq 3
"$TNMT" translate --model "$MODEL" --sampling-topk 0 --seed 9 --input "$TMP/good.txt" > "$TMP/sample1.txt" 2> "$TMP/sample.err"
"$TNMT" translate --model "$MODEL" --sampling-topk 0 --seed 9 --threads 1 --input "$TMP/good.txt" > "$TMP/sample2.txt"
check "sampling: the same seed gives the same output" cmp -s "$TMP/sample1.txt" "$TMP/sample2.txt"
"$TNMT" translate --model "$MODEL" --sampling-topk 5 --input "$TMP/good.txt" > /dev/null 2> "$TMP/sample-seed.err"
check "sampling without --seed prints the seed drawn" grep -qE '^tnmt translate: sampling with --seed [0-9]+$' "$TMP/sample-seed.err"
"$TNMT" translate --model "$MODEL" --sampling-topk 5 --beam-size 4 < "$TMP/good.txt" > /dev/null 2> "$TMP/o1"
rc=$?
check "sampling with --beam-size 4 (exit $rc, want 2), naming the flags" expect_rc 2 "$rc" grep -qF -- "sampling needs --beam-size 1, got 4 (--sampling-topk 5)" "$TMP/o1"
"$TNMT" translate --model "$MODEL" --sampling-temperature 0.5 < "$TMP/good.txt" > /dev/null 2> "$TMP/o2"
rc=$?
check "--sampling-temperature without sampling (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- "--sampling-temperature apply to sampling only" "$TMP/o2"
"$TNMT" translate --model "$MODEL" --sampling-topk 0 --seed x1 < "$TMP/good.txt" > /dev/null 2> "$TMP/o3"
rc=$?
check "--seed x1 (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- '--seed must be a positive integer below 2^64, got "x1"' "$TMP/o3"
"$TNMT" translate --model "$MODEL" --alignment-layer 0 < "$TMP/good.txt" > /dev/null 2> "$TMP/o4"
rc=$?
check "--alignment-layer without --alignments (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- "--alignment-layer needs --alignments" "$TMP/o4"
"$TNMT" translate --model "$MODEL" --alignments --alignment-layer 9 < "$TMP/good.txt" > /dev/null 2> "$TMP/o5"
rc=$?
check "--alignment-layer 9 (exit $rc, want 2), naming the model's layers" expect_rc 2 "$rc" grep -qF -- "--alignment-layer 9 is outside [0, 2) (the model's decoder layers)" "$TMP/o5"
head -1 "$TMP/prefix.txt" > "$TMP/prefix1.txt"
"$TNMT" translate --model "$MODEL" --target-prefix "$TMP/prefix1.txt" < "$TMP/good.txt" > /dev/null 2> "$TMP/o6"
rc=$?
check "a --target-prefix file shorter than the input (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- "--target-prefix has fewer lines than the input" "$TMP/o6"
"$TNMT" translate --model "$MODEL" --repetition-penalty 0 < "$TMP/good.txt" > /dev/null 2> "$TMP/o7"
rc=$?
check "--repetition-penalty 0 (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- "--repetition-penalty must be in (0, 100]" "$TMP/o7"

# --server: the same output contract as local translation, through `tnmt serve`.
"$TNMT" serve --model "$MODEL" --port 0 --http-port 0 --ready-file "$TMP/ready" 2> "$TMP/serve.log" &
SERVER_PID=$!
trap 'kill -KILL $SERVER_PID 2> /dev/null' EXIT
for _ in $(seq 300); do [[ -s "$TMP/ready" ]] || ! kill -0 $SERVER_PID 2> /dev/null && break; sleep 0.1; done
check "server ready" test -s "$TMP/ready"
SERVER="127.0.0.1:$(cut -d' ' -f1 "$TMP/ready" 2> /dev/null)"
"$TNMT" translate --server "$SERVER" < "$TMP/in.txt" > "$TMP/r-out.txt" 2> "$TMP/r-err.txt"
check "remote: exit status 1 when some lines fail" test $? -eq 1
check "remote: output equals local output" cmp -s "$TMP/r-out.txt" "$TMP/out.txt"
check "remote: invalid UTF-8 names input line 3" grep -q "^tnmt translate: input line 3: .*UTF-8" "$TMP/r-err.txt"
check "remote: long line names input line 4" grep -q "^tnmt translate: input line 4: " "$TMP/r-err.txt"
check "  without the request's index" bash -c "! grep -q 'texts\[' '$TMP/r-err.txt'"
"$TNMT" translate --server "$SERVER" --n-best 3 --beam-size 4 < "$TMP/good.txt" > "$TMP/r-nbest.txt"
check "remote: n-best lines as local (numbered from 1, one for the blank line)" \
  test "$(cut -d' ' -f1 "$TMP/r-nbest.txt" | tr '\n' ' ')" = "1 1 1 2 3 3 3 "
"$TNMT" translate --server "$SERVER" --beam-size 99 < "$TMP/good.txt" > /dev/null 2> "$TMP/r-e1"
check "remote: --beam-size 99 is one usage error (exit 2)" test $? -eq 2
check "  naming --beam-size, on one line" test "$(cat "$TMP/r-e1")" = "tnmt translate: --beam-size must be in [1, 64], got 99"
"$TNMT" translate --server "$SERVER" --n-best 5 < "$TMP/good.txt" > /dev/null 2> "$TMP/r-e2"
check "remote: --n-best beyond the served beam is one usage error (exit 2)" test $? -eq 2
check "  naming --n-best" bash -c "[[ \$(wc -l < '$TMP/r-e2') -eq 1 ]] && grep -q -- '--n-best' '$TMP/r-e2'"
"$TNMT" translate --server "$SERVER" --progress --input "$TMP/good.txt" > /dev/null 2> "$TMP/r-p1"
check "remote: --progress draws the bar" grep -q '3/3' "$TMP/r-p1"
"$TNMT" translate --server "$SERVER" --length-penalty-style length --scores < "$TMP/good.txt" > "$TMP/r-lp-length.txt"
check "remote: --length-penalty-style length equals local" cmp -s "$TMP/r-lp-length.txt" "$TMP/lp-length.txt"
"$TNMT" translate --server "$SERVER" --target-prefix "$TMP/prefix.txt" --token-scores --alignments --input "$TMP/good.txt" > "$TMP/r-detail.txt"
check "remote: prefixes, token scores and alignments equal local" cmp -s "$TMP/r-detail.txt" "$TMP/detail.txt"
"$TNMT" translate --server "$SERVER" --no-repeat-ngram-size 2 --repetition-penalty 1.5 --min-length 3 --disable-unk --input "$TMP/good.txt" > "$TMP/r-rules.txt"
check "remote: repetition rules equal local" cmp -s "$TMP/r-rules.txt" "$TMP/rules.txt"
"$TNMT" translate --server "$SERVER" --sampling-topk 0 --seed 9 --input "$TMP/good.txt" > "$TMP/r-sample.txt"
check "remote: sampling with a seed equals local" cmp -s "$TMP/r-sample.txt" "$TMP/sample1.txt"
"$TNMT" translate --server "$SERVER" --alignments --alignment-layer 9 < "$TMP/good.txt" > /dev/null 2> "$TMP/r-o5"
rc=$?
check "remote: --alignment-layer 9 is one usage error (exit $rc, want 2)" expect_rc 2 "$rc" grep -qF -- "--alignment-layer 9 is outside [0, 2)" "$TMP/r-o5"
check "  in the words of the local error" cmp -s "$TMP/r-o5" "$TMP/o5"
# tnmt score: the greedy output scores as translate reported it; served = local; a bad pair keeps
# its place (exit 1); files of different lengths are a usage error.
"$TNMT" translate --model "$MODEL" --beam-size 1 --threads 1 < "$TMP/good.txt" > "$TMP/greedy.txt"
"$TNMT" translate --model "$MODEL" --beam-size 1 --scores --threads 1 < "$TMP/good.txt" > "$TMP/greedy-scores.txt"
"$TNMT" score --model "$MODEL" --source "$TMP/good.txt" --target "$TMP/greedy.txt" --threads 1 --token-scores > "$TMP/score.txt"
check "tnmt score: one line per pair" test "$(wc -l < "$TMP/score.txt")" -eq 3
"$TNMT" score --server "$SERVER" --source "$TMP/good.txt" --target "$TMP/greedy.txt" --token-scores > "$TMP/r-score.txt"
check "tnmt score --server equals local" cmp -s "$TMP/score.txt" "$TMP/r-score.txt"
check "  token scores sum to the score" awk -F' [|][|][|] ' '{ n = split($2, t, " "); s = 0; for (i = 1; i <= n; i++) s += t[i]; if (s - $1 > 1e-3 || $1 - s > 1e-3 || n < 1) exit 1 }' "$TMP/score.txt"
printf 'Das Haus ist rot.\n\xff\nZo\n' > "$TMP/bad-tgt.txt"
"$TNMT" score --server "$SERVER" --source "$TMP/good.txt" --target "$TMP/bad-tgt.txt" > "$TMP/r-bad.txt" 2> "$TMP/r-bad.err"
check "score --server with an invalid target: exit 1" test $? -eq 1
check "  names the line and the target" grep -q "input line 2: target: invalid UTF-8" "$TMP/r-bad.err"
check "  as tnmt score, never tnmt translate" bash -c "grep -q '^tnmt score: input line 2: ' '$TMP/r-bad.err' && grep -q '^tnmt score: 1 line(s) could not be scored' '$TMP/r-bad.err' && ! grep -q 'tnmt translate' '$TMP/r-bad.err'"
check "  the other pairs scored in place" bash -c "[[ \$(wc -l < '$TMP/r-bad.txt') -eq 3 && -z \$(sed -n 2p '$TMP/r-bad.txt') && -n \$(sed -n 3p '$TMP/r-bad.txt') ]]"
head -2 "$TMP/good.txt" > "$TMP/two.txt"
"$TNMT" score --model "$MODEL" --source "$TMP/good.txt" --target "$TMP/two.txt" > /dev/null 2> "$TMP/len.err"
check "score with files of different lengths: exit 2" test $? -eq 2
check "  says which file is longer" grep -q "line 3 is only in --source" "$TMP/len.err"
"$TNMT" jobs list --server "$SERVER" > "$TMP/nojobs.out" 2> "$TMP/nojobs.err"
check "tnmt jobs against a server without --state-dir: exit 1" test $? -eq 1
check "  says the server has no training API (started without --state-dir)" \
  grep -q '^tnmt jobs: the server has no training API .*started without --state-dir' "$TMP/nojobs.err"
"$TNMT" models --server "$SERVER" > "$TMP/models.txt"
check "tnmt models lists the served model by its directory's name" grep -qE '^tiny +ready ' "$TMP/models.txt"
"$TNMT" models --server "$SERVER" --json > "$TMP/models.json"
check "tnmt models --json: one array" bash -c "head -1 '$TMP/models.json' | grep -qx '\[' && tail -1 '$TMP/models.json' | grep -qx '\]'"
check "  64-bit integers as numbers" grep -qE '"parameters":[0-9]+' "$TMP/models.json"
kill -TERM $SERVER_PID
wait $SERVER_PID
check "server stopped cleanly" test $? -eq 0

# A server of two models: `tnmt score --server` without --model-name is one usage error naming
# the flag (not a failure per pair); with it, it scores.
rm -f "$TMP/ready"
"$TNMT" serve --model "tiny=$MODEL,prenorm=$(dirname "$MODEL")/tiny_prenorm" --port 0 --http-port -1 --threads 1 \
  --ready-file "$TMP/ready" 2> "$TMP/serve2.log" &
SERVER_PID=$!
for _ in $(seq 300); do [[ -s "$TMP/ready" ]] || ! kill -0 $SERVER_PID 2> /dev/null && break; sleep 0.1; done
check "two-model server ready" test -s "$TMP/ready"
SERVER="127.0.0.1:$(cut -d' ' -f1 "$TMP/ready" 2> /dev/null)"
"$TNMT" score --server "$SERVER" --source "$TMP/good.txt" --target "$TMP/greedy.txt" > "$TMP/s2.out" 2> "$TMP/s2.err"
check "score --server of two models without --model-name: exit 2" test $? -eq 2
check "  one line: the server serves 2 models; pass --model-name" \
  bash -c "[[ \$(wc -l < '$TMP/s2.err') -eq 1 ]] && grep -q '^tnmt score: the server serves 2 models (prenorm, tiny); pass --model-name NAME' '$TMP/s2.err'"
"$TNMT" score --server "$SERVER" --model-name tiny --source "$TMP/good.txt" --target "$TMP/greedy.txt" > "$TMP/s3.out"
check "  with --model-name tiny it scores as before" cmp -s "$TMP/s3.out" <(cut -d' ' -f1 "$TMP/score.txt")
kill -TERM $SERVER_PID
wait $SERVER_PID
check "two-model server stopped cleanly" test $? -eq 0

# --compute-type int8: local and served translations agree (a sentence's result does not depend
# on its batch), `tnmt models` names the compute type; a bad type is one usage error.
"$TNMT" translate --model "$MODEL" --compute-type int8 --scores --input "$TMP/good.txt" > "$TMP/int8.txt"
check "int8: local translation works" test "$(wc -l < "$TMP/int8.txt")" -eq 3
# Every int8 kernel of this CPU's avx512 and avx2 levels gives the same output and scores: the
# integer sums are exact (AMX where the CPU has it, VNNI with TNMT_NO_AMX=1, AVX2 when capped).
int8_kernel() { env "$@" "$TNMT" --version | sed -n 's/.*int8: \([a-z0-9-]*\).*/\1/p'; }
default_kernel=$(int8_kernel)
seen_kernels=" $default_kernel "
for env in TNMT_NO_AMX=1 TNMT_CPU_ISA=avx2; do
  kernel=$(int8_kernel "$env")
  if [[ $seen_kernels == *" $kernel "* ]]; then
    echo "skip: int8: $env selects kernel ${kernel:-?}, already checked (this CPU has no other int8 level)"
    continue
  fi
  seen_kernels+="$kernel "
  env "$env" "$TNMT" translate --model "$MODEL" --compute-type int8 --scores --input "$TMP/good.txt" > "$TMP/int8-other.txt"
  check "int8: $env (kernel ${kernel:-?}) gives the same output and scores as $default_kernel" \
    cmp -s "$TMP/int8-other.txt" "$TMP/int8.txt"
done
"$TNMT" translate --model "$MODEL" --compute-type int16 < "$TMP/good.txt" > /dev/null 2> "$TMP/ct-err"
check "--compute-type int16: exit 2" test $? -eq 2
check "  naming the flag and the values" grep -qF -- "--compute-type int16: expected float32 or int8" "$TMP/ct-err"
rm -f "$TMP/ready"
"$TNMT" serve --model "$MODEL" --compute-type int8 --port 0 --http-port -1 --ready-file "$TMP/ready" 2> "$TMP/serve8.log" &
SERVER_PID=$!
for _ in $(seq 300); do [[ -s "$TMP/ready" ]] || ! kill -0 $SERVER_PID 2> /dev/null && break; sleep 0.1; done
check "int8 server ready" test -s "$TMP/ready"
SERVER="127.0.0.1:$(cut -d' ' -f1 "$TMP/ready" 2> /dev/null)"
"$TNMT" translate --server "$SERVER" --scores < "$TMP/good.txt" > "$TMP/r-int8.txt"
check "int8: served output and scores equal local int8" cmp -s "$TMP/r-int8.txt" "$TMP/int8.txt"
"$TNMT" models --server "$SERVER" --json > "$TMP/models8.json"
check "int8: ListModels says compute_type int8 on cpu int8" \
  bash -c "grep -q '\"compute_type\":\"int8\"' '$TMP/models8.json' && grep -q '\"device\":\"cpu int8\"' '$TMP/models8.json'"
kill -TERM $SERVER_PID
wait $SERVER_PID
check "int8 server stopped cleanly" test $? -eq 0

# Ensembles: --ensemble adds models with the same vocabulary (tiny_prenorm shares tiny's).
ENSEMBLE="$(dirname "$MODEL")/tiny_prenorm"
"$TNMT" translate --model "$MODEL" --ensemble "$ENSEMBLE" --input "$TMP/good.txt" --scores --threads 1 \
  > "$TMP/ens.txt" 2> "$TMP/ens-err"
check "--ensemble exits 0" test $? -eq 0
check "  one line per input line, the empty one empty" test "$(wc -l < "$TMP/ens.txt")" -eq 3 -a "$(sed -n 2p "$TMP/ens.txt")" = "0.000000 ||| "
"$TNMT" translate --model "$MODEL" --input "$TMP/good.txt" --scores --threads 1 > "$TMP/single.txt"
check "  scores are not the single model's" bash -c "! cmp -s '$TMP/ens.txt' '$TMP/single.txt'"
"$TNMT" translate --model "$MODEL" --ensemble "$ENSEMBLE" --input "$TMP/good.txt" --scores --threads 2 > "$TMP/ens2.txt"
check "  the same on 2 threads" cmp -s "$TMP/ens.txt" "$TMP/ens2.txt"
"$TNMT" score --model "$MODEL" --ensemble "$ENSEMBLE" --source "$TMP/good.txt" --target "$TMP/good.txt" > "$TMP/ens-score.txt" 2>&1
check "score --ensemble exits 0" test $? -eq 0
"$TNMT" translate --model "$MODEL" --ensemble "$TMP/no-such-model" < "$TMP/good.txt" > /dev/null 2> "$TMP/ens-err"
check "--ensemble with a missing directory exits 2" test $? -eq 2
check "  naming the flag and the directory" grep -q -- "--ensemble: .*no-such-model" "$TMP/ens-err"
"$TNMT" translate --model "$MODEL" --ensemble "$ENSEMBLE," < "$TMP/good.txt" > /dev/null 2> "$TMP/ens-err"
check "--ensemble with an empty name exits 2, saying so" bash -c "test $? -eq 2 && grep -q 'empty directory name' '$TMP/ens-err'"
"$TNMT" translate --server localhost:1 --ensemble "$ENSEMBLE" < "$TMP/good.txt" > /dev/null 2> "$TMP/ens-err"
check "--ensemble with --server is refused" grep -q -- "--ensemble applies to local translation" "$TMP/ens-err"

echo "$fails failure(s)"
test "$fails" -eq 0
