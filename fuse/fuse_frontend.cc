#define FUSE_USE_VERSION 312
#include "fuse/fuse_frontend.h"

#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/thread_name.h"
#include "fuse/caller_groups.h"
#include "fuse/fuse_internal.h"
#include "fuse/uring_channel.h"
#include "fuse/worker_loop.h"

namespace fedfs::fuse {
namespace {

using ns::Cred;
using ns::EntryOut;

}  // namespace

// The session's userdata: the Vfs, and the kernel-cache notifier that OpInit
// enables when the kernel can take its invalidations.
struct FuseMount::Ctx {
  ns::Vfs* vfs = nullptr;
  KernelNotifier* notifier = nullptr;
  // Set before the loop starts; the first request after INIT (whose reply
  // fixed the read-ahead window) applies it.
  std::string read_ahead_file;
  unsigned read_ahead_kb = 0;
  std::atomic<bool> read_ahead_pending{false};
  // Non-root callers' supplementary groups (fuse/caller_groups.h).
  CallerGroups groups{std::chrono::seconds(1), 4096};
  // Unmount has begun: lock waits give up (ENOLCK) so their workers end.
  std::atomic<bool> stopping{false};
  // Set before the loop starts when the kernel may take requests over
  // io_uring; replies go through it (fuse_session_custom_io).
  UringChannel* uring = nullptr;
  // The INIT handshake, which libfuse 3.14 cannot ask for everything in:
  // FrontendWritev adds FUSE_HANDLE_KILLPRIV_V2 to its reply, and hands it to
  // the rings (UringChannel::InitReply), when the kernel offered them.
  std::atomic<uint64_t> init_unique{0};       // the INIT request, until its reply
  std::atomic<bool> killpriv_offered{false};
  std::atomic<bool> uring_offered{false};
  std::atomic<bool> killpriv{false};          // asked for: see WriteKillsSetId
};

namespace {

void ApplyReadAhead(FuseMount::Ctx* ctx) {
  if (!ctx->read_ahead_pending.exchange(false)) return;
  std::ofstream out(ctx->read_ahead_file);
  out << ctx->read_ahead_kb;
  out.flush();
  if (!out) {
    Log()->warn("cannot set the read-ahead window ({} KiB) in {}", ctx->read_ahead_kb,
                ctx->read_ahead_file);
  }
}

ns::Vfs* VfsOf(fuse_req_t req) {
  auto* ctx = static_cast<FuseMount::Ctx*>(fuse_req_userdata(req));
  if (ctx->read_ahead_pending.load(std::memory_order_relaxed)) ApplyReadAhead(ctx);
  return ctx->vfs;
}

Cred CredOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Cred c;
  c.uid = ctx->uid;
  c.gid = ctx->gid;
  c.umask = ctx->umask;
  // Supplementary groups decide nothing for uid 0 (capabilities do), and
  // reading them costs an open and read of /proc/<pid>/task/<tid>/status:
  // kept per calling thread (fuse/caller_groups.h).
  if (c.uid == 0) return c;
  auto* mount = static_cast<FuseMount::Ctx*>(fuse_req_userdata(req));
  c.groups = mount->groups.Get(ctx->pid, c.uid, c.gid, CallerGroups::Clock::now(),
                               [req]() -> std::optional<CallerGroups::Groups> {
                                 gid_t groups[64];
                                 int n = fuse_req_getgroups(req, 64, groups);
                                 if (n < 0) return std::nullopt;
                                 if (n <= 64) return CallerGroups::Groups(groups, groups + n);
                                 CallerGroups::Groups more(static_cast<size_t>(n));
                                 n = fuse_req_getgroups(req, n, more.data());
                                 if (n < 0) return std::nullopt;
                                 more.resize(std::min<size_t>(n, more.size()));
                                 return more;
                               });
  return c;
}

// The errno the caller sees. A node that cannot be reached answers
// EHOSTDOWN whatever the transport said (docs/errors.md); ETIMEDOUT stays.
int Errno(const Error& e) {
  switch (e.code) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ESHUTDOWN:
    case EHOSTUNREACH:
    case ENOTCONN:
      return EHOSTDOWN;
    default:
      return e.code > 0 ? e.code : EIO;
  }
}

