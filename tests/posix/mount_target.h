// Mount targets for mount-level tests: the directories a test runs system
// calls or third-party tools in, and the processes behind them.
//
// A MountTarget is one namespace seen through one or more *views* (paths):
// a native directory (one view), libfuse's passthrough_ll over a native
// directory (one view), or a FedFS federation with one mount per node (one
// view per node; see fedfs_target.h). Tests that need "another node" use
// view(1), view(2), ...; `view(i)` wraps around, so a one-view target runs
// the same test with every "node" on the same directory.
//
// Ownership: a target owns its temporary directories and every process it
// started; its destructor unmounts what it mounted and stops those processes
// by pid (SIGTERM, then SIGKILL after a grace period, then waitpid), even
// after a failed test. Children get PR_SET_PDEATHSIG so a crashed test does
// not leave a FUSE server behind. Not thread-safe: use from the test's main
// thread.
//
// Quirks: reference implementations (passthrough_ll) deviate from POSIX in
// documented ways; a sequence asks `Has(quirk)` and leaves those steps out on
// BOTH sides of a comparison. FedFS targets have no quirks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace fedfs::testing {

using namespace std::chrono_literals;

enum class Quirk {
  // The server creates files as its own user (root), not as the caller.
  kCreatesAsServerUser,
  // The server passes O_DIRECT to the backing file: unaligned FUSE buffers
  // then fail with EINVAL.
  kODirectPassthrough,
  // fallocate supports mode 0 only (no KEEP_SIZE, no PUNCH_HOLE).
  kFallocateModeZeroOnly,
  // renameat2 flags (RENAME_NOREPLACE, ...) are refused with EINVAL.
  kNoRenameFlags,
  // The server writes as its own user (root, with CAP_FSETID) and leaves
  // clearing set-ID bits to itself (libfuse's default FUSE_HANDLE_KILLPRIV):
  // another user's write keeps a set-group-ID bit without group execute.
  kWritesAsServerUser,
};

// Result of running a program to completion.
struct ProcResult {
  int exit_code = -1;  // exit status, 128 + signal, or -1 (could not run / timed out)
  std::string output;  // stdout and stderr, interleaved
  bool timed_out = false;
};

// Runs argv (argv[0] looked up in PATH) in `cwd` ("" = current directory),
// capturing stdout+stderr. SIGKILLs it after `timeout`.
ProcResult Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 120s,
               const std::string& cwd = "");
// Run({"/bin/sh", "-c", script}, ...).
ProcResult Sh(const std::string& script, std::chrono::milliseconds timeout = 120s);
// Single-quotes `s` for /bin/sh.
std::string ShQuote(const std::string& s);

// Creates a fresh directory (mode 0755, so non-root test children can reach
// it) under $FEDFS_TEST_TMPDIR or /var/tmp, named <prefix>-XXXXXX. Aborts
// the test (throws std::runtime_error) if it cannot.
std::string MakeTempDir(const std::string& prefix);

// Removes `path` and everything below it, however deep (openat/unlinkat, so
// paths longer than PATH_MAX work). True if nothing is left.
bool RemoveTree(const std::string& path);
// Removes everything below the directory `dirfd` (not the directory itself).
bool RemoveContents(int dirfd);

// True if `path` is the root of a live FUSE mount (statfs type FUSE).
bool IsFuseMount(const std::string& path);

// True if `program` is found in PATH.
bool HaveProgram(const std::string& program);

class MountTarget {
 public:
  virtual ~MountTarget() = default;
  virtual std::string name() const = 0;
  // Number of distinct views (>= 1).
  virtual size_t view_count() const = 0;
  // The path of view i % view_count().
  virtual std::string view(size_t i) const = 0;
  virtual bool Has(Quirk) const { return false; }
  // True for real mounts (passthrough_ll, FedFS), false for a native dir.
  virtual bool is_mount() const { return true; }
  // A one-line description of what backs the target (for test output).
  virtual std::string describe() const { return name() + " at " + view(0); }
};

// A plain directory (the reference side, or a trivial target).
std::unique_ptr<MountTarget> MakeNativeTarget();

// libfuse's passthrough_ll example (built from Debian's libfuse3-dev
// examples; path from FEDFS_PASSTHROUGH_LL_PATH) mounted over a fresh native
// directory with allow_other, default_permissions, xattr. On failure returns
// null and sets *why.
std::unique_ptr<MountTarget> MakePassthroughLlTarget(std::string* why);

// Low-level building block for FUSE targets: a foreground FUSE server child
// process serving `mountpoint`. Start waits until the mount is live.
class FuseServer {
 public:
  FuseServer() = default;
  ~FuseServer();  // Stop()
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  // Starts argv with stdout+stderr in `log_path`; waits up to `timeout` (a
  // bound against a hang, far above a loaded machine's start) for
  // `mountpoint` to become a FUSE mount. False (with *why) if the process
  // exited or the mount did not appear; the process is then stopped.
  bool Start(const std::vector<std::string>& argv, const std::string& mountpoint,
             const std::string& log_path, std::string* why,
             std::chrono::milliseconds timeout = 60s);
  // Unmounts (umount2; lazily if busy), then stops the process by pid.
  // Returns its exit code (or -1 if none was running). Idempotent.
  int Stop();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string mountpoint_;
};

}  // namespace fedfs::testing
