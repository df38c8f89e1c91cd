#!/bin/sh
echo "bazel coverage is not supported in the offline tnmt build" >&2
exit 1
