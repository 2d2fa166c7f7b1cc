#!/usr/bin/env bash
# FedFS demo: a federation of 3 fedfsd daemons on this machine (loopback, UCX
# over TCP), each with its own config, export root and mountpoint under .demo/.
#
#   scripts/demo.sh start    install deps, build, put a few files directly into
#                            each node's export root, start 3 daemons (each
#                            mounts the global namespace at .demo/node<N>/mnt),
#                            show status, `ls -la` of the merged tree and `cat`
#                            of every file through every mount
#   scripts/demo.sh status   show each daemon's view (fedfsctl status)
#   scripts/demo.sh stop     stop them (SIGTERM by pid: each unmounts; SIGKILL
#                            after 10 s, then fusermount3 -u)
#
# Daemons are stopped by the pids recorded at start, never by name. Logs:
# .demo/node<N>.log. Stopping leaves nothing running and nothing mounted.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEMO=$ROOT/.demo
BUILD=$ROOT/build
FEDFSD=$BUILD/fedfsd/fedfsd
FEDFSCTL=$BUILD/tools/fedfsctl
NODES=(1 2 3)
WAIT_SECONDS=30
GRACE_SECONDS=10

say() { echo "demo: $*" >&2; }
die() { say "error: $*"; exit 1; }

# pid of node $1 if it is running fedfsd, else empty.
node_pid() {
  local f=$DEMO/node$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
     tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "fedfsd --config $DEMO/node$1.yaml"; then
    echo "$pid"
  fi
}

# A TCP port nobody listens on now, not in $USED_PORTS.
USED_PORTS=" "
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 12000 ))  # below the ephemeral range (32768-)
    case "$USED_PORTS" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
       ! ss -Htan "( sport = :$p )" 2>/dev/null | grep -q .; then
      USED_PORTS="$USED_PORTS$p "
      echo "$p"
      return 0
    fi
  done
  die "no free TCP port found on 127.0.0.1"
}

