#!/usr/bin/env bash
# Shared-directory benchmark: the metadata pattern of a distributed
# application, side by side in one run on this machine. N processes, one per
# node, each through its own node's mount (fedfs-shared-bench,
# bench/fs/shared_bench.cc: the system calls themselves, no shell loop):
#   create  each creates FILES empty files p<i>-<k> (open O_CREAT|O_EXCL, close)
#   stat    each stats its neighbour's files (process i those of process
#           (i+1) % N, created through another node's mount)
#   open    each opens and closes its neighbour's files (O_RDONLY)
#   remove  each unlinks its neighbour's files
# first in ONE directory shared by all ("shared" rows: s<iter>, made through
# mount 0), then with one directory per process ("unique" rows: u<iter>-p<i>,
# made by process i's node; stat, open and remove still on the neighbour's
# directory), so that every phase but create crosses nodes. The N processes
# of a phase start together: each builds its paths, opens a FIFO the script
# holds open and says it is ready; once all are, the script closes its end
# and every process reads end of file at once. A phase's ops/s is its total
# operations (N * FILES) over its wall time, from the first process's start
# to the slowest one's end (CLOCK_MONOTONIC, one clock for all). Each cell
# is the mean of ITER iterations; every iteration runs every target once, in
# order, each started fresh and stopped after (so a slow spell of the
# machine hits all targets alike).
# Targets:
#   native     a plain directory on the run's file system (see STORE), all N
#              processes in it
#   mergerfs   Debian's mergerfs mounted N times over the same N branch
#              directories (its defaults + allow_other): one host, the
#              reference for N views of one namespace without a network
#   glusterfs  a distributed GlusterFS volume over N bricks on this machine
#              and N FUSE mounts of it, process i through mount i (bench/lib.sh,
#              start_glusterfs: its default volume options; installs
#              glusterfs-server and glusterfs-client with apt-get when missing
#              -- the packages stay installed --, starts a glusterd of its own
#              when none runs, and at the end unmounts, stops and deletes the
#              volume, stops that glusterd by pid and removes its state)
#   fedfs      N fedfsd daemons (start_fedfs), process i through node i's
#              mount, `placement: {policy: local}` (the default, written out):
#              every file is created on the creating process's node, so the
#              other phases reach it on another node
#   fedfs-2rt  fedfs with `directory_table: {add_new: false}`: a create's
#              claim and add as two calls in a row (not in the default
#              TARGETS; name it to compare)
#   fedfs-nodefer  fedfs with `fuse: {deferred_open: false}`: every open
#              asks the file's node (not in the default TARGETS)
#   fedfs-delta  fedfs with `directory_table: {deltas: true}`: a change
#              patches the other nodes' copies of the directory rather than
#              dropping them; not linearizable (not in the default TARGETS)
# Prints a table: one row per variant and phase, ops/s per target, and the
# ratios fedfs/glusterfs and fedfs/mergerfs; then every iteration's value;
# then the FUSE servers' wake-ups per operation: the voluntary context
# switches (a thread slept, to be woken; /proc/<pid>/task/*/status) of every
# thread of the target's own server processes during the phase, over its
# operations (a spinning thread's yields are not counted) --
# mergerfs (its N processes) and fedfs (its N daemons) only; native has no
# server and GlusterFS's bricks are started by its glusterd (n/a).
# A target that cannot run prints n/a (with the reason on stderr). A phase
# that fails (a process exits non-zero: fedfs-shared-bench stops at the
# first failed call, naming it) is logged with its iteration and target, its
# cell is marked incomplete (* after the mean of the iterations that ran;
# "failed" when none did), the later phases of that variant are not run in
# that iteration (marked too), the failures are listed after the table, and
# the script exits 1.
#
# Usage (root): bench/shared_dir_bench.sh
# Env: N=3 (processes, nodes, mounts, bricks, branches), FILES=2000 (per
#      process and phase), ITER=2 (iterations; the mean is shown),
#      TARGETS="native mergerfs glusterfs fedfs",
#      BUILD=<fedfsd build dir> (default build-bench, like bench/fs_bench.sh),
#      KEEP=1 keeps the work directory, STEP_TIMEOUT=600 (s) bounds each process,
#      METRICS_DIR=<dir> (existing): each FedFS node's metrics (fedfsctl
#      metrics) before and after every phase, in <dir>/<target>-<variant>-
#      <phase>-<iteration>-{before,after}-n<i>.txt (directory-table hits,
#      stale lookups, deltas, calls per peer...),
#      STORE=loop (default: every target's files -- bricks, branches, export
#      roots -- on a fresh ext4 with a journal made for the run on a loop
#      device; see bench_begin in bench/lib.sh) or STORE=dir (a plain
#      directory in /var/tmp), STORE_SIZE=16G (the sparse image's size),
#      GLUSTER_HOST=<address> the bricks' address (default: the first global
#      IPv4 address; GlusterFS refuses 127.x).
# Everything started here (FUSE servers, daemons, glusterd and its bricks,
# the processes of a phase) is stopped by pid, everything mounted is
# unmounted, and the GlusterFS volume is deleted on exit, failure or Ctrl-C
# (trap).
# Shared functions (builds, mounts, daemons, GlusterFS, cleanup): bench/lib.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
N=${N:-3}
FILES=${FILES:-2000}
ITER=${ITER:-2}
TARGETS=${TARGETS:-"native mergerfs glusterfs fedfs"}
STEP_TIMEOUT=${STEP_TIMEOUT:-600}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

