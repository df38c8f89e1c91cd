"""cuda_library: compiles each .cu with nvcc (one genrule per file) and wraps the objects, with
any host-only .cc sources (compiled by the C++ toolchain), in a cc_library. Only buildable with
--config=cuda; without it the targets are incompatible and `bazel build //...` /
`bazel test //...` skip them, so the CPU build never needs nvcc."""

NVCC = "/usr/local/cuda/bin/nvcc"

# No GPU to detect on the build machines: name the architectures (A100, H100/H200) plus PTX.
GENCODE = [
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

CUDA_ONLY = select({
    "//:cuda_enabled": [],
    "//conditions:default": ["//:cuda_build"],
})

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], nvcc_hdrs = []):
    """nvcc_hdrs: headers of other packages that the .cu files include (nvcc runs in a genrule,
    which sees only the files it is given)."""
    objs = [src for src in srcs if not src.endswith(".cu")]
    for src in [s for s in srcs if s.endswith(".cu")]:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj.replace(".o", "_nvcc"),
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            # nvcc names its temporary files after its process id, and every sandboxed action
            # runs in its own PID namespace with the host's /tmp: two nvcc actions at once would
            # write the same /tmp/tmpxft_<pid>_* files. Each gets a temporary directory of its own.
            cmd = " ".join([
                "tmp=$$(mktemp -d) && trap 'rm -rf \"$$tmp\"' EXIT && TMPDIR=$$tmp",
                NVCC,
                "-c -O3 -std=c++17 -lineinfo -Xcompiler -fPIC -ccbin /usr/bin/g++ -I.",
            ] + GENCODE + copts + ["-o $@ $(location " + src + ")"]),
            target_compatible_with = CUDA_ONLY,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        target_compatible_with = CUDA_ONLY,
    )
