#!/usr/bin/env bash
# Runs one of the Python tests of tests/convert in a virtual environment:
#   run_py_test.sh SCRIPT.py [ARGS...]               in build/py-tools
#   run_py_test.sh --venv py-hf SCRIPT.py [ARGS...]  in build/py-hf (transformers over Debian's torch)
#   run_py_test.sh --venv py-client SCRIPT.py [ARGS...]  in build/py-client (grpcio, grpcio-tools:
#                                                     the Python client's build, tests/clients)
# (paths relative to the runfiles root). The script gets --work DIR (a fresh directory under
# $TEST_TMPDIR). The environments come from deploy/install-py-tools.sh (build/py-tools and
# build/py-hf, or $TNMT_PY_TOOLS and $TNMT_PY_HF via --test_env); without the modules a test
# needs there, it fails, it never skips.
set -uo pipefail

# Bazel runs tests in the runfiles tree; its files link back to the source tree, which holds
# build/py-tools and build/py-hf.
repo="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
if [[ ${1:-} == --venv ]]; then
  case "${2:-}" in
    py-hf)
      venv="${TNMT_PY_HF:-$repo/build/py-hf}"
      imports='import torch, numpy, sentencepiece, transformers, safetensors'
      ;;
    py-client)
      venv="${TNMT_PY_CLIENT:-$repo/build/py-client}"
      imports='import grpc, grpc_tools, google.protobuf, setuptools'
      ;;
    *)
      echo "run_py_test.sh: unknown --venv '${2:-}' (known: py-hf, py-client)" >&2
      exit 2
      ;;
  esac
  shift 2
else
  venv="${TNMT_PY_TOOLS:-$repo/build/py-tools}"
  imports='import ctranslate2, numpy, sentencepiece'
fi
py="$venv/bin/python3"
# Checked from / so that nothing in the working directory shadows a module.
if [[ ! -x $py ]] || ! (cd / && "$py" -c "$imports"); then
  echo "FAIL: the test's Python tools are not installed in $venv ($imports)." >&2
  echo "      Run deploy/install-py-tools.sh (tools/run-tests.sh does) and test again." >&2
  exit 1
fi
script="$1"
shift
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pytest.XXXXXX")"
# transformers writes into its cache directory when imported: keep it inside the work directory.
export HF_HOME="$work/hf-home"
exec "$py" "$script" "$@" --work "$work"
