// VfsImpl: the per-node Vfs (vfs/vfs.h) over virtual directories and node file systems.
//
// Ownership. VfsImpl owns the inode table (FUSE node id -> parent id, visible
// name, name in the holder's export root, type, location, cached st_ino,
// lookup count, generation), the open-file and open-directory tables, and the
// RemoteNodeFs objects it creates on demand (one per peer, through
// VfsDeps::make_remote). It does not own the local NodeFs, the VD client or
// the cluster view source; they outlive it.
//
// Paths are never stored whole: an inode's global path is rebuilt from its parent
// links, so a rename moves exactly one table entry and every descendant follows.
// Directories hold no location (they are the union of the same path on every
// node); every other inode has exactly one holder node.
//
// What each operation does: docs/namespace.md ("The FUSE mount"). In short: names
// are resolved through VD(P) (VdClient), attributes and data come from the holder's
// NodeFs, new entries go to the node the placement function chooses, and every
// change to a directory is reported to its manager (VdClient::Update) once made on
// the node; a report that fails is logged and fails nothing (dirmerge rebuilds).
//
// Threads: every method may block (remote calls with deadlines) and is called
// from FUSE worker threads; thread-safe. Lock order: mu_ (inode table) before
// files_mu_ before remotes_mu_; no lock is held across a NodeFs or VdClient
// call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cluster/cluster.h"
#include "coopcache/block_cache.h"
#include "coopcache/hints.h"
#include "coopcache/peer_fetch.h"
#include "coopcache/streams.h"
#include "nodefs/dir_id.h"
#include "nodefs/node_fs.h"
#include "vd/vd.h"
#include "vd/kernel_cache.h"
#include "vfs/inode_table.h"
#include "vfs/page_drops.h"
#include "vfs/vd_client.h"
#include "vfs/vfs.h"

namespace fedfs::ns {


// Multi-node directory operations (dirops/dir_ops.h), when wired.
class DirOpsClient {
 public:
  virtual ~DirOpsClient() = default;
  // Renames directory `from` to `to` on every node in `holders` (journaled;
  // also reports the VD changes).
  virtual Status RenameDir(const Cred& c, const std::string& from, const std::string& to,
                           unsigned flags, std::vector<std::string> holders) = 0;
  // Removes directory `path` from every node in `holders` (journaled; also
  // reports the VD changes).
  virtual Status RemoveDir(const Cred& c, const std::string& path,
                           std::vector<std::string> holders) = 0;
  // Renames file `from` on `from_node` to `to` there over `replaced` on
  // `to_node` (journaled: one of the two is at the name after a crash;
  // the caller reports the VD changes).
  virtual Status ReplaceFile(const Cred& c, const std::string& from, const std::string& from_node,
                             const std::string& to, const std::string& replaced,
                             const std::string& to_node) = 0;
  // True when RenameDir/RemoveDir go ahead while members are dead, leaving
  // records of what they must apply (dirops/dir_ops.h, "Dead nodes"): then
  // every directory rename and rmdir goes through them while one is.
  virtual bool RecordsDeadMembers() const { return false; }
};

struct VfsOptions {
  // Seconds the kernel may cache names and attributes. 0 (default) keeps the
  // consistency contract across nodes (docs/namespace.md, "Consistency
  // contract"); more trades it for fewer FUSE requests.
  double entry_timeout = 0;
  double attr_timeout = 0;
  // With a kernel that takes invalidations (KernelCache::Coherent()), these
  // apply instead when larger (docs/namespace.md, "Kernel caches"):
  // names, exact since every change invalidates them before it is
  // acknowledged; attributes of directories (changed through another node:
  // at most this old); attributes of files held on this node (exact for
  // changes through FedFS; changes made directly in the export root are
  // reported by the autonomy watcher, and are otherwise at most this old).
  // Attributes of files held on other nodes: while their node tells this
  // one of their changes (a handle open here with Opened::attr_callbacks, or
  // a watch: a getattr's or a create's), the last, as a bound should a
  // callback be lost; otherwise never cached.
  double coherent_entry_timeout = 60;
  double coherent_dir_attr_timeout = 1;
  double coherent_file_attr_timeout = 1;
  double coherent_remote_open_attr_timeout = 1;
  // This node's tag (1..65534, unique in the federation): the high 16 bits
  // of the st_ino of files it holds.
  uint16_t node_tag = 1;
  // Entries returned by one ReadDir call at most.
  size_t max_readdir_batch = 1024;
  // The kernel keeps the pages of a file held on another node across opens
  // (FileOut::keep_cache) while that node has told this one of every change
  // since they were read; the changes' ranges are dropped as they are told
  // (RemoteAttrsChanged). Needs a KernelCache whose InvalidateData drops
  // pages. docs/coopcache.md, "Kernel page cache".
  bool keep_remote_pages = false;
  uint64_t stream_after = uint64_t{4} << 20;  // coopcache/streams.h (`after`); 0: off
  // Deferred opens (vfs_deferred.cc): a read-only open, without O_TRUNC, of
  // a file held on another node that watches it for this one (attributes
  // exact) is answered without asking that node; the file is opened there
  // at the handle's first use that needs it, expecting the same file.
  bool deferred_open = false;
  // Room (docs/migration.md, "On a full disk"), with a mover (SetMover): a
  // write that its file's node answers ENOSPC or EDQUOT moves the file, if
  // it has one link and at most `max_size` bytes, to the live node with the
  // most free bytes, and is written there (retried for up to `max_wait`
  // while another writer's move of it runs); a create that its node answers
  // so, or on this node while it has less than `min_free` bytes free, is
  // made on the node with the most free bytes instead.
  struct Room {
    bool enabled = true;
    uint64_t max_size = uint64_t{1} << 30;
    std::chrono::milliseconds max_wait{30000};
    uint64_t min_free = uint64_t{16} << 20;
  } on_full;
  // Called after each read or write through this mount of a file held on
  // this node: its path and the bytes (the access trigger of file moves,
  // migration/access.h; other nodes' are FileServiceOptions::on_access).
  // Optional; must not block.
  std::function<void(const std::string& path, uint64_t bytes)> on_local_access;
};

struct VfsDeps {
  const ClusterViewSource* cluster = nullptr;  // required
  NodeFs* local = nullptr;                     // required: this node's export root
  VdClient* vds = nullptr;                     // required
  DirOpsClient* dir_ops = nullptr;             // optional (nullptr: single-node only)
  // Creates the NodeFs of a peer reachable at `addr`. Called at most once per
  // node id while it succeeds. Optional: without it, remote files are EHOSTDOWN.
  std::function<std::shared_ptr<NodeFs>(const std::string& node, const std::string& addr)>
      make_remote;
  // The node that stores a new entry at global path `path`. Optional: the
  // default is this node. Returns a live node id ("" = this node), or the
  // error the create fails with (EHOSTDOWN: a fixed node that is not alive).
  std::function<Result<std::string>(const ClusterView& view, const std::string& path, bool is_dir)>
      place;
  // The tag of another node (st_ino high bits); optional: default is derived
  // from StableHash(node id) (docs/namespace.md, "Inode numbers").
  std::function<uint16_t(const std::string& node)> tag_of;
  // This node's cache of other nodes' file data (docs/coopcache.md);
  // optional (null: reads of remote files always ask their node).
  coop::BlockCache* cache = nullptr;
  // Reads of blocks from other nodes' caches (null: none; needs cache).
  coop::PeerFetch* peers = nullptr;
  // Where this node's forwarded blocks went (null: none; needs peers).
  coop::Hints* hints = nullptr;
};

// A copy a file's node named (NodeFs::CoopCopyAt), as this node's cache
// reads it (blocks of `block` bytes).
inline coop::PeerCopy PeerCopyOf(const NodeFs::CoopCopyAt& c, uint64_t block) {
  return coop::PeerCopy{c.addr,
                        m2m::RegionDesc{c.data_addr, c.data_length, c.data_rkey},
                        m2m::RegionDesc{c.tags_addr, c.tags_length, c.tags_rkey},
                        block,
                        c.frame,
                        c.tag,
                        c.length};
}

class VfsImpl final : public Vfs {
 public:
  VfsImpl(VfsOptions options, VfsDeps deps);
  ~VfsImpl() override;

