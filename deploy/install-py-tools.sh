#!/usr/bin/env bash
# Installs the Python tools the tests need into three virtual environments (all git-ignored):
#   build/py-tools  the deploy tests' tools (kubernetes-validate, PyYAML) and the model
#                   converters' (ctranslate2, numpy, sentencepiece), all pinned in
#                   deploy/py-tools-requirements.txt, from PyPI; used by
#                   tests/deploy/validate_manifests_test.sh and tests/convert.
#   build/py-hf     Hugging Face transformers (pinned in deploy/py-hf-requirements.txt, from
#                   PyPI) over Debian's python3-torch, python3-numpy and python3-sentencepiece
#                   (the venv is made with --system-site-packages; the three are installed with
#                   apt when missing); used by tests/convert/hf_marian_test.py.
#   build/py-client grpcio, grpcio-tools and protobuf (pinned in deploy/py-client-requirements.txt,
#                   from PyPI); runs tests/clients/python_client_test.py, which installs the
#                   client itself as its README says (a fresh venv of its own and
#                   `pip install clients/python` with pip's default resolution), so these pins
#                   are not what the client is tested with.
# Idempotent: an environment that already matches its requirements file is left as it is.
# Called by tools/run-tests.sh after deploy/install-deps.sh.
#   deploy/install-py-tools.sh           create or update both
#   TNMT_PY_TOOLS=DIR TNMT_PY_HF=DIR TNMT_PY_CLIENT=DIR deploy/install-py-tools.sh   other
#                                        locations (give the tests the same variables:
#                                        bazel test --test_env=TNMT_PY_TOOLS=DIR ...)
# The base interpreter of build/py-tools is Debian's /usr/bin/python3 when present (as on CI and
# in the build image), else the first python3 on PATH; build/py-hf always uses /usr/bin/python3,
# the interpreter Debian's torch is built for. Debian's Python refuses `pip install --user`
# (PEP 668, externally managed), hence venvs; python3-venv is installed with apt if missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
apt_updated=""
apt_install() {
  echo "install-py-tools: installing $* (apt)"
  export DEBIAN_FRONTEND=noninteractive
  if [[ -z $apt_updated ]]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

# up_to_date VENV REQS IMPORTS: the venv exists, was made from REQS as they are now, and imports.
up_to_date() {
  local venv="$1" reqs="$2" imports="$3"
  [[ -x "$venv/bin/python3" && -f "$venv/.requirements.sha256" &&
     "$(cat "$venv/.requirements.sha256")" == "$(sha256sum "$reqs" | cut -d' ' -f1)" ]] &&
    (cd / && "$venv/bin/python3" -c "$imports") 2>/dev/null
}

# plain_venv VENV REQS IMPORTS: a venv over Debian's python3 (else the first python3 on PATH)
# with REQS installed from PyPI, unless it is up to date.
plain_venv() {
  local venv="$1" reqs="$2" imports="$3" python
  if up_to_date "$venv" "$reqs" "$imports"; then
    echo "install-py-tools: $venv is up to date"
    return 0
  fi
  python=/usr/bin/python3
  [[ -x $python ]] || python="$(command -v python3 || true)"
  if [[ -z $python ]] || ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    apt_install python3 python3-venv
    python=/usr/bin/python3
  fi
  if [[ ! -x "$venv/bin/python3" ]]; then
    echo "install-py-tools: creating $venv with $python ($("$python" --version 2>&1))"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
  fi
  echo "install-py-tools: pip install -r ${reqs#"$root"/}"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --no-input -r "$reqs"
  (cd / && "$venv/bin/python3" -c "$imports") # fails loudly if the install did not work
  sha256sum "$reqs" | cut -d' ' -f1 > "$venv/.requirements.sha256"
  echo "install-py-tools: $venv ready"
}

# ---- build/py-tools and build/py-client ---------------------------------------------------
plain_venv "${TNMT_PY_TOOLS:-$root/build/py-tools}" "$root/deploy/py-tools-requirements.txt" \
  'import kubernetes_validate, yaml, ctranslate2, numpy, sentencepiece'
plain_venv "${TNMT_PY_CLIENT:-$root/build/py-client}" "$root/deploy/py-client-requirements.txt" \
  'import grpc, grpc_tools, google.protobuf, setuptools'

# ---- build/py-hf --------------------------------------------------------------------------
venv="${TNMT_PY_HF:-$root/build/py-hf}"
reqs="$root/deploy/py-hf-requirements.txt"
imports='import torch, numpy, sentencepiece, transformers, tokenizers, safetensors
from transformers import MarianMTModel, MarianConfig, MarianTokenizer'
if up_to_date "$venv" "$reqs" "$imports"; then
  echo "install-py-tools: $venv is up to date"
  exit 0
fi
python=/usr/bin/python3
debian='import ensurepip, venv, torch, numpy, sentencepiece'
if [[ ! -x $python ]] || ! (cd / && "$python" -c "$debian") 2>/dev/null; then
  apt_install python3 python3-venv python3-torch python3-numpy python3-sentencepiece
fi
(cd / && "$python" -c "$debian") # fails loudly if Debian's packages are still not importable
# A venv made without --system-site-packages (or by another interpreter) is made anew.
if [[ ! -x "$venv/bin/python3" ]] || ! grep -qx 'include-system-site-packages = true' \
     "$venv/pyvenv.cfg" 2>/dev/null ||
   [[ "$("$venv/bin/python3" -c 'import os, sys; print(os.path.realpath(sys._base_executable))' \
        2>/dev/null)" != "$(readlink -f "$python")" ]]; then
  echo "install-py-tools: creating $venv with $python ($("$python" --version 2>&1)), system site packages"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv --system-site-packages "$venv"
fi
echo "install-py-tools: pip install --no-deps -r deploy/py-hf-requirements.txt"
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
  -r "$reqs"
(cd / && "$venv/bin/python3" -c "$imports") # fails loudly if the install did not work
sha256sum "$reqs" | cut -d' ' -f1 > "$venv/.requirements.sha256"
echo "install-py-tools: $venv ready ($(cd / && "$venv/bin/python3" -c 'import torch, transformers, numpy; print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {numpy.__version__}")'))"
