#!/usr/bin/env bash
# Validates deploy/ with validate_manifests.py, then proves the validator catches breakage:
# each case copies the files, breaks one thing and expects exit status 1 and a message naming
# it. Python tools come from deploy/install-py-tools.sh (build/py-tools, or $TNMT_PY_TOOLS via
# --test_env); without them this test fails, it never skips.
set -uo pipefail

# Bazel runs tests in the runfiles tree; its files link back to the source tree, which holds
# build/py-tools.
repo="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
venv="${TNMT_PY_TOOLS:-$repo/build/py-tools}"
py="$venv/bin/python3"
if [[ ! -x $py ]] || ! "$py" -c 'import kubernetes_validate, yaml, jsonschema'; then
  echo "FAIL: the deploy test tools are not installed in $venv (kubernetes-validate, PyYAML)." >&2
  echo "      Run deploy/install-py-tools.sh (tools/run-tests.sh does) and test again." >&2
  exit 1
fi
validator="$PWD/tests/deploy/validate_manifests.py"
failures=0

echo "== deploy/ as committed"
if ! "$py" "$validator" --root . -v; then
  echo "FAIL: deploy/ does not validate"
  failures=$((failures + 1))
fi

work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/broken.XXXXXX")"
cases=0
# broken NAME EXPECTED_ERE FILE OLD NEW: OLD must occur exactly once in FILE.
broken() {
  local name=$1 expect=$2 file=$3 old=$4 new=$5 out rc
  cases=$((cases + 1))
  rm -rf "$work/t" && mkdir -p "$work/t" && cp -rL deploy server tools "$work/t/"
  if ! "$py" - "$work/t/$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: {old!r} occurs {text.count(old)} times, want 1 (update this case)")
open(path, "w").write(text.replace(old, new))
PY
  then
    echo "FAIL [$name]: could not break the copy"; failures=$((failures + 1)); return
  fi
  out="$("$py" "$validator" --root "$work/t" 2>&1)"
  rc=$?
  if [[ $rc -ne 1 ]]; then
    echo "FAIL [$name]: validator exit status $rc on a broken copy, want 1"; echo "$out"
    failures=$((failures + 1))
  elif ! grep -qE -- "$expect" <<< "$out"; then
    echo "FAIL [$name]: no error matching /$expect/ in:"; echo "$out"
    failures=$((failures + 1))
  else
    echo "ok    rejects [$name]: $(grep -m1 -E -- "$expect" <<< "$out")"
  fi
}

echo "== broken copies (each must fail)"
broken "unknown field (strict schema)" "spec: Additional properties are not allowed \('replica' was unexpected\)" \
  deploy/k8s/serve-cpu.yaml $'  replicas: 2\n' $'  replica: 2\n'
broken "gRPC probe on a named port" "readinessProbe.grpc.port: 'grpc' is not of type 'integer'" \
  deploy/k8s/serve-cpu.yaml $'          readinessProbe:\n            grpc:\n              port: 50051' \
  $'          readinessProbe:\n            grpc:\n              port: grpc'
broken "liveness on gRPC health (NOT_SERVING while loading)" "livenessProbe must be an HTTP GET of /healthz" \
  deploy/k8s/serve-cpu.yaml $'          livenessProbe:\n            httpGet:\n              path: /healthz\n              port: http' \
  $'          livenessProbe:\n            grpc:\n              port: 50051'
broken "removed API version" "PodDisruptionBudget/tnmt-serve: Couldn't find schema" \
  deploy/k8s/pdb.yaml "apiVersion: policy/v1" "apiVersion: policy/v1beta1"
broken "YAML syntax" "hpa.yaml: not valid YAML" \
  deploy/k8s/hpa.yaml "  minReplicas: 2" "  minReplicas: [2"
broken "ServiceMonitor without selector" "ServiceMonitor/tnmt: spec: 'selector' is a required property" \
  deploy/k8s/servicemonitor.yaml $'  selector:\n    matchLabels:\n      app.kubernetes.io/name: tnmt\n      app.kubernetes.io/component: serve\n' ""
broken "MPIJob enum" "MPIJob/tnmt-train-multinode: spec.runPolicy.cleanPodPolicy: 'Sometimes' is not one of" \
  deploy/k8s/train-mpijob.yaml "cleanPodPolicy: Running" "cleanPodPolicy: Sometimes"
broken "MPIJob pod template" "spec.mpiReplicaSpecs.Worker.template.spec.containers.0.ports.0.containerPort: '2222' is not of type 'integer'" \
  deploy/k8s/train-mpijob.yaml "containerPort: 2222" "containerPort: \"2222\""
broken "MPIJob ranks" "mpirun -np 12 != 2 workers x 8 slotsPerWorker" \
  deploy/k8s/train-mpijob.yaml $'- -np\n                - "16"' $'- -np\n                - "12"'
broken "Job ranks vs GPUs" "mpirun -np 4 != nvidia.com/gpu limit 8" \
  deploy/k8s/train-job.yaml $'- -np\n            - "8"' $'- -np\n            - "4"'
broken "checkpoints off the PVC" "--save-dir /tmp/ende-base is not on a PersistentVolumeClaim" \
  deploy/k8s/train-job.yaml "--save-dir=/checkpoints/ende-base" "--save-dir=/tmp/ende-base"
broken "unknown training key" "unknown training key\(s\) \['keep_lats'\]" \
  deploy/k8s/train-config.yaml '"keep_last": 10,' '"keep_lats": 10,'
broken "drain cut short" "terminationGracePeriodSeconds 30 must exceed --grace-seconds 30" \
  deploy/k8s/serve-cpu.yaml "terminationGracePeriodSeconds: 60" "terminationGracePeriodSeconds: 30"
broken "unknown serve flag" "has no flag --grace-period" \
  deploy/k8s/serve-cpu.yaml "--grace-seconds=30" "--grace-period=30"
broken "Service to a missing port" "port http targets 'metrics'" \
  deploy/k8s/service.yaml $'      port: 8080\n      targetPort: http' $'      port: 8080\n      targetPort: metrics'
broken "HEALTHCHECK on another port" "HEALTHCHECK --server '127.0.0.1:50052' is not HOST:50051" \
  deploy/Dockerfile '"127.0.0.1:50051"' '"127.0.0.1:50052"'
broken "compose bind mount missing" "bind mount source ./prometheus.yaml does not exist" \
  deploy/compose/docker-compose.yml "./prometheus.yml:" "./prometheus.yaml:"
broken "Prometheus config" "promtool check config" \
  deploy/compose/prometheus.yml "scrape_interval: 15s" "scrape_interval: 15 seconds"
broken "dashboard metric not exported" "metric tnmt_queue_depth is not registered in server/metrics.cc" \
  deploy/compose/grafana/dashboards/tnmt.json "tnmt_queue_length{" "tnmt_queue_depth{"
broken "dashboard histogram without _bucket" "tnmt_batch_tokens is a histogram" \
  deploy/compose/grafana/dashboards/tnmt.json "rate(tnmt_batch_tokens_bucket{" "rate(tnmt_batch_tokens{"
broken "dashboard PromQL syntax" "a dashboard expression does not parse" \
  deploy/compose/grafana/dashboards/tnmt.json "(tnmt_inflight_requests)" "(tnmt_inflight_requests"

echo "$cases broken copies tried, $failures failure(s)"
exit $((failures > 0))