  Result<EntryOut> Lookup(const Cred& c, uint64_t parent, const std::string& name) override;
  void Forget(uint64_t ino, uint64_t nlookup) override;
  double AttrTimeout(uint64_t ino, const struct stat& st) const override;
  Result<struct stat> GetAttr(const Cred& c, uint64_t ino, std::optional<uint64_t> fh) override;
  Result<struct stat> SetAttr(const Cred& c, uint64_t ino, std::optional<uint64_t> fh,
                              const SetAttrRequest& req) override;
  Result<std::string> Readlink(const Cred& c, uint64_t ino) override;
  Result<EntryOut> Mknod(const Cred& c, uint64_t parent, const std::string& name, mode_t mode,
                         dev_t rdev) override;
  Result<EntryOut> Mkdir(const Cred& c, uint64_t parent, const std::string& name,
                         mode_t mode) override;
  Status Unlink(const Cred& c, uint64_t parent, const std::string& name) override;
  Status Rmdir(const Cred& c, uint64_t parent, const std::string& name) override;
  Result<EntryOut> Symlink(const Cred& c, const std::string& target, uint64_t parent,
                           const std::string& name) override;
  Status Rename(const Cred& c, uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned flags) override;
  Result<EntryOut> Link(const Cred& c, uint64_t ino, uint64_t new_parent,
                        const std::string& new_name) override;

  Result<FileOut> Open(const Cred& c, uint64_t ino, int flags) override;
  Result<std::pair<EntryOut, FileOut>> Create(const Cred& c, uint64_t parent,
                                              const std::string& name, mode_t mode,
                                              int flags) override;
  Result<size_t> Read(uint64_t fh, uint64_t offset, std::span<std::byte> dst) override;
  Result<size_t> Write(uint64_t fh, uint64_t offset, std::span<const std::byte> src,
                       const Writer& by) override;
  Status Flush(uint64_t fh, uint64_t lock_owner) override;
  Status Fsync(uint64_t fh, bool datasync) override;
  Status Release(uint64_t fh) override;
  Status Fallocate(uint64_t fh, int mode, uint64_t offset, uint64_t len) override;

  Result<uint64_t> OpenDir(const Cred& c, uint64_t ino) override;
  Result<std::vector<DirEntryOut>> ReadDir(uint64_t dh, uint64_t offset, size_t max) override;
  Status ReleaseDir(uint64_t dh) override;

  Result<struct statvfs> StatFs() override;

