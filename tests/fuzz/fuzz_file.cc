// libFuzzer target: the file service's messages (files/fs_wire.h,
// files/fs.fbs): what FileService accepts from other nodes (FsHello,
// FsRequest through fswire::Verify and fswire::CheckRequest) and what
// RemoteNodeFs accepts from a server (FsHelloReply, FsReply, FsAttrChanged).
//
// Input: one byte choosing the message (mod 5), then its bytes. Every field
// of a verified message is read as the server or client reads it (ASan
// catches a read the verifier let through out of bounds). Invariants: an
// FsRequest that passes CheckRequest names valid global paths where its op
// uses them; rebuilding a verified FsRequest from its fields gives a buffer
// that verifies, with equal fields and the same CheckRequest answer.
#include <sys/stat.h>

#include <cstring>

#include "fuzz_util.h"
#include "files/fs_wire.h"
#include "common/path.h"

using namespace fedfs;
using namespace fedfs::ns;
namespace fb = fedfs::ns::fswire::fb;

namespace {

enum Which : uint8_t { kRequest, kHello, kHelloReply, kReply, kAttrChanged, kCount };

// Sinks for the fields read, so nothing is optimised away.
volatile uint64_t g_sink;

void Touch(const flatbuffers::String* s) {
  if (s == nullptr) return;
  const std::string copy = s->str();
  g_sink = g_sink + copy.size() + (copy.empty() ? 0 : static_cast<uint8_t>(copy.back()));
}
template <class T>
void Touch(const flatbuffers::Vector<T>* v) {
  if (v == nullptr) return;
  for (auto x : *v) g_sink = g_sink + static_cast<uint64_t>(x);
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// Rebuilds `r` field by field (what RemoteNodeFs would have sent).
m2m::Bytes Rebuild(const fb::FsRequest* r) {
  flatbuffers::FlatBufferBuilder b(256);
  auto str = [&](const flatbuffers::String* s) {
    return s ? b.CreateString(s->data(), s->size()) : flatbuffers::Offset<flatbuffers::String>();
  };
  auto path = str(r->path()), path2 = str(r->path2()), target = str(r->target());
  auto data = r->data() ? b.CreateVector(r->data()->data(), r->data()->size())
                        : flatbuffers::Offset<flatbuffers::Vector<uint8_t>>();
  auto cred = r->cred() ? fswire::ToWire(b, fswire::FromWire(r->cred()))
                        : flatbuffers::Offset<fb::Cred>();
  flatbuffers::Offset<flatbuffers::Vector<const fb::DirTemplate*>> templates;
  if (r->templates()) {
    // Copied bytewise: a crafted request may have them misaligned (which
    // CheckRequest refuses; Rebuild runs on every verified request).
    std::vector<fb::DirTemplate> t(r->templates()->size());
    if (!t.empty()) std::memcpy(t.data(), r->templates()->Data(), t.size() * sizeof(fb::DirTemplate));
    templates = b.CreateVectorOfStructs(t);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> names;
  if (r->names()) {
    std::vector<flatbuffers::Offset<flatbuffers::String>> n;
    for (const flatbuffers::String* s : *r->names()) n.push_back(b.CreateString(s ? s->str() : std::string()));
    names = b.CreateVector(n);
  }
  flatbuffers::Offset<flatbuffers::Vector<const fb::CoopFrame*>> frames;
  if (r->coop_frames()) {
    std::vector<fb::CoopFrame> f;
    for (const auto& [frame, tag] : fswire::CoopFramesOf(*r)) f.emplace_back(frame, tag);
    frames = b.CreateVectorOfStructs(f);
  }
  fb::FsRequestBuilder rb(b);
  rb.add_version(r->version());
  if (!frames.IsNull()) rb.add_coop_frames(frames);
  rb.add_coop_block(r->coop_block());
  rb.add_coop_replace(r->coop_replace());
  rb.add_session(r->session());
  rb.add_op(r->op());
  if (!cred.IsNull()) rb.add_cred(cred);
  if (!path.IsNull()) rb.add_path(path);
  if (!path2.IsNull()) rb.add_path2(path2);
  if (!target.IsNull()) rb.add_target(target);
  if (!data.IsNull()) rb.add_data(data);
  if (!templates.IsNull()) rb.add_templates(templates);
  if (!names.IsNull()) rb.add_names(names);
  rb.add_flags(r->flags());
  rb.add_mode(r->mode());
  rb.add_rdev(r->rdev());
  rb.add_handle(r->handle());
  rb.add_has_handle(r->has_handle());
  rb.add_offset(r->offset());
  rb.add_length(r->length());
  rb.add_slot(r->slot());
  rb.add_budget_us(r->budget_us());
  rb.add_owner(r->owner());
  rb.add_lock_type(r->lock_type());
  rb.add_lock_start(r->lock_start());
  rb.add_lock_len(r->lock_len());
  rb.add_lock_pid(r->lock_pid());
  rb.add_setattr_mask(r->setattr_mask());
  rb.add_watch(r->watch());
  rb.add_sa_mode(r->sa_mode());
  rb.add_sa_uid(r->sa_uid());
  rb.add_sa_gid(r->sa_gid());
  rb.add_sa_size(r->sa_size());
  rb.add_sa_atime_sec(r->sa_atime_sec());
  rb.add_sa_atime_nsec(r->sa_atime_nsec());
  rb.add_sa_mtime_sec(r->sa_mtime_sec());
  rb.add_sa_mtime_nsec(r->sa_mtime_nsec());
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

bool SameCred(const fb::FsRequest* a, const fb::FsRequest* b) {
  const Cred x = fswire::FromWire(a->cred()), y = fswire::FromWire(b->cred());
  return x.uid == y.uid && x.gid == y.gid && x.groups == y.groups && x.umask == y.umask;
}

void FuzzRequest(const m2m::Bytes& bytes) {
  const fb::FsRequest* r = fswire::Verify<fb::FsRequest>(bytes);
  if (r == nullptr) return;
  // What FileService::Run reads.
  const Cred cred = fswire::FromWire(r->cred());
  g_sink = g_sink + cred.uid + cred.groups.size();
  Touch(r->path());
  Touch(r->path2());
  Touch(r->target());
  Touch(r->for_node());
  Touch(r->data());
  const auto coop_frames = fswire::CoopFramesOf(*r);
  FUZZ_CHECK(coop_frames.size() == (r->coop_frames() ? r->coop_frames()->size() : 0));
  for (const auto& [frame, tag] : coop_frames) g_sink = g_sink + frame + tag;
  g_sink = g_sink + r->coop_block() + r->coop_replace();
  const Status st = fswire::CheckRequest(r);
  if (st) {
    // Read by FileService::Run only once checked (aligned: fs_wire.cc).
    if (r->templates()) {
      for (const fb::DirTemplate* t : *r->templates()) g_sink = g_sink + t->mode() + t->uid() + t->gid();
    }
    FUZZ_CHECK(r->version() == fswire::kVersion);
    FUZZ_CHECK(r->op() != fb::Op::kInvalid && r->op() <= fb::Op::kStatMany);
    // A kStatMany names one valid entry and at most kMaxStatMany after it.
    if (r->op() == fb::Op::kStatMany) {
      FUZZ_CHECK(r->names() != nullptr && r->names()->size() == 1 && r->names()->Get(0) != nullptr &&
                 ValidateName(r->names()->Get(0)->string_view()));
      FUZZ_CHECK(r->length() <= fswire::kMaxStatMany);
    }
    // Every op before kRead but kStatFs, and kAccess, names a path (fs.fbs).
    if ((r->op() < fb::Op::kRead && r->op() != fb::Op::kStatFs) || r->op() == fb::Op::kAccess) {
      FUZZ_CHECK(r->path() != nullptr && ValidateGlobalPath(r->path()->string_view()));
    }
    if (r->op() == fb::Op::kRename || r->op() == fb::Op::kLink) {
      FUZZ_CHECK(r->path2() != nullptr && ValidateGlobalPath(r->path2()->string_view()));
    }
    if (r->target() != nullptr) {
      FUZZ_CHECK(std::memchr(r->target()->data(), 0, r->target()->size()) == nullptr);
    }
  } else {
    FUZZ_CHECK(st.error().code == EPROTO || st.error().code == EINVAL ||
               st.error().code == ENAMETOOLONG);
  }

  const m2m::Bytes again = Rebuild(r);
  const fb::FsRequest* b = fswire::Verify<fb::FsRequest>(again);
  FUZZ_CHECK(b != nullptr);
  FUZZ_CHECK(b->version() == r->version() && b->session() == r->session() && b->op() == r->op());
  FUZZ_CHECK(Str(b->path()) == Str(r->path()) && Str(b->path2()) == Str(r->path2()) &&
             Str(b->target()) == Str(r->target()));
  FUZZ_CHECK((b->path() == nullptr) == (r->path() == nullptr));
  FUZZ_CHECK((b->data() == nullptr) == (r->data() == nullptr));
  if (r->data()) {
    FUZZ_CHECK(b->data()->size() == r->data()->size() &&
               std::memcmp(b->data()->data(), r->data()->data(), r->data()->size()) == 0);
  }
  FUZZ_CHECK(SameCred(r, b));
  FUZZ_CHECK(b->offset() == r->offset() && b->length() == r->length() && b->slot() == r->slot() &&
             b->flags() == r->flags() && b->handle() == r->handle());
  FUZZ_CHECK(b->coop_block() == r->coop_block() && b->coop_replace() == r->coop_replace());
  FUZZ_CHECK((b->coop_frames() == nullptr) == (r->coop_frames() == nullptr));
  FUZZ_CHECK(fswire::CoopFramesOf(*b) == fswire::CoopFramesOf(*r));
  const Status st2 = fswire::CheckRequest(b);
  // Rebuild lays the templates out aligned: a refusal of the original's
  // layout (misaligned templates) is the one answer the copy may not share.
  const bool layout = !st && st.error().context.find("misaligned") != std::string::npos;
  if (!layout) {
    FUZZ_CHECK(st.has_value() == st2.has_value());
    if (!st) FUZZ_CHECK(st.error().code == st2.error().code);
  }
}

void FuzzHello(const m2m::Bytes& bytes) {
  const fb::FsHello* h = fswire::Verify<fb::FsHello>(bytes);
  if (h == nullptr) return;
  // What FileService::DoHello reads.
  Touch(h->client_node());
  Touch(h->client_addr());
  Touch(h->pool_rkey());
  Touch(h->cache_rkey());
  Touch(h->tags_rkey());
  g_sink = g_sink + h->cache_block() + h->cache_addr() + h->cache_length() + h->tags_addr() +
           h->tags_length();
  g_sink = g_sink + h->version() + h->session() + h->incarnation() + h->pool_addr() +
           h->pool_length() + h->slot_size() + h->slot_count() + h->bye() + h->attr_callbacks();
}

void FuzzHelloReply(const m2m::Bytes& bytes) {
  const fb::FsHelloReply* h = fswire::Verify<fb::FsHelloReply>(bytes);
  if (h == nullptr) return;
  g_sink = g_sink + h->version() + h->max_io();
}

void FuzzReply(const m2m::Bytes& bytes) {
  const fb::FsReply* r = fswire::Verify<fb::FsReply>(bytes);
  if (r == nullptr) return;
  // What RemoteNodeFs reads from a reply.
  if (r->stat()) {
    const struct stat st = fswire::FromWire(*r->stat());
    g_sink = g_sink + st.st_ino + st.st_size;
    const struct stat back = fswire::FromWire(fswire::ToWire(st));
    FUZZ_CHECK(back.st_dev == st.st_dev && back.st_ino == st.st_ino &&
               back.st_mode == st.st_mode && back.st_nlink == st.st_nlink &&
               back.st_size == st.st_size && back.st_mtim.tv_nsec == st.st_mtim.tv_nsec);
  }
  if (r->statvfs()) {
    const struct statvfs sv = fswire::FromWire(*r->statvfs());
    g_sink = g_sink + sv.f_blocks;
  }
  if (r->entries()) {
    for (const fb::DirEntry* e : *r->entries()) {
      Touch(e->name());
      g_sink = g_sink + e->type() + e->ino();
    }
  }
  Touch(r->data());
  if (r->copies()) {
    for (const fb::CoopCopy* c : *r->copies()) {
      Touch(c->addr());
      Touch(c->data_rkey());
      Touch(c->tags_rkey());
      g_sink = g_sink + c->index() + c->length() + c->data_addr() + c->data_length() +
               c->tags_addr() + c->tags_length() + c->frame() + c->tag();
    }
  }
  g_sink = g_sink + r->version() + r->handle() + r->n() + r->lock_type() + r->lock_start() +
           r->lock_len() + r->lock_pid() + r->attr_callbacks();
}

void FuzzAttrChanged(const m2m::Bytes& bytes) {
  const fb::FsAttrChanged* a = fswire::Verify<fb::FsAttrChanged>(bytes);
  if (a == nullptr) return;
  // What FsCallbacks reads (the handles through HandlesOf).
  const std::vector<Handle> handles = fswire::HandlesOf(*a);
  FUZZ_CHECK(handles.size() == (a->handles() ? a->handles()->size() : 0));
  for (Handle h : handles) g_sink = g_sink + h;
  // The pinned pairs (PinnedOf: never more than the shorter vector).
  const auto pinned = fswire::PinnedOf(*a);
  FUZZ_CHECK(pinned.size() <= (a->pinned_watches() ? a->pinned_watches()->size() : 0));
  for (const auto& [w, h] : pinned) g_sink = g_sink + w + h;
  g_sink = g_sink + a->version() + a->session();
}

// Seeds: requests as RemoteNodeFs builds them, one per kind of op.
m2m::Bytes Request(fb::Op op, const char* path, const char* path2 = nullptr,
                   const char* target = nullptr, std::string_view data = {}, int32_t slot = -1) {
  flatbuffers::FlatBufferBuilder b(256);
  auto p = path ? b.CreateString(path) : flatbuffers::Offset<flatbuffers::String>();
  auto p2 = path2 ? b.CreateString(path2) : flatbuffers::Offset<flatbuffers::String>();
  auto t = target ? b.CreateString(target) : flatbuffers::Offset<flatbuffers::String>();
  auto d = data.empty() ? flatbuffers::Offset<flatbuffers::Vector<uint8_t>>()
                        : b.CreateVector(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  Cred c;
  c.uid = 1000;
  c.gid = 1000;
  c.groups = {1000, 27};
  c.umask = 022;
  auto cred = fswire::ToWire(b, c);
  std::vector<fb::DirTemplate> tv = {{0755, 0, 0, 0}, {0700, 1000, 1000, 0}};
  auto templates = op == fb::Op::kMkdirParents ? b.CreateVectorOfStructs(tv)
                                               : flatbuffers::Offset<flatbuffers::Vector<const fb::DirTemplate*>>();
  const std::vector<std::string> one{"f001"};
  auto names = op == fb::Op::kStatMany ? b.CreateVectorOfStrings(one)
                                       : flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>>();
  fb::FsRequestBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_session(0x1122334455667788);
  rb.add_op(op);
  rb.add_cred(cred);
  if (!p.IsNull()) rb.add_path(p);
  if (!p2.IsNull()) rb.add_path2(p2);
  if (!t.IsNull()) rb.add_target(t);
  if (!d.IsNull()) rb.add_data(d);
  if (!templates.IsNull()) rb.add_templates(templates);
  if (!names.IsNull()) rb.add_names(names);
  rb.add_mode(0644);
  rb.add_handle(5);
  rb.add_has_handle(op == fb::Op::kRead || op == fb::Op::kWrite);
  rb.add_length(data.empty() ? 4096 : data.size());
  rb.add_slot(slot);
  rb.add_budget_us(5'000'000);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

void MakeSeeds(fuzz::Seeds& s) {
  auto add = [&](const char* name, Which w, const m2m::Bytes& bytes) {
    s.Add(name, std::string(1, static_cast<char>(w)), bytes);
  };
  add("req_stat", kRequest, Request(fb::Op::kStat, "/a/b"));
  add("req_stat_many", kRequest, Request(fb::Op::kStatMany, "/a"));
  add("req_rename", kRequest, Request(fb::Op::kRename, "/a", "/b"));
  add("req_symlink", kRequest, Request(fb::Op::kSymlink, "/l", nullptr, "../target"));
  add("req_mkdir_parents", kRequest, Request(fb::Op::kMkdirParents, "/x/y/z"));
  add("req_setxattr", kRequest, Request(fb::Op::kSetXattr, "/f", nullptr, "user.k", "value"));
  add("req_write_inline", kRequest, Request(fb::Op::kWrite, nullptr, nullptr, nullptr, "hello"));
  add("req_read_slot", kRequest, Request(fb::Op::kRead, nullptr, nullptr, nullptr, {}, 2));
  {
    flatbuffers::FlatBufferBuilder b(128);
    auto node = b.CreateString("n2");
    auto addr = b.CreateString("10.0.0.2:7000");
    const uint8_t rkey[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    auto k = b.CreateVector(rkey, sizeof rkey);
    fb::FsHelloBuilder hb(b);
    hb.add_version(fswire::kVersion);
    hb.add_session(42);
    hb.add_incarnation(7);
    hb.add_client_node(node);
    hb.add_client_addr(addr);
    hb.add_pool_addr(0x7f0000000000);
    hb.add_pool_length(8u << 20);
    hb.add_pool_rkey(k);
    hb.add_slot_size(1u << 20);
    hb.add_slot_count(8);
    hb.add_attr_callbacks(true);
    b.Finish(hb.Finish());
    add("hello", kHello, fswire::Finish(b));
  }
  {
    flatbuffers::FlatBufferBuilder b(64);
    fb::FsHelloReplyBuilder hb(b);
    hb.add_version(fswire::kVersion);
    hb.add_max_io(4096);
    b.Finish(hb.Finish());
    add("hello_reply", kHelloReply, fswire::Finish(b));
  }
  {
    flatbuffers::FlatBufferBuilder b(256);
    struct stat st {};
    st.st_ino = 12;
    st.st_mode = S_IFREG | 0644;
    st.st_nlink = 1;
    st.st_size = 5;
    const fb::Stat ws = fswire::ToWire(st);
    std::vector<flatbuffers::Offset<fb::DirEntry>> ev = {
        fb::CreateDirEntry(b, b.CreateString("f"), 8, 12)};
    auto entries = b.CreateVector(ev);
    const uint8_t hello[] = {'h', 'e', 'l', 'l', 'o'};
    auto data = b.CreateVector(hello, sizeof hello);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    rb.add_stat(&ws);
    rb.add_entries(entries);
    rb.add_data(data);
    rb.add_n(5);
    b.Finish(rb.Finish());
    add("reply", kReply, fswire::Finish(b));
  }
  {
    flatbuffers::FlatBufferBuilder b(64);
    const std::vector<uint64_t> h = {5, 9};
    auto hv = b.CreateVector(h);
    fb::FsAttrChangedBuilder ab(b);
    ab.add_version(fswire::kVersion);
    ab.add_session(42);
    ab.add_handles(hv);
    b.Finish(ab.Finish());
    add("attr_changed", kAttrChanged, fswire::Finish(b));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Which which = static_cast<Which>(data[0] % kCount);
  const auto* p = reinterpret_cast<const std::byte*>(data + 1);
  const m2m::Bytes bytes(p, p + size - 1);  // heap: aligned, as a received payload is
  switch (which) {
    case kRequest: FuzzRequest(bytes); break;
    case kHello: FuzzHello(bytes); break;
    case kHelloReply: FuzzHelloReply(bytes); break;
    case kReply: FuzzReply(bytes); break;
    case kAttrChanged: FuzzAttrChanged(bytes); break;
    default: break;
  }
  return 0;
}
