#!/usr/bin/env bash
# Installs the CUDA packages tnmt needs on Debian 12 from NVIDIA's CUDA apt repository for
# debian12 (the repository tnmt's GPU image uses; Debian itself ships no CUDA 12/13 toolkit).
# Idempotent: packages already present are left alone. Used by deploy/Dockerfile.gpu.
#   deploy/install-cuda.sh            nvcc, CUDA headers, cudart/cuBLAS/NCCL dev (bazel --config=cuda)
#   deploy/install-cuda.sh --runtime  only the shared libraries the tnmt binary loads
# CUDA=13-0 (default) matches the toolkit tnmt's CUDA code is developed and tested with
# (tests/gpu, /usr/local/cuda-13.0); it needs an NVIDIA driver >= 580. CUDA=12-8 works with
# drivers >= 525 (minor-version compatibility) if the kernels build with it.
set -euo pipefail
cuda="${CUDA:-13-0}"
cuda_dotted="${cuda/-/.}"

runtime_pkgs=("cuda-cudart-$cuda" "libcublas-$cuda" libnccl2)
build_pkgs=("cuda-nvcc-$cuda" "cuda-cccl-$cuda" "cuda-cudart-dev-$cuda" "libcublas-dev-$cuda" libnccl-dev
            "${runtime_pkgs[@]}")
pkgs=("${build_pkgs[@]}")
case "${1:-}" in
  --runtime) pkgs=("${runtime_pkgs[@]}") ;;
  "") ;;
  *) echo "install-cuda: unknown option $1 (--runtime)" >&2; exit 2 ;;
esac

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  if ! dpkg-query -W -f='${Status}' cuda-keyring 2>/dev/null | grep -q "install ok installed"; then
    echo "install-cuda: adding NVIDIA's CUDA repository for debian12"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends ca-certificates curl
    keyring=$(mktemp --suffix=.deb)
    curl -fsSL -o "$keyring" \
      https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
    $SUDO dpkg -i "$keyring"
    rm -f "$keyring"
  fi
  $SUDO apt-get update -qq
  # NCCL is published for several CUDA versions; take the newest build for this one.
  args=()
  for p in "${missing[@]}"; do
    case "$p" in
      libnccl2|libnccl-dev)
        v=$(apt-cache madison "$p" | awk -v c="+cuda$cuda_dotted" 'index($3, c) {print $3; exit}')
        if [[ -z $v ]]; then echo "install-cuda: no $p built for CUDA $cuda_dotted" >&2; exit 1; fi
        args+=("$p=$v") ;;
      *) args+=("$p") ;;
    esac
  done
  echo "install-cuda: installing ${args[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${args[@]}"
else
  echo "install-cuda: all ${#pkgs[@]} packages present"
fi
# third_party/cuda.BUILD and the binary's rpath use /usr/local/cuda.
if [[ ! -e /usr/local/cuda ]]; then $SUDO ln -s "/usr/local/cuda-$cuda_dotted" /usr/local/cuda; fi
