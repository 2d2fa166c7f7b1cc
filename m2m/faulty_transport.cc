#include "m2m/faulty_transport.h"

#include <atomic>
#include <charconv>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/logging.h"

namespace fedfs::m2m {

// Shared by the transport and its endpoints (which may outlive it in a
// caller's hands): the decisions, the counts and the delay thread. It holds
// no endpoint, so that endpoint and state are no cycle.
struct FaultyTransport::State {
  explicit State(FaultSpec s) : spec(s), rng(s.seed) {}

  enum class Fate { kSend, kDropRequest, kDropReply };
  struct Draw {
    Fate fate = Fate::kSend;
    std::chrono::microseconds delay{0};
    bool disconnect = false;
  };
  Draw Next() {
    std::lock_guard lock(mu);
    std::uniform_real_distribution<double> u(0, 1);
    Draw d;
    ops.fetch_add(1, std::memory_order_relaxed);
    if (u(rng) < spec.drop) {
      d.fate = u(rng) < 0.5 ? Fate::kDropRequest : Fate::kDropReply;
      (d.fate == Fate::kDropRequest ? dropped_requests : dropped_replies)
          .fetch_add(1, std::memory_order_relaxed);
    }
    if (u(rng) < spec.delay && spec.delay_max.count() > 0) {
      std::uniform_int_distribution<int64_t> us(0, spec.delay_max.count());
      d.delay = std::chrono::microseconds(us(rng));
      delayed.fetch_add(1, std::memory_order_relaxed);
    }
    if (u(rng) < spec.disconnect) {
      d.disconnect = true;
      disconnects.fetch_add(1, std::memory_order_relaxed);
    }
    return d;
  }
  // For a call: the delay of its duplicate, or nothing.
  std::optional<std::chrono::microseconds> Duplicate() {
    if (spec.duplicate <= 0) return std::nullopt;
    std::lock_guard lock(mu);
    std::uniform_real_distribution<double> u(0, 1);
    if (u(rng) >= spec.duplicate) return std::nullopt;
    duplicated.fetch_add(1, std::memory_order_relaxed);
    std::uniform_int_distribution<int64_t> us(0, spec.delay_max.count());
    return std::chrono::microseconds(us(rng));
  }

  // The thread that sends delayed operations, started by the first one (a
  // spec without delays, as the simulator's, starts none).
  Timers& Delayer() {
    std::call_once(timers_once, [this] { timers = std::make_unique<Timers>("faults"); });
    return *timers;
  }

  const FaultSpec spec;
  std::mutex mu;
  std::mt19937_64 rng;  // GUARDED_BY(mu)
  std::atomic<uint64_t> ops{0}, dropped_requests{0}, dropped_replies{0}, delayed{0},
      disconnects{0}, duplicated{0};
  std::once_flag timers_once;
  std::unique_ptr<Timers> timers;
};

namespace {

using State = FaultyTransport::State;

std::shared_ptr<spdlog::logger> Log() {
  static auto logger = Logger("faults");
  return logger;
}

// Over a reliable transport a message is lost only with its connection.
Error Lost(bool after) {
  return Error{ECONNRESET, after ? "reply lost (injected fault)" : "request lost (injected fault)"};
}

class FaultyEndpoint final : public Endpoint {
 public:
  FaultyEndpoint(std::shared_ptr<Endpoint> inner, std::shared_ptr<State> s)
      : inner_(std::move(inner)), s_(std::move(s)) {}

