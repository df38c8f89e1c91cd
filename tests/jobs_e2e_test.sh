#!/usr/bin/env bash
# Training jobs end to end on 127.0.0.1: `tnmt serve --state-dir` with the `tnmt jobs` client.
#   a. refusals: no token / wrong token UNAUTHENTICATED, ".." INVALID_ARGUMENT, a symlink out of
#      the data root PERMISSION_DENIED, a missing file NOT_FOUND, an oversize spec
#      RESOURCE_EXHAUSTED, a served model's name ALREADY_EXISTS, a broken spec file exit 2;
#   b. a tiny job submitted and watched to SUCCEEDED; the server then translates with the
#      published model (bench/serve_load), and so does `tnmt translate` on its directory;
#   c. one job runs per device while the next waits QUEUED; the unfinished-jobs limit is
#      RESOURCE_EXHAUSTED; a queued job cancels at once; a running job cancelled: CANCELLED,
#      its trainer gone, a final checkpoint written;
#   d. kill -9 of the server mid-job, restart: the job resumes (attempt 2) and publishes a
#      model bit-identical to the uninterrupted run of (b);
#      A job with on_interrupt FAIL is failed by the restart instead, naming the interruption;
#   e. SIGTERM with a job running and a watch open: exit 0 promptly, the watch ends UNAVAILABLE,
#      the job goes back to the queue and the next start resumes it;
#   f. the store survives every restart (jobs list) and published models are served again;
#   g. three SIGTERM/restart cycles of a server computing on two threads while a job trains:
#      the runner never hangs starting the trainer, the job finishes, SIGTERM always stops it.
# Usage: jobs_e2e_test.sh TNMT SERVE_LOAD COMPARE_MODELS SPM_MODEL
set -u
TNMT="$1"
LOAD="$2"
COMPARE="$3"
SPM="$4"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; }
trap cleanup EXIT

DATA="$TMP/data"
STATE="$TMP/state"
mkdir -p "$DATA/corpus" "$STATE"
cp "$SPM" "$DATA/spm.model"
tests/tools/synthetic_corpus.sh 400 11 "$DATA/corpus/train.en" "$DATA/corpus/train.de"
head -10 "$DATA/corpus/train.en" > "$DATA/corpus/dev.en"
head -10 "$DATA/corpus/train.de" > "$DATA/corpus/dev.de"
echo "outside the data root" > "$TMP/secret.txt"
ln -s "$TMP/secret.txt" "$DATA/corpus/escape.de"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TMP/token"
echo "not-the-token-0123456789" > "$TMP/wrong-token"

# spec NAME MODEL MAX_STEPS [SAVE_EVERY]: a job spec on the synthetic corpus.
spec() {
  cat << EOF
{"name": "$1", "data": {"train_source": "corpus/train.en", "train_target": "corpus/train.de",
  "valid_source": "corpus/dev.en", "valid_target": "corpus/dev.de", "source_language": "en", "target_language": "de"},
 "vocabulary": {"spm_model": "spm.model"},
 "model": {"preset": "tiny", "dropout": 0.1},
 "schedule": {"max_tokens": 256, "warmup_steps": 10, "lr_scale": 5, "seed": 3, "save_every_steps": ${4:-4},
              "valid_every_steps": ${4:-4}, "valid_max_sentences": 5},
 "stop": {"max_steps": $3}, "device": {"threads": 1}, "publish": {"model_name": "$2", "average_last": 3}}
EOF
}

