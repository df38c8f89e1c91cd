#!/usr/bin/env bash
# Runs tests/clients/python_client_test.py in build/py-client (grpcio, grpcio-tools and
# protobuf from deploy/py-client-requirements.txt, made by deploy/install-py-tools.sh; or
# $TNMT_PY_CLIENT via --test_env). Without them the test fails, it never skips.
set -uo pipefail
# Bazel runs tests in the runfiles tree; its files link back to the source tree, which holds
# build/py-client.
repo="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
venv="${TNMT_PY_CLIENT:-$repo/build/py-client}"
py="$venv/bin/python3"
imports='import grpc, grpc_tools, google.protobuf, setuptools'
if [[ ! -x $py ]] || ! (cd / && "$py" -c "$imports"); then
  echo "FAIL: the client's build tools are not installed in $venv ($imports)." >&2
  echo "      Run deploy/install-py-tools.sh (tools/run-tests.sh does) and test again." >&2
  exit 1
fi
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/client.XXXXXX")"
exec "$py" tests/clients/python_client_test.py "$@" --work "$work"
