// FileService: the server side of remote file operations. Every node runs one;
// it serves the NodeFs operations that other nodes' RemoteNodeFs forward to
// this node (files/remote_node_fs.h), on this node's LocalNodeFs.
//
// Protocol (bodies in files/fs.fbs, ids in common/rpc_methods.h):
//  * kFsHello: a client session (one RemoteNodeFs object: a random 64-bit
//    session id) binds the connection it arrives on (PeerInfo::conn_id) and
//    hands over its buffer pool (one registered region of slot_count slots)
//    and its listen address. The server imports the pool on its own Endpoint
//    to that address. Sent at first use and again whenever the server
//    answers ENOTCONN (a new connection after a reconnect, or a restarted
//    server that forgot the session).
//  * kFsMeta: every NodeFs operation but Read/Write; kFsData: Read/Write.
//    One request table with an op code (fs.fbs says why).
//  * kFsAttrChanged (server -> client, to the client's listen address):
//    while a session that said `attr_callbacks` in Hello has a regular file
//    open, or watches it, every change of that file's attributes made on
//    this node (by another session, by this node's own mount, through
//    LocalNodeFs's AttrObserver; by a local program, through PathChanged
//    from the autonomy watcher) is told to it before the change is
//    acknowledged: {session, the handles and watches it has the file as,
//    the bytes the change may have altered (none for attributes only)}.
//    Not told to the session whose request made the change (its kernel saw
//    it), nor, for an unlink or rename made for another node
//    (FsRequest.for_node, a directory's manager acting for the node that
//    asked it), to that node's sessions. A watch comes from a Stat with `watch` of a regular file with one
//    link: the file is recorded before the stat whose answer is sent, and
//    the reply names the watch in `handle`; it lasts across the changes it
//    tells of; one watch per file and session, at most
//    max_watches_per_session, past which those stat'ed longest ago end and
//    are told like a change of every byte, marked `ended`. Open/Create and watched Stat replies
//    say whether the file is told (FsReply.attr_callbacks). Each callback
//    waits at most callback_timeout (one whose connection broke is sent
//    again within it); after one fails (logged) the session
//    is told nothing more (its watches end), and its later opens and stats
//    say so.
//  * Cut-off clients: a client that cannot be told of a change may still
//    have the old bytes in its kernel and cache. With `cache_lease` set
//    (told in the Hello reply), a client uses what it caches of this
//    server's files for at most cache_lease after sending its last request
//    that was answered, and drops it all then by itself
//    (RemoteNodeFs::SessionLost); a change whose callback failed is
//    acknowledged only once cache_lease passed since the client's last
//    request arrived here, and the client's later requests are answered
//    kErrSessionUnknown until it says Hello again, which tells it that it
//    was told no more (it drops what it caches; its handles stay): a client
//    whose requests are answered never lapses by itself, so without this a
//    client that the server could not reach while the client reached the
//    server (a connection back that broke) kept serving old bytes. So no
//    change is acknowledged while a client it could not tell may still
//    serve the bytes from before it. A restarted
//    server knows no client: it waits out the lease from its start (grace).
//    A client's changes wait that much longer for their answer
//    (RemoteNodeFs::ChangeSlack).
//  * Deferred opens: a client may answer a read-only open of a file it
//    watches without asking (vfs/vfs_impl.h, "Deferred opens"), and open
//    it here at its first use by path, expecting the same file (kOpen with
//    expect_ino: ESTALE if the name names another file or none). So
//    before a change takes the name of a file watched for other sessions
//    (an unlink of it, a rename of it or over it; NameGoing, from the
//    LocalNodeFs, under whoever changes it: a request, this node's mount),
//    the server opens it read-only as the daemon for each such session
//    that takes callbacks, at most once per file and session until told,
//    and hands the handle over in the change's callback
//    (FsAttrChanged.pinned_*): the client adopts it for its deferred opens
//    of the file, or releases it. Not for the session whose request made
//    the change, nor the node it was made for (their own nodes open their
//    deferred handles of the file before they ask). A change made by a
//    local program is seen after the fact: nothing is kept for it. Where
//    the path names another file or none (the file or its directory
//    renamed), a kOpen naming its watch (expect_watch) opens the file by
//    the file handle taken when the watch was made (NodeFs::FileHandleOf;
//    never sent), as the daemon, if its mode bits let the caller open it
//    so and it has no access ACL.
//  * Lost messages: a request with FsRequest.request_id (the operations
//    that change something) is run once per session and id, and a resend
//    answered the first answer (m2m/reply_cache.h); RemoteNodeFs resends
//    such requests, and the reading ones as they are, after a broken
//    connection (with time left before their deadline).
//  * Bulk data is one-sided, between pre-registered pools, no registration
//    per request: Read preads into one of the server's slots and Puts the
//    bytes into the client's slot named in the request, then replies {n};
//    Write Gets the client's slot into a server slot and pwrites it. Small
//    or pool-less requests carry their data inline in the RPC.
//
// Checks, in this order, before any work: the FlatBuffers verifier (EPROTO),
// the wire version (EPROTO), every path with ValidateGlobalPath (EINVAL or
// ENAMETOOLONG), the op code (EPROTO). Each refusal is logged at warn level
// with the peer's address and counted; the service keeps serving. The
// LocalNodeFs resolves paths beneath the export root again (EXDEV for a
// symlink escape) and runs the operation with the Cred in the request, after
// root squash when it is on (SquashCred). A Write names its writer and whether
// it lacks CAP_FSETID (node_fs.h, Writer); a root writer squashed here lacks
// it as well, so a squashed root's write clears set-ID bits as the squash
// uid's would.
//
// Handles. The server keeps, per session, a table remote handle -> local
// Handle; a request can use only the handles its own session opened (EBADF
// otherwise), and a session can be used only on connections that said Hello
// for it (ENOTCONN otherwise). Session ids are random 64-bit values chosen by
// authenticated cluster members; guessing one is the only way to borrow it.
// Cleanup: the transport gives no signal when a connection goes away, so
// sessions end (their handles released) when (a) the client says goodbye
// (RemoteNodeFs's destructor), (b) a session from the same client node with a
// new process incarnation says Hello (the client restarted), or (c) the
// daemon calls DropPeer() when membership declares the node dead, or (d) it
// was not renewed for `session_lease` (a client that vanished without a
// goodbye, or cut off). Until then a vanished client's open handles stay
// open: at most
// max_handles_per_session file descriptors per session, and at most
// max_sessions sessions (Hello beyond it: EAGAIN).
//
// Deadlines. A request carries the client's deadline budget; the server
// never starts the one-sided transfer or the pwrite of a data request once
// that budget has passed since the request's arrival (the client has given
// up and may reuse its slot after a quarantine, see remote_node_fs.h).
//
// Threads. Handlers run on the transport's progress context and only verify,
// validate and post; the work (session table, system calls, one-sided
// transfers, the reply) runs on `blocking`. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/executor.h"
#include "common/result.h"
#include "m2m/transport.h"
#include "nodefs/node_fs.h"

