// RemoteNodeFs: a NodeFs that forwards every operation to ONE other node,
// whose FileService (files/file_service.h) runs it on its LocalNodeFs.
// The Vfs holds one per remote node and calls it from FUSE worker threads.
//
// Data path. At construction the object registers one buffer pool with the
// transport (slot_count slots of slot_size bytes; Transport::Allocate, once).
// At first use (and after the server answers ENOTCONN: new connection or
// restarted server) it says Hello: its random session id, its process
// incarnation, its pool's descriptor and `local_address`, where the server
// connects back for one-sided transfers. Then:
//  * Read: take a free slot, send {handle, offset, len, slot}; the server
//    preads and Puts the bytes into the slot, replies {n}; copy out.
//  * Write: copy into a slot, send {handle, offset, len, slot}; the server
//    Gets the slot and pwrites.
// Requests larger than a slot are split into slot-sized chunks, up to
// max_parallel chunks in flight at once. Reads/writes of at most inline_max
// bytes, and all of them when local_address is empty or the pool could not be
// registered, carry their data inline in the RPC instead.
// After a data call fails with a transport error (timeout, reset, ...), its
// slot is quarantined for 2 x rpc_timeout + 1 s: the server never starts a
// transfer past the request's deadline, so no late one-sided write can land
// in a slot that was handed to another request.
//
// Releases. With `timers` set, ReleaseLater does not send a request of its
// own: the handle travels in the next request to the node (FsRequest.
// releases), or in a release of its own release_delay after the first one
// waiting, or at once when release_batch are waiting. The server says in its
// Hello reply that it takes them; an older one gets every release at once.
// A create-write-close costs one round trip instead of two.
//
// Errors: the errno of the remote system call as is; transport errors as the
// transport gives them (ETIMEDOUT at the deadline, ECONNREFUSED/EHOSTDOWN when
// the node cannot be reached, ECONNRESET, ...; docs/errors.md). Every method
// returns within rpc_timeout (plus the wait for a free slot, itself bounded by
// the same deadline). Handles are valid only in this object's session: after
// the server restarted they answer EBADF.
//
// Threads: every method blocks (call from worker threads, never from the
// transport's progress context). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cooperative.h"
#include "common/executor.h"
#include "common/timers.h"
#include "m2m/transport.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

class FsCallbacks;

struct RemoteNodeFsOptions {
  // Deadline of each operation (each chunk of a split Read/Write). Default 5 s.
  std::chrono::milliseconds rpc_timeout{5000};
  // This node's id, sent in Hello (server logs; cleanup when a node dies or
  // restarts). Default "".
  std::string local_node;
  // This transport's listen address, as peers reach it. Empty: no one-sided
  // data path, all data inline. Default "".
  std::string local_address;
  // The pool: slot_count slots of slot_size bytes. Default 8 x 1 MiB (per
  // remote node; lower it for large federations).
  size_t slot_size = 1u << 20;
  size_t slot_count = 8;
  // Reads/writes of at most this many bytes travel inline in the RPC.
  // Default 4 KiB (see the report in bench/remote_bench.cc).
  size_t inline_max = 4096;
  // Chunks of one large Read/Write in flight at once. Default 4.
  size_t max_parallel = 4;
  // Where this node takes the server's FsAttrChanged callbacks (needs
  // local_address). Null (default): the session takes none, and Opened's
  // attr_callbacks is false. Must outlive the object.
  FsCallbacks* callbacks = nullptr;
  // Where ReleaseLater's late releases are sent from (see "Releases" above).
  // Null (default): ReleaseLater is Release. Must outlive the object, which
  // must be owned by a shared_ptr for its releases to wait.
  Timers* timers = nullptr;
  std::chrono::milliseconds release_delay{20};
  size_t release_batch = 64;
  // This node's file-data cache, readable by other nodes (docs/coopcache.md):
  // announced in Hello, so that servers may send other readers to it, and
  // ReadCoop asks with it. block 0 (default): none.
  struct CoopRegions {
    uint64_t block = 0;
    m2m::RegionDesc data, tags;
  };
  CoopRegions coop;
};

