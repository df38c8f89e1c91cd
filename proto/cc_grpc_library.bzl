"""cc_grpc_library: C++ messages and gRPC stubs for one .proto file, from Debian's protoc.

Offline there is no rules_proto/grpc repository, so one genrule runs protoc with the C++ and
gRPC plugins. Import paths are relative to this package (--proto_path=proto): a file at
proto/tnmt/v1/translation.proto is "tnmt/v1/translation.proto" to protoc and to other .proto
files, and the generated headers can be included as "proto/tnmt/v1/translation.pb.h" or
"tnmt/v1/translation.pb.h" (the latter is what the generated code itself uses).
"""

def cc_grpc_library(name, src, deps = [], **kwargs):
    """Generates <base>.pb.{h,cc} and <base>.grpc.pb.{h,cc} from `src` and compiles them.

    Args:
      name: the cc_library's name.
      src: one .proto file in this package. Importing other files of ours is not supported
        yet (the genrule's sandbox holds only `src`).
      deps: further cc_library dependencies.
      **kwargs: passed to the cc_library (visibility, testonly, ...).
    """
    if not src.endswith(".proto"):
        fail("cc_grpc_library: src must be a .proto file, got " + src)
    base = src[:-len(".proto")]
    outs = [base + ext for ext in [".pb.h", ".pb.cc", ".grpc.pb.h", ".grpc.pb.cc"]]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        tools = ["@com_google_protobuf//:protoc"],
        cmd = ("$(location @com_google_protobuf//:protoc) --proto_path=%s " +
               "--cpp_out=$(RULEDIR) --grpc_out=$(RULEDIR) " +
               "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin $(location %s)") % (
            native.package_name(),
            src,
        ),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + [
            "@com_google_protobuf//:protobuf",
            "//third_party:grpc++",
        ],
        **kwargs
    )
