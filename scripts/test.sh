#!/usr/bin/env bash
# Runs every FedFS test: installs the Debian packages needed, builds the
# Release and the Debug+ASan/UBSan configurations (warnings are errors), runs
# unit tests (in parallel) and integration tests (real daemons, one at a
# time) under both.
#
# The sanitizer configuration builds only the test binaries and what they run
# (target fedfs_all_tests, no benchmarks) and skips the reference targets of
# the mount-level suites (a native directory, libfuse's passthrough_ll): they
# run no FedFS code, and the release run already compares against them; and
# the packaging tests (Install.*: cmake --install and cpack, no FedFS code
# run).
# FUSE over io_uring: the release run takes the mounts' requests over
# io_uring, the sanitizer run over /dev/fuse (the fuse module's switch is set
# for each and restored at the end), so both paths run every suite; the
# sanitizer run then repeats the mount and POSIX parity suites over io_uring.
#
# Honesty of the run (scripts/lib/machine.sh, scripts/lib/skips.py):
# - every skipped test is listed with its reason; a skip not listed in
#   tests/expected_skips.txt fails the run;
# - with CI=true the machine is first taken to a fresh boot's state for what
#   the tests set up themselves (tracefs, fusectl, /run/netns unmounted), so
#   a green CI means a fresh machine passes too; put back at exit;
# - after the run, whatever the tests left behind (mounts, network
#   namespaces, tracefs instances, loop devices, temp dirs; TMPDIR is a
#   directory of the run's) is listed and fails the run.
# The release run ends with the chaos run (label chaos): 60 s of kills,
# freezes and cut links under data and namespace workers, seed 1
# (CHAOS_SECONDS, CHAOS_SEED to change them).
# Then, with the release build, the deployment test: the Ansible role against
# three systemd-nspawn hosts (tests/deploy/ansible_test.sh, docs/deploy.md).
# Then every libFuzzer target (scripts/fuzz.sh, docs/fuzzing.md) runs for
# FUZZ_SECONDS (default 20) each on a copy of its seed corpus: 130 s with
# its clang build on an idle 2-core machine (docs/fuzzing.md); a crash,
# leak or timeout fails the run.
# Usage: scripts/test.sh [release|asan|fuzz]...   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: run as root: the tests mount FUSE file systems and make network namespaces" >&2
  exit 2
fi
scripts/install-deps.sh
# shellcheck source=lib/machine.sh
. scripts/lib/machine.sh

machine_use_rundir
machine_snapshot
# On failure too: what the tests left is said (what is in TMPDIR removed),
# the rest put back.
trap 'rc=$?; [ "$rc" -ne 0 ] && { machine_check_leftovers || true; }; machine_restore' EXIT
[ "${CI:-}" = true ] && machine_make_fresh

# /dev/fuse: the fuse module loads on first use on Debian; where it is not
# loaded and has no device node yet, load it (and unload it at exit).
if [ ! -c /dev/fuse ]; then
  modprobe fuse && MACHINE_UNLOAD_FUSE=1
  [ -c /dev/fuse ] || { echo "test.sh: no /dev/fuse (modprobe fuse failed): the mount tests cannot run" >&2; exit 1; }
fi

# FUSE over io_uring needs the fuse module's switch (Linux 6.14+). This
# project's machines have it; elsewhere the io_uring runs are skipped, said
# in one line, and counted (CI fails instead).
uring=yes
if [ ! -w "$MACHINE_URING" ]; then
  echo "test.sh: this kernel has no $MACHINE_URING (FUSE over io_uring needs Linux 6.14+): io_uring runs skipped"
  [ "${CI:-}" = true ] && { echo "test.sh: CI machines must offer FUSE over io_uring" >&2; exit 1; }
  uring=
fi

configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(release asan fuzz)

skips_failed=0
fuzz_failed=0
# run_ctest DIR NAME ARGS...: ctest with a JUnit record of the run.
run_ctest() {
  local dir=$1 name=$2
  shift 2
  ctest --test-dir "$dir" --output-on-failure --test-output-size-passed 65536 \
    --output-junit "$PWD/$dir/junit-$name.xml" "$@"
  junits+=("$PWD/$dir/junit-$name.xml")
}

