#!/usr/bin/env bash
# Installs every system package tnmt needs to build, test and run on Debian 12.
# Idempotent: packages already present are left alone. Used by the README, .ci/run and the
# Dockerfiles, so that all of them take exactly the same steps.
#   deploy/install-deps.sh               build + test dependencies
#   deploy/install-deps.sh --runtime     only the shared libraries the tnmt binary needs
#   deploy/install-deps.sh --image-build only what `bazel build //tools/tnmt` needs (the build
#                                        stage of the Docker images: no test, browser or image tools)
#   deploy/install-deps.sh --dev         the same as the default (the Python tools that
#                                        regenerate the golden files are test dependencies)
# libcpp-httplib-dev is in the build set only for the tests' HTTP clients, openssl (the CLI) for
# the HTTP server test's certificates; prometheus only for promtool, which the server tests
# run on /metrics;
# chromium for the web page tests; buildah and debootstrap for deploy/build-image.sh and
# //tests/deploy:image_test (OCI images built without a container registry); clang-14, lld-14
# and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) for the fuzz tests (tests/fuzz);
# python3-torch, python3-numpy and python3-sentencepiece (Debian's; ~140 MiB to download,
# ~600 MiB installed with their dependencies) for //tests/golden:golden_drift_test
# (make_golden.py) and, through build/py-hf (deploy/install-py-tools.sh), the fairseq .pt and
# Hugging Face import tests.
set -euo pipefail

runtime_pkgs=(
  libgrpc++1.51 libprotobuf32 libsentencepiece0 libopenblas0-pthread
  libabsl20220623 libsqlite3-0 libopenmpi3 ca-certificates
  libprometheus-cpp-core1.0 libssl3
)
image_build_pkgs=(
  bazel-bootstrap g++ libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc
  libprotobuf-dev libsentencepiece-dev libopenblas-dev libabsl-dev
  nlohmann-json3-dev libsqlite3-dev zlib1g-dev
  libopenmpi-dev prometheus-cpp-dev libboost-dev libssl-dev
)
build_pkgs=(
  "${image_build_pkgs[@]}"
  sentencepiece libgtest-dev libgmock-dev openmpi-bin
  libcpp-httplib-dev openssl curl
  prometheus
  chromium
  buildah debootstrap
  clang-14 lld-14 libclang-rt-14-dev
  python3-torch python3-numpy python3-sentencepiece
)
dev_pkgs=()

pkgs=("${build_pkgs[@]}")
case "${1:-}" in
  --runtime) pkgs=("${runtime_pkgs[@]}") ;;
  --image-build) pkgs=("${image_build_pkgs[@]}") ;;
  --dev) pkgs=("${build_pkgs[@]}" "${dev_pkgs[@]}") ;;
  "") ;;
  *) echo "install-deps: unknown option $1 (--runtime, --image-build, --dev)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
