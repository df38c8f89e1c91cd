#!/usr/bin/env bash
# `tnmt serve` lifecycle end to end, on the tiny golden model, driven by bench/serve_load:
#   a. start on free ports, ready file, /healthz and /readyz 200, health Check SERVING,
#      tnmt_requests_total in /metrics after some requests; a second server on the same gRPC
#      port exits non-zero naming it, and every call still reaches the first; --request-log
#      writes one JSON line per call;
#   b. two SIGHUP reloads under 16-client load: no failed request, model generation 3;
#   c. SIGTERM under 16-client load: exit 0 within the grace period, every request either OK or
#      refused with UNAVAILABLE (sent after shutdown began), some OK;
#   d. a missing model directory: by default exit 2 at start-up naming the model and the
#      directory; with --on-missing-model=wait the server runs but is not ready (/readyz 503
#      naming the directory, health NOT_SERVING) and still exits 0 on SIGTERM; --max-queue 0
#      exits 2 naming the flag.
# Usage: serve_lifecycle_test.sh TNMT SERVE_LOAD MODEL_DIR
set -u
TNMT="$1"
LOAD="$2"
MODEL="$3"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
GRACE=10
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; }
trap cleanup EXIT

# start_server NAME FLAGS...: starts `tnmt serve` in the background; sets SERVER_PID.
start_server() {
  local name="$1"; shift
  "$TNMT" serve "$@" 2> "$TMP/$name.log" &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
}

# wait_file FILE SECONDS PID: waits for FILE while PID lives.
wait_file() {
  local i
  for i in $(seq $(($2 * 10))); do
    [[ -s "$1" ]] && return 0
    kill -0 "$3" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}

