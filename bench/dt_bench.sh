#!/usr/bin/env bash
# Directory-table benchmark: stat (lookup) latency side by side in one run on
# this machine, measured by fedfs-stat-bench (FILES files stat-ed PASSES
# times each, relative to an open descriptor of their directory: one lookup
# in that directory per stat; per-stat mean, p50, p99 in microseconds):
#   native        a plain directory on the run's file system (bench/lib.sh, STORE)
#   ptll          libfuse's passthrough_ll (built as bench/fs_bench.sh builds
#                 it), its defaults: cache=auto, 1 s timeouts, so repeated
#                 stats are mostly answered by the kernel's caches
#   ptll-nocache  passthrough_ll -o cache=never (0 s timeouts, as FedFS runs:
#                 every stat reaches the FUSE server): FUSE's own floor
#   dt-hit        FedFS, 3 nodes: from n0, a directory whose manager is
#                 another node (n2), with the directory table: repeated stats
#                 hit it (no message)
#   dt-miss       the same from n1, which runs with `directory_table:
#                 {entries: 0}`: every lookup is a miss, one request to the
#                 manager (n2)
#   node-local    FedFS: from n0, a directory managed by n0 itself
# In every FedFS case the files are on the stat-ing node (created through its
# mount; local placement), so only the source of the directory's VD differs.
# The FedFS nodes run with `fuse: {kernel_cache: false}`: this bench measures
# the daemon's directory table, and with the kernel caching names (the
# default) repeated stats would not reach the daemon at all (bench/fs_bench.sh
# measures that).
# The FedFS rows also show the stat-ing node's directory-table counters over
# the runs (`fedfsctl dt`): requests to managers per lookup and DT hits.
# Everything is mounted at once (one federation) and the rows are measured in
# ROUNDS interleaved rounds, so that load from other work on the machine hits
# all of them alike; each cell is the median over the rounds, each ratio the
# median of the per-round ratios.
# Prints a table, each mean with its ratio to native and to passthrough_ll,
# and the ratios DT hit / node-local (target <= 1.1) and DT miss / DT hit.
# A row that cannot run prints n/a (with the reason on stderr).
#
# Usage (root): bench/dt_bench.sh
# Env: BUILD=<build dir> (default build-bench), FILES=100, PASSES=100, ROUNDS=3,
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
ROUNDS=${ROUNDS:-3}
TARGETS=${TARGETS:-"native ptll ptll-nocache dt-hit dt-miss node-local"}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

require_root_and_tools dt_bench python3 cc

bench_begin dt_bench dtbench

# ---- builds -------------------------------------------------------------------
build_bench_tools fedfs-stat-bench
STATB=$BUILD/bench/fedfs-stat-bench
build_ptll

# ---- measurements -----------------------------------------------------------------
declare -A R   # R[<target>,<key>] = value
COLS=(mean_us p50_us p99_us)

# dt_json <control socket>: this node's `fedfsctl dt --json` on one line.
dt_json() { "$FEDFSCTL" --socket "$1" dt --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))'; }

