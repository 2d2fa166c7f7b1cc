#!/usr/bin/env bash
# File-system benchmark, side by side in one run on this machine:
#   native      a plain directory on the run's file system (see STORE)
#   ptll        libfuse's passthrough_ll example, compiled now from
#               /usr/share/doc/libfuse3-dev/examples with the HAVE_* macros
#               it checks (HAVE_FALLOCATE, HAVE_POSIX_FALLOCATE,
#               HAVE_COPY_FILE_RANGE; HAVE_UTIMENSAT and HAVE_SETXATTR too,
#               which only the high-level examples read), -o xattr, defaults
#               otherwise (cache=auto, 1 s timeouts)
#   ptll-dp     the same with -o default_permissions, the option FedFS mounts
#               with by default (the kernel then checks permissions itself and
#               asks for the directory's attributes after each change in it:
#               one more request per create, rename, unlink), for a
#               like-for-like comparison; ratios stay against ptll
#   mergerfs    Debian's mergerfs over one branch, its defaults (which include
#               default_permissions) + allow_other
#   fedfs1      FedFS, 1 node
#   fedfs1-2rt  FedFS, 1 node, `directory_table: {add_new: false}` (a create's
#               claim and add as two calls; not in the default TARGETS)
#   fedfs1-dev  FedFS, 1 node, requests over /dev/fuse only (fuse.io_uring:
#               false), for comparison: the other FedFS targets take them over
#               io_uring (the run turns the fuse module's switch on, see URING)
#   fedfs3-loc  FedFS, 3 nodes, files created on the mounting node
#   fedfs3-rem  FedFS, 3 nodes, a placement rule puts every file on another node
#   fedfs3-remc the same with each node's file-data cache on (coopcache 256 MiB,
#               blocks of 256 KiB; docs/coopcache.md); the cold rows drop it too
#   glusterfs   GlusterFS: a distributed volume over 3 bricks on this machine
#               (the run's file system), one FUSE mount, its default options
#               (bench/lib.sh, start_glusterfs: installs glusterfs-server and
#               glusterfs-client with apt-get when missing -- the packages
#               stay installed --, starts a glusterd of its own when none
#               runs, and after each round unmounts, stops and deletes the
#               volume, stops that glusterd by pid and removes its state)
# Rows: metadata ops/s over FILES files (fedfs-meta-bench: create, stat,
# readdir entries, rename, unlink), fio 1 MiB sequential write/read (read
# after dropping caches), 4 KiB random read warm (timed) and cold (caches dropped,
# then one pass reading each block once in random order:
# echo 3 > /proc/sys/vm/drop_caches, which affects the whole machine) and
# 4 KiB random write. Prints a table with each value and its ratio to ptll, then the
# sequential and random-read rows of fedfs3-rem and fedfs3-remc as a ratio
# to fedfs3-loc.
# Then, for every FUSE target, the FUSE requests its kernel sent per operation
# of each row (LOOKUP, GETATTR, ...), from one more, untimed, round with the
# kernel's fuse_request_send tracepoint on (in a tracing instance of the run's
# own): it shows which rows no request reaches (the kernel answers from its
# caches, so every FUSE server is alike there) and what each server costs
# per operation.
# A column that cannot run prints n/a (with the reason on stderr). A
# measurement that fails (fio, fedfs-meta-bench) is logged with its round and
# target, its cell is marked incomplete (* after the median of the rounds that
# ran; "failed" when none did), the failures are listed after the table, and
# the script exits 1.
#
# Usage (root): bench/fs_bench.sh
# Env: BUILD=<build dir> (default build-bench), FILES=10000, SEQ_SIZE=256M,
#      RAND_SIZE=64M, RUNTIME=5 (seconds per random fio job),
#      REPEAT=3 (rounds; each round runs every target once, in order, so a
#      slow spell of the machine hits all targets alike; the median of the
#      rounds is shown: on a small shared machine single runs vary by up to 2x),
#      TARGETS="native ptll ptll-dp mergerfs fedfs1 fedfs1-dev fedfs3-loc fedfs3-rem fedfs3-remc glusterfs",
#      COUNT=1 (default; 0: off) counts requests per operation in one untimed
#      round per FUSE target (COUNT_FILES=2000 files, 64 MiB sequential
#      files, 1 s random jobs); mounts tracefs on /sys/kernel/tracing for
#      that round if it is not mounted (and unmounts it at exit), skipped
#      where the kernel has no tracefs or fuse events,
#      KEEP=1 keeps the work directory, STEP_TIMEOUT=900 (s) bounds the metadata loop,
#      FIO=0 runs the metadata rows only (the fio rows print n/a),
#      AS_USER=<user> runs the metadata rows as that user (setpriv, with the
#      user's groups) instead of root: a non-root caller is what the file
#      systems see in real use (FedFS then reads the caller's groups, see
#      fuse/caller_groups.h),
#      URING=Y (default; N: off) sets the fuse module's FUSE-over-io_uring
#      switch for the run and puts it back after (FedFS uses io_uring while
#      it is on; passthrough_ll and mergerfs, on libfuse 3.14, cannot),
#      STORE=loop (default: every target's files, and the native directory, on
#      a fresh ext4 with a journal made for the run on a loop device; see
#      bench_begin in bench/lib.sh for why) or STORE=dir (a plain directory in
#      /var/tmp), STORE_SIZE=16G (the sparse image's size),
#      GLUSTER_HOST=<address> the bricks' address (default: the first global
#      IPv4 address; GlusterFS refuses 127.x).
# Everything started here (FUSE servers, daemons, glusterd and its bricks)
# is stopped by pid, everything mounted is unmounted, and the GlusterFS
# volume is deleted on exit, failure or Ctrl-C (trap).
# Shared functions (builds, mounts, daemons, GlusterFS, cleanup): bench/lib.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
FILES=${FILES:-10000}
SEQ_SIZE=${SEQ_SIZE:-256M}
RAND_SIZE=${RAND_SIZE:-64M}
RUNTIME=${RUNTIME:-5}
REPEAT=${REPEAT:-3}
FIO=${FIO:-1}
TARGETS=${TARGETS:-"native ptll ptll-dp mergerfs fedfs1 fedfs1-dev fedfs3-loc fedfs3-rem fedfs3-remc glusterfs"}
URING=${URING:-Y}
COUNT=${COUNT:-1}
COUNT_FILES=${COUNT_FILES:-2000}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

