// VdService: an unlink, or a rename within one directory, in one call to
// the directory's manager (kUnlink, kRename, vd/vd_service.h;
// docs/namespace.md "Unlinks and renames in one call").
#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

auto VdService::Impl::Core::ServeUnlink(const std::string& path, VdChange change,
                                        const std::string& from, const ClusterView& view,
                                        m2m::Callback<UpdateOutcome> done, bool lease_ok,
                                        uint64_t holders_hash) -> void {
  if (!options_.unlink_at) return done(Err(ENOSYS, "this manager does not unlink for others"));
  std::string name = change.name;
  // The name held for the sender, as its own kLockRead would hold it: its
  // kRemove below ends the hold, or a release when the unlink failed.
  auto release = [self = shared_from_this(), path, name, from] {
    self->ServeClaim(path, VdChange{VdChange::Kind::kRelease, name, 0, from}, from,
                     [path, name](Result<UpdateOutcome> r) {
                       if (!r) {
                         Log()->debug("release of {} after an unlink: {}", JoinPath(path, name),
                                      r.error().ToString());
                       }
                     });
  };
  ServeLockRead(
      path, name, from,
      [self = shared_from_this(), path, name, cred = std::move(change.cred), from, view,
       done = std::move(done), lease_ok, holders_hash,
       release](Result<UpdateOutcome> read) mutable {
        if (!read || !read->held) return done(std::move(read));  // the sender unlinks itself
        const VdEntry* e = read->read_vd->Find(name);
        if (e == nullptr || e->type == DT_DIR || e->holders.empty()) {
          release();
          read->held = false;
          return done(std::move(read));
        }
        const std::string holder = e->holders.front();
        VdPtr part = read->read_vd;
        self->options_.unlink_at(
            cred, holder, JoinPath(path, name), from,
            [self, path, name, holder, from, view, part, done = std::move(done), lease_ok,
             holders_hash, release](Result<std::optional<struct stat>> gone) mutable {
              if (!gone) {
                release();
                return done(Err(gone.error()));
              }
              {
                std::lock_guard lock(self->mu_);
                ++self->stats_.unlinks_made;
              }
              auto answer = [part, parent = *gone](UpdateOutcome o) {
                o.read = true;
                o.read_vd = part;
                o.held = true;
                o.unlinked = true;
                o.parent = parent;
                return o;
              };
              self->ServeUpdate(
                  path, {VdChange{VdChange::Kind::kRemove, name, 0, holder}}, from, view,
                  [self, path, name, holder, from, view, answer,
                   done = std::move(done)](Result<UpdateOutcome> o) mutable {
                    if (o) return done(answer(std::move(*o)));
                    // The file is gone: the unlink succeeded. The removal is
                    // reported again where P is served now when this node
                    // served it for itself (its lease ended meanwhile); else
                    // the entry stays until the hold lapses and a rebuild.
                    Log()->warn("removal of {} after its unlink: {}", JoinPath(path, name),
                                o.error().ToString());
                    if (from == view.self) {
                      return self->UpdateOutcomeOf(
                          path, {VdChange{VdChange::Kind::kRemove, name, 0, holder}},
                          [answer, done = std::move(done)](Result<UpdateOutcome>) mutable {
                            done(answer(UpdateOutcome{}));
                          });
                    }
                    done(answer(UpdateOutcome{}));
                  },
                  lease_ok, holders_hash);
            });
      });
}

auto VdService::Impl::Core::ServeRename(const std::string& path, VdChange change,
                                        const std::string& from, const ClusterView& view,
                                        m2m::Callback<UpdateOutcome> done, bool lease_ok,
                                        uint64_t holders_hash) -> void {
  if (!options_.rename_at) return done(Err(ENOSYS, "this manager does not rename for others"));
  const std::string name = change.name, to = change.to;
  // Both names held for the sender, as its kLock with a kClaim would hold
  // them: the changes below end both, or releases when the rename failed.
  auto release = [self = shared_from_this(), path, name, to, from] {
    for (const std::string& n : {name, to}) {
      self->ServeClaim(path, VdChange{VdChange::Kind::kRelease, n, 0, from}, from,
                       [path, n](Result<UpdateOutcome> r) {
                         if (!r) {
                           Log()->debug("release of {} after a rename: {}", JoinPath(path, n),
                                        r.error().ToString());
                         }
                       });
    }
  };
  ServeClaimOf(
      path, to, name, from,
      [self = shared_from_this(), path, name, to, from, view, cred = std::move(change.cred),
       flags = change.flags, done = std::move(done), lease_ok, holders_hash,
       release](Result<UpdateOutcome> held) mutable {
        if (!held) return done(Err(held.error()));  // EEXIST, EAGAIN: nothing held
        // The old name as it is now (the holder of its lock may ask again).
        self->ServeLockRead(
            path, name, from,
            [self, path, name, to, from, view, cred = std::move(cred), flags,
             done = std::move(done), lease_ok, holders_hash,
             release](Result<UpdateOutcome> read) mutable {
              if (!read) {
                release();
                return done(Err(read.error()));
              }
              const VdEntry* e = read->read_vd->Find(name);
              if (!read->held || e == nullptr || e->type == DT_DIR || e->holders.size() != 1) {
                release();
                read->held = false;
                return done(std::move(read));  // the sender renames by itself
              }
              const VdEntry entry = *e;
              VdPtr part = read->read_vd;
              self->options_.rename_at(
                  cred, entry.holders.front(), JoinPath(path, name), JoinPath(path, to),
                  flags | RENAME_NOREPLACE, from,
                  [self, path, name, to, from, view, entry, part, done = std::move(done),
                   lease_ok, holders_hash, release](Status s) mutable {
                    if (!s) {
                      release();
                      return done(Err(s.error()));
                    }
                    {
                      std::lock_guard lock(self->mu_);
                      ++self->stats_.renames_made;
                    }
                    auto answer = [part](UpdateOutcome o) {
                      o.read = true;
                      o.read_vd = part;
                      o.held = true;
                      o.renamed = true;
                      return o;
                    };
                    const std::string& node = entry.holders.front();
                    std::vector<VdChange> edits{
                        VdChange{VdChange::Kind::kRemove, name, 0, node},
                        VdChange{VdChange::Kind::kAdd, to, entry.type, node, entry.id}};
                    self->ServeUpdate(
                        path, edits, from, view,
                        [self, path, edits, from, view, answer,
                         done = std::move(done)](Result<UpdateOutcome> o) mutable {
                          if (o) return done(answer(std::move(*o)));
                          // Renamed: as for an unlink (ServeUnlink).
                          Log()->warn("changes of {} after its rename: {}", path,
                                      o.error().ToString());
                          if (from == view.self) {
                            return self->UpdateOutcomeOf(
                                path, edits,
                                [answer, done = std::move(done)](Result<UpdateOutcome>) mutable {
                                  done(answer(UpdateOutcome{}));
                                });
                          }
                          done(answer(UpdateOutcome{}));
                        },
                        lease_ok, holders_hash);
                  });
            });
      });
}

}  // namespace fedfs::ns
