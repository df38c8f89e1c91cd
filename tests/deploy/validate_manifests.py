#!/usr/bin/env python3
"""Offline validation of tnmt's deployment files (deploy/).

  validate_manifests.py [--root DIR]      DIR: a tree with deploy/, server/metrics.cc and
                                          tools/tnmt/{main,serve_command,train_command}.cc

Checks, each failure printed as one "ERROR <file>: <what>" line:
- Kubernetes (deploy/k8s/*.yaml): every object against the Kubernetes 1.28 OpenAPI schemas of
  kubernetes-validate in strict mode (unknown fields are errors); the CRDs it cannot know
  (ServiceMonitor, MPIJob) against small schemas of our own below, with the MPIJob's pod
  templates again against the Kubernetes PodTemplate schema. Then what the schemas cannot
  see: selectors that match their pods, Services/HPA/PDB/ServiceMonitor that point at objects
  and ports that exist, volumes, ConfigMaps and PVCs that exist, `tnmt` flags that exist in the
  C++ sources, gRPC probes on the served port, a termination grace longer than the server's
  drain, mpirun ranks that match the GPUs, --save-dir on a PVC, training config keys.
- Compose (deploy/compose/docker-compose*.yml): parses; build contexts, Dockerfiles and bind
  mounts exist; named volumes and depends_on are declared; the stop grace covers the drain.
- Prometheus (deploy/compose/prometheus.yml): `promtool check config`.
- Grafana: provisioning files parse; every dashboard is valid JSON, uses the provisioned
  datasource, and every PromQL expression parses (`promtool check rules`) and names only
  metrics that server/metrics.cc registers (histograms only as _bucket/_sum/_count).
- Dockerfiles (deploy/Dockerfile*): non-root user, HEALTHCHECK through `tnmt health` on the
  served gRPC port, serve flags that exist, the demo model and SentencePiece shim installed.
Exit status: 0 all valid, 1 something invalid, 2 tools missing (deploy/install-py-tools.sh).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import kubernetes_validate
    import yaml
    from kubernetes_validate.utils import SchemaNotFoundError
    from kubernetes_validate.utils import ValidationError as KubernetesValidationError
except ImportError as e:  # never skip: a missing tool is a failure
    print(f"FATAL: {e}. Install the deploy test tools with deploy/install-py-tools.sh",
          file=sys.stderr)
    sys.exit(2)

K8S_VERSION = "1.28"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DEFAULT_GRPC_PORT = 50051
DEFAULT_HTTP_PORT = 8080
DEFAULT_GRACE_SECONDS = 30
DEMO_MODEL_DIR = "/usr/local/share/tnmt/models/demo"
SPM_SHIM = "/usr/local/lib/tnmt/libtnmt_spm.so"
# `tnmt health` is the Docker HEALTHCHECK's client; its interface is agreed but its source may
# land after these files: tnmt health --server HOST:PORT [--service NAME] [--timeout-seconds N].
HEALTH_FLAGS = {"server", "service", "timeout-seconds"}
# Flags the deploy files use ahead of the C++ change that adds them: a warning, not an error,
# while the source lacks them (the warning disappears once it has them).
PENDING_FLAGS = {
    ("serve", "device"): "the GPU work adds `tnmt serve --device`; until then the GPU image "
                         "and serve-gpu.yaml exit 2 on it",
}

# ----------------------------------------------------------------------------------------------
# Schemas of our own for the custom resources kubernetes-validate has no schema for. They hold
# the fields the operators require and the ones we use, with their types and enums; unknown
# spec fields are errors, as in strict mode.

NAME = {"type": "string", "pattern": DNS1123_LABEL.pattern, "maxLength": 63}
METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": NAME,
        "namespace": NAME,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}
LABEL_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"},
                        "minProperties": 1},
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "required": ["key", "operator"],
            "properties": {"key": {"type": "string"},
                           "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                           "values": {"type": "array", "items": {"type": "string"}}},
            "additionalProperties": False}},
    },
    "minProperties": 1,
    "additionalProperties": False,
}
DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": LABEL_SELECTOR,
                "namespaceSelector": {"type": "object"},
                "jobLabel": {"type": "string"},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "required": ["port"],
                    "properties": {
                        "port": {"type": "string", "minLength": 1},
                        "path": {"type": "string", "pattern": "^/"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": DURATION,
                        "scrapeTimeout": DURATION,
                        "honorLabels": {"type": "boolean"},
                        "relabelings": {"type": "array"},
                        "metricRelabelings": {"type": "array"},
                    },
                    "additionalProperties": False,
                }},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
REPLICA_SPEC = {
    "type": "object",
    "required": ["template"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object", "required": ["spec"]},  # the pod: Kubernetes' schema
    },
    "additionalProperties": False,
}
MPIJOB_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["mpiReplicaSpecs"],
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 1},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "sshAuthMountPath": {"type": "string", "pattern": "^/"},
                "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
                "runPolicy": {
                    "type": "object",
                    "properties": {
                        "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                        "backoffLimit": {"type": "integer", "minimum": 0},
                        "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                        "suspend": {"type": "boolean"},
                        "schedulingPolicy": {"type": "object"},
                    },
                    "additionalProperties": False,
                },
                "mpiReplicaSpecs": {
                    "type": "object",
                    "required": ["Launcher"],
                    "properties": {
                        "Launcher": {"allOf": [REPLICA_SPEC, {"properties": {
                            "replicas": {"const": 1}}}]},
                        "Worker": REPLICA_SPEC,
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR_SCHEMA,
    ("kubeflow.org/v2beta1", "MPIJob"): MPIJOB_SCHEMA,
}

COMPOSE_TOP_KEYS = {"name", "version", "services", "volumes", "networks", "configs", "secrets"}
COMPOSE_SERVICE_KEYS = {
    "build", "image", "command", "entrypoint", "environment", "env_file", "ports", "expose",
    "volumes", "depends_on", "restart", "healthcheck", "deploy", "stop_grace_period",
    "stop_signal", "user", "profiles", "networks", "labels", "ulimits", "shm_size", "init",
    "container_name", "extra_hosts", "read_only", "tmpfs", "logging", "cap_add", "cap_drop",
    "security_opt", "working_dir", "gpus", "ipc", "hostname", "platform", "pull_policy",
}


class Report:
    def __init__(self, root):
        self.root = root
        self.errors = []
        self.warnings = []
        self.passed = []

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def error(self, path, message):
        self.errors.append(f"ERROR {self.rel(path)}: {message}")

    def warn(self, path, message):
        self.warnings.append(f"WARN {self.rel(path)}: {message}")

    def ok(self, path, what):
        self.passed.append(f"ok    {self.rel(path)}: {what}")


# ----------------------------------------------------------------------------------------------
# Facts from the C++ sources.

class Sources:
    def __init__(self, root):
        def read(rel):
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                return f.read()
        metrics_cc = read("server/metrics.cc")
        self.metrics = {name: kind for kind, name in re.findall(
            r'Build(Counter|Gauge|Histogram)\(\)\s*\.Name\("([^"]+)"\)', metrics_cc)}
        if len(self.metrics) < 5:
            raise SystemExit("FATAL: found almost no metric names in server/metrics.cc "
                             f"({sorted(self.metrics)}): has the registration code changed?")
        serve_cc = read("tools/tnmt/serve_command.cc")
        self.serve_flags = set(re.findall(r'args\.Add(?:String|Int|Bool|Float)\("([a-z0-9-]+)"',
                                          serve_cc))
        self.serve_bools = set(re.findall(r'args\.AddBool\("([a-z0-9-]+)"', serve_cc))
        train_cc = read("tools/tnmt/train_command.cc")
        keys = re.findall(r'\{"([a-z_0-9]+)", Kind::k(String|Int|Float|Bool)', train_cc)
        self.train_keys = {k for k, _ in keys}
        # Config keys as flags, plus the command's own flags (--config, --devices, ...).
        self.train_flags = ({k.replace("_", "-") for k in self.train_keys} |
                            set(re.findall(r'args\.Add(?:String|Int|Bool|Float)\("([a-z0-9-]+)"', train_cc)) |
                            {"config"})
        self.train_bools = {k.replace("_", "-") for k, kind in keys if kind == "Bool"}
        if not self.serve_flags or not self.train_keys:
            raise SystemExit("FATAL: no flags found in tools/tnmt/{serve,train}_command.cc")
        self.has_health = '"health"' in read("tools/tnmt/main.cc")


# ----------------------------------------------------------------------------------------------
# Helpers.

def load_yaml_docs(report, path):
    try:
        with open(path, encoding="utf-8") as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        report.error(path, f"not valid YAML: {e}")
        return None


def quantity(value):
    """A Kubernetes quantity as a float (cores, bytes, counts)."""
    s = str(value)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", s)
    if not m or (m.group(2) and m.group(2) not in units):
        return None
    return float(m.group(1)) * units.get(m.group(2), 1)


def duration_seconds(value):
    """A compose duration ("45s", "1m30s") in seconds."""
    total, s = 0.0, str(value)
    for number, unit in re.findall(r"([0-9.]+)(ms|us|h|m|s)", s):
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[unit]
    return total if re.fullmatch(r"([0-9.]+(ms|us|h|m|s))+", s) else None


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def parse_flags(tokens, bools):
    """[--a=1, --b, 2, --flag] -> ([(name, value)], positional)."""
    flags, positional, i = [], [], 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--"):
            name, eq, value = t[2:].partition("=")
            if not eq:
                bare = name[3:] if name.startswith("no-") else name
                if bare in bools or name in bools:
                    value = None
                elif i + 1 < len(tokens):
                    value = tokens[i + 1]
                    i += 1
                else:
                    value = None
            flags.append((name, value))
        else:
            positional.append(t)
        i += 1
    return flags, positional


def tnmt_invocation(argv, entrypoint_is_tnmt):
    """(subcommand, argv after it) of the tnmt run by a command line, or (None, None)."""
    if entrypoint_is_tnmt and argv and not argv[0].startswith("-"):
        return argv[0], argv[1:]
    for i, t in enumerate(argv):
        if os.path.basename(t) == "tnmt" and i + 1 < len(argv):
            return argv[i + 1], argv[i + 2:]
    return None, None


def check_tnmt_flags(report, path, where, sub, rest, sources):
    known = {"serve": (sources.serve_flags, sources.serve_bools),
             "train": (sources.train_flags, sources.train_bools)}
    if sub not in known:
        return []
    flags, _ = parse_flags(rest, known[sub][1])
    for name, _ in flags:
        bare = name[3:] if name.startswith("no-") and name[3:] in known[sub][1] else name
        if bare in known[sub][0]:
            continue
        if (sub, bare) in PENDING_FLAGS:
            report.warn(path, f"{where}: `tnmt {sub} --{bare}` is not in the sources yet: "
                              f"{PENDING_FLAGS[(sub, bare)]}")
            continue
        report.error(path, f"{where}: `tnmt {sub}` has no flag --{name} "
                           f"(tools/tnmt/{sub}_command.cc)")
    return flags


def flag_value(flags, name, default=None):
    for n, v in reversed(flags):
        if n == name:
            return v
    return default


def as_int(report, path, where, value, name):
    try:
        return int(value)
    except (TypeError, ValueError):
        report.error(path, f"{where}: --{name} must be an integer, got {value!r}")
        return None


# ----------------------------------------------------------------------------------------------
# Kubernetes.

def schema_errors(schema, doc):
    validator = jsonschema.Draft202012Validator(schema)
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        yield ".".join(str(p) for p in e.absolute_path) or "(top)", e.message


def validate_k8s_schema(report, path, doc):
    kind, api = doc.get("kind"), doc.get("apiVersion")
    name = (doc.get("metadata") or {}).get("name")
    what = f"{kind}/{name}"
    if not isinstance(kind, str) or not isinstance(api, str) or not name:
        report.error(path, f"document without apiVersion, kind and metadata.name: {str(doc)[:80]}")
        return False
    if not DNS1123_LABEL.match(name) or len(name) > 63:
        report.error(path, f"{what}: metadata.name is not a DNS-1123 label")
    if (api, kind) in CRD_SCHEMAS:
        errors = list(schema_errors(CRD_SCHEMAS[(api, kind)], doc))
        for where, message in errors:
            report.error(path, f"{what}: {where}: {message} (schema of {kind} {api})")
        if kind == "MPIJob" and not errors:
            for rtype, rspec in doc["spec"]["mpiReplicaSpecs"].items():
                pod_template = {"apiVersion": "v1", "kind": "PodTemplate",
                                "metadata": {"name": f"{name}-{rtype.lower()}"},
                                "template": rspec["template"]}
                try:
                    kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
                except KubernetesValidationError as e:
                    where = ".".join(str(p) for p in e.path)
                    report.error(path, f"{what}: spec.mpiReplicaSpecs.{rtype}.{where}: "
                                       f"{e.message} (Kubernetes {e.version} PodTemplate)")
                    errors.append(e)
        if not errors:
            report.ok(path, f"{what} valid (own {kind} schema)")
        return not errors
    try:
        version = kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except KubernetesValidationError as e:
        where = ".".join(str(p) for p in e.path) or "(top)"
        report.error(path, f"{what}: {where}: {e.message} (Kubernetes {e.version}, strict)")
        return False
    except SchemaNotFoundError as e:
        report.error(path, f"{what}: {e.message}; add a schema for it to validate_manifests.py")
        return False
    report.ok(path, f"{what} valid (Kubernetes {version} OpenAPI, strict)")
    return True


def pod_templates(doc):
    """(where, template, replicas-or-None) of the pods an object creates."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        yield "spec.template", spec.get("template") or {}, spec.get("replicas")
    elif kind == "MPIJob":
        for rtype, rspec in (spec.get("mpiReplicaSpecs") or {}).items():
            yield f"spec.mpiReplicaSpecs.{rtype}.template", rspec.get("template") or {}, \
                rspec.get("replicas", 1)