# start_server LOG: starts `tnmt serve` with the job service; sets SERVER_PID and PORT.
start_server() {
  rm -f "$TMP/ready"
  "$TNMT" serve --model tiny=tests/golden/data/tiny --host 127.0.0.1 --port 0 --http-port 0 --threads 1 \
    --ready-file "$TMP/ready" --state-dir "$STATE" --data-root "$DATA" --jobs-token-file "$TMP/token" \
    --job-threads 1 --max-unfinished-jobs 3 --grace-seconds 20 2>> "$TMP/$1" &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  for _ in $(seq 300); do [[ -s "$TMP/ready" ]] && break; sleep 0.1; done
  PORT=$(cut -d' ' -f1 "$TMP/ready" 2> /dev/null)
  HTTP_PORT=$(cut -d' ' -f2 "$TMP/ready" 2> /dev/null)
}
jobs_cmd() { "$TNMT" jobs "$@" --server "127.0.0.1:$PORT" --token-file "$TMP/token"; }
field() {  # field JOB KEY: one field of `tnmt jobs get --json`
  jobs_cmd get "$1" --json | sed -n "s/.*\"$2\":\"\{0,1\}\([^\",}]*\)\"\{0,1\}.*/\1/p"
}
wait_step() {  # wait_step JOB STEP SECONDS: until the job reported at least STEP
  local i
  for i in $(seq $(($3 * 5))); do
    [[ "$(field "$1" step)" -ge "$2" ]] 2> /dev/null && return 0
    sleep 0.2
  done
  return 1
}
wait_field() {  # wait_field JOB KEY VALUE SECONDS
  local i
  for i in $(seq $(($4 * 5))); do
    [[ "$(field "$1" "$2")" == "$3" ]] && return 0
    sleep 0.2
  done
  return 1
}
refused() {  # refused CODE ARGS...: `tnmt jobs ARGS` fails naming CODE
  local code="$1"; shift
  "$TNMT" jobs "$@" > "$TMP/out" 2> "$TMP/err"
  local rc=$?
  [[ $rc -ne 0 ]] && grep -q "$code" "$TMP/err" || { echo "  got rc $rc: $(cat "$TMP/err")"; return 1; }
}

start_server server1.log
check "server with the job service becomes ready" test -n "$PORT"

# a. Refusals.
spec ok-name m1 4 > "$TMP/ok.json"
check "no token: UNAUTHENTICATED" refused UNAUTHENTICATED list --server "127.0.0.1:$PORT"
check "wrong token: UNAUTHENTICATED" refused UNAUTHENTICATED list --server "127.0.0.1:$PORT" --token-file "$TMP/wrong-token"
check "no token cannot watch" refused UNAUTHENTICATED watch job-000001 --server "127.0.0.1:$PORT"
check "wrong token cannot submit" refused UNAUTHENTICATED submit --spec "$TMP/ok.json" --server "127.0.0.1:$PORT" --token-file "$TMP/wrong-token"
sed 's|"corpus/train.en"|"../secret.txt"|' "$TMP/ok.json" > "$TMP/dotdot.json"
check "'..' in a path: INVALID_ARGUMENT" refused INVALID_ARGUMENT submit --spec "$TMP/dotdot.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
sed 's|"corpus/train.de"|"corpus/escape.de"|' "$TMP/ok.json" > "$TMP/escape.json"
check "symlink out of the data root: PERMISSION_DENIED" refused PERMISSION_DENIED submit --spec "$TMP/escape.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
sed 's|"corpus/train.en"|"/etc/passwd"|' "$TMP/ok.json" > "$TMP/abs.json"
check "absolute path outside: PERMISSION_DENIED" refused PERMISSION_DENIED submit --spec "$TMP/abs.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
sed 's|"corpus/train.en"|"corpus/nope.en"|' "$TMP/ok.json" > "$TMP/missing.json"
check "missing data file: NOT_FOUND" refused NOT_FOUND submit --spec "$TMP/missing.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
big=$(head -c 100000 /dev/zero | tr '\0' 'x')
sed "s|\"source_language\": \"en\"|\"source_language\": \"$big\"|" "$TMP/ok.json" > "$TMP/big.json"
check "oversize spec: RESOURCE_EXHAUSTED" refused RESOURCE_EXHAUSTED submit --spec "$TMP/big.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
spec clash tiny 4 > "$TMP/clash.json"
check "publishing over a served model: ALREADY_EXISTS" refused ALREADY_EXISTS submit --spec "$TMP/clash.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
echo '{"name": "x", "stop": {"max_steps": "many"}}' > "$TMP/garbage.json"
"$TNMT" jobs submit --spec "$TMP/garbage.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token" 2> "$TMP/err"
check "unparsable spec file: exit 2 naming the field" bash -c "[[ $? -eq 2 ]] && grep -q max_steps $TMP/err"
check "unknown job: NOT_FOUND" refused NOT_FOUND get job-999999 --server "127.0.0.1:$PORT" --token-file "$TMP/token"
check "nothing was stored by the refusals (list --json: [])" bash -c "[[ \$('$TNMT' jobs list --json --server 127.0.0.1:$PORT --token-file $TMP/token) == '[]' ]]"

