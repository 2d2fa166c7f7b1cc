// Internals of FileService (files/file_service.h), shared by file_service.cc (sessions,
// handles, watches, callbacks) and file_serve.cc (serving requests). Internal to fedfs_ns_remote.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/cooperative.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/rpc_methods.h"
#include "common/wait.h"
#include "coopcache/holder_directory.h"
#include "files/file_service.h"
#include "files/fs_wire.h"
#include "files/name_windows.h"
#include "m2m/reply_cache.h"
#include "common/path.h"

namespace fedfs::ns {

namespace fb = fswire::fb;
using Clock = SteadyClock;  // simulated time in the simulator (common/cooperative.h)

namespace files_detail {

// The server's registered slots. Acquire waits (bounded by a deadline) for a
// free slot; any thread but the progress context.
class SlotPool {
 public:
  Status Init(m2m::Transport* t, size_t slot_size, size_t count) {
    auto r = t->Allocate(slot_size * count);
    if (!r) return Err(r.error());
    region_ = std::move(*r);
    slot_size_ = slot_size;
    MutexLock lock(mu_);
    for (size_t i = 0; i < count; ++i) free_.push_back(static_cast<int>(i));
    return Ok();
  }
  int Acquire(Clock::time_point deadline) {
    if (SuspendableContext() != nullptr) return AcquireInFiber(deadline);
    MutexLock lock(mu_);
    if (!mu_.WaitUntil(cv_, deadline, [&]() FEDFS_REQUIRES(mu_) { return !free_.empty(); })) {
      return -1;
    }
    int s = free_.back();
    free_.pop_back();
    return s;
  }
  void Release(int s) {
    {
      MutexLock lock(mu_);
      free_.push_back(s);
    }
    cv_.notify_one();
  }
  std::byte* slot(int s) { return region_->data() + static_cast<size_t>(s) * slot_size_; }
  size_t slot_size() const { return slot_size_; }

 private:
  // A fiber of the simulator (common/cooperative.h) looks every 20 µs of
  // simulated time: a wait on cv_ would block the thread every fiber runs
  // on, and with it the release it waits for.
  int AcquireInFiber(Clock::time_point deadline) {
    while (true) {
      {
        MutexLock lock(mu_);
        if (!free_.empty()) {
          int s = free_.back();
          free_.pop_back();
          return s;
        }
      }
      const auto now = Clock::now();
      if (now >= deadline) return -1;
      SleepFor(std::min<Clock::duration>(deadline - now, std::chrono::microseconds(20)));
    }
  }

  std::unique_ptr<m2m::LocalRegion> region_;
  size_t slot_size_ = 0;
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_ FEDFS_GUARDED_BY(mu_);
};

// RAII slot holder.
struct SlotRef {
  SlotPool* pool;
  int slot;
  ~SlotRef() {
    if (slot >= 0) pool->Release(slot);
  }
};

inline std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

}  // namespace files_detail

namespace files_detail {

// What this thread serves: `session`, the session whose request it is (0:
// none; its own changes are not told back to it: its kernel saw them
// happen), and `for_node`, the node the change is made for (FsRequest.
// for_node, FileService::ServingFor; empty: none; its sessions are not
// told either). Per fiber in the simulator (common/cooperative.h), whose
// fibers share one thread and suspend while they serve.
struct ServingState {
  uint64_t session = 0;
  std::string for_node;
};
inline ServingState& Serving() {
  if (Cooperative* co = SuspendableContext(); co != nullptr) [[unlikely]] {
    static std::map<Cooperative::FiberId, ServingState> by_fiber;  // its one thread only
    return by_fiber[co->Current()];
  }
  thread_local ServingState state;
  return state;
}

using FileKey = std::pair<dev_t, ino_t>;

}  // namespace files_detail

using namespace files_detail;

// The holder directory's session for this node's own cache (forwards of
// its own files' blocks, docs/coopcache.md); no client may take it.
inline constexpr uint64_t kSelfSession = 0;

struct Session {
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::string node;
  std::string addr;
  std::set<uint64_t> conns;
  std::shared_ptr<m2m::Endpoint> ep;        // to the client's listen address
  std::shared_ptr<m2m::RemoteRegion> pool;  // the client's slots (null: inline only)
  uint64_t slot_size = 0;
  uint32_t slot_count = 0;
  std::unordered_map<uint64_t, Handle> handles;     // remote handle -> local
  std::unordered_map<uint64_t, std::string> paths;  // remote handle -> path opened
  bool callbacks = false;  // takes FsAttrChanged (said so in Hello, reachable at addr)
  // A callback to it failed (its callbacks were turned off): its next
  // request is answered kErrSessionUnknown, so that the client says Hello
  // again and learns that it was told no more (it drops what it caches)
  // before it is served again: a client whose requests keep being answered
  // never lapses by itself (file_service.h, "Cut-off clients").
  bool untold = false;
  // Its file-data cache, readable by other clients (cache_block 0: none).
  uint64_t cache_block = 0;
  m2m::RegionDesc cache_data, cache_tags;
  // Remote handle or watch -> file, for what is told of changes.
  std::unordered_map<uint64_t, FileKey> keys;
  // Files watched for this session (Stat with `watch`): file -> its watch id
  // (from the handle counter), when it was made (FileService::Impl's
  // watch_gen_) and its place in watch_order (oldest first).
  struct Watch {
    uint64_t id = 0;
    uint64_t made = 0;
    std::list<FileKey>::iterator order;
    std::string file_handle;  // NodeFs::FileHandleOf, for deferred opens ("": none)
  };
  std::map<FileKey, Watch> watches;
  std::list<FileKey> watch_order;
  Clock::time_point seen{};  // its last request or Hello (session_lease)
};

class FileService::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(FileServiceOptions o, m2m::Transport* t, NodeFs* local, Executor* blocking)
      : opts_(o),
        transport_(t),
        local_(local),
        blocking_(blocking),
        log_(Logger("fs")),
        forward_rng_(static_cast<std::minstd_rand::result_type>(
            o.forward_seed != 0 ? o.forward_seed : std::random_device{}())) {}

