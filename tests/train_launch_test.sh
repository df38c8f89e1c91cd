#!/usr/bin/env bash
# `tnmt train --devices cpu,cpu` end to end: two ranks, threads of one process, train
# data-parallel and equal one process accumulating both ranks' batches (fp32 tolerance) and
# `mpirun -np 2` (bit for bit); no worker processes, logs or bootstrap files; SIGTERM makes both
# ranks stop after the same update, write a final checkpoint and exit 0; an error in one rank
# (at setup in rank 1, or a checkpoint rank 0 cannot write while rank 1 waits for it) stops the
# run within seconds with exit 2, naming the rank; flag and environment errors.
set -u
TNMT="$1"
COMPARE="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
# The child processes of process $1 (none expected: ranks are threads).
children() { cat /proc/"$1"/task/*/children 2>/dev/null | tr -d ' \n'; }
wait_for_step() {  # metrics file, step
  for _ in $(seq 300); do grep -q "\"step\":$2," "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

tests/tools/synthetic_corpus.sh 600 7 "$TMP/train.en" "$TMP/train.de"
common=(--train-source "$TMP/train.en" --train-target "$TMP/train.de" --vocab-size 60 --preset tiny
        --max-tokens 256 --warmup-steps 10 --lr-scale 5 --dropout 0 --seed 3 --threads 1
        --valid-every-steps 0 --log-every-steps 2)

# Two CPU ranks, 4 steps.
"$TNMT" train "${common[@]}" --devices cpu,cpu --max-steps 4 --save-every-steps 4 --save-dir "$TMP/two" \
  2> "$TMP/two.log"
check "--devices cpu,cpu exits 0" test $? -eq 0
check "it says it runs 2 ranks in this process, 1 thread each" \
  grep -q "2 data-parallel CPU ranks in this process, 1 compute thread each" "$TMP/two.log"
check "the engine trains 2 ranks" grep -q "training on cpu.*, 2 ranks" "$TMP/two.log"
check "checkpoint step 4 exists" test -f "$TMP/two/step-00000004/model.safetensors"
check "rank 1 ran (its data cache)" test -f "$TMP/two/train.rank1.cache"
check "no worker logs or bootstrap files" bash -c "! ls -a $TMP/two | grep -q 'worker-\|bootstrap'"

# Same data parallelism as one process accumulating both ranks' batches, and as MPI.
spm=(--spm-model "$TMP/two/spm.model" --max-steps 4 --save-every-steps 4)
"$TNMT" train "${common[@]}" "${spm[@]}" --accum-steps 2 --save-dir "$TMP/single" 2> "$TMP/single.log"
check "two workers equal one process with --accum-steps 2 (fp32 tolerance)" \
  "$COMPARE" "$TMP/single/step-00000004" "$TMP/two/step-00000004" 1e-5
if command -v mpirun > /dev/null; then
  # TCP, not shared memory: Open MPI names its shared-memory segments after PIDs, which collide
  # between concurrent runs in Bazel's PID namespaces (a segfault in MPI_Bcast).
  mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp -np 2 "$TNMT" train "${common[@]}" "${spm[@]}" \
    --save-dir "$TMP/mpi" > "$TMP/mpi.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then echo "mpirun exited with $rc:"; tail -20 "$TMP/mpi.log"; fi
  check "two workers equal mpirun -np 2 bit for bit" "$COMPARE" "$TMP/mpi/step-00000004" "$TMP/two/step-00000004" 0
else
  echo "skip: two workers equal mpirun -np 2: mpirun not installed (Debian: openmpi-bin, deploy/install-deps.sh)"
fi

# Time-based checkpoints with two ranks: each rank reads its own clock; the ranks must agree on
# when to save (they did not: one rank saved alone and the collectives desynchronized). The
# interval (60 us) is shorter than any step, so time-based saves do not depend on the machine's
# speed (at 18 ms, a fast machine can run all 12 steps before the first save is due).
"$TNMT" train "${common[@]}" --spm-model "$TMP/two/spm.model" --max-steps 12 --save-every-steps 0 \
  --save-every-minutes 0.000001 --devices cpu,cpu --save-dir "$TMP/timed" 2> "$TMP/timed.log"
check "--save-every-minutes with two ranks exits 0" test $? -eq 0
check "time-based checkpoints were written" bash -c "ls $TMP/timed | grep -c '^step-' | grep -qv '^[01]$'"

# One device: one rank.
"$TNMT" train "${common[@]}" "${spm[@]}" --devices cpu --max-steps 2 --save-dir "$TMP/one" 2> "$TMP/one.log"
check "--devices cpu trains one rank" \
  bash -c "test -d $TMP/one/step-00000002 && ! grep -q 'ranks' $TMP/one.log"

long=(--spm-model "$TMP/two/spm.model" --max-steps 1000000 --save-every-steps 0)

# SIGTERM: both ranks stop after the same update; rank 0 checkpoints; exit 0.
"$TNMT" train "${common[@]}" "${long[@]}" --devices cpu,cpu --save-dir "$TMP/term" 2> "$TMP/term.log" &
pid=$!
wait_for_step "$TMP/term/metrics.jsonl" 6
kids=$(children "$pid")
threads=$(ls /proc/"$pid"/task 2>/dev/null | wc -l)
kill -TERM "$pid"
wait "$pid"
check "SIGTERM: exits 0" test $? -eq 0
check "SIGTERM: a final checkpoint was written" bash -c "ls $TMP/term | grep -q step-"
check "SIGTERM: rank 0 stopped cleanly" grep -q "stop requested" "$TMP/term.log"
check "the ranks were threads of one process (no children; $threads threads)" \
  test -z "$kids" -a "$threads" -ge 2
last=$(ls "$TMP/term" | grep '^step-' | tail -1 | sed 's/^step-0*//')
"$TNMT" train "${common[@]}" --spm-model "$TMP/two/spm.model" --save-every-steps 0 --devices cpu,cpu \
  --max-steps $(( ${last:-0} + 2 )) --save-dir "$TMP/term" 2> "$TMP/term2.log"
check "SIGTERM: the final checkpoint (step ${last:-none}) resumes with two ranks" \
  bash -c "test $? -eq 0 && grep -q 'resumed from step ${last:-none} ' $TMP/term2.log"

# An error in one rank stops the run (exit 2, naming the rank); time-limited, so a rank left
# waiting for a failed peer is a failure, not a hang.
expect_rank_error() {  # what, save dir, expected text
  local start rc elapsed
  start=$(date +%s)
  timeout 60 "$TNMT" train "${common[@]}" "${long[@]}" --save-every-steps 4 --devices cpu,cpu --save-dir "$2" \
    2> "$2.log"
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  check "$1: exit 2 as documented ($rc), within 15 s ($elapsed s)" test "$rc" -eq 2 -a "$elapsed" -le 15
  check "$1: the error names the rank and the cause" grep -qF -- "$3" "$2.log"
}
# Rank 1 fails at setup (its data cache cannot be written) while rank 0 waits for its peers.
mkdir -p "$TMP/fail1/train.rank1.cache"
expect_rank_error "rank 1 fails at setup" "$TMP/fail1" \
  "tnmt train: rank 1: $TMP/fail1/train.rank1.cache: cannot create the data cache"
# Rank 0 alone writes checkpoints: step 4's cannot be installed (a file holds its name) while
# rank 1 waits in the checkpoint's barrier.
mkdir -p "$TMP/fail0"
touch "$TMP/fail0/step-00000004"
expect_rank_error "rank 0 fails mid-run" "$TMP/fail0" "tnmt train: rank 0: $TMP/fail0/step-00000004"
check "rank 0 fails mid-run: after training steps" grep -q '"step":2,' "$TMP/fail0/metrics.jsonl"

# Flag and environment errors (exit 2, naming the flag or variable).
expect_error() {  # what, expected text, args...
  local what="$1" want="$2"; shift 2
  "$@" > "$TMP/err.out" 2> "$TMP/err.log"
  local rc=$?
  check "$what (exit $rc)" bash -c "test $rc -eq 2 && grep -qF -- '$want' $TMP/err.log"
}
expect_error "a device listed twice" "--devices cuda:0,cuda:0: device listed twice" \
  "$TNMT" train "${common[@]}" --save-dir "$TMP/e" --devices cuda:0,cuda:0
expect_error "an unknown device" "--devices gpu:1: expected cpu or cuda[:N]" \
  "$TNMT" train "${common[@]}" --save-dir "$TMP/e" --devices gpu:1
expect_error "cpu and cuda mixed" "--devices cpu,cuda:0: cannot mix cpu and cuda devices" \
  "$TNMT" train "${common[@]}" --save-dir "$TMP/e" --devices cpu,cuda:0
expect_error "--device with --devices" "give --devices or --device, not both" \
  "$TNMT" train "${common[@]}" --save-dir "$TMP/e" --devices cpu,cpu --device cpu
expect_error "a worker rank out of range" "TNMT_RANK=5 is out of range" \
  env TNMT_RANK=5 TNMT_WORLD_SIZE=2 TNMT_BOOTSTRAP_DIR="$TMP" "$TNMT" train "${common[@]}" --save-dir "$TMP/e"
expect_error "a launched worker on a CPU" "TNMT_RANK is set, but launched workers train on GPUs" \
  env TNMT_RANK=1 TNMT_WORLD_SIZE=2 TNMT_BOOTSTRAP_DIR="$TMP" "$TNMT" train "${common[@]}" --save-dir "$TMP/e"
"$TNMT" train "${common[@]}" --save-dir "$TMP/e" --devices cuda:0,1 2> "$TMP/cuda.log"
rc=$?
if grep -q "no CUDA support" "$TMP/cuda.log"; then
  check "CPU build: cuda devices are refused clearly (exit $rc, want 2)" \
    bash -c "test $rc -eq 2 && grep -qF -- '--devices cuda:0,1: this build has no CUDA support; build with --config=cuda' '$TMP/cuda.log'"
else
  # A usage or start-up error naming CUDA, not a crash (a signal's exit status is 128 + N).
  check "CUDA build without GPUs: cuda:0,1 fails cleanly (exit $rc, want 1 or 2), naming CUDA" \
    bash -c "[[ $rc -eq 1 || $rc -eq 2 ]] && grep -qi 'cuda' '$TMP/cuda.log'"
fi

echo "$fails failure(s)"
test "$fails" -eq 0
