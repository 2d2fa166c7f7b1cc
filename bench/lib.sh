# shellcheck shell=bash
# shellcheck disable=SC2034  # DIR, FEDFS_DIR, PTLL, ... are read by the caller
# Shared functions of the file-system benchmarks (bench/fs_bench.sh,
# bench/dt_bench.sh); sourced, not run.
#
# The caller sets ROOT (repository), BUILD (build dir) and WORK (its own
# temporary directory, removed by its EXIT trap), declares the arrays PIDS
# and MOUNTS, and calls stop_started from its EXIT trap: everything the
# functions here start is recorded there (daemons and FUSE servers by pid,
# mountpoints), so it is stopped by pid and unmounted on exit, failure or
# Ctrl-C. Functions that start something are not run in subshells, so that
# PIDS and MOUNTS reach the trap.

EXAMPLES=/usr/share/doc/libfuse3-dev/examples

log() { echo "# $(date +%T) $*" >&2; }

# require_root_and_tools <bench name> <tool...>
require_root_and_tools() {
  local name=$1; shift
  [ "$(id -u)" -eq 0 ] || { echo "$name: run as root (FUSE mounts, drop_caches)" >&2; exit 1; }
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "$name: $t missing (scripts/install-deps.sh)" >&2; exit 1; }
  done
}

# stop_started: unmounts and stops (by pid) what was started since the last call.
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

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# build_bench_tools <target...>: configures $BUILD and builds the given bench
# targets (failure is fatal), then fedfsd and fedfsctl: sets FEDFSD, FEDFSCTL
# and HAVE_FEDFS (0 when the daemon does not build: FedFS columns are n/a).
build_bench_tools() {
  log "building $* (and fedfsd, fedfsctl) in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C "$BUILD" -j2 "$@" >/dev/null
  FEDFSD=$BUILD/fedfsd/fedfsd
  FEDFSCTL=$BUILD/tools/fedfsctl
  HAVE_FEDFS=1
  if ! ninja -C "$BUILD" -j2 fedfsd fedfsctl >"$WORK/fedfs-build.log" 2>&1; then
    log "fedfsd does not build (see $WORK/fedfs-build.log with KEEP=1): FedFS columns n/a"
    HAVE_FEDFS=0
  fi
}

# build_ptll: compiles libfuse's passthrough_ll example into $WORK (sets
# PTLL), with the HAVE_* macros it checks (HAVE_FALLOCATE,
# HAVE_POSIX_FALLOCATE, HAVE_COPY_FILE_RANGE; HAVE_UTIMENSAT and HAVE_SETXATTR
# too, which only the high-level examples read).
build_ptll() {
  PTLL=$WORK/passthrough_ll
  log "cc passthrough_ll.c -DHAVE_FALLOCATE -DHAVE_POSIX_FALLOCATE -DHAVE_COPY_FILE_RANGE ..."
  # shellcheck disable=SC2046
  cc -O2 -Wall -DHAVE_UTIMENSAT -DHAVE_SETXATTR -DHAVE_FALLOCATE -DHAVE_POSIX_FALLOCATE \
    -DHAVE_COPY_FILE_RANGE $(pkg-config fuse3 --cflags) "$EXAMPLES/passthrough_ll.c" -o "$PTLL" \
    $(pkg-config fuse3 --libs)
}

# start_ptll <tag> [extra -o options]: mounts passthrough_ll of
# $WORK/<tag>-src on $WORK/<tag>/mnt0 (-o xattr, defaults otherwise:
# cache=auto, 1 s timeouts); DIR = the mountpoint. Every target's directory
# is at that depth, FedFS's too ($WORK/<tag>/mnt<i>): a stat by path walks
# every component: one more costs about 4 % of a cached stat here (ext4,
# fedfs-meta-bench: 687,000-701,000 against 657,000-669,000 stats/s).
start_ptll() {
  local tag=$1 extra=${2:-}
  mkdir -p "$WORK/$tag-src" "$WORK/$tag/mnt0"
  "$PTLL" -f -o "source=$WORK/$tag-src,allow_other,xattr,fsname=$tag${extra:+,$extra}" \
    "$WORK/$tag/mnt0" >"$WORK/$tag.log" 2>&1 &
  PIDS+=($!); MOUNTS+=("$WORK/$tag/mnt0")
  wait_mount "$WORK/$tag/mnt0" $! || { log "passthrough_ll ($tag) did not mount"; return 1; }
  DIR=$WORK/$tag/mnt0
}

# start_fedfs <tag> <nodes> <yaml for every node or ""> [<node index> <yaml for that node only>]:
# starts <nodes> daemons, each with its export root and mountpoint under
# $WORK/<tag>, waits until every node sees all of them alive; DIR = node 0's
# mountpoint, FEDFS_DIR = $WORK/<tag> (n<i>.sock are the control sockets).
start_fedfs() {
  local tag=$1 n=$2 common=$3 only_i=${4:-} only_yaml=${5:-}
  [ "$HAVE_FEDFS" = 1 ] || return 1
  local d=$WORK/$tag
  mkdir -p "$d"
  (umask 077; "$FEDFSCTL" keygen >"$d/key")
  local base=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768-)
  local pids=() i
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
$common
EOF
    if [ "$i" = "$only_i" ]; then echo "$only_yaml" >>"$d/n$i.yaml"; fi
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
  for i in $(seq 0 $((n - 1))); do
    local alive=0
    for _ in $(seq 100); do
      alive=$("$FEDFSCTL" --socket "$d/n$i.sock" status --json 2>/dev/null |
        python3 -c 'import json,sys; print(sum(1 for m in json.load(sys.stdin).get("members",[]) if m.get("state")=="alive"))' 2>/dev/null || echo 0)
      [ "$alive" = "$n" ] && break
      sleep 0.1
    done
    [ "$alive" = "$n" ] || log "$tag: node n$i sees $alive of $n members alive after 10 s"
  done
  DIR=$d/mnt0
  FEDFS_DIR=$d
}