require_root_and_tools fs_bench fio python3 cc

bench_begin fs_bench fsbench
uring_switch "$URING"

# ---- builds -------------------------------------------------------------------
build_bench_tools fedfs-meta-bench
META=$BUILD/bench/fedfs-meta-bench
if [ -n "${AS_USER:-}" ]; then
  id "$AS_USER" >/dev/null || { echo "fs_bench: no user $AS_USER" >&2; exit 1; }
  cp "$META" "$WORK/" && META=$WORK/fedfs-meta-bench  # the build dir may be closed to that user
fi
build_ptll

# ---- targets: setup_<name> sets DIR to the directory to benchmark, or fails -------
# (not run in a subshell: PIDS and MOUNTS must reach the cleanup trap)
setup_native() { mkdir -p "$WORK/native/mnt0"; DIR=$WORK/native/mnt0; }

setup_ptll() { start_ptll ptll; }
setup_ptll-dp() { start_ptll ptlldp default_permissions; }

setup_mergerfs() {
  command -v mergerfs >/dev/null || { log "mergerfs not installed"; return 1; }
  mkdir -p "$WORK/mfs-branch" "$WORK/mfs/mnt0"
  mergerfs -f -o allow_other,fsname=mergerfs "$WORK/mfs-branch" "$WORK/mfs/mnt0" >"$WORK/mergerfs.log" 2>&1 &
  PIDS+=($!); MOUNTS+=("$WORK/mfs/mnt0")
  wait_mount "$WORK/mfs/mnt0" $! || { log "mergerfs did not mount"; return 1; }
  DIR=$WORK/mfs/mnt0
}

# start_fedfs (bench/lib.sh): <tag> <nodes> <placement yaml or "">
setup_fedfs1() { start_fedfs fedfs1 1 ""; }
setup_fedfs1-dev() { start_fedfs fedfs1dev 1 "fuse: {io_uring: false}"; }
setup_fedfs1-2rt() { start_fedfs fedfs12rt 1 "directory_table: {add_new: false}"; }
setup_fedfs3-loc() { start_fedfs fedfs3loc 3 ""; }
setup_fedfs3-rem() { start_fedfs fedfs3rem 3 "placement: {policy: local, rules: [{prefix: /, node: n1}]}"; }
setup_fedfs3-remc() {
  start_fedfs fedfs3remc 3 "placement: {policy: local, rules: [{prefix: /, node: n1}]}
coopcache: {size: 256MiB, block: 256KiB}"
}

