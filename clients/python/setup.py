"""Builds tnmt-client: the gRPC stubs are generated here from the .proto files of the tnmt
repository (../../proto, or the directory named by TNMT_PROTO_DIR), so they are never committed
twice. The generated modules go to tnmt_client/_proto/ inside the built package.

The generated code only imports under a protobuf and a grpcio at least as new as the
grpcio-tools that wrote it (and protobuf of the same major version), so after generating, the
build reads the versions the code asks for and stops unless the package's dependencies
(pyproject.toml) admit only runtimes that satisfy them."""

import os
import re
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

PROTOS = [
    "tnmt/v1/translation.proto",
    "tnmt/v1/training.proto",
    "google/rpc/status.proto",
    "google/rpc/error_details.proto",
]


def proto_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.environ.get("TNMT_PROTO_DIR") or os.path.join(here, "..", "..", "proto")
    missing = [p for p in PROTOS if not os.path.isfile(os.path.join(d, p))]
    if missing:
        raise SystemExit(f"tnmt-client: {', '.join(missing)} not found under {d} "
                         "(build from a tnmt checkout, or set TNMT_PROTO_DIR to its proto/ directory)")
    return d


def version(text):
    """(major, minor, patch) of "6.31.1", "7" or "1.80.1rc1"."""
    v = [int(x) for x in re.findall(r"\d+", text)[:3]]
    return tuple(v + [0] * (3 - len(v)))


def bounds(requirements, name):
    """(lower bound, exclusive upper bound) of `name` in requirements like "protobuf>=6.31.1,<7"."""
    for r in requirements:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", str(r))
        if not m or m.group(1).lower() != name:
            continue
        low = high = None
        for spec in m.group(2).split(","):
            spec = spec.strip()
            if spec.startswith(">="):
                low = version(spec[2:])
            elif spec.startswith("<") and not spec.startswith("<="):
                high = version(spec[1:])
        return low, high
    return None, None


def check_runtime_range(out, requirements):
    """Stops the build unless every runtime the dependencies admit can import the generated code."""
    gen = os.path.join(out, "tnmt_client", "_proto", "tnmt", "v1")
    with open(os.path.join(gen, "translation_pb2.py"), encoding="utf-8") as f:
        m = re.search(r"^# Protobuf Python Version: (\S+)", f.read(), re.M)
    with open(os.path.join(gen, "translation_pb2_grpc.py"), encoding="utf-8") as f:
        g = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'", f.read(), re.M)
    if not m or not g:
        raise SystemExit("tnmt-client: the generated code does not name the protobuf and grpcio versions it "
                         "needs (grpcio-tools older than 1.63?): build with the grpcio-tools version "
                         "pyproject.toml's build-system names")
    need_pb, need_grpc = version(m.group(1)), version(g.group(1))
    pb_low, pb_high = bounds(requirements, "protobuf")
    grpc_low, _ = bounds(requirements, "grpcio")
    ok = (pb_low is not None and pb_high is not None and pb_low >= need_pb and pb_high <= (need_pb[0] + 1, 0, 0)
          and grpc_low is not None and grpc_low >= need_grpc)
    if not ok:
        raise SystemExit(
            f"tnmt-client: the generated code needs protobuf>={m.group(1)},<{need_pb[0] + 1} and "
            f"grpcio>={g.group(1)}, but the package depends on {', '.join(map(str, requirements))}: "
            "build with the grpcio-tools version pyproject.toml's build-system names")


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        import grpc_tools
        from grpc_tools import protoc

        src = proto_dir()
        out = os.path.abspath(self.build_lib)
        with tempfile.TemporaryDirectory() as tmp:
            # The files are placed under tnmt_client/_proto/ so that the generated modules
            # import each other from inside the package.
            rel = []
            for p in PROTOS:
                dst = os.path.join(tmp, "tnmt_client", "_proto", p)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(os.path.join(src, p), dst)
                rel.append(os.path.join("tnmt_client", "_proto", p))
            well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
            args = ["grpc_tools.protoc", f"-I{tmp}", f"-I{well_known}", f"--python_out={out}",
                    f"--pyi_out={out}", f"--grpc_python_out={out}"] + rel
            if protoc.main(args) != 0:
                raise SystemExit("tnmt-client: generating the gRPC stubs failed")
        for d, _, _ in os.walk(os.path.join(out, "tnmt_client", "_proto")):
            init = os.path.join(d, "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
        check_runtime_range(out, self.distribution.install_requires or [])


setup(cmdclass={"build_py": BuildWithStubs})
