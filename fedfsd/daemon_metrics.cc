#include "fedfsd/daemon_metrics.h"

#include "control/schema.h"
#include "dirops/dir_ops.h"
#include "vd/vd_service.h"

namespace fedfs::daemon {
namespace {

// The reply of command R from the dispatcher, or nullopt when it is not
// served or failed.
template <class R>
std::optional<R> Ask(const control::Dispatcher& d) {
  if (!d.Serves(R::kCommand.name)) return std::nullopt;
  const std::string line = d.Handle("{\"cmd\":\"" + std::string(R::kCommand.name) + "\"}");
  if (line.rfind("{\"error\"", 0) == 0) return std::nullopt;
  auto r = control::DecodeReply<R>(line);
  if (!r) return std::nullopt;
  return std::move(*r);
}

void Membership(const control::StatusReply* r, metrics::Exposition& e) {
  if (r == nullptr) return;
  e.Gauge("fedfs_membership_epoch", "the membership view's epoch (changes at every join or death)",
          static_cast<double>(r->epoch));
  uint64_t alive = 0;
  for (const auto& m : r->members) alive += m.state == "alive" ? 1 : 0;
  e.Gauge("fedfs_membership_members", "members known to this node", static_cast<double>(r->members.size()));
  e.Gauge("fedfs_membership_alive", "members this node counts alive", static_cast<double>(alive));
  for (const auto& m : r->members) {
    const metrics::Labels l = {{"member", m.id}};
    e.Gauge("fedfs_member_up", "1 while this node counts the member alive, 0 once dead",
            m.state == "alive" ? 1 : 0, l);
    e.Gauge("fedfs_member_ring_share", "the member's share of the consistent-hash ring", m.ring_share, l);
    if (!m.self && m.rtt_us >= 0) {
      e.Gauge("fedfs_member_rtt_seconds", "heartbeat round-trip time to the member (EWMA)",
              static_cast<double>(m.rtt_us) * 1e-6, l);
    }
    if (!m.self) {
      e.Gauge("fedfs_member_last_heard_seconds", "time since the member was last heard from",
              static_cast<double>(m.last_heard_ms_ago) * 1e-3, l);
    }
  }
}

void Transport(const m2m::CountingTransport& t, const control::StatusReply* r,
               metrics::Exposition& e) {
  // Peers by node id where the view names their address.
  std::map<std::string, std::string> id_of;
  if (r != nullptr) {
    for (const auto& m : r->members) id_of[m.addr] = m.id;
  }
  const auto traffic = t.traffic();
  for (const auto& p : traffic.peers) {
    auto it = id_of.find(p.addr);
    const metrics::Labels l = {{"peer", it != id_of.end() ? it->second : p.addr}, {"addr", p.addr}};
    e.Counter("fedfs_transport_calls_total", "requests sent to the peer", p.calls, l);
    e.Counter("fedfs_transport_call_errors_total",
              "requests to the peer that failed (refused, timed out, connection lost)",
              p.call_errors, l);
    e.Counter("fedfs_transport_sent_bytes_total", "request payload bytes sent to the peer",
              p.bytes_sent, l);
    e.Counter("fedfs_transport_received_bytes_total", "reply payload bytes received from the peer",
              p.bytes_received, l);
    e.Counter("fedfs_transport_one_sided_total",
              "one-sided operations on the peer's memory (get, put, atomics)", p.one_sided, l);
    e.Counter("fedfs_transport_one_sided_bytes_total", "bytes of one-sided operations on the peer",
              p.one_sided_bytes, l);
    e.Counter("fedfs_transport_one_sided_errors_total", "one-sided operations on the peer that failed",
              p.one_sided_errors, l);
  }
  e.Counter("fedfs_transport_served_total", "requests from other nodes handled here", traffic.served);
  e.Counter("fedfs_transport_served_bytes_total", "payload bytes of the requests handled here",
            traffic.served_bytes);
}

}  // namespace

std::unique_ptr<metrics::Registry> NodeMetrics(MetricSources s) {
  auto reg = std::make_unique<metrics::Registry>(metrics::Labels{{"node", s.node_id}});
  const auto d = s.commands;
  if (s.fuse_ops != nullptr) {
    reg->Add([ops = s.fuse_ops](metrics::Exposition& e) { ops->Collect(e); });
  }
  // One status reply per scrape: the members, and the peers' ids for the
  // transport's rows.
  reg->Add([d, t = s.transport](metrics::Exposition& e) {
    const auto r = Ask<control::StatusReply>(*d);
    Membership(r ? &*r : nullptr, e);
    if (t != nullptr) Transport(*t, r ? &*r : nullptr, e);
  });
  reg->Add([d, vds = s.vds](metrics::Exposition& e) {
    if (auto r = Ask<control::DtReply>(*d)) {
      metrics::ExposeReply(e, "fedfs_dt", "directory table and virtual directories (fedfsctl dt)", *r,
                           {"sharer_records", "resident", "leases_held", "capacity", "max_bytes",
                            "occupancy", "bytes"});
    }
    if (vds != nullptr) {
      e.Histogram("fedfs_dt_dirmerge_duration_seconds",
                  "dirmerges at this node as a manager: from the fan-out to the merged directory",
                  vds->DirmergeLatency());
    }
  });
  reg->Add([d](metrics::Exposition& e) {
    if (auto r = Ask<control::FilesReply>(*d)) {
      metrics::ExposeReply(e, "fedfs_files", "file service (fedfsctl files)", *r,
                           {"sessions", "handles", "watches"});
    }
  });
  reg->Add([d](metrics::Exposition& e) {
    if (auto r = Ask<control::CacheReply>(*d)) {
      metrics::ExposeReply(e, "fedfs_cache", "cooperative file-data cache (fedfsctl cache)", *r,
                           {"size_bytes", "block_bytes", "blocks_used", "bytes_used", "files",
                            "probation", "protected", "hints", "limit_bytes", "min_free_bytes",
                            "directory_files", "directory_copies"});
    }
  });
  reg->Add([d](metrics::Exposition& e) {
    if (auto r = Ask<control::MigrationsReply>(*d)) {
      metrics::ExposeReply(e, "fedfs_migration", "file migration (fedfsctl migrations)", *r,
                           {"pending"});
    }
  });
  if (s.dir_ops != nullptr) {
    reg->Add([ops = s.dir_ops](metrics::Exposition& e) {
      e.Counter("fedfs_journal_recovered_total",
                "journaled directory operations found at start (a past life's) and resolved or retried",
                ops->RecoveredCount());
      e.Gauge("fedfs_journal_pending", "journaled directory operations waiting to be retried",
              static_cast<double>(ops->PendingCount()));
    });
  }
  return reg;
}

}  // namespace fedfs::daemon
