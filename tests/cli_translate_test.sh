#!/usr/bin/env bash
# End-to-end `tnmt translate` on the tiny golden model: stdin/stdout and files, empty lines,
# invalid UTF-8 and a 10,000-token line (per-line errors naming the line, alignment kept,
# exit 1), n-best and scores formats, bad flags and a missing model (exit 2, clear message).
set -u
TNMT="$1"
MODEL="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}

# Five lines: text, empty, invalid UTF-8, 10,000 tokens, text.
{
  printf 'Das Haus ist rot.\n'
  printf '\n'
  printf 'bad \xff bytes\n'
  for i in $(seq 10000); do printf 'Haus '; done; printf '\n'
  printf 'Zoë sieht den Hund!\n'
} > "$TMP/in.txt"

"$TNMT" translate --model "$MODEL" < "$TMP/in.txt" > "$TMP/out.txt" 2> "$TMP/err.txt"
rc=$?
check "exit status 1 when some lines fail" test "$rc" -eq 1
check "one output line per input line" test "$(wc -l < "$TMP/out.txt")" -eq 5
check "empty line stays empty" test -z "$(sed -n 2p "$TMP/out.txt")"
check "first line translated" test -n "$(sed -n 1p "$TMP/out.txt")"
check "last line translated" test -n "$(sed -n 5p "$TMP/out.txt")"
check "invalid UTF-8 names line 3" grep -q "input line 3: .*UTF-8" "$TMP/err.txt"
check "long line names line 4" grep -q "input line 4: .*maximum input length" "$TMP/err.txt"

# Files in, files out; same result as stdin for the good lines.
printf 'Das Haus ist rot.\n\nZoë sieht den Hund!\n' > "$TMP/good.txt"
"$TNMT" translate --model "$MODEL" --input "$TMP/good.txt" --output "$TMP/good.out" --threads 1
check "file mode exits 0" test $? -eq 0
check "file mode output matches stdin mode" test "$(sed -n 1p "$TMP/good.out")" = "$(sed -n 1p "$TMP/out.txt")"

"$TNMT" translate --model "$MODEL" --n-best 3 --beam-size 4 < "$TMP/good.txt" > "$TMP/nbest.txt"
check "n-best writes 3 lines per input" test "$(wc -l < "$TMP/nbest.txt")" -eq 9
check "n-best format" grep -qE '^2 \|\|\| .* \|\|\| -?[0-9]+\.[0-9]+$' "$TMP/nbest.txt"
"$TNMT" translate --model "$MODEL" --scores --beam-size 1 < "$TMP/good.txt" > "$TMP/scores.txt"
check "scores format" grep -qE '^-[0-9]+\.[0-9]+ \|\|\| ' "$TMP/scores.txt"

"$TNMT" translate --model "$MODEL" --beam-size 0 < /dev/null 2> "$TMP/e1"
check "beam 0 rejected (exit 2)" test $? -eq 2
check "beam 0 message names beam_size" grep -q beam_size "$TMP/e1"
"$TNMT" translate --model "$TMP/missing" < /dev/null 2> "$TMP/e2"
check "missing model exit 2" test $? -eq 2
check "missing model message" grep -q "does not exist" "$TMP/e2"
"$TNMT" translate --model "$MODEL" --bogus 1 < /dev/null 2> "$TMP/e3"
check "unknown flag rejected" grep -q "unknown flag --bogus" "$TMP/e3"
"$TNMT" translate --help > "$TMP/help.txt"
check "--help lists --beam-size" grep -q -- "--beam-size" "$TMP/help.txt"
"$TNMT" translate --model "$MODEL" --device cuda < /dev/null 2> "$TMP/e4"
check "cuda device refused clearly in a CPU build" grep -q "no CUDA support" "$TMP/e4"
"$TNMT" translate --model "$MODEL" --device tpu < /dev/null 2> "$TMP/e5"
check "unknown device names --device" grep -q -- "--device tpu: expected cpu, cuda or cuda:N" "$TMP/e5"
"$TNMT" translate --model "$MODEL" --dtype float16 < /dev/null 2> "$TMP/e6"
check "half precision on the CPU refused" grep -q -- "--dtype float16: the CPU engine computes in float32" "$TMP/e6"

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
check "a missing --input names it" bash -c "grep -q -- '--input $TMP/nope.txt' $TMP/e9"

echo "$fails failure(s)"
test "$fails" -eq 0