void ReplyErr(fuse_req_t req, const Error& e) {
  if (e.code == ENOENT) {
    SPDLOG_LOGGER_DEBUG(Log(), "{}", e.ToString());
  } else {
    SPDLOG_LOGGER_DEBUG(Log(), "request failed: {}", e.ToString());
  }
  fuse_reply_err(req, Errno(e));
}

fuse_entry_param EntryParam(const EntryOut& e) {
  fuse_entry_param p{};
  p.ino = e.ino;
  p.generation = e.generation;
  p.attr = e.attr;
  p.attr_timeout = e.attr_timeout;
  p.entry_timeout = e.entry_timeout;
  return p;
}

// Runs `body`, turning bad_alloc into ENOMEM. `body` replies itself; an
// exception can only come before its reply (replies do not throw).
template <class F>
void Guard(fuse_req_t req, F&& body) {
  try {
    body();
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
  }
}

void ReplyEntry(fuse_req_t req, const Result<EntryOut>& r) {
  if (!r) return ReplyErr(req, r.error());
  const fuse_entry_param p = EntryParam(*r);
  if (fuse_reply_entry(req, &p) != 0 && r->ino != 0) {
    // The kernel did not take the reference (interrupted request).
    VfsOf(req)->Forget(r->ino, 1);
  }
}

void ReplyStatus(fuse_req_t req, const Status& s) {
  if (!s) return ReplyErr(req, s.error());
  fuse_reply_err(req, 0);
}


// Backoff of blocking lock requests: 1 ms doubling to 100 ms.
template <class F>
Status RetryUntilGranted(fuse_req_t req, F&& attempt) {
  auto delay = std::chrono::milliseconds(1);
  for (;;) {
    Status s = attempt();
    if (s || (s.error().code != EAGAIN && s.error().code != EWOULDBLOCK &&
              s.error().code != EACCES)) {
      return s;
    }
    if (fuse_req_interrupted(req)) return Err(EINTR, "lock wait interrupted");
    // Not EINTR: the kernel turns it into a restart, which without a signal
    // reaches the caller as errno 512.
    if (static_cast<FuseMount::Ctx*>(fuse_req_userdata(req))->stopping.load()) {
      return Err(ENOLCK, "lock wait ended: unmounting");
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(100));
  }
}

// ---------------------------------------------------------------- ops

