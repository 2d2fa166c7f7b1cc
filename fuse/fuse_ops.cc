#define FUSE_USE_VERSION 312
// The FUSE frontend's request handlers (fuse/mount_ctx.h).
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

#include "common/errors.h"
#include "common/thread_name.h"
#include "fuse/caller_groups.h"
#include "fuse/fuse_internal.h"
#include "fuse/uring_channel.h"
#include "fuse/mount_ctx.h"
#include "fuse/worker_loop.h"

namespace fedfs::fuse {
namespace {

using ns::Cred;
using ns::EntryOut;


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

// The operation the calling worker is answering (Timed), for ReplyErr.
thread_local OpMetrics::Op* current_op = nullptr;

void ReplyErr(fuse_req_t req, const Error& e) {
  if (current_op != nullptr) current_op->errors.fetch_add(1, std::memory_order_relaxed);
  if (e.code == ENOENT) {
    SPDLOG_LOGGER_DEBUG(Log(), "{}", e.ToString());
  } else {
    SPDLOG_LOGGER_DEBUG(Log(), "request failed: {}", e.ToString());
  }
  fuse_reply_err(req, CallerErrno(e));  // the errno rule (common/errors.h)
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
  auto* ctx = static_cast<FuseMount::Ctx*>(userdata);
  ctx->notifier->Enable(epoch);
  // The umask reaches us in the request and is applied by the node that
  // creates the file (nodefs/cred.h).
  if (conn->capable & FUSE_CAP_DONT_MASK) conn->want |= FUSE_CAP_DONT_MASK;
  // Locks are kept by the file's node (coherent across nodes).
  if (conn->capable & FUSE_CAP_POSIX_LOCKS) conn->want |= FUSE_CAP_POSIX_LOCKS;
  if (conn->capable & FUSE_CAP_FLOCK_LOCKS) conn->want |= FUSE_CAP_FLOCK_LOCKS;
  // Data may change on another node: no writeback caching.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Pages are dropped by the daemon's invalidations, range by range
  // (docs/coopcache.md, "Kernel page cache"), not whole on every change of
  // a file's size or mtime.
  if (ctx->explicit_inval_data && (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA)) {
    conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  }
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
    // The kernel did not take the handle (interrupted request): closed here,
    // with no caller left to tell of a failure.
    if (fuse_reply_open(req, fi) != 0) VfsOf(req)->Release(f->fh).IgnoreError();
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
      // As in OpOpen: the kernel did not take the handle, nobody to tell.
      VfsOf(req)->Release(r->second.fh).IgnoreError();
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
    // RELEASE has no caller to answer, so a failed unlock is logged: the lock
    // then stays until the file's last handle closes on its node.
    if (fi->flock_release) {
      if (auto s = vfs->Flock(fi->fh, fi->lock_owner, LOCK_UN); !s) {
        Log()->warn("flock unlock at the last close failed: {}", s.error().ToString());
      }
    }
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
    // As in OpOpen: the kernel did not take the handle, nobody to tell.
    if (fuse_reply_open(req, fi) != 0) VfsOf(req)->ReleaseDir(*dh).IgnoreError();
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


}  // namespace

namespace {

// Runs handler Fn for operation K (OpMetrics::kNames[K]): counted and timed
// when the mount has metrics, its error replies counted by ReplyErr.
template <size_t K, auto Fn>
struct Timed;
template <size_t K, class... A, void (*Fn)(fuse_req_t, A...)>
struct Timed<K, Fn> {
  static void Run(fuse_req_t req, A... a) {
    OpMetrics* m = static_cast<FuseMount::Ctx*>(fuse_req_userdata(req))->metrics;
    if (m == nullptr) return Fn(req, a...);
    OpMetrics::Op& op = m->at(K);
    current_op = &op;
    {
      metrics::ScopedTimer t(&op.latency);
      Fn(req, a...);
    }
    current_op = nullptr;
  }
};

}  // namespace

void OpMetrics::Collect(metrics::Exposition& e) const {
  for (size_t i = 0; i < kNames.size(); ++i) {
    const metrics::Labels l = {{"op", std::string(kNames[i])}};
    e.Histogram("fedfs_fuse_op_duration_seconds",
                "FUSE requests by operation: time from the request's arrival at a worker to its reply",
                ops_[i].latency.Read(), l);
  }
  for (size_t i = 0; i < kNames.size(); ++i) {
    e.Counter("fedfs_fuse_op_errors_total", "FUSE requests answered with an error, by operation",
              ops_[i].errors.load(std::memory_order_relaxed),
              {{"op", std::string(kNames[i])}});
  }
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = OpInit;
  ops.lookup = Timed<0, OpLookup>::Run;
  ops.forget = Timed<1, OpForget>::Run;
  ops.forget_multi = Timed<1, OpForgetMulti>::Run;
  ops.getattr = Timed<2, OpGetattr>::Run;
  ops.setattr = Timed<3, OpSetattr>::Run;
  ops.readlink = Timed<4, OpReadlink>::Run;
  ops.mknod = Timed<5, OpMknod>::Run;
  ops.mkdir = Timed<6, OpMkdir>::Run;
  ops.unlink = Timed<7, OpUnlink>::Run;
  ops.rmdir = Timed<8, OpRmdir>::Run;
  ops.symlink = Timed<9, OpSymlink>::Run;
  ops.rename = Timed<10, OpRename>::Run;
  ops.link = Timed<11, OpLink>::Run;
  ops.open = Timed<12, OpOpen>::Run;
  ops.read = Timed<13, OpRead>::Run;
  ops.write = Timed<14, OpWrite>::Run;
  ops.flush = Timed<15, OpFlush>::Run;
  ops.release = Timed<16, OpRelease>::Run;
  ops.fsync = Timed<17, OpFsync>::Run;
  ops.opendir = Timed<18, OpOpendir>::Run;
  ops.readdir = Timed<19, OpReaddir>::Run;
  ops.releasedir = Timed<20, OpReleasedir>::Run;
  ops.fsyncdir = Timed<21, OpFsyncdir>::Run;
  ops.statfs = Timed<22, OpStatfs>::Run;
  ops.setxattr = Timed<23, OpSetxattr>::Run;
  ops.getxattr = Timed<24, OpGetxattr>::Run;
  ops.listxattr = Timed<25, OpListxattr>::Run;
  ops.removexattr = Timed<26, OpRemovexattr>::Run;
  ops.create = Timed<27, OpCreate>::Run;
  ops.getlk = Timed<28, OpGetlk>::Run;
  ops.setlk = Timed<29, OpSetlk>::Run;
  ops.flock = Timed<30, OpFlock>::Run;
  ops.fallocate = Timed<31, OpFallocate>::Run;
  return ops;
}

}  // namespace fedfs::fuse