[ "$N" -ge 2 ] 2>/dev/null || { echo "shared_dir_bench: N must be 2 or more" >&2; exit 1; }
require_root_and_tools shared_dir_bench python3 mkfifo timeout

bench_begin shared_dir_bench shdir
WORKERS=()  # the processes of the phase running (stopped by pid at exit)
stop_workers() {
  local p
  for p in "${WORKERS[@]}"; do stop_pid "$p"; wait "$p" 2>/dev/null || true; done
  WORKERS=()
}
trap 'stop_workers; bench_cleanup' EXIT

# ---- builds -------------------------------------------------------------------
build_bench_tools fedfs-shared-bench
SHB=$BUILD/bench/fedfs-shared-bench

# ---- targets: setup_<name> sets MNT to the N mounts (process i uses MNT[i]) ----
# (not run in a subshell: PIDS and MOUNTS must reach the cleanup trap)
SERVER_PIDS=()  # the target's server processes, whose wake-ups are counted

setup_native() {
  SERVER_PIDS=()
  mkdir -p "$WORK/native/mnt0"
  local i
  for ((i = 0; i < N; i++)); do MNT+=("$WORK/native/mnt0"); done
}

setup_mergerfs() {
  command -v mergerfs >/dev/null || { log "mergerfs not installed"; return 1; }
  local i branches=()
  SERVER_PIDS=()
  for ((i = 0; i < N; i++)); do mkdir -p "$WORK/mfs-branch$i"; branches+=("$WORK/mfs-branch$i"); done
  local list
  list=$(IFS=:; echo "${branches[*]}")
  for ((i = 0; i < N; i++)); do
    mkdir -p "$WORK/mfs/mnt$i"
    mergerfs -f -o "allow_other,fsname=mergerfs$i" "$list" "$WORK/mfs/mnt$i" >"$WORK/mergerfs$i.log" 2>&1 &
    PIDS+=($!); SERVER_PIDS+=($!); MOUNTS+=("$WORK/mfs/mnt$i")
    wait_mount "$WORK/mfs/mnt$i" $! || { log "mergerfs $i did not mount"; return 1; }
    MNT+=("$WORK/mfs/mnt$i")
  done
}

setup_glusterfs() {
  SERVER_PIDS=()
  start_glusterfs glusterfs "$N" "$N" || return 1
  local i
  for ((i = 0; i < N; i++)); do MNT+=("$WORK/glusterfs/mnt$i"); done
}

