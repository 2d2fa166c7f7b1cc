#include "node/vd_client.h"

#include <algorithm>
#include <chrono>

#include "common/cooperative.h"
#include "common/logging.h"

namespace fedfs::node {

using ns::VdChange;

Result<ns::VdPtr> VdServiceClient::Get(const std::string& path) { return ns::GetVdSync(*s_, path); }

Result<ns::VdPtr> VdServiceClient::GetName(const std::string& path, const std::string& name) {
  return ns::GetNameVdSync(*s_, path, name);
}

Result<ns::VdPtr> VdServiceClient::Peek(const std::string& path, const std::string& name) {
  return ns::PeekVdSync(*s_, path, name);
}

Result<ns::VdPtr> VdServiceClient::GetFresh(const std::string& path) {
  s_->ForgetCached(path);
  return ns::GetVdSync(*s_, path);
}

Status VdServiceClient::Add(const std::string& path, const std::string& name, uint8_t type,
                            const std::string& node, uint64_t id) {
  VdChange ch;
  ch.kind = VdChange::Kind::kAdd;
  ch.name = name;
  ch.type = type;
  ch.node = node;
  ch.id = id;
  return ns::UpdateVdSync(*s_, path, std::move(ch));
}

Status VdServiceClient::Remove(const std::string& path, const std::string& name,
                               const std::string& node) {
  VdChange ch;
  ch.kind = VdChange::Kind::kRemove;
  ch.name = name;
  ch.node = node;
  return ns::UpdateVdSync(*s_, path, std::move(ch));
}

Status VdServiceClient::DropSubtree(const std::string& path) {
  return ns::DropSubtreeSync(*s_, path);
}

Status VdServiceClient::Claim(const std::string& path, const std::string& name) {
  return WaitOutBusy(path, {VdChange{VdChange::Kind::kClaim, name, 0, self_}});
}

Status VdServiceClient::Lock(const std::string& path, const std::string& name) {
  return WaitOutBusy(path, {VdChange{VdChange::Kind::kLock, name, 0, self_}});
}

Status VdServiceClient::LockAndClaim(const std::string& path, const std::string& lock,
                                     const std::string& claim) {
  Status s = WaitOutBusy(path, {VdChange{VdChange::Kind::kLock, lock, 0, self_},
                                VdChange{VdChange::Kind::kClaim, claim, 0, self_}});
  // A manager of an older version takes them one at a time only.
  if (!s && s.error().code == EINVAL) return VdClient::LockAndClaim(path, lock, claim);
  return s;
}

Result<ns::VdClient::NameRead> VdServiceClient::LockRead(const std::string& path,
                                                        const std::string& name) {
  auto r = RetryWhileBusy([&] { return ns::LockReadVdSync(*s_, path, name); });
  if (r) return NameRead{std::move(r->part), r->held};
  // A manager of an older version: asked, locked and asked again.
  if (r.error().code == EPROTO) return VdClient::LockRead(path, name);
  return Err(r.error());
}

Result<ns::VdClient::Unlinked> VdServiceClient::Unlink(const std::string& path,
                                                      const std::string& name,
                                                      const ns::Cred& cred) {
  if (s_->ServesHere(path)) return Err(ENOSYS, "served here");
  auto r = RetryWhileBusy([&] { return ns::UnlinkVdSync(*s_, path, name, cred); });
  if (!r) return Err(r.error());
  return Unlinked{std::move(r->part), r->unlinked, std::move(r->parent)};
}

Result<ns::VdClient::Renamed> VdServiceClient::Rename(const std::string& path,
                                                     const std::string& name,
                                                     const std::string& to, unsigned flags,
                                                     const ns::Cred& cred) {
  if (s_->ServesHere(path)) return Err(ENOSYS, "served here");
  auto r = RetryWhileBusy([&] { return ns::RenameVdSync(*s_, path, name, to, flags, cred); });
  if (!r) return Err(r.error());
  return Renamed{std::move(r->part), r->renamed};
}

void VdServiceClient::Release(const std::string& path, const std::string& name) {
  if (auto s = ns::UpdateVdSync(*s_, path, VdChange{VdChange::Kind::kRelease, name, 0, self_});
      !s) {
    Logger("vfs")->debug("release of {} in {}: {}", name, path, s.error().ToString());
  }
}

Result<uint64_t> VdServiceClient::AddNew(const std::string& path, const std::string& name,
                                         uint8_t type, const std::string& node) {
  if (!s_->options().add_new) return VdClient::AddNew(path, name, type, node);
  // Names this claim: a release sent for an earlier claim of the same name
  // by this node (not waited for, it may arrive late) does not end it.
  const uint64_t token = tokens_.fetch_add(1, std::memory_order_relaxed) + 1;
  auto r = RetryWhileBusy([&] {
    return ns::AddNewVdSync(*s_, path, VdChange{VdChange::Kind::kAddNew, name, type, node, token});
  });
  if (r) return *r ? token : uint64_t{0};
  const int e = r.error().code;
  // A manager of an older version: claimed only.
  if (e == EPROTO) return VdClient::AddNew(path, name, type, node);
  if (e != EAGAIN && e != EEXIST && e != ESTALE && e != ENOENT && e != EINVAL) {
    // No answer (a timeout, a lost connection): the entry may have been
    // added. Undone where the claim of this token still holds (never
    // another creator's entry); otherwise it lapses with its claim.
    VdChange undo{VdChange::Kind::kRemove, name, 0, node, token};
    if (auto u = ns::UpdateVdSync(*s_, path, std::move(undo)); !u) {
      Logger("vfs")->warn("undo of the add of {} in {}: {}", name, path, u.error().ToString());
    }
  }
  return Err(r.error());
}

void VdServiceClient::Created(const std::string& path, const std::string& name, uint64_t token) {
  // Not waited for: the entry is at the manager already, and no other node
  // can take the name before the claim ends. The token keeps it from ending
  // a later hold of this node (a lock or claim the manager saw first).
  s_->Update(path, VdChange{VdChange::Kind::kRelease, name, 0, self_, token},
             [path, name](Status s) {
    if (!s) Logger("vfs")->debug("release of {} in {}: {}", name, path, s.error().ToString());
  });
}

Status VdServiceClient::Apply(const std::string& path, const std::vector<ns::VdEdit>& edits) {
  std::vector<VdChange> changes;
  for (const ns::VdEdit& e : edits) {
    changes.push_back(
        VdChange{e.add ? VdChange::Kind::kAdd : VdChange::Kind::kRemove, e.name, e.type, e.node,
                 e.id});
  }
  return ns::UpdateManyVdSync(*s_, path, std::move(changes));
}

Status VdServiceClient::WaitOutBusy(const std::string& path, const std::vector<VdChange>& changes) {
  return RetryWhileBusy([&] { return ns::UpdateManyVdSync(*s_, path, changes); });
}

}  // namespace fedfs::node
