// VdService's blocking helpers (vd/vd_service.h): GetVdSync and the others,
// for worker threads only; never used inside the service.
#include "common/cooperative.h"
#include "common/wait.h"
#include "vd/vd_service.h"

namespace fedfs::ns {

// ---- Blocking helpers (worker threads only; never used inside the service) --

// How often the blocking helpers ask again while membership views converge.
constexpr auto kCatchupPoll = std::chrono::milliseconds(5);

// The deadline of a wait for views to converge, read from the clock only
// once a wait starts (not on the common path, which never waits).
class CatchupDeadline {
 public:
  explicit CatchupDeadline(const VdService& s) : s_(s) {}
  // Whether to ask again (after a pause), or give up.
  bool Retry() {
    const auto now = SteadyNow();  // simulated time in the simulator
    if (!started_) {
      until_ = now + s_.options().view_catchup;
      started_ = true;
    }
    if (now >= until_) return false;
    SleepFor(kCatchupPoll);
    return true;
  }

 private:
  const VdService& s_;
  bool started_ = false;
  std::chrono::steady_clock::time_point until_{};
};

namespace {
Result<VdPtr> GetSync(VdService& s, const std::string& path, const std::string* name) {
  CatchupDeadline deadline(s);
  for (;;) {
    auto vd = WaitFor<Result<VdPtr>>([&](auto done) {
      if (name != nullptr) {
        s.GetName(path, *name, std::move(done));
      } else {
        s.Get(path, std::move(done));
      }
    });
    const bool behind = vd ? (*vd)->epoch < s.ViewEpoch() : vd.error().code == ESTALE;
    if (!behind || !deadline.Retry()) return vd;
  }
}
}  // namespace

Result<VdPtr> GetVdSync(VdService& s, const std::string& path) { return GetSync(s, path, nullptr); }

Result<VdPtr> GetNameVdSync(VdService& s, const std::string& path, const std::string& name) {
  return GetSync(s, path, &name);
}

Result<VdPtr> PeekVdSync(VdService& s, const std::string& path, const std::string& name) {
  return WaitFor<Result<VdPtr>>([&](auto done) { s.Peek(path, name, std::move(done)); });
}

Status DropSubtreeSync(VdService& s, const std::string& path) {
  return WaitFor<Status>([&](auto done) { s.DropSubtree(path, std::move(done)); });
}

Status UpdateManyVdSync(VdService& s, const std::string& path, std::vector<VdChange> changes) {
  CatchupDeadline deadline(s);
  for (;;) {
    // ESTALE applied nothing: the same changes are sent again.
    Status st = WaitFor<Status>([&](auto done) { s.UpdateMany(path, changes, std::move(done)); });
    if (st || st.error().code != ESTALE || !deadline.Retry()) return st;
  }
}

Result<VdService::NameRead> LockReadVdSync(VdService& s, const std::string& path,
                                           const std::string& name) {
  CatchupDeadline deadline(s);
  for (;;) {
    // ESTALE held nothing: asked again.
    auto r = WaitFor<Result<VdService::NameRead>>(
        [&](auto done) { s.LockRead(path, name, std::move(done)); });
    if (r || r.error().code != ESTALE || !deadline.Retry()) return r;
  }
}

Result<bool> AddNewVdSync(VdService& s, const std::string& path, VdChange add) {
  CatchupDeadline deadline(s);
  for (;;) {
    // ESTALE added and held nothing: asked again.
    auto r = WaitFor<Result<bool>>([&](auto done) { s.AddNew(path, add, std::move(done)); });
    if (r || r.error().code != ESTALE || !deadline.Retry()) return r;
  }
}

Result<VdService::Renamed> RenameVdSync(VdService& s, const std::string& path,
                                        const std::string& name, const std::string& to,
                                        unsigned flags, const Cred& cred) {
  CatchupDeadline deadline(s);
  for (;;) {
    // ESTALE held and renamed nothing: asked again.
    auto r = WaitFor<Result<VdService::Renamed>>(
        [&](auto done) { s.Rename(path, name, to, flags, cred, std::move(done)); });
    if (r || r.error().code != ESTALE || !deadline.Retry()) return r;
  }
}

Result<VdService::Unlinked> UnlinkVdSync(VdService& s, const std::string& path,
                                         const std::string& name, const Cred& cred) {
  CatchupDeadline deadline(s);
  for (;;) {
    // ESTALE held and unlinked nothing: asked again.
    auto r = WaitFor<Result<VdService::Unlinked>>(
        [&](auto done) { s.Unlink(path, name, cred, std::move(done)); });
    if (r || r.error().code != ESTALE || !deadline.Retry()) return r;
  }
}

Status UpdateVdSync(VdService& s, const std::string& path, VdChange change) {
  return UpdateManyVdSync(s, path, {std::move(change)});
}

}  // namespace fedfs::ns
