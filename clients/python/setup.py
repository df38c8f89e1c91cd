"""Builds tnmt-client: the gRPC stubs are generated here from the .proto files of the tnmt
repository (../../proto, or the directory named by TNMT_PROTO_DIR), so they are never committed
twice. The generated modules go to tnmt_client/_proto/ inside the built package."""

import os
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


setup(cmdclass={"build_py": BuildWithStubs})
