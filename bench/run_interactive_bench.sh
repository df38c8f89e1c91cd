#!/usr/bin/env bash
# Interactive latency: one sentence per call, as an application translating what a user just
# typed. tnmt through its server (`tnmt serve`, warm, one client sending the next sentence when
# the last is answered: bench/serve_load over gRPC, client-side time) against CTranslate2
# translating the same sentence in-process (bench/ct2_latency.py: no network, no server) on the
# same weights (tools/convert/export_ctranslate2.py), in one run on one machine. Both after a
# warm-up call, beam 4 with length penalty 0.6 unless set; p50/p90/p99 over the lines
# (nearest rank). Runs alternate engines; each row is one run, REPEAT rows per engine. A second
# table splits tnmt's mean call from the server's own metrics (/metrics before and after each
# run): the decode steps, the encoding, the rest in the server (its batching window, parsing,
# tokenizing, responding), and the network and client.
#
#   bench/run_interactive_bench.sh DATA_DIR
#     DATA_DIR  holds test_2016_flickr.en.gz (tools/get-multi30k.sh)
# Environment:
#   MODEL=models/demo   LINES=300 (the first LINES lines)   THREADS=1   BEAM=4   REPEAT=2
#   SERVE_ARGS="..." (more `tnmt serve` flags, e.g. "--max-queue-delay-ms 0")
#   PYTHON=build/py-tools/bin/python3 (deploy/install-py-tools.sh: ctranslate2, sentencepiece)
#   WORK=DIR (default: a new temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:?usage: bench/run_interactive_bench.sh DATA_DIR, holding test_2016_flickr.en.gz}"
MODEL="${MODEL:-models/demo}"
LINES="${LINES:-300}"
THREADS="${THREADS:-1}"
BEAM="${BEAM:-4}"
REPEAT="${REPEAT:-2}"
PYTHON="${PYTHON:-build/py-tools/bin/python3}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_interactive_bench.XXXXXX)}"
mkdir -p "$WORK"
[[ -f "$DATA/test_2016_flickr.en.gz" ]] || { echo "run_interactive_bench: $DATA/test_2016_flickr.en.gz not found" >&2; exit 2; }
zcat "$DATA/test_2016_flickr.en.gz" > "$WORK/all.en"
head -n "$LINES" "$WORK/all.en" > "$WORK/src.en"
"$PYTHON" -c 'import ctranslate2, sentencepiece' ||
  { echo "run_interactive_bench: $PYTHON lacks ctranslate2 (deploy/install-py-tools.sh)" >&2; exit 2; }

bazel build //tools/tnmt //bench:serve_load > /dev/null 2>&1 || bazel build //tools/tnmt //bench:serve_load
BIN="$(bazel info bazel-bin 2>/dev/null)"
TNMT="$BIN/tools/tnmt/tnmt"
LOAD="$BIN/bench/serve_load"
"$PYTHON" tools/convert/export_ctranslate2.py "$MODEL" "$WORK/ct2" --force > /dev/null

# The server, warm: started once, one call before the measured ones.
"$TNMT" serve --model "m=$MODEL" --threads "$THREADS" --port 0 --http-port 0 ${SERVE_ARGS:-} \
  --ready-file "$WORK/ready" > "$WORK/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2> /dev/null; wait $server 2> /dev/null' EXIT
for _ in $(seq 600); do
  [[ -s "$WORK/ready" ]] && break
  kill -0 "$server" 2> /dev/null || { echo "run_interactive_bench: tnmt serve exited:" >&2; tail -5 "$WORK/serve.log" >&2; exit 1; }
  sleep 0.1
done
read -r port http_port < "$WORK/ready"
# metrics FILE: the server's /metrics now.
metrics() { "$PYTHON" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "http://localhost:$http_port/metrics" > "$1"; }
head -1 "$WORK/src.en" > "$WORK/warm.en"
"$LOAD" --target "localhost:$port" --model m --clients 1 --requests 1 --input "$WORK/warm.en" > /dev/null

