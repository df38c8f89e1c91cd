#!/usr/bin/env bash
# Runs one of the Python tests of tests/convert in the build/py-tools virtual environment:
#   run_py_test.sh SCRIPT.py [ARGS...]     (paths relative to the runfiles root)
# The script gets --work DIR (a fresh directory under $TEST_TMPDIR). The environment comes from
# deploy/install-py-tools.sh (build/py-tools, or $TNMT_PY_TOOLS via --test_env); without
# ctranslate2, numpy and sentencepiece there this test fails, it never skips.
set -uo pipefail

# Bazel runs tests in the runfiles tree; its files link back to the source tree, which holds
# build/py-tools.
repo="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
venv="${TNMT_PY_TOOLS:-$repo/build/py-tools}"
py="$venv/bin/python3"
# Checked from / so that nothing in the working directory shadows a module.
if [[ ! -x $py ]] || ! (cd / && "$py" -c 'import ctranslate2, numpy, sentencepiece'); then
  echo "FAIL: the converter test tools are not installed in $venv (ctranslate2, numpy," >&2
  echo "      sentencepiece). Run deploy/install-py-tools.sh (tools/run-tests.sh does) and test again." >&2
  exit 1
fi
script="$1"
shift
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/convert.XXXXXX")"
exec "$py" "$script" "$@" --work "$work"
