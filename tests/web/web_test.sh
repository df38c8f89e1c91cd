#!/usr/bin/env bash
# The web page and its JSON API end to end: `tnmt serve` on free ports with the tiny golden
# model and the job service (one tiny training job submitted and watched to SUCCEEDED), then
#   a. the JSON API with curl: models; a good translation (n-best, scores); garbage bodies
#      (not JSON, wrong types, unknown field, huge integers, invalid UTF-8, over 1 MiB) get a
#      4xx JSON error; an unknown model 404 NOT_FOUND; the gRPC path's own validation
#      (beam_size 0) and metrics apply; GET on a POST route 405 METHOD_NOT_ALLOWED (not
#      UNIMPLEMENTED, which is 501);
#   b. the jobs API: no or wrong token 401, the job listed, its progress and validation events,
#      an unknown job 404;
#   c. headless Chromium: the translation page (/?text=...) shows exactly the hypotheses the
#      JSON API returned for the same input, a blank input line stays a blank output line (3
#      lines in, 3 rows out), an unknown model shows NOT_FOUND; the jobs page
#      (/jobs?token=...&job=...) draws the loss curve (SVG polyline) of the job and names it,
#      without a token prompts for one (no error banner), with a wrong one shows
#      UNAUTHENTICATED; a job without a progress report yet (step 50 from a checkpoint) has no
#      loss in the API and "—" on the page; screenshots of both pages are PNGs (kept in
#      $TEST_UNDECLARED_OUTPUTS_DIR with the DOM dumps);
#   d. a server without --state-dir: /api/jobs 501 and the jobs page says there is no job
#      service; both servers stay healthy and exit 0 on SIGTERM.
# Chromium is required (deploy/install-deps.sh installs the Debian package chromium).
# Usage: web_test.sh TNMT MODEL_DIR SPM_MODEL
set -u
TNMT="$1"
MODEL="$2"
SPM="$3"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$TMP/outputs}"
mkdir -p "$OUT"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; }
trap cleanup EXIT
show_log() { echo "--- $1 (last lines) ---"; tail -n 20 "$1"; echo "---"; }

CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$CHROMIUM" ]]; then
  echo "FAIL: chromium not found on PATH ($PATH). This test drives the web pages with headless"
  echo "      Chromium; install it with deploy/install-deps.sh (Debian package chromium)."
  exit 1
fi
echo "using $("$CHROMIUM" --version 2> /dev/null)"