  Result<std::string> GetXattr(const Cred& c, uint64_t ino, const std::string& name, size_t size,
                               size_t* needed) override;
  Status SetXattr(const Cred& c, uint64_t ino, const std::string& name,
                  std::span<const std::byte> value, int flags) override;
  Result<std::string> ListXattr(const Cred& c, uint64_t ino, size_t size,
                                size_t* needed) override;
  Status RemoveXattr(const Cred& c, uint64_t ino, const std::string& name) override;

  Result<LockRange> GetLk(uint64_t fh, uint64_t owner, const LockRange& want) override;
  Status SetLk(uint64_t fh, uint64_t owner, const LockRange& want, bool wait) override;
  Status Flock(uint64_t fh, uint64_t owner, int op) override;

  // --- Introspection (fedfsctl, tests). ---

  // The holder(s) of global path `path`: the holders of a directory, the one
  // node of anything else. ENOENT if no such entry.
  Result<std::vector<std::string>> Where(const std::string& path);
  // The entries of directory `path` as the directory table has them (its
  // VD). ENOENT, ENOTDIR as a lookup answers.
  Result<std::vector<VdEntry>> List(const std::string& path);
  // The NodeFs of `node` (this node's or a peer's, created on demand);
  // nullptr for a dead or unknown node. Valid while this object lives.
  NodeFs* NodeFsFor(const std::string& node);
  // Wires the multi-node directory operations (before serving).
  void SetDirOps(DirOpsClient* d) { deps_.dir_ops = d; }
  // Moves file `path` from `holder` to node `to` (migration/); the mover of
  // files for room (VfsOptions::on_full). Set before serving, or null.
  using MoveFn = std::function<Status(const std::string& holder, const std::string& path,
                                      const std::string& to)>;
  void SetMover(MoveFn move) { mover_ = std::move(move); }
  struct Room {
    uint64_t writes = 0;   // writes written where their file moved for room
    uint64_t creates = 0;  // creates made elsewhere than chosen, for room
  };
  Room RoomStats() const;
  // Wires the kernel's caches (after mounting; nullptr: none). Names and
  // attributes are handed out cacheable only while it is Coherent().
  void SetKernelCache(KernelCache* k) { kernel_.store(k, std::memory_order_release); }
  // Another node changed the file or directory at global path `path` (real
  // names) held here, through this node's file service, or a local program
  // did: the kernel's cached attributes of it, and a file's pages, are
  // dropped (may block: KernelCache::InvalidateData).
  void InvalidateAttrsOf(const std::string& path);
  // Node `node` told that the files this node has open there as `handles`
  // changed (FsAttrChanged), their data within `data`: the kernel's cached
  // attributes and pages of that range, and this node's cached blocks of
  // them, are dropped. May block on the kernel's page locks
  // (KernelCache::InvalidateData): not from the transport's progress context.
  void RemoteAttrsChanged(const std::string& node, const std::vector<Handle>& handles,
                          DataRange data = {}, bool ended = false);
  // What this node caches of node `node`'s files may be stale (FsCallbacks
  // ::Lost): the kernel's attributes and pages and this node's blocks of
  // each go, and no open keeps pages from before; `untold`: the handles and
  // watches `node` gave are told of no more (their files are read anew).
  void RemoteSessionLost(const std::string& node, bool untold);
  // Node `node` opened files this node watches before their names went,
  // as these (watch, handle) pairs (files/file_service.h, "Deferred
  // opens"): the deferred handles of each adopt it. Answers those not
  // taken, to be released (ReleaseUnadopted) once the callback is answered.
  std::vector<Handle> RemotePinned(const std::string& node,
                                   const std::vector<std::pair<Handle, Handle>>& pinned);
  void ReleaseUnadopted(const std::string& node, const std::vector<Handle>& handles);
  struct DeferredStats {
    uint64_t opened = 0;    // opens answered without asking
    uint64_t used = 0;      // of those, opened at their node later
    uint64_t adopted = 0;   // handed over by their node (name gone)
    uint64_t stale = 0;     // found another file or none: ESTALE
  };
  DeferredStats deferred_stats() const;

 private:
  double CoherentAttrTimeout(mode_t type, const std::string& node, nlink_t nlink) const;
  // An open file of `ino` is told of (OpenFile::told). Under files_mu_.
  bool ToldLocked(uint64_t ino) const;
  void DropWatchLocked(uint64_t ino);  // files_mu_ held
  // mu_ held: `ino` is watched by `node` under `watch`, unless a callback came
  // since callbacks_taken_ was `taken` (it may have been this watch's, told
  // before the watch was known here) or the inode is gone. True if kept.
  bool WatchLocked(uint64_t ino, const std::string& node, Handle watch, uint64_t taken);
  uint64_t CallbacksTaken() const;
  // A lookup's StatWatched of `real_name` in `dir_path` on `node` (a remote
  // regular file): from attributes fetched along with an earlier lookup's
  // if there are such, else asked, along with the regular files after it in
  // `node`'s listing when lookups there keep asking `node`
  // (vfs_prefetch.cc). *taken: callbacks_taken_ for WatchLocked.
  Result<WatchedStat> StatForLookup(const Cred& c, const std::string& dir_path,
                                    const std::string& real_name, const std::string& node,
                                    NodeFs& fs, uint64_t* taken);
  // A file on `node` may be watched for this node's kernel caches: they are
  // coherent and the node is another.
  bool Watchable(const std::string& node) const;
  class NameLocks;
  class RenamingAway;
  // Whether inode `ino` no longer has `path` (a rename here moved it since
  // `path` was resolved).
  bool MovedSince(uint64_t ino, const std::string& path);
  Status RmdirOnce(const Cred& c, uint64_t parent, const std::string& name);

