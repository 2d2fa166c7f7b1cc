// Migration (migration.h): the delta of a file written during its copy. L,
// with the file frozen, hashes each chunk of it and sends the hashes with
// its attributes (kMigDelta); T compares them with the hashes of the chunks
// it copied, copies again those that differ from L (reads pass the freeze),
// sets size and attributes, fsyncs. A writer waits only for the hashing and
// the changed chunks, not for a second copy of the whole file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>

#include "common/logging.h"
#include "common/path.h"
#include "common/rpc_methods.h"
#include "migration/migration.h"
#include "migration/migration_internal.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("migration"); }

// Reads [off, off + buf.size()) through `read` until full or end of file.
template <class Read>
Result<size_t> ReadFull(Read read, uint64_t off, std::span<std::byte> buf) {
  size_t got = 0;
  while (got < buf.size()) {
    auto n = read(off + got, buf.subspan(got));
    if (!n) return Err(n.error());
    if (*n == 0) break;
    got += *n;
  }
  return got;
}

}  // namespace

uint64_t DeltaBlock(uint64_t size, uint64_t block) {
  while ((size + block - 1) / block > kMaxDeltaChunks) block *= 2;
  return block;
}

ChunkHashValue ChunkHash(const std::byte* data, size_t n) {
  const XXH128_hash_t h = XXH3_128bits(data, n);
  return ChunkHashValue{h.low64, h.high64};
}

Result<uint64_t> Migration::SendDelta(const Rec& r, const struct stat& st) {
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t chunk = DeltaBlock(size, options_.delta_block);
  const uint64_t chunks = (size + chunk - 1) / chunk;
  auto h = local_->Open(Cred{}, r.path, O_RDONLY);
  if (!h) return Err(h.error());
  MoveMsg m;
  m.id = r.id;
  m.path = r.path;
  m.from = node_id_;
  m.size = size;
  m.mode = st.st_mode & 07777;
  m.uid = st.st_uid;
  m.gid = st.st_gid;
  m.atime_ns = Ns(st.st_atim);
  m.mtime_ns = Ns(st.st_mtim);
  m.chunk = chunk;
  // Read in runs of blocks (one call per MiB or so), hashed block by block.
  const uint64_t run = std::max<uint64_t>(chunk, options_.chunk / chunk * chunk);
  std::vector<std::byte> buf(run);
  Error why{0, {}};
  for (uint64_t off = 0; off < size && m.hashes.size() < chunks;) {
    auto n = ReadFull(
        [&](uint64_t o, std::span<std::byte> b) { return local_->Read(h->handle, o, b); }, off,
        buf);
    if (!n) {
      why = n.error();
      break;
    }
    if (*n == 0) break;  // shorter now than `st` says: hashes run out, T recopies the tail
    for (uint64_t b = 0; b < *n && m.hashes.size() < chunks; b += chunk) {
      m.hashes.push_back(ChunkHash(buf.data() + b, static_cast<size_t>(std::min(chunk, *n - b))));
    }
    off += *n;
  }
  while (m.hashes.size() < chunks) m.hashes.push_back(ChunkHashValue{});  // (truncated meanwhile)
  (void)local_->Release(h->handle);
  if (why.code != 0) return Err(std::move(why));
  auto a = Call(r.peer, MethodId(RpcMethod::kMigDelta), EncodeMsg(m), options_.copy_timeout);
  if (!a) return Err(a.error());
  auto answer = DecodeMsg(*a);
  if (!answer) return Err(answer.error());
  std::lock_guard lock(mu_);
  stats_.deltas++;
  stats_.delta_bytes += answer->bytes;
  return answer->bytes;
}