# b. A tiny job to completion, then translate with its model.
spec straight a 200 50 > "$TMP/a.json"
A=$(jobs_cmd submit --spec "$TMP/a.json" --request-id straight-1)
check "submit prints a job id ($A)" test -n "$A"
A2=$(jobs_cmd submit --spec "$TMP/a.json" --request-id straight-1)
check "a retried submit with the same request id returns the same job" test "$A" = "$A2"
sed 's/"seed": 3/"seed": 4/' "$TMP/a.json" > "$TMP/a-other.json"
check "the same request id with a different spec: ALREADY_EXISTS" refused ALREADY_EXISTS submit --spec "$TMP/a-other.json" --request-id straight-1 --server "127.0.0.1:$PORT" --token-file "$TMP/token"
jobs_cmd watch "$A" > "$TMP/watch-a.txt"
check "watch ends 0 when the job succeeds" test $? -eq 0
check "watch showed RUNNING and SUCCEEDED" bash -c "grep -q RUNNING $TMP/watch-a.txt && grep -q SUCCEEDED $TMP/watch-a.txt"
check "watch writes no line twice in a row (stdout not a terminal)" bash -c "[[ -z \$(uniq -d $TMP/watch-a.txt) ]]"
check "job a published as model 'a'" test "$(field "$A" published_model)" = a
check "job a reached step 200" test "$(field "$A" step)" = 200
check "its dev BLEU carries the sacreBLEU signature and the sentence count" \
  bash -c "[[ '$(field "$A" dev_bleu_signature)' == 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0|sentences:5' ]]"
check "the server translates with the published model" \
  "$LOAD" --target "127.0.0.1:$PORT" --model a --clients 1 --requests 3 --json
printf 'the man runs\n' | "$TNMT" translate --model "$STATE/models/a" > "$TMP/a.out" 2> /dev/null
check "the published directory translates offline" test -s "$TMP/a.out"
check "the published model records its job" grep -q "\"job_id\": \"$A\"" "$STATE/models/a/job.json"
"$TNMT" models --server "127.0.0.1:$PORT" > "$TMP/models-a.txt"
check "ListModels reports the spec's languages for the published model (en-de)" grep -qE '^a +ready +en-de ' "$TMP/models-a.txt"
printf 'the man runs\n' | "$TNMT" translate --server "127.0.0.1:$PORT" > "$TMP/default.out" 2> "$TMP/default.err"
check "a request naming no model still gets the configured one after a job published another" \
  bash -c "[[ \$? -eq 0 && -s $TMP/default.out ]] || { cat $TMP/default.err; false; }"
long=$(head -c 16000 /dev/zero | tr '\0' m)
printf 'the man runs\n' | "$TNMT" translate --server "127.0.0.1:$PORT" --model-name "$long" > /dev/null 2> "$TMP/long.err"
check "a 16,000-character model name: NOT_FOUND with a bounded message" \
  bash -c "grep -q NOT_FOUND $TMP/long.err && grep -q '(16000 bytes)' $TMP/long.err && [[ \$(wc -c < $TMP/long.err) -lt 2000 ]]"
