#!/usr/bin/env bash
# The chaos run for a long time (docs/faults.md "Chaos run"): the test
# tests/integration/chaos_test.cc (three daemons in network namespaces,
# data and namespace workers, migrations, the cooperative cache, one node at
# a time SIGKILLed and restarted, SIGSTOPped, or cut off) for SECONDS of
# faults, then its checks: nothing acknowledged by fsync lost, every
# directory operation whole on every node, every mount answering, no thread
# stuck. scripts/test.sh runs it for 60 s with seed 1; this runs it longer,
# with another seed each time.
#
# Prints the figures of the run (faults survived, operations checked,
# violations) as the test reports them; exit status 0 if the checks held.
#
#   bench/chaos.sh [SECONDS]      SECONDS default 1800; BUILD=build (a
#                                 Release build dir, built here),
#                                 SEED=<n> (default: random, printed),
#                                 FEDFS_CHAOS_RECORDS=1 (the daemons with
#                                 directory_ops.record_dead_members on)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SECONDS_OF_FAULTS=${1:-1800}
SEED=${SEED:-$(( $(od -An -N2 -tu2 /dev/urandom) + 1 ))}
[ "$(id -u)" -eq 0 ] || { echo "chaos: run as root (network namespaces, FUSE mounts)" >&2; exit 1; }
"$ROOT/scripts/install-deps.sh" >/dev/null
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD" -j2 chaos_test fedfsd fedfsctl >/dev/null
report=$(mktemp "${TMPDIR:-/tmp}/fedfs-chaos.XXXXXX")
trap 'rm -f "$report"' EXIT
echo "# chaos: ${SECONDS_OF_FAULTS} s of faults, seed $SEED"
rc=0
FEDFS_CHAOS_SECONDS=$SECONDS_OF_FAULTS FEDFS_CHAOS_SEED=$SEED FEDFS_CHAOS_REPORT=$report \
  "$BUILD/tests/integration/chaos_test" || rc=$?
if [ -s "$report" ]; then
  python3 - "$report" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"faults      {r['kills']} kills + restarts, {r['freezes']} freezes, {r['cuts']} cut links "
      f"in {r['seconds']} s (seed {r['seed']})")
print(f"data        {r['writes']} writes, {r['fsyncs']} fsyncs acknowledged, {r['reads_checked']} reads "
      f"checked during the run, {r['files_checked']} file checks after, {r['data_errors']} calls failed")
print(f"namespace   {r['ns_ops']} operations ({r['ns_unknown']} of unknown outcome), "
      f"{r['history_ops']} checked with the final listings: {r['histories_not_linearizable']} "
      f"histories not linearizable, {r.get('histories_undecided', 0)} too large to decide")
print(f"hung kills  {r['hung_kills']} daemons did not end on SIGKILL")
print(f"migrations  {r['migrations_ok']} done, {r['migrations_failed']} refused or failed")
print("verdict     " + ("FAILED (see the test's output above)" if r['failed'] else
                        "nothing lost, every operation whole"))
EOF
fi
exit "$rc"