void OpInit(void* userdata, fuse_conn_info* conn) {
  // FUSE_NOTIFY_INC_EPOCH came with protocol 7.44 (Linux 6.16).
  const bool epoch = conn->proto_major > 7 || (conn->proto_major == 7 && conn->proto_minor >= 44);
  static_cast<FuseMount::Ctx*>(userdata)->notifier->Enable(epoch);
  // The umask reaches us in the request and is applied by the node that
  // creates the file (namespace/cred.h).
  if (conn->capable & FUSE_CAP_DONT_MASK) conn->want |= FUSE_CAP_DONT_MASK;
  // Locks are kept by the file's node (coherent across nodes).
  if (conn->capable & FUSE_CAP_POSIX_LOCKS) conn->want |= FUSE_CAP_POSIX_LOCKS;
  if (conn->capable & FUSE_CAP_FLOCK_LOCKS) conn->want |= FUSE_CAP_FLOCK_LOCKS;
  // Data may change on another node: no writeback caching.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // No readdirplus: the kernel stamps the names a READDIRPLUS reply carries
  // with its epoch when the reply arrives, not when the request was sent
  // (unlike LOOKUP's), so a name dropped by an invalidation that came in
  // between would stay cached (docs/namespace.md, "Kernel caches").
  conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
  // Requests of up to 1 MiB (libfuse derives max_pages from max_write), so a
  // larger read-ahead window (FuseOptions::read_ahead_kb) means fewer reads.
  conn->max_write = std::max(conn->max_write, 1u << 20);
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, [&] { ReplyEntry(req, VfsOf(req)->Lookup(CredOf(req), parent, name)); });
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  VfsOf(req)->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) VfsOf(req)->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, [&] {
    std::optional<uint64_t> fh;
    if (fi) fh = fi->fh;
    auto st = VfsOf(req)->GetAttr(CredOf(req), ino, fh);
    if (!st) return ReplyErr(req, st.error());
    fuse_reply_attr(req, &*st, VfsOf(req)->AttrTimeout(ino, *st));
  });
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
               fuse_file_info* fi) {
  Guard(req, [&] {
    ns::SetAttrRequest r;
    if (to_set & FUSE_SET_ATTR_MODE) r.mode = attr->st_mode & 07777;
    if (to_set & FUSE_SET_ATTR_UID) r.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) r.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) r.size = attr->st_size;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
      r.atime = timespec{0, UTIME_NOW};
    } else if (to_set & FUSE_SET_ATTR_ATIME) {
      r.atime = attr->st_atim;
    }
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
      r.mtime = timespec{0, UTIME_NOW};
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
      r.mtime = attr->st_mtim;
    }
    std::optional<uint64_t> fh;
    if (fi) fh = fi->fh;
    auto st = VfsOf(req)->SetAttr(CredOf(req), ino, fh, r);
    if (!st) return ReplyErr(req, st.error());
    fuse_reply_attr(req, &*st, VfsOf(req)->AttrTimeout(ino, *st));
  });
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Guard(req, [&] {
    auto t = VfsOf(req)->Readlink(CredOf(req), ino);
    if (!t) return ReplyErr(req, t.error());
    fuse_reply_readlink(req, t->c_str());
  });
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Guard(req, [&] { ReplyEntry(req, VfsOf(req)->Mknod(CredOf(req), parent, name, mode, rdev)); });
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Guard(req, [&] { ReplyEntry(req, VfsOf(req)->Mkdir(CredOf(req), parent, name, mode)); });
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, [&] { ReplyStatus(req, VfsOf(req)->Unlink(CredOf(req), parent, name)); });
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, [&] { ReplyStatus(req, VfsOf(req)->Rmdir(CredOf(req), parent, name)); });
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Guard(req, [&] { ReplyEntry(req, VfsOf(req)->Symlink(CredOf(req), link, parent, name)); });
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  Guard(req, [&] {
    ReplyStatus(req, VfsOf(req)->Rename(CredOf(req), parent, name, newparent, newname, flags));
  });
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Guard(req, [&] { ReplyEntry(req, VfsOf(req)->Link(CredOf(req), ino, newparent, newname)); });
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, [&] {
    auto f = VfsOf(req)->Open(CredOf(req), ino, fi->flags);
    if (!f) return ReplyErr(req, f.error());
    fi->fh = f->fh;
    fi->direct_io = f->direct_io;
    fi->keep_cache = f->keep_cache;
    if (fuse_reply_open(req, fi) != 0) (void)VfsOf(req)->Release(f->fh);
  });
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  Guard(req, [&] {
    auto r = VfsOf(req)->Create(CredOf(req), parent, name, mode, fi->flags);
    if (!r) return ReplyErr(req, r.error());
    fi->fh = r->second.fh;
    fi->direct_io = r->second.direct_io;
    fi->keep_cache = r->second.keep_cache;
    const fuse_entry_param p = EntryParam(r->first);
    if (fuse_reply_create(req, &p, fi) != 0) {
      (void)VfsOf(req)->Release(r->second.fh);
      VfsOf(req)->Forget(r->first.ino, 1);
    }
  });
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Guard(req, [&] {
    // Served from a ring: read straight into the reply's buffer.
    std::span<std::byte> dst = UringChannel::ReplyBuffer();
    std::vector<std::byte> own;
    if (dst.size() >= size) {
      dst = dst.first(size);
    } else {
      own.resize(size);
      dst = own;
    }
    auto n = VfsOf(req)->Read(fi->fh, static_cast<uint64_t>(off), dst);
    if (!n) return ReplyErr(req, n.error());
    fuse_reply_buf(req, reinterpret_cast<const char*>(dst.data()), *n);
  });
}

// Under FUSE_HANDLE_KILLPRIV_V2 the kernel does not clear a file's set-ID bits
// and capabilities before a write (asking for security.capability with a
// GETXATTR before every write); the server does. The local write clears the
// capabilities itself, as any write on the file's node does, and the kernel
// flags the writes that must clear set-ID bits (FUSE_WRITE_KILL_SUIDGID: the
// writer lacks CAP_FSETID). libfuse 3.14 does not pass write_flags on, but
// the request's fuse_write_in lies right before the data in the buffer that
// libfuse parsed (from /dev/fuse or a ring alike); it is checked against
// what libfuse did pass.
bool WriteKillsSetId(fuse_req_t req, const char* data, size_t size, off_t off,
                     const fuse_file_info* fi) {
  auto* ctx = static_cast<FuseMount::Ctx*>(fuse_req_userdata(req));
  if (!ctx->killpriv.load(std::memory_order_relaxed)) return false;
  fuse_write_in in;
  std::memcpy(&in, data - sizeof in, sizeof in);
  if (in.size != size || in.offset != static_cast<uint64_t>(off) || in.fh != fi->fh) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) Log()->error("a WRITE request's header is not where it should be");
    return true;  // clear what a writer without CAP_FSETID would
  }
  return (in.write_flags & FUSE_WRITE_KILL_SUIDGID) != 0;
}

