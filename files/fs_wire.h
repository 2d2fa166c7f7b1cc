// Internal to fedfs_ns_remote (file_service.cc, remote_node_fs.cc): the
// conversions between NodeFs types and the FlatBuffers bodies of
// files/fs.fbs, and the constants both ends share. Pure functions; any
// thread. Not for other modules.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "fs_generated.h"
#include "common/result.h"
#include "m2m/transport.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns::fswire {

namespace fb = fedfs::ns::wire;

inline constexpr uint32_t kVersion = 1;
// Most handles one FsRequest may release (FsRequest.releases).
inline constexpr size_t kMaxReleases = 256;
// Most entries one kStatMany may ask for after the one it names.
inline constexpr size_t kMaxStatMany = 128;
// The server answers ENOTCONN when a request names a session that is unknown
// or not bound to the connection it arrived on: the client says Hello again
// (new connection, or the server restarted) and retries once.
inline constexpr int kErrSessionUnknown = ENOTCONN;

// SetAttr presence bits (FsRequest.setattr_mask).
inline constexpr uint32_t kSaMode = 1, kSaUid = 2, kSaGid = 4, kSaSize = 8, kSaAtime = 16,
                          kSaMtime = 32;

fb::Stat ToWire(const struct stat& st);
struct stat FromWire(const fb::Stat& w);
fb::StatVfs ToWire(const struct statvfs& st);
struct statvfs FromWire(const fb::StatVfs& w);

flatbuffers::Offset<fb::Cred> ToWire(flatbuffers::FlatBufferBuilder& b, const Cred& c);
// A missing cred table decodes as nobody (65534:65534), never as root.
Cred FromWire(const fb::Cred* c);

// The server's check of a verified FsRequest before any work: EPROTO for
// another version or an unknown op; EINVAL unless every path the op uses is
// present and a valid global path (common/path.h), or if the target (a
// symlink target or xattr name) holds a NUL. Fields the op does not use are
// not looked at.
Status CheckRequest(const fb::FsRequest* req);

// The handles of a verified FsAttrChanged, copied bytewise: the verifier
// checks that a vector's length word is 4-aligned, not that its 8-byte
// elements are 8-aligned, so a crafted buffer may place them 4 bytes off
// (reading them in place would then be a misaligned load).
std::vector<Handle> HandlesOf(const fb::FsAttrChanged& a);
// Its (pinned_watches[i], pinned_handles[i]) pairs; the vectors checked to
// pair up before.
std::vector<std::pair<Handle, Handle>> PinnedOf(const fb::FsAttrChanged& a);
// FsRequest.coop_frames as (frame, tag), copied out bytewise (the verifier
// does not check the 8-byte alignment of a struct vector's elements).
std::vector<std::pair<uint32_t, uint64_t>> CoopFramesOf(const fb::FsRequest& r);
// A copy of block `index` (`length` bytes) kept at frame/tag of the cache
// at `addr` whose arena and tag array are `data` and `tags`, and back.
flatbuffers::Offset<fb::CoopCopy> CoopCopyToWire(flatbuffers::FlatBufferBuilder& b,
                                                 uint64_t index, uint32_t length,
                                                 const std::string& addr,
                                                 const m2m::RegionDesc& data,
                                                 const m2m::RegionDesc& tags, uint32_t frame,
                                                 uint64_t tag);
NodeFs::CoopCopyAt CoopCopyFromWire(const fb::CoopCopy& c);

// A verifier sized for these messages (bounded depth and table count).
// Untrusted bytes: nullptr unless the FlatBuffers verifier accepts them as a
// T (no crash, whatever they are); then the root, pointing into `bytes`.
// The bytes must be 8-aligned (FlatBuffers reads scalars in place; an
// m2m::Bytes payload is).
template <class T>
const T* Verify(std::span<const std::byte> bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) || bytes.size() > (1u << 30)) return nullptr;
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 8;
  opts.max_tables = 1u << 20;  // ListDir replies carry one table per entry
  flatbuffers::Verifier v(data, bytes.size(), opts);
  if (!v.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(data);
}

inline m2m::Bytes Finish(flatbuffers::FlatBufferBuilder& b) {
  const auto* p = reinterpret_cast<const std::byte*>(b.GetBufferPointer());
  return m2m::Bytes(p, p + b.GetSize());
}

}  // namespace fedfs::ns::fswire
