// PathClient (bench/sim/path_client.h).
#include "bench/sim/path_client.h"

#include <fcntl.h>

#include "common/path.h"

namespace fedfs::bench {

std::string PathAnswer::ToString() const {
  std::string s = "err=" + std::to_string(err) + " type=0" + std::to_string(type >> 12);
  if (!listing.empty()) {
    s += " [";
    for (size_t i = 0; i < listing.size(); ++i) s += (i ? " " : "") + listing[i];
    s += "]";
  }
  return s;
}

PathAnswer PathClient::Failed(const Error& e) {
  PathAnswer a;
  a.err = e.code != 0 ? e.code : EIO;
  return a;
}

Result<uint64_t> PathClient::Walk(const std::string& path, std::vector<uint64_t>* held) {
  uint64_t ino = ns::kRootIno;
  if (path == "/") return ino;
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    const std::string name = path.substr(pos, end - pos);
    pos = end + 1;
    if (name.empty()) continue;
    auto e = vfs_->Lookup(cred_, ino, name);
    if (!e) return Err(e.error());
    if (e->ino == 0) return Err(ENOENT, path);  // a negative entry
    held->push_back(e->ino);
    ino = e->ino;
  }
  return ino;
}

void PathClient::Forget(std::vector<uint64_t>* held) {
  for (auto it = held->rbegin(); it != held->rend(); ++it) vfs_->Forget(*it, 1);
  held->clear();
}

PathAnswer PathClient::Create(uint64_t parent, const std::string& name) {
  auto r = vfs_->Create(cred_, parent, name, 0644, O_CREAT | O_EXCL | O_WRONLY);
  if (!r) return Failed(r.error());
  PathAnswer a;
  a.type = r->first.attr.st_mode & S_IFMT;
  if (auto s = vfs_->Release(r->second.fh); !s) a.err = s.error().code;
  vfs_->Forget(r->first.ino, 1);
  return a;
}

PathAnswer PathClient::Mkdir(uint64_t parent, const std::string& name) {
  auto r = vfs_->Mkdir(cred_, parent, name, 0755);
  if (!r) return Failed(r.error());
  PathAnswer a;
  a.type = r->attr.st_mode & S_IFMT;
  vfs_->Forget(r->ino, 1);
  return a;
}

PathAnswer PathClient::Lookup(uint64_t parent, const std::string& name) {
  auto e = vfs_->Lookup(cred_, parent, name);
  if (!e) return Failed(e.error());
  if (e->ino == 0) return Failed(Error{ENOENT, name});
  PathAnswer a;
  a.type = e->attr.st_mode & S_IFMT;
  vfs_->Forget(e->ino, 1);
  return a;
}

PathAnswer PathClient::Stat(uint64_t parent, const std::string& name) {
  auto e = vfs_->Lookup(cred_, parent, name);
  if (!e) return Failed(e.error());
  if (e->ino == 0) return Failed(Error{ENOENT, name});
  auto st = vfs_->GetAttr(cred_, e->ino, std::nullopt);
  vfs_->Forget(e->ino, 1);
  if (!st) return Failed(st.error());
  PathAnswer a;
  a.type = st->st_mode & S_IFMT;
  return a;
}

PathAnswer PathClient::Unlink(uint64_t parent, const std::string& name) {
  auto s = vfs_->Unlink(cred_, parent, name);
  return s ? PathAnswer{} : Failed(s.error());
}

PathAnswer PathClient::Rmdir(uint64_t parent, const std::string& name) {
  auto s = vfs_->Rmdir(cred_, parent, name);
  return s ? PathAnswer{} : Failed(s.error());
}

PathAnswer PathClient::ReadDir(uint64_t dir) {
  auto dh = vfs_->OpenDir(cred_, dir);
  if (!dh) return Failed(dh.error());
  PathAnswer a;
  uint64_t offset = 0;
  for (;;) {
    auto batch = vfs_->ReadDir(*dh, offset, 1024);
    if (!batch) {
      a = Failed(batch.error());
      break;
    }
    if (batch->empty()) break;
    for (const ns::DirEntryOut& e : *batch) {
      if (e.name != "." && e.name != "..") {
        a.listing.push_back(S_ISDIR(e.type) ? e.name + "/" : e.name);
      }
      offset = e.next_offset;
    }
  }
  vfs_->ReleaseDir(*dh).IgnoreError();  // the handle just opened: only an unknown one fails
  return a;
}

PathAnswer PathClient::Run(const PathOp& op) {
  std::vector<uint64_t> held;
  PathAnswer a;
  const std::string dir(ns::ParentPath(op.path));
  const std::string name(ns::BaseName(op.path));
  if (op.kind == "readdir") {
    auto ino = Walk(op.path, &held);
    a = ino ? ReadDir(*ino) : Failed(ino.error());
  } else if (op.kind == "rename") {
    auto from = Walk(dir, &held);
    auto to = from ? Walk(std::string(ns::ParentPath(op.path2)), &held) : from;
    if (!to) {
      a = Failed(to.error());
    } else if (auto s = vfs_->Rename(cred_, *from, name, *to, std::string(ns::BaseName(op.path2)), 0);
               !s) {
      a = Failed(s.error());
    }
  } else {
    auto parent = Walk(dir, &held);
    if (!parent) {
      a = Failed(parent.error());
    } else if (op.kind == "create") {
      a = Create(*parent, name);
    } else if (op.kind == "mkdir") {
      a = Mkdir(*parent, name);
    } else if (op.kind == "stat") {
      a = Stat(*parent, name);
    } else if (op.kind == "lookup") {
      a = Lookup(*parent, name);
    } else if (op.kind == "unlink") {
      a = Unlink(*parent, name);
    } else if (op.kind == "rmdir") {
      a = Rmdir(*parent, name);
    } else {
      a = Failed(Error{EINVAL, "unknown operation " + op.kind});
    }
  }
  Forget(&held);
  return a;
}

}  // namespace fedfs::bench
