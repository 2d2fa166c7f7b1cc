#!/usr/bin/env bash
# File-system benchmark, side by side in one run on this machine:
#   native      a plain directory (ext4 here)
#   ptll        libfuse's passthrough_ll example, compiled now from
#               /usr/share/doc/libfuse3-dev/examples with the HAVE_* macros
#               it checks (HAVE_FALLOCATE, HAVE_POSIX_FALLOCATE,
#               HAVE_COPY_FILE_RANGE; HAVE_UTIMENSAT and HAVE_SETXATTR too,
#               which only the high-level examples read), -o xattr, defaults
#               otherwise (cache=auto, 1 s timeouts)
#   mergerfs    Debian's mergerfs over one branch, its defaults + allow_other
#   fedfs1      FedFS, 1 node
#   fedfs3-loc  FedFS, 3 nodes, files created on the mounting node
#   fedfs3-rem  FedFS, 3 nodes, a placement rule puts every file on another node
# Rows: metadata ops/s over FILES files (fedfs-meta-bench: create, stat,
# readdir entries, rename, unlink), fio 1 MiB sequential write/read (read
# after dropping caches), 4 KiB random read warm and cold (caches dropped:
# echo 3 > /proc/sys/vm/drop_caches, which affects the whole machine) and
# 4 KiB random write. Prints a table with each value and its ratio to ptll.
# A column that cannot run prints n/a (with the reason on stderr).
#
# Usage (root): bench/fs_bench.sh
# Env: BUILD=<build dir> (default build-bench), FILES=10000, SEQ_SIZE=256M,
#      RAND_SIZE=64M, RUNTIME=5 (seconds per random fio job),
#      TARGETS="native ptll mergerfs fedfs1 fedfs3-loc fedfs3-rem",
#      KEEP=1 keeps the work directory, STEP_TIMEOUT=900 (s) bounds the metadata loop.
# Everything started here (FUSE servers, daemons) is stopped by pid and
# everything mounted is unmounted on exit, failure or Ctrl-C (trap).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
FILES=${FILES:-10000}
SEQ_SIZE=${SEQ_SIZE:-256M}
RAND_SIZE=${RAND_SIZE:-64M}
RUNTIME=${RUNTIME:-5}
TARGETS=${TARGETS:-"native ptll mergerfs fedfs1 fedfs3-loc fedfs3-rem"}
EXAMPLES=/usr/share/doc/libfuse3-dev/examples

[ "$(id -u)" -eq 0 ] || { echo "fs_bench: run as root (FUSE mounts, drop_caches)" >&2; exit 1; }
for t in fio python3 cc; do
  command -v "$t" >/dev/null || { echo "fs_bench: $t missing (scripts/install-deps.sh)" >&2; exit 1; }
done