void OpWrite(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  Guard(req, [&] {
    // The file's node clears the set-ID bits (node_fs.h, Writer), with the
    // credentials it applies to this caller (root squash).
    const ns::Writer by{WriteKillsSetId(req, data, size, off, fi), CredOf(req)};
    auto n = VfsOf(req)->Write(fi->fh, static_cast<uint64_t>(off),
                               {reinterpret_cast<const std::byte*>(data), size}, by);
    if (!n) return ReplyErr(req, n.error());
    fuse_reply_write(req, *n);
  });
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Guard(req, [&] { ReplyStatus(req, VfsOf(req)->Flush(fi->fh, fi->lock_owner)); });
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Guard(req, [&] {
    ns::Vfs* vfs = VfsOf(req);
    // The last close of an open file drops its flock lock (flock(2)); the
    // kernel says so with flock_release and the lock's owner.
    if (fi->flock_release) (void)vfs->Flock(fi->fh, fi->lock_owner, LOCK_UN);
    ReplyStatus(req, vfs->Release(fi->fh));
  });
}

void OpFsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  Guard(req, [&] { ReplyStatus(req, VfsOf(req)->Fsync(fi->fh, datasync != 0)); });
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, [&] {
    auto dh = VfsOf(req)->OpenDir(CredOf(req), ino);
    if (!dh) return ReplyErr(req, dh.error());
    fi->fh = *dh;
    if (fuse_reply_open(req, fi) != 0) (void)VfsOf(req)->ReleaseDir(*dh);
  });
}

void OpReaddir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Guard(req, [&] {
    // An upper bound of the entries that fit (smallest record per entry).
    const size_t max = size / 32 + 1;
    auto entries = VfsOf(req)->ReadDir(fi->fh, static_cast<uint64_t>(off), max);
    if (!entries) return ReplyErr(req, entries.error());
    std::vector<char> buf(size);
    size_t used = 0;
    for (const ns::DirEntryOut& e : *entries) {
      struct stat st {};
      st.st_ino = e.ino;
      st.st_mode = e.type;
      const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(),
                                            &st, static_cast<off_t>(e.next_offset));
      if (need > size - used) break;
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  });
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Guard(req, [&] { ReplyStatus(req, VfsOf(req)->ReleaseDir(fi->fh)); });
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  // Directory changes are applied by system calls on the holders' local
  // file systems; nothing is buffered here.
  fuse_reply_err(req, 0);
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  Guard(req, [&] {
    auto st = VfsOf(req)->StatFs();
    if (!st) return ReplyErr(req, st.error());
    fuse_reply_statfs(req, &*st);
  });
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                size_t size, int flags) {
  Guard(req, [&] {
    ReplyStatus(req, VfsOf(req)->SetXattr(CredOf(req), ino, name,
                                          {reinterpret_cast<const std::byte*>(value), size},
                                          flags));
  });
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Guard(req, [&] {
    size_t needed = 0;
    auto v = VfsOf(req)->GetXattr(CredOf(req), ino, name, size, &needed);
    if (!v) return ReplyErr(req, v.error());
    if (size == 0) return (void)fuse_reply_xattr(req, needed);
    fuse_reply_buf(req, v->data(), v->size());
  });
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Guard(req, [&] {
    size_t needed = 0;
    auto v = VfsOf(req)->ListXattr(CredOf(req), ino, size, &needed);
    if (!v) return ReplyErr(req, v.error());
    if (size == 0) return (void)fuse_reply_xattr(req, needed);
    fuse_reply_buf(req, v->data(), v->size());
  });
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Guard(req, [&] { ReplyStatus(req, VfsOf(req)->RemoveXattr(CredOf(req), ino, name)); });
}

ns::LockRange RangeOf(const struct flock* l) {
  ns::LockRange r;
  r.type = l->l_type;
  r.start = static_cast<uint64_t>(l->l_start);
  r.len = static_cast<uint64_t>(l->l_len);
  r.pid = l->l_pid;
  return r;
}

