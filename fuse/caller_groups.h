// Supplementary groups of FUSE callers, kept per calling thread.
//
// fuse_req_getgroups reads /proc/<pid>/task/<tid>/status (an open, a read of
// the whole status file, which the kernel formats, and a close). Asked on
// every request of a non-root caller, it took a fifth of the daemon's time in
// an unlink loop and halved that caller's create and unlink rates.
//
// A thread's groups change only through setgroups(2), which needs
// CAP_SETGID: almost always a root process, which then changes its uid or gid
// as well. So the groups are kept per (thread id, uid, gid) for `ttl`: a
// thread that changes its uid or gid is asked again at once; one that keeps
// both and changes its groups (a non-root process holding CAP_SETGID) is seen
// within `ttl`. The kernel's own permission checks (default_permissions) use
// the caller's current groups whatever is kept here; these groups are those
// the daemon runs the caller's operation with on the export root.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fedfs::fuse {

class CallerGroups {
 public:
  using Clock = std::chrono::steady_clock;
  using Groups = std::vector<gid_t>;

  // At most `capacity` threads are kept (past it, expired entries are
  // dropped, then all of them).
  CallerGroups(Clock::duration ttl, size_t capacity) : ttl_(ttl), capacity_(capacity) {}

  // The groups of thread `tid` running as `uid`/`gid` at `now`: kept ones if
  // fresh, else `fetch()` (std::optional<Groups>; nullopt: unknown, returned
  // as no groups and not kept).
  template <class Fetch>
  Groups Get(pid_t tid, uid_t uid, gid_t gid, Clock::time_point now, Fetch&& fetch) {
    const Key key{tid, uid, gid};
    {
      std::lock_guard lock(mu_);
      if (auto it = kept_.find(key); it != kept_.end() && now < it->second.until) {
        return it->second.groups;
      }
    }
    std::optional<Groups> g = std::forward<Fetch>(fetch)();
    if (!g) return {};
    Keep(key, *g, now);
    return std::move(*g);
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return kept_.size();
  }

 private:
  struct Key {
    pid_t tid;
    uid_t uid;
    gid_t gid;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept {
      return std::hash<uint64_t>()((uint64_t(uint32_t(k.tid)) << 32) ^ (uint64_t(k.uid) << 16) ^
                                   k.gid);
    }
  };
  struct Entry {
    Groups groups;
    Clock::time_point until;
  };

  void Keep(const Key& key, const Groups& g, Clock::time_point now);

  const Clock::duration ttl_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<Key, Entry, KeyHash> kept_;  // guarded by mu_
};

}  // namespace fedfs::fuse