stop_nodes() {
  local n pid pids=()
  for n in "${NODES[@]}"; do
    pid=$(node_pid "$n")
    if [ -n "$pid" ]; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$n:$pid")
    fi
  done
  for entry in "${pids[@]}"; do
    n=${entry%%:*}; pid=${entry#*:}
    for _ in $(seq 1 $((GRACE_SECONDS * 10))); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "node$n (pid $pid) did not stop after ${GRACE_SECONDS}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    say "stopped node$n (pid $pid)"
  done
  for n in "${NODES[@]}"; do
    rm -f "$DEMO/node$n.pid" "$DEMO/node$n.sock"
    clear_mount "$DEMO/node$n/mnt"
  done
}

is_mounted() { grep -q " $1 fuse" /proc/self/mounts 2>/dev/null; }

# Unmounts a mount left by a killed daemon (or a stale one: ENOTCONN).
clear_mount() {
  local mp=$1
  if is_mounted "$mp"; then
    fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
    say "cleared the mount at $mp"
  fi
}

# Files a local program puts directly into each export root (not through FedFS).
seed_exports() {
  local n
  umask 022
  for n in "${NODES[@]}"; do
    mkdir -p "$DEMO/node$n/export/shared" "$DEMO/node$n/export/node$n-only"
    # Where any user may write, as in /tmp (sticky: each removes only theirs).
    mkdir -p "$DEMO/node$n/export/scratch"
    chmod 1777 "$DEMO/node$n/export/scratch"
    echo "hello from node$n's export root" > "$DEMO/node$n/export/hello-node$n.txt"
    echo "node$n wrote this into /shared" > "$DEMO/node$n/export/shared/from-node$n.txt"
    echo "a file only node$n has, in a directory only node$n has" \
      > "$DEMO/node$n/export/node$n-only/notes.txt"
  done
}

# ls -la of the merged tree and cat of every file, through every mount.
show_mounts() {
  local n f
  for n in "${NODES[@]}"; do
    echo "== ls -la through node$n's mount ($DEMO/node$n/mnt) =="
    (cd "$DEMO/node$n/mnt" && ls -laR .)
    echo
  done
  for n in "${NODES[@]}"; do
    echo "== cat of every file through node$n's mount =="
    (cd "$DEMO/node$n/mnt" && find . -type f | sort | while read -r f; do
      printf '%-32s (on %s): %s\n' "$f" "$(getfattr_loc "$f")" "$(cat "$f")"
    done)
    echo
  done
}

# The holder of a file, from the user.fedfs.location xattr.
getfattr_loc() {
  python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.fedfs.location").decode())' "$1" \
    2>/dev/null || echo "?"
}

alive_count() {  # alive members in node $1's view
  "$FEDFSCTL" --socket "$DEMO/node$1.sock" status --json 2>/dev/null |
    grep -c '"state": "alive"' || true
}

cmd_start() {
  for n in "${NODES[@]}"; do
    if [ -n "$(node_pid "$n")" ]; then
      say "already running (node$n pid $(node_pid "$n")); 'scripts/demo.sh stop' first"
      cmd_status
      return 0
    fi
  done
  say "installing dependencies (scripts/install-deps.sh)"
  "$ROOT/scripts/install-deps.sh"
  say "building fedfsd and fedfsctl in build/"
  # Release, as scripts/test.sh builds build/: the two share one tree.
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BUILD" -j2 fedfsd fedfsctl

  # Reachable by every user (the mounts are allow_other, the kernel checks
  # modes): the key, the sockets and the journals stay root's.
  umask 022
  mkdir -p "$DEMO"
  chmod 755 "$DEMO"
  if [ ! -s "$DEMO/cluster.key" ]; then
    (umask 077; "$FEDFSCTL" keygen > "$DEMO/cluster.key")
  fi
  chmod 600 "$DEMO/cluster.key"

  local addrs=() maddrs=() n
  for n in "${NODES[@]}"; do addrs+=("127.0.0.1:$(free_port)"); done
  for n in "${NODES[@]}"; do maddrs+=("127.0.0.1:$(free_port)"); done
  for n in "${NODES[@]}"; do
    local peers="" i
    for ((i = 1; i < n; i++)); do peers+="${peers:+, }\"${addrs[i-1]}\""; done
    mkdir -p "$DEMO/node$n/export" "$DEMO/node$n/mnt" "$DEMO/node$n/state"
    chmod 755 "$DEMO/node$n" "$DEMO/node$n/export" "$DEMO/node$n/mnt"
    chmod 700 "$DEMO/node$n/state"
    clear_mount "$DEMO/node$n/mnt"
    cat > "$DEMO/node$n.yaml" <<YAML
# FedFS demo node $n (docs/config.md)
node_id: node$n
node_tag: $n
listen: "${addrs[n-1]}"
export_root: $DEMO/node$n/export
mountpoint: $DEMO/node$n/mnt
peers: [$peers]
cluster_key_file: $DEMO/cluster.key
control_socket: $DEMO/node$n.sock
state_dir: $DEMO/node$n/state
log_level: info
transport: {tls: tcp, net_devices: lo}
timeouts: {heartbeat_interval_ms: 200, failure_timeout_ms: 1500}
metrics: {listen: "${maddrs[n-1]}"}
YAML
  done

  seed_exports
  for n in "${NODES[@]}"; do
    setsid "$FEDFSD" --config "$DEMO/node$n.yaml" >> "$DEMO/node$n.log" 2>&1 < /dev/null &
    echo $! > "$DEMO/node$n.pid"
    say "started node$n (pid $!, ${addrs[n-1]}, log .demo/node$n.log)"
  done

  local deadline=$((SECONDS + WAIT_SECONDS)) ok
  while :; do
    ok=1
    for n in "${NODES[@]}"; do
      # By the recorded pid: just after the start the child may not have
      # exec'd fedfsd yet, so node_pid's cmdline check would not match.
      if ! kill -0 "$(cat "$DEMO/node$n.pid")" 2>/dev/null; then
        say "node$n exited; last lines of .demo/node$n.log:"
        tail -n 5 "$DEMO/node$n.log" >&2 || true
        stop_nodes
        die "node$n failed to start"
      fi
      [ "$(alive_count "$n")" = "${#NODES[@]}" ] || ok=0
    done
    [ "$ok" = 1 ] && break
    if [ $SECONDS -ge $deadline ]; then
      for n in "${NODES[@]}"; do
        say "node$n sees $(alive_count "$n") alive; last lines of its log:"
        tail -n 5 "$DEMO/node$n.log" >&2 || true
      done
      stop_nodes
      die "the 3 daemons did not form a federation within ${WAIT_SECONDS}s"
    fi
    sleep 0.2
  done
  for n in "${NODES[@]}"; do
    while ! is_mounted "$DEMO/node$n/mnt"; do
      if [ $SECONDS -ge $deadline ]; then
        tail -n 5 "$DEMO/node$n.log" >&2 || true
        stop_nodes
        die "node$n did not mount $DEMO/node$n/mnt within ${WAIT_SECONDS}s"
      fi
      sleep 0.2
    done
  done
  say "federation of ${#NODES[@]} nodes is up; each mounts the global namespace"
  cmd_status
  echo
  show_mounts
  echo "Try: ls -la $DEMO/node1/mnt; echo hi > $DEMO/node1/mnt/new.txt; cat $DEMO/node3/mnt/new.txt"
  if runuser -u nobody -- test -x "$DEMO/node1/mnt/scratch" 2>/dev/null; then
    echo "Any user may read the namespace and write in /scratch: runuser -u nobody -- sh -c 'echo mine > $DEMO/node2/mnt/scratch/x'"
  else
    echo "(Other users cannot reach $DEMO: a folder above it is closed to them; the mounts themselves are open to every user.)"
  fi
  echo "Move it: $FEDFSCTL -s $DEMO/node1.sock migrate /new.txt --to node2; $FEDFSCTL -s $DEMO/node1.sock where /new.txt"
  for n in "${NODES[@]}"; do
    echo "Metrics of node$n: curl http://${maddrs[n-1]}/metrics (or $FEDFSCTL -s $DEMO/node$n.sock metrics)"
  done
  echo "Stop it with: scripts/demo.sh stop"
}

cmd_status() {
  local n any=0
  for n in "${NODES[@]}"; do
    echo "== node$n =="
    if [ -z "$(node_pid "$n")" ]; then
      echo "not running"
      continue
    fi
    any=1
    "$FEDFSCTL" --socket "$DEMO/node$n.sock" status || true
  done
  [ "$any" = 1 ] || return 1
}

case "${1:-}" in
  start) cmd_start ;;
  stop) stop_nodes ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