# start_glusterfs (bench/lib.sh): <tag> <bricks> <mounts>
setup_glusterfs() { start_glusterfs glusterfs 3 1; }

# ---- measurements -----------------------------------------------------------------

# fio_run <dir> <name> <rw> <bs> <size> <timed:0|1> <mibs|iops|ios>: prints MiB/s,
# IOPS or the number of I/Os done (json parse).
fio_run() {
  local dir=$1 name=$2 rw=$3 bs=$4 size=$5 timed=$6 metric=$7
  local args=(--name="$name" --directory="$dir" --filename="fio-$name" --rw="$rw" --bs="$bs"
    --size="$size" --ioengine=psync --output-format=json --invalidate=0)
  [ "$timed" = 1 ] && args+=(--time_based --runtime="$RUNTIME")
  case "$rw" in write|randwrite) args+=(--end_fsync=1) ;; esac
  fio "${args[@]}" 2>"$WORK/fio-$name.err" | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
side = "write" if sys.argv[1] in ("write", "randwrite") else "read"
m = sys.argv[2]
print("%.0f" % (j[side]["bw_bytes"] / 1048576.0 if m == "mibs" else
                j[side]["total_ios"] if m == "ios" else j[side]["iops"]))' "$rw" "$metric"
}

declare -A R   # R[<target>,<row>] = value
ROWS=(create_ops_s stat_ops_s readdir_entries_s rename_ops_s unlink_ops_s
  seq_write_mib_s seq_read_mib_s randread_warm_iops randread_cold_iops randwrite_iops)

