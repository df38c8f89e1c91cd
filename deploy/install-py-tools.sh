#!/usr/bin/env bash
# Installs the Python tools the deploy tests need (kubernetes-validate, PyYAML) and the model
# converters need (ctranslate2, numpy, sentencepiece; all pinned in
# deploy/py-tools-requirements.txt) from PyPI into a virtual environment at build/py-tools
# (git-ignored), where tests/deploy/validate_manifests_test.sh and tests/convert look for it.
# Idempotent: when the environment already matches the requirements file it does nothing.
# Called by tools/run-tests.sh after deploy/install-deps.sh.
#   deploy/install-py-tools.sh           create or update build/py-tools
#   TNMT_PY_TOOLS=DIR deploy/install-py-tools.sh   another location (give the test the same
#                                        variable: bazel test --test_env=TNMT_PY_TOOLS=DIR)
# The base interpreter is Debian's /usr/bin/python3 when present (as on CI and in the build
# image), else the first python3 on PATH. Debian's Python refuses `pip install --user`
# (PEP 668, externally managed), hence a venv; python3-venv is installed with apt if missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TNMT_PY_TOOLS:-$root/build/py-tools}"
reqs="$root/deploy/py-tools-requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
imports='import kubernetes_validate, yaml, ctranslate2, numpy, sentencepiece'

if [[ -x "$venv/bin/python3" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] &&
   "$venv/bin/python3" -c "$imports" 2>/dev/null; then
  echo "install-py-tools: $venv is up to date"
  exit 0
fi

python=/usr/bin/python3
[[ -x $python ]] || python="$(command -v python3 || true)"
if [[ -z $python ]] || ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "install-py-tools: installing python3 python3-venv (apt)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3 python3-venv
  python=/usr/bin/python3
fi

if [[ ! -x "$venv/bin/python3" ]]; then
  echo "install-py-tools: creating $venv with $python ($("$python" --version 2>&1))"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
echo "install-py-tools: pip install -r deploy/py-tools-requirements.txt"
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --no-input -r "$reqs"
"$venv/bin/python3" -c "$imports" # fails loudly if the install did not work
echo "$want" > "$stamp"
echo "install-py-tools: $venv ready (kubernetes-validate $("$venv/bin/python3" -c 'from kubernetes_validate.version import __version__ as v; print(v)'), ctranslate2 $("$venv/bin/python3" -c 'import ctranslate2; print(ctranslate2.__version__)'))"
