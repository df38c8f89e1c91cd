#!/usr/bin/env bash
# Installs the Python side of the throughput benchmark (bench/ct2_peer.py): CTranslate2, the
# peer engine we compare against, and numpy (pulled in by ctranslate2). Uses the same
# interpreter as bench/run_translate_bench.sh: $PYTHON, default the pyenv python3 on PATH
# (Debian's /usr/bin/python3 is "externally managed" and refuses pip installs).
set -euo pipefail
PYTHON="${PYTHON:-$(command -v python3)}"
echo "installing ctranslate2 into: $PYTHON ($("$PYTHON" --version 2>&1))"
"$PYTHON" -m pip install --upgrade "ctranslate2>=4,<5" numpy
"$PYTHON" -c 'import ctranslate2, numpy; print("ctranslate2", ctranslate2.__version__, "numpy", numpy.__version__)'
