#!/usr/bin/env bash
# The Ansible role (deploy/ansible/) against three hosts on this machine:
# systemd-nspawn containers booting Debian 12 with systemd as PID 1, each
# with its own address on a bridge of this test's own, reached over ssh.
#
#   tests/deploy/ansible_test.sh [BUILD]       (as root; BUILD defaults to build)
#
# installs what it needs (scripts/install-deps.sh) and builds BUILD's
# binaries when they are missing or stale.
#
# It builds the package (cpack, in a directory of its own), then:
#  1. ansible-lint passes on the role and its playbooks;
#  2. site.yml installs, configures, starts and mounts FedFS on the three
#     hosts: a file written through each host's mount is listed and read
#     through every mount (one merged tree);
#  3. a second run reports changed=0 on every host;
#  4. rolling_restart.yml restarts the nodes one at a time;
#  5. a reboot-like sequence: every container powered off, then booted
#     again; systemd starts the units in its order and every host mounts the
#     namespace again, with the files, and no manual step;
#  6. a daemon killed with SIGKILL leaves a stale mount: systemd restarts the
#     unit, whose start clears it and mounts again;
#  7. site.yml with fedfs_state=absent unmounts, stops and removes
#     everything: no package, unit instance, config, key, journal, mount or
#     process is left.
# The containers' root file system is built once by debootstrap from
# Debian's mirror (with the package's dependencies, resolved by apt) and kept
# in $FEDFS_ROOTFS_CACHE (default /var/cache/fedfs-test); each container
# writes to an overlay of its own. Whatever happens, the containers are
# stopped (by pid), the overlays unmounted and the bridge deleted.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
CACHE=${FEDFS_ROOTFS_CACHE:-/var/cache/fedfs-test}
N=3