# chrome ARGS... URL: headless Chromium with a throwaway profile (root here, hence --no-sandbox).
chrome() {
  HOME="$TMP" XDG_CONFIG_HOME="$TMP/xdg-config" XDG_CACHE_HOME="$TMP/xdg-cache" \
    timeout 60 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --no-default-browser-check --disable-extensions --disable-sync \
    --disable-background-networking --disable-component-update --mute-audio \
    --user-data-dir="$TMP/chrome-profile" --virtual-time-budget=10000 "$@" 2>> "$TMP/chromium.log"
}
# is_png FILE: the PNG signature, 1200x900 pixels, more than a blank page's few bytes.
is_png() {
  /usr/bin/python3 - "$1" << 'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
ok = data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
width, height = struct.unpack(">II", data[16:24]) if ok else (0, 0)
print("  %s: %d bytes, %dx%d" % (sys.argv[1].rsplit("/", 1)[-1], len(data), width, height))
sys.exit(0 if ok and (width, height) == (1200, 900) and len(data) > 10000 else 1)
EOF
}
# json_get FILE EXPR: a Python expression over the parsed JSON `r`.
json_get() { /usr/bin/python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print($2)" "$1"; }
# http METHOD PATH OUT [CURL ARGS...]: prints the HTTP status, the body goes to OUT.
http() {
  local method="$1" path="$2" out="$3"; shift 3
  curl -s -o "$out" -w '%{http_code}' --max-time 30 -X "$method" "$@" "http://127.0.0.1:$HTTP$path"
}
# api_error STATUS CODE METHOD PATH [CURL ARGS...]: the reply is STATUS with {"code": CODE}.
api_error() {
  local status="$1" code="$2"; shift 2
  local got
  got=$(http "$1" "$2" "$TMP/err.json" -H 'Content-Type: application/json' "${@:3}")
  if [[ "$got" == "$status" ]] && [[ "$(json_get "$TMP/err.json" 'r["code"]' 2> /dev/null)" == "$code" ]] &&
    [[ -n "$(json_get "$TMP/err.json" 'r["message"]' 2> /dev/null)" ]]; then
    echo "  $status $(cat "$TMP/err.json")" | cut -c1-200
    return 0
  fi
  echo "  got $got: $(head -c 300 "$TMP/err.json")"
  return 1
}

# start_server NAME FLAGS...: `tnmt serve` on free ports; sets SERVER_PID, GRPC and HTTP.
start_server() {
  local name="$1"; shift
  rm -f "$TMP/$name.ready"
  "$TNMT" serve --model "tiny=$MODEL" --host 127.0.0.1 --port 0 --http-port 0 --threads 1 \
    --grace-seconds 5 --ready-file "$TMP/$name.ready" "$@" 2> "$TMP/$name.log" &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  for _ in $(seq 600); do
    [[ -s "$TMP/$name.ready" ]] && break
    kill -0 "$SERVER_PID" 2> /dev/null || break
    sleep 0.1
  done
  if [[ ! -s "$TMP/$name.ready" ]]; then
    echo "FAIL: server $name not ready within 60 s (or died)"
    show_log "$TMP/$name.log"
    exit 1
  fi
  read -r GRPC HTTP < "$TMP/$name.ready"
}

# stop_server PID NAME: SIGTERM, expects exit 0 within 15 s.
stop_server() {
  kill -TERM "$1"
  for _ in $(seq 150); do
    if ! kill -0 "$1" 2> /dev/null; then
      wait "$1"
      local rc=$?
      [[ $rc -eq 0 ]] || { echo "  exit status $rc"; show_log "$TMP/$2.log"; }
      return $rc
    fi
    sleep 0.1
  done
  echo "  still running after 15 s"
  return 1
}

# ---------------------------------------------------------------------------------------------
# A synthetic corpus and a tiny job (the recipe of tests/jobs_e2e_test.sh).
DATA="$TMP/data"
STATE="$TMP/state"
mkdir -p "$DATA/corpus" "$STATE"
cp "$SPM" "$DATA/spm.model"
tests/tools/synthetic_corpus.sh 400 11 "$DATA/corpus/train.en" "$DATA/corpus/train.de"
head -10 "$DATA/corpus/train.en" > "$DATA/corpus/dev.en"
head -10 "$DATA/corpus/train.de" > "$DATA/corpus/dev.de"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TMP/token"
TOKEN="$(cat "$TMP/token")"
cat > "$TMP/spec.json" << EOF
{"name": "web-demo", "data": {"train_source": "corpus/train.en", "train_target": "corpus/train.de",
  "valid_source": "corpus/dev.en", "valid_target": "corpus/dev.de", "source_language": "en", "target_language": "de"},
 "vocabulary": {"spm_model": "spm.model"},
 "model": {"preset": "tiny", "dropout": 0.1},
 "schedule": {"max_tokens": 256, "warmup_steps": 10, "lr_scale": 5, "seed": 3, "save_every_steps": 50,
              "valid_every_steps": 25, "valid_max_sentences": 5},
 "stop": {"max_steps": 300}, "device": {"threads": 1}, "publish": {"model_name": "web-demo", "average_last": 2}}
EOF

echo "== server with the job service"
start_server jobs --state-dir "$STATE" --data-root "$DATA" --jobs-token-file "$TMP/token" --job-threads 1
JOBS_PID=$SERVER_PID
echo "gRPC $GRPC, HTTP $HTTP"
# The job trains while the translation checks run.
"$TNMT" jobs submit --spec "$TMP/spec.json" --watch --server "127.0.0.1:$GRPC" \
  --token-file "$TMP/token" > "$TMP/watch.txt" 2> "$TMP/watch.err" &
WATCH_PID=$!
pids+=("$WATCH_PID")

echo "== a. translation API"
check "GET /api/models: 200 with tiny ready" bash -c \
  "[[ \$(curl -s -o '$TMP/models.json' -w '%{http_code}' http://127.0.0.1:$HTTP/api/models) == 200 ]] &&
   grep -q '\"name\":\"tiny\"' '$TMP/models.json' && grep -q '\"state\":\"MODEL_STATE_READY\"' '$TMP/models.json'"
REQUEST='{"model": "tiny", "texts": ["the man runs", "a small dog sits on the ball"], "options": {"beam_size": 3, "n_best": 2, "return_scores": true}}'
status=$(http POST /api/translate "$TMP/good.json" -H 'Content-Type: application/json' -d "$REQUEST")
check "POST /api/translate: 200" test "$status" = 200
check "  two translations of two hypotheses each, best first, scores <= 0" json_get "$TMP/good.json" \
  'len(r["translations"]) == 2 and all(len(t["hypotheses"]) == 2 and t["hypotheses"][0]["score"] >= t["hypotheses"][1]["score"] and all(h["score"] <= 0 and h["tokens"] >= 0 for h in t["hypotheses"]) for t in r["translations"]) or sys.exit(1)'
check "  the proto3 JSON of TranslateResponse (Duration timing, every field)" json_get "$TMP/good.json" \
  'r["timing"]["total_time"].endswith("s") and r["seed"] == "0" and r["model"] == "tiny" or sys.exit(1)'
echo "  translations: $(json_get "$TMP/good.json" '[[h["text"][:40] for h in t["hypotheses"]] for t in r["translations"]]')"

status=$(http POST /api/translate "$TMP/err.json" -d "$REQUEST")
check "a form post (not Content-Type: application/json): 415" bash -c \
  "[[ $status == 415 ]] && grep -q 'Content-Type must be application/json' '$TMP/err.json'"
check "not JSON: 400 INVALID_ARGUMENT" api_error 400 INVALID_ARGUMENT POST /api/translate -d 'garbage{'
check "a JSON array: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '["the man"]'
check "texts not an array: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"texts": "the man"}'
check "a number among the texts: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"texts": ["a", 1]}'
check "beam_size as a word: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"texts": ["a"], "options": {"beam_size": "three"}}'
check "n_best beyond int32: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"texts": ["a"], "options": {"n_best": 1e20}}'
check "an unknown field: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"texts": ["a"], "options": {"beamsize": 3}}'
check "an option outside options: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"texts": ["a"], "beam_size": 3}'
check "a bad ?timeout_ms: 400" api_error 400 INVALID_ARGUMENT POST '/api/translate?timeout_ms=0' -d '{"texts": ["a"]}'
printf '{"texts": ["\xff\xfe"]}' > "$TMP/badutf8.json"
check "invalid UTF-8: 400" api_error 400 INVALID_ARGUMENT POST /api/translate --data-binary "@$TMP/badutf8.json"
head -c 300000 /dev/zero | tr '\0' '[' > "$TMP/nested.json"
check "300000 nested arrays: 400" api_error 400 INVALID_ARGUMENT POST /api/translate --data-binary "@$TMP/nested.json"
head -c 2000000 /dev/zero | tr '\0' 'x' > "$TMP/huge.txt"
check "a 2 MB body: 413 RESOURCE_EXHAUSTED" api_error 413 RESOURCE_EXHAUSTED POST /api/translate --data-binary "@$TMP/huge.txt"
check "a 2 MB chunked body: 413" api_error 413 RESOURCE_EXHAUSTED POST /api/translate \
  -H 'Transfer-Encoding: chunked' --data-binary "@$TMP/huge.txt"
check "unknown model: 404 NOT_FOUND" api_error 404 NOT_FOUND POST /api/translate -d '{"model": "nope", "texts": ["a"]}'
check "  naming the model" grep -q nope "$TMP/err.json"
check "  with the gRPC error's details (ErrorInfo UNKNOWN_MODEL)" test "$(json_get "$TMP/err.json" \
  '[d["reason"] for d in r["details"] if d["@type"].endswith("google.rpc.ErrorInfo")]')" = "['UNKNOWN_MODEL']"
check "beam_size 0: 400 from the gRPC service's validation" api_error 400 INVALID_ARGUMENT POST /api/translate \
  -d '{"model": "tiny", "texts": ["a"], "options": {"beam_size": 0}}'
check "  naming the field" grep -q beam_size "$TMP/err.json"
check "  in a BadRequest field violation" test "$(json_get "$TMP/err.json" \
  '[v["field"] for d in r["details"] if d["@type"].endswith("google.rpc.BadRequest") for v in d["fieldViolations"]]')" = "['options.beam_size']"
check "no texts: 400" api_error 400 INVALID_ARGUMENT POST /api/translate -d '{"model": "tiny", "texts": []}'
check "GET on the POST route: 405 METHOD_NOT_ALLOWED" api_error 405 METHOD_NOT_ALLOWED GET /api/translate
check "an unknown API route: 404 JSON" api_error 404 NOT_FOUND GET /api/nope
curl -s "http://127.0.0.1:$HTTP/metrics" > "$TMP/metrics.txt"
check "the web requests are counted as gRPC Translate calls (OK)" \
  grep -q 'tnmt_requests_total{code="OK",method="Translate",model="tiny"}' "$TMP/metrics.txt"
check "  and the refusals (NOT_FOUND, INVALID_ARGUMENT)" bash -c \
  "grep -q 'code=\"NOT_FOUND\",method=\"Translate\"' '$TMP/metrics.txt' && grep -q 'code=\"INVALID_ARGUMENT\",method=\"Translate\"' '$TMP/metrics.txt'"
check "the server survived the garbage (/healthz 200)" \
  test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/healthz")" = 200

echo "== c. translation page in headless Chromium"
PAGE="/?text=the%20man%20runs%0Aa%20small%20dog%20sits%20on%20the%20ball&model=tiny&beam_size=3&n_best=2"
chrome --dump-dom "http://127.0.0.1:$HTTP$PAGE" > "$TMP/translate.dom.html"
check "the page translated on load (data-state done)" grep -q '<body data-state="done"' "$TMP/translate.dom.html"
check "the page shows exactly the hypotheses the JSON API returned" /usr/bin/python3 - \
  "$TMP/translate.dom.html" "$TMP/good.json" << 'EOF'
import html.parser, json, sys
class Hyps(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.depth = 0; self.texts = []
    def handle_starttag(self, tag, attrs):
        if self.depth: self.depth += 1
        elif tag == "span" and "hyp-text" in (dict(attrs).get("class") or "").split():
            self.depth = 1; self.texts.append("")
    def handle_endtag(self, tag):
        if self.depth: self.depth -= 1
    def handle_data(self, data):
        if self.depth: self.texts[-1] += data
p = Hyps(); p.feed(open(sys.argv[1], encoding="utf-8").read())
want = [h["text"] for t in json.load(open(sys.argv[2]))["translations"] for h in t["hypotheses"]]
if p.texts != want:
    print("  page:", p.texts); print("  api: ", want); sys.exit(1)
print("  %d hypotheses match" % len(want))
EOF
check "  with their scores" grep -q '>score -[0-9.]* · [0-9]* tok<' "$TMP/translate.dom.html"
chrome --dump-dom "http://127.0.0.1:$HTTP/?text=the%20man%20runs%0A%0Aa%20small%20dog%0A&model=tiny" > "$TMP/translate-blank.dom.html"
check "a blank line between two sentences: 3 result rows, the middle one blank" /usr/bin/python3 - \
  "$TMP/translate-blank.dom.html" << 'EOF'
import re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
rows = re.findall(r'<div class="(result[^"]*)">', dom)
summary = re.search(r'<div class="summary" id="summary">([^<]*)</div>', dom)
print("  rows:", rows, "summary:", summary.group(1) if summary else None)
ok = (rows == ["result", "result blank", "result"] and '<body data-state="done"' in dom
      and summary and "3 lines (2 sentences, 1 blank)" in summary.group(1))
sys.exit(0 if ok else 1)
EOF
chrome --screenshot="$TMP/translate.png" --window-size=1200,900 "http://127.0.0.1:$HTTP$PAGE" > /dev/null
check "translation page screenshot is a 1200x900 PNG" is_png "$TMP/translate.png"
chrome --dump-dom "http://127.0.0.1:$HTTP/?text=hello&model=nope" > "$TMP/translate-error.dom.html"
check "an unknown model: the page shows the error (NOT_FOUND, HTTP 404, the message)" bash -c \
  "grep -q '<body data-state=\"error\"' '$TMP/translate-error.dom.html' &&
   grep -q '<span class=\"code\">NOT_FOUND</span><span class=\"http\">HTTP 404</span>no model named' '$TMP/translate-error.dom.html'"

echo "== b. jobs API"
wait "$WATCH_PID"
check "the training job succeeded (tnmt jobs submit --watch exit 0)" test $? -eq 0
JOB=$(grep -m1 -o '^job-[0-9]*' "$TMP/watch.txt")
check "job id ($JOB)" test -n "$JOB"
check "GET /api/jobs without a token: 401" api_error 401 UNAUTHENTICATED GET /api/jobs
check "  with a wrong token: 401" api_error 401 UNAUTHENTICATED GET /api/jobs -H "Authorization: Bearer not-the-token"
check "  the token without 'Bearer': 401" api_error 401 UNAUTHENTICATED GET /api/jobs -H "Authorization: $TOKEN"
check "events without a token: 401" api_error 401 UNAUTHENTICATED GET "/api/jobs/$JOB/events"
status=$(http GET /api/jobs "$TMP/jobs.json" -H "Authorization: Bearer $TOKEN")
check "GET /api/jobs with the token: 200" test "$status" = 200
check "  lists $JOB SUCCEEDED at step 300 with its model" json_get "$TMP/jobs.json" \
  "any(j['id'] == '$JOB' and j['state'] == 'JOB_STATE_SUCCEEDED' and j['step'] == '300' and j['published_model'] == 'web-demo' and j['finish_time'].endswith('Z') for j in r['jobs']) or sys.exit(1)"
status=$(http GET "/api/jobs/$JOB/events" "$TMP/events.json" -H "Authorization: Bearer $TOKEN")
check "GET /api/jobs/$JOB/events: 200" test "$status" = 200
check "  its progress (step, loss) and validation (dev_bleu) events" json_get "$TMP/events.json" \
  "(sum(e['kind'] == 'progress' and e['data']['loss'] > 0 for e in r['events']) >= 20 and sum(e['kind'] == 'validation' and 'dev_bleu' in e['data'] for e in r['events']) >= 10 and {e['kind'] for e in r['events']} == {'progress', 'validation'}) or sys.exit(1)"
check "unknown job: 404" api_error 404 NOT_FOUND GET /api/jobs/job-999999/events -H "Authorization: Bearer $TOKEN"

echo "== c. jobs page in headless Chromium"
JOBS_PAGE="/jobs?token=$TOKEN&job=$JOB"
chrome --dump-dom "http://127.0.0.1:$HTTP$JOBS_PAGE" > "$TMP/jobs.dom.html"
check "the jobs page drew the selected job (data-state done)" grep -q '<body data-state="done"' "$TMP/jobs.dom.html"
check "  an SVG loss curve (a point per progress event)" /usr/bin/python3 - "$TMP/jobs.dom.html" "$TMP/events.json" << 'EOF'
import json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
progress = sum(e["kind"] == "progress" for e in json.load(open(sys.argv[2]))["events"])
svg = re.search(r'<svg[^>]*id="loss-curve"', dom)
line = re.search(r'<polyline[^>]*class="train-loss"[^>]*points="([^"]*)"', dom)
points = line.group(1).split() if line else []
print("  svg: %s, polyline points: %d (progress events: %d), dev BLEU marks: %d"
      % (bool(svg), len(points), progress, dom.count('class="dev-bleu"')))
sys.exit(0 if svg and len(points) == progress >= 20 else 1)
EOF
check "  naming the job" grep -q "Job $JOB" "$TMP/jobs.dom.html"
check "  and listing it" grep -q "<td class=\"id\">$JOB</td>" "$TMP/jobs.dom.html"
# A job whose checkpoint set its step before any progress report (no loss yet): written into
# the store beside the real one (terminal, so the runner leaves it alone). The API leaves its
# loss out and the page shows "—", not 0.0000.
/usr/bin/python3 - "$STATE/jobs.db" "$JOB" << 'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
state = db.execute("SELECT state FROM jobs WHERE id = ?", (sys.argv[2],)).fetchone()[0]
db.execute("INSERT INTO jobs (id, name, spec_json, state, created_ms, updated_ms, attempts, step, max_steps, loss) "
           "SELECT 'job-900001', 'checkpointed', spec_json, ?, created_ms, updated_ms, 1, 50, max_steps, 0 "
           "FROM jobs WHERE id = ?", (state.replace("SUCCEEDED", "CANCELLED"), sys.argv[2]))
db.commit()
EOF
http GET /api/jobs/job-900001 "$TMP/noloss.json" -H "Authorization: Bearer $TOKEN" > /dev/null
check "a job at step 50 with no progress report: the API gives no loss" \
  json_get "$TMP/noloss.json" '("loss" not in r and r["step"] == "50") or sys.exit(1)'
chrome --dump-dom "http://127.0.0.1:$HTTP/jobs?token=$TOKEN&job=job-900001" > "$TMP/jobs-noloss.dom.html"
check "  and the jobs page shows its loss as —, in the list and the details, never 0.0000" \
  /usr/bin/python3 - "$TMP/jobs-noloss.dom.html" << 'EOF'
import re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
row = re.search(r'<tr[^>]*data-id="job-900001".*?</tr>', dom, re.S)
cells = re.findall(r'<td class="num">([^<]*)', row.group(0)) if row else []
detail = re.search(r'<span>loss</span>([^<]*)', dom)
print("  list cells: %s, detail loss: %r" % (cells, detail.group(1) if detail else None))
sys.exit(0 if cells[1:2] == ["—"] and detail and detail.group(1) == "—" and "0.0000" not in dom else 1)
EOF
chrome --screenshot="$TMP/jobs.png" --window-size=1200,900 "http://127.0.0.1:$HTTP$JOBS_PAGE" > /dev/null
check "jobs page screenshot is a 1200x900 PNG" is_png "$TMP/jobs.png"
chrome --dump-dom "http://127.0.0.1:$HTTP/jobs" > "$TMP/jobs-notoken.dom.html"
check "without a token the jobs page asks for one" bash -c \
  "grep -q '<body data-state=\"auth\"' '$TMP/jobs-notoken.dom.html' && grep -q 'Enter the training API token' '$TMP/jobs-notoken.dom.html'"
check "  as a prompt, not an error (no UNAUTHENTICATED banner)" bash -c \
  "! grep -q 'UNAUTHENTICATED' '$TMP/jobs-notoken.dom.html' && ! grep -q 'class=\"notice error\"' '$TMP/jobs-notoken.dom.html'"
chrome --dump-dom "http://127.0.0.1:$HTTP/jobs?token=not-the-token" > "$TMP/jobs-badtoken.dom.html"
check "a wrong token shows the server's UNAUTHENTICATED error" bash -c \
  "grep -q '<body data-state=\"auth\"' '$TMP/jobs-badtoken.dom.html' && grep -q 'class=\"notice error\"' '$TMP/jobs-badtoken.dom.html' && grep -q 'UNAUTHENTICATED' '$TMP/jobs-badtoken.dom.html'"

echo "== d. a server without the job service"
start_server plain
PLAIN_PID=$SERVER_PID
check "GET /api/jobs: 501 UNIMPLEMENTED" api_error 501 UNIMPLEMENTED GET /api/jobs -H "Authorization: Bearer $TOKEN"
chrome --dump-dom "http://127.0.0.1:$HTTP/jobs" > "$TMP/jobs-none.dom.html"
check "the jobs page says there is no job service" bash -c \
  "grep -q '<body data-state=\"nojobs\"' '$TMP/jobs-none.dom.html' && grep -q 'no training-job service' '$TMP/jobs-none.dom.html'"
check "SIGTERM: the plain server exits 0" stop_server "$PLAIN_PID" plain
check "SIGTERM: the jobs server exits 0" stop_server "$JOBS_PID" jobs

cp "$TMP"/*.png "$TMP"/*.dom.html "$TMP"/*.log "$OUT/" 2> /dev/null
echo "screenshots and DOM dumps: ${TEST_UNDECLARED_OUTPUTS_DIR:+\$TEST_UNDECLARED_OUTPUTS_DIR (bazel-testlogs/tests/web/web_test/test.outputs)}${TEST_UNDECLARED_OUTPUTS_DIR:-$OUT}"
if [[ $fails -ne 0 ]]; then
  show_log "$TMP/jobs.log"
  tail -n 5 "$TMP/chromium.log" 2> /dev/null
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
