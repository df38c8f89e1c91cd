"""devices_test: a kernel test whose body runs on every device of the build (devices.h): the
CPU kernels always, the CUDA kernels too under --config=cuda. Tagged devices_test so that
tests/gpu/build_bundle.sh bundles it with the CUDA tests; linked statically, as they are."""

def devices_test(name, deps = []):
    native.cc_test(
        name = name,
        srcs = [name + ".cc"],
        linkstatic = True,
        tags = ["devices_test"],
        deps = deps + [
            "//kernels/cpu",
            "//kernels/testing:devices",
            "//third_party:absl",
            "//third_party:gtest_main",
        ] + select({
            "//:cuda_enabled": ["//kernels/cuda"],
            "//conditions:default": [],
        }),
    )
