// The fedfsd daemons running on this machine, as far as they must know of
// each other: each registers its export root, state dir and mountpoint in
// <run dir>/daemons/ (default /run/fedfs, where the control sockets live)
// for as long as it runs, so that a new daemon can refuse a mountpoint that
// is, lies inside or contains another running daemon's export root or state
// dir, and an export root or state dir that is, lies inside or contains
// another's mountpoint (the daemons would serve requests on each other's
// mounts, each waiting for the other). Nothing else is shared.
//
// An entry is a small text file held under an exclusive flock by its daemon;
// an entry nobody holds (a killed daemon's) is stale and removed by whoever
// sees it. Registration happens before the check, so of two daemons starting
// at once with clashing paths at least one refuses (maybe both): never none.
// Not thread-safe; used once at start by fedfsd/main.cc.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "fedfsd/options.h"

namespace fedfs::daemon {

class LocalDaemons {
 public:
  // Registers `o` in `run_dir`/daemons and checks it against every other
  // entry; the registration lasts as long as the returned object. EEXIST (one
  // line naming both paths and the other daemon) on a clash; other errors
  // when the run dir cannot be used.
  static Result<std::unique_ptr<LocalDaemons>> Register(const DaemonOptions& o,
                                                        const std::string& run_dir = "/run/fedfs");
  ~LocalDaemons();  // removes the entry
  LocalDaemons(const LocalDaemons&) = delete;
  LocalDaemons& operator=(const LocalDaemons&) = delete;

 private:
  LocalDaemons(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace fedfs::daemon