void OpGetlk(fuse_req_t req, fuse_ino_t, fuse_file_info* fi, struct flock* lock) {
  Guard(req, [&] {
    auto r = VfsOf(req)->GetLk(fi->fh, fi->lock_owner, RangeOf(lock));
    if (!r) return ReplyErr(req, r.error());
    struct flock out = *lock;
    out.l_type = r->type;
    if (r->type != F_UNLCK) {
      out.l_whence = SEEK_SET;
      out.l_start = static_cast<off_t>(r->start);
      out.l_len = static_cast<off_t>(r->len);
      out.l_pid = r->pid;
    }
    fuse_reply_lock(req, &out);
  });
}

void OpSetlk(fuse_req_t req, fuse_ino_t, fuse_file_info* fi, struct flock* lock, int sleep) {
  Guard(req, [&] {
    ns::Vfs* vfs = VfsOf(req);
    const uint64_t fh = fi->fh, owner = fi->lock_owner;
    const ns::LockRange want = RangeOf(lock);
    if (!sleep) return ReplyStatus(req, vfs->SetLk(fh, owner, want, false));
    ReplyStatus(req, RetryUntilGranted(req, [&] { return vfs->SetLk(fh, owner, want, false); }));
  });
}

void OpFlock(fuse_req_t req, fuse_ino_t, fuse_file_info* fi, int op) {
  Guard(req, [&] {
    ns::Vfs* vfs = VfsOf(req);
    const uint64_t fh = fi->fh, owner = fi->lock_owner;
    const int nb = op | LOCK_NB;
    if (op & LOCK_NB) return ReplyStatus(req, vfs->Flock(fh, owner, nb));
    ReplyStatus(req, RetryUntilGranted(req, [&] { return vfs->Flock(fh, owner, nb); }));
  });
}

void OpFallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length,
                 fuse_file_info* fi) {
  Guard(req, [&] {
    ReplyStatus(req, VfsOf(req)->Fallocate(fi->fh, mode, static_cast<uint64_t>(offset),
                                           static_cast<uint64_t>(length)));
  });
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.link = OpLink;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.statfs = OpStatfs;
  ops.setxattr = OpSetxattr;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  ops.create = OpCreate;
  ops.getlk = OpGetlk;
  ops.setlk = OpSetlk;
  ops.flock = OpFlock;
  ops.fallocate = OpFallocate;
  return ops;
}

// The FUSE connection id of the fuse.fedfs mount at `mountpoint`
// (/sys/fs/fuse/connections/<id>), from /proc/self/mountinfo; "" if absent.
// The FUSE mount at `mountpoint`: (major, minor) of its device, from
// /proc/self/mountinfo (no request to ourselves), the last one if stacked.
std::optional<std::pair<unsigned, unsigned>> MountDevice(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<std::pair<unsigned, unsigned>> found;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, devno, root, mnt;
    ss >> id >> parent >> devno >> root >> mnt;
    if (mnt != mountpoint) continue;
    if (line.find(" - fuse.") == std::string::npos) continue;
    const size_t colon = devno.find(':');
    if (colon == std::string::npos) continue;
    found = std::make_pair(static_cast<unsigned>(std::stoul(devno.substr(0, colon))),
                           static_cast<unsigned>(std::stoul(devno.substr(colon + 1))));
  }
  return found;
}

}  // namespace

// ---------------------------------------------------------------- kernel caches

void KernelNotifier::Enable(bool epoch_supported) {
  coherent_.store(epoch_supported, std::memory_order_release);
  if (epoch_supported) {
    Log()->info("kernel caches names (invalidated by FUSE_NOTIFY_INC_EPOCH)");
  } else {
    Log()->info("the kernel has no FUSE_NOTIFY_INC_EPOCH (FUSE < 7.44): names are not cached");
  }
}

void KernelNotifier::Attach(fuse_session* se) {
  std::unique_lock lock(mu_);
  session_ = se;
}

void KernelNotifier::Detach() {
  std::unique_lock lock(mu_);
  session_ = nullptr;
}