namespace fedfs::coop {
class BlockCache;
}

namespace fedfs::ns {

struct FileServiceOptions {
  // The server's registered pool: slot_count slots of slot_size bytes, used
  // as the local side of one-sided transfers. slot_size is also the largest
  // Read/Write length served per request (clients split larger ones).
  // Default 16 x 1 MiB.
  size_t slot_size = 1u << 20;
  size_t slot_count = 16;
  // Largest Read/Write carried inline in an RPC (no slot). Default 1 MiB.
  size_t max_inline = 1u << 20;
  // Open handles one session may hold (beyond: EMFILE). Default 65536.
  size_t max_handles_per_session = 65536;
  // Files a session may have watched at once (Stat with `watch`, about 300
  // bytes each); when full, the eighth stat'ed longest ago is unwatched (so
  // a scan of a large tree pays one callback per cap/8 files), and the
  // session told so in one message.
  size_t max_watches_per_session = 16384;
  // Sessions held at once (a Hello beyond: EAGAIN). Default 4096.
  size_t max_sessions = 4096;
  // A session not renewed for this long (no request, no Hello) ends: its
  // handles are released (and with them its locks), its watches end and the
  // connection back to its client is closed. Clients renew idle sessions
  // every third of it (RemoteNodeFs, told in the Hello reply). 0 (default):
  // sessions end only as below ("Cleanup").
  std::chrono::milliseconds session_lease{0};
  // Timeout of the connect-back and import at Hello, and the upper bound of
  // one one-sided transfer. Default 5 s.
  std::chrono::milliseconds transfer_timeout{5000};
  // Root squash (docs/config.md "security"). Every request this service
  // serves comes from another node, so with root_squash a caller's uid 0
  // runs as squash_uid, gid 0 as squash_gid, and group 0 is removed from its
  // supplementary groups. Off by default: remote root acts as root here.
  bool root_squash = false;
  uint32_t squash_uid = 65534;
  uint32_t squash_gid = 65534;
  // Called, on the serving thread, with the path (global, real names) of a
  // file or directory whose attributes a request just changed (setattr,
  // xattrs, link, truncating open, write, fallocate): this node's kernel may
  // cache them. Optional; must not block.
  std::function<void(const std::string& path)> on_change;
  // Called, on the serving thread, after each read or write a client node
  // made through a handle: the path it opened, the client's node id, the
  // bytes asked (the access trigger of file moves, migration/access.h).
  // Optional; must not block.
  std::function<void(const std::string& path, const std::string& node, uint64_t bytes)>
      on_access;
  // The membership epoch now (optional). Cooperative caching: every copy of
  // a file's blocks that other nodes keep is forgotten when it moves (a
  // node restarted or left: its cache's memory is no longer what was
  // named), before the next read is sent to one.
  std::function<uint64_t()> membership_epoch;
  // This node's file-data cache, where other nodes forward blocks
  // (docs/coopcache.md, "N-chance forwarding"). Null: none taken.
  coop::BlockCache* cache = nullptr;
  // The same cache as other nodes reach it (this node's id, listen address
  // and the cache's registered regions): the blocks of this node's own files
  // forwarded to it are named to readers like any other copy. node empty:
  // this node takes no forwards of its own files.
  struct SelfCache {
    std::string node, addr;
    m2m::RegionDesc data, tags;
  };
  SelfCache self_cache;
  // Seeds the choice of the node an evicted last copy is forwarded to (among
  // the nodes, by id, with a cache of the block's size); 0 (default): a
  // random seed. The simulator sets it, so that one seed gives one run.
  uint64_t forward_seed = 0;
  // Longest wait for a client's answer to an FsAttrChanged. Default 1 s.
  std::chrono::milliseconds callback_timeout{1000};
  // The cache lease ("Cut-off clients" above). Default 0: none.
  std::chrono::milliseconds cache_lease{0};
  // After a restart (the daemon sets it to cache_lease + a margin): for this
  // long from the construction, every change of a regular file made here
  // through FedFS is acknowledged only once it passed. Clients of the
  // previous process may still have the file cached, and this one does not
  // know them: by then each has said Hello again (a new session: it drops
  // what it cached) or gone without answers for its lease (dropped too).
  // Default 0.
  std::chrono::milliseconds grace{0};
};

// The credentials a request with `c` runs with under `o` (root squash).
Cred SquashCred(const FileServiceOptions& o, Cred c);

// The AttrObserver of this node's LocalNodeFs (set by the daemon).
class FileService final : public AttrObserver {
 public:
  // None of the pointers is owned. `local` is this node's LocalNodeFs;
  // `blocking` runs the system calls (a ThreadPool; its size bounds the
  // operations served at once). Destroy order: Shutdown the transport, drain
  // `blocking` (destroy it), then destroy this FileService, then the
  // transport.
  FileService(FileServiceOptions options, m2m::Transport* transport, NodeFs* local,
              Executor* blocking);
  ~FileService() override;
  FileService(const FileService&) = delete;
  FileService& operator=(const FileService&) = delete;

