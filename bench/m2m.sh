#!/usr/bin/env bash
# Compares the FedFS UCX transport (fedfs-m2m-bench, client and server in two
# processes) with UCX's own ucx_perftest, both over UCX tcp on loopback, and
# prints one table. Usage: bench/m2m.sh   (env: BUILD=<build dir> (default build-bench, as the other benchmarks), ITERS=20000)
#
# ucx_perftest reports HALF the round trip for ping-pong tests (ucp_am_lat,
# ucp_put_lat); FedFS' RPC and Put (remote completion: put + flush) are full
# round trips, so those rows compare with 2 x the ucx_perftest number.
# ucp_get / ucp_fadd / ucp_cswap latencies are full operations, compared as is.
# Note: over tcp, ucx_perftest's ucp_get latency test measures ~1 ms per 8-byte
# get on this machine (its responder does not poll continuously), so that row
# is not a meaningful reference. Load from other processes on the machine moves
# every number; run it on an idle machine and repeat.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
ITERS=${ITERS:-20000}
BENCH=$BUILD/bench/fedfs-m2m-bench
export UCX_TLS=tcp UCX_NET_DEVICES=lo

if [ ! -x "$BENCH" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C "$BUILD" fedfs-m2m-bench >/dev/null
fi

SERVER_PID=
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

echo "# fedfs-m2m-bench --tls=tcp --dev=lo --iters=$ITERS" >&2
FEDFS=$("$BENCH" --tls=tcp --dev=lo --iters="$ITERS")
fedfs() { echo "$FEDFS" | awk -v k="$1" '$1 == k { print $2 }'; }

BASE_PORT=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768-)
# perftest <port offset> <test> <size> <iters> <warmup> <csv column: 2=p50 latency,
# 6=overall MB/s>. Prints the number, or 0 if ucx_perftest failed.
perftest() {
  local PORT=$((BASE_PORT + $1))
  shift
  ucx_perftest -p "$PORT" >/dev/null 2>&1 &
  SERVER_PID=$!
  local out=""
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.2
    out=$(ucx_perftest 127.0.0.1 -p "$PORT" -t "$1" -s "$2" -n "$3" -w "$4" -f -v 2>/dev/null | tail -1) || true
    case "$out" in [0-9]*,*) break ;; esac
  done
  cleanup
  SERVER_PID=
  echo "$out" | awk -F, -v c="$5" '/^[0-9]/ { gsub(/ /, "", $c); print $c; found = 1 } END { if (!found) print 0 }'
}

echo "# ucx_perftest (UCX_TLS=tcp UCX_NET_DEVICES=lo), server in background on 127.0.0.1" >&2
AM=$(perftest 1 ucp_am_lat 64 "$ITERS" 1000 2)
PUTL=$(perftest 2 ucp_put_lat 8 "$ITERS" 1000 2)
GETL=$(perftest 3 ucp_get 8 2000 100 2)  # ~1 ms per op here (see the note below)
FADD=$(perftest 4 ucp_fadd 8 "$ITERS" 1000 2)
CSWAP=$(perftest 5 ucp_cswap 8 "$ITERS" 1000 2)
PUTBW=$(perftest 6 ucp_put_bw 1048576 2000 100 6)
GETBW=$(perftest 7 ucp_get 1048576 2000 100 6)

row() {  # metric fedfs perftest-equivalent kind(lat|bw) target-text
  awk -v m="$1" -v f="$2" -v p="$3" -v k="$4" -v t="$5" 'BEGIN {
    if (p <= 0 || f <= 0) { printf "%-34s %10.2f %12s %7s   %-16s %s\n", m, f, "n/a", "n/a", t, "n/a"; exit }
    r = f / p;
    ok = (k == "lat") ? (r <= 1.5) : (r >= 0.9);
    if (t == "-") ok = -1;
    printf "%-34s %10.2f %12.2f %7.2f   %-16s %s\n", m, f, p, r, t, ok < 0 ? "" : (ok ? "met" : "MISSED");
  }'
}
printf "%-34s %10s %12s %7s   %-16s %s\n" metric fedfs ucx_perftest ratio target result
row "RPC 64B p50 us (app thread)"      "$(fedfs rpc64_app_p50_us)"     "$(awk -v a="$AM" 'BEGIN{print 2*a}')" lat "<=1.5x 2*am_lat"
row "RPC 64B p50 us (chained)"         "$(fedfs rpc64_chained_p50_us)" "$(awk -v a="$AM" 'BEGIN{print 2*a}')" lat "<=1.5x 2*am_lat"
row "RPC 64B p99 us (app thread)"      "$(fedfs rpc64_app_p99_us)"     "$(awk -v a="$AM" 'BEGIN{print 2*a}')" lat "-"
row "Put 8B p50 us (app, +flush)"      "$(fedfs put8_app_p50_us)"      "$(awk -v a="$PUTL" 'BEGIN{print 2*a}')" lat "-"
row "Put 8B p50 us (chained, +flush)"  "$(fedfs put8_chained_p50_us)"  "$(awk -v a="$PUTL" 'BEGIN{print 2*a}')" lat "-"
row "Get 8B p50 us (app thread)"       "$(fedfs get8_app_p50_us)"      "$GETL" lat "-"
row "Get 8B p50 us (chained)"          "$(fedfs get8_chained_p50_us)"  "$GETL" lat "-"
row "FetchAdd p50 us (app thread)"     "$(fedfs fadd_app_p50_us)"      "$FADD" lat "-"
row "FetchAdd p50 us (chained)"        "$(fedfs fadd_chained_p50_us)"  "$FADD" lat "-"
row "CAS p50 us (app thread)"          "$(fedfs cas_app_p50_us)"       "$CSWAP" lat "-"
row "CAS p50 us (chained)"             "$(fedfs cas_chained_p50_us)"   "$CSWAP" lat "-"
row "Put 1MiB MB/s"                    "$(fedfs put1m_MBps)"           "$PUTBW" bw ">=0.9x put_bw"
row "Get 1MiB MB/s"                    "$(fedfs get1m_MBps)"           "$GETBW" bw ">=0.9x get bw"
