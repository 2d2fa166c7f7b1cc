// LocalDaemons: see fedfsd/local_daemons.h for the contract.
#include "fedfsd/local_daemons.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "fedfsd/config.h"

namespace fedfs::daemon {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::string node_id, pid, export_root, state_dir, mountpoint;
};

std::string Serialize(const DaemonOptions& o) {
  std::ostringstream s;
  s << o.node_id << "\n" << ::getpid() << "\n" << o.export_root << "\n" << o.state_dir << "\n"
    << o.mountpoint << "\n";
  return s.str();
}

Status Clash(const Entry& e, const DaemonOptions& o) {
  struct Pair {
    const char* my_field;
    const std::string& mine;
    const char* their_field;
    const std::string& theirs;
  };
  const Pair pairs[] = {
      {"mountpoint", o.mountpoint, "export root", e.export_root},
      {"mountpoint", o.mountpoint, "state dir", e.state_dir},
      {"export_root", o.export_root, "mountpoint", e.mountpoint},
      {"state_dir", o.state_dir, "mountpoint", e.mountpoint},
  };
  for (const Pair& p : pairs) {
    const std::string how = PathOverlap(p.mine, p.theirs);
    if (how.empty()) continue;
    return Err(EEXIST, std::string(p.my_field) + " '" + p.mine + "' " + how + " the " +
                           p.their_field + " '" + p.theirs + "' of node " + e.node_id + " (pid " +
                           e.pid + ") running on this machine: keep them apart");
  }
  return Ok();
}

}  // namespace

Result<std::unique_ptr<LocalDaemons>> LocalDaemons::Register(const DaemonOptions& o,
                                                             const std::string& run_dir) {
  const std::string dir = run_dir + "/daemons";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Err(ec.value(), "cannot create " + dir + ": " + ec.message());
  const std::string path = dir + "/" + o.node_id + "." + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Err(errno, "cannot create " + path + ": " + std::strerror(errno));
  std::unique_ptr<LocalDaemons> self(new LocalDaemons(fd, path));
  if (::flock(fd, LOCK_EX) != 0) return Err(errno, "flock " + path);
  const std::string text = Serialize(o);
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return Err(EIO, "cannot write " + path);
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Err(errno, "cannot list " + dir);
  std::vector<std::string> others;
  while (dirent* de = ::readdir(d)) {
    const std::string name = de->d_name;
    if (name != "." && name != ".." && dir + "/" + name != path) others.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& other : others) {
    const int ofd = ::open(other.c_str(), O_RDONLY | O_CLOEXEC);
    if (ofd < 0) continue;  // gone meanwhile
    if (::flock(ofd, LOCK_SH | LOCK_NB) == 0) {
      ::unlink(other.c_str());  // nobody holds it: a dead daemon's
      ::close(ofd);
      continue;
    }
    std::ifstream in(other);
    Entry e;
    std::getline(in, e.node_id);
    std::getline(in, e.pid);
    std::getline(in, e.export_root);
    std::getline(in, e.state_dir);
    std::getline(in, e.mountpoint);
    ::close(ofd);
    if (e.mountpoint.empty()) continue;  // being written: its owner checks against us
    if (Status st = Clash(e, o); !st) return Err(st.error());
  }
  return self;
}

LocalDaemons::~LocalDaemons() {
  ::unlink(path_.c_str());
  ::close(fd_);
  // Leave no empty directory behind (fails harmlessly while others run).
  const fs::path dir = fs::path(path_).parent_path();
  ::rmdir(dir.c_str());
  ::rmdir(dir.parent_path().c_str());
}

}  // namespace fedfs::daemon