  const std::string& address() const override { return inner_->address(); }
  void Connect(Timeout timeout, Callback<void> done) override {
    inner_->Connect(timeout, std::move(done));
  }
  void Call(uint16_t method, Bytes payload, Timeout timeout, Callback<Bytes> done) override {
    if (const auto after = s_->Duplicate()) {
      SPDLOG_LOGGER_DEBUG(Log(), "injected: duplicate of call {} to {}", method, inner_->address());
      auto copy = [inner = inner_, method, bytes = payload, timeout]() mutable {
        inner->Call(method, std::move(bytes), timeout, [](Result<Bytes>) {});
      };
      if (after->count() == 0) {
        copy();
      } else {
        s_->Delayer().After(*after, std::move(copy));
      }
    }
    Run<Bytes>("call", method, std::move(done), [inner = inner_, method, payload = std::move(payload),
                                 timeout](Callback<Bytes> cb) mutable {
      inner->Call(method, std::move(payload), timeout, std::move(cb));
    });
  }
  Result<std::shared_ptr<RemoteRegion>> Import(const RegionDesc& desc) override {
    return inner_->Import(desc);
  }
  void Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset,
           Timeout timeout, Callback<void> done) override {
    Run<void>("put", -1, std::move(done), [inner = inner_, src, len, &dst, offset, timeout](Callback<void> cb) {
      inner->Put(src, len, dst, offset, timeout, std::move(cb));
    });
  }
  void Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset, Timeout timeout,
           Callback<void> done) override {
    Run<void>("get", -1, std::move(done), [inner = inner_, dst, len, &src, offset, timeout](Callback<void> cb) {
      inner->Get(dst, len, src, offset, timeout, std::move(cb));
    });
  }
  void FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add, Timeout timeout,
                Callback<uint64_t> done) override {
    Run<uint64_t>("fetch-add", -1, std::move(done),
                  [inner = inner_, &region, offset, add, timeout](Callback<uint64_t> cb) {
                    inner->FetchAdd(region, offset, add, timeout, std::move(cb));
                  });
  }
  void CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                   uint64_t desired, Timeout timeout, Callback<uint64_t> done) override {
    Run<uint64_t>("compare-swap", -1, std::move(done), [inner = inner_, &region, offset, expected, desired,
                                    timeout](Callback<uint64_t> cb) {
      inner->CompareSwap(region, offset, expected, desired, timeout, std::move(cb));
    });
  }
  void Disconnect() override { inner_->Disconnect(); }

 private:
  // Sends through `send` as the next draw decides. The caller's buffers and
  // regions stay valid until `done` runs (the Endpoint contract), so a
  // delayed send may still use them.
  template <class T, class Send>
  // `what` and `method` (-1: none) name the operation in the log.
  void Run(const char* what, int method, Callback<T> done, Send send) {
    const State::Draw d = s_->Next();
    if (d.fate != State::Fate::kSend || d.disconnect) {
      SPDLOG_LOGGER_DEBUG(Log(), "injected: {}{} of {}{} to {}", d.disconnect ? "disconnect, " : "",
                          d.fate == State::Fate::kDropRequest ? "request lost"
                          : d.fate == State::Fate::kDropReply ? "reply lost"
                                                              : "sent",
                          what, method < 0 ? std::string() : " " + std::to_string(method),
                          inner_->address());
    }
    auto go = [inner = inner_, d, send = std::move(send), done = std::move(done)]() mutable {
      if (d.disconnect) inner->Disconnect();
      if (d.fate == State::Fate::kDropRequest) return done(Result<T>(std::unexpected(Lost(false))));
      if (d.fate == State::Fate::kDropReply) {
        return send([done = std::move(done)](Result<T>) mutable { done(Result<T>(std::unexpected(Lost(true)))); });
      }
      send(std::move(done));
    };
    if (d.delay.count() == 0) return go();
    s_->Delayer().After(d.delay, std::move(go));
  }

  std::shared_ptr<Endpoint> inner_;
  std::shared_ptr<State> s_;
};

bool ParseShare(std::string_view v, double* out) {
  const std::string s(v);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !(d >= 0 && d <= 1)) return false;
  *out = d;
  return true;
}

bool ParseDuration(std::string_view v, std::chrono::microseconds* out) {
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p == v.data()) return false;
  const std::string_view unit(p, static_cast<size_t>(v.data() + v.size() - p));
  uint64_t us = 0;
  if (unit == "us") {
    us = n;
  } else if (unit == "ms") {
    us = n * 1000;
  } else if (unit == "s") {
    us = n * 1000000;
  } else {
    return false;
  }
  if (us > 60'000'000) return false;
  *out = std::chrono::microseconds(us);
  return true;
}

}  // namespace

std::string FaultSpec::ToString() const {
  return "drop=" + std::to_string(drop) + ",delay=" + std::to_string(delay) + ":" +
         std::to_string(delay_max.count()) + "us,disconnect=" + std::to_string(disconnect) +
         ",duplicate=" + std::to_string(duplicate) + ",seed=" + std::to_string(seed);
}

Result<FaultSpec> ParseFaultSpec(std::string_view text) {
  FaultSpec s;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) return Err(EINVAL, "fault spec: '" + std::string(part) + "'");
    const std::string_view key = part.substr(0, eq), val = part.substr(eq + 1);
    bool ok = false;
    if (key == "drop") {
      ok = ParseShare(val, &s.drop);
    } else if (key == "disconnect") {
      ok = ParseShare(val, &s.disconnect);
    } else if (key == "duplicate") {
      ok = ParseShare(val, &s.duplicate);
    } else if (key == "delay") {
      const size_t colon = val.find(':');
      ok = colon != std::string_view::npos && ParseShare(val.substr(0, colon), &s.delay) &&
           ParseDuration(val.substr(colon + 1), &s.delay_max);
    } else if (key == "seed") {
      auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), s.seed);
      ok = ec == std::errc() && p == val.data() + val.size();
    }
    if (!ok) return Err(EINVAL, "fault spec: bad '" + std::string(part) + "'");
  }
  return s;
}

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> inner, FaultSpec spec)
    : TransportDecorator(std::move(inner)), state_(std::make_shared<State>(spec)) {}

FaultyTransport::~FaultyTransport() = default;

std::shared_ptr<Endpoint> FaultyTransport::GetEndpoint(const std::string& addr) {
  std::lock_guard lock(endpoints_mu_);
  auto& ep = endpoints_[addr];
  if (!ep) ep = std::make_shared<FaultyEndpoint>(inner().GetEndpoint(addr), state_);
  return ep;
}

FaultyTransport::Counts FaultyTransport::counts() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return Counts{get(state_->ops),     get(state_->dropped_requests), get(state_->dropped_replies),
                get(state_->delayed), get(state_->disconnects),      get(state_->duplicated)};
}

}  // namespace fedfs::m2m
