#!/usr/bin/env bash
# Every `tnmt` command's --help states exactly one default per flag and never an internal
# placeholder; boolean flags are listed with their --no- form; errors name the flag or the
# environment variable as the user wrote it; `tnmt jobs` takes flags before or after the job
# id and prints nothing but the error when a call fails; `tnmt health` reports a failed call
# on stderr; `tnmt serve` refuses out-of-range ports. Needs no model and no server.
# Usage: cli_help_test.sh TNMT
set -u
TNMT="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}

# help_ok NAME FILE: every flag line of FILE has one "(default", none a placeholder value.
help_ok() {
  local bad
  bad=$(grep -E '^  --' "$2" | awk '{ n = gsub(/\(default/, "&"); if (n != 1) print }')
  [[ -z "$bad" ]] || { echo "  $1: not one default: $bad"; return 1; }
  bad=$(grep -E '^  --' "$2" | grep -E '\(default: -1\)|-1000|\(default: none\) \(default|\(default [^:]')
  [[ -z "$bad" ]] || { echo "  $1: placeholder default: $bad"; return 1; }
  grep -qE '^  --' "$2" || { echo "  $1: no flags listed"; return 1; }
}

for cmd in translate score train average shortlist import export serve health models "jobs submit" "jobs get" "jobs list" "jobs cancel" "jobs watch"; do
  name="${cmd// /-}"
  # shellcheck disable=SC2086
  "$TNMT" $cmd --help > "$TMP/$name.help" 2>&1
  check "tnmt $cmd --help exits 0" test $? -eq 0
  check "tnmt $cmd --help: one real default per flag" help_ok "$cmd" "$TMP/$name.help"
done
check "booleans listed as --[no-]flag (translate)" grep -qF -- '--[no-]scores' "$TMP/translate.help"
check "booleans listed as --[no-]flag (serve)" grep -qF -- '--[no-]continuous-batching' "$TMP/serve.help"
check "booleans listed as --[no-]flag (train)" grep -qF -- '--[no-]valid-bleu' "$TMP/train.help"
check "translate --help lists --quiet and --[no-]progress" \
  bash -c "grep -qF -- '--[no-]quiet' '$TMP/translate.help' && grep -qF -- '--[no-]progress' '$TMP/translate.help'"
check "translate --help says how n-best lines are numbered" grep -q "counting input lines" "$TMP/translate.help"
check "translate --length-penalty's default is the model's" \
  grep -qE -- "--length-penalty .*\(default: the model's config" "$TMP/translate.help"

"$TNMT" --help > "$TMP/top.help"
check "tnmt --help lists models and version" bash -c "grep -q '^  models ' '$TMP/top.help' && grep -q '^  version ' '$TMP/top.help'"
check "tnmt --version prints the version" bash -c "'$TNMT' --version | grep -qE '^tnmt [0-9]+\.[0-9]+\.[0-9]+'"
check "tnmt version prints the same" test "$("$TNMT" version)" = "$("$TNMT" --version)"

check "tnmt --help lists import and export" bash -c "grep -q '^  import ' '$TMP/top.help' && grep -q '^  export ' '$TMP/top.help'"
"$TNMT" import --from onnx somewhere --output "$TMP/x" 2> "$TMP/i1"
check "import --from onnx: exit 2" test $? -eq 2
check "  names --from" grep -qF -- '--from "onnx" is not a layout' "$TMP/i1"
"$TNMT" import --from hf-marian somewhere 2> "$TMP/i2"
check "import without --output: exit 2" test $? -eq 2
check "  names --output" grep -qF -- "--output DIR is required" "$TMP/i2"
"$TNMT" export --to hf-marian --output "$TMP/x" 2> "$TMP/i3"
check "export without a model directory: exit 2" test $? -eq 2
"$TNMT" import --from hf-marian "$TMP/none" --output "$TMP/x" 2> "$TMP/i4"
check "import of a missing directory: exit 1 naming it" bash -c "test $? -eq 1 && grep -qF '$TMP/none: no such directory' '$TMP/i4'"

# Errors name the flag as typed (checked before any model is loaded).
"$TNMT" translate --beam-size 0 < /dev/null 2> "$TMP/e1"
check "--beam-size 0: exit 2" test $? -eq 2
check "  names --beam-size" grep -qF -- "--beam-size must be in [1, 64], got 0" "$TMP/e1"
"$TNMT" translate --length-penalty 11 < /dev/null 2> "$TMP/e2"
check "--length-penalty 11 names --length-penalty" grep -qF -- "--length-penalty must be in [-10, 10], got 11" "$TMP/e2"
"$TNMT" translate --n-best 0 < /dev/null 2> "$TMP/e3"
check "--n-best 0 names --n-best" grep -qF -- "--n-best must be in [1, 64], got 0" "$TMP/e3"
"$TNMT" translate --n-best two < /dev/null 2> "$TMP/e4"
check "--n-best two names --n-best" grep -qF -- '--n-best expects an integer, got "two"' "$TMP/e4"
"$TNMT" translate --beam-size 2 --n-best 3 < /dev/null 2> "$TMP/e5"
check "--n-best above --beam-size names both" grep -qF -- "--n-best 3 exceeds --beam-size 2" "$TMP/e5"
"$TNMT" translate --quiet --progress < /dev/null 2> "$TMP/e6"
check "--quiet with --progress refused (exit 2)" test $? -eq 2
! grep -q 'beam_size\|n_best\|length_penalty' "$TMP"/e[1-5]
check "no engine field names in these errors" test $? -eq 0

