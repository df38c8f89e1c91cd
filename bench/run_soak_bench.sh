#!/usr/bin/env bash
# Soak benchmark: one `tnmt serve` under closed-loop gRPC load for minutes, with a share of bad
# requests mixed in (bench/serve_load.cc --bad-fraction: invalid UTF-8, a 20,000-word text, an
# unknown model, beam 1000, a request costing more than any limit allows). Reports goodput
# (OK requests and sentences per second), p50/p99 latency of the good requests, the status
# codes each kind of bad request got, the server's resident memory at the start, its peak and
# at the end (sampled every 5 s from /proc), and its exit status after SIGTERM.
#
#   bench/run_soak_bench.sh                       # 64 clients, 300 s, 10% bad requests
#   SECONDS=60 CLIENTS=16 bench/run_soak_bench.sh
# Environment:
#   MODEL=models/demo   THREADS=0 (all cores)   CLIENTS=64   SECONDS=300   BAD=0.1
#   DEADLINE_MS=30000   INPUT=FILE (default: DATA's test_2016_flickr.en.gz, else serve_load's
#   built-in sentences)   DATA=data/multi30k   SERVE_ARGS=... (extra `tnmt serve` flags)
#   WORK=DIR (default: a new temp dir)
#   TLS=1: serve over TLS (a CA and a certificate for localhost made with openssl in WORK/tls;
#   the load connects with --tls-ca)
# Exit status 1 if a bad request was answered OK, a good one failed with a code other than
# DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED (overload answers), or the server did not exit 0.
set -euo pipefail
DURATION="$(printenv SECONDS || true)"
DURATION="${DURATION:-300}"
cd "$(dirname "$0")/.."
MODEL="${MODEL:-models/demo}"
THREADS="${THREADS:-0}"
CLIENTS="${CLIENTS:-64}"
BAD="${BAD:-0.1}"
DEADLINE_MS="${DEADLINE_MS:-30000}"
DATA="${DATA:-data/multi30k}"
SERVE_ARGS="${SERVE_ARGS:-}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_soak.XXXXXX)}"
mkdir -p "$WORK"
SERVE_TLS=() LOAD_TLS=() CURL_TLS=() scheme=http
if [[ "${TLS:-0}" == 1 ]]; then
  T="$WORK/tls"
  mkdir -p "$T"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tnmt-soak-ca -keyout "$T/ca.key" -out "$T/ca.pem" 2> /dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$T/server.key" -out "$T/server.csr" 2> /dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$T/san.ext"
  openssl x509 -req -days 2 -in "$T/server.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial \
      -extfile "$T/san.ext" -out "$T/server.pem" 2> /dev/null
  SERVE_TLS=(--tls-cert "$T/server.pem" --tls-key "$T/server.key")
  LOAD_TLS=(--tls-ca "$T/ca.pem")
  CURL_TLS=(--cacert "$T/ca.pem")
  scheme=https
fi

bazel build //tools/tnmt //bench:serve_load > /dev/null 2>&1 || bazel build //tools/tnmt //bench:serve_load
BIN="$(bazel info bazel-bin 2>/dev/null)"
TNMT="$BIN/tools/tnmt/tnmt"
LOAD="$BIN/bench/serve_load"
INPUT="${INPUT:-}"
if [[ -z "$INPUT" && -e "$DATA/test_2016_flickr.en.gz" ]]; then
  zcat "$DATA/test_2016_flickr.en.gz" > "$WORK/input.txt"
  INPUT="$WORK/input.txt"
fi

rss_mib() { awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2> /dev/null || echo 0; }

# shellcheck disable=SC2086
"$TNMT" serve --model "soak=$MODEL" --port 0 --http-port 0 --threads "$THREADS" \
    --ready-file "$WORK/ready" "${SERVE_TLS[@]}" $SERVE_ARGS 2> "$WORK/server.log" &
server=$!
trap 'kill -KILL $server 2> /dev/null || true' EXIT
for _ in $(seq 600); do
  [[ -s "$WORK/ready" ]] && break
  kill -0 $server 2> /dev/null || { echo "server died:" >&2; tail -5 "$WORK/server.log" >&2; exit 1; }
  sleep 0.5
done
read -r grpc_port http_port < "$WORK/ready"
# One warm-up request, then the starting memory.
"$LOAD" --target "localhost:$grpc_port" "${LOAD_TLS[@]}" --clients 1 --requests 1 > /dev/null
rss_start=$(rss_mib $server)
echo "== server pid $server, gRPC :$grpc_port; RSS at start ${rss_start} MiB; ${CLIENTS} clients for ${DURATION} s, ${BAD} bad"
( peak=0
  while kill -0 $server 2> /dev/null; do
    r=$(rss_mib $server); (( r > peak )) && peak=$r
    echo "$(date +%s) $r $peak" >> "$WORK/rss.txt"
    sleep 5
  done ) &
sampler=$!
rc=0
# shellcheck disable=SC2086
"$LOAD" --target "localhost:$grpc_port" "${LOAD_TLS[@]}" --clients "$CLIENTS" --channels 4 --seconds "$DURATION" \
    --deadline-ms "$DEADLINE_MS" --bad-fraction "$BAD" --allow-codes DEADLINE_EXCEEDED,RESOURCE_EXHAUSTED \
    ${INPUT:+--input "$INPUT"} --json > "$WORK/load.json" || rc=$?
sleep 6  # the scheduler gives back what the load grew once idle
rss_end=$(rss_mib $server)
rss_peak=$(tail -1 "$WORK/rss.txt" | cut -d' ' -f3)
curl -s "${CURL_TLS[@]}" "$scheme://localhost:$http_port/metrics" > "$WORK/metrics.txt" || true
kill -TERM $server
server_rc=0
wait $server || server_rc=$?
kill $sampler 2> /dev/null || true
python3 - "$WORK/load.json" "$rss_start" "$rss_peak" "$rss_end" "$server_rc" "$CLIENTS" "$DURATION" "$BAD" "$MODEL" "$scheme" << 'PY'
import json, sys
path, rss_start, rss_peak, rss_end, server_rc, clients, duration, bad, model, scheme = sys.argv[1:]
r = json.load(open(path))
lat = r["latency_ms"]
print()
print(f"Soak: {model}, {clients} closed-loop clients, {duration} s, {float(bad):.0%} bad requests, deadline per request"
      + (", over TLS" if scheme == "https" else ""))
print()
print("| requests | good OK | good failures | OK req/s | sentences/s | p50 ms | p99 ms | RSS MiB start / peak / end | server exit |")
print("|---|---|---|---|---|---|---|---|---|")
fails = ", ".join(f"{k} {v}" for k, v in r["failures"].items()) or "0"
print(f"| {r['requests']} | {r['ok']} | {fails} | {r['requests_per_s']:.1f} | {r['sentences_per_s']:.1f} | "
      f"{lat['p50']:.0f} | {lat['p99']:.0f} | {rss_start} / {rss_peak} / {rss_end} | {server_rc} |")
print()
print("| bad request | answers |")
print("|---|---|")
for kind, codes in sorted(r.get("bad", {}).items()):
    print(f"| {kind} | " + ", ".join(f"{c} {n}" for c, n in sorted(codes.items())) + " |")
PY
echo "(server log, RSS samples, metrics and the load JSON: $WORK)"
[[ $rc == 0 && $server_rc == 0 ]]
