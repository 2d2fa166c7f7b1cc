# shellcheck shell=bash
# shellcheck disable=SC2034  # DIR, FEDFS_DIR, PTLL, ... are read by the caller
# Shared functions of the file-system benchmarks (bench/fs_bench.sh,
# bench/dt_bench.sh, bench/shared_dir_bench.sh); sourced, not run.
#
# The caller sets ROOT (repository), BUILD (build dir) and WORK (its own
# temporary directory, removed by its EXIT trap), declares the arrays PIDS
# and MOUNTS, and calls stop_started from its EXIT trap: everything the
# functions here start is recorded there (daemons and FUSE servers by pid,
# mountpoints; a GlusterFS volume and the glusterd started for it in GL_*),
# so it is stopped by pid and unmounted on exit, failure or Ctrl-C.
# Functions that start something are not run in subshells, so that PIDS,
# MOUNTS and GL_* reach the trap.

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

# stop_started: unmounts and stops (by pid) what was started since the last
# call; then the GlusterFS volume and glusterd, if started (gluster_stop).
stop_started() {
  set +e
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
  done
  for p in "${PIDS[@]}"; do
    stop_pid "$p"
    wait "$p" 2>/dev/null
  done
  PIDS=()
  MOUNTS=()
  gluster_stop
  set -e
}

# stop_pid <pid>: SIGTERM, then SIGKILL after 5 s if it still runs. Returns
# 0 (callable from an EXIT trap under set -e).
stop_pid() {
  kill -0 "$1" 2>/dev/null || return 0
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
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

# The kernel's page cache, and the file-data cache of the FedFS daemons
# started last (fedfsctl cache drop on each of $FEDFS_DIR/n*.sock).
drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
  local s
  for s in "${FEDFS_DIR:-/nonexistent}"/n*.sock; do
    if [ -S "$s" ]; then "$FEDFSCTL" --socket "$s" cache drop >/dev/null 2>&1 || true; fi
  done
}

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
# Every call starts a new federation: the state directories of an earlier
# call with the same tag (an earlier round) are removed first, since a node
# started over an existing one is a restarted node, whose changes of
# regular files wait out the cache lease for the first seconds after its
# start (docs/faults.md, "A restarted node does not know who caches its
# files"); a round measures a running federation, not that wait. The
# export roots stay.
start_fedfs() {
  local tag=$1 n=$2 common=$3 only_i=${4:-} only_yaml=${5:-}
  [ "$HAVE_FEDFS" = 1 ] || return 1
  local d=$WORK/$tag
  mkdir -p "$d"
  rm -rf "$d"/state*
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
metrics: {listen: "127.0.0.1:0"}
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

# ---- GlusterFS -----------------------------------------------------------------
# start_glusterfs <tag> <bricks> <mounts>: a distributed GlusterFS volume
# over <bricks> bricks $WORK/<tag>/brick<i> on this machine, created with
# `force` (GlusterFS wants it for bricks on the root file system) and
# started, with GlusterFS's default volume options; then <mounts> FUSE
# mounts of it on $WORK/<tag>/mnt<i>; DIR = mnt0. Each mount runs the
# client that `mount -t glusterfs` runs (glusterfs --process-name fuse
# --volfile-server=<host> --volfile-id=<volume>, its defaults), in the
# foreground (-N) so that it is stopped by pid like the other FUSE servers.
# Installs glusterfs-server and glusterfs-client with apt-get when glusterd
# is missing: the packages stay installed (on a machine booted with systemd,
# Debian's package also starts its glusterd.service, which is then used and
# left running). With a glusterd running here already (its CLI answers on
# the default socket), the volume is made there, and only the volume (and
# its bricks' logs) is removed at the end. Otherwise the run starts a
# glusterd of its own, its state (working, run and log directories, CLI
# socket) in $WORK/<tag>/glusterd, on GlusterFS's fixed port 24007 (the
# bricks fetch their volfiles there, whatever glusterd listens on), in a
# session of its own (a Ctrl-C of the run does not kill it: the cleanup
# still stops the volume through it);
# gluster_stop (called by stop_started) stops the volume, deletes it, stops
# that glusterd by pid and removes every entry it made in GlusterFS's fixed
# directories (GL_FIXED: brick sockets, a few files written there whatever
# the working directory), found against a listing taken before it started.
# The bricks' host is this machine's first global IPv4 address (GlusterFS
# refuses localhost and 127.x); GLUSTER_HOST=<address> chooses another.
GL_VOL=       # the volume made (gluster_stop stops and deletes it)
GL_CLI=()     # the gluster CLI of the glusterd in use
GL_OWN_PID=   # that glusterd's pid when this run started it
GL_LAUNCHER=  # the background job that runs it (setsid: the same pid, or its parent)
GL_STATE=     # its directory
GL_BRICKS=    # the bricks' parent directory
GL_FIXED=(/var/lib/glusterd /var/log/glusterfs /var/run/gluster)

gluster_listing() { find "${GL_FIXED[@]}" 2>/dev/null | LC_ALL=C sort; }

gluster_install() {
  if command -v glusterd >/dev/null && command -v glusterfs >/dev/null && command -v gluster >/dev/null; then
    return 0
  fi
  log "glusterfs: installing glusterfs-server glusterfs-client (apt-get; they stay installed)"
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q glusterfs-server glusterfs-client)
  "${apt[@]}" >"$WORK/apt.log" 2>&1 ||
    { apt-get update -q >>"$WORK/apt.log" 2>&1 && "${apt[@]}" >>"$WORK/apt.log" 2>&1; } ||
    { log "glusterfs: apt-get install failed: $(tail -n 1 "$WORK/apt.log")"; return 1; }
}

