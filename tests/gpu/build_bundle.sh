#!/usr/bin/env bash
# Builds everything the GPU check runs on a development machine (nvcc, no GPU) and bundles it
# into build/gpu-bundle/bundle.tar.xz (git-ignored; give build/gpu-bundle to the device runner
# as a carried path): every CUDA test binary (the cc_tests marked CUDA_ONLY, and the kernel
# tests tagged devices_test, which run each operation on the CPU and the GPU), the kernel
# benchmark, translate_bench and the tnmt CLI built with --config=cuda, the shared libraries
# they need that a GPU machine without Bazel/gRPC lacks (OpenBLAS, which the CPU references
# dlopen, and the SentencePiece library included), and the Multi30k text of data/multi30k
# (tools/get-multi30k.sh; the end-to-end translation and training checks) when it is there, and
# the Python peers' scripts in bench/ (bench/torch_train_peer.py, bench/gpu/*.py: the check's
# step 6 runs them with the GPU machine's own torch and transformers; they make their models
# there, from translate_bench and the demo model). The CUDA libraries themselves
# (cudart, cuBLASLt, NCCL) are not bundled: hundreds of MB, and the GPU machine has them.
# Then, on the GPU machine, from the repository root:
#   tests/gpu/check.sh build/gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/../.."
mapfile -t tests < <(bazel query 'attr(target_compatible_with, "cuda_build", kind("cc_test", //...)) + attr(tags, "devices_test", kind("cc_test", //...))' 2>/dev/null | sort)
tools=(//bench/gpu:gpu_bench //bench:translate_bench //tools/tnmt:tnmt)
bazel build --config=cuda "${tests[@]}" "${tools[@]}" //engine/tokenizer:libtnmt_spm.so
out=build/gpu-bundle
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data" "$stage/bench/gpu"
copy_libs() {  # libraries outside glibc/libstdc++ and the CUDA toolkit
  ldd "$1" | awk '/=>/ {print $3}' |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so|/usr/local/cuda|ld-linux' |
    while read -r lib; do cp -nL "$lib" "$stage/lib/" 2>/dev/null || true; done
}
for t in "${tests[@]}" "${tools[@]}"; do
  path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp -L "$path" "$stage/bin/"
  chmod u+w "$stage/bin/$(basename "$path")"
  copy_libs "$path"
done
cp -L bazel-bin/engine/tokenizer/libtnmt_spm.so "$stage/lib/"
copy_libs bazel-bin/engine/tokenizer/libtnmt_spm.so
cp -L /usr/lib/x86_64-linux-gnu/libopenblas.so.0 "$stage/lib/"
copy_libs /usr/lib/x86_64-linux-gnu/libopenblas.so.0
chmod -R u+w "$stage"
strip --strip-debug "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
corpus=data/multi30k
[[ -d "$corpus" ]] || tools/get-multi30k.sh > /dev/null 2>&1 || true
if [[ -d "$corpus" ]]; then
  for f in "$corpus"/*.gz; do gunzip -c "$f" > "$stage/data/$(basename "${f%.gz}")"; done
fi
# The peers, laid out as in the repository (torch_train_peer.py imports gpu/tnmt_batches.py).
cp bench/torch_train_peer.py "$stage/bench/"
cp bench/gpu/hf_decode_peer.py bench/gpu/tnmt_batches.py "$stage/bench/gpu/"
# Every library a binary needs must now come from the bundle, glibc/libstdc++ or CUDA.
LD_LIBRARY_PATH="$stage/lib" bash -c 'for b in "$0"/bin/* "$0"/lib/*; do ldd "$b"; done' "$stage" |
  awk '/not found/ && $1 !~ /^lib(cuda|cublas|nccl|cudnn|nvrtc)/ {print; bad=1} END {exit bad}' ||
  { echo "build_bundle: unresolved libraries above" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out"
tar -C "$stage" -cf - bin lib data bench | xz -T2 -6 > "$out/bundle.tar.xz"
# The commit built, and whether tracked files differed from it (the check's log names this).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- || echo ' with uncommitted changes')" > "$out/REVISION"
size_kb=$(du -sk "$out" | cut -f1)
echo "bundle: $((size_kb / 1024)) MiB in $out ($(ls "$stage/bin" | wc -l) binaries, $(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/data" | wc -l) data files)"
if ((size_kb > 40 * 1024)); then
  echo "build_bundle: over 40 MiB (the device runner carries 64 MiB with the working tree)" >&2
  exit 1
fi
