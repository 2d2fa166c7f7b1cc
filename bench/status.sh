#!/usr/bin/env bash
# The README's status figures, in one run: bench/fs_bench.sh (every target,
# metadata and fio rows, REPEAT rounds; no request-counting round), then
# bench/shared_dir_bench.sh (N processes on N nodes, one shared directory and
# one directory each, against mergerfs x N and GlusterFS). Each prints its own
# table; this script only runs them one after the other, so that nothing else
# loads the machine meanwhile, and exits non-zero if either failed.
#
# Usage (root): bench/status.sh
# Env: BUILD (default build-bench), passed to both, and every variable either
# script reads (FILES is fs_bench's; SHARED_FILES is passed to
# shared_dir_bench.sh as its FILES).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export BUILD=${BUILD:-$ROOT/build-bench}
rc=0
COUNT=${COUNT:-0} "$ROOT/bench/fs_bench.sh" || rc=1
FILES=${SHARED_FILES:-2000} "$ROOT/bench/shared_dir_bench.sh" || rc=1
exit "$rc"