setup_fedfs() {
  local first=${#PIDS[@]}
  start_fedfs fedfs "$N" "placement: {policy: local}${FEDFS_EXTRA:+
$FEDFS_EXTRA}" || return 1
  SERVER_PIDS=("${PIDS[@]:first}")
  local i
  for ((i = 0; i < N; i++)); do MNT+=("$FEDFS_DIR/mnt$i"); done
}
# fedfs-2rt: fedfs with a create's claim and add as two calls to the
# directory's manager (directory_table.add_new: false), as before
# docs/namespace.md's "Creates in one round trip": the same build, side by
# side.
setup_fedfs-2rt() { FEDFS_EXTRA="directory_table: {add_new: false}" setup_fedfs; }
# fedfs-nodefer: fedfs with every open asking the file's node
# (fuse.deferred_open: false), as before docs/namespace.md's "Opens without
# a round trip".
setup_fedfs-nodefer() { FEDFS_EXTRA="fuse: {deferred_open: false}" setup_fedfs; }
# fedfs-delta: fedfs with changes reaching other nodes' copies of a
# directory as deltas (directory_table.deltas: true; docs/namespace.md,
# "Changes as deltas").
setup_fedfs-delta() { FEDFS_EXTRA="directory_table: {deltas: true}" setup_fedfs; }

# ---- measurements -----------------------------------------------------------------
PHASES=(create stat open remove)
VARIANTS=(shared unique)
declare -A RUNS   # RUNS[<target>,<variant>,<phase>] = "v1 v2 ..." (one per iteration)
declare -A FAILS  # FAILS[<target>,<variant>,<phase>] = iterations of that cell that failed
declare -A WAKES  # WAKES[<target>,<variant>,<phase>] = "w1 w2 ..." (context switches per op)
FAILED=()         # one line per failure: iteration, target, cell, why

# fail_cell <target> <iteration> <variant> <phase> <why>
fail_cell() {
  log "$1: FAILED in iteration $2: $3 $4 ($5)"
  FAILED+=("iteration $2, $1: $3 $4 ($5)")
  FAILS[$1,$3,$4]=$(( ${FAILS[$1,$3,$4]:-0} + 1 ))
}

# dir_of <variant> <iteration> <mount index> <owner index>: the directory of
# process <owner>'s files, through mount <mount index>.
dir_of() {
  if [ "$1" = shared ]; then echo "${MNT[$3]}/s$2"; else echo "${MNT[$3]}/u$2-p$4"; fi
}

