#!/usr/bin/env bash
# Builds the Docker images with deploy/build-image.sh (buildah, no registry) and runs them:
#   CPU image tnmt:latest
#     - the runtime stage runs as user tnmt (image config and the serving process: uid 10001)
#       and holds no compiler (gcc, g++, cc, c++, clang, cpp, nvcc, bazel, javac);
#     - the image's ENTRYPOINT + CMD, with its ports moved to free 127.0.0.1 ports, serves the
#       bundled demo model: gRPC health SERVING (host-built `tnmt health`), the image's
#       HEALTHCHECK command (port moved the same way) run inside the container exits 0, a
#       translation through the server equals local `tnmt translate --model models/demo`,
#       /metrics passes `promtool check metrics`, SIGTERM (the image's STOPSIGNAL) -> exit 0;
#   GPU images tnmt-gpu:latest and tnmt-train-gpu:latest (skipped with TNMT_IMAGE_TEST_KINDS=cpu)
#     - they build; `tnmt --version` and `tnmt translate --device cpu` (equal to local) run in
#       tnmt-gpu as uid 10001 with no compiler; mpirun is in tnmt-train-gpu.
# Prints each image's size and the build times. Containers run with `buildah run --isolation
# chroot` (the host's network, so only ports on 127.0.0.1 chosen free here are used); every
# container is removed on exit, also on failure. Needs root, buildah, debootstrap and promtool
# (deploy/install-deps.sh). The first build on a machine compiles tnmt inside the image (the
# layers are kept in buildah's storage, so later builds reuse them).
# Usage: image_test.sh TNMT   (TNMT: the host-built tools/tnmt binary, from the runfiles)
set -uo pipefail

TNMT="$(readlink -f "$1")"
# Bazel runs tests in the runfiles tree; its files link back to the source tree, the build context.
repo="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
kinds="${TNMT_IMAGE_TEST_KINDS:-cpu gpu}"
TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/image.XXXXXX")"
export PATH="$PATH:/usr/sbin:/sbin"
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
bh() { buildah --storage-driver "$STORAGE_DRIVER" "$@"; }
fails=0
check() {  # check DESCRIPTION COMMAND...
  local what="$1"; shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}
fail() { echo "FAIL  $*"; fails=$((fails + 1)); }

if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: image_test needs root (buildah with chroot isolation); tools/run-tests.sh runs as root"
  exit 1
fi
for tool in buildah debootstrap promtool curl python3; do
  if ! command -v "$tool" > /dev/null; then
    echo "FAIL: $tool is not installed; run deploy/install-deps.sh"
    exit 1
  fi
done