// The client side of kFsAttrChanged (files/file_service.h), one per
// transport: installs the handler, knows the node of each RemoteNodeFs
// session that takes callbacks, and hands each callback to `on_changed`
// (that node's id, the handles named, the bytes the change may have
// altered, whether the watches named ended); the callback is answered when on_changed returns, so the file's
// node acknowledges the change only after it. A malformed callback is
// refused (EPROTO, logged); one for an unknown session is answered and
// dropped. on_changed runs on `runner` when one is given (it may then
// block, e.g. on the kernel's page locks), else on the transport's progress
// context, where it must not block. Thread-safe.
class FsCallbacks {
 public:
  using OnChanged = std::function<void(const std::string& node, const std::vector<Handle>& handles,
                                       DataRange data, bool ended)>;
  // Installs the handler: before the transport's Listen. `runner` must
  // outlive the transport's handlers (null: the progress context).
  FsCallbacks(m2m::Transport* transport, OnChanged on_changed, Executor* runner = nullptr);
  ~FsCallbacks();
  FsCallbacks(const FsCallbacks&) = delete;
  FsCallbacks& operator=(const FsCallbacks&) = delete;

  void Add(uint64_t session, const std::string& node);
  void Remove(uint64_t session);
  // What this node caches of node `node`'s files may be stale: the session
  // with it lapsed (`untold` false: the node may still tell of changes), or
  // the node no longer tells this one of changes through the handles and
  // watches it gave before (`untold`). `on_lost(node, untold)` drops it, on
  // `runner` when one is given. Set before use.
  using OnLost = std::function<void(const std::string& node, bool untold)>;
  void SetOnLost(OnLost on_lost);
  // A callback handed over handles the node opened before the change took
  // the name of files this node watches (file_service.h, "Deferred
  // opens"): (watch, handle) pairs, given to `on_pinned` before
  // on_changed, in the same task; it answers the handles it did not take,
  // given to `release` once the callback is answered (releasing may send
  // a request to that node, which waits for the answer meanwhile).
  // Without them set, the handles stay open until the session ends. Set
  // before use.
  using Pinned = std::vector<std::pair<Handle, Handle>>;
  using OnPinned = std::function<std::vector<Handle>(const std::string& node, const Pinned& pinned)>;
  using ReleasePinned = std::function<void(const std::string& node, const std::vector<Handle>& handles)>;
  void SetOnPinned(OnPinned on_pinned, ReleasePinned release);
  void Lost(const std::string& node, bool untold);
  // Callbacks handed to on_changed; refused as malformed.
  uint64_t received() const;
  uint64_t refused() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

class RemoteNodeFs final : public NodeFs, public std::enable_shared_from_this<RemoteNodeFs> {
 public:
  // `node_id`: the remote node's id; `endpoint`: to its transport address;
  // `transport`: this node's transport (the pool is registered on it; it
  // must outlive this object). Never fails: without a pool (registration
  // failed, logged) the data travels inline.
  RemoteNodeFs(std::string node_id, std::shared_ptr<m2m::Endpoint> endpoint,
               m2m::Transport* transport, RemoteNodeFsOptions options);
  // Ends the session (the server releases its handles; best effort, bounded
  // by min(rpc_timeout, 1 s)). No call may be in flight. If a data call failed
  // with a transport error less than 2 x rpc_timeout + 1 s ago, waits for that
  // quarantine to end before the pool is unregistered.
  ~RemoteNodeFs() override;

  const std::string& node_id() const override { return node_id_; }
  uint64_t SessionCount() const override { return hellos_.load(std::memory_order_acquire); }

