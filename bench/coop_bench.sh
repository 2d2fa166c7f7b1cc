#!/usr/bin/env bash
# Cooperative caching on three nodes (docs/coopcache.md), in one run, three
# ways: cooperation with N-chance forwarding ("fwd", the default config),
# cooperation without forwarding ("coop", `forward: 0`) and none ("off",
# `share: false`, each node's cache its own):
#   n0 holds a working set of WS_MIB MiB (one file written through its mount);
#   n2 reads the last CACHE_MIB MiB of it once (its cache now keeps them);
#   the machine's page caches are dropped (the daemons' caches are not);
#   n1 reads the file randomly for RUNTIME s with fio (4 KiB, then 256 KiB),
#   while the page caches are dropped every DROP_EVERY s (0: never), so
#   that n0's memory does not hold the working set (a file's node with less
#   memory than its files; the three block caches together could).
# Each node's cache is CACHE_MIB MiB in 256 KiB blocks. Printed per block
# size and way: n1's IOPS and p50/p99 completion latency, the bytes n0 read
# from its disk (/proc/<pid>/io read_bytes of its fedfsd), where n1's reads
# were served (own cache hits, blocks read one-sidedly from n2's or n0's
# cache, reads from n0), the blocks n1 forwarded and n1's fedfsd's RSS
# after the run; then each way's ratios to "off".
#
#   bench/coop_bench.sh        BUILD=build-bench WS_MIB=600 CACHE_MIB=256 RUNTIME=10
#                              DROP_EVERY=1 MODES="fwd coop off"
#                              REBUILD=1 (0: use fedfsd and fedfsctl in BUILD as built)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
WS_MIB=${WS_MIB:-600}
CACHE_MIB=${CACHE_MIB:-256}
RUNTIME=${RUNTIME:-10}
DROP_EVERY=${DROP_EVERY:-1}
MODES=${MODES:-fwd coop off}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
require_root_and_tools coop_bench fio cmake ninja python3
bench_begin coop_bench coop
if [ "${REBUILD:-1}" = 1 ]; then
  build_bench_tools fedfsd fedfsctl
else
  FEDFSD=$BUILD/fedfsd/fedfsd
  FEDFSCTL=$BUILD/tools/fedfsctl
  [ -x "$FEDFSD" ] && [ -x "$FEDFSCTL" ] || { echo "coop_bench: no fedfsd/fedfsctl in $BUILD" >&2; exit 1; }
  HAVE_FEDFS=1
fi

ctl_json() { "$FEDFSCTL" --socket "$1" cache --json; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin).get('$1', 0))"; }

# Drops the page caches every DROP_EVERY s until killed (by pid; the exit
# trap kills one left running).
dropper() {
  while sleep "$DROP_EVERY"; do echo 1 >/proc/sys/vm/drop_caches; done
}
DROPPER=
trap '[ -n "$DROPPER" ] && kill "$DROPPER" 2>/dev/null; bench_cleanup' EXIT

declare -A R
for mode in $MODES; do
  case $mode in
    fwd) extra="share: true" ;;
    coop) extra="share: true, forward: 0" ;;
    off) extra="share: false" ;;
    *) echo "coop_bench: unknown mode $mode" >&2; exit 1 ;;
  esac
  start_fedfs "coop-$mode" 3 "coopcache: {size: ${CACHE_MIB}MiB, block: 256KiB, $extra}" ||
    { echo "coop_bench: the federation did not start" >&2; exit 1; }
  d=$FEDFS_DIR
  n0_pid=${PIDS[-3]}
  n1_pid=${PIDS[-2]}
  log "$mode: writing $WS_MIB MiB through n0"
  dd if=/dev/urandom of="$d/mnt0/ws" bs=1M count="$WS_MIB" status=none
  for bs in 4k 256k; do
    "$FEDFSCTL" --socket "$d/n1.sock" cache drop >/dev/null
    "$FEDFSCTL" --socket "$d/n2.sock" cache drop >/dev/null
    dd if="$d/mnt2/ws" of=/dev/null bs=1M skip=$((WS_MIB - CACHE_MIB)) count="$CACHE_MIB" status=none
    sync
    echo 3 >/proc/sys/vm/drop_caches
    before=$(awk '/^read_bytes/ {print $2}' "/proc/$n0_pid/io")
    drop_pid=
    if [ "$DROP_EVERY" != 0 ]; then
      dropper &
      drop_pid=$!
      DROPPER=$drop_pid
    fi
    out=$(fio --name=rr --filename="$d/mnt1/ws" --rw=randread --bs="$bs" --ioengine=psync \
      --time_based --runtime="$RUNTIME" --invalidate=1 --fadvise_hint=random \
      --output-format=json 2>/dev/null)
    if [ -n "$drop_pid" ]; then
      kill "$drop_pid"
      wait "$drop_pid" 2>/dev/null || true
      DROPPER=
    fi
    after=$(awk '/^read_bytes/ {print $2}' "/proc/$n0_pid/io")
    j=$(ctl_json "$d/n1.sock")
    R[$mode,$bs]=$(echo "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)["jobs"][0]["read"]
p = r["clat_ns"]["percentile"]
print("%.0f %.1f %.1f" % (r["iops"], p["50.000000"] / 1e3, p["99.000000"] / 1e3))')
    R[$mode,$bs]+=" $(( (after - before) >> 20 )) $(echo "$j" | field hits) $(echo "$j" | field remote_hits) $(echo "$j" | field fetches) $(echo "$j" | field forwards)"
    R[$mode,$bs]+=" $(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$n1_pid/status")"
    log "$mode $bs: ${R[$mode,$bs]}"
  done
  stop_started
done

echo "coop_bench: ${WS_MIB} MiB on n0, ${CACHE_MIB} MiB cache per node (256 KiB blocks), n2 warmed with the last ${CACHE_MIB} MiB, n1 reads randomly for ${RUNTIME} s, page caches dropped every ${DROP_EVERY} s"
printf '%-6s %-5s %10s %10s %10s %12s %10s %10s %10s %10s %11s\n' block way IOPS "p50 us" "p99 us" "n0 disk MiB" "own hits" "peers mem" "from n0" forwarded "n1 RSS MiB"
for bs in 4k 256k; do
  for mode in $MODES; do
    read -r iops p50 p99 disk hits remote fetches fwd rss <<<"${R[$mode,$bs]}"
    printf '%-6s %-5s %10s %10s %10s %12s %10s %10s %10s %10s %11s\n' "$bs" "$mode" "$iops" "$p50" "$p99" "$disk" "$hits" "$remote" "$fetches" "$fwd" "$rss"
  done
  [ -n "${R[off,$bs]:-}" ] || continue
  read -r off_iops _ _ off_disk _ <<<"${R[off,$bs]}"
  for mode in $MODES; do
    [ "$mode" = off ] && continue
    read -r m_iops _ _ m_disk _ <<<"${R[$mode,$bs]}"
    python3 -c "print('%-6s %s/off: IOPS %.2fx, n0 disk reads %s' % ('$bs', '$mode', $m_iops / max($off_iops, 1), ('%.2fx' % ($m_disk / $off_disk)) if $off_disk else 'n/a'))"
  done
done
