#!/usr/bin/env bash
# Runs every FedFS test: installs the Debian packages needed, builds the
# release and the Debug+ASan/UBSan configurations, runs unit tests (in
# parallel) and integration tests (real daemons, one at a time) under both.
# The sanitizer configuration builds only the test binaries and what they run
# (target fedfs_all_tests, no benchmarks) and skips the reference targets of
# the mount-level suites (a native directory, libfuse's passthrough_ll): they
# run no FedFS code, and the release run already compares against them. It
# also skips the two long load generators on the mounts (fio and stress-ng,
# 5.5 of its 11 minutes of tests); sqlite3, tar, git and the POSIX parity
# suite still run on the mounts under the sanitizers.
# FUSE over io_uring: the release run takes the mounts' requests over
# io_uring, the sanitizer run over /dev/fuse (the fuse module's switch is set
# for each and restored at the end), so both paths run every suite; the
# sanitizer run then repeats the mount and POSIX parity suites over io_uring.
# Usage: scripts/test.sh [release|asan]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

uring_switch=/sys/module/fuse/parameters/enable_uring
uring_was=
if [ -w "$uring_switch" ]; then
  uring_was=$(cat "$uring_switch")
  trap 'echo "$uring_was" >"$uring_switch"' EXIT
fi

configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(release asan)

for cfg in "${configs[@]}"; do
  case "$cfg" in
    release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo); targets=(); skip=() ;;
    asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DFEDFS_SANITIZE=ON)
      targets=(fedfs_all_tests); skip=(-E '^(Native|PassthroughLl)/|ToolsOnMount\.(FioVerifyCrc32c|StressNgFilesystemStressors)/') ;;
    *) echo "test.sh: unknown configuration '$cfg' (release or asan)" >&2; exit 2 ;;
  esac
  if [ -n "$uring_was" ]; then
    if [ "$cfg" = release ]; then echo Y >"$uring_switch"; else echo N >"$uring_switch"; fi
    echo "== $cfg: FUSE over io_uring switch: $(cat "$uring_switch")"
  fi
  echo "== $cfg: build ($dir)"
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
  ninja -C "$dir" -j2 "${targets[@]}"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  echo "== $cfg: unit tests"
  ctest --test-dir "$dir" -L unit -j2 --output-on-failure --timeout 300
  echo "== $cfg: integration tests"
  ctest --test-dir "$dir" -L integration -j1 --output-on-failure --timeout 600 "${skip[@]}"
  if [ -n "$uring_was" ] && [ "$cfg" = asan ]; then
    echo Y >"$uring_switch"
    echo "== $cfg: mount and POSIX parity suites over io_uring"
    ctest --test-dir "$dir" -L integration -j1 --output-on-failure --timeout 600 \
      -R '^(Mount\.|Fedfs[A-Za-z]*/PosixParity\.)'
  fi
done
echo "== all tests passed (${configs[*]})"
