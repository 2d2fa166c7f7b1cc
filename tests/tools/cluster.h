// Test harness for multi-process tests: runs real fedfsd daemons as child
// processes and talks to them with the real fedfsctl.
//
// A Cluster owns a temporary directory (configs, key files, export roots,
// mountpoints, logs, control sockets) and every process it started. Its
// destructor stops them all by pid -- SIGTERM, then SIGKILL after a grace
// period, and waitpid -- even when the test failed, clears every FUSE mount a
// daemon left behind (fusermount3 -u -z), then removes the directory (kept when the
// environment variable FEDFS_KEEP_TEST_DIR is set). A daemon that exited
// although nobody stopped it (seen by Running, Stop or the destructor), one
// that does not exit 0 on that SIGTERM, or a sanitizer report in any log
// fails the test (gtest ADD_FAILURE, with the exit status and the log).
// Daemons run in the foreground as children of the test, so nothing outlives it.
// A daemon that must abort its FUSE connection mounts fusectl on
// /sys/fs/fuse/connections where nothing is mounted (fuse/fuse_frontend.cc);
// if nothing was when the Cluster was made, the destructor unmounts it again,
// leaving the machine as it found it.
//
// The binaries come from compile definitions (FEDFS_FEDFSD_PATH,
// FEDFS_FEDFSCTL_PATH) set to $<TARGET_FILE:...> by CMake.
// Not thread-safe: use from the test's main thread.
#pragma once

#include <sys/types.h>

#include <csignal>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fedfs::testing {

using namespace std::chrono_literals;

// Result of running a command to completion.
struct CommandResult {
  int exit_code = -1;  // exit status, or 128 + signal, or -1 if it could not run
  std::string out;
  std::string err;
};

// Runs argv (argv[0] is looked up in PATH) and captures stdout/stderr.
// Kills it (SIGKILL) after `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = 30s);

// Sets an environment variable for the scope (processes started meanwhile,
// the Cluster's daemons included, inherit it); the old value comes back.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  const char* name_;
  std::optional<std::string> old_;
};

// A TCP port that is free on 127.0.0.1 right now (bind to port 0, read it
// back, close).
uint16_t FreePort();

// The text of a file ("" if it cannot be read).
std::string ReadFileText(const std::string& path);

// The value of the sample `series` (name{labels} exactly as printed) in a
// Prometheus text exposition, or -1 if it is not there.
double MetricSample(const std::string& text, const std::string& series);

// Names in a directory (without "." and ".."); {"<errno N>"} if it cannot be
// listed.
std::set<std::string> ListNames(const std::string& dir);

// The bound for waits on a condition that holds within a second or two on an
// idle machine (a daemon up, a change seen, a request blocked): it only turns
// a hang into a failure, far above what a loaded machine (2 cores shared with
// other builds, sanitizers) needs. Tests assert end states, never durations.
inline constexpr std::chrono::seconds kNoHang{60};

// "exit status N" or "killed by signal N (name)" for an exit code as
// Stop returns it (128 + signal for a signal).
std::string DescribeExit(int code);

// Polls `pred` every 50 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

struct NodeConfig {
  std::string id;
  std::string listen;              // "host:port"
  std::vector<std::string> peers;  // seeds
  std::string key_file;            // default: the cluster's key
  std::string tls = "tcp";
  std::string net_devices = "lo";
  int heartbeat_ms = 100;
  int failure_ms = 1000;
  int node_tag = 0;         // 0: a tag unique within this Cluster
  bool mount = true;        // false: "fuse: {mount: false}" (no FUSE mount)
  std::string extra_yaml;  // appended verbatim
};

// True if `path` is a mountpoint now (/proc/self/mountinfo).
bool IsMounted(const std::string& path);

// Unmounts the file system on `dir`, detaching it instead where another
// program keeps it busy (that program keeps what it opened). "" on success,
// else the error.
std::string UnmountOrDetach(const std::string& dir);

class Cluster {
 public:
  Cluster();
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const std::string& dir() const { return dir_; }
  // The cluster key file (mode 0600).
  const std::string& key_file() const { return key_file_; }
  // A new key file with a fresh key, mode `mode`.
  std::string NewKeyFile(const std::string& name, int mode = 0600);