WORK=$(mktemp -d /var/tmp/fedfs-fsbench-XXXXXX)
chmod 755 "$WORK"
PIDS=()
MOUNTS=()
# stop_started: unmounts and stops (by pid) what the current target started.
stop_started() {
  set +e
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
  done
  for p in "${PIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null
    fi
    wait "$p" 2>/dev/null
  done
  PIDS=()
  MOUNTS=()
  set -e
}
cleanup() {
  stop_started
  print_table 2>/dev/null || true
  if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "fs_bench: kept $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "# $*" >&2; }

is_fuse() { [ "$(stat -f -c %t "$1" 2>/dev/null)" = "65735546" ]; }

# wait_mount <mountpoint> <pid...>: until a FUSE mount appears (20 s), or a pid dies.
wait_mount() {
  local m=$1; shift
  for _ in $(seq 200); do
    is_fuse "$m" && return 0
    for p in "$@"; do kill -0 "$p" 2>/dev/null || return 1; done
    sleep 0.1
  done
  return 1
}

# ---- builds -------------------------------------------------------------------
log "building fedfs-meta-bench (and fedfsd, fedfsctl) in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD" -j2 fedfs-meta-bench >/dev/null
META=$BUILD/bench/fedfs-meta-bench
FEDFSD=$BUILD/fedfsd/fedfsd
FEDFSCTL=$BUILD/tools/fedfsctl
HAVE_FEDFS=1
if ! ninja -C "$BUILD" -j2 fedfsd fedfsctl >"$WORK/fedfs-build.log" 2>&1; then
  log "fedfsd does not build (see $WORK/fedfs-build.log with KEEP=1): FedFS columns n/a"
  HAVE_FEDFS=0
fi

PTLL=$WORK/passthrough_ll
log "cc passthrough_ll.c -DHAVE_FALLOCATE -DHAVE_POSIX_FALLOCATE -DHAVE_COPY_FILE_RANGE ..."
# shellcheck disable=SC2046
cc -O2 -Wall -DHAVE_UTIMENSAT -DHAVE_SETXATTR -DHAVE_FALLOCATE -DHAVE_POSIX_FALLOCATE \
  -DHAVE_COPY_FILE_RANGE $(pkg-config fuse3 --cflags) "$EXAMPLES/passthrough_ll.c" -o "$PTLL" \
  $(pkg-config fuse3 --libs)

# ---- targets: setup_<name> sets DIR to the directory to benchmark, or fails -------
# (not run in a subshell: PIDS and MOUNTS must reach the cleanup trap)
setup_native() { mkdir -p "$WORK/native"; DIR=$WORK/native; }

setup_ptll() {
  mkdir -p "$WORK/ptll-src" "$WORK/ptll-mnt"
  "$PTLL" -f -o "source=$WORK/ptll-src,allow_other,xattr,fsname=ptll" "$WORK/ptll-mnt" \
    >"$WORK/ptll.log" 2>&1 &
  PIDS+=($!); MOUNTS+=("$WORK/ptll-mnt")
  wait_mount "$WORK/ptll-mnt" $! || { log "passthrough_ll did not mount"; return 1; }
  DIR=$WORK/ptll-mnt
}

setup_mergerfs() {
  command -v mergerfs >/dev/null || { log "mergerfs not installed"; return 1; }
  mkdir -p "$WORK/mfs-branch" "$WORK/mfs-mnt"
  mergerfs -f -o allow_other,fsname=mergerfs "$WORK/mfs-branch" "$WORK/mfs-mnt" >"$WORK/mergerfs.log" 2>&1 &
  PIDS+=($!); MOUNTS+=("$WORK/mfs-mnt")
  wait_mount "$WORK/mfs-mnt" $! || { log "mergerfs did not mount"; return 1; }
  DIR=$WORK/mfs-mnt
}

# start_fedfs <tag> <nodes> <placement yaml or ""> : starts <nodes> daemons,
# each with its export root and mountpoint; DIR = node 0's mountpoint.
start_fedfs() {
  local tag=$1 n=$2 placement=$3
  [ "$HAVE_FEDFS" = 1 ] || return 1
  local d=$WORK/$tag
  mkdir -p "$d"
  (umask 077; "$FEDFSCTL" keygen >"$d/key")
  local base=$((20000 + RANDOM % 30000))
  local pids=()
  for i in $(seq 0 $((n - 1))); do
    mkdir -p "$d/export$i" "$d/mnt$i"
    local peers="[]"
    [ "$i" -gt 0 ] && peers="[\"127.0.0.1:$base\"]"
    cat >"$d/n$i.yaml" <<EOF
node_id: n$i
node_tag: $((i + 1))
listen: "127.0.0.1:$((base + i))"
export_root: $d/export$i
mountpoint: $d/mnt$i
peers: $peers
cluster_key_file: $d/key
control_socket: $d/n$i.sock
state_dir: $d/state$i
log_level: warn
transport: {tls: tcp, net_devices: lo}
$placement
EOF
    "$FEDFSD" --config "$d/n$i.yaml" >"$d/n$i.log" 2>&1 &
    PIDS+=($!); pids+=($!); MOUNTS+=("$d/mnt$i")
  done
  for i in $(seq 0 $((n - 1))); do
    if ! wait_mount "$d/mnt$i" "${pids[@]}"; then
      log "$tag: node n$i did not mount: $(tail -2 "$d/n$i.log" | tr '\n' ' ')"
      return 1
    fi
  done
  # Wait until every node sees all n members alive.
  for _ in $(seq 100); do
    local alive
    alive=$("$FEDFSCTL" --socket "$d/n0.sock" status --json 2>/dev/null |
      python3 -c 'import json,sys; print(sum(1 for m in json.load(sys.stdin).get("members",[]) if m.get("state")=="alive"))' 2>/dev/null || echo 0)
    [ "$alive" = "$n" ] && break
    sleep 0.1
  done
  DIR=$d/mnt0
}
setup_fedfs1() { start_fedfs fedfs1 1 ""; }
setup_fedfs3-loc() { start_fedfs fedfs3loc 3 ""; }
setup_fedfs3-rem() { start_fedfs fedfs3rem 3 "placement: {policy: local, rules: [{prefix: /, node: n1}]}"; }

# ---- measurements -----------------------------------------------------------------
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# fio_run <dir> <name> <rw> <bs> <size> <timed:0|1>: prints MiB/s or IOPS (json parse).
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
print("%.0f" % (j[side]["bw_bytes"] / 1048576.0 if sys.argv[2] == "mibs" else j[side]["iops"]))' "$rw" "$metric"
}