"$TNMT" jobs get "job-$(head -c 100000 /dev/zero | tr '\0' 7)" --server "127.0.0.1:$PORT" --token-file "$TMP/token" 2> "$TMP/longid.err"
check "a 100,000-character job id: NOT_FOUND with a bounded message" \
  bash -c "grep -q NOT_FOUND $TMP/longid.err && grep -q '(100004 bytes)' $TMP/longid.err && [[ \$(wc -c < $TMP/longid.err) -lt 2000 ]]"

# c. Cancel a running job.
spec long b 100000 1000 > "$TMP/b.json"
B=$(jobs_cmd submit --spec "$TMP/b.json")
check "long job starts running" wait_step "$B" 4 120
X=$(jobs_cmd submit --spec "$TMP/b.json")
Y=$(jobs_cmd submit --spec "$TMP/b.json")
check "one job runs per device; the next waits QUEUED" test "$(field "$X" state)" = JOB_STATE_QUEUED
check "a fourth unfinished job: RESOURCE_EXHAUSTED" refused RESOURCE_EXHAUSTED submit --spec "$TMP/b.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token"
jobs_cmd cancel "$Y" > /dev/null
check "a queued job cancels at once" test "$(field "$Y" state)" = JOB_STATE_CANCELLED
jobs_cmd cancel "$B" > /dev/null
jobs_cmd watch "$B" > "$TMP/watch-b.txt"
check "watch of a cancelled job exits 1" test $? -eq 1
check "cancelled job is CANCELLED" test "$(field "$B" state)" = JOB_STATE_CANCELLED
check "its trainer is gone" bash -c "! pgrep -f '[j]obs/$B/train_config.json' > /dev/null"
check "SIGTERM made it write a final checkpoint" bash -c "ls $STATE/jobs/$B/train | grep -q step-"
check "the queued job starts once the device is free" wait_field "$X" state JOB_STATE_RUNNING 30
jobs_cmd cancel "$X" > /dev/null
check "job x cancelled" wait_field "$X" state JOB_STATE_CANCELLED 30
check "cancelling a finished job: FAILED_PRECONDITION" refused FAILED_PRECONDITION cancel "$B" --server "127.0.0.1:$PORT" --token-file "$TMP/token"

# d. kill -9 the server mid-job; restart resumes it; same result as the straight run.
spec killed c 200 50 > "$TMP/c.json"  # the schedule of job a
C=$(jobs_cmd submit --spec "$TMP/c.json")
# Its trainer is held (SIGSTOP) the moment its first checkpoint appears, until the crash: polling
# the job's reported step through `tnmt jobs get` was slow enough under load for the trainer to
# finish all 200 steps before the kill (it then never resumed, and job e was the one interrupted).
first_checkpoint() {
  local i
  for i in $(seq 12000); do
    [[ -d "$STATE/jobs/$C/train/step-00000050" ]] && pkill -STOP -f "[j]obs/$C/train_config.json" && return 0
    sleep 0.01
  done
  return 1
}
check "job c passes its first checkpoint" first_checkpoint
check "  and is held mid-run" test "$(field "$C" state)" = JOB_STATE_RUNNING
spec fragile e 100000 1000 | sed 's/"stop"/"on_interrupt": "ON_INTERRUPT_FAIL", "stop"/' > "$TMP/e.json"
E=$(jobs_cmd submit --spec "$TMP/e.json")
kill -KILL "$SERVER_PID"; wait "$SERVER_PID" 2> /dev/null
sleep 0.5
check "the trainer died with the server" bash -c "! pgrep -f '[j]obs/$C/train_config.json' > /dev/null"
start_server server2.log
check "restarted server is ready" test -n "$PORT"
jobs_cmd watch "$C" > "$TMP/watch-c.txt"
check "the interrupted job finishes after the restart" test $? -eq 0
check "a job that never ran is unaffected by the crash (on_interrupt FAIL)" wait_field "$E" state JOB_STATE_RUNNING 30
kill -KILL "$SERVER_PID"; wait "$SERVER_PID" 2> /dev/null
start_server server2b.log
check "on_interrupt FAIL: a crash mid-run fails the job" test "$(field "$E" state)" = JOB_STATE_FAILED
check "  naming the interruption" bash -c "'$TNMT' jobs get $E --server 127.0.0.1:$PORT --token-file $TMP/token | grep -q 'interrupted'"
check "it took a second attempt" test "$(field "$C" attempts)" = 2
check "resumed from a checkpoint, not from scratch" grep -q "resumed from step" "$STATE/jobs/$C/train.log"
check "interrupted + resumed model equals the straight run bit for bit" "$COMPARE" "$STATE/models/a" "$STATE/models/c" 0