void KernelNotifier::InvalidateNames() {
  if (!Coherent()) return;
  names_epoch_.fetch_add(1, std::memory_order_acq_rel);  // before the kernel hears of it
  std::shared_lock lock(mu_);
  fuse_session* se = session_;
  if (se == nullptr) return;
  // libfuse 3.14 has no call for it: the notification is a bare header whose
  // error field is the notify code (FUSE_NOTIFY_INC_EPOCH = 8), written to
  // the session's device fd like any other notification.
  struct {
    uint32_t len;
    int32_t error;
    uint64_t unique;
  } hdr{16, 8, 0};
  static_assert(sizeof hdr == 16);
  const ssize_t n = ::write(fuse_session_fd(se), &hdr, sizeof hdr);
  if (n == static_cast<ssize_t>(sizeof hdr)) return;
  const int e = errno;
  if (e == ENOENT || e == ENODEV || e == EBADF) return;  // unmounted meanwhile
  // Names already cached cannot be taken back: say so loudly, and stop
  // handing out cacheable names.
  coherent_.store(false, std::memory_order_release);
  Log()->error("FUSE_NOTIFY_INC_EPOCH refused ({}): names are no longer cached; names cached so "
               "far may stay stale until their timeout",
               std::strerror(e));
}

void KernelNotifier::InvalidateAttrs(uint64_t ino) {
  std::shared_lock lock(mu_);
  fuse_session* se = session_;
  if (se == nullptr) return;
  // Attributes only (offset < 0): takes no inode lock in the kernel.
  const int rc = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
  if (rc != 0 && rc != -ENOENT && rc != -ENODEV) {
    Log()->warn("invalidating the attributes of inode {}: {}", ino, std::strerror(-rc));
  }
}

// The INIT request (before libfuse handles it): what the kernel offers.
// True if that includes the rings.
bool OnInitRequest(FuseMount::Ctx* ctx, const void* buf, size_t size) {
  if (size < sizeof(fuse_in_header) + offsetof(fuse_init_in, flags) + sizeof(uint32_t)) return false;
  const auto* in = static_cast<const fuse_in_header*>(buf);
  const auto* arg = reinterpret_cast<const fuse_init_in*>(in + 1);
  ctx->killpriv_offered = arg->major == 7 && arg->minor >= 33 &&
                          (arg->flags & FUSE_HANDLE_KILLPRIV_V2) != 0;
  ctx->uring_offered = ctx->uring != nullptr && ctx->uring->OnInitRequest(buf, size);
  ctx->init_unique.store(in->unique, std::memory_order_release);
  return ctx->uring_offered;
}

// Every reply goes out here (fuse_session_custom_io): the INIT reply with
// what libfuse 3.14 cannot ask for, then the rings take their replies.
ssize_t FrontendWritev(int fd, struct iovec* iov, int count, void* userdata) {
  auto* ctx = static_cast<FuseMount::Ctx*>(userdata);
  const uint64_t init_unique = ctx->init_unique.load(std::memory_order_acquire);
  if (init_unique != 0 && count == 2 && iov[0].iov_len == sizeof(fuse_out_header) &&
      static_cast<const fuse_out_header*>(iov[0].iov_base)->unique == init_unique) {
    ctx->init_unique.store(0, std::memory_order_release);
    fuse_init_out arg;
    iovec patched[2];
    if (static_cast<const fuse_out_header*>(iov[0].iov_base)->error == 0 &&
        ctx->killpriv_offered && iov[1].iov_len == sizeof arg) {
      std::memcpy(&arg, iov[1].iov_base, sizeof arg);
      arg.flags |= FUSE_HANDLE_KILLPRIV_V2;
      patched[0] = iov[0];
      patched[1] = {&arg, sizeof arg};
      iov = patched;
      ctx->killpriv = true;
    }
    if (ctx->uring_offered) return ctx->uring->InitReply(fd, iov, count);
    return ::writev(fd, iov, count);
  }
  if (ctx->uring != nullptr) return ctx->uring->Writev(fd, iov, count);
  return ::writev(fd, iov, count);
}

ssize_t DeviceRead(int fd, void* buf, size_t len, void*) { return ::read(fd, buf, len); }

struct FuseMount::State {
  std::unique_ptr<UringChannel> uring;
  std::unique_ptr<WorkerLoop> loop;
  std::atomic<bool> loop_done{false};
};

