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
# Usage: scripts/test.sh [release|asan]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(release asan)

for cfg in "${configs[@]}"; do
  case "$cfg" in
    release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo); targets=(); skip=() ;;
    asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DFEDFS_SANITIZE=ON)
      targets=(fedfs_all_tests); skip=(-E '^(Native|PassthroughLl)/|ToolsOnMount\.(FioVerifyCrc32c|StressNgFilesystemStressors)/') ;;
    *) echo "test.sh: unknown configuration '$cfg' (release or asan)" >&2; exit 2 ;;
  esac
  echo "== $cfg: build ($dir)"
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
  ninja -C "$dir" -j2 "${targets[@]}"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  echo "== $cfg: unit tests"
  ctest --test-dir "$dir" -L unit -j2 --output-on-failure --timeout 300
  echo "== $cfg: integration tests"
  ctest --test-dir "$dir" -L integration -j1 --output-on-failure --timeout 600 "${skip[@]}"
done
echo "== all tests passed (${configs[*]})"