# e. SIGTERM with a running job: back to the queue, resumed by the next start.
spec drained d 100000 1000 > "$TMP/d.json"
D=$(jobs_cmd submit --spec "$TMP/d.json")
check "job d runs" wait_step "$D" 2 120
jobs_cmd watch "$D" > "$TMP/watch-d.txt" 2> "$TMP/watch-d.err" &
watcher=$!
sleep 0.5
t0=$(date +%s)
kill -TERM "$SERVER_PID"; wait "$SERVER_PID"
check "SIGTERM with a running job exits 0" test $? -eq 0
check "  promptly, not held by the open watch ($(( $(date +%s) - t0 )) s)" test $(( $(date +%s) - t0 )) -lt 15
wait "$watcher"
check "the open watch ends with UNAVAILABLE" grep -q UNAVAILABLE "$TMP/watch-d.err"
check "the trainer was stopped" bash -c "! pgrep -f '[j]obs/$D/train_config.json' > /dev/null"
start_server server3.log
check "server ready after the drain" test -n "$PORT"
check "  its log counts the published models it loads (tiny, a, c: 3)" grep -q 'loading 3 model(s)' "$TMP/server3.log"
check "job d runs again, on its second attempt" wait_field "$D" attempts 2 30
check "  (state RUNNING)" test "$(field "$D" state)" = JOB_STATE_RUNNING
jobs_cmd cancel "$D" > /dev/null
jobs_cmd watch "$D" > /dev/null

# f. The store and the published models survived every restart.
jobs_cmd list > "$TMP/list.txt"
check "list shows every job with its final state" bash -c "grep -q '$A .*SUCCEEDED' $TMP/list.txt && grep -q '$B .*CANCELLED' $TMP/list.txt && grep -q '$C .*SUCCEEDED' $TMP/list.txt && grep -q '$D .*CANCELLED' $TMP/list.txt"
check "list filters by state" bash -c "[[ \$('$TNMT' jobs list --state SUCCEEDED --json --server 127.0.0.1:$PORT --token-file $TMP/token | grep -c '^{\"id\":') -eq 2 ]]"
curl -s "http://127.0.0.1:$HTTP_PORT/metrics" > "$TMP/metrics.txt"
check "/metrics counts jobs by state" bash -c "grep -q '^tnmt_training_jobs{state=\"SUCCEEDED\"} 2' $TMP/metrics.txt && grep -q '^tnmt_training_jobs{state=\"CANCELLED\"} 4' $TMP/metrics.txt && grep -q '^tnmt_training_jobs{state=\"FAILED\"} 1' $TMP/metrics.txt"
check "published models are served after restarts" \
  "$LOAD" --target "127.0.0.1:$PORT" --model a --clients 1 --requests 2 --json
kill -TERM "$SERVER_PID"; wait "$SERVER_PID"
check "final SIGTERM exits 0" test $? -eq 0