# bench_begin NAME SHORT: the run's work directory ($WORK), the lists of what
# it starts (PIDS, MOUNTS), and the exit trap that stops and unmounts them,
# prints the table (print_table, defined by the script) and removes the work
# directory unless KEEP is set. Not in a subshell: the trap must see them.
#
# STORE=loop (default): $WORK is a fresh ext4 made for this run (default
# mkfs.ext4 options, so with a journal) on a sparse image in
# /var/tmp/fedfs-SHORT-*, through a loop device with direct I/O (no second
# page cache), and every target's files live on it. Measured on a machine
# whose root file system is ext4 without a journal: there ext4 does not reuse
# an inode deleted in the last 60 s (300 s while its table block is dirty)
# and scans past each such inode on every create, so a create row that
# follows another target's unlink of 10,000 files ran at 2,000/s instead of
# 50,000/s, by the order of the targets rather than by the targets. A fresh
# file system also starts every run from the same state.
# STORE=dir: $WORK is a plain directory in /var/tmp/fedfs-SHORT-*.
bench_begin() {
  BENCH_NAME=$1
  BENCH_BASE=$(mktemp -d "/var/tmp/fedfs-$2-XXXXXX")
  chmod 755 "$BENCH_BASE"
  WORK=$BENCH_BASE
  STORE_DEV=
  PIDS=()
  MOUNTS=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
  if [ "${STORE:-loop}" = loop ]; then
    truncate -s "${STORE_SIZE:-16G}" "$BENCH_BASE/store.img"
    mkfs.ext4 -q -F "$BENCH_BASE/store.img" || { echo "$BENCH_NAME: mkfs.ext4 failed" >&2; exit 1; }
    STORE_DEV=$(losetup --find --show --direct-io=on "$BENCH_BASE/store.img") ||
      { echo "$BENCH_NAME: no loop device (STORE=dir runs without one)" >&2; exit 1; }
    mkdir -p "$BENCH_BASE/fs"
    mount "$STORE_DEV" "$BENCH_BASE/fs" || { echo "$BENCH_NAME: mount of $STORE_DEV failed" >&2; exit 1; }
    WORK=$BENCH_BASE/fs
    chmod 755 "$WORK"
    log "work directory: a fresh ext4 on $STORE_DEV, mounted on $WORK"
  fi
}

# uring_switch Y|N: sets the fuse module's FUSE-over-io_uring switch for the
# run (FedFS uses io_uring when it is on: fuse.io_uring); bench_cleanup puts
# the previous value back. Nothing happens on a kernel without it.
URING_SWITCH=/sys/module/fuse/parameters/enable_uring
URING_WAS=
URING_RUN=
uring_switch() {
  [ -w "$URING_SWITCH" ] || return 0
  [ -n "$URING_WAS" ] || URING_WAS=$(cat "$URING_SWITCH")
  echo "$1" >"$URING_SWITCH"
  URING_RUN=$(cat "$URING_SWITCH")
}

# trace_begin: a tracing instance of its own (its own ring buffer, so the
# machine's global tracing is left alone) with the fuse_request_send event on:
# TRACE = its directory. Mounts tracefs on /sys/kernel/tracing when nothing
# is mounted there (a fresh machine); bench_cleanup then unmounts it, as it
# puts the io_uring switch back. Returns 1 (TRACE empty) where tracefs or the
# fuse events are missing. bench_cleanup removes the instance.
TRACE=
TRACEFS=/sys/kernel/tracing
TRACEFS_MOUNTED=
trace_begin() {
  local base=$TRACEFS
  if ! mountpoint -q "$base"; then
    mount -t tracefs nodev "$base" || return 1
    TRACEFS_MOUNTED=1
    log "mounted tracefs on $base (unmounted at exit)"
  fi
  [ -d "$base/instances" ] && [ -d "$base/events/fuse/fuse_request_send" ] || return 1
  TRACE=$base/instances/fedfs-$BENCH_NAME-$$
  mkdir "$TRACE" || { TRACE=; return 1; }
  echo "${TRACE_BUFFER_KB:-32768}" >"$TRACE/buffer_size_kb"
  echo 1 >"$TRACE/events/fuse/fuse_request_send/enable"
}

# trace_mark TEXT: a line in the instance's trace, between the events.
trace_mark() { echo "$1" >"$TRACE/trace_marker"; }

trace_end() {
  [ -n "$TRACE" ] && [ -d "$TRACE" ] || return 0
  echo 0 >"$TRACE/events/fuse/fuse_request_send/enable" 2>/dev/null || true
  rmdir "$TRACE" 2>/dev/null || true
  TRACE=
}

bench_cleanup() {
  stop_started
  trace_end
  if [ -n "$TRACEFS_MOUNTED" ]; then
    umount "$TRACEFS" || log "could not unmount tracefs from $TRACEFS: left mounted"
    TRACEFS_MOUNTED=
  fi
  [ -z "$URING_WAS" ] || echo "$URING_WAS" >"$URING_SWITCH"
  print_table 2>/dev/null || true
  if [ -n "$STORE_DEV" ]; then
    if mountpoint -q "$BENCH_BASE/fs"; then umount "$BENCH_BASE/fs" || umount -l "$BENCH_BASE/fs"; fi
    losetup -d "$STORE_DEV"
  fi
  if [ -z "${KEEP:-}" ]; then
    rm -rf "$BENCH_BASE"
  else
    echo "$BENCH_NAME: kept $BENCH_BASE${STORE_DEV:+ (the work directory is on store.img: mount -o loop)}" >&2
  fi
}