  Result<struct stat> Stat(const Cred& c, const std::string& path) override;
  Result<WatchedStat> StatWatched(const Cred& c, const std::string& path) override;
  Result<std::vector<NamedWatchedStat>> StatWatchedAlong(const Cred& c, const std::string& dir,
                                                         const std::string& name, size_t along) override;
  Status Access(const Cred& c, const std::string& path, int mode) override;
  Result<std::vector<DirEntry>> ListDir(const Cred& c, const std::string& path) override;
  Result<struct stat> Mkdir(const Cred& c, const std::string& path, mode_t mode) override;
  Status MkdirParents(const std::string& path, const std::vector<DirTemplate>& templates) override;
  Status Rmdir(const Cred& c, const std::string& path) override;
  Result<struct stat> Mknod(const Cred& c, const std::string& path, mode_t mode,
                            dev_t rdev) override;
  Result<struct stat> Symlink(const Cred& c, const std::string& target,
                              const std::string& path) override;
  Result<std::string> Readlink(const Cred& c, const std::string& path) override;
  Status Unlink(const Cred& c, const std::string& path) override;
  Result<std::optional<struct stat>> UnlinkSeeingParent(const Cred& c,
                                                        const std::string& path) override;
  // UnlinkSeeingParent made for node `for_node` (FsRequest.for_node): the
  // server does not tell that node's sessions of the change either.
  Result<std::optional<struct stat>> UnlinkFor(const Cred& c, const std::string& path,
                                               const std::string& for_node);
  // Rename made for node `for_node`, likewise.
  Status RenameFor(const Cred& c, const std::string& from, const std::string& to, unsigned flags,
                   const std::string& for_node);
  Status Rename(const Cred& c, const std::string& from, const std::string& to,
                unsigned flags) override;
  Result<struct stat> Link(const Cred& c, const std::string& existing,
                           const std::string& newpath) override;
  Result<struct stat> SetAttr(const Cred& c, const std::string& path,
                              std::optional<Handle> handle, const SetAttrRequest& req) override;
  Result<struct statvfs> StatFs() override;
  Result<std::string> GetXattr(const Cred& c, const std::string& path, const std::string& name,
                               size_t size, size_t* needed) override;
  Status SetXattr(const Cred& c, const std::string& path, const std::string& name,
                  std::span<const std::byte> value, int flags) override;
  Result<std::string> ListXattr(const Cred& c, const std::string& path, size_t size,
                                size_t* needed) override;
  Status RemoveXattr(const Cred& c, const std::string& path, const std::string& name) override;
  Result<Opened> Open(const Cred& c, const std::string& path, int flags) override;
  Result<Opened> OpenExpecting(const Cred& c, const std::string& path, int flags,
                               uint64_t ino48, Handle watch) override;
  Result<Opened> Create(const Cred& c, const std::string& path, int flags, mode_t mode) override;
  Result<size_t> Read(Handle h, uint64_t offset, std::span<std::byte> dst) override;
  Result<CoopRead> ReadCoop(Handle h, uint64_t offset, std::span<std::byte> dst,
                            const CoopAsk& ask) override;
  Result<std::optional<CoopTarget>> CoopEvict(const CoopBlock& b) override;
  Result<CoopCopyAt> CoopStore(const CoopBlock& b) override;
  Status CoopMoved(const CoopBlock& b) override;
  using NodeFs::Write;
  Result<size_t> Write(Handle h, uint64_t offset, std::span<const std::byte> src,
                       const Writer& by) override;
  Status Flush(Handle h, uint64_t lock_owner) override;
  Status Fsync(Handle h, bool datasync) override;
  Status Fallocate(Handle h, int mode, uint64_t offset, uint64_t len) override;
  Status Release(Handle h) override;
  Status ReleaseLater(Handle h) override;
  Result<LockRange> GetLk(Handle h, uint64_t owner, const LockRange& want) override;
  Status SetLk(Handle h, uint64_t owner, const LockRange& want) override;
  Status Flock(Handle h, uint64_t owner, int op) override;

  struct Req;  // one encoded request's arguments (remote_node_fs.cc)

 private:
  using Clock = SteadyClock;  // simulated time in the simulator
  struct Slots;

