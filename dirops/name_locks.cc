// DirOps' name locks at the managers: multi-node directory operations of
// different coordinators on overlapping paths wait for each other
// (dirops/dir_ops.h, "Two coordinators").
#include <algorithm>

#include "common/logging.h"
#include "common/path.h"
#include "common/cooperative.h"
#include "dirops/dir_ops.h"

namespace fedfs::ns {

auto DirOps::NameLocksOf(const std::vector<std::string>& paths) -> std::vector<NameLock> {
  std::vector<NameLock> out;
  for (const std::string& p : paths) {
    for (std::string a = p; a != "/" && !a.empty(); a = std::string(ParentPath(a))) {
      out.emplace_back(std::string(ParentPath(a)), std::string(BaseName(a)));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Status DirOps::TakeNameLocks(const std::vector<NameLock>& locks) {
  if (!notify_) return Ok();
  const auto deadline = SteadyNow() + options_.deadline;
  for (size_t i = 0; i < locks.size(); ++i) {
    const auto& [dir, name] = locks[i];
    auto backoff = std::chrono::microseconds(200);
    for (;;) {
      Status s = notify_(dir, VdChange{VdChange::Kind::kLock, name, 0, node_id_});
      if (s) break;
      if (s.error().code != EAGAIN || SteadyNow() > deadline) {
        ReleaseNameLocks({locks.begin(), locks.begin() + static_cast<std::ptrdiff_t>(i)});
        if (s.error().code == EAGAIN) {
          return Err(EBUSY, JoinPath(dir, name) +
                                " is held by another directory operation: " + s.error().context);
        }
        return s;
      }
      SleepFor(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(20'000));
    }
  }
  return Ok();
}

void DirOps::ReleaseNameLocks(const std::vector<NameLock>& locks) {
  if (!notify_) return;
  for (const auto& [dir, name] : locks) {
    if (auto s = notify_(dir, VdChange{VdChange::Kind::kRelease, name, 0, node_id_}); !s) {
      Logger("dirops")->debug("release of {} in {}: {}", name, dir, s.error().ToString());
    }
  }
}

}  // namespace fedfs::ns
