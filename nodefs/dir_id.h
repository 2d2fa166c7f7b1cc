// A directory's identity across rename (docs/namespace.md, "Inode numbers"):
// the 64-bit id a virtual directory's st_ino is made from, the same in every
// mount and kept by rename(2), which keeps every copy's inode and extended
// attributes.
//
//  * A copy made by FedFS from a template (NodeFs::MkdirParents: the copy of
//    a directory on a node that lacked it) stores the id of the directory it
//    copies in the extended attribute kDirIdXattr, with its own local inode
//    number; only the daemon (CAP_SYS_ADMIN) can set `trusted.` names, and
//    the facade hides them (vfs/).
//  * Every other copy (the first one, made by mkdir, or one a local program
//    made) has the id DirIdOf(holder, local inode): nothing is stored.
//  * A stored id whose inode number is not the copy's own was copied along
//    with the directory (`cp -a`, `rsync -X`): it is ignored.
//  * A directory held by several nodes has the least id of its copies'
//    (vd/, dirmerge), which is the first copy's as long as the others were
//    made by FedFS.
//
// Header-only; any thread.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/hash.h"
#include "common/result.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

inline constexpr char kDirIdXattr[] = "trusted.fedfs.id";
inline constexpr std::string_view kFedfsXattrPrefix = "trusted.fedfs.";
inline constexpr size_t kDirIdXattrSize = 16;

// The id of a copy with nothing stored: a hash of its holder and its local
// inode number, never 0.
inline uint64_t DirIdOf(std::string_view node, uint64_t local_ino) {
  std::string key(node);
  key += ':';
  key += std::to_string(local_ino);
  const uint64_t h = StableHash(key);
  return h == 0 ? 1 : h;
}

// The value of kDirIdXattr: the id and the copy's own inode number, 8 bytes
// each, little endian.
inline std::string EncodeDirId(uint64_t id, uint64_t local_ino) {
  std::string v(kDirIdXattrSize, '\0');
  for (int i = 0; i < 8; ++i) {
    v[i] = static_cast<char>((id >> (8 * i)) & 0xff);
    v[8 + i] = static_cast<char>((local_ino >> (8 * i)) & 0xff);
  }
  return v;
}

// The id stored in `value` for the copy whose inode number is `local_ino`;
// 0 for anything else (wrong size, another copy's inode, a zero id).
inline uint64_t DecodeDirId(std::string_view value, uint64_t local_ino) {
  if (value.size() != kDirIdXattrSize) return 0;
  uint64_t id = 0, ino = 0;
  for (int i = 7; i >= 0; --i) {
    id = (id << 8) | static_cast<uint8_t>(value[i]);
    ino = (ino << 8) | static_cast<uint8_t>(value[8 + i]);
  }
  return ino == local_ino ? id : 0;
}

// A copy's id: the one stored (`stored`, 0 if none) or DirIdOf.
inline uint64_t CopyDirId(uint64_t stored, std::string_view node, uint64_t local_ino) {
  return stored != 0 ? stored : DirIdOf(node, local_ino);
}

// Of two ids, the one a directory keeps (0: none known).
inline uint64_t MergeDirId(uint64_t a, uint64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

// The id of the copy of directory `path` held by `node`, read through `fs`
// as root; `st` is its lstat there. Errors other than "nothing stored" are
// returned (a template must not carry a made-up id).
inline Result<uint64_t> CopyDirIdOn(NodeFs& fs, const std::string& node, const std::string& path,
                                    const struct stat& st) {
  size_t needed = 0;
  auto v = fs.GetXattr(Cred{}, path, kDirIdXattr, kDirIdXattrSize + 1, &needed);
  if (v) return CopyDirId(DecodeDirId(*v, st.st_ino), node, st.st_ino);
  const int e = v.error().code;
  if (e == ENODATA || e == ENOTSUP || e == ERANGE) return DirIdOf(node, st.st_ino);
  return Err(v.error());
}

}  // namespace fedfs::ns
