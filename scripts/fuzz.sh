#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz (one per decoder of untrusted
# bytes; docs/fuzzing.md) for a bounded time:
# - installs the Debian packages needed (scripts/install-deps.sh; clang and
#   its libFuzzer and sanitizer runtimes among them);
# - configures and builds build-fuzz/ (clang, -O1 -g, everything compiled
#   with -fsanitize=fuzzer-no-link,address,undefined, warnings are errors;
#   only target fedfs_fuzz and what it needs);
# - runs each target for SECONDS on a COPY of tests/fuzz/corpus/<target>/ in
#   a temp dir (the repo's corpus never grows), with its own -max_len and
#   -timeout=10 -rss_limit_mb=2048, two targets at a time (the machine's
#   cores; FUZZ_JOBS), and prints for each its executions and coverage
#   (libFuzzer's final "cov:" and "ft:");
# - fails (exit 1) on any crash, leak, timeout or out-of-memory, naming the
#   target and the input libFuzzer saved (build-fuzz/artifacts/, kept);
#   reproduce with build-fuzz/tests/fuzz/<target> <that file>.
# Its temp dirs are removed however it ends.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 15)
#        scripts/fuzz.sh --write-seeds          (rewrites the seeds of every
#          target in tests/fuzz/corpus from the targets' --write-seeds; the
#          regress_* inputs of past findings stay)
# Environment: FUZZ_TARGETS="fuzz_frame fuzz_vd" (default: all),
# FUZZ_JOBS=N targets at once (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(fuzz_frame fuzz_membership fuzz_vd fuzz_file fuzz_dirops fuzz_migration fuzz_control fuzz_config)
# -max_len per target: enough for the largest input its decoder accepts
# that is still worth mutating (a frame header is at most 4096 bytes, plus
# the 8 bytes of payload size; a view of ~100 members is 16 KiB).
declare -A MAX_LEN=(
  [fuzz_frame]=4200 [fuzz_membership]=16384 [fuzz_vd]=16384 [fuzz_file]=8192
  [fuzz_dirops]=4096 [fuzz_migration]=4096 [fuzz_control]=4096 [fuzz_config]=4096
)

mode=run
seconds=15
case "${1:-}" in
  --write-seeds) mode=seeds ;;
  "") ;;
  *[!0-9]* | 0) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] | --write-seeds" >&2; exit 2 ;;
  *) seconds=$1 ;;
esac
read -r -a targets <<<"${FUZZ_TARGETS:-${ALL_TARGETS[*]}}"
for t in "${targets[@]}"; do
  [ -n "${MAX_LEN[$t]:-}" ] || { echo "fuzz.sh: unknown target '$t' (${ALL_TARGETS[*]})" >&2; exit 2; }
done
jobs=${FUZZ_JOBS:-2}

scripts/install-deps.sh

dir=build-fuzz
echo "== fuzz: build ($dir)"
start=$SECONDS
cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g" -DFEDFS_FUZZ=ON -DFEDFS_WERROR=ON >/dev/null
ninja -C "$dir" -j2 fedfs_fuzz
echo "== fuzz: built in $((SECONDS - start)) s"

if [ "$mode" = seeds ]; then
  for t in "${targets[@]}"; do
    find "tests/fuzz/corpus/$t" -maxdepth 1 -type f ! -name 'regress_*' -delete 2>/dev/null || true
    "$dir/tests/fuzz/$t" --write-seeds "tests/fuzz/corpus/$t"
  done
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fedfs-fuzz.XXXXXX")
# However it ends: the targets still running (interrupted) stopped, the
# temp dirs removed.
cleanup() {
  local pids
  pids=$(jobs -p)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
artifacts=$PWD/$dir/artifacts
mkdir -p "$artifacts"
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# run_target T: fuzzes T for $seconds on a copy of its corpus, in a work
# dir of its own (its TMPDIR too); the log in $work/T.log, the exit status
# in $work/T.rc.
bin=$PWD/$dir/tests/fuzz
run_target() {
  local t=$1 w=$work/$1 rc=0
  mkdir -p "$w/corpus" "$w/tmp"
  cp -r "tests/fuzz/corpus/$t/." "$w/corpus/"
  (cd "$w" && TMPDIR=$w/tmp "$bin/$t" \
    -max_total_time="$seconds" -max_len="${MAX_LEN[$t]}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$t-" "$w/corpus") >"$w.log" 2>&1 || rc=$?
  echo "$rc" >"$w.rc"
}

# report T: one line of figures, or the failure with libFuzzer's report.
report() {
  local t=$1 log=$work/$1.log rc
  rc=$(cat "$work/$t.rc")
  local runs rate final cov ft corp
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  final=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$final")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$final")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$final")
  if [ "$rc" -eq 0 ]; then
    printf '%-16s ok      %10s runs (%s/s)  cov: %-5s ft: %-6s corpus: %s inputs\n' \
      "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}"
    return 0
  fi
  local what=crash saved
  saved=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  case "$(basename "${saved:-x}")" in
    "$t"-leak-*) what=leak ;; "$t"-timeout-*) what=timeout ;; "$t"-oom-*) what=out-of-memory ;;
    "$t"-slow-unit-*) what=slow ;;
  esac
  echo "== $t: libFuzzer's report (exit $rc):"
  # From the first line of the report on, without the input's dumps.
  awk '/invariant violated|runtime error|==[0-9]+==ERROR|ERROR: libFuzzer|ALARM/ {p = 1} p' "$log" |
    grep -vE '^(MS:|Base64:|0x[0-9a-f]+,)|(\\[0-7]{3}.*){4}' | head -80
  printf '%-16s FAILED  %s after %s runs: %s\n' "$t" "$what" "${runs:-?}" \
    "${saved:-no input saved (see the report above)}"
  return 1
}

echo "== fuzz: ${#targets[@]} targets, $seconds s each, $jobs at a time (corpus copies in $work)"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait

passed=0
failed=()
summary=$dir/fuzz-summary.txt  # the figures again, for scripts/test.sh's summary
: >"$summary"
for t in "${targets[@]}"; do
  if report "$t" | tee "$work/$t.report"; then
    passed=$((passed + 1))
  else
    failed+=("$t")
  fi
  tail -1 "$work/$t.report" >>"$summary"
done
echo "fuzz: $passed passed, ${#failed[@]} failed ($seconds s each)" | tee -a "$summary"
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: ${failed[*]} failed; the inputs are in $artifacts" >&2
  exit 1
fi
