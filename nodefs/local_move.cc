// LocalNodeFs's side of file moves (nodefs/move_support.h): the gate and the
// unnamed staging file.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "nodefs/local_node_fs.h"
#include "nodefs/local_util.h"

namespace fedfs::ns {

namespace {

std::string ReadSmallFile(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

using local_detail::OpenAt2;
using local_detail::SysErr;

Result<MoveGate::Pass> LocalNodeFs::PassFor(
    const std::function<std::optional<MoveGate::Key>()>& key_of, bool changes) {
  for (;;) {
    MoveGate::Pass pass = gate_.Enter();
    if (!gate_.Any()) return pass;
    std::optional<MoveGate::Key> key = key_of();
    if (!key) return pass;  // the operation fails by itself
    Status s = gate_.Check(*key, pass, changes);
    if (s) return pass;
    if (s.error().code != EAGAIN) return Err(s.error());
  }
}

std::optional<MoveGate::Key> LocalNodeFs::KeyOfPath(const std::string& path) {
  auto p = ResolveWhole(path, "stat");
  if (!p) return std::nullopt;
  struct stat st {};
  if (fstatat(p->dir, p->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  return MoveGate::Key{st.st_dev, st.st_ino};
}

Status LocalNodeFs::MovedCheck(const OpenFile& f) const {
  if (!gate_.Any()) return Ok();
  const MoveGate::State st = gate_.StateOf({f.dev, f.ino});
  if (st == MoveGate::State::kMoved) return Err(ESTALE, "file moved to another node");
  return Ok();
}

Result<MoveSupport::Frozen> LocalNodeFs::Freeze(dev_t dev, ino_t ino) {
  const InodeKey key{dev, ino};
  Frozen out;
  std::vector<std::shared_ptr<LockDesc>> descs;
  if (auto s = gate_.Freeze(key, [&] {
        std::lock_guard lock(mu_);
        auto it = inodes_.find(key);
        if (it != inodes_.end()) {
          out.handles = it->second.handles;
          for (const auto& [owner, d] : it->second.owners) descs.push_back(d);
        }
      });
      !s) {
    return Err(s.error());
  }
  // An owner's description stays after its locks went (until the file's last
  // handle here): count those that hold a lock now, as the kernel lists them
  // (lock changes wait at the gate meanwhile).
  for (const auto& d : descs) {
    const std::string info = ReadSmallFile("/proc/self/fdinfo/" + std::to_string(d->fd));
    if (info.find("\nlock:") != std::string::npos || info.starts_with("lock:")) {
      out.lock_owners++;
    }
  }
  return out;
}

void LocalNodeFs::Hold(dev_t dev, ino_t ino) { gate_.MarkHeld({dev, ino}); }

void LocalNodeFs::MarkMoved(dev_t dev, ino_t ino) { gate_.MarkMoved({dev, ino}); }

void LocalNodeFs::Thaw(dev_t dev, ino_t ino) {
  const InodeKey key{dev, ino};
  if (gate_.StateOf(key) == MoveGate::State::kMoved) {
    std::lock_guard lock(mu_);
    if (auto it = inodes_.find(key); it != inodes_.end() && it->second.handles > 0) {
      thawed_.insert(key);
      return;  // Release drops it with the last handle
    }
  }
  DropGate(key);
}

void LocalNodeFs::DropGate(const MoveGate::Key& k) {
  gate_.Thaw(k);
  int pin = -1;
  {
    std::lock_guard lock(mu_);
    thawed_.erase(k);
    if (auto it = pinned_.find(k); it != pinned_.end()) {
      pin = it->second;
      pinned_.erase(it);
    }
  }
  if (pin >= 0) ::close(pin);  // after the gate: the number may be given again now
}

Result<int> LocalNodeFs::CreateUnnamed(const std::string& dir) {
  auto p = ResolveWhole(dir, "create-unnamed");
  if (!p) return Err(p.error());
  int fd = OpenAt2(p->dir, p->name.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return SysErr("create-unnamed", dir);
  return fd;
}

Result<struct stat> LocalNodeFs::LinkUnnamed(int fd, const std::string& path) {
  Changing(path);
  auto p = ResolveParent(path, "link-unnamed");
  if (!p) return Err(p.error());
  if (linkat(fd, "", p->dir, p->name.c_str(), AT_EMPTY_PATH) != 0) {
    return SysErr("link-unnamed", path);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) return SysErr("link-unnamed", path);
  UniqueFd d(openat(p->dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0 || fsync(d.get()) != 0) return SysErr("link-unnamed: fsync dir", path);
  return st;
}

}  // namespace fedfs::ns