def check_k8s(report, root, sources):
    files = sorted(glob.glob(os.path.join(root, "deploy/k8s/*.yaml")) +
                   glob.glob(os.path.join(root, "deploy/k8s/*.yml")))
    if not files:
        report.error(os.path.join(root, "deploy/k8s"), "no manifests found")
        return
    objects = []  # (path, doc), schema-valid only: the semantic checks below rely on shapes
    for path in files:
        docs = load_yaml_docs(report, path)
        if docs is None:
            continue
        seen = set()
        for doc in docs:
            if not isinstance(doc, dict):
                report.error(path, f"a YAML document is not a mapping: {str(doc)[:60]}")
                continue
            key = (doc.get("kind"), (doc.get("metadata") or {}).get("name"))
            if key in seen:
                report.error(path, f"{key[0]}/{key[1]} defined twice in one file")
            seen.add(key)
            if validate_k8s_schema(report, path, doc):
                objects.append((path, doc))

    by_kind = {}
    for path, doc in objects:
        by_kind.setdefault(doc["kind"], []).append((path, doc))
    config_maps = {d["metadata"]["name"]: d for _, d in by_kind.get("ConfigMap", [])}
    pvcs = {d["metadata"]["name"] for _, d in by_kind.get("PersistentVolumeClaim", [])}
    workloads = [(p, d) for p, d in objects
                 if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job", "MPIJob")]

    for path, doc in workloads:
        check_workload(report, path, doc, sources, config_maps, pvcs)

    deployments = by_kind.get("Deployment", [])
    for path, svc in by_kind.get("Service", []):
        what = f"Service/{svc['metadata']['name']}"
        selector = svc["spec"].get("selector") or {}
        pods = [t for _, d in deployments for _, t, _ in pod_templates(d)
                if labels_match(selector, (t.get("metadata") or {}).get("labels") or {})]
        if not pods:
            report.error(path, f"{what}: selector {selector} matches no Deployment's pods")
            continue
        for port in svc["spec"].get("ports", []):
            target = port.get("targetPort", port.get("port"))
            for t in pods:
                cports = [p for c in t["spec"]["containers"] for p in c.get("ports", [])]
                if not any(target in (p.get("name"), p.get("containerPort")) for p in cports):
                    report.error(path, f"{what}: port {port.get('name')} targets {target!r}, "
                                       "which no container port of the selected pods has")
                    break

    for path, hpa in by_kind.get("HorizontalPodAutoscaler", []):
        what = f"HorizontalPodAutoscaler/{hpa['metadata']['name']}"
        ref = hpa["spec"]["scaleTargetRef"]
        if not any(d["kind"] == ref["kind"] and d["metadata"]["name"] == ref["name"]
                   for _, d in objects):
            report.error(path, f"{what}: scaleTargetRef {ref['kind']}/{ref['name']} is not defined")
        if hpa["spec"].get("minReplicas", 1) > hpa["spec"]["maxReplicas"]:
            report.error(path, f"{what}: minReplicas > maxReplicas")

    for path, pdb in by_kind.get("PodDisruptionBudget", []):
        what = f"PodDisruptionBudget/{pdb['metadata']['name']}"
        selector = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
        if not any(labels_match(selector, (t.get("metadata") or {}).get("labels") or {})
                   for _, d in deployments for _, t, _ in pod_templates(d)):
            report.error(path, f"{what}: selector {selector} matches no Deployment's pods")

    services = by_kind.get("Service", [])
    for path, sm in by_kind.get("ServiceMonitor", []):
        what = f"ServiceMonitor/{sm['metadata']['name']}"
        selector = sm["spec"]["selector"].get("matchLabels") or {}
        matched = [s for _, s in services if labels_match(selector, s["metadata"].get("labels") or {})]
        if len(matched) != 1:
            report.error(path, f"{what}: selector {selector} matches {len(matched)} Services "
                               f"({[s['metadata']['name'] for s in matched]}); want exactly one, "
                               "or every pod is scraped once per Service")
            continue
        port_names = {p.get("name") for p in matched[0]["spec"].get("ports", [])}
        for ep in sm["spec"]["endpoints"]:
            if ep["port"] not in port_names:
                report.error(path, f"{what}: endpoint port {ep['port']!r} is not a port name of "
                                   f"Service/{matched[0]['metadata']['name']} {sorted(port_names)}")


def check_workload(report, path, doc, sources, config_maps, pvcs):
    kind, name = doc["kind"], doc["metadata"]["name"]
    spec = doc["spec"]
    if kind == "Deployment":
        template_labels = (spec["template"].get("metadata") or {}).get("labels") or {}
        if not labels_match(spec["selector"].get("matchLabels") or {}, template_labels):
            report.error(path, f"{kind}/{name}: spec.selector does not match the template's labels")
    mpi_ranks = []  # (where, np, gpus available to the ranks)
    for where, template, _ in pod_templates(doc):
        pod = template.get("spec") or {}
        what = f"{kind}/{name} {where}"
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for v in volumes.values():
            if "configMap" in v and v["configMap"]["name"] not in config_maps:
                report.error(path, f"{what}: volume {v['name']} uses ConfigMap "
                                   f"{v['configMap']['name']}, which no manifest defines")
            if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in pvcs:
                report.error(path, f"{what}: volume {v['name']} uses PVC "
                                   f"{v['persistentVolumeClaim']['claimName']}, which no manifest defines")
        for c in pod.get("containers", []):
            cwhat = f"{what} container {c['name']}"
            mounts = {}
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    report.error(path, f"{cwhat}: volumeMount {m['name']} has no volume")
                else:
                    mounts[m["mountPath"]] = volumes[m["name"]]
            ports = c.get("ports", [])
            port_numbers = {p["containerPort"] for p in ports}
            names = [p["name"] for p in ports if "name" in p]
            if len(names) != len(set(names)):
                report.error(path, f"{cwhat}: duplicate port names {names}")
            resources = c.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for res in set(requests) & set(limits):
                r, l = quantity(requests[res]), quantity(limits[res])
                if r is None or l is None:
                    report.error(path, f"{cwhat}: {res} is not a quantity")
                elif r > l:
                    report.error(path, f"{cwhat}: {res} request {requests[res]} > limit {limits[res]}")
                elif "/" in res and r != l:
                    report.error(path, f"{cwhat}: extended resource {res} needs request == limit")
            gpus = int(quantity(limits.get("nvidia.com/gpu", 0)) or 0)
            env = {e["name"] for e in c.get("env", [])}
            argv = [str(t) for t in (c.get("command") or []) + (c.get("args") or [])]
            for t in argv:
                for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", t):
                    if ref not in env:
                        report.error(path, f"{cwhat}: {t!r} refers to $({ref}), which is not in env "
                                           "(Kubernetes would pass it literally)")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                p = c.get(probe) or {}
                for handler in ("grpc", "tcpSocket", "httpGet"):
                    port = (p.get(handler) or {}).get("port")
                    if port is not None and port not in port_numbers and port not in names:
                        report.error(path, f"{cwhat}: {probe} {handler} port {port} is not a "
                                           f"container port {sorted(port_numbers)}")
            sub, rest = tnmt_invocation(argv, entrypoint_is_tnmt=not c.get("command"))
            if sub is None:
                continue
            flags = check_tnmt_flags(report, path, cwhat, sub, rest, sources)
            if sub == "serve":
                check_serving_pod(report, path, cwhat, template, pod, c, flags)
            if sub == "train" and kind != "MPIJob":  # MPIJob: checked on the workers below
                check_training(report, path, cwhat, flags, mounts, config_maps, sources)
            if sub == "train" and os.path.basename(argv[0]) == "mpirun":
                npv = next((argv[i + 1] for i, t in enumerate(argv[:-1])
                            if t in ("-np", "-n", "--np")), None)
                np_ = as_int(report, path, cwhat, npv, "np (mpirun)")
                if np_ is not None:
                    mpi_ranks.append((cwhat, np_, gpus))
    if kind == "MPIJob":
        worker = spec["mpiReplicaSpecs"].get("Worker") or {}
        workers = worker.get("replicas", 1) if worker else 0
        slots = spec.get("slotsPerWorker", 1)
        worker_pod = (worker.get("template") or {}).get("spec") or {}
        worker_gpus = sum(int(quantity(((c.get("resources") or {}).get("limits") or {})
                                       .get("nvidia.com/gpu", 0)) or 0)
                          for c in worker_pod.get("containers", []))
        if worker_gpus and worker_gpus != slots:
            report.error(path, f"{kind}/{name}: slotsPerWorker {slots} != {worker_gpus} GPUs "
                               "per worker (one rank per GPU)")
        for cwhat, np_, _ in mpi_ranks:
            if np_ != workers * slots:
                report.error(path, f"{cwhat}: mpirun -np {np_} != {workers} workers x "
                                   f"{slots} slotsPerWorker")
        # The ranks run on the workers: the files the command line names must be there.
        for c in doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]:
            argv = [str(t) for t in (c.get("command") or []) + (c.get("args") or [])]
            sub, rest = tnmt_invocation(argv, False)
            if sub == "train":
                flags, _ = parse_flags(rest, sources.train_bools)
                volumes = {v["name"]: v for v in worker_pod.get("volumes", [])}
                mounts = {m["mountPath"]: volumes.get(m["name"], {})
                          for wc in worker_pod.get("containers", []) for m in wc.get("volumeMounts", [])}
                check_training(report, path, f"{kind}/{name} workers (ranks of the launcher's "
                                             "mpirun)", flags, mounts, config_maps, sources)
    else:
        for cwhat, np_, gpus in mpi_ranks:
            if gpus and np_ != gpus:
                report.error(path, f"{cwhat}: mpirun -np {np_} != nvidia.com/gpu limit {gpus} "
                                   "(one rank per GPU)")


