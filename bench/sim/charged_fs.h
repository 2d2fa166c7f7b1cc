// ChargedNodeFs: the simulator's cost model of local file-system work. A
// NodeFs decorator (of a node's MemNodeFs export root) that charges `cost`
// of simulated time (SleepFor, common/cooperative.h) before each call made
// in a fiber -- the facade's own calls, the file service's on behalf of
// other nodes, the VD service's local listings -- and then forwards it.
// Without it a node's work on its own export root would take no time at
// all (SimOptions::local_op_us). A Read costs `read_cost` more (the disk
// behind the export root: SimOptions::disk_read_us; the model has no page
// cache, so every read reaches it) and is counted (reads(), read_bytes()).
// A call on the main context (setup) costs nothing and is not counted.
// Bench-only: the daemon's LocalNodeFs takes real time.
//
// It also tells an AttrObserver (the node's file service, SetAttrObserver)
// of the changes of regular files' data and attributes that LocalNodeFs
// tells of in the daemon -- writes, fallocate, setattr, opens with O_TRUNC
// -- after each succeeded, so that the file's node tells the other nodes
// caching it. (MemNodeFs tells no one; unlinks, renames, links and xattrs
// are not told here.)
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/cooperative.h"
#include "nodefs/node_fs.h"

namespace fedfs::bench {

class ChargedNodeFs final : public ns::NodeFs {
 public:
  // `inner` outlives this object.
  ChargedNodeFs(ns::NodeFs* inner, std::chrono::nanoseconds cost,
                std::chrono::nanoseconds read_cost = {})
      : inner_(inner), cost_(cost), read_cost_(read_cost) {}

  // Where changes are told (null: nowhere). Set before the node serves.
  void SetAttrObserver(ns::AttrObserver* o) { observer_ = o; }

  // Reads made in fibers (the facade's and those served for other nodes),
  // and the bytes they returned.
  uint64_t reads() const { return reads_; }
  uint64_t read_bytes() const { return read_bytes_; }