# The token file's name is blamed on where it came from.
TNMT_JOBS_TOKEN_FILE="$TMP/no-token" "$TNMT" jobs list --server 127.0.0.1:1 2> "$TMP/t1"
check "TNMT_JOBS_TOKEN_FILE: exit 2" test $? -eq 2
check "  named as the environment variable" grep -qF "TNMT_JOBS_TOKEN_FILE=$TMP/no-token: cannot open" "$TMP/t1"
check "  not as --token-file" bash -c "! grep -q -- '--token-file' '$TMP/t1'"
TNMT_JOBS_TOKEN_FILE="$TMP/no-token" "$TNMT" jobs list --server 127.0.0.1:1 --token-file "$TMP/no-file" 2> "$TMP/t2"
check "--token-file overrides the variable and is named" grep -qF -- "--token-file $TMP/no-file: cannot open" "$TMP/t2"

# `tnmt jobs`: flags before or after the id; a failed call prints only its error.
unset TNMT_JOBS_TOKEN_FILE
"$TNMT" jobs get --server 127.0.0.1:1 --timeout-seconds 2 J1 > "$TMP/g1" 2> "$TMP/g1.err"
check "jobs get --server S ID: the call is made (exit 1, UNAVAILABLE)" \
  bash -c "[[ $? -eq 1 ]] && grep -q UNAVAILABLE '$TMP/g1.err'"
"$TNMT" jobs get J1 --server 127.0.0.1:1 --timeout-seconds 2 > /dev/null 2> "$TMP/g2.err"
check "jobs get ID --server S: the same" grep -q UNAVAILABLE "$TMP/g2.err"
"$TNMT" jobs get J1 J2 --server 127.0.0.1:1 2> "$TMP/g3.err"
check "a second id is refused (exit 2)" bash -c "[[ $? -eq 2 ]] && grep -q 'unexpected argument \"J2\"' '$TMP/g3.err'"
"$TNMT" jobs get --server 127.0.0.1:1 2> "$TMP/g4.err"
check "a missing id is refused (exit 2)" bash -c "[[ $? -eq 2 ]] && grep -q 'needs a job id' '$TMP/g4.err'"
"$TNMT" jobs list --server 127.0.0.1:1 --timeout-seconds 2 > "$TMP/l1" 2> /dev/null
check "jobs list: a failed call exits 1" test $? -eq 1
check "  and prints no table header" test ! -s "$TMP/l1"
"$TNMT" models --server 127.0.0.1:1 --timeout-seconds 2 > "$TMP/m1" 2> "$TMP/m1.err"
check "models: a failed call exits 1 naming the server, nothing on stdout" \
  bash -c "[[ $? -eq 1 && ! -s '$TMP/m1' ]] && grep -q '127.0.0.1:1: UNAVAILABLE' '$TMP/m1.err'"
"$TNMT" health --server 127.0.0.1:1 --timeout-seconds 2 > "$TMP/h1" 2> "$TMP/h1.err"
check "health: a failed call exits non-zero" test $? -ne 0
check "  with nothing on stdout (the error is not a status word)" test ! -s "$TMP/h1"
check "  and the error on stderr, naming the server" grep -q '^tnmt health: 127.0.0.1:1: UNAVAILABLE' "$TMP/h1.err"

# serve: ports out of range are refused naming the flag (not wrapped modulo 65536).
for bad in "--port 99999" "--port -1" "--http-port 131073" "--http-port -2"; do
  flag="${bad%% *}"
  # shellcheck disable=SC2086
  timeout 30 "$TNMT" serve $bad > /dev/null 2> "$TMP/port.err"
  rc=$?
  check "serve $bad: exit 2 naming $flag and the range" \
    bash -c "[[ $rc -eq 2 ]] && grep -qF -- '$flag must be in [0, 65535]' '$TMP/port.err'"
done
check "serve --help gives the port ranges" grep -qE -- '^  --http-port .*0-65535 \(0: any; -1: off\)' "$TMP/serve.help"
check "serve --help: a text too long is INVALID_ARGUMENT, as the server answers" \
  bash -c "grep -E -- '^  --(max-input-length|max-text-bytes) ' '$TMP/serve.help' | grep -c 'beyond: INVALID_ARGUMENT' | grep -qx 2"

echo "$fails failure(s)"
test "$fails" -eq 0
