#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies (apt), build tnmt, start the
# translation server with the bundled English->German demo model (models/demo), and translate
# sample sentences through it. The server then keeps running until Ctrl-C (SIGTERM/SIGINT:
# it drains and exits 0).
#
#   tools/quickstart.sh            install, build, serve on :50051 (gRPC) and :8080 (HTTP)
#   tools/quickstart.sh --once     ... translate the samples, then shut the server down
#
# Environment: TNMT_BIN (use this tnmt binary; skips install and build), PORT, HTTP_PORT
# (0 = any free port), TNMT_MODEL (serve this model directory instead of the demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
once=false
for arg in "$@"; do
  case "$arg" in
    --once) once=true ;;
    *) echo "quickstart: unknown option $arg (--once)" >&2; exit 2 ;;
  esac
done

tnmt="${TNMT_BIN:-}"
if [[ -z "$tnmt" ]]; then
  deploy/install-deps.sh
  bazel build //tools/tnmt
  tnmt=bazel-bin/tools/tnmt/tnmt
fi
model_flags=()
[[ -n "${TNMT_MODEL:-}" ]] && model_flags=(--model "demo=$TNMT_MODEL")

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
"$tnmt" serve "${model_flags[@]}" --port "${PORT:-50051}" --http-port "${HTTP_PORT:-8080}" \
  --ready-file "$state/ready" &
server=$!
stop() { kill -TERM "$server" 2> /dev/null || true; wait "$server"; }
trap 'stop; rm -rf "$state"; exit 130' INT TERM
for _ in $(seq 600); do
  [[ -s "$state/ready" ]] && break
  kill -0 "$server" 2> /dev/null || { echo "quickstart: the server did not start" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$state/ready" ]] || { echo "quickstart: the server was not ready within 60 s" >&2; stop; exit 1; }
read -r grpc_port http_port < "$state/ready"
"$tnmt" health --address "localhost:$grpc_port" > /dev/null

echo "== tnmt serve is ready: gRPC localhost:$grpc_port, HTTP http://localhost:$http_port (web page, /metrics)"
echo "== translating through the server (tnmt translate --server localhost:$grpc_port):"
printf 'A man is riding a bicycle.\nTwo dogs play in the snow.\nA little girl in a pink dress is climbing stairs.\n' |
  "$tnmt" translate --server "localhost:$grpc_port" --scores

if $once; then
  stop
  echo "== server stopped cleanly"
  exit 0
fi
echo "== the server keeps running; Ctrl-C stops it"
wait "$server"