# dt_delta <target> <before json> <after json>: adds the requests to
# managers, lookups and DT hits of one run to R[<target>,gets|lookups|dt_hits].
dt_delta() {
  local t=$1 out
  out=$(python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("gets %d" % (b["gets_sent"] - a["gets_sent"]))
print("lookups %d" % (b["lookups"] - a["lookups"]))
print("dt_hits %d" % ((b["table"] or {}).get("hits", 0) - (a["table"] or {}).get("hits", 0)))' "$2" "$3")
  while read -r k v; do R[$t,$k]=$(( ${R[$t,$k]:-0} + v )); done <<<"$out"
}

# stat_run <target> <dir> <round> [control socket]: stats the files (round 1
# creates them first); R[<target>,<round>,<key>].
stat_run() {
  local t=$1 dir=$2 r=$3 sock=${4:-} before="" out create=()
  [ "$r" = 1 ] && create=(--create)
  [ -n "$sock" ] && before=$(dt_json "$sock")
  log "$t (round $r): $FILES files x $PASSES passes in $dir"
  if out=$("$STATB" --dir "$dir" --files "$FILES" --passes "$PASSES" "${create[@]}" 2>"$WORK/stat-$t.err"); then
    while read -r k v; do R[$t,$r,$k]=$v; done <<<"$out"
  else
    log "$t: fedfs-stat-bench failed: $(cat "$WORK/stat-$t.err")"
    return 1
  fi
  [ -n "$sock" ] && dt_delta "$t" "$before" "$(dt_json "$sock")"
  return 0
}

# fedfs_dir <control socket> <manager> [<name to skip>...]: a top-level
# directory name managed by <manager>.
fedfs_dir() {
  local sock=$1 want=$2 m; shift 2
  for k in $(seq 0 500); do
    [[ " $* " == *" dtbench-$k "* ]] && continue
    m=$("$FEDFSCTL" --socket "$sock" ring "/dtbench-$k" --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["manager"])')
    if [ "$m" = "$want" ]; then
      log "/dtbench-$k is managed by $m"
      echo "dtbench-$k"
      return 0
    fi
  done
  return 1
}

# check_holder <target>: the files of <target> must be on its stat-ing node
# (local placement), or the row measures remote stats.
check_holder() {
  local t=$1 holders
  holders=$("$FEDFSCTL" --socket "${SOCK[$t]}" where "/${NAME[$t]}/stat-0" --json |
    python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["holders"]))')
  [ "$holders" = "${NODE[$t]}" ] || log "$t: warning: /${NAME[$t]}/stat-0 is held by $holders, not ${NODE[$t]}"
}

has_target() { [[ " $TARGETS " == *" $1 "* ]]; }