 public:
  // The global path of a known inode (ENOENT if unknown or unlinked).
  Result<std::string> PathOf(uint64_t ino) const;
  // Inodes in the table (root included).
  size_t InodeCount() const;
  // Free bytes (f_bavail * f_frsize) of every live node that answered,
  // refreshed at most once a second (for the most-free placement policy),
  // or now (`fresh`).
  std::map<std::string, uint64_t> FreeBytes(bool fresh = false);

  // The xattr that names a file's holder node(s) (comma-separated).
  static constexpr const char* kLocationXattr = "user.fedfs.location";

 private:
  using Inode = InodeTable::Inode;
  struct OpenFile {
    std::shared_ptr<NodeFs> fs;
    Handle handle = 0;
    uint64_t ino = 0;
    bool told = false;  // its node tells of its changes (Opened::attr_callbacks)
    bool dirty = false;  // written through (Flush has something to do)
    bool direct = false;  // FileOut::direct_io: written past the kernel's pages
    int flags = 0;        // as opened (a handle opened again elsewhere: Reopened)
    // Deferred (vfs_deferred.cc): not opened at its node yet (`handle` 0);
    // answered under `watch` of session `session` (NodeFs::SessionCount),
    // opened at first use as `cred`, expecting the file whose inode number
    // at its node ends in `expect` (48 bits).
    bool deferred = false;
    Handle watch = 0;
    uint64_t session = 0;
    uint64_t expect = 0;
    Cred cred;
  };
  struct DirHandle {
    uint64_t ino = 0;
    std::string path;
    bool fresh = true;  // the snapshot was taken by OpenDir and not yet read
    // Members that could not say whether the caller may read their directory
    // (Unasked): their names are left out of the snapshots.
    std::set<std::string> unasked;
    // "." and ".." first; plus fields empty. Shared, not copied, by each
    // ReadDir (a copy per batch made listing quadratic in the entries).
    std::shared_ptr<const std::vector<DirEntryOut>> entries;
  };
  // A resolved inode: its path (global, real names) and identity.
  struct Resolved {
    std::string path;
    mode_t type = 0;
    std::string node;
    uint64_t st_ino = 0;
  };
  // A looked-up child: what the table needs to insert it.
  struct Child {
    std::string name, real_name;
    mode_t type = 0;
    std::string node;
    struct stat st {};
    bool cacheable = true;  // false: from a VD no change would invalidate
    // A remote file's node tells of its changes under this name (StatWatched);
    // `taken`: callbacks_taken_ before it was asked (see WatchLocked).
    std::optional<Handle> watch;
    uint64_t taken = 0;
    uint64_t changes = 0;  // local_changes_ before it was asked
  };

  Result<Resolved> Resolve(uint64_t ino) const;
  Result<Resolved> ResolveDir(uint64_t ino) const;

  // The NodeFs of `node` (local or remote, created on demand); EHOSTDOWN for a
  // dead or unknown node.
  Result<std::shared_ptr<NodeFs>> FsOf(const std::string& node);
  uint16_t TagOf(const std::string& node) const;
  uint64_t FileIno(const std::string& node, uint64_t local_ino) const;
  // A directory's st_ino: from its id (nodefs/dir_id.h), or, with none known
  // (0), from its path (the root's).
  static uint64_t DirIno(uint64_t id, const std::string& path);
  static uint64_t DirIno(const std::string& path) { return DirIno(0, path); }
  // The st_ino of directory inode `ino`'s parent (its own for the root).
  uint64_t ParentStIno(uint64_t ino, const std::string& path) const;

  // Attributes of directory `path` from its VD: first holder's lstat with
  // nlink = 2 + subdirectories and st_ino `st_ino`.
  Result<struct stat> DirAttr(const Cred& c, const std::string& path, const VdPtr& vd,
                              uint64_t st_ino);
  // Looks up `name` in the VD of `dir_path` and stats it.
  // *absent (optional) is set when the answer is ENOENT because a complete
  // VD(dir_path) (one with every live node's listing) has no such name.
  Result<Child> LookupChild(const Cred& c, const std::string& dir_path, const std::string& name,
                            bool* absent = nullptr);
  Result<Child> ChildFromEntry(const Cred& c, const std::string& dir_path, const VdEntry& e);
  // Inserts (or finds) the child in the table, +1 lookup; fills an EntryOut.
  // `names_epoch`: NamesEpoch() when the request began; if the kernel's
  // names were dropped since, the entry goes out uncacheable.
  EntryOut Remember(uint64_t parent, const Child& child, uint64_t names_epoch);
  uint64_t NamesEpoch() const;
  // A request in directory `dir` may hand the kernel its name `name`: said
  // before it reads the directory (KernelCache::NamesFrom).
  void NamesFrom(const std::string& dir, const std::string& name) const;
  // Removes (parent, name) from the name index (the inode lives on for its
  // remaining lookups/handles).
  void DetachName(uint64_t parent, const std::string& name);
  // While a member of the federation is known dead (directory rmdir and
  // rename, vfs_names.cc): EHOSTDOWN naming `what`, unless the journaled
  // operations record what dead members must apply (then every such
  // operation goes through them: DeadMembers()).
  Status NoDeadMember(const std::string& what) const;
  bool DeadMembers() const;
  // Drops the VDs at or beneath `path` everywhere (after a directory moved).
  void ForgetSubtreeVds(const std::string& path);
  // InodeTable::EraseUnused, and the watches of what it erased dropped.
  void MaybeEraseLocked(uint64_t ino);
  static struct stat ReplacedAttr(const Inode& n);
  std::optional<struct stat> LookupAttr(uint64_t ino);
  // Opened with these flags, the kernel must write the handle directly.
  static bool AppendOnly(int flags);

