#include "files/fs_wire.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/path.h"

namespace fedfs::ns::fswire {

namespace {

bool IsPathOp(fb::Op op) {
  switch (op) {
    case fb::Op::kStatFs:
    case fb::Op::kRead:
    case fb::Op::kWrite:
    case fb::Op::kFlush:
    case fb::Op::kFsync:
    case fb::Op::kFallocate:
    case fb::Op::kRelease:
    case fb::Op::kGetLk:
    case fb::Op::kSetLk:
    case fb::Op::kFlock:
    case fb::Op::kCoopEvict:
    case fb::Op::kCoopStore:
    case fb::Op::kCoopMoved:
      return false;
    default:
      return true;
  }
}

bool IsTwoPathOp(fb::Op op) { return op == fb::Op::kRename || op == fb::Op::kLink; }

bool HasNul(const flatbuffers::String* s) {
  return s != nullptr && std::memchr(s->data(), '\0', s->size()) != nullptr;
}

}  // namespace

Status CheckRequest(const fb::FsRequest* req) {
  if (req->version() != fswire::kVersion) {
    return Err(EPROTO, "unsupported fs wire version " + std::to_string(req->version()));
  }
  const fb::Op op = req->op();
  if (op == fb::Op::kInvalid || op > fb::Op::kStatMany) return Err(EPROTO, "unknown op");
  if (IsPathOp(op)) {
    if (req->path() == nullptr) return Err(EINVAL, "missing path");
    if (auto st = ValidateGlobalPath(req->path()->string_view()); !st) return st;
  }
  if (IsTwoPathOp(op)) {
    if (req->path2() == nullptr) return Err(EINVAL, "missing second path");
    if (auto st = ValidateGlobalPath(req->path2()->string_view()); !st) return st;
  }
  if (HasNul(req->target())) return Err(EINVAL, "NUL inside a symlink target or xattr name");
  if (req->releases() != nullptr && req->releases()->size() > kMaxReleases) {
    return Err(EPROTO, "more than " + std::to_string(kMaxReleases) + " releases in one request");
  }
  if (op == fb::Op::kStatMany) {
    if (req->names() == nullptr || req->names()->size() != 1 || req->length() > kMaxStatMany) {
      return Err(EPROTO, "a kStatMany names one entry and up to " + std::to_string(kMaxStatMany) +
                             " to follow it");
    }
    for (const flatbuffers::String* n : *req->names()) {
      if (n == nullptr) return Err(EINVAL, "a kStatMany name is missing");
      if (auto st = ValidateName(n->string_view()); !st) return st;
    }
  }
  // The verifier checks a vector of structs for 4-byte alignment only; a
  // builder aligns DirTemplate's (a uint64 field) to 8, so a request that
  // does not was crafted, and reading it would be a misaligned access.
  if (const auto* t = req->templates(); t != nullptr && t->size() > 0 &&
      reinterpret_cast<uintptr_t>(t->Data()) % alignof(fb::DirTemplate) != 0) {
    return Err(EPROTO, "misaligned directory templates");
  }
  return Ok();
}

fb::Stat ToWire(const struct stat& s) {
  return fb::Stat(s.st_dev, s.st_ino, s.st_mode, s.st_nlink, s.st_uid, s.st_gid, s.st_rdev,
                  s.st_size, s.st_blksize, s.st_blocks, s.st_atim.tv_sec, s.st_atim.tv_nsec,
                  s.st_mtim.tv_sec, s.st_mtim.tv_nsec, s.st_ctim.tv_sec, s.st_ctim.tv_nsec);
}

struct stat FromWire(const fb::Stat& w) {
  struct stat s {};
  s.st_dev = w.dev();
  s.st_ino = w.ino();
  s.st_mode = w.mode();
  s.st_nlink = w.nlink();
  s.st_uid = w.uid();
  s.st_gid = w.gid();
  s.st_rdev = w.rdev();
  s.st_size = w.size();
  s.st_blksize = w.blksize();
  s.st_blocks = w.blocks();
  s.st_atim = {w.atime_sec(), w.atime_nsec()};
  s.st_mtim = {w.mtime_sec(), w.mtime_nsec()};
  s.st_ctim = {w.ctime_sec(), w.ctime_nsec()};
  return s;
}

fb::StatVfs ToWire(const struct statvfs& s) {
  return fb::StatVfs(s.f_bsize, s.f_frsize, s.f_blocks, s.f_bfree, s.f_bavail, s.f_files,
                     s.f_ffree, s.f_favail, s.f_fsid, s.f_flag, s.f_namemax);
}

struct statvfs FromWire(const fb::StatVfs& w) {
  struct statvfs s {};
  s.f_bsize = w.bsize();
  s.f_frsize = w.frsize();
  s.f_blocks = w.blocks();
  s.f_bfree = w.bfree();
  s.f_bavail = w.bavail();
  s.f_files = w.files();
  s.f_ffree = w.ffree();
  s.f_favail = w.favail();
  s.f_fsid = w.fsid();
  s.f_flag = w.flag();
  s.f_namemax = w.namemax();
  return s;
}

flatbuffers::Offset<fb::Cred> ToWire(flatbuffers::FlatBufferBuilder& b, const Cred& c) {
  auto groups = c.groups.empty() ? 0 : b.CreateVector(c.groups);
  fb::CredBuilder cb(b);
  cb.add_uid(c.uid);
  cb.add_gid(c.gid);
  if (!groups.IsNull()) cb.add_groups(groups);
  cb.add_umask(c.umask);
  return cb.Finish();
}

Cred FromWire(const fb::Cred* c) {
  Cred out;
  if (c == nullptr) {
    out.uid = 65534;
    out.gid = 65534;
    return out;
  }
  out.uid = c->uid();
  out.gid = c->gid();
  out.umask = c->umask();
  if (c->groups()) out.groups.assign(c->groups()->begin(), c->groups()->end());
  return out;
}

std::vector<Handle> HandlesOf(const fb::FsAttrChanged& a) {
  std::vector<Handle> out;
  if (a.handles() == nullptr || a.handles()->size() == 0) return out;
  out.resize(a.handles()->size());
  std::memcpy(out.data(), a.handles()->Data(), out.size() * sizeof(Handle));
  return out;
}

std::vector<std::pair<Handle, Handle>> PinnedOf(const fb::FsAttrChanged& a) {
  std::vector<std::pair<Handle, Handle>> out;
  if (a.pinned_watches() == nullptr || a.pinned_handles() == nullptr) return out;
  const size_t n = std::min(a.pinned_watches()->size(), a.pinned_handles()->size());
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {  // copied: the buffer may be misaligned
    std::memcpy(&out[i].first, a.pinned_watches()->Data() + i * sizeof(Handle), sizeof(Handle));
    std::memcpy(&out[i].second, a.pinned_handles()->Data() + i * sizeof(Handle), sizeof(Handle));
  }
  return out;
}

flatbuffers::Offset<fb::CoopCopy> CoopCopyToWire(flatbuffers::FlatBufferBuilder& b,
                                                 uint64_t index, uint32_t length,
                                                 const std::string& addr,
                                                 const m2m::RegionDesc& data,
                                                 const m2m::RegionDesc& tags, uint32_t frame,
                                                 uint64_t tag) {
  auto u8 = [&](const m2m::Bytes& k) {
    return b.CreateVector(reinterpret_cast<const uint8_t*>(k.data()), k.size());
  };
  auto a = b.CreateString(addr);
  auto dk = u8(data.rkey);
  auto tk = u8(tags.rkey);
  fb::CoopCopyBuilder cb(b);
  cb.add_index(index);
  cb.add_length(length);
  cb.add_addr(a);
  cb.add_data_addr(data.addr);
  cb.add_data_length(data.length);
  cb.add_data_rkey(dk);
  cb.add_tags_addr(tags.addr);
  cb.add_tags_length(tags.length);
  cb.add_tags_rkey(tk);
  cb.add_frame(frame);
  cb.add_tag(tag);
  return cb.Finish();
}

NodeFs::CoopCopyAt CoopCopyFromWire(const fb::CoopCopy& c) {
  auto bytes = [](const flatbuffers::Vector<uint8_t>* v) {
    std::vector<std::byte> o;
    if (v != nullptr) {
      const auto* p = reinterpret_cast<const std::byte*>(v->data());
      o.assign(p, p + v->size());
    }
    return o;
  };
  NodeFs::CoopCopyAt a;
  a.index = c.index();
  a.length = c.length();
  a.addr = c.addr() != nullptr ? c.addr()->str() : std::string();
  a.data_addr = c.data_addr();
  a.data_length = c.data_length();
  a.data_rkey = bytes(c.data_rkey());
  a.tags_addr = c.tags_addr();
  a.tags_length = c.tags_length();
  a.tags_rkey = bytes(c.tags_rkey());
  a.frame = c.frame();
  a.tag = c.tag();
  return a;
}

std::vector<std::pair<uint32_t, uint64_t>> CoopFramesOf(const fb::FsRequest& r) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  if (r.coop_frames() == nullptr) return out;
  out.reserve(r.coop_frames()->size());
  const auto* p = reinterpret_cast<const uint8_t*>(r.coop_frames()->Data());
  for (size_t i = 0; i < r.coop_frames()->size(); ++i) {
    fb::CoopFrame f;
    std::memcpy(&f, p + i * sizeof(fb::CoopFrame), sizeof f);
    out.emplace_back(f.frame(), f.tag());
  }
  return out;
}

}  // namespace fedfs::ns::fswire
