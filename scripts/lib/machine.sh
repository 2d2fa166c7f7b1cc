# Machine state the test command depends on or may change, sourced by
# scripts/test.sh. The tests set up what they need themselves (a test that
# needs tracefs mounts it and unmounts it again); this file makes sure of it:
#
#   machine_snapshot          records the state before the run
#   machine_make_fresh        (CI=true) takes the machine to a fresh boot's
#                             state for what the tests would set up
#                             themselves, so a green run means a fresh
#                             machine passes too; put back at exit
#   machine_check_leftovers   after the run: what the tests changed and did
#                             not put back is reported and fails the run
#                             (what is in the run's TMPDIR is removed);
#                             what ip(8) leaves behind (/run/netns) is
#                             put back silently; so is fusectl, which a
#                             daemon mounts by design (the test harness
#                             unmounts it too, but clusters running at once
#                             may each see the other's)
#   machine_restore           (EXIT trap) puts back everything changed
#
# Each item is one line of `machine_state`: a name and its value.

MACHINE_URING=/sys/module/fuse/parameters/enable_uring
MACHINE_TRACEFS=/sys/kernel/tracing
MACHINE_FUSECTL=/sys/fs/fuse/connections
MACHINE_BEFORE=()        # lines of machine_state at snapshot time
MACHINE_REMOUNT=()       # "fstype dir" unmounted by machine_make_fresh
MACHINE_URING_WAS=
MACHINE_RUNDIR=          # the run's TMPDIR (machine_use_rundir)
MACHINE_RUNDIR_DISK=     # the run's FEDFS_TEST_TMPDIR (under /var/tmp: the mount suites' disk-backed dirs)
MACHINE_UNLOAD_FUSE=     # set when the test command loaded the fuse module

