#!/usr/bin/env bash
# File migration (docs/migration.md) of one SIZE_MIB file between two nodes
# on this machine, in one run, against its references:
#   raw   the transport's one-sided Get bandwidth with 1 MiB gets
#         (fedfs-m2m-bench get1m_MBps, UCX tcp over loopback);
#   cp    `cp` of the file from n0's export root to n1's plus `sync`, page
#         caches dropped first;
#   move  `fedfsctl migrate` of it from n0 to n1 (answers once the copy is
#         fsynced at n1 and the name switched), page caches dropped first;
#   online the move back (n1 -> n0) while a writer overwrites 4 KiB records
#         at random offsets through n0's mount as fast as it can: the
#         writer's latency per write (p50, p99, max) during the move, and
#         afterwards every record is read back through n1's mount (lost: a
#         record that does not read back as written; errors: writes that
#         failed).
# Both export roots are on one fresh ext4 (bench_begin), so cp and the move
# read and write the same disk.
#
#   bench/migration_bench.sh    BUILD=build-bench SIZE_MIB=1024 REBUILD=1
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
SIZE_MIB=${SIZE_MIB:-1024}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
require_root_and_tools migration_bench cmake ninja python3
bench_begin migration_bench mig
if [ "${REBUILD:-1}" = 1 ]; then
  build_bench_tools fedfs-m2m-bench
else
  FEDFSD=$BUILD/fedfsd/fedfsd
  FEDFSCTL=$BUILD/tools/fedfsctl
  HAVE_FEDFS=1
fi
M2M=$BUILD/bench/fedfs-m2m-bench
[ -x "$M2M" ] && [ -x "$FEDFSD" ] && [ -x "$FEDFSCTL" ] ||
  { echo "migration_bench: fedfsd, fedfsctl or fedfs-m2m-bench missing in $BUILD" >&2; exit 1; }

now() { date +%s.%N; }
mbps() { python3 -c "print('%.0f' % ($SIZE_MIB / ($2 - $1)))"; }

log "raw: fedfs-m2m-bench (UCX tcp, lo)"
RAW=$(UCX_TLS=tcp UCX_NET_DEVICES=lo "$M2M" --tls=tcp --dev=lo --iters=2000 | awk '$1 == "get1m_MBps" {print $2}')
RAW=${RAW:-0}

start_fedfs mig 2 "" || { echo "migration_bench: the federation did not start" >&2; exit 1; }
d=$FEDFS_DIR
log "writing $SIZE_MIB MiB into n0's export root"
dd if=/dev/urandom of="$d/export0/f" bs=1M count="$SIZE_MIB" status=none
SUM=$(sha256sum "$d/export0/f" | cut -d' ' -f1)

drop_caches
t0=$(now)
cp "$d/export0/f" "$d/export1/cp.tmp"
sync
t1=$(now)
CP=$(mbps "$t0" "$t1")
rm -f "$d/export1/cp.tmp"
sync

drop_caches
t0=$(now)
"$FEDFSCTL" --socket "$d/n0.sock" migrate /f --to n1 >/dev/null
t1=$(now)
MOVE=$(mbps "$t0" "$t1")
[ -e "$d/export1/f" ] && [ ! -e "$d/export0/f" ] || { echo "migration_bench: the move did not happen" >&2; exit 1; }
[ "$(sha256sum "$d/mnt0/f" | cut -d' ' -f1)" = "$SUM" ] || { echo "migration_bench: the moved file differs" >&2; exit 1; }

log "online: the move back while a writer overwrites 4 KiB records through n0's mount"
drop_caches
STOP=$WORK/stop-writer
python3 - "$d/mnt0/f" "$SIZE_MIB" "$STOP" "$WORK/writer.json" <<'EOF' &
import json, os, random, sys, time
path, size_mib, stop, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
fd = os.open(path, os.O_WRONLY)
rng = random.Random(7)
blocks = size_mib * 256
written, lat, errors = {}, [], []
seq = 0
while not os.path.exists(stop):
    b = rng.randrange(blocks)
    seq += 1
    rec = (b"%016d:%016d:" % (b, seq)).ljust(4096, b"r")
    t, m = time.time(), time.monotonic()
    try:
        os.pwrite(fd, rec, b * 4096)
        written[b] = seq
    except OSError as e:
        errors.append(os.strerror(e.errno))
    lat.append((t, time.monotonic() - m))
os.close(fd)
json.dump({"written": written, "lat": lat, "errors": errors}, open(out, "w"))
EOF
WRITER=$!
# The writer is stopped by pid whatever happens.
trap 'kill "$WRITER" 2>/dev/null; bench_cleanup' EXIT
sleep 1
t0=$(now)
if "$FEDFSCTL" --socket "$d/n1.sock" migrate /f --to n0 >/dev/null 2>"$WORK/online.err"; then
  t1=$(now)
  ONLINE=$(mbps "$t0" "$t1")
  [ -e "$d/export0/f" ] && [ ! -e "$d/export1/f" ] || { echo "migration_bench: the move back did not happen" >&2; exit 1; }
else
  t1=$(now)
  ONLINE="failed: $(cat "$WORK/online.err")"
fi
sleep 1
touch "$STOP"
wait "$WRITER"
trap bench_cleanup EXIT
WR=$(python3 - "$WORK/writer.json" "$d/mnt1/f" "$t0" "$t1" 2>"$WORK/writer.err" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))
t0, t1 = float(sys.argv[3]), float(sys.argv[4])
lost = 0
with open(sys.argv[2], "rb") as f:
    for b, seq in w["written"].items():
        f.seek(int(b) * 4096)
        if f.read(34) != b"%016d:%016d:" % (int(b), seq):
            lost += 1
# Latencies of the writes issued while the move ran.
lat = sorted(x for t, x in w["lat"] if t0 <= t <= t1)
def pct(v, p):
    return 1000 * v[min(len(v) - 1, int(p * len(v)))] if v else 0
print("%d %d %.2f %.2f %.1f %d" % (len(w["written"]), len(lat), pct(lat, 0.5), pct(lat, 0.99),
                                  1000 * max(lat) if lat else 0, lost), len(w["errors"]))
if w["errors"]:
    print("writer errors: " + ", ".join(sorted(set(w["errors"]))), file=sys.stderr)
EOF
)
read -r blocks writes p50 p99 max lost errors <<<"$WR"
DELTA=$("$FEDFSCTL" --socket "$d/n1.sock" migrations --json |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print("%d deltas, %d MiB copied again" % (j["deltas"], j["delta_bytes"] >> 20))')
stop_started

echo "migration_bench: one ${SIZE_MIB} MiB file, two nodes on this machine (UCX tcp over lo), one ext4"
printf '%-28s %10s\n' "" "MB/s"
printf '%-28s %10s\n' "raw one-sided Get 1 MiB" "$RAW"
printf '%-28s %10s\n' "cp + sync" "$CP"
printf '%-28s %10s\n' "fedfsctl migrate" "$MOVE"
printf '%-28s %10s\n' "fedfsctl migrate, writer on" "$ONLINE"
python3 -c "
raw, cp, mv = $RAW, $CP, $MOVE
print('move/raw %.2fx (target >= 0.8), move/cp %.2fx' % (mv / raw if raw else 0, mv / cp if cp else 0))"
[ -s "$WORK/writer.err" ] && cat "$WORK/writer.err"
echo "the move back: $DELTA while the writer ran"
echo "writer during the move back: $writes writes of 4 KiB ($blocks blocks), p50 ${p50} ms, p99 ${p99} ms (target < 50), max ${max} ms; errors $errors, lost $lost"