# wait_exit PID SECONDS: waits for PID to exit; sets EXIT_CODE (or returns 1 if still running).
wait_exit() {
  local i
  for i in $(seq $(($2 * 10))); do
    if ! kill -0 "$1" 2> /dev/null; then
      wait "$1"
      EXIT_CODE=$?
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# http PATH OUT: GET on the server's HTTP port; prints the status code, body into OUT.
http() { curl -s -o "$2" -w '%{http_code}' --max-time 10 "http://localhost:$HTTP_PORT$1"; }

# json_get FILE EXPR: a Python expression over the parsed JSON `r`.
json_get() { /usr/bin/python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print($2)" "$1"; }

show_log() { echo "--- $1 (last lines) ---"; tail -n 20 "$1"; echo "---"; }

# ---------------------------------------------------------------------------------------------
echo "== a. start, readiness, health, metrics"
t0=$(now)
start_server a --model "tiny=$MODEL" --port 0 --http-port 0 --ready-file "$TMP/ready" --threads 2 \
    --grace-seconds "$GRACE" --request-log "$TMP/requests.jsonl"
if ! wait_file "$TMP/ready" 60 "$SERVER_PID"; then
  echo "FAIL: server not ready within 60 s (or died)"
  show_log "$TMP/a.log"
  exit 1
fi
read -r GRPC_PORT HTTP_PORT < "$TMP/ready"
TARGET="localhost:$GRPC_PORT"
echo "ready after $(elapsed "$t0") s: gRPC $GRPC_PORT, HTTP $HTTP_PORT"
check "ready file has two ports" test -n "$GRPC_PORT" -a -n "$HTTP_PORT"
check "/healthz 200" test "$(http /healthz "$TMP/healthz")" = 200
check "/readyz 200" test "$(http /readyz "$TMP/readyz")" = 200
"$LOAD" --target "$TARGET" --health > "$TMP/health.txt"
check "health Check exits 0 when ready" test $? -eq 0
check "health Check says SERVING" grep -qx SERVING "$TMP/health.txt"
"$LOAD" --target "$TARGET" --clients 2 --requests 3 --texts-per-request 2 --json > "$TMP/a.json"
check "6 requests, all OK (serve_load exit 0)" test $? -eq 0
check "serve_load counted 6 OK" test "$(json_get "$TMP/a.json" 'r["ok"]')" = 6
check "generated tokens counted" test "$(json_get "$TMP/a.json" 'r["tokens"] > 0')" = True
"$TNMT" health --server "$TARGET" > /dev/null
check "tnmt health exits 0 when serving" test $? -eq 0
"$TNMT" health --address "$TARGET" --timeout-ms 3000 > /dev/null 2> "$TMP/health-old.err"
check "tnmt health --address/--timeout-ms (deprecated names) still work" test $? -eq 0
check "  with a warning naming the new flag" grep -q -- '--address is deprecated: use --server' "$TMP/health-old.err"
printf 'the man runs\n\nA dog sits in the red house.\n' > "$TMP/in.txt"
"$TNMT" translate --model "$MODEL" --scores --threads 1 < "$TMP/in.txt" > "$TMP/local.out" 2> /dev/null
"$TNMT" translate --server "$TARGET" --scores < "$TMP/in.txt" > "$TMP/remote.out"
check "tnmt translate --server equals local translation" cmp -s "$TMP/local.out" "$TMP/remote.out"
{ echo ok; head -c 70000 /dev/zero | tr '\0' a; echo; echo fine; } > "$TMP/bad.txt"
"$TNMT" translate --server "$TARGET" < "$TMP/bad.txt" > "$TMP/bad.out" 2> "$TMP/bad.err"
check "a bad line: exit 1, its own error, alignment kept" \
  bash -c "[[ $? -eq 1 && \$(wc -l < $TMP/bad.out) -eq 3 ]] && grep -q 'input line 2: INVALID_ARGUMENT' $TMP/bad.err"
http /metrics "$TMP/metrics.a" > /dev/null
check "/metrics has tnmt_requests_total samples" grep -q '^tnmt_requests_total{' "$TMP/metrics.a"
printf 'x\n' | "$TNMT" translate --server "$TARGET" --model-name nope > /dev/null 2>&1
"$TNMT" models --server "$TARGET" > /dev/null 2>&1
check "--request-log: one valid JSON line per call, the right fields" python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$TMP/requests.jsonl')]
ok = [r for r in rows if r['method'] == 'Translate' and r['code'] == 'OK' and r['model'] == 'tiny' and r['texts'] >= 1]
nf = [r for r in rows if r['code'] == 'NOT_FOUND' and 'nope' in r.get('message', '')]
lm = [r for r in rows if r['method'] == 'ListModels']
assert ok and nf and lm and all(r['peer'] and r['seconds'] >= 0 and r['time'].endswith('Z') for r in rows), rows[-5:]
"
# Calls whose client deadline passes are counted as DEADLINE_EXCEEDED (what the client saw),
# never as CANCELLED, so the documented deadline alert can fire.
# 64 sentences a request with a 1 ms deadline: no machine translates them in time.
"$LOAD" --target "$TARGET" --clients 8 --requests 30 --texts-per-request 64 --deadline-ms 1 --json \
  > "$TMP/dl.json" 2> /dev/null
http /metrics "$TMP/metrics.dl" > /dev/null
deadline_count=$(sed -n 's/^tnmt_requests_total{.*code="DEADLINE_EXCEEDED".*} \([0-9.e+]*\)$/\1/p' "$TMP/metrics.dl" |
  awk '{ n += $1 } END { print n + 0 }')
check "missed client deadlines are counted as DEADLINE_EXCEEDED ($deadline_count)" \
  awk -v n="$deadline_count" 'BEGIN { exit !(n >= 1) }'
check "  and never as CANCELLED" \
  bash -c "! grep -q 'tnmt_requests_total{.*code=\"CANCELLED\"' $TMP/metrics.dl"
check "ListModels adds no model series with an empty name" bash -c "! grep -q 'tnmt_model_loaded{model=\"\"}' $TMP/metrics.dl"
# Slow and idle HTTP clients (24 sending a header line every 0.3 s, 24 sending nothing, for
# about 2 s; bounded) do not keep /healthz and /metrics from answering.
slow_fds=()
for i in $(seq 48); do
  exec {fd}<> "/dev/tcp/127.0.0.1/$HTTP_PORT" && slow_fds+=("$fd")
  ((i <= 24)) && printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n' >&"$fd"
done
probe_fail=0
for round in 1 2 3 4 5 6; do
  for fd in "${slow_fds[@]:0:24}"; do printf 'X-Slow-%d: 1\r\n' "$round" >&"$fd" 2> /dev/null; done
  curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$HTTP_PORT/healthz" || probe_fail=$((probe_fail + 1))
  curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" || probe_fail=$((probe_fail + 1))
  sleep 0.3
done
for fd in "${slow_fds[@]}"; do exec {fd}>&-; done
check "/healthz and /metrics answer within 5 s while 48 slow or idle clients hold connections ($probe_fail misses)" test "$probe_fail" -eq 0
# A second server on the busy gRPC port must fail naming the port, not share it (with
# SO_REUSEPORT both would listen and clients would be split between them).
timeout 30 "$TNMT" serve --model "tiny=$MODEL" --host 127.0.0.1 --port "$GRPC_PORT" --http-port 0 --threads 1 \
  --ready-file "$TMP/ready.dup" 2> "$TMP/dup.log"
rc=$?
check "a second server on the busy gRPC port exits non-zero (got $rc)" bash -c "[[ $rc -ne 0 && $rc -ne 124 ]]"
check "  naming the port (got: $(tail -c 200 "$TMP/dup.log"))" grep -q ":$GRPC_PORT" "$TMP/dup.log"
check "  and never reports ready" test ! -s "$TMP/ready.dup"
for _ in 1 2 3 4 5 6; do "$TNMT" translate --server "$TARGET" < "$TMP/in.txt" > /dev/null 2>&1 || echo fail; done > "$TMP/dup.calls"
check "every call still reaches the first server" test ! -s "$TMP/dup.calls"

# ---------------------------------------------------------------------------------------------
echo "== b. two SIGHUP reloads under load"
"$LOAD" --target "$TARGET" --clients 16 --channels 4 --seconds 8 --json > "$TMP/b.json" &
load_pid=$!
pids+=("$load_pid")
sleep 2
kill -HUP "$SERVER_PID"
sleep 1
kill -HUP "$SERVER_PID"
if wait_exit "$load_pid" 40; then load_rc=$EXIT_CODE; else load_rc=timeout; fi
echo "serve_load: $(cat "$TMP/b.json")"
check "no failed request during reloads (serve_load exit 0, got $load_rc)" test "$load_rc" = 0
check "requests succeeded during reloads" test "$(json_get "$TMP/b.json" 'r["ok"] > 0')" = True
# Each reload loads and warms up a new generation; give the second one time to finish.
gen=""
for _ in $(seq 100); do
  http /metrics "$TMP/metrics.b" > /dev/null
  gen=$(sed -n 's/^tnmt_model_generation{[^}]*model="tiny"[^}]*} *//p' "$TMP/metrics.b")
  reloads=$(grep -c 'reload done' "$TMP/a.log")
  [[ "$gen" == 3 && "$reloads" == 2 ]] && break
  sleep 0.2
done
check "tnmt_model_generation{model=\"tiny\"} is 3 (got '${gen}')" test "$gen" = 3
check "server logged two finished reloads (got $reloads)" test "$reloads" -eq 2
check "still ready after reloads" test "$(http /readyz "$TMP/readyz.b")" = 200

# ---------------------------------------------------------------------------------------------
echo "== c. SIGTERM under load"
rm -f "$TMP/stop"
"$LOAD" --target "$TARGET" --clients 16 --channels 4 --seconds 60 --allow-codes UNAVAILABLE --stop-on-unavailable \
    --stop-file "$TMP/stop" --json > "$TMP/c.json" &
load_pid=$!
pids+=("$load_pid")
sleep 3
t_term=$(now)
kill -TERM "$SERVER_PID"
if wait_exit "$SERVER_PID" $((GRACE + 5)); then
  t_exit=$(elapsed "$t_term")
  echo "server exited $EXIT_CODE, $t_exit s after SIGTERM (grace $GRACE s)"
  check "server exits 0 after SIGTERM" test "$EXIT_CODE" -eq 0
  check "server exits within the grace period ($t_exit s <= $GRACE s)" \
      awk -v t="$t_exit" -v g="$GRACE" 'BEGIN { exit !(t <= g) }'
else
  echo "FAIL: server still running $((GRACE + 5)) s after SIGTERM (grace $GRACE s)"
  fails=$((fails + 1))
  show_log "$TMP/a.log"
  kill -KILL "$SERVER_PID" 2> /dev/null
fi
touch "$TMP/stop"
if wait_exit "$load_pid" 40; then load_rc=$EXIT_CODE; else load_rc=timeout; fi
echo "serve_load: $(cat "$TMP/c.json")"
check "serve_load saw only OK/UNAVAILABLE (exit 0, got $load_rc)" test "$load_rc" = 0
check "no failure other than UNAVAILABLE (got $(json_get "$TMP/c.json" 'r["failures"]'))" \
    test "$(json_get "$TMP/c.json" 'sorted(set(r["failures"]) - {"UNAVAILABLE"})')" = "[]"
check "requests succeeded before shutdown" test "$(json_get "$TMP/c.json" 'r["ok"] > 0')" = True
check "server logged draining and stopped" grep -q "stopped" "$TMP/a.log"

# ---------------------------------------------------------------------------------------------
echo "== d. missing model directory; bad flag"
timeout 20 "$TNMT" serve --model x=/nonexistent --port 0 --http-port 0 2> "$TMP/d0.log"
rc=$?
check "a missing model directory exits 2 at start-up (got $rc)" test "$rc" -eq 2
check "  naming the model and the directory (got: $(head -c 200 "$TMP/d0.log"))" \
  grep -q 'model "x": /nonexistent: no such directory' "$TMP/d0.log"
start_server d --model /nonexistent --on-missing-model=wait --port 0 --http-port 0 --grace-seconds "$GRACE"
HTTP_PORT=""
for _ in $(seq 300); do
  HTTP_PORT=$(sed -n 's/.*HTTP on .*:\([0-9][0-9]*\);.*/\1/p' "$TMP/d.log")
  GRPC_PORT=$(sed -n 's/.*gRPC on .*:\([0-9][0-9]*\), HTTP.*/\1/p' "$TMP/d.log")
  [[ -n "$HTTP_PORT" && -n "$GRPC_PORT" ]] && break
  kill -0 "$SERVER_PID" 2> /dev/null || break
  sleep 0.1
done
if [[ -z "$HTTP_PORT" || -z "$GRPC_PORT" ]]; then
  echo "FAIL: server with a missing model did not start (no 'gRPC on ..., HTTP on ...' line)"
  fails=$((fails + 1))
  show_log "$TMP/d.log"
else
  # The load fails on the background thread; wait until /readyz reports why.
  code=""
  for _ in $(seq 100); do
    code=$(http /readyz "$TMP/readyz.d")
    [[ "$code" == 503 ]] && grep -q /nonexistent "$TMP/readyz.d" && break
    sleep 0.2
  done
  echo "/readyz: $code $(cat "$TMP/readyz.d")"
  check "/readyz 503 with a missing model" test "$code" = 503
  check "/readyz names the directory /nonexistent" grep -q /nonexistent "$TMP/readyz.d"
  check "/healthz still 200 (the process is alive)" test "$(http /healthz "$TMP/healthz.d")" = 200
  "$LOAD" --target "localhost:$GRPC_PORT" --health > "$TMP/health.d"
  check "health Check exits 1 when not ready" test $? -eq 1
  check "health Check says NOT_SERVING (got '$(cat "$TMP/health.d")')" grep -qx NOT_SERVING "$TMP/health.d"
  kill -TERM "$SERVER_PID"
  if wait_exit "$SERVER_PID" $((GRACE + 5)); then
    check "not-ready server exits 0 on SIGTERM (got $EXIT_CODE)" test "$EXIT_CODE" -eq 0
  else
    echo "FAIL: not-ready server still running $((GRACE + 5)) s after SIGTERM"
    fails=$((fails + 1))
    show_log "$TMP/d.log"
  fi
fi

# A bad limit must be refused before anything starts (the timeout stops a server that started).
timeout 20 "$TNMT" serve --model "tiny=$MODEL" --port 0 --http-port 0 --max-queue 0 2> "$TMP/e.log"
rc=$?
check "--max-queue 0 exits 2 (got $rc)" test "$rc" -eq 2
check "--max-queue 0 message names --max-queue (got: $(head -c 200 "$TMP/e.log"))" grep -q -- "--max-queue" "$TMP/e.log"

echo "total $(elapsed "$t0") s; $fails failure(s)"
test "$fails" -eq 0