  // Allocates the pool and installs the kFsHello/kFsMeta/kFsData handlers.
  // Call once, before the transport's Listen. ENOMEM (or the transport's
  // errno) if the pool cannot be registered; nothing is installed then.
  Status RegisterHandlers();

  // Ends every session of client node `client_node` (as it said in Hello):
  // their handles are released. For the daemon, when membership declares the
  // node dead. Any thread except the progress context.
  void DropPeer(const std::string& client_node);

  // N-chance forwarding: this node's own cache evicted a forwarded block of
  // one of this node's files (at frame/tag): no reader is sent to it any
  // more. It is not forwarded again (this node's disk has it).
  void ForgetOwnCopy(uint64_t dev, uint64_t ino, uint64_t block, uint64_t index, uint32_t frame,
                     uint64_t tag);

  // While one lives, the changes this thread makes through this node's
  // LocalNodeFs are not told to the sessions of node `node` (an unlink or
  // rename a directory's manager makes here for that node, whose kernel saw it;
  // FsRequest.for_node for one made through another node). One thread.
  class ServingFor {
   public:
    explicit ServingFor(const std::string& node);
    ~ServingFor();
    ServingFor(const ServingFor&) = delete;
    ServingFor& operator=(const ServingFor&) = delete;
  };

  // AttrObserver: true while some session is told of some file's changes;
  // AttrsChanged tells the sessions that have file (dev, ino) open (see the
  // protocol above), naming the bytes the change may have altered. Any
  // thread except the progress context; blocks up to callback_timeout.
  bool Interested() const override;
  void AttrsChanged(dev_t dev, ino_t ino, DataRange data) override;
  // Before a file's name goes: see "Deferred opens" above.
  bool NameGoing(dev_t dev, ino_t ino, const std::string& path) override;
  // The same for a change made behind FedFS' back to `path` (global), which
  // is located first (the autonomy watcher's IN_ATTRIB / IN_MODIFY).
  void PathChanged(const std::string& path);