# Containers and processes this test started; all are ended on exit.
containers=()
pids=()
cleanup() {
  local p c
  for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done
  for c in "${containers[@]}"; do bh rm "$c" > /dev/null 2>&1; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

new_container() {  # new_container IMAGE: a working container of IMAGE, its name in $CTR
  CTR=$(bh from --pull=never --quiet "$1") || { CTR=""; return 1; }
  containers+=("$CTR")
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
descendants() {  # descendants PID: every process below PID (from /proc, no procps needed)
  local stat line rest c
  for stat in /proc/[0-9]*/stat; do
    read -r line < "$stat" 2> /dev/null || continue
    rest=${line##*) }  # after "PID (COMM) ": STATE PPID ...
    read -r _ c _ <<< "$rest"
    if [[ $c == "$1" ]]; then
      c=${stat#/proc/}
      c=${c%/stat}
      echo "$c"
      descendants "$c"
    fi
  done
}
# OpenBLAS settings of this machine reach the container too, so that the server computes with
# the same kernels as the local reference translation.
envs=()
for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
# Compilers and build tools that must not be in a runtime image.
no_compiler() {  # no_compiler CONTAINER
  local found
  found=$(bh run --isolation chroot "$1" -- sh -c \
    'for c in gcc g++ cc c++ clang cpp nvcc bazel javac; do command -v "$c"; done; true' < /dev/null)
  if [[ -n $found ]]; then echo "      found: $found"; return 1; fi
}
libs_resolve() {  # libs_resolve CONTAINER: every shared library of the binary is found
  local missing
  missing=$(bh run --isolation chroot "$1" -- sh -c 'ldd /usr/local/bin/tnmt /usr/local/lib/tnmt/libtnmt_spm.so | grep "not found"; true' < /dev/null)
  if [[ -n $missing ]]; then echo "      $missing"; return 1; fi
}
image_user() { bh inspect --type image --format '{{.Docker.Config.User}}' "$1"; }
image_size() { bh images --format '{{.Size}}' "$1" | head -n 1; }

# Reference output: the host-built tnmt on the same model and input.
cat > "$TMP/input.en" << 'EOF'
A man is riding a bicycle down the street.
Two dogs are playing in the snow.
A little girl in a red dress is smiling.
EOF
if ! "$TNMT" translate --model "$repo/models/demo" --input "$TMP/input.en" --output "$TMP/local.de" \
    2> "$TMP/local.err"; then
  cat "$TMP/local.err"
  echo "FAIL: local tnmt translate failed"
  exit 1
fi

build() {  # build KIND: runs deploy/build-image.sh KIND, output in $TMP/build-KIND.log
  local start=$SECONDS rc
  echo "== deploy/build-image.sh $1"
  "$repo/deploy/build-image.sh" "$1" > "$TMP/build-$1.log" 2>&1
  rc=$?
  if ((rc == 0)); then
    echo "ok    built $1 image(s) in $((SECONDS - start)) s"
    grep -E '^build-image: (made|built)' "$TMP/build-$1.log" | sed 's/^/      /'
    return 0
  fi
  echo "FAIL  deploy/build-image.sh $1 (exit status $rc) after $((SECONDS - start)) s; last lines:"
  tail -n 40 "$TMP/build-$1.log"
  fails=$((fails + 1))
  return 1
}

# ---------------------------------------------------------------------------------------------
if [[ " $kinds " == *" cpu "* ]] && build cpu; then
  image=localhost/tnmt:latest
  echo "      $image: $(image_size $image)"
  check "tnmt:latest runs as user tnmt" [ "$(image_user $image)" == tnmt ]
  new_container $image
  ctr=$CTR
  check "tnmt:latest has no compiler" no_compiler "$ctr"
  check "tnmt:latest: every shared library tnmt needs is there" libs_resolve "$ctr"

  grpc_port=$(free_port)
  http_port=$(free_port)
  while [[ $http_port == "$grpc_port" ]]; do http_port=$(free_port); done
  # The image's ENTRYPOINT + CMD, with its ports moved and bound to 127.0.0.1 only.
  bh inspect --type image $image > "$TMP/inspect.json"
  mapfile -t argv < <(python3 -c '
import json, sys
config = json.load(open(sys.argv[1]))["Docker"]["config"]
argv = (config.get("Entrypoint") or []) + (config.get("Cmd") or [])
grpc, http = sys.argv[2:]
for flag, value in (("--port", grpc), ("--http-port", http)):
    if flag not in argv:
        sys.exit(f"the image CMD has no {flag}: {argv}")
    argv[argv.index(flag) + 1] = value
print("\n".join(argv + ["--host", "127.0.0.1"]))' "$TMP/inspect.json" "$grpc_port" "$http_port")
  stop_signal=$(bh inspect --type image --format '{{.Docker.Config.StopSignal}}' $image)
  echo "      serving: ${argv[*]}"
  bh run --isolation chroot "${envs[@]}" "$ctr" -- "${argv[@]}" < /dev/null > "$TMP/serve.log" 2>&1 &
  run_pid=$!
  pids+=("$run_pid")

  # gRPC health SERVING from outside, within 180 s (the HEALTHCHECK's start period is 120 s).
  serving=0
  for _ in $(seq 180); do
    if "$TNMT" health --server "127.0.0.1:$grpc_port" --timeout-seconds 2 > /dev/null 2>&1; then
      serving=1
      break
    fi
    kill -0 "$run_pid" 2> /dev/null || break
    sleep 1
  done
  check "gRPC health SERVING on 127.0.0.1:$grpc_port (tnmt health from the host)" [ $serving == 1 ]
  server_pid=""
  for p in $(descendants "$run_pid"); do
    [[ $(cat "/proc/$p/comm" 2> /dev/null) == tnmt ]] && server_pid=$p
  done
  if [[ -z $server_pid ]]; then
    fail "no tnmt process in the container; its log:"
    tail -n 30 "$TMP/serve.log"
  else
    pids+=("$server_pid")
    uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$server_pid/status")
    check "the server runs as uid 10001 (Uid: $uids)" [ "$uids" == "10001 10001 10001 10001" ]
  fi

  if ((serving)); then
    # The image's HEALTHCHECK command, in the container, with the port moved as the CMD's.
    mapfile -t hargv < <(python3 -c '
import json, sys
config = json.load(open(sys.argv[1]))["Docker"]["config"]
test = (config.get("Healthcheck") or {}).get("Test") or []
if not test or test[0] != "CMD":
    sys.exit(f"no exec-form HEALTHCHECK: {test}")
print("\n".join(a.replace(":50051", ":" + sys.argv[2]) for a in test[1:]))' "$TMP/inspect.json" "$grpc_port")
    new_container $image
    hctr=$CTR
    check "the image's HEALTHCHECK (${hargv[*]}) exits 0" \
      bh run --isolation chroot "$hctr" -- "${hargv[@]}" < /dev/null

    if "$TNMT" translate --server "127.0.0.1:$grpc_port" --timeout-seconds 60 --input "$TMP/input.en" \
        --output "$TMP/served.de" 2> "$TMP/served.err"; then
      check "translation through the server equals local tnmt translate" cmp -s "$TMP/local.de" "$TMP/served.de"
      if ! cmp -s "$TMP/local.de" "$TMP/served.de"; then diff "$TMP/local.de" "$TMP/served.de"; fi
      sed 's/^/      /' "$TMP/served.de"
    else
      fail "tnmt translate --server: $(cat "$TMP/served.err")"
    fi

    if curl -s -f --max-time 10 -o "$TMP/metrics.txt" "http://127.0.0.1:$http_port/metrics"; then
      check "/metrics passes promtool check metrics" sh -c "promtool check metrics < '$TMP/metrics.txt'"
      check "/metrics counts the translation (tnmt_requests_total)" grep -q '^tnmt_requests_total' "$TMP/metrics.txt"
    else
      fail "GET http://127.0.0.1:$http_port/metrics"
    fi
  fi

  if [[ -n $server_pid ]]; then
    check "the image's STOPSIGNAL is SIGTERM" [ "$stop_signal" == SIGTERM ]
    kill -TERM "$server_pid"
    status=""
    for _ in $(seq 600); do  # 60 s: the drain has no request in flight
      if ! kill -0 "$run_pid" 2> /dev/null; then
        wait "$run_pid"
        status=$?
        break
      fi
      sleep 0.1
    done
    check "SIGTERM -> exit 0 (exit status ${status:-none: still running after 60 s})" [ "${status:-x}" == 0 ]
  fi
  if ((fails > 0)); then echo "--- server log (last lines)"; tail -n 30 "$TMP/serve.log"; echo "---"; fi
fi

# ---------------------------------------------------------------------------------------------
if [[ " $kinds " == *" gpu "* ]] && build gpu; then
  for image in localhost/tnmt-gpu:latest localhost/tnmt-train-gpu:latest; do
    echo "      $image: $(image_size $image)"
    check "$image runs as user tnmt" [ "$(image_user $image)" == tnmt ]
  done
  new_container localhost/tnmt-gpu:latest
  ctr=$CTR
  check "tnmt-gpu:latest has no compiler" no_compiler "$ctr"
  check "tnmt-gpu:latest: every shared library tnmt needs is there (CUDA's too)" libs_resolve "$ctr"
  if bh run --isolation chroot "$ctr" -- /usr/local/bin/tnmt --version < /dev/null > "$TMP/version" 2>&1; then
    echo "ok    tnmt --version in tnmt-gpu: $(head -n 1 "$TMP/version")"
  else
    fail "tnmt --version in tnmt-gpu: $(cat "$TMP/version")"
  fi
  check "tnmt-gpu runs as uid 10001" [ "$(bh run --isolation chroot "$ctr" -- id -u < /dev/null)" == 10001 ]
  if bh run --isolation chroot "${envs[@]}" "$ctr" -- /usr/local/bin/tnmt translate --device cpu \
      --model /usr/local/share/tnmt/models/demo < "$TMP/input.en" > "$TMP/gpu.de" 2> "$TMP/gpu.err"; then
    check "tnmt translate --device cpu in tnmt-gpu equals local tnmt translate" cmp -s "$TMP/local.de" "$TMP/gpu.de"
    if ! cmp -s "$TMP/local.de" "$TMP/gpu.de"; then diff "$TMP/local.de" "$TMP/gpu.de"; fi
  else
    fail "tnmt translate --device cpu in tnmt-gpu: $(tail -n 5 "$TMP/gpu.err")"
  fi
  new_container localhost/tnmt-train-gpu:latest
  tctr=$CTR
  check "tnmt-train-gpu has mpirun and tnmt train" bh run --isolation chroot "$tctr" -- \
    sh -c 'command -v mpirun > /dev/null && /usr/local/bin/tnmt train --help > /dev/null' < /dev/null
fi

echo "image sizes:"
bh images --format '  {{.Name}}:{{.Tag}}  {{.Size}}' --filter 'reference=localhost/tnmt*'
echo "$fails failure(s)"
exit $((fails > 0))