def mount_for(mounts, file_path):
    best = None
    for mount_path, volume in mounts.items():
        if file_path == mount_path or file_path.startswith(mount_path.rstrip("/") + "/"):
            if best is None or len(mount_path) > len(best[0]):
                best = (mount_path, volume)
    return best


def check_training(report, path, what, flags, mounts, config_maps, sources):
    save_dir = flag_value(flags, "save-dir")
    config = flag_value(flags, "config")
    if config:
        m = mount_for(mounts, config)
        if m is None or "configMap" not in m[1]:
            report.error(path, f"{what}: --config {config} is not on a mounted ConfigMap")
        else:
            cm = config_maps.get(m[1]["configMap"]["name"])
            key = os.path.relpath(config, m[0])
            data = (cm or {}).get("data") or {}
            if cm is not None and key not in data:
                report.error(path, f"{what}: ConfigMap {cm['metadata']['name']} has no key {key}")
            elif cm is not None:
                try:
                    settings = json.loads(data[key])
                except json.JSONDecodeError as e:
                    report.error(path, f"{what}: ConfigMap {cm['metadata']['name']} {key}: "
                                       f"not valid JSON: {e}")
                    settings = {}
                unknown = sorted(set(settings) - sources.train_keys)
                if unknown:
                    report.error(path, f"{what}: ConfigMap {cm['metadata']['name']} {key}: "
                                       f"unknown training key(s) {unknown}")
                save_dir = save_dir or settings.get("save_dir")
    if not save_dir:
        report.error(path, f"{what}: no --save-dir (nor save_dir in the config)")
        return
    m = mount_for(mounts, save_dir)
    if m is None or "persistentVolumeClaim" not in m[1]:
        report.error(path, f"{what}: --save-dir {save_dir} is not on a PersistentVolumeClaim: "
                           "checkpoints (and resuming from them) would not survive the pod")