: > "$WORK/rows"
: > "$WORK/overhead"
for r in $(seq "$REPEAT"); do
  metrics "$WORK/metrics-before-$r"
  "$LOAD" --target "localhost:$port" --model m --clients 1 --texts-per-request 1 \
    --requests "$(wc -l < "$WORK/src.en")" --beam-size "$BEAM" --input "$WORK/src.en" --json > "$WORK/tnmt-$r.json"
  metrics "$WORK/metrics-after-$r"
  # Where a call's time goes, from the server's own metrics over this run: the RPC's wall time
  # in the server, its decode steps (tnmt_compute_duration_seconds), its encoding
  # (tnmt_encode_duration_seconds), the rest in the server (batching window, parse, queue,
  # tokenize, detokenize, respond) and outside it (network, client).
  "$PYTHON" - "$WORK/metrics-before-$r" "$WORK/metrics-after-$r" "$WORK/tnmt-$r.json" >> "$WORK/overhead" <<'PY'
import json, re, sys
def read(path):
    v = {}
    for line in open(path):
        m = re.match(r'(tnmt_(?:request|compute|encode)_duration_seconds_(?:sum|count))\{([^}]*)\} (\S+)', line)
        if m and ('method="Translate"' in m.group(2) or "request" not in m.group(1)):
            v[m.group(1)] = v.get(m.group(1), 0.0) + float(m.group(3))
    return v
a, b = read(sys.argv[1]), read(sys.argv[2])
d = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in b}
calls = d["tnmt_request_duration_seconds_count"]
rpc = 1000 * d["tnmt_request_duration_seconds_sum"] / calls
compute = 1000 * d["tnmt_compute_duration_seconds_sum"] / calls
encode = 1000 * d["tnmt_encode_duration_seconds_sum"] / calls
client = json.load(open(sys.argv[3]))["latency_ms"]["mean"]
print("%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f" % (calls, client, rpc, compute, encode, rpc - compute - encode, client - rpc))
PY
  "$PYTHON" -c 'import json, sys
j = json.load(open(sys.argv[1])); l = j["latency_ms"]
if j["ok"] != j["requests"]: sys.exit("run_interactive_bench: %d of %d calls failed" % (j["requests"] - j["ok"], j["requests"]))
print("\t".join(["tnmt serve (gRPC)", str(j["ok"])] + ["%.1f" % l[k] for k in ("p50", "p90", "p99", "mean")]))' "$WORK/tnmt-$r.json" >> "$WORK/rows"
  "$PYTHON" bench/ct2_latency.py --ct2 "$WORK/ct2" --input "$WORK/src.en" --threads "$THREADS" \
    --beam-size "$BEAM" > "$WORK/ct2-$r.json"
  "$PYTHON" -c 'import json, sys
j = json.load(open(sys.argv[1]))
print("\t".join(["CTranslate2 in-process", str(j["calls"])] + ["%.1f" % j[k] for k in ("p50", "p90", "p99", "mean")]))' "$WORK/ct2-$r.json" >> "$WORK/rows"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "== $cpu; $(nproc) cores; tnmt: $("$TNMT" --version); ctranslate2 $("$PYTHON" -c 'import ctranslate2; print(ctranslate2.__version__)')"
echo "== model $MODEL, the first $LINES lines of test_2016_flickr.en, one per call, beam $BEAM, $THREADS compute thread(s)${SERVE_ARGS:+, tnmt serve $SERVE_ARGS}; work dir $WORK"
echo "| engine | calls | p50 ms | p90 ms | p99 ms | mean ms |"
echo "|---|---|---|---|---|---|"
awk -F '\t' '{printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6}' "$WORK/rows"
awk -F '\t' '{e = ($1 ~ /^tnmt/) ? "t" : "c"; if (!(e in p) || $3 < p[e]) p[e] = $3}
  END {printf "best p50: tnmt %.1f ms, CTranslate2 %.1f ms (CTranslate2 / tnmt %.2fx)\n", p["t"], p["c"], p["c"] / p["t"]}' "$WORK/rows"
echo
echo "tnmt per call, means over each run (ms): the client's latency; the RPC's time in the server; its decode steps;"
echo "its encoding; the rest in the server (batching window --max-queue-delay-ms, parse, queue, tokenize, detokenize,"
echo "respond); outside the server (network, client)"
echo "| calls | client | server RPC | decode steps | encoding | rest in the server | network + client |"
echo "|---|---|---|---|---|---|---|"
awk -F '\t' '{printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7}' "$WORK/overhead"