# The include graph against the layers of docs/design.md (no build needed).
echo "== layers: includes against docs/design.md's arrows"
scripts/check-layers.py

for cfg in "${configs[@]}"; do
  case "$cfg" in
    fuzz) continue ;;  # after the suites, below
    release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release); targets=(); skip=() ;;
    asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DFEDFS_SANITIZE=ON)
      targets=(fedfs_all_tests); skip=(-E '^(Native|PassthroughLl)/|^Install\.') ;;
    *) echo "test.sh: unknown configuration '$cfg' (release, asan or fuzz)" >&2; exit 2 ;;
  esac
  if [ -n "$uring" ]; then
    if [ "$cfg" = release ]; then echo Y >"$MACHINE_URING"; else echo N >"$MACHINE_URING"; fi
    echo "== $cfg: FUSE over io_uring switch: $(cat "$MACHINE_URING")"
  fi
  echo "== $cfg: build ($dir)"
  cmake -S . -B "$dir" -G Ninja -DFEDFS_WERROR=ON "${flags[@]}" >/dev/null
  ninja -C "$dir" -j2 "${targets[@]}"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  junits=()
  rm -f "$dir"/junit-*.xml
  echo "== $cfg: unit tests"
  run_ctest "$dir" unit -L unit -j2 --timeout 300
  echo "== $cfg: integration tests"
  run_ctest "$dir" integration -L integration -j1 --timeout 600 "${skip[@]}"
  if [ "$cfg" = release ]; then
    # docs/faults.md, "Chaos run": one fixed schedule of faults, so that a
    # failure here replays with the same seed (bench/chaos.sh runs others).
    echo "== $cfg: chaos run, ${CHAOS_SECONDS:-60} s of faults (seed ${CHAOS_SEED:-1})"
    FEDFS_CHAOS_SECONDS=${CHAOS_SECONDS:-60} FEDFS_CHAOS_SEED=${CHAOS_SEED:-1} \
      run_ctest "$dir" chaos -L chaos -j1 --timeout 900
  fi
  if [ -n "$uring" ] && [ "$cfg" = asan ]; then
    echo Y >"$MACHINE_URING"
    echo "== $cfg: mount and POSIX parity suites over io_uring"
    run_ctest "$dir" uring -L integration -j1 --timeout 600 \
      -R '^(Mount\.|Fedfs[A-Za-z]*/PosixParity\.)'
  fi
  scripts/lib/skips.py tests/expected_skips.txt "$cfg" "${junits[@]}" || skips_failed=1
done

deploy_failed=0
if [[ " ${configs[*]} " == *" release "* ]]; then
  echo "== deploy: the Ansible role against three systemd-nspawn hosts (tests/deploy/ansible_test.sh)"
  tests/deploy/ansible_test.sh build || deploy_failed=1
fi

if [[ " ${configs[*]} " == *" fuzz "* ]]; then
  echo "== fuzz: every libFuzzer target, ${FUZZ_SECONDS:-20} s each"
  scripts/fuzz.sh "${FUZZ_SECONDS:-20}" || fuzz_failed=1
fi

if ! machine_check_leftovers; then
  echo "test.sh: the tests left the machine changed (above)" >&2
  exit 1
fi
if [ "$skips_failed" -ne 0 ]; then
  echo "test.sh: tests skipped that must run on this machine (UNEXPECTED above)" >&2
  exit 1
fi
if [ "$deploy_failed" -ne 0 ]; then
  echo "test.sh: the deployment test failed (after 'deploy:' above)" >&2
  exit 1
fi
if [ "$fuzz_failed" -ne 0 ]; then
  echo "test.sh: a fuzz target failed (its report and saved input above, after 'fuzz:')" >&2
  exit 1
fi
if [[ " ${configs[*]} " == *" fuzz "* ]]; then
  echo "== fuzz: executions and coverage per target"
  cat build-fuzz/fuzz-summary.txt
fi
echo "== all tests passed (${configs[*]})"