  // Sends one request (Hello first when needed; once more after ENOTCONN);
  // the verified FsReply bytes or the errno.
  Result<m2m::Bytes> Call(const Req& req, Clock::time_point deadline);
  // `renew`: say it again for a session already said (its lease).
  Status Hello(Clock::time_point deadline, bool renew = false);
  // Keeps the session's lease at the server (FsHelloReply.session_lease_ms):
  // a Hello after every third of it without a request, through `timers`;
  // with a cache lease (FsHelloReply.cache_lease_ms) and callbacks, after
  // every fifth of that without an answer, and the session lapses (Lapse)
  // once three fifths of it passed since the sending of the last request
  // answered: well before the server acknowledges a change it could not
  // tell this node of (files/file_service.h, "Cut-off clients").
  void ScheduleRenewal();
  void Renew();
  Clock::duration RenewalPeriod() const;
  // How much longer than rpc_timeout a change waits for its answer: the
  // server may hold the answer for a callback that failed and the cache
  // lease after it (or its restart's grace): cache lease + 1.5 s, 0
  // without a lease.
  Clock::duration ChangeSlack() const;
  // A request sent at `sent` was answered.
  void Heard(Clock::time_point sent);
  // What this node caches of the server's files is no longer known to be
  // told of every change: SessionCount moves, FsCallbacks::Lost, and the
  // next request says Hello first.
  void Lapse(const char* why);
  Result<size_t> ReadInline(Handle h, uint64_t offset, std::span<std::byte> dst,
                            Clock::time_point deadline);
  Result<size_t> WriteInline(Handle h, uint64_t offset, std::span<const std::byte> src,
                             const Writer& by, Clock::time_point deadline);
  // Read (by null) or Write through the pool; see the header comment.
  Result<size_t> SlotIo(Handle h, uint64_t offset, std::byte* buf, size_t size,
                        const Writer* by, Clock::time_point deadline);
  size_t MaxIo() const;
  // Sends the releases waiting (one request of their own), if any.
  void SendReleases();
  // A kOpen request and its reply.
  Result<Opened> OpenAsked(const Req& req);

  const std::string node_id_;
  const std::shared_ptr<m2m::Endpoint> ep_;
  m2m::Transport* const transport_;
  RemoteNodeFsOptions opts_;  // callbacks cleared by the constructor without local_address
  const uint64_t session_;
  std::unique_ptr<Slots> slots_;  // null: inline only

  // Serializes Hellos; leaf, never held across other locks, but held across
  // the Hello call: a SuspendingMutex, so that a second fiber of the
  // simulator suspends for it instead of blocking its thread.
  SuspendingMutex hello_mu_;
  std::atomic<bool> helloed_{false};
  std::atomic<uint64_t> request_ids_{1};  // FsRequest.request_id, per session
  std::atomic<uint64_t> resends_{0};      // requests sent again after a lost message
  std::atomic<int64_t> lease_ms_{0};     // the server's session lease (0: none)
  std::atomic<bool> renewal_due_{false};  // a renewal is scheduled
  std::atomic<int64_t> last_call_{0};     // Clock ticks of the last request sent
  std::atomic<int64_t> heard_{0};  // Clock ticks of the sending of the last request answered
  std::atomic<int64_t> cache_lease_ms_{0};  // the server's cache lease (0: none)
  std::atomic<bool> lapsed_{false};         // Lapse, and no Hello since
  std::atomic<uint64_t> hellos_{0};  // Hellos that did not continue a session (SessionCount)
  std::atomic<uint64_t> max_io_{0};  // from the server's Hello reply
  std::atomic<bool> server_releases_{false};  // the server takes FsRequest.releases

  // Handles released by ReleaseLater and not yet sent; a timer is armed
  // while the list is not empty (releases_armed_). Leaf lock.
  std::mutex releases_mu_;
  std::vector<uint64_t> releases_;
  bool releases_armed_ = false;
};

}  // namespace fedfs::ns