declare -A R   # R[<target>,<row>] = value
ROWS=(create_ops_s stat_ops_s readdir_entries_s rename_ops_s unlink_ops_s
  seq_write_mib_s seq_read_mib_s randread_warm_iops randread_cold_iops randwrite_iops)

measure() {
  local t=$1 dir=$2
  log "$t: metadata ($FILES files) in $dir"
  local out
  if out=$(timeout "${STEP_TIMEOUT:-900}" "$META" --dir "$dir" --files "$FILES" 2>"$WORK/meta-$t.err"); then
    while read -r k v; do R[$t,$k]=$v; done <<<"$out"
  else
    log "$t: fedfs-meta-bench failed: $(cat "$WORK/meta-$t.err")"
  fi
  log "$t: fio"
  R[$t,seq_write_mib_s]=$(fio_run "$dir" seq write 1M "$SEQ_SIZE" 0 mibs || echo "")
  drop_caches
  R[$t,seq_read_mib_s]=$(fio_run "$dir" seq read 1M "$SEQ_SIZE" 0 mibs || echo "")
  # Lay out the random-I/O file, read it once so the warm run hits cache.
  fio_run "$dir" rnd write 1M "$RAND_SIZE" 0 mibs >/dev/null || true
  fio_run "$dir" rnd read 1M "$RAND_SIZE" 0 mibs >/dev/null || true
  R[$t,randread_warm_iops]=$(fio_run "$dir" rnd randread 4k "$RAND_SIZE" 1 iops || echo "")
  drop_caches
  R[$t,randread_cold_iops]=$(fio_run "$dir" rnd randread 4k "$RAND_SIZE" 1 iops || echo "")
  R[$t,randwrite_iops]=$(fio_run "$dir" rnd randwrite 4k "$RAND_SIZE" 1 iops || echo "")
  rm -f "$dir/fio-seq" "$dir/fio-rnd"
}

# ---- table (also printed by the EXIT trap if a run is cut short) ----------------
TABLE_DONE=
print_table() {
  [ -z "$TABLE_DONE" ] || return 0
  TABLE_DONE=1
  echo
  echo "fs_bench: FILES=$FILES SEQ_SIZE=$SEQ_SIZE RAND_SIZE=$RAND_SIZE RUNTIME=${RUNTIME}s, $(nproc) cores, $(uname -r)"
  echo "each cell: value (ratio to ptll = libfuse passthrough_ll)"
  printf "%-20s" "row"
  for t in $TARGETS; do printf " %20s" "$t"; done
  echo
  for r in "${ROWS[@]}"; do
    printf "%-20s" "$r"
    ref=${R[ptll,$r]:-}
    for t in $TARGETS; do
      v=${R[$t,$r]:-}
      if [ -z "$v" ]; then
        printf " %20s" "n/a"
      elif [ -n "$ref" ] && [ "$ref" != 0 ]; then
        printf " %20s" "$v ($(awk -v a="$v" -v b="$ref" 'BEGIN { printf "%.2fx", a / b }'))"
      else
        printf " %20s" "$v"
      fi
    done
    echo
  done
}

for t in $TARGETS; do
  DIR=
  if "setup_$t" && [ -n "$DIR" ]; then
    measure "$t" "$DIR"
  else
    log "$t: n/a"
  fi
  stop_started  # one target at a time: no idle daemons skewing the next
done

print_table