# median <values...>: the middle one (the lower middle of an even count); "" if none.
median() {
  [ $# -gt 0 ] || { echo ""; return; }
  printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"
}

declare -A RUNS  # RUNS[<target>,<row>] = "v1 v2 ..." (one value per round)
META_ROWS=(create_ops_s stat_ops_s readdir_entries_s rename_ops_s unlink_ops_s)

declare -A FAILS  # FAILS[<target>,<row>] = rounds of that cell that failed
declare -A QFAIL  # QFAIL[<target>,<row>] = 1: its count round failed
FAILED=()         # one line per failure: round, target, rows, why
# fail_round <target> <round|count> <why> <row...>: a measurement that did
# not give its rows: logged, counted against their cells, listed after the
# table; the script exits 1.
fail_round() {
  local t=$1 i=$2 why=${3%: } row what; shift 3  # (no ": " before an empty log tail)
  if [ "$i" = count ]; then what="count round"; else what="round $i"; fi
  log "$t: FAILED in $what: $* ($why)"
  FAILED+=("$what, $t: $* ($why)")
  for row in "$@"; do
    if [ "$i" = count ]; then QFAIL[$t,$row]=1; else FAILS[$t,$row]=$(( ${FAILS[$t,$row]:-0} + 1 )); fi
  done
}

# tail_of <file>: its last two lines, on one line (why a tool failed).
tail_of() { tail -n 2 "$1" | tr '\n' ' ' | sed 's/ *$//'; }

# fio_row <target> <round> <row> <fio_run args...>: one fio measurement into RUNS.
fio_row() {
  local t=$1 i=$2 row=$3 v; shift 3
  if v=$(fio_run "$@") && [ -n "$v" ]; then
    RUNS[$t,$row]+=" $v"
  else
    fail_round "$t" "$i" "fio $3 $2: $(tail_of "$WORK/fio-$2.err")" "$row"
  fi
}

# fio_layout <target> <round|count> <dir>: lays out the random-I/O file and
# reads it once (so a warm run hits cache); a failure fails the random rows.
fio_layout() {
  local t=$1 i=$2 dir=$3
  fio_run "$dir" rnd write 1M "$RAND_SIZE" 0 mibs >/dev/null &&
    fio_run "$dir" rnd read 1M "$RAND_SIZE" 0 mibs >/dev/null && return 0
  fail_round "$t" "$i" "laying out the random-I/O file: $(tail_of "$WORK/fio-rnd.err")" \
    randread_warm_iops randread_cold_iops randwrite_iops
  return 1
}

# measure_round <target> <dir> <round>: one run of every row, into RUNS.
measure_round() {
  local t=$1 dir=$2 i=$3 k v
  log "$t: metadata ($FILES files) in $dir, round $i of $REPEAT${AS_USER:+, as $AS_USER}"
  local out meta=("$META") mdir=$dir
  if [ -n "${AS_USER:-}" ]; then
    # A directory the user may write in (made by root through the mount).
    mdir=$dir/as-user
    mkdir -p "$mdir" && chmod 1777 "$mdir"
    meta=(setpriv --reuid="$AS_USER" --regid="$(id -g "$AS_USER")" --init-groups "$META")
  fi
  local rc=0
  out=$(timeout "${STEP_TIMEOUT:-900}" "${meta[@]}" --dir "$mdir" --files "$FILES" 2>"$WORK/meta-$t.err") || rc=$?
  if [ "$rc" = 0 ]; then
    local missing=()
    while read -r k v; do RUNS[$t,$k]+=" $v"; done <<<"$out"
    for k in "${META_ROWS[@]}"; do grep -qE "^${k}[[:space:]]" <<<"$out" || missing+=("$k"); done
    [ ${#missing[@]} -eq 0 ] || fail_round "$t" "$i" "not in fedfs-meta-bench's output" "${missing[@]}"
  else
    local why="fedfs-meta-bench exited $rc"
    [ "$rc" != 124 ] || why+=" (over STEP_TIMEOUT=${STEP_TIMEOUT:-900} s)"
    fail_round "$t" "$i" "$why: $(tail_of "$WORK/meta-$t.err")" "${META_ROWS[@]}"
  fi
  [ "$FIO" = 1 ] || return 0
  log "$t: fio sequential, round $i of $REPEAT"
  fio_row "$t" "$i" seq_write_mib_s "$dir" seq write 1M "$SEQ_SIZE" 0 mibs
  drop_caches
  fio_row "$t" "$i" seq_read_mib_s "$dir" seq read 1M "$SEQ_SIZE" 0 mibs
  rm -f "$dir/fio-seq"
  log "$t: fio random, round $i of $REPEAT"
  if fio_layout "$t" "$i" "$dir"; then
    fio_row "$t" "$i" randread_warm_iops "$dir" rnd randread 4k "$RAND_SIZE" 1 iops
    drop_caches
    # Cold: one pass over the file in random order, each block read once (fio's
    # random map), so every read misses the page cache. A timed run re-read
    # the 64 MiB file from cache after its first fraction of a second.
    fio_row "$t" "$i" randread_cold_iops "$dir" rnd randread 4k "$RAND_SIZE" 0 iops
    fio_row "$t" "$i" randwrite_iops "$dir" rnd randwrite 4k "$RAND_SIZE" 1 iops
  fi
  rm -f "$dir/fio-rnd"
}

# R[<target>,<row>] = the median of the rounds so far.
take_medians() {
  local k
  # shellcheck disable=SC2086  # word splitting of the runs is intended
  for k in "${!RUNS[@]}"; do R[$k]=$(median ${RUNS[$k]}); done
}

# ---- requests per operation ------------------------------------------------------
declare -A Q   # Q[<target>,<row>] = FUSE requests per operation
declare -A QB  # QB[<target>,<row>] = the same by request type

# count_round <target> <dir>: the rows once more, untimed and smaller, with
# each phase marked in the trace (fedfs-meta-bench --marker, trace_mark here);
# then the requests sent on <dir>'s FUSE connection in each phase, divided by
# the phase's operations (readdir: per 1000 entries; fio: per I/O).
count_round() {
  local t=$1 dir=$2 passes=5 row n
  log "$t: counting FUSE requests per operation (untimed round)"
  echo >"$TRACE/trace"
  local den=(create_ops_s="$COUNT_FILES" stat_ops_s="$COUNT_FILES" rename_ops_s="$COUNT_FILES"
    unlink_ops_s="$COUNT_FILES" readdir_entries_s="$(awk -v f="$COUNT_FILES" -v p=$passes \
      'BEGIN { print p * (f + 2) / 1000 }')")
  if ! "$META" --dir "$dir" --files "$COUNT_FILES" --readdir-passes $passes \
    --marker "$TRACE/trace_marker" >/dev/null 2>"$WORK/count-$t.err"; then
    fail_round "$t" count "fedfs-meta-bench failed: $(tail_of "$WORK/count-$t.err")" \
      "${META_ROWS[@]}"
    den=()
  fi
  if [ "$FIO" = 1 ]; then
    # mark_fio <row> <fio_run args...>: one fio job inside its row's marks.
    mark_fio() {
      row=$1; shift
      trace_mark "fedfs-bench $row"
      if n=$(RUNTIME=1 fio_run "$@" ios) && [ -n "$n" ]; then
        den+=("$row=$n")
      else
        fail_round "$t" count "fio $3 $2: $(tail_of "$WORK/fio-$2.err")" "$row"
      fi
      trace_mark "fedfs-bench idle"
    }
    mark_fio seq_write_mib_s "$dir" seq write 1M 64M 0
    drop_caches
    mark_fio seq_read_mib_s "$dir" seq read 1M 64M 0
    rm -f "$dir/fio-seq"
    if fio_layout "$t" count "$dir"; then
      mark_fio randread_warm_iops "$dir" rnd randread 4k "$RAND_SIZE" 1
      drop_caches
      mark_fio randread_cold_iops "$dir" rnd randread 4k "$RAND_SIZE" 0
      mark_fio randwrite_iops "$dir" rnd randwrite 4k "$RAND_SIZE" 1
    fi
    rm -f "$dir/fio-rnd"
  fi
  if grep -qs 'overrun: [1-9]' "$TRACE"/per_cpu/cpu*/stats; then
    log "$t: the trace buffer overflowed (raise TRACE_BUFFER_KB): no counts"
    return 0
  fi
  local k total by
  while read -r k total by; do
    Q[$t,$k]=$total
    QB[$t,$k]=$by
  done < <(python3 - "$TRACE/trace" "$dir" "${den[@]}" <<'PY'
import collections, os, re, sys
trace, mount = sys.argv[1], sys.argv[2]
den = dict(a.split("=", 1) for a in sys.argv[3:])
dev = os.stat(mount).st_dev
conn = (os.major(dev) << 20) | os.minor(dev)  # the kernel's dev_t of the FUSE connection
meta = {"create": "create_ops_s", "stat": "stat_ops_s", "readdir": "readdir_entries_s",
        "rename": "rename_ops_s", "unlink": "unlink_ops_s"}
counts = collections.defaultdict(collections.Counter)
phase = None
send = re.compile(r"fuse_request_send: connection (\d+) .*?\((\w+)\)")
with open(trace) as f:
    for line in f:
        if "tracing_mark_write:" in line:
            words = line.split("tracing_mark_write:", 1)[1].split()
            p = words[1] if len(words) > 1 else "idle"
            phase = meta.get(p, p) if p in meta or p in den else None
            continue
        m = send.search(line)
        if m and phase and int(m.group(1)) == conn:
            counts[phase][m.group(2).removeprefix("FUSE_")] += 1
for row, d in den.items():
    d = float(d)
    if d <= 0:
        continue
    c = counts[row]
    by = ",".join("%s:%.2f" % (op, n / d) for op, n in c.most_common())
    print(row, "%.2f" % (sum(c.values()) / d), by or "-")
PY
)
}

# ---- table (also printed by the EXIT trap if a run is cut short) ----------------
TABLE_DONE=
print_table() {
  [ -z "$TABLE_DONE" ] || return 0
  TABLE_DONE=1
  echo
  echo "fs_bench: FILES=$FILES SEQ_SIZE=$SEQ_SIZE RAND_SIZE=$RAND_SIZE RUNTIME=${RUNTIME}s REPEAT=$REPEAT (median), STORE=${STORE:-loop}${AS_USER:+, metadata as $AS_USER}, $(nproc) cores, $(uname -r), FUSE over io_uring switch: ${URING_RUN:-absent}"
  echo "each cell: value (ratio to ptll = libfuse passthrough_ll); * incomplete: the median of the rounds that ran, some failed (listed below)"
  printf "%-20s" "row"
  for t in $TARGETS; do printf " %20s" "$t"; done
  echo
  for r in "${ROWS[@]}"; do
    printf "%-20s" "$r"
    ref=${R[ptll,$r]:-}
    for t in $TARGETS; do
      v=${R[$t,$r]:-} f=${FAILS[$t,$r]:+*}
      if [ -z "$v" ]; then
        if [ -n "$f" ]; then printf " %20s" "failed"; else printf " %20s" "n/a"; fi
      elif [ -n "$ref" ] && [ "$ref" != 0 ]; then
        printf " %20s" "$v ($(awk -v a="$v" -v b="$ref" 'BEGIN { printf "%.2fx", a / b }'))$f"
      else
        printf " %20s" "$v$f"
      fi
    done
    echo
  done
  # Every round's value, to judge the spread behind each median.
  echo "rounds (in order):"
  for r in "${ROWS[@]}"; do
    for t in $TARGETS; do
      v=${RUNS[$t,$r]:-} n=${FAILS[$t,$r]:-0}
      [ -n "${v// /}" ] || [ "$n" != 0 ] || continue
      printf "  %-20s %-12s%s%s\n" "$r" "$t" "$v" "${FAILS[$t,$r]:+  ($n failed)}"
    done
  done
  if [ -n "${Q[*]:-}" ]; then  # (${#Q[@]} fails under set -u while Q is empty)
    echo "FUSE requests per operation (readdir: per 1000 entries), one untimed round (COUNT_FILES=$COUNT_FILES):"
    printf "%-20s" "row"
    for t in $TARGETS; do [ "$t" = native ] || printf " %12s" "$t"; done
    echo
    for r in "${ROWS[@]}"; do
      printf "%-20s" "$r"
      for t in $TARGETS; do
        [ "$t" != native ] || continue
        q=${Q[$t,$r]:-${QFAIL[$t,$r]:+failed}}
        printf " %12s" "${q:-n/a}"
      done
      echo
    done
    echo "by request type:"
    for r in "${ROWS[@]}"; do
      for t in $TARGETS; do
        [ -n "${QB[$t,$r]:-}" ] && printf "  %-20s %-12s %s\n" "$r" "$t" "${QB[$t,$r]//,/ }"
      done
    done
  fi
  # Remote files through the mount (without and with the file-data cache)
  # against local files through the mount.
  for r in seq_write_mib_s seq_read_mib_s randread_warm_iops randread_cold_iops; do
    local l=${R[fedfs3-loc,$r]:-} m t
    for t in fedfs3-rem fedfs3-remc; do
      m=${R[$t,$r]:-}
      if [ -n "$l" ] && [ -n "$m" ] && [ "$l" != 0 ]; then
        echo "$r $t / fedfs3-loc: $(awk -v a="$m" -v b="$l" 'BEGIN { printf "%.2f", a / b }')"
      fi
    done
  done
  if [ ${#FAILED[@]} -gt 0 ]; then
    echo "failed measurements (${#FAILED[@]}; their cells are incomplete or failed):"
    printf '  %s\n' "${FAILED[@]}"
  fi
}

# Rounds: every target once per round, in the same order, each started
# fresh and stopped after its run (one target at a time: no idle daemons
# skewing the next). The machine's speed drifts over minutes; interleaving
# spreads that drift over all targets instead of charging it to whichever
# ran during a slow spell.
declare -A UNAVAILABLE
for round in $(seq "$REPEAT"); do
  for t in $TARGETS; do
    [ -z "${UNAVAILABLE[$t]:-}" ] || continue
    DIR=
    if "setup_$t" && [ -n "$DIR" ]; then
      measure_round "$t" "$DIR" "$round"
    else
      log "$t: n/a"
      UNAVAILABLE[$t]=1
    fi
    stop_started
  done
  take_medians
done

# One more round, untimed, counting requests (the tracepoint costs time).
if [ "$COUNT" = 1 ]; then
  if trace_begin; then
    for t in $TARGETS; do
      [ "$t" != native ] && [ -z "${UNAVAILABLE[$t]:-}" ] || continue
      DIR=
      if "setup_$t" && [ -n "$DIR" ]; then count_round "$t" "$DIR"; fi
      stop_started
    done
    trace_end
  else
    log "no tracefs instances or fuse events: requests are not counted"
  fi
fi

print_table
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "fs_bench: ${#FAILED[@]} measurement(s) failed (listed above): the table is incomplete" >&2
  exit 1
fi
