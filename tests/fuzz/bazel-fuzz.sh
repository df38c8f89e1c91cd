#!/usr/bin/env bash
# Bazel for the fuzz targets: clang instead of gcc, --config=fuzz (.bazelrc: libFuzzer, ASan,
# UBSan), in an output base of its own so that the default gcc build's cache is never
# invalidated (a different compiler reconfigures Bazel's C++ toolchain, which would otherwise
# rebuild everything on the next gcc build). No convenience symlinks are made (bazel-bin etc.
# stay the gcc build's).
#   tests/fuzz/bazel-fuzz.sh check                      exit 0 if clang can build a libFuzzer
#                                                       target; else print why and exit 3
#   tests/fuzz/bazel-fuzz.sh test //tests/fuzz:all      any Bazel command, e.g. build, test,
#   tests/fuzz/bazel-fuzz.sh info bazel-bin             info, shutdown
# Environment: TNMT_FUZZ_CC (the clang C driver; default clang-14, else clang),
# TNMT_FUZZ_OUTPUT_BASE (default ~/.cache/bazel/tnmt-fuzz-<hash of this checkout's path>).
# The Bazel server of this output base exits after 10 idle minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

cc=${TNMT_FUZZ_CC:-}
if [[ -z $cc ]]; then
  cc=$(command -v clang-14 || command -v clang || true)
fi

check() {
  if [[ -z $cc ]]; then
    echo "SKIPPED: no clang (install clang-14, lld-14 and libclang-rt-14-dev: deploy/install-deps.sh)"
    return 3
  fi
  local dir
  dir=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$dir/t.cc"
  if ! "$cc" -x c++ -fsanitize=fuzzer,address,undefined -fuse-ld=lld "$dir/t.cc" -lstdc++ -o "$dir/t" > "$dir/log" 2>&1; then
    echo "SKIPPED: $cc cannot link a libFuzzer target with ASan/UBSan and lld (install libclang-rt-14-dev and lld-14): $(head -c 300 "$dir/log")"
    rm -rf "$dir"
    return 3
  fi
  rm -rf "$dir"
}

if [[ ${1:-} == check ]]; then
  check
  exit $?
fi
if (($# == 0)); then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
check > /dev/null || { check; exit 3; }

output_base=${TNMT_FUZZ_OUTPUT_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/bazel/tnmt-fuzz-$(pwd | md5sum | cut -c1-12)}
command=$1
shift
startup=(--output_base="$output_base" --max_idle_secs=600)
case $command in
  build | test | run | coverage | cquery | aquery | info)
    exec bazel "${startup[@]}" "$command" --config=fuzz --repo_env=CC="$cc" --symlink_prefix=/ "$@" ;;
  *)
    exec bazel "${startup[@]}" "$command" "$@" ;;
esac