# g. Restarts while a job runs and the engine computes: a server with two compute threads
#    serving the demo model on the portable kernels (the path of CPUs without AVX2), its
#    start-up warm-up computing while the runner restarts the interrupted job. Starting the
#    trainer must never hang the runner (fork() in this multi-threaded process once blocked
#    forever in OpenBLAS's atfork handler while the engine's GEMMs ran on OpenBLAS's threads:
#    the job stayed QUEUED, submits timed out and SIGTERM no longer stopped the server; the
#    runner now uses posix_spawn). Three SIGTERM and restart cycles, then the job finishes;
#    every SIGTERM stops the server promptly.
start_busy_server() {  # as start_server, with the demo model, two compute threads, portable kernels
  rm -f "$TMP/ready"
  TNMT_CPU_ISA=portable "$TNMT" serve --model "tiny=tests/golden/data/tiny,demo=models/demo" --host 127.0.0.1 --port 0 --http-port 0 \
    --threads 2 --ready-file "$TMP/ready" --state-dir "$STATE" --data-root "$DATA" --jobs-token-file "$TMP/token" \
    --job-threads 1 --max-unfinished-jobs 3 --grace-seconds 20 2>> "$TMP/$1" &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  for _ in $(seq 300); do [[ -s "$TMP/ready" ]] && break; sleep 0.1; done
  PORT=$(cut -d' ' -f1 "$TMP/ready" 2> /dev/null)
}
spec restarted g 3000 100 > "$TMP/g.json"
start_busy_server server4.log
check "busy server ready" test -n "$PORT"
G=$(jobs_cmd submit --spec "$TMP/g.json")
for cycle in 1 2 3; do
  check "cycle $cycle: job g runs (attempt $cycle)" wait_field "$G" attempts "$cycle" 60
  check "cycle $cycle:   and trains (step $(field "$G" step))" wait_step "$G" $((cycle * 100 + 10)) 120
  "$LOAD" --target "127.0.0.1:$PORT" --model demo --clients 2 --requests 6 --json > /dev/null 2>&1 &
  load=$!
  sleep 1
  t0=$(date +%s)
  kill -TERM "$SERVER_PID"
  for _ in $(seq 300); do kill -0 "$SERVER_PID" 2> /dev/null || break; sleep 0.1; done
  check "cycle $cycle: SIGTERM stops the server within 30 s ($(( $(date +%s) - t0 )) s)" bash -c "! kill -0 $SERVER_PID 2> /dev/null"
  kill -KILL "$SERVER_PID" 2> /dev/null; wait "$SERVER_PID" 2> /dev/null; wait "$load" 2> /dev/null
  check "cycle $cycle: its trainer was stopped" bash -c "! pgrep -f '[j]obs/$G/train_config.json' > /dev/null"
  start_busy_server "server4-$cycle.log"
  check "cycle $cycle: restarted server ready" test -n "$PORT"
done
spec after h 20 10 > "$TMP/h.json"
H=$(timeout 30 "$TNMT" jobs submit --spec "$TMP/h.json" --server "127.0.0.1:$PORT" --token-file "$TMP/token")
check "a submit after the restarts answers" test -n "$H"
timeout 300 "$TNMT" jobs watch "$G" --server "127.0.0.1:$PORT" --token-file "$TMP/token" > "$TMP/watch-g.txt"
check "the restarted job finishes after three restarts" test $? -eq 0
check "  on its fourth attempt" test "$(field "$G" attempts)" = 4
jobs_cmd cancel "$H" > /dev/null 2>&1
t0=$(date +%s)
kill -TERM "$SERVER_PID"
for _ in $(seq 300); do kill -0 "$SERVER_PID" 2> /dev/null || break; sleep 0.1; done
check "the last SIGTERM stops the server ($(( $(date +%s) - t0 )) s)" bash -c "! kill -0 $SERVER_PID 2> /dev/null"

if [[ $fails -ne 0 ]]; then
  echo "$fails check(s) failed; server logs:"
  tail -n 30 "$TMP"/server*.log
  exit 1
fi
echo "all checks passed"