  // Writes <dir>/<id>.yaml (creating the export root <dir>/<id>-export and
  // the mountpoint <dir>/<id>-mnt) and returns its path. The control socket
  // is <dir>/<id>.sock.
  std::string WriteConfig(const NodeConfig& c);
  // Writes an arbitrary config file and returns its path.
  std::string WriteFile(const std::string& name, const std::string& text, int mode = 0644);

  // Starts fedfsd --config <config> with stderr in <dir>/<name>.log,
  // optionally inside network namespace `netns` (ip netns exec), with
  // `args` after the config's. Returns pid.
  pid_t Start(const std::string& name, const std::string& config, const std::string& netns = "",
              const std::vector<std::string>& args = {});
  // Sends `sig` to the node's pid; for SIGKILL/SIGTERM also waits for it to
  // exit (SIGKILL after kNoHang if SIGTERM is not enough). Returns the exit code
  // (or 128 + signal). A mount the dead daemon left behind is cleared with
  // fusermount3 -u -z unless `keep_stale_mount`. A node that had already
  // exited on its own is recorded as such (see Running) and its exit code
  // returned; -1 for a name that was never started.
  int Stop(const std::string& name, int sig = SIGTERM, bool keep_stale_mount = false);
  // The mountpoint of node `id` (as WriteConfig writes it).
  std::string Mountpoint(const std::string& id) const { return dir_ + "/" + id + "-mnt"; }
  std::string ExportRoot(const std::string& id) const { return dir_ + "/" + id + "-export"; }
  // fusermount3 -u -z <mountpoint> if it is mounted; true if it is not
  // mounted afterwards.
  bool ClearMount(const std::string& mountpoint);
  // False once the node has exited. A node that exited although nobody
  // stopped it is not forgotten: its exit code is kept (ExitedOnItsOwn) and
  // the Cluster fails the test with it and the node's log.
  bool Running(const std::string& name);
  // The exit code of a node that exited on its own (as Running, Stop or the
  // destructor found it), or nothing.
  std::optional<int> ExitedOnItsOwn(const std::string& name) const;
  pid_t pid(const std::string& name) const { return nodes_.at(name); }

  std::string Socket(const std::string& id) const { return dir_ + "/" + id + ".sock"; }
  std::string LogPath(const std::string& name) const { return dir_ + "/" + name + ".log"; }
  std::string Log(const std::string& name) const { return ReadFileText(LogPath(name)); }

  // fedfsctl --socket <socket of id> status --json, parsed; a null json on
  // any failure.
  nlohmann::json Status(const std::string& id) const;
  // fedfsctl --socket <socket of id> <args> --json, parsed; null on failure.
  nlohmann::json Ctl(const std::string& id, std::vector<std::string> args) const;
  // The member `member` in `id`'s status (null if absent).
  nlohmann::json Member(const std::string& id, const std::string& member) const;
  // Number of alive members in `id`'s status (-1 if the status failed).
  int AliveCount(const std::string& id) const;
  // True when `id` sees exactly `ids` as alive.
  bool SeesAlive(const std::string& id, const std::vector<std::string>& ids) const;

  // Starts nodes n1..n<count> on free loopback ports, each seeded with all
  // the others and `extra_yaml` in its config, and waits until every one
  // sees all of them alive and is mounted; their ids in *ids. "" on
  // success, else what went wrong (with the node's log).
  std::string StartMounted(int count, std::vector<std::string>* ids,
                           const std::string& extra_yaml = "");

 private:
  std::string dir_;
  std::string key_file_;
  bool fusectl_was_mounted_ = false;
  // Reaps the node if it has exited; true (and recorded in exited_) if so.
  bool ReapIfExited(const std::string& name);

  std::map<std::string, pid_t> nodes_;  // running (not yet reaped) children
  // Nodes that exited on their own: name, exit code (a name restarted may
  // appear more than once).
  std::vector<std::pair<std::string, int>> exited_;
  std::map<std::string, std::string> mounts_;  // node name -> its config's mountpoint
  int next_tag_ = 0;
};

}  // namespace fedfs::testing