say() { echo "ansible-test: $*"; }
die() { echo "ansible-test: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (containers, bridge)"
scripts/install-deps.sh
if [ ! -f "$BUILD/CPackConfig.cmake" ] || [ ! -x "$BUILD/fedfsd/fedfsd" ]; then
  say "building $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD" -j2 fedfsd fedfsctl mount.fuse.fedfs >/dev/null
for t in systemd-nspawn debootstrap ansible-playbook ansible-lint ssh ssh-keygen cpack; do
  command -v "$t" >/dev/null || die "$t is missing (scripts/install-deps.sh installs it)"
done

WORK=$(mktemp -d /var/tmp/fedfs-ansible-XXXXXX)
BR="fedfsbr$$"
NET="10.231.$(( $$ % 200 + 20 ))"
PIDS=()
# systemd-nspawn keeps empty lock and propagation directories here: removed
# at the end unless they were there before.
NSPAWN_RUN_WAS=$([ -d /run/systemd/nspawn ] && echo 1 || true)
cleanup() {
  local rc=$? p i
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  for i in $(seq 1 $N); do
    umount -R "$WORK/c$i/root" 2>/dev/null || umount -l "$WORK/c$i/root" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  if [ -z "$NSPAWN_RUN_WAS" ]; then
    rmdir /run/systemd/nspawn/locks /run/systemd/nspawn/propagate /run/systemd/nspawn 2>/dev/null || true
  fi
  if [ $rc -ne 0 ]; then
    for i in $(seq 1 $N); do
      [ -f "$WORK/c$i.log" ] && { echo "--- container $i (last lines)"; tail -n 30 "$WORK/c$i.log"; }
    done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT INT TERM

say "package"
cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/pkg" >"$WORK/cpack.log" 2>&1 ||
  { cat "$WORK/cpack.log"; die "cpack"; }
DEB=$(ls "$WORK"/pkg/*.deb)

# The root file system: Debian 12 with systemd, sshd and the package's
# dependencies (the package itself installed, to pull them, then removed:
# the role installs it).
KEY=$( (dpkg-deb -f "$DEB" Depends; echo v1) | sha256sum | cut -c1-16)
ROOTFS="$CACHE/rootfs-$KEY"
if [ ! -f "$ROOTFS/.complete" ]; then
  say "building the containers' root file system in $ROOTFS (debootstrap, once)"
  rm -rf "$ROOTFS"
  mkdir -p "$CACHE"
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,iproute2,python3,python3-apt,openssh-server,procps,fuse3,util-linux \
    bookworm "$ROOTFS" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 ||
    { tail -n 20 "$WORK/debootstrap.log"; die "debootstrap"; }
  cp "$DEB" "$ROOTFS/tmp/fedfs.deb"
  chroot "$ROOTFS" apt-get install -y -qq --no-install-recommends /tmp/fedfs.deb >"$WORK/deps.log" 2>&1 ||
    { tail -n 20 "$WORK/deps.log"; die "the package's dependencies"; }
  chroot "$ROOTFS" dpkg --purge fedfs >/dev/null
  rm -f "$ROOTFS/tmp/fedfs.deb"
  chroot "$ROOTFS" apt-get clean
  # The network is configured by systemd-networkd, and network-online.target
  # waits for it (as on a real host).
  mkdir -p "$ROOTFS/etc/systemd/system/network-online.target.wants"
  ln -sf /lib/systemd/system/systemd-networkd.service \
    "$ROOTFS/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
  ln -sf /lib/systemd/system/systemd-networkd-wait-online.service \
    "$ROOTFS/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service"
  rm -f "$ROOTFS/etc/machine-id"
  touch "$ROOTFS/.complete"
fi

ssh-keygen -q -t ed25519 -N "" -f "$WORK/id"
SSH=(ssh -q -i "$WORK/id" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
     -o ConnectTimeout=3 -o BatchMode=yes)
host() { echo "$NET.1$1"; }
on() { local i=$1; shift; "${SSH[@]}" "root@$(host "$i")" "$@"; }

ip link add "$BR" type bridge
ip addr add "$NET.1/24" dev "$BR"
ip link set "$BR" up

for i in $(seq 1 $N); do
  mkdir -p "$WORK/c$i/upper" "$WORK/c$i/work" "$WORK/c$i/root"
  u="$WORK/c$i/upper"
  mkdir -p "$u/etc/systemd/network" "$u/root/.ssh"
  echo "node$i" >"$u/etc/hostname"
  printf '[Match]\nName=host0\n[Network]\nAddress=%s/24\n' "$(host "$i")" \
    >"$u/etc/systemd/network/10-host0.network"
  cp "$WORK/id.pub" "$u/root/.ssh/authorized_keys"
  chmod 700 "$u/root/.ssh"
  chmod 600 "$u/root/.ssh/authorized_keys"
  mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$u,workdir=$WORK/c$i/work" "$WORK/c$i/root"
done

# boot I: starts container I in the background (its pid in PIDS[I-1]).
boot() {
  local i=$1
  systemd-nspawn -D "$WORK/c$i/root" --boot --register=no --keep-unit --console=passive \
    -M "fedfs-n$i-$$" --network-bridge="$BR" --bind=/dev/fuse --capability=CAP_IPC_LOCK \
    >>"$WORK/c$i.log" 2>&1 &
  PIDS[$((i - 1))]=$!
}
wait_ssh() {
  local i=$1 t
  for t in $(seq 1 120); do on "$i" true 2>/dev/null && return 0; sleep 0.5; done
  die "host $i ($(host "$i")) not reachable over ssh"
}
for i in $(seq 1 $N); do boot "$i"; done
for i in $(seq 1 $N); do wait_ssh "$i"; done
say "three hosts up: $(host 1) $(host 2) $(host 3)"

INV="$WORK/inventory"
mkdir -p "$INV"
{
  echo "fedfs:"
  echo "  hosts:"
  for i in $(seq 1 $N); do
    echo "    node$i: {ansible_host: $(host "$i"), fedfs_node_tag: $i}"
  done
  echo "  vars:"
  echo "    ansible_user: root"
  echo "    ansible_ssh_private_key_file: $WORK/id"
  echo "    ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'"
  echo "    fedfs_package_file: $DEB"
} >"$INV/hosts.yml"
export ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
PLAY=(ansible-playbook -i "$INV/hosts.yml")

say "1. ansible-lint"
(cd deploy/ansible && ansible-lint -p roles/fedfs site.yml rolling_restart.yml) || die "ansible-lint"

say "2. deploy"
"${PLAY[@]}" deploy/ansible/site.yml >"$WORK/run1.log" 2>&1 || { cat "$WORK/run1.log"; die "site.yml"; }
merged() {  # every host's mount lists and reads every host's file
  local i j
  for i in $(seq 1 $N); do
    for j in $(seq 1 $N); do
      [ "$(on "$i" cat "/fedfs/from-node$j.txt")" = "written on node$j" ] ||
        die "node$i's mount does not read node$j's file: $(on "$i" ls -la /fedfs 2>&1)"
    done
  done
}
for i in $(seq 1 $N); do on "$i" "echo 'written on node$i' > /fedfs/from-node$i.txt"; done
merged
for i in $(seq 1 $N); do
  [ "$(on "$i" cat "/srv/fedfs/from-node$i.txt")" = "written on node$i" ] ||
    die "node$i's file is not in its own export root"
done

say "3. idempotence"
"${PLAY[@]}" deploy/ansible/site.yml >"$WORK/run2.log" 2>&1 || { cat "$WORK/run2.log"; die "site.yml again"; }
recap=$(sed -n '/PLAY RECAP/,$p' "$WORK/run2.log")
[ "$(grep -c 'changed=0 ' <<<"$recap")" -eq $N ] || { echo "$recap"; die "the second run changed something"; }

say "4. rolling restart"
"${PLAY[@]}" deploy/ansible/rolling_restart.yml >"$WORK/run3.log" 2>&1 ||
  { cat "$WORK/run3.log"; die "rolling_restart.yml"; }
merged

say "5. reboot: power every host off, boot them again"
for i in $(seq 1 $N); do on "$i" systemctl poweroff || true; done
for p in "${PIDS[@]}"; do
  for t in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && die "a container did not power off"
  wait "$p" || true
done
PIDS=()
for i in $(seq 1 $N); do boot "$i"; done
for i in $(seq 1 $N); do wait_ssh "$i"; done
for i in $(seq 1 $N); do
  for t in $(seq 1 120); do
    [ "$(on "$i" findmnt -n -o FSTYPE --mountpoint /fedfs 2>/dev/null)" = fuse.fedfs ] && break
    sleep 0.5
  done
done
merged

say "6. a killed daemon's stale mount"
on 1 'kill -KILL $(systemctl show -p MainPID --value fedfsd@node1.service)'
for t in $(seq 1 120); do
  on 1 'journalctl -u fedfsd@node1.service --no-pager' 2>/dev/null |
    grep -q "cleared the stale FedFS mount at /fedfs" && break
  sleep 0.5
done
on 1 'journalctl -u fedfsd@node1.service --no-pager' | grep -q "cleared the stale FedFS mount" ||
  die "the restarted unit did not clear the stale mount: $(on 1 journalctl -u fedfsd@node1.service --no-pager | tail -n 20)"
for t in $(seq 1 120); do on 1 cat /fedfs/from-node3.txt >/dev/null 2>&1 && break; sleep 0.5; done
merged

say "7. removal"
"${PLAY[@]}" deploy/ansible/site.yml -e fedfs_state=absent >"$WORK/run4.log" 2>&1 ||
  { cat "$WORK/run4.log"; die "site.yml with fedfs_state=absent"; }
for i in $(seq 1 $N); do
  left=$(on "$i" "dpkg -s fedfs >/dev/null 2>&1 && echo package;
    [ -e /etc/fedfs ] && echo /etc/fedfs; [ -e /var/lib/fedfs/node$i ] && echo journal;
    findmnt -n /fedfs >/dev/null && echo mount; [ -e /fedfs ] && echo mountpoint;
    systemctl is-active -q fedfsd@node$i.service && echo unit;
    [ -e /lib/systemd/system/fedfsd@.service ] && echo unit-file;
    pidof fedfsd >/dev/null && echo process; true")
  [ -z "$left" ] || die "node$i keeps: $left"
  [ "$(on "$i" cat "/srv/fedfs/from-node$i.txt")" = "written on node$i" ] ||
    die "node$i's export root lost its files (fedfs_remove_export_root is false)"
done
say "passed: lint, deploy, idempotence, rolling restart, reboot, stale mount, removal"
