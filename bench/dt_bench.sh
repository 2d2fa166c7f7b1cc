#!/usr/bin/env bash
# Directory-table benchmark: stat (lookup) latency side by side in one run on
# this machine, measured by fedfs-stat-bench (FILES files stat-ed PASSES
# times each, relative to an open descriptor of their directory: one lookup
# in that directory per stat; per-stat mean, p50, p99 in microseconds):
#   native        a plain directory (ext4 here)
#   ptll          libfuse's passthrough_ll (built as bench/fs_bench.sh builds
#                 it), its defaults: cache=auto, 1 s timeouts, so repeated
#                 stats are mostly answered by the kernel's caches
#   ptll-nocache  passthrough_ll -o cache=never (0 s timeouts, as FedFS runs:
#                 every stat reaches the FUSE server): FUSE's own floor
#   dt-hit        FedFS, 3 nodes: a directory whose manager is another node,
#                 with the directory table: repeated stats hit it (no message)
#   dt-miss       the same with `directory_table: {entries: 0}` on the
#                 stat-ing node: every lookup is a miss, one request to the
#                 manager
#   node-local    FedFS, 3 nodes: a directory managed by the stat-ing node
# In every FedFS case the files are on the stat-ing node (created through its
# mount; local placement), so only the source of the directory's VD differs.
# The FedFS rows also show the stat-ing node's directory-table counters over
# the run (`fedfsctl dt`): requests to managers per lookup and DT hits.
# Prints a table, each value with its ratio to native and to passthrough_ll,
# and the ratios DT hit / node-local (target <= 1.1) and DT miss / DT hit.
# A row that cannot run prints n/a (with the reason on stderr).
#
# Usage (root): bench/dt_bench.sh
# Env: BUILD=<build dir> (default build-bench), FILES=100, PASSES=100,
#      TARGETS="native ptll ptll-nocache dt-hit dt-miss node-local",
#      KEEP=1 keeps the work directory.
# Everything started here (FUSE servers, daemons) is stopped by pid and
# everything mounted is unmounted on exit, failure or Ctrl-C (trap).
# Shared functions (builds, mounts, daemons, cleanup): bench/lib.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
FILES=${FILES:-100}
PASSES=${PASSES:-100}
TARGETS=${TARGETS:-"native ptll ptll-nocache dt-hit dt-miss node-local"}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

require_root_and_tools dt_bench python3 cc

WORK=$(mktemp -d /var/tmp/fedfs-dtbench-XXXXXX)
chmod 755 "$WORK"
PIDS=()
MOUNTS=()
cleanup() {
  stop_started
  print_table 2>/dev/null || true
  if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "dt_bench: kept $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- builds -------------------------------------------------------------------
build_bench_tools fedfs-stat-bench
STATB=$BUILD/bench/fedfs-stat-bench
build_ptll

# ---- measurements -----------------------------------------------------------------
declare -A R   # R[<target>,<key>] = value
COLS=(mean_us p50_us p99_us)

# dt_json <control socket>: this node's `fedfsctl dt --json` on one line.
dt_json() { "$FEDFSCTL" --socket "$1" dt --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))'; }

# dt_delta <target> <before json> <after json>: requests to managers per
# lookup and DT hits over the run.
dt_delta() {
  local t=$1 out
  out=$(python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
lookups = b["lookups"] - a["lookups"]
gets = b["gets_sent"] - a["gets_sent"]
hits = (b["table"] or {}).get("hits", 0) - (a["table"] or {}).get("hits", 0)
print("req_per_lookup %.3f" % (gets / lookups if lookups else 0))
print("dt_hits %d" % hits)
print("lookups %d" % lookups)' "$2" "$3")
  while read -r k v; do R[$t,$k]=$v; done <<<"$out"
}

# stat_run <target> <dir> [control socket]: creates the files, runs the stats.
stat_run() {
  local t=$1 dir=$2 sock=${3:-} before="" out
  mkdir -p "$dir"
  [ -n "$sock" ] && before=$(dt_json "$sock")
  log "$t: $FILES files x $PASSES passes in $dir"
  if out=$("$STATB" --dir "$dir" --files "$FILES" --passes "$PASSES" --create 2>"$WORK/stat-$t.err"); then
    while read -r k v; do R[$t,$k]=$v; done <<<"$out"
  else
    log "$t: fedfs-stat-bench failed: $(cat "$WORK/stat-$t.err")"
    return 1
  fi
  [ -n "$sock" ] && dt_delta "$t" "$before" "$(dt_json "$sock")"
  return 0
}

# fedfs_dir <control socket> <local|remote>: a top-level directory name whose
# manager is (local) or is not (remote) node n0.
fedfs_dir() {
  local sock=$1 want=$2 m
  for k in $(seq 0 200); do
    m=$("$FEDFSCTL" --socket "$sock" ring "/dtbench-$k" --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["manager"])')
    if { [ "$want" = local ] && [ "$m" = n0 ]; } || { [ "$want" = remote ] && [ "$m" != n0 ]; }; then
      log "/dtbench-$k is managed by $m"
      echo "dtbench-$k"
      return 0
    fi
  done
  return 1
}

# fedfs_target <target> <local|remote>: in the running federation, stats a
# directory managed by n0 (local) or by another node (remote), from n0.
fedfs_target() {
  local t=$1 where=$2 name
  name=$(fedfs_dir "$FEDFS_DIR/n0.sock" "$where") || { log "$t: no directory managed $where"; return 1; }
  stat_run "$t" "$DIR/$name" "$FEDFS_DIR/n0.sock" || return 1
  # The files must be on n0 (local placement), or the row measures remote stats.
  local holders
  holders=$("$FEDFSCTL" --socket "$FEDFS_DIR/n0.sock" where "/$name/stat-0" --json |
    python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["holders"]))')
  [ "$holders" = n0 ] || log "$t: warning: /$name/stat-0 is held by $holders, not n0"
}

