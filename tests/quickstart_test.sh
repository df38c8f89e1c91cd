#!/usr/bin/env bash
# The README's first command, minus install and build (Bazel built the binary): the
# quickstart starts `tnmt serve` with the bundled demo model (no --model flag), translates the
# sample sentences through the server, and shuts it down cleanly (--once).
# Usage: quickstart_test.sh TNMT
set -u
TNMT="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
fails=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
out="${TEST_TMPDIR:-$(mktemp -d)}/quickstart.out"
TNMT_BIN="$TNMT" PORT=0 HTTP_PORT=0 timeout 300 tools/quickstart.sh --once > "$out" 2>&1
rc=$?
cat "$out"
check "quickstart --once exits 0" test $rc -eq 0
check "the server served the bundled demo model" grep -q 'loading 1 model' "$out"
check "three translations came back" test "$(grep -c ' ||| ' "$out")" -eq 3
# A real English->German model: the samples' key nouns come out in German.
check "'A man ...' -> 'Mann'" grep -q 'Mann' "$out"
check "'Two dogs ...' -> 'Hunde'" grep -q 'Hunde' "$out"
check "the server stopped cleanly" grep -q 'server stopped cleanly' "$out"
exit $((fails > 0))