  // What a new entry's caller still owes its directory's manager.
  enum class NewEntry {
    kClaimed,   // the name is claimed: ReportAdd once made (ReleaseNew if not)
    kAdded,     // claimed and added (VdClient::AddNew): Created once made
    kReported,  // nothing: the entry is reported (MakeNew)
  };
  struct NewName {
    NewEntry owed = NewEntry::kClaimed;
    uint64_t token = 0;  // kAdded: the claim's (VdClient::Created)
  };
  // Placement + missing parents on the chosen node, and the claim of the
  // name there (VdClient::Claim; with `add_type`, not 0, VdClient::AddNew of
  // an entry of that type, saying which in `*added`); returns the node. The
  // caller releases the claim if its create fails (ReleaseNew; Remove if
  // added).
  Result<std::string> PlaceNew(const Cred& c, const std::string& dir_path, const VdPtr& dir_vd,
                               const std::string& path, bool is_dir, uint8_t add_type = 0,
                               NewName* added = nullptr);
  void ReleaseNew(const std::string& dir_path, const std::string& name);
  // The claim of `name` in `dir_path` for an entry on `node`, with the entry
  // itself where the manager can when `add_type` is not 0 (VdClient::AddNew).
  Result<NewName> ClaimNew(const std::string& dir_path, const std::string& name, uint8_t add_type,
                           const std::string& node);
  // An entry that could not be made: its claim ends (ReleaseNew), or the
  // entry added with it is removed, which ends it too.
  void AbandonNew(const std::string& dir_path, const std::string& name, const std::string& node,
                  const NewName& owed);
  // What a made entry still owes its directory's manager (`owed`, from
  // MakeNew): the end of its claim (VdClient::Created), or its kAdd.
  void ReportNew(const std::string& dir_path, const std::string& name, uint8_t type,
                 const std::string& node, uint64_t id, const NewName& owed);
  // Room (vfs_room.cc): the live node other than `except` with the most free
  // bytes, at least `need` ("" if none); whether this node has less than
  // on_full.min_free free (a statvfs at most every 100 ms: it is asked on
  // every create here); a write that `full` (ENOSPC/EDQUOT) refused,
  // written where the mover put its file, or `full`.
  static bool NoRoom(int code) { return code == ENOSPC || code == EDQUOT; }
  std::string RoomyNode(const std::string& except, uint64_t need);
  bool LowOnRoom();
  Result<size_t> WriteForRoom(uint64_t fh, uint64_t offset, std::span<const std::byte> src,
                              const Writer& by, Error full);
  // PlaceNew, then make(shared_ptr<NodeFs>, path) on the chosen node; a failed make
  // releases the claim (removes the entry if added). The node and what make
  // returned; `*owed` (not null with `add_type`) what the caller still owes.
  template <class T, class Make>
  Result<std::pair<std::string, T>> MakeNew(const Cred& c, const std::string& dir_path,
                                            const VdPtr& dir_vd, const std::string& name,
                                            bool is_dir, Make make, uint8_t add_type = 0,
                                            NewName* owed = nullptr);
  // SetXattr and RemoveXattr: EPERM for kLocationXattr; else change(NodeFs&,
  // path) -> Status on the holder of a file, or on every holder of a
  // directory in VD order: the first holder's error is the answer, the
  // others' are ignored; a holder with no NodeFs (FsOf) fails the call.
  template <class Change>
  Status ChangeXattr(uint64_t ino, const std::string& name, Change change);
  // The create family (Mknod, Mkdir, Symlink): `name` checked, `parent`
  // resolved, EEXIST if VD(parent) has it, MakeNew (placement, claim,
  // make(shared_ptr<NodeFs>, path) -> Result<struct stat>), the new entry
  // reported and remembered. `type`: S_IFDIR (placed and numbered as a
  // directory), another S_IF* type, or 0 for the type make returned.
  template <class Make>
  Result<EntryOut> MakeEntry(const Cred& c, uint64_t parent, const std::string& name, mode_t type,
                             Make make);
  void AwaitVd(const std::string& dir, const std::string& name,
               const std::function<bool(const VdEntry*)>& settled);
  bool ReportEdits(const std::string& dir, const std::vector<VdEdit>& edits);
  // Whether `path` was being renamed away by this node; if so, waits until
  // that rename ended (the table names the inode anew) and says true.
  bool RenamedAway(const std::string& path);
  // `hold_first`: both names are held before they are read (a retry, see
  // the .cc).
  Status RenameOnce(const Cred& c, uint64_t parent, const std::string& name,
                    uint64_t new_parent, const std::string& new_name, unsigned flags,
                    bool hold_first);
  // `first`: the first try (may look at a stale copy, see the .cc).
  Result<std::pair<EntryOut, FileOut>> CreateOnce(const Cred& c, uint64_t parent,
                                                  const std::string& name, mode_t mode,
                                                  int flags, bool first);
  // Makes sure `node` has directory `dir_path` (and its ancestors), with the
  // attributes of the existing directories; reports created ones to the VDs.
  Status EnsureDirOn(const Cred& c, const std::string& node, const std::string& dir_path,
                     const VdPtr& dir_vd);
  // `id`: a directory's (nodefs/dir_id.h).
  void ReportAdd(const std::string& dir, const std::string& name, uint8_t type,
                 const std::string& node, uint64_t id = 0);
  bool ReportRemove(const std::string& dir, const std::string& name, const std::string& node);

