#!/usr/bin/env bash
# `tnmt train --devices cpu,cpu` end to end (the multi-process launcher without a GPU): two
# worker processes train data-parallel through the file collective and equal one process
# accumulating both ranks' batches (fp32 tolerance) and `mpirun -np 2` (bit for bit); rank 1 logs
# to worker-1.log; the bootstrap directory is removed; SIGTERM to the launcher reaches both
# workers, which write a final checkpoint and exit 0; killing one worker makes the launcher stop
# the other and exit non-zero within seconds, naming the rank; flag and environment errors.
set -u
TNMT="$1"
COMPARE="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
# The pid of the launcher's worker with TNMT_RANK=$2 (empty if none).
worker_pid() {
  local c
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    if tr '\0' '\n' < /proc/"$c"/environ 2>/dev/null | grep -qx "TNMT_RANK=$2"; then echo "$c"; return; fi
  done
}
wait_for_step() {  # metrics file, step
  for _ in $(seq 300); do grep -q "\"step\":$2," "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

tests/tools/synthetic_corpus.sh 600 7 "$TMP/train.en" "$TMP/train.de"
common=(--train-source "$TMP/train.en" --train-target "$TMP/train.de" --vocab-size 60 --preset tiny
        --max-tokens 256 --warmup-steps 10 --lr-scale 5 --dropout 0 --seed 3 --threads 1
        --valid-every-steps 0 --log-every-steps 2)

# Two CPU workers, 4 steps.
"$TNMT" train "${common[@]}" --devices cpu,cpu --max-steps 4 --save-every-steps 4 --save-dir "$TMP/two" \
  2> "$TMP/two.log"
check "--devices cpu,cpu exits 0" test $? -eq 0
check "the launcher says it runs 2 workers" grep -q "2 workers on cpu, cpu" "$TMP/two.log"
check "checkpoint step 4 exists" test -f "$TMP/two/step-00000004/model.safetensors"
check "rank 1 ran, logging to worker-1.log" \
  bash -c "grep -q '^==== rank 1 (cpu) started' $TMP/two/worker-1.log && test -f $TMP/two/train.rank1.cache"
check "rank 0 writes to the launcher's stderr, not a log" test ! -e "$TMP/two/worker-0.log"
check "the bootstrap directory is removed" bash -c "! ls -a $TMP/two | grep -q bootstrap"

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

# One device: no launcher.
"$TNMT" train "${common[@]}" "${spm[@]}" --devices cpu --max-steps 2 --save-dir "$TMP/one" 2> "$TMP/one.log"
check "--devices cpu trains in one process" \
  bash -c "test -d $TMP/one/step-00000002 && ! grep -q workers $TMP/one.log && test ! -e $TMP/one/worker-1.log"

long=(--spm-model "$TMP/two/spm.model" --max-steps 1000000 --save-every-steps 0)

# SIGTERM to the launcher: both workers checkpoint and exit 0.
"$TNMT" train "${common[@]}" "${long[@]}" --devices cpu,cpu --save-dir "$TMP/term" 2> "$TMP/term.log" &
pid=$!
wait_for_step "$TMP/term/metrics.jsonl" 6
w1=$(worker_pid "$pid" 1)
kill -TERM "$pid"
wait "$pid"
check "SIGTERM: the launcher exits 0" test $? -eq 0
check "SIGTERM: a final checkpoint was written" bash -c "ls $TMP/term | grep -q step-"
check "SIGTERM: rank 0 stopped cleanly" grep -q "stop requested" "$TMP/term.log"
check "SIGTERM: rank 1 was running and is gone" test -n "$w1" -a ! -e "/proc/${w1:-0}/status"

# kill -9 one worker: the launcher stops the other and fails quickly, naming rank 1.
"$TNMT" train "${common[@]}" "${long[@]}" --devices cpu,cpu --save-dir "$TMP/kill" 2> "$TMP/kill.log" &
pid=$!
wait_for_step "$TMP/kill/metrics.jsonl" 6
w0=$(worker_pid "$pid" 0)
w1=$(worker_pid "$pid" 1)
check "found both workers (${w0:-?}, ${w1:-?})" test -n "$w0" -a -n "$w1"
start=$(date +%s)
kill -9 "${w1:-0}"
wait "$pid"
rc=$?
elapsed=$(( $(date +%s) - start ))
check "killed worker: the launcher exits 2 as documented, not by a signal of its own ($rc)" test "$rc" -eq 2
check "killed worker: within 15 s ($elapsed s)" test "$elapsed" -le 15
check "killed worker: the error names rank 1 and the signal" \
  grep -q "rank 1 (cpu) was killed by signal 9" "$TMP/kill.log"
check "killed worker: rank 0 is gone too" test ! -e "/proc/${w0:-0}/status"

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