  // The FileService is going away (the Impl may live on inside the
  // transport's handlers): refuse everything from now on and release every
  // handle while local_ is still alive.
  void Stop();
  // Ends the sessions not renewed for session_lease, every quarter of it, on
  // a thread of its own until Stop (nothing without a lease).
  void StartSweeper();
  size_t ExpireSessions(Clock::time_point now);

  m2m::Transport* transport() const { return transport_; }
  NodeFs* local() const { return local_; }

  Status Init() { return slots_.Init(transport_, opts_.slot_size, opts_.slot_count); }

  // Progress context: verify, validate, post.
  void OnCall(m2m::IncomingCall call, m2m::Responder r);

  void DropPeer(const std::string& node);
  void ForgetOwnCopy(const coop::FileId& f, uint64_t block, uint64_t index, uint32_t frame,
                     uint64_t tag) {
    (void)dir_.Evict(f, kSelfSession, block, index, frame, tag);
  }

  FileService::Stats stats() const;

 private:
  void Refuse(const m2m::IncomingCall& call, m2m::Responder& r, Error e);

  void DoHello(m2m::IncomingCall call, m2m::Responder& r);

  // `continued`: FsHelloReply.continued (files/fs.fbs).
  m2m::Bytes HelloReply(bool continued = false);

  // What a data request needs from its session, copied under the lock.
  struct SessionView {
    uint64_t cache_block = 0;  // the session's cache blocks (0: none)
    std::shared_ptr<m2m::Endpoint> ep;
    std::shared_ptr<m2m::RemoteRegion> pool;
    uint64_t slot_size = 0;
    uint32_t slot_count = 0;
  };

  Result<SessionView> Bound(const m2m::PeerInfo& peer, uint64_t session);

  Result<Handle> Local(uint64_t session, uint64_t rh);

  // Records a newly opened local handle of the file `st` describes; releases
  // it again when the session vanished meanwhile or holds too many. The
  // session is told of the file's changes when it takes callbacks and the
  // file is a regular one (*callbacks).
  Result<uint64_t> AddHandle(uint64_t session, Handle lh, const std::string& path,
                             const struct stat& st, bool* callbacks);

  Result<Handle> TakeHandle(uint64_t session, uint64_t rh);

  void ForgetOpenerLocked(const FileKey& key, uint64_t session, uint64_t rh) FEDFS_REQUIRES(mu_);
  void ForgetKeysLocked(Session& s) FEDFS_REQUIRES(mu_);

  // Watches file `key` for `session` (it takes callbacks); nullopt if it
  // does not (or is gone). *fresh: the watch was made at or after `since`
  // (watch_gen_ + 1 when the request's stat began), so that stat may
  // predate it. *evicted: watches ended to stay within
  // max_watches_per_session, to be told (TellEnded).
  std::optional<uint64_t> WatchLocked(uint64_t session, const FileKey& key, uint64_t since,
                                      bool* fresh, std::vector<uint64_t>* evicted)
      FEDFS_REQUIRES(mu_);
  void UnwatchLocked(Session& s, const FileKey& key) FEDFS_REQUIRES(mu_);

