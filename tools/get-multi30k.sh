#!/usr/bin/env bash
# Fetches the Multi30k (Task 1) English-German data the demo model and the multi30k recipes are
# trained and scored on: train, val and test_2016_flickr, raw (untokenized) and gzipped, from the
# multi30k/dataset repository at a pinned commit, each file checked against its SHA-256.
#
#   tools/get-multi30k.sh [OUT_DIR]      (default: data/multi30k)
#
# When a local copy of the same files is present at ../shared/data/multi30k (beside this
# checkout), it is copied instead of downloaded, and checked the same way. Files already in
# OUT_DIR with the right checksum are kept. Terms of use: non-commercial research and education
# only (see models/demo/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data/multi30k}"
commit=a3d2e0d26b56f3846f66a952536ffed4e401d05a
base="https://github.com/multi30k/dataset/raw/$commit/data/task1/raw"
local_copy=../shared/data/multi30k
declare -A sha256=(
  [train.en.gz]=d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f
  [train.de.gz]=726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6
  [val.en.gz]=14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28
  [val.de.gz]=f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a
  [test_2016_flickr.en.gz]=611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9
  [test_2016_flickr.de.gz]=9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8
)
ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

mkdir -p "$out"
for f in "${!sha256[@]}"; do
  want="${sha256[$f]}"
  if ok "$out/$f" "$want"; then continue; fi
  if [[ -f "$local_copy/$f" ]]; then
    cp "$local_copy/$f" "$out/$f.part"
  else
    command -v curl > /dev/null || { echo "get-multi30k: needs curl (apt-get install curl)" >&2; exit 1; }
    curl -fsSL --retry 3 -o "$out/$f.part" "$base/$f" || { echo "get-multi30k: cannot download $base/$f" >&2; exit 1; }
  fi
  if ! ok "$out/$f.part" "$want"; then
    echo "get-multi30k: $f: checksum mismatch (want $want); not kept" >&2
    rm -f "$out/$f.part"
    exit 1
  fi
  mv "$out/$f.part" "$out/$f"
done
echo "get-multi30k: ${#sha256[@]} files in $out, checksums verified"
