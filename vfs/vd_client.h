// VdClient: what the facade (vfs/vfs_impl.h) needs from the VD service, as
// blocking calls; node/vd_client.h adapts VdService, tests use fakes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"
#include "vd/vd.h"

namespace fedfs::ns {

using VdPtr = std::shared_ptr<const VirtualDirectory>;

// One change of a directory, as reported to its manager.
struct VdEdit {
  bool add = true;   // false: remove
  std::string name;  // real name on `node`
  uint8_t type = 0;  // DT_* (add)
  std::string node;
  uint64_t id = 0;   // a directory's id (add; nodefs/dir_id.h), 0 unknown
};

// What VfsImpl needs from the VD service, as blocking calls (node/
// vd_client.h adapts VdService with GetVdSync/UpdateVdSync; tests use fakes).
class VdClient {
 public:
  virtual ~VdClient() = default;
  // VD(path); ENOENT if no live node has `path` as a directory.
  virtual Result<VdPtr> Get(const std::string& path) = 0;
  // VD(path) from its manager, not from a cached copy.
  virtual Result<VdPtr> GetFresh(const std::string& path) { return Get(path); }
  // VD(path) for looking up `name` only: may be partial (VirtualDirectory::
  // partial: only that name's entry; holders and version as the whole).
  virtual Result<VdPtr> GetName(const std::string& path, const std::string& name) {
    (void)name;
    return Get(path);
  }
  // As GetName, but possibly from an out-of-date copy: for a decision the
  // manager makes again (a create's check before its claim).
  virtual Result<VdPtr> Peek(const std::string& path, const std::string& name) {
    return GetName(path, name);
  }
  // VD(path) for the directory's own attributes (holders, subdirs) only: may
  // be partial with no entry.
  Result<VdPtr> GetSummary(const std::string& path) { return GetName(path, std::string()); }
  // Reports that `node` added or removed the entry `name` of directory
  // `path` (kAdd/kRemove); `id`: a directory's (nodefs/dir_id.h), 0 unknown.
  virtual Status Add(const std::string& path, const std::string& name, uint8_t type,
                     const std::string& node, uint64_t id) = 0;
  virtual Status Remove(const std::string& path, const std::string& name,
                        const std::string& node) = 0;
  // Claims and locks are held by this node, whatever node the entry is (to
  // be) on (VdChange).
  // Reserves `name` in directory `path` before it is created: EEXIST if the
  // name exists; waits while another node holds it (so two nodes never both
  // create one name). Clients without managers accept.
  virtual Status Claim(const std::string& path, const std::string& name) {
    (void)path, (void)name;
    return Ok();
  }
  // Holds the existing `name` of directory `path` for an operation that
  // changes it on its holder, until that change is reported or Release
  // (VdChange::kLock); waits while another node holds it. Clients without
  // managers accept.
  virtual Status Lock(const std::string& path, const std::string& name) {
    (void)path, (void)name;
    return Ok();
  }
  // Lock(path, lock) and Claim(path, claim) (two names of one directory) in
  // one step, both or neither: a rename within one directory. The default
  // takes them one after the other (and releases the lock if the claim
  // fails); node/'s client (node/vd_client.h) makes one call to the manager.
  virtual Status LockAndClaim(const std::string& path, const std::string& lock,
                              const std::string& claim) {
    if (auto s = Lock(path, lock); !s) return s;
    Status c = Claim(path, claim);
    if (!c) Release(path, lock);
    return c;
  }
  // Reads visible `name` of directory `path` (as GetName answers it) and
  // holds it (as Lock) when it names an entry under its own real name, in
  // one step: `held` says whether it is held. Waits while another node
  // holds it. The default asks, locks, and asks again; node/'s client makes
  // one call to the manager (VdChange::kLockRead).
  struct NameRead {
    VdPtr part;
    bool held = false;
  };
  virtual Result<NameRead> LockRead(const std::string& path, const std::string& name) {
    for (int attempt = 0;; ++attempt) {
      auto first = GetName(path, name);
      if (!first) return Err(first.error());
      const VdEntry* e = (*first)->Find(name);
      if (e == nullptr || e->RealName() != name) return NameRead{std::move(*first), false};
      if (auto s = Lock(path, name); !s) return Err(s.error());
      auto again = GetName(path, name);
      if (!again) {
        Release(path, name);
        return Err(again.error());
      }
      const VdEntry* e2 = (*again)->Find(name);
      if (e2 != nullptr && e2->RealName() == name) return NameRead{std::move(*again), true};
      Release(path, name);
      if (e2 == nullptr || attempt == 3) return NameRead{std::move(*again), false};
    }
  }
  // Unlinks visible `name` of directory `path` as `cred` in one call to
  // its manager, which has the file's node unlink it and applies the
  // removal (VdChange::kUnlink, docs/namespace.md "Unlinks and renames in one call"):
  // `unlinked` with the name's entry before and the directory's attributes
  // at that node; or, not unlinked, the name as the manager read it (none:
  // no such name) with nothing held, for the caller to unlink by itself.
  // ENOSYS: not asked (the directory is served here, or no manager unlinks
  // for others); the caller unlinks by itself. The default: ENOSYS.
  struct Unlinked {
    VdPtr part;
    bool unlinked = false;
    std::optional<struct stat> parent;
  };
  virtual Result<Unlinked> Unlink(const std::string& path, const std::string& name,
                                  const Cred& cred) {
    (void)path, (void)name, (void)cred;
    return Err(ENOSYS, "no unlink in one call");
  }
  // Renames file `name` of directory `path` to the absent `to` as `cred`
  // (`flags` 0 or RENAME_NOREPLACE) in one call to its manager, likewise
  // (VdChange::kRename): `renamed` with the old name's entry before; not
  // renamed: the caller renames by itself. EEXIST: `to` exists now. ENOSYS:
  // not asked. The default: ENOSYS.
  struct Renamed {
    VdPtr part;
    bool renamed = false;
  };
  virtual Result<Renamed> Rename(const std::string& path, const std::string& name,
                                 const std::string& to, unsigned flags, const Cred& cred) {
    (void)path, (void)name, (void)to, (void)flags, (void)cred;
    return Err(ENOSYS, "no rename in one call");
  }
  // Ends a claim whose create failed, or a lock whose operation did not
  // report a change.
  virtual void Release(const std::string& path, const std::string& name) {
    (void)path, (void)name;
  }
  // Claim(path, name) and, where the manager can, the Add of its entry
  // (`type`, not a directory, on `node`) in the same call (VdChange::kAddNew,
  // docs/namespace.md "Creates in one round trip"): the claim's token (not
  // 0) when added -- then ended by Created with that token once the entry is
  // made, or by Remove(path, name, node) if it could not be -- 0 when only
  // claimed (ended as a Claim: Add after the entry is made, or Release).
  // The default claims only.
  virtual Result<uint64_t> AddNew(const std::string& path, const std::string& name, uint8_t type,
                                  const std::string& node) {
    (void)type, (void)node;
    if (auto s = Claim(path, name); !s) return Err(s.error());
    return uint64_t{0};
  }
  // The entry AddNew added (with claim `token`) is made: that claim ends,
  // and no later one of this node (without waiting for the manager where
  // the client can).
  virtual void Created(const std::string& path, const std::string& name, uint64_t token) {
    (void)token;
    Release(path, name);
  }
  // Several changes of directory `path` at once (a rename within it is seen
  // whole or not at all). The default applies them one by one.
  virtual Status Apply(const std::string& path, const std::vector<VdEdit>& edits) {
    for (const VdEdit& e : edits) {
      Status s = e.add ? Add(path, e.name, e.type, e.node, e.id) : Remove(path, e.name, e.node);
      if (!s) return s;
    }
    return Ok();
  }
  // Forgets every VD at or beneath `path` wherever it is kept (after a
  // directory moved or went away). Clients that keep no VDs do nothing.
  virtual Status DropSubtree(const std::string& path) {
    (void)path;
    return Ok();
  }
};

}  // namespace fedfs::ns