  // Stat with `watch` (see fs.fbs): the file is watched before the stat
  // whose answer is sent, so every change after that stat is told.
  Result<m2m::Bytes> WatchedStat(uint64_t session, const Cred& cred, const std::string& path);
  struct Watched {
    struct stat st;
    std::optional<uint64_t> id;  // the watch, if the file is watched
  };
  Result<Watched> StatAndWatch(uint64_t session, const Cred& cred, const std::string& path);
  // kStatMany: StatAndWatch of `first` in `dir` and of up to `along`
  // regular files after it there (windows_), in one reply. A directory of
  // more than 65,536 entries answers `first` only.
  NameWindows windows_;
  Result<m2m::Bytes> StatMany(uint64_t session, const Cred& cred, const std::string& dir,
                              const std::string& first, size_t along);

  // Tells `session` that watches `ids` ended (evicted), and waits for its
  // answer as AttrsChanged does.
  void TellEnded(uint64_t session, std::vector<uint64_t> ids);

 public:
  // Whether a change must be told: someone is told of changes, or other
  // clients may be sent to copies of a file's blocks.
  bool Interested() const {
    return open_watched_.load(std::memory_order_relaxed) > 0 || !dir_.Empty();
  }

  // Tells every other session that has file (dev, ino) open and takes
  // callbacks (one FsAttrChanged per session, in parallel), and waits for
  // their answers, each for at most callback_timeout. A session that does
  // not answer in time is logged and told nothing more (its later opens say
  // so): its node caches what it has for at most the client's bound
  // (docs/namespace.md), and a writer waits for it once, not per change.
  void AttrsChanged(dev_t dev, ino_t ino, DataRange data);
  // file_service.h, "Deferred opens".
  bool NameGoing(dev_t dev, ino_t ino, const std::string& path);
  // A new watch of `session` keeps a file handle of the file at `path`.
  void KeepFileHandle(uint64_t session, const FileKey& key, uint64_t watch, const std::string& path);
  // The file `session` watches as `watch`, opened by its file handle, if it
  // is still the file whose inode number ends in `ino48` and its mode bits
  // let `cred` open it so (one with an access ACL: not); else ESTALE.
  Result<Opened> OpenWatched(uint64_t session, const Cred& cred, uint64_t watch, uint64_t ino48,
                             int flags);

 private:
  struct Target {
    uint64_t session = 0;
    std::shared_ptr<m2m::Endpoint> ep;
    m2m::Bytes msg;
    std::string node;
  };

  // Sends each target its FsAttrChanged (in parallel) and waits for the
  // answers, each for at most callback_timeout. A session that does not
  // answer in time is logged and told nothing more; with cache_lease, Tell
  // returns only once cache_lease passed since its last request arrived
  // (file_service.h, "Cut-off clients").
  void Tell(std::vector<Target> targets);

 private:
  // `pinned`: (watch, remote handle) handed over (file_service.h,
  // "Deferred opens").
  static m2m::Bytes AttrChangedMessage(
      uint64_t session, const std::vector<uint64_t>& rhs, DataRange data, bool ended = false,
      const std::vector<std::pair<uint64_t, uint64_t>>& pinned = {});

  static Result<m2m::Bytes> StatOrErr(const Result<struct stat>& r) {
    if (!r) return Err(r.error());
    return StatReply(*r);
  }
  static m2m::Bytes StatReply(const struct stat& st);
  static m2m::Bytes EmptyReply();
  // With `id`: a cooperative read's, naming the file (FsReply.coop_dev/ino).
  static m2m::Bytes DataReply(std::span<const std::byte> data, uint64_t n,
                              const coop::FileId* id = nullptr);
  static m2m::Bytes CountReply(uint64_t n, const coop::FileId* id = nullptr);
  static m2m::Bytes OpenedReply(uint64_t rh, const struct stat& st, bool callbacks,
                                uint64_t watch = 0, const struct stat* parent = nullptr);

  // FileServiceOptions::on_access for a read or write of `bytes` through
  // remote handle `rh` of `session` (nothing if its path is unknown).
  void Accessed(uint64_t session, uint64_t rh, uint64_t bytes);
  // The path opened as remote handle `rh` of `session` ("" if unknown);
  // with `node`, the session's client node too.
  std::string HandlePath(uint64_t session, uint64_t rh, std::string* node = nullptr);

  // Runs `req`, then tells on_change about what a successful request may
  // have changed the attributes of (docs/namespace.md, "Kernel caches").
  Result<m2m::Bytes> Run(const m2m::PeerInfo& peer, const fb::FsRequest* req,
                         Clock::time_point arrival);