# ---- table (also printed by the EXIT trap if a run is cut short) ----------------
ROWS=(native ptll ptll-nocache dt-hit dt-miss node-local)
TABLE_DONE=
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }
# median <values...>: the median (lower of the middle two), "" if none.
median() { [ $# -gt 0 ] && printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# cell <target> <key>: median over the rounds.
cell() {
  local vals=() r
  for r in $(seq "$ROUNDS"); do [ -n "${R[$1,$r,$2]:-}" ] && vals+=("${R[$1,$r,$2]}"); done
  median "${vals[@]}"
}
# mratio <a> <b> <key>: median over the rounds of a/b.
mratio() {
  local vals=() r
  for r in $(seq "$ROUNDS"); do
    if [ -n "${R[$1,$r,$3]:-}" ] && [ -n "${R[$2,$r,$3]:-}" ]; then
      vals+=("$(awk -v a="${R[$1,$r,$3]}" -v b="${R[$2,$r,$3]}" 'BEGIN { if (b > 0) printf "%.4f", a / b }')")
    fi
  done
  [ ${#vals[@]} -gt 0 ] || { echo n/a; return; }
  awk -v m="$(median "${vals[@]}")" -v all="${vals[*]}" 'BEGIN {
    n = split(all, v, " "); lo = v[1]; hi = v[1]
    for (i = 2; i <= n; ++i) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] }
    printf "%.2fx (rounds %.2f..%.2f)", m, lo, hi }'
}
print_table() {
  [ -z "$TABLE_DONE" ] || return 0
  TABLE_DONE=1
  echo
  echo "dt_bench: FILES=$FILES PASSES=$PASSES ($((FILES * PASSES)) stats per row and round), ROUNDS=$ROUNDS, $(nproc) cores, $(uname -r)"
  echo "per-stat latency in us (fstatat relative to the directory), medians over the rounds; ratios of the mean"
  printf "%-13s %9s %9s %9s %10s %10s %10s %11s %9s\n" target mean_us p50_us p99_us \
    vs_native vs_ptll vs_ptll0 req/lookup dt_hits
  for t in "${ROWS[@]}"; do
    has_target "$t" || continue
    printf "%-13s" "$t"
    if [ -z "$(cell "$t" mean_us)" ]; then
      printf " %9s\n" "n/a"
      continue
    fi
    for c in "${COLS[@]}"; do printf " %9s" "$(cell "$t" "$c")"; done
    for ref in native ptll ptll-nocache; do
      if [ -n "$(cell "$ref" mean_us)" ]; then
        printf " %10s" "$(ratio "$(cell "$t" mean_us)" "$(cell "$ref" mean_us)")"
      else
        printf " %10s" "n/a"
      fi
    done
    local rpl=-
    if [ -n "${R[$t,lookups]:-}" ] && [ "${R[$t,lookups]}" -gt 0 ]; then
      rpl=$(awk -v g="${R[$t,gets]}" -v l="${R[$t,lookups]}" 'BEGIN { printf "%.3f", g / l }')
    fi
    printf " %11s %9s\n" "$rpl" "${R[$t,dt_hits]:--}"
  done
  echo
  if has_target dt-hit && has_target node-local; then
    echo "DT hit / node-local: mean $(mratio dt-hit node-local mean_us), p50 $(mratio dt-hit node-local p50_us) (target <= 1.1)"
  fi
  if has_target dt-miss && has_target dt-hit; then
    echo "DT miss / DT hit:    mean $(mratio dt-miss dt-hit mean_us), p50 $(mratio dt-miss dt-hit p50_us)"
  fi
}

# ---- setup: everything mounted at once --------------------------------------------
declare -A DIRS SOCK NODE NAME   # per target: directory, control socket, stat-ing node, FedFS name
if has_target native; then mkdir -p "$WORK/native/d"; DIRS[native]=$WORK/native/d; fi
if has_target ptll; then
  if start_ptll ptll; then mkdir -p "$DIR/d"; DIRS[ptll]=$DIR/d; else log "ptll: n/a"; fi
fi
if has_target ptll-nocache; then
  if start_ptll ptll0 cache=never; then mkdir -p "$DIR/d"; DIRS[ptll-nocache]=$DIR/d; else log "ptll-nocache: n/a"; fi
fi
if has_target dt-hit || has_target dt-miss || has_target node-local; then
  # n1 runs without a directory table (dt-miss is measured from its mount).
  if start_fedfs dt 3 "fuse: {kernel_cache: false}" 1 "directory_table: {entries: 0}"; then
    for t in dt-hit dt-miss node-local; do
      has_target "$t" || continue
      case $t in
        dt-hit) NODE[$t]=n0; manager=n2 ;;
        dt-miss) NODE[$t]=n1; manager=n2 ;;
        node-local) NODE[$t]=n0; manager=n0 ;;
      esac
      SOCK[$t]=$FEDFS_DIR/${NODE[$t]}.sock
      NAME[$t]=$(fedfs_dir "${SOCK[$t]}" "$manager" "${NAME[@]}") ||
        { log "$t: no directory managed by $manager: n/a"; continue; }
      mkdir -p "$FEDFS_DIR/mnt${NODE[$t]#n}/${NAME[$t]}"
      DIRS[$t]=$FEDFS_DIR/mnt${NODE[$t]#n}/${NAME[$t]}
    done
  else
    log "FedFS did not start: dt-hit, dt-miss, node-local n/a"
  fi
fi

# ---- runs: ROUNDS interleaved rounds ------------------------------------------------
for r in $(seq "$ROUNDS"); do
  for t in "${ROWS[@]}"; do
    [ -n "${DIRS[$t]:-}" ] || continue
    stat_run "$t" "${DIRS[$t]}" "$r" "${SOCK[$t]:-}" || { log "$t: n/a"; unset "DIRS[$t]"; continue; }
    if [ "$r" = 1 ] && [ -n "${SOCK[$t]:-}" ]; then check_holder "$t"; fi
  done
done

stop_started
print_table