has_target() { [[ " $TARGETS " == *" $1 "* ]]; }

run_native() { stat_run native "$WORK/native/d"; }
run_ptll() { start_ptll ptll && stat_run ptll "$DIR/d"; }
run_ptll-nocache() { start_ptll ptll0 cache=never && stat_run ptll-nocache "$DIR/d"; }

# ---- table (also printed by the EXIT trap if a run is cut short) ----------------
ROWS=(native ptll ptll-nocache dt-hit dt-miss node-local)
TABLE_DONE=
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }
print_table() {
  [ -z "$TABLE_DONE" ] || return 0
  TABLE_DONE=1
  echo
  echo "dt_bench: FILES=$FILES PASSES=$PASSES ($((FILES * PASSES)) stats per row), $(nproc) cores, $(uname -r)"
  echo "per-stat latency in us (fstatat relative to the directory); ratios of the mean"
  printf "%-13s %9s %9s %9s %10s %10s %10s %13s %9s\n" target mean_us p50_us p99_us \
    vs_native vs_ptll vs_ptll0 req/lookup dt_hits
  for t in "${ROWS[@]}"; do
    has_target "$t" || continue
    printf "%-13s" "$t"
    if [ -z "${R[$t,mean_us]:-}" ]; then
      printf " %9s\n" "n/a"
      continue
    fi
    for c in "${COLS[@]}"; do printf " %9s" "${R[$t,$c]}"; done
    for ref in native ptll ptll-nocache; do
      if [ -n "${R[$ref,mean_us]:-}" ]; then
        printf " %10s" "$(ratio "${R[$t,mean_us]}" "${R[$ref,mean_us]}")"
      else
        printf " %10s" "n/a"
      fi
    done
    printf " %13s %9s\n" "${R[$t,req_per_lookup]:--}" "${R[$t,dt_hits]:--}"
  done
  echo
  if [ -n "${R[dt-hit,mean_us]:-}" ] && [ -n "${R[node-local,mean_us]:-}" ]; then
    echo "DT hit / node-local: mean $(ratio "${R[dt-hit,mean_us]}" "${R[node-local,mean_us]}")," \
      "p50 $(ratio "${R[dt-hit,p50_us]}" "${R[node-local,p50_us]}") (target <= 1.1)"
  fi
  if [ -n "${R[dt-miss,mean_us]:-}" ] && [ -n "${R[dt-hit,mean_us]:-}" ]; then
    echo "DT miss / DT hit:    mean $(ratio "${R[dt-miss,mean_us]}" "${R[dt-hit,mean_us]}")," \
      "p50 $(ratio "${R[dt-miss,p50_us]}" "${R[dt-hit,p50_us]}")"
  fi
}

# ---- runs -------------------------------------------------------------------------
for t in native ptll ptll-nocache; do
  if has_target "$t"; then "run_$t" || log "$t: n/a"; stop_started; fi
done

# One federation with the directory table for dt-hit and node-local.
if has_target dt-hit || has_target node-local; then
  if start_fedfs dt 3 ""; then
    if has_target dt-hit; then fedfs_target dt-hit remote || log "dt-hit: n/a"; fi
    if has_target node-local; then fedfs_target node-local local || log "node-local: n/a"; fi
  else
    log "FedFS (directory table on) did not start: dt-hit, node-local n/a"
  fi
  stop_started
fi
# One with the table disabled on the stat-ing node for dt-miss.
if has_target dt-miss; then
  if start_fedfs nodt 3 "" "directory_table: {entries: 0}"; then
    fedfs_target dt-miss remote || log "dt-miss: n/a"
  else
    log "FedFS (directory table off on n0) did not start: dt-miss n/a"
  fi
  stop_started
fi

print_table