  Result<m2m::Bytes> RunOp(const m2m::PeerInfo& peer, const fb::FsRequest* req,
                           Clock::time_point arrival);

  // Checks a slot request against the session's pool and the server's slots.
  Status CheckSlot(const SessionView& v, const fb::FsRequest* req);

  std::chrono::nanoseconds Remaining(Clock::time_point deadline) {
    return std::min<std::chrono::nanoseconds>(deadline - Clock::now(), opts_.transfer_timeout);
  }

  Result<m2m::Bytes> DoRead(const SessionView& v, const fb::FsRequest* req,
                            Clock::time_point deadline, uint64_t session);
  // The plain read (inline or through the client's slot); *read: bytes.
  Result<m2m::Bytes> ReadInto(const SessionView& v, const fb::FsRequest* req,
                              Clock::time_point deadline, uint64_t session, uint64_t* read,
                              const coop::FileId* id = nullptr);
  // A read of whole cache blocks (FsRequest.coop_frames): copies at other
  // clients, or the bytes with the reader recorded as keeping them.
  Result<m2m::Bytes> DoCoopRead(const SessionView& v, const fb::FsRequest* req,
                                Clock::time_point deadline, uint64_t session);

  Result<m2m::Bytes> DoWrite(const SessionView& v, const fb::FsRequest* req,
                             Clock::time_point deadline, uint64_t session, const Writer& by);

  // N-chance forwarding (files/coop_serve.cc; fs.fbs, Op kCoopEvict..).
  Result<m2m::Bytes> DoCoopEvict(const fb::FsRequest* req, uint64_t session);
  Result<m2m::Bytes> DoCoopStore(const SessionView& v, const fb::FsRequest* req,
                                 Clock::time_point deadline);
  Result<m2m::Bytes> DoCoopMoved(const fb::FsRequest* req);
  // Drops every copy when the membership epoch moved since the last look.
  void CheckCoopEpoch();

  const FileServiceOptions opts_;
  m2m::Transport* const transport_;
  NodeFs* const local_;
  Executor* const blocking_;
  std::shared_ptr<spdlog::logger> log_;
  SlotPool slots_;
  std::atomic<bool> stopped_{false};
  std::thread sweeper_;
  std::mutex sweep_mu_;
  std::condition_variable sweep_cv_;
  std::atomic<uint64_t> sessions_expired_{0};
  // Requests with an id (FsRequest.request_id): served once, resends
  // answered the first answer.
  m2m::ReplyCache answered_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> callbacks_sent_{0};
  std::atomic<uint64_t> callbacks_failed_{0};
  std::atomic<uint64_t> lease_waits_{0};
  // Past a cache lease, for clocks that run a little apart.
  static constexpr std::chrono::milliseconds kLeaseMargin{100};
  std::atomic<uint64_t> inline_bytes_{0};
  std::atomic<uint64_t> one_sided_bytes_{0};
  std::atomic<uint64_t> coop_redirects_{0};  // reads answered with copies at other clients
  coop::HolderDirectory dir_;                // who caches which blocks (leaf lock)
  std::atomic<uint64_t> coop_epoch_{0};      // membership epoch dir_ was last checked in
  std::atomic<uint64_t> coop_forward_asked_{0}, coop_stored_{0};
  // Picks forwarding targets (FileServiceOptions::forward_seed).
  std::minstd_rand forward_rng_ FEDFS_GUARDED_BY(mu_);

  mutable Mutex mu_;  // leaf lock: never held across a call into local_ or the transport
  std::unordered_map<uint64_t, Session> sessions_ FEDFS_GUARDED_BY(mu_);
  uint64_t next_handle_ FEDFS_GUARDED_BY(mu_) = 0;
  // Who has each file open and is told of its changes: (session, handle).
  std::map<FileKey, std::set<std::pair<uint64_t, uint64_t>>> openers_ FEDFS_GUARDED_BY(mu_);
  std::atomic<size_t> open_watched_{0};                                 // entries in openers_
  std::atomic<uint64_t> watch_gen_{0};  // watches made so far (Session::Watch::made)
  // Handles opened by NameGoing and not yet handed over: (file, session) ->
  // (watch, remote handle); taken by the file's next AttrsChanged.
  std::map<std::pair<FileKey, uint64_t>, std::pair<uint64_t, uint64_t>> pins_ FEDFS_GUARDED_BY(mu_);
  std::atomic<uint64_t> pins_made_{0};
};

}  // namespace fedfs::ns