Status CheckMountpoint(const std::string& mp) {
  struct stat st {};
  if (::stat(mp.c_str(), &st) != 0) {
    const int e = errno;
    // ECONNABORTED: the dead daemon's connection is being ended (its
    // io_uring rings are torn down just after its exit).
    if (e == ENOTCONN || e == ECONNABORTED) {
      return Err(ENOTCONN, "mountpoint " + mp +
                               " is a stale FUSE mount (a previous fedfsd crashed?); clear it "
                               "with: fusermount3 -u " + mp);
    }
    return Err(e, "mountpoint " + mp + ": " + std::strerror(e));
  }
  if (!S_ISDIR(st.st_mode)) return Err(ENOTDIR, "mountpoint " + mp + " is not a directory");
  return Ok();
}

Result<std::unique_ptr<FuseMount>> FuseMount::Mount(const FuseOptions& options, ns::Vfs* vfs) {
  if (auto s = CheckMountpoint(options.mountpoint); !s) return Err(s.error());
  std::unique_ptr<FuseMount> m(new FuseMount(options));
  m->state_ = std::make_unique<State>();

  std::string o = "fsname=" + options.fsname + ",subtype=fedfs";
  if (options.allow_other) o += ",allow_other";
  if (options.default_permissions) o += ",default_permissions";
  std::vector<std::string> argv_s = {"fedfsd", "-o", o};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static const fuse_lowlevel_ops kOps = MakeOps();
  m->ctx_ = std::make_unique<Ctx>();
  m->ctx_->vfs = vfs;
  m->ctx_->notifier = m->notifier_.get();
  m->session_ = fuse_session_new(&args, &kOps, sizeof kOps, m->ctx_.get());
  fuse_opt_free_args(&args);  // the session keeps its own copies
  if (m->session_ == nullptr) {
    return Err(EINVAL, "cannot create the FUSE session (options: " + o + ")");
  }
  if (fuse_session_mount(m->session_, options.mountpoint.c_str()) != 0) {
    fuse_session_destroy(m->session_);
    m->session_ = nullptr;
    return Err(EIO, "cannot mount FUSE at " + options.mountpoint +
                        " (is /dev/fuse available and are we root?)");
  }
  if (auto dev = MountDevice(options.mountpoint)) {
    m->conn_id_ = std::to_string((dev->first << 20) | dev->second);  // the kernel's s_dev
    m->bdi_ = std::to_string(dev->first) + ":" + std::to_string(dev->second);
  }
  if (options.read_ahead_kb > 0 && !m->bdi_.empty()) {
    m->ctx_->read_ahead_file = "/sys/class/bdi/" + m->bdi_ + "/read_ahead_kb";
    m->ctx_->read_ahead_kb = options.read_ahead_kb;
    m->ctx_->read_ahead_pending = true;
  }
  m->notifier_->Attach(m->session_);
  fuse_session* se = m->session_;
  State* state = m->state_.get();
  const unsigned max_threads = std::max(1u, options.max_threads);
  std::string uring_note = "off";
  static const fuse_custom_io kIo = {.writev = FrontendWritev, .read = DeviceRead};
  const bool custom_io = fuse_session_custom_io(se, &kIo, fuse_session_fd(se)) == 0;
  if (!custom_io) Log()->warn("libfuse refused a custom writev: every write asks for security.capability");
  if (options.io_uring) {
    // max_threads spread over the CPUs' queues, at least two per queue so
    // that one blocked request does not hold up a CPU's others.
    const unsigned cpus = static_cast<unsigned>(std::max(1, ::get_nprocs_conf()));
    const unsigned per_queue = std::max(2u, (max_threads + cpus - 1) / cpus);
    std::string why_not = "libfuse refused a custom writev";
    if (custom_io) state->uring = UringChannel::Create(se, per_queue, &why_not);
    if (state->uring) {
      m->ctx_->uring = state->uring.get();
      uring_note = "if the kernel offers it, " + std::to_string(per_queue) + " threads per CPU";
    } else {
      uring_note = "unavailable: " + why_not;
    }
  }
  WorkerLoopOptions lo{.threads = max_threads, .spin = std::chrono::microseconds(options.spin_us)};
  lo.on_init = [state, ctx = m->ctx_.get()](const void* buf, size_t size) {
    // Once requests come over the rings, /dev/fuse carries only forgets,
    // interrupts and INIT: nothing there is worth spinning for.
    if (OnInitRequest(ctx, buf, size)) state->loop->SetSpin({});
  };
  state->loop = std::make_unique<WorkerLoop>(se, lo);
  m->loop_ = std::thread([state] {
    const int rc = state->loop->Run();
    if (rc != 0) Log()->info("FUSE loop ended ({})", std::strerror(-rc));
    state->loop_done = true;
  });
  NameThread(m->loop_, "fuse-dev");
  Log()->info("mounted at {} (max {} threads, spin {} us, io_uring {}{}{})", options.mountpoint,
              max_threads, options.spin_us, uring_note, options.allow_other ? ", allow_other" : "",
              options.default_permissions ? ", default_permissions" : "");
  return m;
}

