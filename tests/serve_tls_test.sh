#!/usr/bin/env bash
# `tnmt serve` over TLS as docs/serving.md shows it, on the tiny golden model, with
# certificates made by openssl here:
#   a. --tls-cert/--tls-key: `tnmt translate|models|health --server --tls-ca` work, the same
#      commands in plaintext fail, curl --cacert gets /readyz and /api/translate over HTTPS and
#      plain HTTP gets a 400 that says so; a certificate that does not match its key stops the start
#      (exit 2, naming the flag);
#   b. SIGHUP after replacing the files: HTTPS serves the new certificate (issued by another
#      CA) at once and gRPC within a few seconds; a broken file on SIGHUP is logged and the
#      server keeps serving;
#   c. --tls-client-ca: without a client certificate translate and curl fail, with one they work;
#   d. --api-token-file: translate without --token-file fails with UNAUTHENTICATED, with it
#      (and with $TNMT_API_TOKEN_FILE) works; health needs no token.
# Usage: serve_tls_test.sh TNMT MODEL_DIR
set -u
TNMT="$1"
MODEL="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
for tool in openssl curl; do
  if ! command -v "$tool" > /dev/null; then
    echo "SKIPPED: no $tool"
    exit 0
  fi
done

pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; }
trap cleanup EXIT

# make_ca DIR: a CA in DIR/ca.{pem,key}; issue DIR NAME CN: DIR/NAME.{pem,key} signed by it.
make_ca() {
  mkdir -p "$1"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=test-ca-$(basename "$1")" \
    -keyout "$1/ca.key" -out "$1/ca.pem" 2> /dev/null
}
issue() {
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$1/$2.ext"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$3" -keyout "$1/$2.key" -out "$1/$2.csr" 2> /dev/null
  openssl x509 -req -days 2 -in "$1/$2.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial \
    -extfile "$1/$2.ext" -out "$1/$2.pem" 2> /dev/null
}
make_ca "$TMP/a"; issue "$TMP/a" server localhost; issue "$TMP/a" client a-client
make_ca "$TMP/b"; issue "$TMP/b" server localhost

# start NAME FLAGS...: tnmt serve on free ports; sets PID, GRPC, HTTP (empty if it did not start).
start() {
  local name="$1"; shift
  rm -f "$TMP/$name.ready"
  "$TNMT" serve --model "tiny=$MODEL" --host 127.0.0.1 --port 0 --http-port 0 --threads 1 \
    --ready-file "$TMP/$name.ready" "$@" 2> "$TMP/$name.log" &
  PID=$!
  pids+=("$PID")
  GRPC="" HTTP=""
  local i
  for i in $(seq 300); do
    if [[ -s "$TMP/$name.ready" ]]; then
      read -r GRPC HTTP < "$TMP/$name.ready"
      return 0
    fi
    kill -0 "$PID" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}
stop() { kill -TERM "$1" 2> /dev/null; wait "$1" 2> /dev/null; }

echo "Hello, world." > "$TMP/in.txt"
translate() { "$TNMT" translate --server "127.0.0.1:$GRPC" --timeout-seconds 20 "$@" < "$TMP/in.txt"; }

# a. TLS.
mkdir -p "$TMP/live"
cp "$TMP/a/server.pem" "$TMP/live/cert.pem"
cp "$TMP/a/server.key" "$TMP/live/key.pem"
check "a: server starts with TLS" start tls --tls-cert "$TMP/live/cert.pem" --tls-key "$TMP/live/key.pem"

translate --tls-ca "$TMP/a/ca.pem" --tls-server-name localhost > "$TMP/out.txt" 2> "$TMP/err.txt"
check "a: translate over TLS exits 0 with a line" test $? -eq 0 -a "$(wc -l < "$TMP/out.txt")" -eq 1
translate > /dev/null 2> "$TMP/err.txt"
check "a: plaintext translate fails (exit 2, UNAVAILABLE)" test $? -eq 2
check "a: ... and says UNAVAILABLE" grep -q UNAVAILABLE "$TMP/err.txt"
"$TNMT" models --server "localhost:$GRPC" --tls-ca "$TMP/a/ca.pem" > "$TMP/models.txt" 2>&1
check "a: models over TLS lists tiny" grep -q tiny "$TMP/models.txt"
"$TNMT" health --server "localhost:$GRPC" --tls-ca "$TMP/a/ca.pem" > "$TMP/health.txt" 2>&1
check "a: health over TLS SERVING" grep -qx SERVING "$TMP/health.txt"
"$TNMT" health --server "localhost:$GRPC" > /dev/null 2>&1
check "a: plaintext health fails" test $? -ne 0
check "a: HTTPS /readyz 200" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$TMP/a/ca.pem" "https://localhost:$HTTP/readyz")" = 200
check "a: HTTPS /api/translate 200" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 --cacert "$TMP/a/ca.pem" \
  -H 'Content-Type: application/json' -d '{"texts": ["Hello."]}' "https://localhost:$HTTP/api/translate")" = 200
