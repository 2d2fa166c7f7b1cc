// The facade's blocking view of the VD service (vfs/vfs_impl.h VdClient):
// each call waits for the manager's answer. A claim or lock of a name another
// node holds for an operation that changes it (EAGAIN) is waited out with
// backoff (100 us doubling to 20 ms), for longer than a crashed node's hold
// lives (4 x rpc_timeout): 10 s.
//
// Threads: any thread that may block (FUSE workers, the journal's).
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cooperative.h"
#include "vd/vd_service.h"
#include "vfs/vfs_impl.h"

namespace fedfs::node {

class VdServiceClient final : public ns::VdClient {
 public:
  // `self`: this node, which holds the claims and locks it sends.
  VdServiceClient(ns::VdService* s, std::string self) : s_(s), self_(std::move(self)) {}

  Result<ns::VdPtr> Get(const std::string& path) override;
  Result<ns::VdPtr> GetFresh(const std::string& path) override;
  Result<ns::VdPtr> GetName(const std::string& path, const std::string& name) override;
  Result<ns::VdPtr> Peek(const std::string& path, const std::string& name) override;
  Status Add(const std::string& path, const std::string& name, uint8_t type,
             const std::string& node, uint64_t id) override;
  Status Remove(const std::string& path, const std::string& name,
                const std::string& node) override;
  Status DropSubtree(const std::string& path) override;
  Status Claim(const std::string& path, const std::string& name) override;
  Status Lock(const std::string& path, const std::string& name) override;
  Status LockAndClaim(const std::string& path, const std::string& lock,
                      const std::string& claim) override;
  Result<NameRead> LockRead(const std::string& path, const std::string& name) override;
  void Release(const std::string& path, const std::string& name) override;
  // Not asked where the directory is served here (its lock and report cost
  // no message there).
  Result<Unlinked> Unlink(const std::string& path, const std::string& name,
                          const ns::Cred& cred) override;
  Result<Renamed> Rename(const std::string& path, const std::string& name, const std::string& to,
                         unsigned flags, const ns::Cred& cred) override;
  Result<uint64_t> AddNew(const std::string& path, const std::string& name, uint8_t type,
                          const std::string& node) override;
  void Created(const std::string& path, const std::string& name, uint64_t token) override;
  Status Apply(const std::string& path, const std::vector<ns::VdEdit>& edits) override;

 private:
  Status WaitOutBusy(const std::string& path, const std::vector<ns::VdChange>& changes);
  // Asks `ask()` again while it answers EAGAIN (another node holds the
  // name), backing off from 100 us to 20 ms, for up to 10 s; its last
  // answer. SteadyNow/SleepFor: simulated time on the simulator's fibers.
  template <class Ask>
  static auto RetryWhileBusy(Ask ask) -> decltype(ask()) {
    auto backoff = std::chrono::microseconds(100);
    const auto deadline = SteadyNow() + std::chrono::seconds(10);
    for (;;) {
      auto r = ask();
      if (r || r.error().code != EAGAIN || SteadyNow() > deadline) return r;
      SleepFor(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(20'000));
    }
  }

  ns::VdService* s_;
  std::string self_;
  std::atomic<uint64_t> tokens_{0};  // AddNew's claims, numbered
};

}  // namespace fedfs::node