def check_serving_pod(report, path, what, template, pod, c, flags):
    port = as_int(report, path, what, flag_value(flags, "port", DEFAULT_GRPC_PORT), "port")
    http = as_int(report, path, what, flag_value(flags, "http-port", DEFAULT_HTTP_PORT), "http-port")
    grace = as_int(report, path, what, flag_value(flags, "grace-seconds", DEFAULT_GRACE_SECONDS),
                   "grace-seconds")
    port_numbers = {p["containerPort"] for p in c.get("ports", [])}
    for p in (port, http):
        if p is not None and p not in port_numbers:
            report.error(path, f"{what}: serves on port {p}, which is not a containerPort")
    g = (c.get("readinessProbe") or {}).get("grpc")
    if g is None:
        report.error(path, f"{what}: readinessProbe must be a gRPC health probe (grpc:)")
    elif g["port"] != port:
        report.error(path, f"{what}: readinessProbe probes gRPC port {g['port']}, the server "
                           f"listens on {port}")
    live = (c.get("livenessProbe") or {}).get("httpGet")
    named = {p.get("name"): p["containerPort"] for p in c.get("ports", []) if p.get("name")}
    if live is None or live.get("path") != "/healthz":
        report.error(path, f"{what}: livenessProbe must be an HTTP GET of /healthz (httpGet:), which "
                           "answers while the process runs, models loaded or not")
    elif named.get(live.get("port"), live.get("port")) != http:
        report.error(path, f"{what}: livenessProbe probes port {live.get('port')}, the HTTP port is {http}")
    if grace is not None:
        pre_stop = 0
        command = ((((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {})
                   .get("command") or [])
        if len(command) == 2 and command[0] in ("sleep", "/bin/sleep"):
            pre_stop = float(command[1])
        termination = pod.get("terminationGracePeriodSeconds", 30)
        if termination <= grace + pre_stop:
            report.error(path, f"{what}: terminationGracePeriodSeconds {termination} must exceed "
                               f"--grace-seconds {grace} + preStop {pre_stop:g} s, or the drain "
                               "is cut by SIGKILL")
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if annotations.get("prometheus.io/scrape") == "true":
        if str(annotations.get("prometheus.io/port")) != str(http):
            report.error(path, f"{what}: prometheus.io/port {annotations.get('prometheus.io/port')} "
                               f"is not the HTTP port {http}")
        if annotations.get("prometheus.io/path", "/metrics") != "/metrics":
            report.error(path, f"{what}: prometheus.io/path must be /metrics")
    else:
        report.error(path, f"{what}: no prometheus.io/scrape: \"true\" annotation")


# ----------------------------------------------------------------------------------------------
# Dockerfiles.

def dockerfile_instructions(text):
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.strip().partition(" ")
        lines.append((keyword.upper(), rest.strip()))
        current = ""
    return lines


def exec_form(report, path, keyword, value):
    try:
        argv = json.loads(value)
    except json.JSONDecodeError:
        report.error(path, f"{keyword} must use the exec (JSON array) form: {value}")
        return None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        report.error(path, f"{keyword} must be a JSON array of strings: {value}")
        return None
    return argv


def check_dockerfiles(report, root, sources):
    paths = sorted(p for p in glob.glob(os.path.join(root, "deploy/Dockerfile*"))
                   if not p.endswith(".dockerignore"))
    if not paths:
        report.error(os.path.join(root, "deploy"), "no Dockerfile")
    grace_by_image = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            instructions = dockerfile_instructions(f.read())
        stages, stage = [], None
        for keyword, value in instructions:
            if keyword == "FROM":
                stage = {"from": value, "ins": []}
                stages.append(stage)
            elif stage is not None:
                stage["ins"].append((keyword, value))
        if not stages:
            report.error(path, "no FROM")
            continue
        final = stages[-1]
        # A stage FROM another stage inherits its instructions.
        names = {s["from"].split()[-1]: s for s in stages if " AS " in s["from"].upper()}
        chain, s = [], final
        while s is not None:
            chain.insert(0, s)
            s = names.get(s["from"].split()[0])
            if s in chain:
                break
        ins = [i for s in chain for i in s["ins"]]
        last = {}
        for keyword, value in ins:
            last[keyword] = value
        user = last.get("USER", "root")
        if user in ("root", "0"):
            report.error(path, f"final stage runs as root (USER {user})")
        copies = [v for k, v in ins if k == "COPY"]
        if not any(v.split()[-1] == DEMO_MODEL_DIR for v in copies):
            report.error(path, f"final stage does not COPY the demo model to {DEMO_MODEL_DIR}")
        if not any(v.split()[-1] == SPM_SHIM for v in copies):
            report.error(path, f"final stage does not COPY the SentencePiece shim to {SPM_SHIM}")
        entry = exec_form(report, path, "ENTRYPOINT", last.get("ENTRYPOINT", "[]")) or []
        cmd = exec_form(report, path, "CMD", last.get("CMD", "[]")) or []
        argv = entry + cmd
        sub, rest = tnmt_invocation(argv, entrypoint_is_tnmt=False)
        if sub != "serve":
            report.error(path, f"the final stage does not run `tnmt serve`: {argv}")
            continue
        flags = check_tnmt_flags(report, path, "CMD", sub, rest, sources)
        model = flag_value(flags, "model")
        if model != f"demo={DEMO_MODEL_DIR}":
            report.error(path, f"CMD serves --model {model!r}, want demo={DEMO_MODEL_DIR}")
        if path.endswith(".gpu") and flag_value(flags, "device") != "cuda":
            report.error(path, "the GPU image must serve with --device cuda")
        port = as_int(report, path, "CMD", flag_value(flags, "port", DEFAULT_GRPC_PORT), "port")
        grace_by_image[os.path.basename(path)] = as_int(
            report, path, "CMD", flag_value(flags, "grace-seconds", DEFAULT_GRACE_SECONDS),
            "grace-seconds")
        health = last.get("HEALTHCHECK")
        if not health:
            report.error(path, "no HEALTHCHECK")
            continue
        m = re.match(r"((?:--[a-z-]+=\S+\s+)*)CMD\s+(.*)$", health)
        if not m:
            report.error(path, f"HEALTHCHECK without CMD: {health}")
            continue
        hargv = exec_form(report, path, "HEALTHCHECK CMD", m.group(2)) or []
        hsub, hrest = tnmt_invocation(hargv, False)
        if hsub != "health":
            report.error(path, f"HEALTHCHECK must run `tnmt health` (gRPC health): {hargv}")
            continue
        hflags, positional = parse_flags(hrest, set())
        for name, _ in hflags:
            if name not in HEALTH_FLAGS:
                report.error(path, f"HEALTHCHECK: `tnmt health` has no flag --{name} "
                                   f"(interface: --server HOST:PORT [--service NAME] [--timeout-seconds N])")
        address = flag_value(hflags, "server") or ""
        if not re.fullmatch(r"[^:\s]+:\d+", address) or int(address.rsplit(":", 1)[1]) != port:
            report.error(path, f"HEALTHCHECK --server {address!r} is not HOST:{port}, the served "
                               "gRPC port")
        if positional:
            report.error(path, f"HEALTHCHECK: unexpected arguments {positional}")
        if not sources.has_health:
            report.warn(path, "tools/tnmt/main.cc has no `health` subcommand yet: the HEALTHCHECK "
                              "reports unhealthy until it lands")
        report.ok(path, f"serves {model} on {port}, HEALTHCHECK {' '.join(hargv[1:])}")
    return grace_by_image


# ----------------------------------------------------------------------------------------------
# Compose, Prometheus, Grafana.

def run_promtool(report, path, args, what):
    promtool = shutil.which("promtool")
    if promtool is None:
        report.error(path, "promtool not found (deploy/install-deps.sh installs prometheus)")
        return False
    r = subprocess.run([promtool] + args, capture_output=True, text=True)
    if r.returncode != 0:
        out = (r.stdout + r.stderr).strip().replace("\n", " | ")
        report.error(path, f"promtool {args[0]} {args[1]}: {what}: {out}")
        return False
    return True


def check_compose(report, root, grace_by_image):
    compose_dir = os.path.join(root, "deploy/compose")
    files = sorted(glob.glob(os.path.join(compose_dir, "docker-compose*.yml")))
    base_path = os.path.join(compose_dir, "docker-compose.yml")
    if base_path not in files:
        report.error(base_path, "missing")
        return {}
    docs = {}
    for path in files:
        d = load_yaml_docs(report, path)
        if d is None:
            continue
        if len(d) != 1 or not isinstance(d[0], dict) or not isinstance(d[0].get("services"), dict):
            report.error(path, "not one YAML mapping with a services: mapping")
            continue
        docs[path] = d[0]
    base = docs.get(base_path)
    if base is None:
        return {}
    service_names = set(base["services"])
    declared_volumes = set((base.get("volumes") or {}).keys())
    mounts = {}  # container path -> host path, over all services (for Prometheus/Grafana)
    for path, doc in docs.items():
        errors_before = len(report.errors)
        for key in doc:
            if key not in COMPOSE_TOP_KEYS and not key.startswith("x-"):
                report.error(path, f"unknown top-level key {key!r}")
        for name, svc in doc["services"].items():
            what = f"service {name}"
            if path != base_path and name not in service_names:
                report.error(path, f"{what} overrides a service docker-compose.yml does not have")
            if not isinstance(svc, dict):
                report.error(path, f"{what}: not a mapping")
                continue
            for key in svc:
                if key not in COMPOSE_SERVICE_KEYS and not key.startswith("x-"):
                    report.error(path, f"{what}: unknown key {key!r}")
            if path == base_path and "image" not in svc and "build" not in svc:
                report.error(path, f"{what}: neither image nor build")
            build = svc.get("build")
            if build is not None:
                if isinstance(build, str):
                    build = {"context": build}
                context = os.path.normpath(os.path.join(compose_dir, build.get("context", ".")))
                dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
                if not os.path.isdir(context):
                    report.error(path, f"{what}: build context {build.get('context')} does not exist")
                elif not os.path.isfile(dockerfile):
                    report.error(path, f"{what}: Dockerfile {build.get('dockerfile')} does not exist")
                else:
                    grace = grace_by_image.get(os.path.basename(dockerfile))
                    merged = dict(base["services"].get(name) or {}, **svc)  # an override inherits
                    stop = duration_seconds(merged.get("stop_grace_period", "10s"))
                    if stop is None:
                        report.error(path, f"{what}: stop_grace_period "
                                           f"{merged['stop_grace_period']!r} is not a duration")
                    elif grace is not None and stop <= grace:
                        report.error(path, f"{what}: stop_grace_period {stop:g} s must exceed the "
                                           f"server's --grace-seconds {grace}")
            for volume in svc.get("volumes", []) or []:
                if not isinstance(volume, str):
                    report.error(path, f"{what}: use the short volume syntax SRC:DST[:ro]")
                    continue
                parts = volume.split(":")
                if len(parts) < 2:
                    continue  # anonymous volume
                src, dst = parts[0], parts[1]
                if src.startswith((".", "/")):
                    host = os.path.normpath(os.path.join(compose_dir, src))
                    if not os.path.exists(host):
                        report.error(path, f"{what}: bind mount source {src} does not exist")
                    mounts[dst] = host
                elif src not in declared_volumes:
                    report.error(path, f"{what}: named volume {src} is not declared under volumes:")
            depends = svc.get("depends_on") or []
            for dep in (depends if isinstance(depends, list) else list(depends)):
                if dep not in service_names:
                    report.error(path, f"{what}: depends_on {dep}, which is not a service")
            for port in svc.get("ports", []) or []:
                if not re.fullmatch(r"(\d+:)?\d+(/(tcp|udp))?", str(port)):
                    report.error(path, f"{what}: port {port!r} is not HOST:CONTAINER")
        if len(report.errors) == errors_before:
            report.ok(path, f"{len(doc['services'])} service(s), references exist")
    return {"mounts": mounts, "services": base["services"], "names": service_names}


def check_prometheus(report, root, compose):
    path = os.path.join(root, "deploy/compose/prometheus.yml")
    if not os.path.isfile(path):
        report.error(path, "missing")
        return
    if run_promtool(report, path, ["check", "config", path], "invalid configuration"):
        report.ok(path, "promtool check config")
    docs = load_yaml_docs(report, path)
    if not docs:
        return
    if compose:
        mounted = [dst for dst, host in compose["mounts"].items() if host == path]
        config_flags = [a.split("=", 1)[1] for a in
                        (compose["services"].get("prometheus") or {}).get("command", [])
                        if str(a).startswith("--config.file=")]
        if not mounted:
            report.error(path, "not mounted into any compose service")
        elif config_flags and config_flags[0] not in mounted:
            report.error(path, f"mounted at {mounted}, but prometheus reads {config_flags[0]}")
    for job in docs[0].get("scrape_configs") or []:
        for sc in job.get("static_configs") or []:
            for target in sc.get("targets") or []:
                host, _, port = str(target).rpartition(":")
                if compose and host not in compose["names"] and host != "localhost":
                    report.error(path, f"job {job.get('job_name')}: target {target} is not a "
                                       "compose service")
                if host == "tnmt" and int(port) != DEFAULT_HTTP_PORT:
                    report.error(path, f"job {job.get('job_name')}: tnmt serves /metrics on "
                                       f"{DEFAULT_HTTP_PORT}, not {port}")


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
                "or", "unless", "offset", "inf", "nan", "atan2", "start", "end"}


def promql_metric_names(expr):
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"\{[^}]*\}", "", s)
    s = re.sub(r"\[[^\]]*\]", "", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)
    names = []
    for m in re.finditer(r"(?<![0-9.A-Za-z_:])[A-Za-z_:][A-Za-z0-9_:]*", s):
        word = m.group(0)
        if s[m.end():].lstrip().startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.append(word)
    return names


