#!/usr/bin/env bash
# Builds the CUDA tests on a development machine (nvcc, no GPU) and bundles them with the shared
# libraries they need that a GPU machine without Bazel/gRPC may lack, into build/gpu-bundle/
# (git-ignored; give it to the device runner as a carried path). Then, on the GPU machine:
#   tests/gpu/check.sh build/gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(//kernels/cuda:elementwise_test //trainer/collective:nccl_collective_test)
bazel build --config=cuda "${targets[@]}"
out=build/gpu-bundle
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp -L "$path" "$out/bin/"
  # Libraries outside glibc/libstdc++ and the CUDA toolkit (which the GPU machine has).
  ldd "$path" | awk '/=>/ {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so|/usr/local/cuda' |
    while read -r lib; do cp -L "$lib" "$out/lib/" 2>/dev/null || true; done
done
echo "bundle: $(du -sh "$out" | cut -f1) in $out"