  Result<OpenFile> FileOf(uint64_t fh) const;
  // The file of handle `fh` moved to another node (migration/): its node
  // answered ESTALE to an operation through `stale`. Opens it again where
  // its path is now (VD from the manager), as the daemon (permission was
  // checked at the open), with the handle's flags less O_CREAT, O_EXCL and
  // O_TRUNC; the handle uses the new one from now on, the old one is
  // released. ESTALE (the original answer) when the path is not held
  // elsewhere now (vfs_moved.cc).
  Result<OpenFile> Reopened(uint64_t fh, const OpenFile& stale);
  // Deferred opens, each described in vfs_deferred.cc; *Locked: files_mu_
  // held. deferred_: (node, watch) -> fh of the deferred handles; shared_:
  // remote handles several OpenFiles use -> how many (files_mu_).
  std::optional<FileOut> DeferredOpen(const Cred& c, uint64_t ino, int flags,
                                      const std::shared_ptr<NodeFs>& fs, const std::string& node);
  Result<OpenFile> Materialized(uint64_t fh, const OpenFile& at);
  void OpenDeferredOf(uint64_t parent, const std::string& name);
  void ForgetDeferredLocked(const OpenFile& f, uint64_t fh);
  bool UnshareLocked(const std::string& node, Handle h);
  std::multimap<std::pair<std::string, Handle>, uint64_t> deferred_;
  std::map<std::pair<std::string, Handle>, int> shared_;
  std::atomic<uint64_t> deferred_opened_{0}, deferred_used_{0}, deferred_adopted_{0},
      deferred_stale_{0};
  // The path inode `ino` had when another file (for Reopened: the moved
  // file itself, found at its new node) took its name (vfs_moved.cc).
  Result<std::string> FormerPathOf(uint64_t ino) const;
  // `op(const OpenFile&)` on handle `fh`; again on the handle opened again
  // (Reopened) when its node answered ESTALE: the file moved (up to
  // kMaxReopens times in one operation: it may move on meanwhile).
  static constexpr int kMaxReopens = 8;
  template <class Op>
  auto WithFile(uint64_t fh, Op op) -> decltype(op(std::declval<const OpenFile&>())) {
    auto f = FileOf(fh);
    if (!f) return Err(f.error());
    OpenFile at = *f;
    if (at.deferred) {
      auto g = Materialized(fh, at);
      if (!g && g.error().code != ESTALE) return Err(g.error());
      if (g) at = *g;
    }
    decltype(op(at)) r = Err(ESTALE, "no longer the file opened");
    if (!at.deferred) r = op(at);
    for (int i = 0; i < kMaxReopens && !r && r.error().code == ESTALE; ++i) {
      auto g = Reopened(fh, at);
      if (!g) return r;
      at = *g;
      r = op(at);
    }
    return r;
  }
  // The file-data cache (vfs_cache.cc; docs/coopcache.md, "What runs
  // today"). A read through a told handle of a remote file with one link.
  Result<size_t> CachedRead(const OpenFile& f, uint64_t offset, std::span<std::byte> dst);
  // A miss of blocks first..last of f (fetched under `generation`) with
  // cooperation: from other nodes' caches where the file's node says they
  // are, else from the file's node; the bytes of [first * block, + n) land
  // in `into`, and the blocks in this node's cache. eof: the file ends
  // within them.
  struct Filled {
    size_t n = 0;
    bool eof = false;
  };
  Result<Filled> CoopMiss(const OpenFile& f, uint64_t first, uint64_t last, uint64_t generation,
                          std::byte* into);
  // Block `index` of f, which this node forwarded, read from where it went
  // (coop::Hints) into this node's cache; false: no usable hint.
  bool HintedFill(const OpenFile& f, uint64_t index);
  bool OneLink(uint64_t ino) const;
  // VfsOptions::on_local_access, for a read or write of `bytes` through `f`
  // when its file is held here.
  void CountLocal(const OpenFile& f, uint64_t bytes);  // a regular file with one link (mu_)
  // The bytes `data` of `ino` changed (this node changed them: its node
  // tells other sessions, not this one; or its node told it): its cached
  // blocks holding them go, the whole file's for a range to the end.
  void DataChanged(uint64_t ino, DataRange data = {});
  // DataChanged when it goes out of scope: after the change, so that a read
  // that fetched the old bytes meanwhile cannot keep them.
  struct DataChange {
    VfsImpl& vfs;
    uint64_t ino;
    DataRange data{};
    ~DataChange() { vfs.DataChanged(ino, data); }
  };
  // The node and its session the blocks of each cached file were read in:
  // blocks of another are dropped (a node the file moved to was never told
  // what this one caches; a new session may have missed changes). Not the
  // membership epoch: a passing suspicion says nothing of what the file's
  // node told. Guarded by cache_mu_ (a leaf).
  struct CachedIn {
    std::string node;
    uint64_t session = 0;
    bool operator==(const CachedIn&) const = default;
  };
  CachedIn CachedInOf(const OpenFile& f) const {
    return CachedIn{f.fs->node_id(), f.fs->SessionCount()};
  }
  std::mutex cache_mu_;
  std::unordered_map<uint64_t, CachedIn> cached_in_;