def check_metric(report, path, where, metric, metrics):
    if metric in metrics:
        if metrics[metric] == "Histogram":
            report.error(path, f"{where}: {metric} is a histogram: use {metric}_bucket, _sum or "
                               "_count")
        return
    base, _, suffix = metric.rpartition("_")
    if suffix in ("bucket", "sum", "count") and metrics.get(base) == "Histogram":
        return
    report.error(path, f"{where}: metric {metric} is not registered in server/metrics.cc")


def check_grafana(report, root, sources, compose):
    gdir = os.path.join(root, "deploy/compose/grafana")
    uids = set()
    for path in sorted(glob.glob(os.path.join(gdir, "provisioning/datasources/*.y*ml"))):
        docs = load_yaml_docs(report, path)
        for ds in (docs[0].get("datasources") or []) if docs else []:
            if ds.get("type") != "prometheus" or not ds.get("uid") or not ds.get("url"):
                report.error(path, f"datasource {ds.get('name')}: needs type prometheus, uid, url")
            uids.add(ds.get("uid"))
            host = re.sub(r"^https?://", "", str(ds.get("url"))).split(":")[0]
            if compose and host not in compose["names"]:
                report.error(path, f"datasource url {ds.get('url')}: {host} is not a compose service")
        report.ok(path, f"datasources {sorted(u for u in uids if u)}")
    if not uids:
        report.error(gdir, "no provisioned datasource (provisioning/datasources/*.yml)")
    dashboard_paths = []
    for path in sorted(glob.glob(os.path.join(gdir, "provisioning/dashboards/*.y*ml"))):
        docs = load_yaml_docs(report, path)
        for provider in (docs[0].get("providers") or []) if docs else []:
            target = (provider.get("options") or {}).get("path")
            host = (compose or {}).get("mounts", {}).get(target)
            if host is None:
                report.error(path, f"provider {provider.get('name')}: path {target} is not a "
                                   "compose bind mount")
            else:
                dashboard_paths.append(host)
        report.ok(path, "dashboard provider")
    dashboards = sorted({p for d in dashboard_paths for p in glob.glob(os.path.join(d, "*.json"))})
    if not dashboards:
        report.error(gdir, "no dashboard JSON under a provisioned dashboards path")
    for path in dashboards:
        try:
            with open(path, encoding="utf-8") as f:
                dash = json.load(f)
        except json.JSONDecodeError as e:
            report.error(path, f"not valid JSON: {e}")
            continue
        for key in ("uid", "title", "panels"):
            if key not in dash:
                report.error(path, f"no {key}")
        variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list", [])}
        exprs = []  # (where, expr)
        for name, v in variables.items():
            query = v.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            m = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*\w+\s*\)\s*",
                             str(query or ""))
            if m:
                check_metric(report, path, f"variable ${name}", m.group(1), sources.metrics)
            elif v.get("type") == "query":
                exprs.append((f"variable ${name}", str(query)))
        ids = set()
        for panel in dash.get("panels") or []:
            where = f"panel {panel.get('id')} {panel.get('title')!r}"
            if panel.get("id") in ids:
                report.error(path, f"{where}: duplicate panel id")
            ids.add(panel.get("id"))
            if panel.get("type") == "row":
                continue
            for obj in [panel] + (panel.get("targets") or []):
                ds = obj.get("datasource")
                if isinstance(ds, dict) and ds.get("uid") not in uids:
                    report.error(path, f"{where}: datasource uid {ds.get('uid')} is not provisioned")
            if not panel.get("targets"):
                report.error(path, f"{where}: no queries")
            for t in panel.get("targets") or []:
                if not t.get("expr"):
                    report.error(path, f"{where} {t.get('refId')}: empty expr")
                else:
                    exprs.append((f"{where} {t.get('refId')}", t["expr"]))
        rules = []
        for i, (where, expr) in enumerate(exprs):
            def substitute(m):
                name = m.group(1) or m.group(2)
                if name in ("__rate_interval", "__interval", "__range"):
                    return "5m"
                if name in variables:
                    return ".*"
                report.error(path, f"{where}: unknown variable ${name}")
                return "x"
            concrete = re.sub(r"\$\{(\w+)\}|\$(\w+)", substitute, expr)
            for metric in promql_metric_names(concrete):
                check_metric(report, path, where, metric, sources.metrics)
            rules.append({"record": f"dashboard:expr_{i}", "expr": concrete})
        # PromQL syntax: promtool parses every expression as a recording rule.
        with tempfile.NamedTemporaryFile("w", suffix=".rules.yml", delete=False) as f:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            rules_path = f.name
        try:
            if run_promtool(report, path, ["check", "rules", rules_path],
                            "a dashboard expression does not parse"):
                report.ok(path, f"{len(dash.get('panels') or [])} panels, {len(exprs)} PromQL "
                                "expressions parse and use only metrics of server/metrics.cc")
        finally:
            os.unlink(rules_path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=".", help="tree with deploy/, server/, tools/tnmt/")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list what passed")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    report = Report(root)
    sources = Sources(root)
    check_k8s(report, root, sources)
    grace_by_image = check_dockerfiles(report, root, sources)
    compose = check_compose(report, root, grace_by_image)
    check_prometheus(report, root, compose)
    check_grafana(report, root, sources, compose)
    if args.verbose:
        print("\n".join(report.passed))
    for line in report.warnings + report.errors:
        print(line)
    print(f"validate_manifests: {len(report.passed)} checks passed, {len(report.warnings)} "
          f"warning(s), {len(report.errors)} error(s) (Kubernetes {K8S_VERSION} schemas, "
          f"kubernetes-validate {kubernetes_validate.__version__}, "
          f"{len(sources.metrics)} metrics in server/metrics.cc)")
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
