#!/usr/bin/env bash
# The network fuzzer, for longer than CI runs it: two real fedfsd daemons
# with mounts; raw junk, zeros, mutated and truncated bootstrap frames, a
# valid hello followed by junk, and mutated frames on unbound UCX endpoints,
# sent to every TCP port the first daemon listens on (its bootstrap port and
# UCX's own); after each batch of 40 the daemon must run, its mount answer and
# its peer see it alive (tests/integration/hostile_net_test.cc,
# HostileNet.FuzzEveryPort). CI runs it for 60 s in each build.
#
#   scripts/netfuzz.sh [SECONDS]   default 600; BUILD=build-asan for ASan/UBSan
#
# Needs root (FUSE mounts). Builds the test if needed; prints the batches and
# messages sent; exit status is the test's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_TO_RUN=${1:-600}
BUILD=${BUILD:-$ROOT/build}
[ "$(id -u)" = 0 ] || { echo "netfuzz: needs root (FUSE mounts)" >&2; exit 1; }
"$ROOT/scripts/install-deps.sh"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD" -j2 hostile_net_test fedfsd fedfsctl
FEDFS_NETFUZZ_SECONDS=$SECONDS_TO_RUN exec "$BUILD/tests/integration/hostile_net_test" \
  --gtest_filter=HostileNet.FuzzEveryPort
