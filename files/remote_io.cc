// RemoteNodeFs (files/remote_node_fs.h): reads and writes, inline or
// through the buffer pool, and cooperative reads (docs/coopcache.md).
#include <algorithm>
#include <cstring>

#include "common/wait.h"
#include "files/remote_node_fs_internal.h"
#include "nodefs/move_support.h"

namespace fedfs::ns {

namespace fb = fswire::fb;
using namespace remote_detail;

Result<size_t> RemoteNodeFs::ReadInline(Handle h, uint64_t offset, std::span<std::byte> dst,
                                        Clock::time_point deadline) {
  size_t done = 0;
  do {
    const size_t len = std::min(dst.size() - done, MaxIo());
    auto r = Call({.op = fb::Op::kRead, .handle = h, .offset = offset + done, .length = len},
                  deadline);
    if (!r) {
      if (done > 0) break;
      return Err(r.error());
    }
    const auto* rep = Root(*r);
    const size_t n = rep->data() ? rep->data()->size() : 0;
    if (n > len) return Err(EPROTO, "read reply longer than asked");
    if (n > 0) std::memcpy(dst.data() + done, rep->data()->data(), n);
    done += n;
    if (n < len) break;
  } while (done < dst.size());
  return done;
}

Result<size_t> RemoteNodeFs::WriteInline(Handle h, uint64_t offset,
                                         std::span<const std::byte> src, const Writer& by,
                                         Clock::time_point deadline) {
  size_t done = 0;
  do {
    const size_t len = std::min(src.size() - done, MaxIo());
    auto r = Call({.op = fb::Op::kWrite,
                   .cred = &by.cred,
                   .data = src.subspan(done, len),
                   .handle = h,
                   .offset = offset + done,
                   .length = len,
                   .kill_setid = by.kill_setid},
                  deadline);
    if (!r) {
      if (done > 0) break;
      return Err(r.error());
    }
    const size_t n = Root(*r)->n();
    if (n > len) return Err(EPROTO, "write reply larger than asked");
    done += n;
    if (n < len) break;
  } while (done < src.size());
  return done;
}


// Reads and writes through the pool: chunks of one slot each, up to
// max_parallel at once; each wave's results are taken in order and the first
// short or failed chunk ends the request (POSIX short-count semantics).
Result<size_t> RemoteNodeFs::Read(Handle h, uint64_t offset, std::span<std::byte> dst) {
  const auto deadline = FEDFS_DEADLINE;
  if (!slots_ || dst.size() <= opts_.inline_max) return ReadInline(h, offset, dst, deadline);
  return SlotIo(h, offset, dst.data(), dst.size(), nullptr, deadline);
}

// One request for the whole run of blocks (at most one slot's worth; a
// longer one is read plainly).
Result<NodeFs::CoopRead> RemoteNodeFs::ReadCoop(Handle h, uint64_t offset,
                                                std::span<std::byte> dst, const CoopAsk& ask) {
  const auto deadline = FEDFS_DEADLINE;
  if (opts_.coop.block == 0 || ask.block != opts_.coop.block || ask.frames.empty() ||
      dst.size() != ask.frames.size() * ask.block || dst.size() > MaxIo() ||
      (!slots_ && dst.size() > opts_.inline_max)) {
    auto n = Read(h, offset, dst);
    if (!n) return Err(n.error());
    return CoopRead{*n, {}};
  }
  Req q{.op = fb::Op::kRead, .handle = h, .offset = offset, .length = dst.size(), .coop = &ask};
  int slot = -1;
  const bool inline_read = !slots_ || dst.size() <= opts_.inline_max;
  if (!inline_read) {
    if (!helloed_.load()) {
      if (auto st = Hello(deadline); !st) return Err(st.error());
    }
    auto got = slots_->Acquire(1, deadline);
    if (got.empty()) return Err(ETIMEDOUT, "no free buffer slot before the deadline");
    slot = got[0];
    q.slot = slot;
  }
  auto r = Call(q, deadline);
  const Clock::duration quarantine = 2 * opts_.rpc_timeout + std::chrono::seconds(1);
  auto release = [&](bool touched) {
    if (slot >= 0) slots_->Release(slot, touched, quarantine);
  };
  if (!r) {
    release(MaySlotBeTouched(r.error().code));
    return Err(r.error());
  }
  const auto* rep = Root(*r);
  CoopRead out;
  out.dev = rep->coop_dev();
  out.ino = rep->coop_ino();
  if (const auto* cs = rep->copies(); cs != nullptr && cs->size() > 0) {
    release(false);
    if (cs->size() > ask.frames.size()) return Err(EPROTO, "more copies than blocks asked");
    for (const auto* c : *cs) {
      CoopCopyAt a = fswire::CoopCopyFromWire(*c);
      if (a.addr.empty() || a.length > ask.block) return Err(EPROTO, "malformed copy in reply");
      out.copies.push_back(std::move(a));
    }
    return out;
  }
  if (inline_read) {
    const size_t n = rep->data() ? rep->data()->size() : 0;
    if (n > dst.size()) return Err(EPROTO, "read reply longer than asked");
    if (n > 0) std::memcpy(dst.data(), rep->data()->data(), n);
    out.n = n;
    return out;
  }
  const size_t n = rep->n();
  if (n > dst.size()) {
    release(true);
    return Err(EPROTO, "data reply larger than asked");
  }
  std::memcpy(dst.data(), slots_->slot(slot), n);
  release(false);
  out.n = n;
  return out;
}

Result<size_t> RemoteNodeFs::Write(Handle h, uint64_t offset, std::span<const std::byte> src,
                                   const Writer& by) {
  // Its answer may wait for a callback and the cache lease (ChangeSlack).
  const auto deadline = FEDFS_DEADLINE + ChangeSlack();
  if (!slots_ || src.size() <= opts_.inline_max) return WriteInline(h, offset, src, by, deadline);
  return SlotIo(h, offset, const_cast<std::byte*>(src.data()), src.size(), &by, deadline);
}

Result<size_t> RemoteNodeFs::SlotIo(Handle h, uint64_t offset, std::byte* buf, size_t size,
                                    const Writer* by, Clock::time_point deadline) {
  const bool read = by == nullptr;
  if (!helloed_.load()) {
    if (auto st = Hello(deadline); !st) return Err(st.error());
  }
  const size_t chunk = MaxIo();
  const Clock::duration quarantine = 2 * opts_.rpc_timeout + std::chrono::seconds(1);
  const Clock::duration budget0 = deadline - Clock::now();
  const Clock::time_point give_up = Clock::now() + kMoveWaitMax;
  size_t done = 0;
  bool rehello = false;
  while (done < size) {
    const size_t chunks = (size - done + chunk - 1) / chunk;
    std::vector<int> slots =
        slots_->Acquire(std::min(chunks, std::max<size_t>(opts_.max_parallel, 1)), deadline);
    if (slots.empty()) {
      if (done > 0) break;
      return Err(ETIMEDOUT, "no free buffer slot before the deadline");
    }
    std::vector<size_t> lens(slots.size());
    const auto budget = Until(deadline);
    const uint64_t budget_us =
        std::chrono::duration_cast<std::chrono::microseconds>(budget).count();
    auto results = WaitForAll<Result<m2m::Bytes>>(
        slots.size(), [&](size_t i, m2m::Callback<m2m::Bytes> call_done) {
          const size_t off = done + i * chunk;
          lens[i] = std::min(chunk, size - off);
          if (!read) std::memcpy(slots_->slot(slots[i]), buf + off, lens[i]);
          // Every chunk of a write says so: the server clears before the
          // first chunk it writes (any of them, in parallel).
          Req q{.op = read ? fb::Op::kRead : fb::Op::kWrite,
                .cred = read ? nullptr : &by->cred,
                .handle = h,
                .offset = offset + off,
                .length = lens[i],
                .slot = slots[i],
                .kill_setid = !read && by->kill_setid};
          ep_->Call(MethodOf(q.op), Encode(q, session_, budget_us, {}), budget,
                    std::move(call_done));
        });
    bool stop = false;
    std::optional<Error> first_error;
    for (size_t i = 0; i < slots.size(); ++i) {
      auto& r = results[i];
      Result<const fb::FsReply*> rep = r ? Parse(*r) : Err(r.error());
      const bool touched = !rep && MaySlotBeTouched(rep.error().code);
      if (!stop) {
        if (!rep) {
          first_error = rep.error();
          stop = true;
        } else {
          const size_t n = (*rep)->n();
          if (n > lens[i]) {
            first_error = Error{EPROTO, "data reply larger than asked"};
            stop = true;
          } else {
            if (read) std::memcpy(buf + done, slots_->slot(slots[i]), n);
            done += n;
            if (n < lens[i]) stop = true;
          }
        }
      }
      slots_->Release(slots[i], touched, quarantine);
    }
    if (first_error) {
      if (first_error->code == fswire::kErrSessionUnknown && !rehello && done == 0) {
        rehello = true;  // new connection or restarted server: Hello again, once
        helloed_.store(false);
        if (auto st = Hello(deadline); !st) return Err(st.error());
        continue;
      }
      if (done > 0) break;
      // A move holds the file at the server (nothing done): asked again.
      if (first_error->code == kErrMoveWait && Clock::now() < give_up) {
        deadline = Clock::now() + budget0;
        continue;
      }
      if (first_error->code == kErrMoveWait) {
        return Err(ETIMEDOUT, "the file has been held by a move for too long");
      }
      return Err(*first_error);
    }
    if (stop) break;
  }
  return done;
}

}  // namespace fedfs::ns
