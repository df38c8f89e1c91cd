#!/usr/bin/env bash
# Runs several training recipes side by side for a fixed time, then keeps the best average of
# checkpoints by dev BLEU: a recipe search on one GPU (or a many-core CPU).
#
#   tools/recipe-search.sh OUT_DIR SECONDS NAME='TRAIN FLAGS' [NAME='TRAIN FLAGS' ...]
#
# Each NAME trains `tnmt train TRAIN FLAGS --save-dir OUT_DIR/NAME` (flags word-split; e.g.
# "--config models/recipes/multi30k-small.json --seed 22") for SECONDS, then gets SIGTERM, which
# writes a final checkpoint; a run that reaches its --max-steps earlier just ends. Running the
# script again with the same OUT_DIR resumes every run for another SECONDS. Then every average
# of each run's last K checkpoints (K in $LAST) translates the dev set with the run's decoding
# settings and is scored with sacreBLEU; OUT_DIR/scores.txt lists them best first and
# OUT_DIR/best is the best one as a float16 model directory (averaged.txt there names its
# checkpoints). The test set is never read.
#
# Environment: TNMT (default bazel-bin/tools/tnmt/tnmt), DEVICE (default cpu; e.g. cuda),
# DTYPE (GPU training and dev decoding precision; default float32), DEV_SOURCE and DEV_TARGET
# (default data/multi30k/val.en.gz and val.de.gz; plain or .gz), LAST (default "1 4 8 12"),
# PYTHON (a python3 with sacrebleu; default python3), THREADS (per run; default the cores
# divided among the runs).
set -uo pipefail
usage() { echo "usage: tools/recipe-search.sh OUT_DIR SECONDS NAME='TRAIN FLAGS' ..." >&2; exit 2; }
(($# >= 3)) || usage
out=$1 seconds=$2
shift 2
[[ $seconds =~ ^[0-9]+$ ]] || { echo "recipe-search: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }
tnmt=${TNMT:-bazel-bin/tools/tnmt/tnmt}
device=${DEVICE:-cpu}
dtype=${DTYPE:-float32}
dev_src=${DEV_SOURCE:-data/multi30k/val.en.gz}
dev_ref=${DEV_TARGET:-data/multi30k/val.de.gz}
python=${PYTHON:-python3}
[[ -x $tnmt ]] || { echo "recipe-search: no tnmt binary at $tnmt (bazel build //tools/tnmt, or set TNMT)" >&2; exit 2; }
for f in "$dev_src" "$dev_ref"; do
  [[ -f $f ]] || { echo "recipe-search: no dev file $f (tools/get-multi30k.sh, or set DEV_SOURCE/DEV_TARGET)" >&2; exit 2; }
done
"$python" -c 'import sacrebleu' 2> /dev/null ||
  { echo "recipe-search: $python has no sacrebleu (pip install sacrebleu, or set PYTHON)" >&2; exit 2; }
names=() flags=()
for spec in "$@"; do
  name=${spec%%=*}
  [[ $spec == *=* && $name =~ ^[A-Za-z0-9_.-]+$ ]] ||
    { echo "recipe-search: '$spec' is not NAME='TRAIN FLAGS' (NAME of letters, digits, . _ -)" >&2; exit 2; }
  names+=("$name") flags+=("${spec#*=}")
done
threads=${THREADS:-$(($(nproc) / ${#names[@]}))}
((threads >= 1)) || threads=1
device_flags=(--device "$device")
[[ $device == cpu ]] || device_flags+=(--dtype "$dtype")
mkdir -p "$out"
cat_text() { if [[ $1 == *.gz ]]; then zcat "$1"; else cat "$1"; fi; }
cat_text "$dev_src" > "$out/dev.src"
cat_text "$dev_ref" > "$out/dev.ref"

pids=()
for i in "${!names[@]}"; do
  n=${names[$i]}
  read -r -d '' -a f <<< "${flags[$i]}"
  echo "$n: tnmt train ${flags[$i]} ${device_flags[*]} --threads $threads ($seconds s)"
  timeout -s TERM -k 60 "$seconds" "$tnmt" train "${f[@]}" "${device_flags[@]}" --threads "$threads" \
    --save-dir "$out/$n" >> "$out/$n.log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  rc=$?
  # 124: stopped by SIGTERM at the time limit, after its final checkpoint.
  if ((rc != 0 && rc != 124)); then echo "${names[$i]}: tnmt train failed (exit $rc); last lines of $out/${names[$i]}.log:"; tail -n 3 "$out/${names[$i]}.log"; fi
done

# Every average of each run's last K checkpoints, scored on the dev set.
: > "$out/scores.unsorted"
for n in "${names[@]}"; do
  have=$(ls -d "$out/$n"/step-* 2> /dev/null | wc -l)
  for k in ${LAST:-1 4 8 12}; do
    ((k <= have)) || continue
    m="$out/avg-$n-$k"
    rm -rf "$m"
    "$tnmt" average --checkpoints "$out/$n" --last "$k" --output "$m" > /dev/null 2>> "$out/$n.log" &&
      "$tnmt" translate --model "$m" "${device_flags[@]}" --input "$out/dev.src" --output "$m.hyp" --quiet \
        2>> "$out/$n.log" || { echo "$n: average of the last $k failed (see $out/$n.log)"; continue; }
    bleu=$("$python" -c 'import sys, sacrebleu
h = open(sys.argv[1]).read().splitlines(); r = open(sys.argv[2]).read().splitlines()
print("%.2f" % sacrebleu.corpus_bleu(h, [r]).score)' "$m.hyp" "$out/dev.ref")
    echo "$bleu $n $k" >> "$out/scores.unsorted"
    rm -rf "$m" "$m.hyp"
  done
done
sort -k1,1nr "$out/scores.unsorted" > "$out/scores.txt"
rm -f "$out/scores.unsorted"
echo "dev BLEU (sacreBLEU, $(wc -l < "$out/dev.src") sentences) of the average of each run's last K checkpoints:"
awk '{printf "  %6s  %s, last %s\n", $1, $2, $3}' "$out/scores.txt"
read -r best n k < "$out/scores.txt" || { echo "recipe-search: nothing to score" >&2; exit 1; }
rm -rf "$out/best"
"$tnmt" average --checkpoints "$out/$n" --last "$k" --dtype float16 --output "$out/best" > /dev/null || exit 1
ls -d "$out/$n"/step-* | sort | tail -n "$k" | xargs -n1 basename > "$out/best/averaged.txt"
echo "best: $n, last $k ($best): $out/best"
