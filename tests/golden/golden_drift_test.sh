#!/usr/bin/env bash
# The committed golden files (tests/golden/data) are what make_golden.py writes: runs the
# generator on a copy of itself in a scratch directory and compares every file byte for byte,
# so that neither the script nor the files can change without the other.
# The output is byte-identical only with Debian 12's torch 1.13 and sentencepiece 0.1.97
# (README.md): with those missing, or other versions, the test prints "SKIPPED: ..." as its
# last line (tools/run-tests.sh counts it as skipped). TNMT_GOLDEN_PYTHON (default
# /usr/bin/python3, Debian's interpreter) picks the interpreter.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"   # runfiles: tests/golden
python=${TNMT_GOLDEN_PYTHON:-/usr/bin/python3}

versions=$(cd / && "$python" -c 'import numpy, sentencepiece, torch
print(torch.__version__.split("+")[0], sentencepiece.__version__)' 2>&1)
if (($? != 0)); then
  echo "$python cannot import torch, sentencepiece and numpy: ${versions##*$'\n'}"
  echo "SKIPPED: no torch (deploy/install-deps.sh installs Debian's python3-torch)"
  exit 0
fi
read -r torch_version spm_version <<< "$versions"
if [[ $torch_version != 1.13.* || $spm_version != 0.1.97 ]]; then
  echo "SKIPPED: make_golden.py's output is byte-identical with torch 1.13 and sentencepiece" \
    "0.1.97 (tests/golden/README.md); $python has torch $torch_version, sentencepiece $spm_version"
  exit 0
fi

gen="${TEST_TMPDIR:-$(mktemp -d)}/golden"
rm -rf "$gen"
mkdir -p "$gen"
cp "$here/make_golden.py" "$gen/"
echo "make_golden.py with torch $torch_version, sentencepiece $spm_version ($python)"
if ! (cd "$gen" && "$python" make_golden.py > "$gen/make_golden.log" 2>&1); then
  tail -20 "$gen/make_golden.log"
  echo "FAIL: make_golden.py failed"
  exit 1
fi

fail=0
committed=$(cd "$here/data" && find -L . -type f | sort)
generated=$(cd "$gen/data" && find . -type f | sort)
if [[ $committed != "$generated" ]]; then
  echo "FAIL: make_golden.py writes other files than tests/golden/data holds:"
  diff <(echo "$committed") <(echo "$generated") | sed -n 's/^[<>]/  &/p'
  fail=1
fi
for f in $committed; do
  [[ -f "$gen/data/$f" ]] || continue
  if cmp -s "$here/data/$f" "$gen/data/$f"; then
    echo "ok: data/${f#./} is what make_golden.py writes ($(stat -L -c %s "$here/data/$f") bytes)"
  else
    echo "FAIL: data/${f#./} differs from what make_golden.py writes: $(cmp "$here/data/$f" "$gen/data/$f" 2>&1 | head -1)"
    fail=1
  fi
done
if ((fail)); then
  echo "The committed golden files and make_golden.py disagree: regenerate with"
  echo "  /usr/bin/python3 tests/golden/make_golden.py"
  echo "and review the difference, or restore the script."
  exit 1
fi
echo "all golden files match make_golden.py"
