#!/usr/bin/env bash
# Installs the CUDA packages tnmt needs on Debian 12 (Debian itself ships no CUDA 12/13
# toolkit), from one of two sources, CUDA_SOURCE:
#   nvidia-apt (default)  NVIDIA's CUDA apt repository for debian12 (adds its keyring)
#   pypi                  NVIDIA's CUDA wheels on PyPI (nvidia-cuda-nvcc, nvidia-cublas, …),
#                         laid out as a toolkit in /usr/local/cuda-X.Y; pinned versions, CUDA
#                         13-0 only. deploy/Dockerfile.gpu uses this one by default.
# Idempotent: packages already present are left alone. Used by deploy/Dockerfile.gpu.
#   deploy/install-cuda.sh            nvcc, CUDA headers, cudart/cuBLAS/NCCL dev (bazel --config=cuda)
#   deploy/install-cuda.sh --runtime  only the shared libraries the tnmt binary loads
# CUDA=13-0 (default) matches the toolkit tnmt's CUDA code is developed and tested with
# (tests/gpu, /usr/local/cuda-13.0); it needs an NVIDIA driver >= 580. CUDA=12-8 (nvidia-apt)
# works with drivers >= 525 (minor-version compatibility) if the kernels build with it.
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
source="${CUDA_SOURCE:-nvidia-apt}"
runtime_only=0
[[ ${1:-} == --runtime ]] && runtime_only=1

if [[ $source == pypi ]]; then
  # The wheels of one CUDA 13.0 release, pinned. The CUDA 13 wheels install into
  # nvidia/cu13/{bin,include,lib,nvvm}, a toolkit's layout, and NCCL into nvidia/nccl/{include,
  # lib}: both are merged into one prefix; lib64 and the unversioned .so links are added for
  # the linker (third_party/cuda.BUILD).
  case "$cuda" in
    13-0)
      wheel_runtime=(nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.0.3 nvidia-nccl-cu13==2.28.9)
      wheel_build=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
                   nvidia-cuda-cccl==13.0.85) ;;
    *) echo "install-cuda: CUDA_SOURCE=pypi has pinned wheels for CUDA 13-0 only; use CUDA_SOURCE=nvidia-apt for $cuda" >&2
       exit 2 ;;
  esac
  prefix="/usr/local/cuda-$cuda_dotted"
  wheels=("${wheel_runtime[@]}")
  want=("$prefix/lib/libcudart.so.13" "$prefix/lib/libcublas.so.13" "$prefix/lib/libnccl.so.2")
  if ((runtime_only == 0)); then
    wheels+=("${wheel_build[@]}")
    want+=("$prefix/bin/nvcc" "$prefix/nvvm/bin/cicc" "$prefix/include/crt/host_config.h")
  fi
  have=1
  for f in "${want[@]}"; do [[ -e $f ]] || have=0; done
  if ((have)); then
    echo "install-cuda: CUDA $cuda_dotted wheels present in $prefix"
  else
    # pip only for this step: whatever apt adds for it is removed again afterwards.
    added=()
    if ! python3 -m pip --version > /dev/null 2>&1; then
      before=$(dpkg-query -W -f='${Package}\n' | sort)
      $SUDO apt-get update -qq
      $SUDO apt-get install -y -qq --no-install-recommends python3-pip
      mapfile -t added < <(comm -13 <(echo "$before") <(dpkg-query -W -f='${Package}\n' | sort))
    fi
    tmp=$(mktemp -d)
    # The build secret ca-bundle (deploy/Dockerfile.gpu), for a TLS-intercepting proxy.
    if [[ -z ${PIP_CERT:-} && -s /run/secrets/ca-bundle ]]; then export PIP_CERT=/run/secrets/ca-bundle; fi
    echo "install-cuda: installing ${wheels[*]} from PyPI into $prefix"
    # --target installs into a plain folder, outside any Python environment.
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-deps --no-compile \
      --disable-pip-version-check --only-binary=:all: --target "$tmp" "${wheels[@]}"
    $SUDO mkdir -p "$prefix"
    for d in "$tmp"/nvidia/*/; do $SUDO cp -a "$d." "$prefix/"; done
    rm -rf "$tmp"
    [[ -e $prefix/lib64 ]] || $SUDO ln -s lib "$prefix/lib64"
    for lib in "$prefix"/lib/lib*.so.*; do
      base="${lib%%.so.*}.so"
      [[ -e $base ]] || $SUDO ln -s "$(basename "$lib")" "$base"
    done
    if ((${#added[@]} > 0)); then
      $SUDO apt-get purge -y -qq "${added[@]}" > /dev/null
      $SUDO rm -rf /var/lib/apt/lists/*
    fi
  fi
  if [[ ! -e /usr/local/cuda ]]; then $SUDO ln -s "$prefix" /usr/local/cuda; fi
  exit 0
elif [[ $source != nvidia-apt ]]; then
  echo "install-cuda: unknown CUDA_SOURCE '$source' (nvidia-apt, pypi)" >&2
  exit 2
fi

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
