#!/usr/bin/env bash
# Installs exactly the Debian 12 packages FedFS needs to build, test and run.
# Idempotent: packages already present are skipped, apt is not touched when
# nothing is missing. Must run as root (or through sudo).
set -euo pipefail

PACKAGES=(
  # toolchain (lld: the linker, CMakeLists.txt)
  cmake g++ ninja-build pkg-config lld
  # fuzzing (scripts/fuzz.sh): clang and its libFuzzer and sanitizer runtimes
  # (a Recommends of clang's, so named here: apt runs without recommends)
  clang libclang-rt-dev
  # FUSE 3 (low-level API) and its mount helper
  libfuse3-dev fuse3
  # FUSE over io_uring (fuse/uring_channel.h)
  liburing-dev
  # M2M transport: UCX over rdma-core (verbs where there is hardware, tcp/shm elsewhere)
  libucx-dev ucx-utils librdmacm-dev libibverbs-dev rdma-core
  # durable state, filesystem helpers, logging, tests
  librocksdb-dev libboost-filesystem-dev libspdlog-dev libgtest-dev libgmock-dev
  # the simulator's fibers (bench/sim/fibers.h): context switching
  libboost-context-dev
  # command line, config, wire format, hashing, authentication, control protocol
  libcli11-dev libyaml-cpp-dev flatbuffers-compiler libflatbuffers-dev
  libxxhash-dev libsodium-dev nlohmann-json3-dev
  # dropping the daemon's unneeded capabilities (fedfsd/privileges.cc)
  libcap-ng-dev
  # the Prometheus endpoint (metrics/endpoint.cc): HTTP/1.1 server
  libcpp-httplib-dev
  # systemd's service protocol (fedfsd/service_notify.cc: sd_notify)
  libsystemd-dev
  # multi-host tests (network namespaces); loop devices for bench/fs_bench.sh
  iproute2 procps util-linux
  # scripts: the test command's skip report (scripts/lib/skips.py), the demo, benchmarks
  python3
  # third-party tools run on the mount by tests/integration/tools_test and bench/fs_bench.sh
  fio stress-ng sqlite3 git mergerfs
  # the Prometheus server that tests/integration/metrics_test scrapes the daemons with
  prometheus
  # the package and the unit's check (tests/integration/install_test.cc):
  # dpkg-shlibdeps, systemd-analyze
  dpkg-dev systemd
  # the Ansible role's test (tests/deploy/ansible_test.sh): three systemd-nspawn
  # hosts booted from a debootstrapped Debian, reached over ssh
  ansible ansible-lint systemd-container debootstrap openssh-client
  # plots of fedfs-bench (bench/sim)
  gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