void Migration::OnDelta(m2m::IncomingCall call, m2m::Responder r) {
  auto m = DecodeMsg(call.payload);
  if (m && (m->path.empty() || m->from.empty() || m->chunk == 0 || m->chunk > (64u << 20))) {
    m = Err(EPROTO, "kMigDelta: no path, sender or chunk size");
  }
  if (m && (m->size + m->chunk - 1) / m->chunk != m->hashes.size()) {
    m = Err(EPROTO, "kMigDelta: the hashes do not cover the size");
  }
  if (!m) {
    Log()->warn("refused kMigDelta from {}: {}", call.peer.remote_addr, m.error().ToString());
    return r.Fail(Error{EPROTO, m.error().context});
  }
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, m = std::move(*m), shared] {
    auto [rec, staged] = Receiving(m);
    if (rec == nullptr) return shared->Fail(Error{ENOENT, "no copy of that move here"});
    // This end's hashes: those of the copy when it was hashed in the same
    // chunks, else the staged file's now.
    std::vector<ChunkHashValue> mine;
    std::vector<std::byte> buf(m.chunk);
    if (staged->aligned && m.chunk == options_.delta_block) {
      mine = staged->hashes;
    } else {
      struct stat st {};
      if (fstat(staged->fd, &st) != 0) return shared->Fail(Error{errno, "fstat of the copy"});
      for (uint64_t off = 0; off < static_cast<uint64_t>(st.st_size); off += m.chunk) {
        ssize_t n = pread(staged->fd, buf.data(), buf.size(), static_cast<off_t>(off));
        if (n < 0) return shared->Fail(Error{errno, "read of the copy"});
        mine.push_back(ChunkHash(buf.data(), static_cast<size_t>(n)));
      }
    }
    NodeFs* src = fs_for_ ? fs_for_(m.from) : nullptr;
    if (src == nullptr) return shared->Fail(Error{EHOSTDOWN, "no way to reach " + m.from});
    auto h = src->Open(Cred{}, m.path, O_RDONLY);
    if (!h) return shared->Fail(h.error());
    uint64_t bytes = 0;
    Error why{0, {}};
    for (size_t i = 0; i < m.hashes.size() && why.code == 0; ++i) {
      // The last chunk of either copy differs in length when the size did.
      if (i < mine.size() && mine[i] == m.hashes[i] && i + 1 != mine.size()) continue;
      if (i >= mine.size()) mine.resize(i + 1);
      const uint64_t off = i * m.chunk;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(m.chunk, m.size - off));
      auto n = ReadFull(
          [&](uint64_t o, std::span<std::byte> b) { return src->Read(h->handle, o, b); }, off,
          std::span<std::byte>(buf.data(), len));
      if (!n) {
        why = n.error();
        break;
      }
      if (AllZero(buf.data(), *n)) {
        if (*n > 0 && fallocate(staged->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                static_cast<off_t>(off), static_cast<off_t>(*n)) != 0) {
          why = Error{errno, "punch of the copy"};
        }
      } else {
        for (size_t done = 0; done < *n && why.code == 0;) {
          ssize_t w = pwrite(staged->fd, buf.data() + done, *n - done,
                             static_cast<off_t>(off + done));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) why = Error{w < 0 ? errno : EIO, "write of the copy"};
          else done += static_cast<size_t>(w);
        }
      }
      bytes += *n;
      mine[i] = ChunkHash(buf.data(), *n);  // what the copy holds now
    }
    mine.resize(m.hashes.size());
    staged->hashes = std::move(mine);  // one delta at a time per move (L waits for each)
    staged->aligned = true;
    if (m.chunk != options_.delta_block) staged->aligned = false;
    if (why.code == 0 && ftruncate(staged->fd, static_cast<off_t>(m.size)) != 0) {
      why = Error{errno, "truncate of the copy"};
    }
    if (why.code == 0) {
      if (auto s = ApplyMeta(staged->fd, src, m); !s) why = s.error();
    }
    (void)src->Release(h->handle);
    if (why.code != 0) return shared->Fail(std::move(why));
    Step("mig:t-delta");
    MoveMsg a;
    a.from = node_id_;
    a.bytes = bytes;
    shared->Reply(EncodeMsg(a));
  });
}

}  // namespace fedfs::ns