  void MarkDirty(uint64_t fh);   // OpenFile::dirty, under files_mu_
  void NoteLocks(uint64_t ino);  // lock_inos_, under files_mu_
  // An open handle of inode `ino` (open-unlinked files), if any.
  std::optional<uint64_t> AnyFileHandleOf(uint64_t ino) const;
  Result<OpenFile> AnyFileOf(uint64_t ino) const;
  // Adds an open file; returns its fh. `keep_pages`, when given: whether
  // the kernel may keep the pages it has of the file (Open's keep_cache).
  uint64_t AddFile(OpenFile f, bool* keep_pages = nullptr);
  // Files held elsewhere whose pages the kernel may keep across opens: told
  // of every change since, in this session with their node and membership
  // epoch (VfsOptions::keep_remote_pages). Guarded by files_mu_.
  std::unordered_map<uint64_t, CachedIn> pages_;
  // Watches told of once (no longer in watched_) that their node still
  // keeps (the callback did not say `ended`): the changes it tells of them
  // still reach the kernel's pages. (node, watch) -> ino and back. Guarded
  // by files_mu_.
  std::map<std::pair<std::string, Handle>, uint64_t> page_watches_;
  std::unordered_multimap<uint64_t, std::pair<std::string, Handle>> page_watch_of_;
  void DropPageWatchesLocked(uint64_t ino);
  void ErasePageWatchLocked(const std::pair<std::string, Handle>& key);
  // The node of remote file `ino` tells this one of its changes: a told
  // handle, a watch, or a watch told of once and still kept.
  bool PagesToldLocked(uint64_t ino) const {
    return ToldLocked(ino) || watch_of_.contains(ino) || page_watch_of_.contains(ino);
  }
  uint64_t GlobalOwner(uint64_t owner) const;
  // The listing of `vd`: ".", "..", then its entries but those held only by
  // nodes in `left_out`.
  std::vector<DirEntryOut> Snapshot(const std::string& path, uint64_t ino, const VdPtr& vd,
                                    uint64_t parent_st_ino,
                                    const std::set<std::string>& left_out) const;
  // Whether `c` may list directory `path` (docs/namespace.md, "The FUSE
  // mount"): read permission on every member (vd.holders), each checked by
  // its node as it sees the caller (root squash). EACCES (EPERM) from any
  // refuses the listing; the members that could not answer (dead, timed
  // out, their directory gone) are returned, to be left out of it.
  Result<std::set<std::string>> Unasked(const Cred& c, const std::string& path,
                                        const VirtualDirectory& vd);

  const VfsOptions options_;
  VfsDeps deps_;
  coop::Streams streams_;  // reads by file handle (vfs_files.cc, Read)
  std::atomic<KernelCache*> kernel_{nullptr};

  mutable std::mutex mu_;
  InodeTable table_;  // guarded by mu_
  // Paths (real names) this node is renaming away: from before the holder's
  // rename until the table moves the name. A getattr of an inode by such a
  // path that finds it gone waits for the move (RenamedAway). Guarded by mu_.
  std::multiset<std::string> renaming_;
  std::condition_variable renamed_;

  mutable std::mutex files_mu_;  // after mu_
  std::unordered_map<uint64_t, OpenFile> files_;  // guarded by files_mu_
  std::unordered_multimap<uint64_t, uint64_t> files_by_ino_;  // ino -> fh, guarded by files_mu_
  // Inodes locked (SetLk, Flock) through a handle still open: a close of
  // any handle of them must release the closer's locks (Flush). Guarded by
  // files_mu_.
  std::unordered_set<uint64_t> lock_inos_;
  // Open files whose node tells of their changes: (node, handle) -> ino.
  std::map<std::pair<std::string, Handle>, uint64_t> told_;  // guarded by files_mu_
  // Remote files watched through GetAttr (NodeFs::StatWatched) and not told
  // of since: (node, watch) -> ino and back. Guarded by files_mu_.
  std::map<std::pair<std::string, Handle>, uint64_t> watched_;
  std::unordered_map<uint64_t, std::pair<std::string, Handle>> watch_of_;
  uint64_t callbacks_taken_ = 0;  // RemoteAttrsChanged calls; guarded by files_mu_
  // Attributes of remote files fetched along with a lookup's, for the
  // lookups that come next (vfs_prefetch.cc): by global path, with the
  // watch their node keeps them exact by, and back. Guarded by files_mu_.
  struct Prefetched {
    std::string node;
    Handle watch = 0;
    struct stat st {};
    uint64_t changes = 0;  // local_changes_ when asked
    std::chrono::steady_clock::time_point at;
  };
  std::unordered_map<std::string, Prefetched> prefetched_;
  std::map<std::pair<std::string, Handle>, std::string> prefetch_of_;
  std::deque<std::string> prefetch_order_;  // oldest first (may name gone ones)
  // The directory and node of the last lookups that asked a node, and how
  // many in a row did (a scan: then their neighbours are asked along).
  std::string scan_dir_, scan_node_;
  int scan_misses_ = 0;
  bool along_served_ = true;  // a lookup used names asked along since the last such ask
  int along_skip_ = 0;        // misses still to ask for one name only
  int along_skip_next_ = 0;   // the skip after the next ask that serves none
  void ErasePrefetchedLocked(const std::pair<std::string, Handle>& key);  // files_mu_ held
  void ErasePrefetchedPathLocked(const std::string& path);               // files_mu_ held
  // Operations of this node that may change a remote file's attributes
  // (its node does not tell the session that made the change): a lookup's
  // attributes are no answer for a getattr after one (Inode::lookup_attr).
  std::atomic<uint64_t> local_changes_{0};
  void Changing() { local_changes_.fetch_add(1, std::memory_order_acq_rel); }
  // Before an unlink: Changing(), unless the name is a watched file with one link (vfs_prefetch.cc).
  void UnlinkChanging(uint64_t parent, const std::string& dir_path, const std::string& name);