machine_mounted() {  # machine_mounted DIR: a file system is mounted on DIR
  awk -v d="$1" '$5 == d { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# One line per item: mounts of the pseudo file systems the tests touch, every
# mount under the temp dir, network namespaces, tracefs instances, loop
# devices, the tests' temp dirs. (The io_uring switch is put back by
# machine_restore.)
machine_state() {
  local d
  for d in "$MACHINE_TRACEFS" "$MACHINE_FUSECTL" /run/netns; do
    machine_mounted "$d" && echo "mount $d"
  done
  [ -d /run/netns ] && echo "dir /run/netns"
  awk 'index($5, "/tmp/") == 1 || index($5, "/var/tmp/") == 1 { print "mount " $5 }' /proc/self/mountinfo
  ip netns list 2>/dev/null | awk '{ print "netns " $1 }'
  if [ -d "$MACHINE_TRACEFS/instances" ]; then
    for d in "$MACHINE_TRACEFS"/instances/*; do [ -e "$d" ] && echo "tracefs-instance ${d##*/}"; done
  fi
  losetup -n -O NAME,BACK-FILE 2>/dev/null | awk '{ print "loop " $1 " " $2 }'
  for d in /tmp/fedfs* /var/tmp/fedfs*; do
    [ -e "$d" ] && [ "$d" != "$MACHINE_RUNDIR" ] && [ "$d" != "$MACHINE_RUNDIR_DISK" ] && echo "tempdir $d"
  done
  for d in "$MACHINE_RUNDIR" "$MACHINE_RUNDIR_DISK"; do
    [ -n "$d" ] && for d in "$d"/*; do [ -e "$d" ] && echo "run-tempdir $d"; done
  done
  return 0
}

# The tests' temp files go to directories of this run's (TMPDIR, and
# FEDFS_TEST_TMPDIR for the mount suites, which want a disk-backed file
# system), so that what they leave there is theirs, and is removed after the
# report.
machine_use_rundir() {
  MACHINE_RUNDIR=$(mktemp -d /tmp/fedfs-run.XXXXXX)
  MACHINE_RUNDIR_DISK=$(mktemp -d /var/tmp/fedfs-run.XXXXXX)
  chmod 0755 "$MACHINE_RUNDIR" "$MACHINE_RUNDIR_DISK"  # tests switch to other users under them
  export TMPDIR=$MACHINE_RUNDIR FEDFS_TEST_TMPDIR=$MACHINE_RUNDIR_DISK
}

machine_snapshot() {
  mapfile -t MACHINE_BEFORE < <(machine_state)
  [ -w "$MACHINE_URING" ] && MACHINE_URING_WAS=$(cat "$MACHINE_URING")
  return 0
}

# Unmounts tracefs and fusectl when nothing uses them (the tests and the
# daemon mount them when missing, as on a fresh boot), and /run/netns when no
# namespace is in it; each is mounted again at exit.
machine_make_fresh() {
  local fstype dir
  for fstype in tracefs:"$MACHINE_TRACEFS" fusectl:"$MACHINE_FUSECTL"; do
    dir=${fstype#*:}
    fstype=${fstype%%:*}
    if machine_mounted "$dir"; then
      if [ "$fstype" = tracefs ] && [ -n "$(ls -A "$dir/instances" 2>/dev/null)" ]; then
        echo "test.sh: tracefs has instances in use; left mounted"
      elif umount "$dir" 2>/dev/null; then
        MACHINE_REMOUNT+=("$fstype $dir")
        echo "test.sh: unmounted $fstype from $dir for the run (a fresh machine has none); mounted again at exit"
      else
        echo "test.sh: $fstype on $dir is in use; left mounted"
      fi
    fi
  done
  if machine_mounted /run/netns && [ -z "$(ls -A /run/netns)" ]; then
    umount /run/netns && MACHINE_REMOUNT+=("netns /run/netns")
  fi
  # Other tests' leftovers would hide ours: the state is taken again.
  machine_snapshot
}

# Puts back what is expected to change; prints and counts the rest.
machine_check_leftovers() {
  local -a after
  local line left=0
  mapfile -t after < <(machine_state)
  for line in "${after[@]}"; do
    printf '%s\n' "${MACHINE_BEFORE[@]}" | grep -qxF -- "$line" && continue
    case "$line" in
      "mount /run/netns") umount /run/netns 2>/dev/null || true ;;                # ip netns add's
      # A daemon mounts fusectl by design (fuse/fuse_frontend.cc, Abort); each
      # Cluster unmounts the one its daemons mounted, but two run at once (ctest
      # -j, or another FedFS on this machine) may each see the other's.
      "mount $MACHINE_FUSECTL") umount "$MACHINE_FUSECTL" 2>/dev/null || true ;;
      "dir /run/netns") ;;                                                        # ip netns add's, below
      *) echo "test.sh: left behind by the tests: $line"; machine_remove "$line"; left=$((left + 1)) ;;
    esac
  done
  if ! printf '%s\n' "${MACHINE_BEFORE[@]}" | grep -qx "dir /run/netns" && [ -d /run/netns ] &&
    ! machine_mounted /run/netns; then
    rmdir /run/netns 2>/dev/null || { echo "test.sh: left behind by the tests: files in /run/netns"; left=$((left + 1)); }
  fi
  return "$left"
}

# Removes one leftover of machine_state when it is surely this run's: what
# is inside its TMPDIR. The rest may be another run's on the same machine.
machine_remove() {
  local kind=${1%% *} what=${1#* }
  case "$kind" in
    mount) [[ "$what" == "$MACHINE_RUNDIR"/* || "$what" == "$MACHINE_RUNDIR_DISK"/* ]] &&
      { umount "$what" 2>/dev/null || umount -l "$what"; } ;;
    run-tempdir) rm -rf --one-file-system -- "$what" ;;
  esac
  return 0
}

machine_restore() {
  local item
  for item in "$MACHINE_RUNDIR" "$MACHINE_RUNDIR_DISK"; do
    [ -n "$item" ] && { rmdir "$item" 2>/dev/null || echo "test.sh: $item kept (not empty)" >&2; }
  done
  [ -n "$MACHINE_URING_WAS" ] && echo "$MACHINE_URING_WAS" >"$MACHINE_URING"
  for item in "${MACHINE_REMOUNT[@]}"; do
    local fstype=${item%% *} dir=${item#* }
    machine_mounted "$dir" && continue
    if [ "$fstype" = netns ]; then  # as ip(8) makes it: a shared bind mount of itself
      mkdir -p "$dir" && mount --bind "$dir" "$dir" && mount --make-shared "$dir"
    else
      mount -t "$fstype" nodev "$dir"
    fi || echo "test.sh: could not mount $fstype on $dir again" >&2
  done
  MACHINE_REMOUNT=()
  if [ -n "$MACHINE_UNLOAD_FUSE" ]; then
    modprobe -r fuse 2>/dev/null || echo "test.sh: the fuse module is in use; left loaded" >&2
  fi
}