  const std::string& node_id() const override { return inner_->node_id(); }
  Result<struct stat> Stat(const ns::Cred& c, const std::string& path) override {
    Charge();
    return inner_->Stat(c, path);
  }
  Result<ns::WatchedStat> StatWatched(const ns::Cred& c, const std::string& path) override {
    Charge();
    return inner_->StatWatched(c, path);
  }
  Status Access(const ns::Cred& c, const std::string& path, int mode) override {
    Charge();
    return inner_->Access(c, path, mode);
  }
  Result<std::vector<ns::DirEntry>> ListDir(const ns::Cred& c, const std::string& path) override {
    Charge();
    return inner_->ListDir(c, path);
  }
  Result<struct stat> Mkdir(const ns::Cred& c, const std::string& path, mode_t mode) override {
    Charge();
    return inner_->Mkdir(c, path, mode);
  }
  Status MkdirParents(const std::string& path, const std::vector<DirTemplate>& t) override {
    Charge();
    return inner_->MkdirParents(path, t);
  }
  Status Rmdir(const ns::Cred& c, const std::string& path) override {
    Charge();
    return inner_->Rmdir(c, path);
  }
  Result<struct stat> Mknod(const ns::Cred& c, const std::string& path, mode_t mode,
                            dev_t rdev) override {
    Charge();
    return inner_->Mknod(c, path, mode, rdev);
  }
  Result<struct stat> Symlink(const ns::Cred& c, const std::string& target,
                              const std::string& path) override {
    Charge();
    return inner_->Symlink(c, target, path);
  }
  Result<std::string> Readlink(const ns::Cred& c, const std::string& path) override {
    Charge();
    return inner_->Readlink(c, path);
  }
  Status Unlink(const ns::Cred& c, const std::string& path) override {
    Charge();
    return inner_->Unlink(c, path);
  }
  Status Rename(const ns::Cred& c, const std::string& from, const std::string& to,
                unsigned flags) override {
    Charge();
    return inner_->Rename(c, from, to, flags);
  }
  Result<struct stat> Link(const ns::Cred& c, const std::string& existing,
                           const std::string& newpath) override {
    Charge();
    return inner_->Link(c, existing, newpath);
  }
  Result<struct stat> SetAttr(const ns::Cred& c, const std::string& path,
                              std::optional<ns::Handle> handle,
                              const ns::SetAttrRequest& req) override {
    Charge();
    auto st = inner_->SetAttr(c, path, handle, req);
    if (st) {
      Tell(*st, req.size ? ns::DataRange::From(static_cast<uint64_t>(*req.size))
                         : ns::DataRange::None());
    }
    return st;
  }
  Result<struct statvfs> StatFs() override {
    Charge();
    return inner_->StatFs();
  }
  Result<std::string> GetXattr(const ns::Cred& c, const std::string& path,
                               const std::string& name, size_t size, size_t* needed) override {
    Charge();
    return inner_->GetXattr(c, path, name, size, needed);
  }
  Result<std::string> GetXattrOf(const ns::Cred& c, ns::Handle h, const std::string& name,
                                 size_t size, size_t* needed) override {
    Charge();
    return inner_->GetXattrOf(c, h, name, size, needed);
  }
  Status SetXattr(const ns::Cred& c, const std::string& path, const std::string& name,
                  std::span<const std::byte> value, int flags) override {
    Charge();
    return inner_->SetXattr(c, path, name, value, flags);
  }
  Result<std::string> ListXattr(const ns::Cred& c, const std::string& path, size_t size,
                                size_t* needed) override {
    Charge();
    return inner_->ListXattr(c, path, size, needed);
  }
  Status RemoveXattr(const ns::Cred& c, const std::string& path,
                     const std::string& name) override {
    Charge();
    return inner_->RemoveXattr(c, path, name);
  }
  Result<ns::Opened> Open(const ns::Cred& c, const std::string& path, int flags) override {
    Charge();
    return Opening(inner_->Open(c, path, flags), flags);
  }
  Result<ns::Opened> Create(const ns::Cred& c, const std::string& path, int flags,
                            mode_t mode) override {
    Charge();
    return Opening(inner_->Create(c, path, flags, mode), flags);
  }
  Result<size_t> Read(ns::Handle h, uint64_t offset, std::span<std::byte> dst) override {
    Charge();
    if (SuspendableContext() == nullptr) return inner_->Read(h, offset, dst);
    if (read_cost_.count() > 0) SleepFor(read_cost_);
    auto n = inner_->Read(h, offset, dst);
    ++reads_;
    if (n) read_bytes_ += *n;
    return n;
  }
  using NodeFs::Write;
  Result<size_t> Write(ns::Handle h, uint64_t offset, std::span<const std::byte> src,
                       const ns::Writer& by) override {
    Charge();
    auto n = inner_->Write(h, offset, src, by);
    if (n) TellHandle(h, ns::DataRange{offset, src.size()});
    return n;
  }
  Status Flush(ns::Handle h, uint64_t lock_owner) override {
    Charge();
    return inner_->Flush(h, lock_owner);
  }
  Status Fsync(ns::Handle h, bool datasync) override {
    Charge();
    return inner_->Fsync(h, datasync);
  }
  Status Fallocate(ns::Handle h, int mode, uint64_t offset, uint64_t len) override {
    Charge();
    auto st = inner_->Fallocate(h, mode, offset, len);
    if (st) TellHandle(h, ns::DataRange::From(offset));
    return st;
  }
  Status Release(ns::Handle h) override {
    Charge();
    files_.erase(h);
    return inner_->Release(h);
  }
  Result<ns::LockRange> GetLk(ns::Handle h, uint64_t owner, const ns::LockRange& want) override {
    Charge();
    return inner_->GetLk(h, owner, want);
  }
  Status SetLk(ns::Handle h, uint64_t owner, const ns::LockRange& want) override {
    Charge();
    return inner_->SetLk(h, owner, want);
  }
  Status Flock(ns::Handle h, uint64_t owner, int op) override {
    Charge();
    return inner_->Flock(h, owner, op);
  }

 private:
  void Charge() const {
    if (cost_.count() > 0 && SuspendableContext() != nullptr) SleepFor(cost_);
  }
  ns::AttrObserver* Observer() const {
    return observer_ != nullptr && observer_->Interested() ? observer_ : nullptr;
  }
  void Tell(const struct stat& st, ns::DataRange data) const {
    if (ns::AttrObserver* o = Observer(); o != nullptr && S_ISREG(st.st_mode)) {
      o->AttrsChanged(st.st_dev, st.st_ino, data);
    }
  }
  void TellHandle(ns::Handle h, ns::DataRange data) const {
    if (auto it = files_.find(h); it != files_.end()) Tell(it->second, data);
  }
  // Keeps the file's identity for the handle's writes; tells of a truncation.
  Result<ns::Opened> Opening(Result<ns::Opened> o, int flags) {
    if (!o) return o;
    files_[o->handle] = o->st;
    if (flags & O_TRUNC) Tell(o->st, ns::DataRange::From(0));
    return o;
  }

  ns::NodeFs* inner_;
  const std::chrono::nanoseconds cost_;
  const std::chrono::nanoseconds read_cost_;
  ns::AttrObserver* observer_ = nullptr;
  std::map<ns::Handle, struct stat> files_;  // open handles' files (identity, type)
  uint64_t reads_ = 0;       // the simulation's one thread only
  uint64_t read_bytes_ = 0;
};

}  // namespace fedfs::bench