# switches: the voluntary context switches so far of every thread of
# SERVER_PIDS (each one a sleep, and so a wake-up).
switches() {
  local p s=0 n
  for p in "${SERVER_PIDS[@]}"; do
    n=$(awk '/^voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }' /proc/"$p"/task/*/status 2>/dev/null) || n=0
    s=$((s + n))
  done
  echo "$s"
}

# dump_metrics <when>: with METRICS_DIR, each FedFS node's metrics now, in
# $METRICS_DIR/$CELL-<when>-n<i>.txt.
CELL=
TARGET=
dump_metrics() {
  [ -n "${METRICS_DIR:-}" ] && [ -n "${FEDFS_DIR:-}" ] || return 0
  local f
  for f in "$FEDFS_DIR"/n*.sock; do
    [ -S "$f" ] || continue
    "$FEDFSCTL" -s "$f" metrics >"$METRICS_DIR/$CELL-$1-$(basename "$f" .sock).txt" 2>/dev/null || true
  done
}

# run_phase <variant> <phase> <iteration>: the N processes of one phase,
# released together; PHASE_VAL = their ops/s, PHASE_WAKES = the servers'
# context switches per operation (empty without SERVER_PIDS), PHASE_WHY =
# why not (returns 1).
run_phase() {
  local v=$1 ph=$2 it=$3 i j sync=$WORK/sync
  PHASE_VAL='' PHASE_WHY='' PHASE_WAKES=''
  rm -rf "$sync"
  mkdir -p "$sync"
  mkfifo "$sync/go"
  exec 9<>"$sync/go"  # the only writer: closing it releases the processes
  for ((i = 0; i < N; i++)); do
    if [ "$ph" = create ]; then j=$i; else j=$(( (i + 1) % N )); fi
    timeout "$STEP_TIMEOUT" "$SHB" --phase "$ph" --dir "$(dir_of "$v" "$it" "$i" "$j")" \
      --prefix "p$j" --files "$FILES" --go "$sync/go" --ready "$sync/ready$i" \
      >"$sync/out$i" 2>"$sync/err$i" 9>&- &
    WORKERS+=($!)
  done
  local n=0 p dead=
  for _ in $(seq 6000); do
    n=0
    for ((i = 0; i < N; i++)); do [ ! -e "$sync/ready$i" ] || n=$((n + 1)); done
    [ "$n" -lt "$N" ] || break
    for p in "${WORKERS[@]}"; do kill -0 "$p" 2>/dev/null || dead=1; done
    [ -z "$dead" ] || break
    sleep 0.01
  done
  local sw0
  CELL="$TARGET-$v-$ph-$it"
  dump_metrics before
  sw0=$(switches)
  exec 9>&-  # go (or, when some did not get ready, the others stop waiting)
  local rc=0 r
  for p in "${WORKERS[@]}"; do
    r=0
    wait "$p" || r=$?
    [ "$r" = 0 ] || rc=$r
  done
  WORKERS=()
  local sw1
  sw1=$(switches)
  dump_metrics after
  if [ ${#SERVER_PIDS[@]} -gt 0 ]; then
    PHASE_WAKES=$(awk -v d=$((sw1 - sw0)) -v n=$((N * FILES)) 'BEGIN { printf "%.1f\n", d / n }')
  fi
  if [ "$n" -lt "$N" ] && [ "$rc" = 0 ]; then rc=1; fi
  if [ "$rc" != 0 ]; then
    PHASE_WHY="fedfs-shared-bench exited $rc"
    [ "$rc" != 124 ] || PHASE_WHY+=" (over STEP_TIMEOUT=$STEP_TIMEOUT s)"
    PHASE_WHY+=": $(cat "$sync"/err* | tail -n 2 | tr '\n' ' ' | sed 's/ *$//')"
    return 1
  fi
  PHASE_VAL=$(awk '
    $1 == "ops" { ops += $2; if (first == "" || $4 < first) first = $4; if ($6 > last) last = $6; n++ }
    END { if (n > 0 && last > first) printf "%.0f\n", ops / (last - first) }' "$sync"/out*)
  [ -n "$PHASE_VAL" ] || { PHASE_WHY="no result in fedfs-shared-bench's output"; return 1; }
}

# measure_iter <target> <iteration>: both variants, every phase, into RUNS.
measure_iter() {
  local t=$1 it=$2 v ph i failed
  TARGET=$t
  for v in "${VARIANTS[@]}"; do
    log "$t: $v directory, $N processes x $FILES files, iteration $it of $ITER"
    failed=
    if [ "$v" = shared ]; then
      mkdir "$(dir_of shared "$it" 0 0)" || failed="mkdir"
    else
      for ((i = 0; i < N; i++)); do mkdir "$(dir_of unique "$it" "$i" "$i")" || failed="mkdir"; done
    fi
    for ph in "${PHASES[@]}"; do
      if [ -n "$failed" ]; then
        fail_cell "$t" "$it" "$v" "$ph" "not run: $failed failed"
      elif run_phase "$v" "$ph" "$it"; then
        RUNS[$t,$v,$ph]+=" $PHASE_VAL"
        [ -z "$PHASE_WAKES" ] || WAKES[$t,$v,$ph]+=" $PHASE_WAKES"
      else
        fail_cell "$t" "$it" "$v" "$ph" "$PHASE_WHY"
        failed=$ph
      fi
    done
    # The directories go (untimed): empty after remove, unless a phase failed.
    if [ "$v" = shared ]; then
      rmdir "$(dir_of shared "$it" 0 0)" 2>/dev/null || [ -n "$failed" ] ||
        log "$t: the shared directory is not empty after remove"
    else
      for ((i = 0; i < N; i++)); do
        rmdir "$(dir_of unique "$it" "$i" "$i")" 2>/dev/null || [ -n "$failed" ] ||
          log "$t: directory u$it-p$i is not empty after remove"
      done
    fi
  done
}

# mean <values...>: their mean (integer); "" if none.
mean() {
  [ $# -gt 0 ] || { echo ""; return; }
  printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.0f\n", s / NR }'
}

# ---- table (also printed by the EXIT trap if a run is cut short) ----------------
TABLE_DONE=
print_table() {
  [ -z "$TABLE_DONE" ] || return 0
  TABLE_DONE=1
  local v ph t r x m f
  declare -A M
  for k in "${!RUNS[@]}"; do
    # shellcheck disable=SC2086  # word splitting of the runs is intended
    M[$k]=$(mean ${RUNS[$k]})
  done
  echo
  echo "shared_dir_bench: N=$N processes, FILES=$FILES per process and phase, ITER=$ITER (mean), STORE=${STORE:-loop}, $(nproc) cores, $(uname -r)"
  echo "ops/s of the N processes together: N*FILES operations / (slowest end - first start); process i works on process (i+1)%N's files after create"
  echo "native: one local directory; mergerfs: $N mounts over the same $N branches; glusterfs: distributed volume, $N bricks, $N mounts; fedfs: $N nodes, one mount each"
  echo "* incomplete: the mean of the iterations that ran, some failed (listed below)"
  printf "%-16s" "row"
  for t in $TARGETS; do printf " %12s" "$t"; done
  printf " %16s %16s\n" "fedfs/glusterfs" "fedfs/mergerfs"
  for v in "${VARIANTS[@]}"; do
    for ph in "${PHASES[@]}"; do
      printf "%-16s" "$v $ph"
      for t in $TARGETS; do
        x=${M[$t,$v,$ph]:-} f=${FAILS[$t,$v,$ph]:+*}
        if [ -n "$x" ]; then printf " %12s" "$x$f"
        elif [ -n "$f" ]; then printf " %12s" "failed"
        else printf " %12s" "n/a"; fi
      done
      for r in glusterfs mergerfs; do
        x=${M[fedfs,$v,$ph]:-} m=${M[$r,$v,$ph]:-}
        if [ -n "$x" ] && [ -n "$m" ] && [ "$m" != 0 ]; then
          printf " %16s" "$(awk -v a="$x" -v b="$m" 'BEGIN { printf "%.2fx", a / b }')"
        else
          printf " %16s" "n/a"
        fi
      done
      echo
    done
  done
  echo "iterations (in order):"
  for v in "${VARIANTS[@]}"; do
    for ph in "${PHASES[@]}"; do
      for t in $TARGETS; do
        x=${RUNS[$t,$v,$ph]:-} f=${FAILS[$t,$v,$ph]:-0}
        [ -n "${x// /}" ] || [ "$f" != 0 ] || continue
        printf "  %-16s %-10s%s%s\n" "$v $ph" "$t" "$x" "${FAILS[$t,$v,$ph]:+  ($f failed)}"
      done
    done
  done
  echo "FUSE servers' wake-ups per operation (voluntary context switches of all their threads; mean of the iterations):"
  printf "%-16s" "row"
  for t in $TARGETS; do printf " %12s" "$t"; done
  echo
  for v in "${VARIANTS[@]}"; do
    for ph in "${PHASES[@]}"; do
      printf "%-16s" "$v $ph"
      for t in $TARGETS; do
        x=${WAKES[$t,$v,$ph]:-}
        if [ -n "${x// /}" ]; then
          # shellcheck disable=SC2086  # word splitting of the values is intended
          printf " %12s" "$(printf '%s\n' $x | awk '{ s += $1 } END { printf "%.1f", s / NR }')"
        else
          printf " %12s" "n/a"
        fi
      done
      echo
    done
  done
  if [ ${#FAILED[@]} -gt 0 ]; then
    echo "failed measurements (${#FAILED[@]}; their cells are incomplete or failed):"
    printf '  %s\n' "${FAILED[@]}"
  fi
}

declare -A UNAVAILABLE
for it in $(seq "$ITER"); do
  for t in $TARGETS; do
    [ -z "${UNAVAILABLE[$t]:-}" ] || continue
    MNT=()
    if "setup_$t" && [ ${#MNT[@]} -eq "$N" ]; then
      measure_iter "$t" "$it"
    else
      log "$t: n/a"
      UNAVAILABLE[$t]=1
    fi
    stop_started
  done
done

print_table
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "shared_dir_bench: ${#FAILED[@]} measurement(s) failed (listed above): the table is incomplete" >&2
  exit 1
fi
