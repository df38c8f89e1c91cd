#!/usr/bin/env bash
# Builds the CUDA tests and the GPU benchmark on a development machine (nvcc, no GPU) and
# bundles them with the shared libraries they need that a GPU machine without Bazel/gRPC may
# lack, into build/gpu-bundle/ (git-ignored; give it to the device runner as a carried path).
# The CUDA libraries themselves (cudart, cuBLASLt, NCCL) are not bundled: they are hundreds
# of MB, and check.sh finds them on the GPU machine. Then, on the GPU machine:
#   tests/gpu/check.sh build/gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/../.."
tests=(attention_test context_test convert_test decode_ops_test elementwise_test gemm_test train_backward_test train_ops_test)
targets=()
for t in "${tests[@]}"; do targets+=("//kernels/cuda:$t"); done
targets+=(//trainer/collective:nccl_collective_test //bench/gpu:gpu_bench)
bazel build --config=cuda "${targets[@]}"
out=build/gpu-bundle
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp -L "$path" "$out/bin/"
  chmod u+w "$out/bin/$(basename "$path")"
  # Libraries outside glibc/libstdc++ and the CUDA toolkit (which the GPU machine has).
  ldd "$path" | awk '/=>/ {print $3}' |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so|/usr/local/cuda|ld-linux' |
    while read -r lib; do cp -L "$lib" "$out/lib/" 2>/dev/null || true; done
done
strip --strip-debug "$out"/bin/* "$out"/lib/* 2>/dev/null || true
# Every library a binary needs must now come from the bundle, glibc/libstdc++ or CUDA.
LD_LIBRARY_PATH="$out/lib" bash -c 'for b in "$0"/bin/*; do ldd "$b"; done' "$out" |
  awk '/not found/ && $1 !~ /^lib(cuda|cublas|nccl|cudnn)/ {print; bad=1} END {exit bad}' ||
  { echo "build_bundle: unresolved libraries above" >&2; exit 1; }
size_kb=$(du -sk "$out" | cut -f1)
echo "bundle: $((size_kb / 1024)) MiB in $out ($(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries)"
if ((size_kb > 40 * 1024)); then
  echo "build_bundle: over 40 MiB (the device runner carries 64 MiB with the working tree)" >&2
  exit 1
fi
