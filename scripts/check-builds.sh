#!/usr/bin/env bash
# Builds FedFS in every ordinary configuration, as a user or a packager would
# (no FEDFS_WERROR): CMAKE_BUILD_TYPE Release, RelWithDebInfo, Debug and
# MinSizeRel, and Debian's packaging flags (dpkg-buildflags' CPPFLAGS,
# CXXFLAGS and LDFLAGS with CMAKE_BUILD_TYPE=None, as debhelper builds).
# Prints, per configuration, whether it built and how many compiler warnings
# it printed; exits non-zero if any failed to build. WERROR=1 makes warnings
# errors (FEDFS_WERROR=ON), as CI's builds have them.
# Usage: scripts/check-builds.sh [Release|RelWithDebInfo|Debug|MinSizeRel|dpkg]...
#        (default: all five; build trees under build-check/<config>)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
command -v dpkg-buildflags >/dev/null || apt-get install -y -q dpkg-dev >/dev/null

configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(Release RelWithDebInfo Debug MinSizeRel dpkg)
werror=OFF
[ "${WERROR:-0}" = 1 ] && werror=ON

failed=0
summary=()
for cfg in "${configs[@]}"; do
  dir=build-check/$cfg
  env=()
  case "$cfg" in
    Release | RelWithDebInfo | Debug | MinSizeRel) flags=(-DCMAKE_BUILD_TYPE="$cfg") ;;
    dpkg)
      flags=(-DCMAKE_BUILD_TYPE=None)
      env=(CXXFLAGS="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CXXFLAGS)"
           LDFLAGS="$(dpkg-buildflags --get LDFLAGS)") ;;
    *) echo "check-builds: unknown configuration '$cfg'" >&2; exit 2 ;;
  esac
  echo "== $cfg: configure and build ($dir)"
  rm -rf "$dir"
  log=$(mktemp)
  if env "${env[@]}" cmake -S . -B "$dir" -G Ninja -DFEDFS_WERROR="$werror" "${flags[@]}" >"$log" 2>&1 &&
     ninja -C "$dir" -j"$(nproc)" -k 0 >>"$log" 2>&1; then
    result=built
  else
    result=FAILED
    failed=1
    grep -qE "(warning|error):" "$log" || tail -20 "$log"
  fi
  grep -E "(warning|error):" "$log" | head -40 || true
  warnings=$(grep -cE '(warning|error):' "$log" || true)
  summary+=("$(printf '%-15s %-7s %s compiler warnings or errors' "$cfg" "$result" "$warnings")")
  rm -f "$log"
done
echo "== builds (FEDFS_WERROR=$werror)"
printf '%s\n' "${summary[@]}"
exit "$failed"