  // Directory attributes answered a moment ago (GetAttr of a directory), or
  // left by this node's create on the directory's first holder (the
  // create's reply, Opened::parent): the getattr the kernel sends after each
  // of its own changes in a directory (it drops its copy then) is answered
  // again from them, within kDirAttrReuse, while this node changed no
  // directory since (dir_changes_ as `changes`: every change of a name or
  // of attributes bumps it when it begins and when it ends). Changes
  // through other nodes show as late as the kernel's own 1 s copy would
  // show them, plus kDirAttrReuse (docs/namespace.md, "Kernel caches").
  static constexpr std::chrono::milliseconds kDirAttrReuse{100};
  struct KeptDirAttr {
    struct stat st {};
    std::chrono::steady_clock::time_point at{};
    uint64_t changes = 0;
  };
  std::mutex dir_attrs_mu_;  // leaf lock
  std::unordered_map<uint64_t, KeptDirAttr> dir_attrs_;  // dir ino -> kept; guarded by dir_attrs_mu_
  std::atomic<uint64_t> dir_changes_{0};
  uint64_t DirChanges() const { return dir_changes_.load(std::memory_order_acquire); }
  // Bumps dir_changes_ when made and when destroyed (a change's span).
  class DirChange {
   public:
    explicit DirChange(VfsImpl& v) : v_(v) { v_.dir_changes_.fetch_add(1, std::memory_order_acq_rel); }
    ~DirChange() { v_.dir_changes_.fetch_add(1, std::memory_order_acq_rel); }
    DirChange(const DirChange&) = delete;
    DirChange& operator=(const DirChange&) = delete;

   private:
    VfsImpl& v_;
  };
  std::optional<struct stat> KeptDirAttrOf(uint64_t ino);
  // Keeps `st` for directory `ino` if dir_changes_ is still `changes`.
  void KeepDirAttr(uint64_t ino, const struct stat& st, uint64_t changes);
  // What a create or unlink of a regular file on `node` leaves for its
  // directory: made elsewhere than on the directory's first holder (whose
  // copy gives the directory its attributes; a node that did not hold the
  // directory got it just now and may come first), what was kept stays
  // true (`carry`); made there, `parent` (its reply's attributes of the
  // directory, if any) is the directory now (`st`). Read from `vd` before
  // it is given up.
  struct DirAfter {
    bool carry = false;
    std::optional<struct stat> st;
  };
  DirAfter DirAfterFileChange(uint64_t dir_st_ino, const VirtualDirectory& vd,
                              const std::string& node,
                              const std::optional<struct stat>& parent) const;
  // Applies `a` to directory `ino` once the change's DirChange ended, if
  // nothing else changed meanwhile (`before`: dir_changes_ before it began).
  void KeepDirAfter(uint64_t ino, const DirAfter& a, uint64_t before);
  std::unordered_map<uint64_t, std::shared_ptr<DirHandle>> dirs_;  // guarded by files_mu_
  uint64_t next_fh_ = 1;  // guarded by files_mu_

  MoveFn mover_;  // set before serving (SetMover)
  std::atomic<uint64_t> room_writes_{0}, room_creates_{0};
  // LowOnRoom's last answer and when it was found (steady ns; 0: never).
  std::atomic<bool> low_on_room_{false};
  std::atomic<int64_t> low_on_room_at_{0};
  std::mutex free_mu_;  // leaf lock; not held across calls
  std::map<std::string, uint64_t> free_bytes_;  // guarded by free_mu_
  std::chrono::steady_clock::time_point free_at_{};  // guarded by free_mu_

  mutable std::mutex remotes_mu_;  // after files_mu_
  std::map<std::string, std::shared_ptr<NodeFs>> remotes_;  // guarded by remotes_mu_

  // The kernel's attributes of `ino` dropped, again if it had no such inode
  // yet while a reply that made it may be on its way (Inode::attrs_unsure).
  // May sleep: never from the transport's progress context.
  void DropKernelAttrs(KernelCache& k, uint64_t ino);
  bool AttrsUnsure(uint64_t ino) const;

  // Drops of the kernel's pages put off while this node's own writes of
  // them are in flight (vfs/page_drops.h). Last: its thread stops first.
  void DropPages(uint64_t ino, DataRange range);
  PageDrops page_drops_{[this](uint64_t ino, DataRange r) {
    if (KernelCache* k = kernel_.load(std::memory_order_acquire)) {
      k->InvalidateData(ino, r.offset, r.length);
    }
  }};
};

}  // namespace fedfs::ns