  struct Stats {
    uint64_t sessions = 0;  // live sessions
    uint64_t handles = 0;   // open remote handles over all sessions
    uint64_t watches = 0;   // files watched for sessions (Stat with `watch`)
    uint64_t refused = 0;   // requests refused before any work (malformed, bad path, ...)
    uint64_t served = 0;    // requests that ran an operation (success or errno)
    uint64_t callbacks_sent = 0;    // FsAttrChanged sent
    uint64_t callbacks_failed = 0;  // of those, not answered in time (or refused)
    uint64_t pinned = 0;  // files opened before their name went, for deferred opens
    uint64_t lease_waits = 0;       // changes acknowledged after a cache lease ran out
    // Read/Write data moved, by path: carried in the RPC itself, or one-sided
    // between the pools (the bytes a Read Put into a client's slot, a Write
    // Got from one).
    uint64_t inline_bytes = 0;
    uint64_t one_sided_bytes = 0;
    // Cooperative caching (docs/coopcache.md): reads answered with copies at
    // other clients, and the holder directory's files and copies now.
    uint64_t coop_redirects = 0;
    uint64_t coop_files = 0;
    uint64_t coop_copies = 0;
    // N-chance forwarding: evictions answered with a peer to take the
    // block, and blocks other nodes forwarded here.
    uint64_t coop_forward_asked = 0;
    uint64_t coop_stored = 0;
    uint64_t sessions_expired = 0;  // ended for want of renewal (session_lease)
  };
  Stats stats() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
  const std::chrono::steady_clock::time_point grace_until_;  // FileServiceOptions::grace
};

}  // namespace fedfs::ns