FuseMount::FuseMount(FuseOptions options) : options_(std::move(options)) {}

FuseMount::~FuseMount() { Unmount(); }

bool FuseMount::Abort(const char* why, bool loud) {
  if (conn_id_.empty()) return false;
  const std::string dir = "/sys/fs/fuse/connections";
  const std::string path = dir + "/" + conn_id_ + "/abort";
  // Many systems mount fusectl at boot; where none did, mount it (as root,
  // which mounting FUSE needed anyway).
  if (::access(path.c_str(), W_OK) != 0 &&
      ::mount("fusectl", dir.c_str(), "fusectl", 0, nullptr) != 0 && errno != EBUSY) {
    Log()->error("cannot mount fusectl on {} to abort FUSE connection {}: {}", dir, conn_id_,
                 std::strerror(errno));
    return false;
  }
  std::ofstream out(path);
  out << "1";
  out.flush();
  if (!out) {
    Log()->error("cannot abort FUSE connection {} ({})", conn_id_, path);
    return false;
  }
  if (loud) {
    Log()->warn("FUSE connection {} aborted: {}", conn_id_, why);
  } else {
    Log()->info("FUSE connection {} aborted: {}", conn_id_, why);
  }
  return true;
}

void FuseMount::Unmount() {
  if (session_ == nullptr) return;
  // Names the kernel keeps (present or missing) must not outlive the daemon
  // that takes them back: each is looked up again at its next use, which
  // fails with ENOTCONN once the connection is gone.
  notifier_->InvalidateNames();
  notifier_->Detach();  // waits for notifications being written
  ctx_->stopping = true;
  // The workers finish the requests they serve and return. The device stays
  // open until then: a reply must not go to a closed (or reused) descriptor.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  const bool rings_done = !state_->uring || state_->uring->Stop(deadline);
  state_->loop->Stop();
  while (!state_->loop_done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!state_->loop_done || !rings_done) {
    // A handler still blocked: end the connection (processes using the mount
    // get ENOTCONN), detach the mount, and leave that thread and the session
    // whose descriptor it holds to the process's exit rather than hang.
    Log()->error("a FUSE worker of {} is still serving a request; leaving it behind",
                 options_.mountpoint);
    Abort("a worker is still serving a request", /*loud=*/true);
    ::umount2(options_.mountpoint.c_str(), MNT_DETACH);
    loop_.detach();
    // What that thread still uses stays allocated (leaked on purpose).
    (void)state_.release();
    (void)ctx_.release();
    session_ = nullptr;
    return;
  }
  loop_.join();
  bool rings = false;
  if (state_->uring) {
    const bool started = state_->uring->started();
    rings = started;
    Log()->info("{} requests were served over io_uring", state_->uring->served());
    state_->uring.reset();
    // The rings' commands hold the device open until the kernel's teardown
    // of the closed rings, which runs later: closing our descriptor would
    // not end the connection at once, and a request arriving meanwhile
    // would wait for that (then fail with ECONNABORTED). Ended here, every
    // request after the daemon has gone gets ENOTCONN, as without rings.
    if (started) Abort("the rings are closed", /*loud=*/false);
  }
  // Closes the device, the connection's last descriptor, so the kernel ends
  // the connection (a process keeping the mount busy gets ENOTCONN from then
  // on), then unmounts lazily.
  fuse_session_unmount(session_);
  fuse_session_destroy(session_);
  session_ = nullptr;
  // libfuse leaves the mount alone when the connection was aborted (it
  // takes that for an unmount done elsewhere): detach it here.
  if (rings && ::umount2(options_.mountpoint.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
    Log()->error("cannot unmount {}: {}", options_.mountpoint, std::strerror(errno));
  }
  Log()->info("unmounted {}", options_.mountpoint);
}

}  // namespace fedfs::fuse