code=$(curl -s -o "$TMP/plain.txt" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$HTTP/readyz")
check "a: plain HTTP to the TLS port is refused with 400 (got $code)" test "$code" = 400
check "a: ... saying the port speaks HTTPS" grep -qi "https\|tls" "$TMP/plain.txt"

# b. Rotation: the files replaced by B's, then SIGHUP.
cp "$TMP/b/server.pem" "$TMP/live/cert.new" && mv "$TMP/live/cert.new" "$TMP/live/cert.pem"
cp "$TMP/b/server.key" "$TMP/live/key.new" && mv "$TMP/live/key.new" "$TMP/live/key.pem"
kill -HUP "$PID"
ok=1
for i in $(seq 100); do
  [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$TMP/b/ca.pem" "https://localhost:$HTTP/healthz")" = 200 ]] && { ok=0; break; }
  sleep 0.1
done
check "b: HTTPS serves the new certificate after SIGHUP" test $ok -eq 0
check "b: ... and no longer the old one" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$TMP/a/ca.pem" "https://localhost:$HTTP/healthz")" = 000
ok=1
for i in $(seq 50); do
  translate --tls-ca "$TMP/b/ca.pem" --tls-server-name localhost > /dev/null 2>&1 && { ok=0; break; }
  sleep 0.2
done
check "b: gRPC serves the new certificate" test $ok -eq 0
echo "garbage" > "$TMP/live/key.pem"
kill -HUP "$PID"
for i in $(seq 50); do grep -q "TLS reload failed" "$TMP/tls.log" && break; sleep 0.1; done
check "b: a broken key on SIGHUP is logged" grep -q "TLS reload failed.*--tls-key" "$TMP/tls.log"
check "b: ... and HTTPS keeps serving" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$TMP/b/ca.pem" "https://localhost:$HTTP/healthz")" = 200
stop "$PID"
"$TNMT" serve --model "tiny=$MODEL" --port 0 --http-port -1 --tls-cert "$TMP/a/server.pem" --tls-key "$TMP/b/server.key" 2> "$TMP/mismatch.log"
check "a: a key that does not match its certificate: exit 2" test $? -eq 2
check "a: ... naming the flag" grep -q -- "--tls-key .*does not match" "$TMP/mismatch.log"

# c. Mutual TLS.
check "c: server starts with --tls-client-ca" start mtls --tls-cert "$TMP/a/server.pem" --tls-key "$TMP/a/server.key" --tls-client-ca "$TMP/a/ca.pem"
translate --tls-ca "$TMP/a/ca.pem" --tls-server-name localhost > /dev/null 2>&1
check "c: no client certificate: translate fails" test $? -ne 0
translate --tls-ca "$TMP/a/ca.pem" --tls-server-name localhost --tls-cert "$TMP/a/client.pem" --tls-key "$TMP/a/client.key" > "$TMP/out.txt" 2>&1
check "c: with the client certificate: translate works" test $? -eq 0
check "c: curl without a client certificate fails" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$TMP/a/ca.pem" "https://localhost:$HTTP/healthz")" = 000
check "c: curl with it gets 200" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$TMP/a/ca.pem" --cert "$TMP/a/client.pem" --key "$TMP/a/client.key" "https://localhost:$HTTP/healthz")" = 200
stop "$PID"

# d. The translation token.
printf '0123456789abcdef-secret\n' > "$TMP/token"
check "d: server starts with --api-token-file" start token --api-token-file "$TMP/token"
translate > /dev/null 2> "$TMP/err.txt"
check "d: no token: exit 2" test $? -eq 2
check "d: ... UNAUTHENTICATED" grep -q UNAUTHENTICATED "$TMP/err.txt"
translate --token-file "$TMP/token" > "$TMP/out.txt" 2>&1
check "d: --token-file: works" test $? -eq 0
TNMT_API_TOKEN_FILE="$TMP/token" translate > "$TMP/out.txt" 2>&1
check "d: \$TNMT_API_TOKEN_FILE: works" test $? -eq 0
"$TNMT" health --server "127.0.0.1:$GRPC" > "$TMP/health.txt" 2>&1
check "d: health needs no token" grep -qx SERVING "$TMP/health.txt"
check "d: /api/translate without the header: 401" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 \
  -H 'Content-Type: application/json' -d '{"texts": ["Hello."]}' "http://127.0.0.1:$HTTP/api/translate")" = 401
stop "$PID"

echo "$fails failed"
exit $((fails > 0))