gluster_host() {
  if [ -n "${GLUSTER_HOST:-}" ]; then echo "$GLUSTER_HOST"; return; fi
  ip -4 -o addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

# gluster_start_glusterd <dir> <listing>: a glusterd of this run's, its
# state in <dir>; <listing>: GL_FIXED's entries before anything of GlusterFS
# ran (the CLI writes there too).
gluster_start_glusterd() {
  local g=$1
  [ -n "$g" ] || return 1
  if ss -Hltn 'sport = :24007' 2>/dev/null | grep -q .; then
    log "glusterfs: port 24007 is taken, and no glusterd answers on the default socket"
    return 1
  fi
  mkdir -p "$g/wd" "$g/run" "$g/log"
  GL_STATE=$g
  mv "$2" "$g/before"
  cat >"$g/glusterd.vol" <<VOL
volume management
    type mgmt/glusterd
    option working-directory $g/wd
    option run-directory $g/run
    option logging-directory $g/log
    option glusterd-sockfile $g/run/glusterd.socket
    option transport-type socket
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
end-volume
VOL
  setsid glusterd -N -f "$g/glusterd.vol" -p "$g/run/glusterd.pid" -l "$g/log/glusterd.log" \
    >"$g/glusterd.out" 2>&1 &
  GL_LAUNCHER=$! GL_OWN_PID=$!
  GL_CLI=(gluster --mode=script --glusterd-sock="$g/run/glusterd.socket" --log-file="$g/log/cli.log")
  local p
  for _ in $(seq 100); do
    if timeout 10 "${GL_CLI[@]}" pool list >/dev/null 2>&1; then
      # Its pid from its pid file, checked against its command line.
      p=$(cat "$g/run/glusterd.pid" 2>/dev/null || true)
      if [ -n "$p" ] && tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "$g/glusterd.vol"; then
        GL_OWN_PID=$p
      fi
      log "glusterfs: started glusterd (pid $GL_OWN_PID), its state in $g"
      return 0
    fi
    kill -0 "$GL_LAUNCHER" 2>/dev/null || break
    sleep 0.2
  done
  log "glusterfs: glusterd did not come up: $(tail -n 2 "$g/log/glusterd.log" | tr '\n' ' ')"
  return 1
}

# gluster_bricks_online: how many of GL_VOL's bricks glusterd reports online.
gluster_bricks_online() {
  timeout 20 "${GL_CLI[@]}" volume status "$GL_VOL" --xml 2>/dev/null | python3 -c '
import sys, xml.etree.ElementTree as ET
print(sum(1 for n in ET.parse(sys.stdin).iter("node") if n.findtext("status") == "1"))' 2>/dev/null ||
    echo 0
}

start_glusterfs() {
  local tag=$1 nb=$2 nm=$3 i host
  local d=$WORK/$tag
  gluster_install || return 1
  host=$(gluster_host)
  [ -n "$host" ] || { log "glusterfs: no global IPv4 address for the bricks (GlusterFS refuses 127.x; GLUSTER_HOST=...)"; return 1; }
  mkdir -p "$d/log"
  GL_BRICKS=$d
  gluster_listing >"$d/log/before"
  if timeout 10 gluster --mode=script --log-file="$d/log/cli.log" pool list >/dev/null 2>&1; then
    GL_CLI=(gluster --mode=script --log-file="$d/log/cli.log")
    log "glusterfs: using the glusterd running here (only the volume is removed at the end)"
  else
    gluster_start_glusterd "$d/glusterd" "$d/log/before" || return 1
  fi
  local bricks=()
  for i in $(seq 0 $((nb - 1))); do
    mkdir -p "$d/brick$i"
    bricks+=("$host:$d/brick$i")
  done
  GL_VOL=fedfs-bench-$$-$tag
  if ! "${GL_CLI[@]}" volume create "$GL_VOL" transport tcp "${bricks[@]}" force >"$d/log/create.out" 2>&1 ||
    ! "${GL_CLI[@]}" volume start "$GL_VOL" >>"$d/log/create.out" 2>&1; then
    log "glusterfs: volume create/start failed: $(tail -n 2 "$d/log/create.out" | tr '\n' ' ')"
    return 1
  fi
  local up=0
  for _ in $(seq 100); do
    up=$(gluster_bricks_online)
    [ "$up" -lt "$nb" ] || break
    sleep 0.2
  done
  [ "$up" -ge "$nb" ] || { log "glusterfs: $up of $nb bricks online after 20 s"; return 1; }
  for i in $(seq 0 $((nm - 1))); do
    mkdir -p "$d/mnt$i"
    glusterfs -N --process-name fuse --volfile-server="$host" --volfile-id="$GL_VOL" \
      --log-file="$d/log/mnt$i.log" "$d/mnt$i" >/dev/null 2>&1 &
    PIDS+=($!); MOUNTS+=("$d/mnt$i")
    wait_mount "$d/mnt$i" $! ||
      { log "glusterfs: mount $i did not come up: $(tail -n 2 "$d/log/mnt$i.log" | tr '\n' ' ')"; return 1; }
  done
  log "glusterfs: volume $GL_VOL ($nb bricks on $host), $nm mount(s)"
  DIR=$d/mnt0
}

# gluster_stop: stops and deletes GL_VOL, stops bricks still running by pid
# (each checked to be one of GL_BRICKS'), then this run's glusterd by pid,
# and removes what that glusterd left outside its directory. Run once the
# mounts are gone (stop_started).
gluster_stop() {
  [ -n "$GL_VOL$GL_OWN_PID" ] || return 0
  local p f pids=()
  if [ -n "$GL_VOL" ]; then
    local rundir=/var/run/gluster
    [ -z "$GL_STATE" ] || rundir=$GL_STATE/run
    for f in "$rundir/vols/$GL_VOL"/*.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
    if [ -z "$GL_OWN_PID" ] || kill -0 "$GL_OWN_PID" 2>/dev/null; then
      timeout 120 "${GL_CLI[@]}" volume stop "$GL_VOL" >/dev/null 2>&1 ||
        timeout 120 "${GL_CLI[@]}" volume stop "$GL_VOL" force >/dev/null 2>&1
      timeout 60 "${GL_CLI[@]}" volume delete "$GL_VOL" >/dev/null 2>&1 ||
        log "glusterfs: could not delete volume $GL_VOL"
    fi
    for p in "${pids[@]}"; do
      if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "--brick-name $GL_BRICKS/brick"; then
        stop_pid "$p"
      fi
    done
    if [ -z "$GL_OWN_PID" ]; then  # the running glusterd's logs of these bricks
      rm -f "/var/log/glusterfs/bricks/$(echo "${GL_BRICKS#/}" | tr / -)"-brick*.log
    fi
    GL_VOL=
  fi
  if [ -n "$GL_OWN_PID" ]; then
    stop_pid "$GL_OWN_PID"
    stop_pid "$GL_LAUNCHER"
    wait "$GL_LAUNCHER" 2>/dev/null
    GL_OWN_PID='' GL_LAUNCHER=''
    if [ -f "$GL_STATE/before" ]; then
      LC_ALL=C comm -13 "$GL_STATE/before" <(gluster_listing) | sort -r |
        while read -r f; do rm -rf -- "$f"; done
    fi
    GL_STATE=
  fi
  GL_CLI=()
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
# fusectl: fedfsd mounts it on /sys/fs/fuse/connections where it is missing,
# to end its connection at shutdown (after serving over io_uring); when it
# was not mounted as the run began, bench_cleanup unmounts it again.
FUSECTL=/sys/fs/fuse/connections
FUSECTL_WAS=
bench_begin() {
  BENCH_NAME=$1
  BENCH_BASE=$(mktemp -d "/var/tmp/fedfs-$2-XXXXXX")
  chmod 755 "$BENCH_BASE"
  WORK=$BENCH_BASE
  STORE_DEV=
  PIDS=()
  MOUNTS=()
  if mountpoint -q "$FUSECTL"; then FUSECTL_WAS=1; fi
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
  if [ -z "$FUSECTL_WAS" ] && mountpoint -q "$FUSECTL"; then
    if umount "$FUSECTL"; then
      log "unmounted fusectl from $FUSECTL (a FedFS daemon of the run mounted it)"
    else
      log "could not unmount fusectl from $FUSECTL: left mounted"
    fi
  fi
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
