// fedfsctl: talks to a running fedfsd through its control socket (the
// protocol of control/schema.h, through control/client.h) and makes cluster
// keys.
//
//   fedfsctl [--socket PATH | --config FILE] status [--json]
//   fedfsctl [--socket PATH | --config FILE] ring PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] where PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] conflicts PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] dt [--json]
//   fedfsctl [--socket PATH | --config FILE] files [--json]
//   fedfsctl [--socket PATH | --config FILE] list PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] migrate PATH... --to NODE
//            [--dry-run] [--max-rate RATE] [--json]     (tools/migrate_job.h)
//   fedfsctl [--socket PATH | --config FILE] cancel PATH [--json]
//   fedfsctl keygen
//
// The commands (their names, help and PATH argument) come from the schema's
// table, control::kCommands. Without --socket/--config, the only socket in
// /run/fedfs is used. --json prints the daemon's reply as it is (indented).
// Exit codes: 0 ok, 1 the daemon cannot be reached or answered an error,
// 2 bad command line.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/size.h"
#include "control/client.h"
#include "control/schema.h"
#include "fedfsd/config.h"
#include "m2m/auth.h"
#include "tools/migrate_job.h"

namespace {

namespace control = fedfs::control;

struct Failure {
  std::string message;
};

std::string FindSocket(const std::string& socket, const std::string& config) {
  if (!socket.empty()) return socket;
  if (!config.empty()) {
    auto s = fedfs::daemon::ControlSocketFromConfigFile(config);
    if (!s) throw Failure{s.error().context};
    return *s;
  }
  auto s = control::OnlySocketIn(std::string(control::kDefaultSocketDir));
  if (!s) throw Failure{s.error().context};
  return *s;
}

template <class R>
R Decode(const std::string& reply) {
  auto r = control::DecodeReply<R>(reply);
  if (!r) throw Failure{"unexpected answer from fedfsd: " + r.error().context};
  return std::move(*r);
}

// `node` of a reply, "?" when it names none.
const char* NodeName(const std::string& node) { return node.empty() ? "?" : node.c_str(); }

std::string Fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

void PrintStatus(const control::StatusReply& s) {
  size_t alive = 0;
  size_t w_id = 2, w_addr = 7;
  for (const auto& m : s.members) {
    if (m.state == "alive") ++alive;
    w_id = std::max(w_id, m.id.size() + 1);
    w_addr = std::max(w_addr, m.addr.size());
  }
  std::printf("node %s  epoch %llu  members %zu (%zu alive, %zu dead)\n", s.node_id.c_str(),
              static_cast<unsigned long long>(s.epoch), s.members.size(), alive,
              s.members.size() - alive);
  std::printf("%-*s  %-*s  %-5s  %6s  %9s  %10s\n", static_cast<int>(w_id), "ID",
              static_cast<int>(w_addr), "ADDRESS", "STATE", "RING", "RTT", "LAST SEEN");
  for (const auto& m : s.members) {
    const bool self = m.self;
    const std::string id = m.id + (self ? "*" : "");
    const int64_t rtt = m.rtt_us;
    const int64_t ago = m.last_heard_ms_ago;
    const std::string rtt_s = self ? "-" : rtt < 0 ? "?" : (rtt < 10000 ? std::to_string(rtt) + "us" : Fixed(rtt / 1000.0, 1) + "ms");
    const std::string ago_s = self ? "-" : (ago < 10000 ? std::to_string(ago) + "ms" : Fixed(ago / 1000.0, 1) + "s") + " ago";
    std::printf("%-*s  %-*s  %-5s  %5s%%  %9s  %10s\n", static_cast<int>(w_id), id.c_str(),
                static_cast<int>(w_addr), m.addr.c_str(), m.state.c_str(),
                Fixed(100.0 * m.ring_share, 1).c_str(), rtt_s.c_str(), ago_s.c_str());
  }
  std::printf("(* this node; RING = share of the hash ring it manages)\n");
}

// The human form of the "dt" answer (docs/namespace.md, "Directory table").
void PrintDt(const control::DtReply& r) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("directory table of %s\n", NodeName(r.node));
  if (!r.table) {
    std::printf("  disabled (directory_table.entries: 0): every lookup asks the manager\n");
  } else {
    const control::DtTableRow& t = *r.table;
    std::printf("  capacity      %llu entries, %llu bytes\n", u(t.capacity), u(t.max_bytes));
    std::printf("  occupancy     %llu entries, %llu bytes\n", u(t.occupancy), u(t.bytes));
    std::printf("  hits          %llu\n", u(t.hits));
    std::printf("  misses        %llu (%llu stale, %llu evictions)\n", u(t.misses), u(t.stale),
                u(t.evictions));
    std::printf("  invalidations received %llu one-sided, %llu broadcast; own changes patched %llu\n",
                u(t.bumps_received), u(r.dt_invals_received), u(t.patches));
    std::printf("  names in stale copies: %llu kept, %llu hits\n", u(t.name_installs),
                u(t.name_hits));
    std::printf("  large directories looked up for names only: %llu\n", u(t.skeletons));
    std::printf("  other nodes' changes as deltas: %llu applied, %llu queued, %llu refused\n",
                u(t.deltas_applied), u(t.deltas_queued), u(t.deltas_refused));
  }
  std::printf("  lookups %llu, requests to managers %llu, messages per lookup %.4f\n",
              u(r.lookups), u(r.gets_sent), r.messages_per_lookup);
  std::printf("as a manager: %llu sharer records, invalidations sent %llu (failed %llu), "
              "broadcasts %llu, changes %llu\n",
              u(r.sharer_records), u(r.invalidations_sent), u(r.invalidations_failed),
              u(r.broadcasts_sent), u(r.changes_invalidated));
  std::printf("  changes sent as deltas %llu, kept by the sharer %llu\n", u(r.deltas_sent),
              u(r.deltas_kept));
  std::printf("leases: lent %llu, recalled %llu; taken %llu, ended %llu, held now %llu\n",
              u(r.leases_granted), u(r.leases_recalled), u(r.leases_taken), u(r.leases_ended),
              u(r.leases_held));
}

void PrintFiles(const control::FilesReply& r) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("file service of %s\n", NodeName(r.node));
  std::printf("  sessions %llu, open handles %llu, watched files %llu\n", u(r.sessions),
              u(r.handles), u(r.watches));
  std::printf("  requests served %llu, refused %llu; data read and written %llu bytes\n",
              u(r.served), u(r.refused), u(r.data_bytes));
  std::printf("  change callbacks sent %llu (failed %llu); files kept open for deferred opens %llu\n",
              u(r.callbacks_sent), u(r.callbacks_failed), u(r.pinned));
  std::printf("files open elsewhere: change callbacks received %llu (refused %llu)\n",
              u(r.callbacks_received), u(r.callbacks_refused));
  std::printf("  opens answered without asking %llu: opened later %llu, handed over %llu, stale %llu\n",
              u(r.deferred_opens), u(r.deferred_used), u(r.deferred_adopted), u(r.deferred_stale));
}

void PrintConflicts(const control::ConflictsReply& r) {
  if (r.conflicts.empty()) {
    std::printf("no conflicts in %s\n", r.path.c_str());
    return;
  }
  for (const auto& c : r.conflicts) {
    std::string copies;
    for (const auto& k : c.copies) copies += (copies.empty() ? "" : ", ") + k.type + " on " + k.node;
    std::printf("%s: %s\n", c.name.c_str(), copies.c_str());
  }
}

// The human form of the "rebalance" answers (docs/migration.md, "Rebalance").
void PrintRebalance(const control::RebalanceReply& r) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("mean share in use %.1f%%, threshold %.1f points\n", 100 * r.mean,
              100 * r.threshold);
  for (const auto& n : r.nodes) {
    std::printf("  %-12s %5.1f%% -> %5.1f%%  (%llu of %llu bytes)\n", n.node.c_str(),
                100 * n.share, 100 * n.after, u(n.used), u(n.total));
  }
  if (r.moves.empty()) std::printf("nothing to move\n");
  for (const auto& m : r.moves) {
    const char* what = r.dry_run ? "would move" : m.done ? "moved" : "failed";
    std::printf("%s %s from %s to %s (%llu bytes)%s%s\n", what, m.path.c_str(), m.from.c_str(),
                m.to.c_str(), u(m.bytes), m.error.empty() ? "" : ": ", m.error.c_str());
  }
  if (!r.dry_run) std::printf("%llu moved, %llu failed\n", u(r.moved), u(r.failed));
}

// The human form of the "cache" answer (docs/coopcache.md).
void PrintCache(const control::CacheReply& r) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("node %s\n", r.node.c_str());
  if (!r.enabled) {
    std::printf("  file-data cache off (coopcache.size: 0)\n");
    return;
  }
  std::printf("  size          %llu bytes in blocks of %llu\n", u(r.size_bytes), u(r.block_bytes));
  std::printf("  limit         %llu bytes now (keeps %llu bytes of memory available; "
              "shrunk %llu times, grown %llu)\n",
              u(r.limit_bytes), u(r.min_free_bytes), u(r.pressure_shrinks), u(r.pressure_grows));
  std::printf("  occupancy     %llu blocks, %llu bytes, %llu files (%llu probation, %llu protected)\n",
              u(r.blocks_used), u(r.bytes_used), u(r.files), u(r.probation),
              u(r.protected_blocks));
  std::printf("  hits          %llu\n", u(r.hits));
  std::printf("  misses        %llu (%llu of an older generation)\n", u(r.misses), u(r.stale));
  std::printf("  reads from files' nodes %llu, %llu bytes\n", u(r.fetches), u(r.fetched_bytes));
  std::printf("  streamed past the cache %llu reads, %llu bytes (long sequential reads)\n",
              u(r.streamed), u(r.streamed_bytes));
  std::printf("  stored %llu, refused %llu (changed meanwhile), evicted %llu, promoted %llu\n",
              u(r.puts), u(r.puts_refused), u(r.evictions), u(r.promotions));
  std::printf("  invalidations %llu, drops %llu\n", u(r.invalidations), u(r.clears));
  if (r.shared) {
    std::printf("  from other nodes' caches %llu blocks, %llu bytes; moved on %llu, unreachable %llu\n",
                u(r.remote_hits), u(r.remote_bytes), u(r.tag_misses), u(r.remote_errors));
  } else {
    std::printf("  not shared with other nodes\n");
  }
  std::printf("  as files' node: %llu reads sent to copies; %llu copies of %llu files known\n",
              u(r.redirects), u(r.directory_copies), u(r.directory_files));
  std::printf("  forwarding: %llu evictions told, %llu forwarded, %llu not the last copy, "
              "%llu dropped, %llu failed; %llu peers named, %llu blocks taken in\n",
              u(r.forward_evictions), u(r.forwards), u(r.forward_declined), u(r.forward_dropped),
              u(r.forward_errors), u(r.forward_asked), u(r.forwarded_in));
  std::printf("  hints: %llu kept; %llu misses read from where a block went, %llu moved on\n",
              u(r.hints), u(r.hint_hits), u(r.hint_misses));
}

void PrintPending(const control::PendingReply& r) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::string held, forgotten;
  for (const auto& n : r.held) held += (held.empty() ? "" : " ") + n;
  for (const auto& n : r.forgotten) forgotten += (forgotten.empty() ? "" : " ") + n;
  std::printf("node %s: %zu pending record(s); held dead: %s; forgotten: %s\n", r.node.c_str(),
              r.records.size(), held.empty() ? "none" : held.c_str(),
              forgotten.empty() ? "none" : forgotten.c_str());
  for (const auto& p : r.records) {
    std::printf("  %s must %s %s%s%s (op %llu by %s, %llu s ago)\n", p.node.c_str(),
                p.kind.c_str(), p.from.c_str(), p.to.empty() ? "" : " -> ", p.to.c_str(), u(p.op),
                p.coordinator.c_str(), u(p.age_ms / 1000));
  }
  std::printf("  received %llu, copied %llu (%llu not yet), told %llu, applied here %llu "
              "(%llu failed)\n",
              u(r.put_received), u(r.replicated), u(r.unreplicated), u(r.notified), u(r.applied),
              u(r.apply_failures));
}

// The human form of the reply to `cmd`.
void Print(const control::Command& cmd, const std::string& reply) {
  if (cmd.name == control::kStatus.name) {
    PrintStatus(Decode<control::StatusReply>(reply));
  } else if (cmd.name == control::kRing.name) {
    const auto r = Decode<control::RingReply>(reply);
    std::printf("%s is managed by %s (epoch %llu)\n", r.path.c_str(), r.manager.c_str(),
                static_cast<unsigned long long>(r.epoch));
  } else if (cmd.name == control::kWhere.name) {
    const auto r = Decode<control::WhereReply>(reply);
    std::string holders;
    for (const auto& h : r.holders) holders += (holders.empty() ? "" : " ") + h;
    std::printf("%s is held by %s\n", r.path.c_str(), holders.c_str());
  } else if (cmd.name == control::kList.name) {
    for (const auto& e : Decode<control::ListReply>(reply).entries) {
      std::string holders;
      for (const auto& h : e.holders) holders += (holders.empty() ? "" : ",") + h;
      std::printf("%-8s %-20s %s\n", e.type.c_str(), holders.c_str(), e.name.c_str());
    }
  } else if (cmd.name == control::kConflicts.name) {
    PrintConflicts(Decode<control::ConflictsReply>(reply));
  } else if (cmd.name == control::kDt.name) {
    PrintDt(Decode<control::DtReply>(reply));
  } else if (cmd.name == control::kFiles.name) {
    PrintFiles(Decode<control::FilesReply>(reply));
  } else if (cmd.name == control::kRebalance.name || cmd.name == control::kRebalancePlan.name) {
    PrintRebalance(Decode<control::RebalanceReply>(reply));
  } else if (cmd.name == control::kCache.name || cmd.name == control::kCacheDrop.name) {
    PrintCache(Decode<control::CacheReply>(reply));
  } else if (cmd.name == control::kPending.name) {
    PrintPending(Decode<control::PendingReply>(reply));
  } else if (cmd.name == control::kForget.name) {
    const auto r = Decode<control::ForgetReply>(reply);
    std::printf("%s forgotten (%llu pending record(s) dropped here)\n", r.node.c_str(),
                static_cast<unsigned long long>(r.dropped));
  } else if (cmd.name == control::kCancel.name) {
    const auto r = Decode<control::CancelReply>(reply);
    std::printf("cancelled the move of %s (at %s)\n", r.path.c_str(), r.node.c_str());
  } else if (cmd.name == control::kMigrateProgress.name) {
    const auto r = Decode<control::MigrateProgressReply>(reply);
    std::printf("%s: %s to %s, %llu of %llu bytes copied\n", r.path.c_str(), r.from.c_str(),
                r.to.c_str(), static_cast<unsigned long long>(r.copied),
                static_cast<unsigned long long>(r.bytes));
  } else if (cmd.name == control::kMetrics.name) {
    std::fputs(Decode<control::MetricsReply>(reply).text.c_str(), stdout);
  } else {
    std::printf("%s\n", control::Indented(reply).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedfsctl: inspect a running fedfsd"};
  app.require_subcommand(1);
  std::string socket, config;
  auto* sock_opt = app.add_option("-s,--socket", socket, "the daemon's control socket");
  app.add_option("-c,--config", config, "the daemon's config file (finds its control socket)")
      ->excludes(sock_opt);
  bool json = false;
  std::string path;
  std::vector<std::string> paths;  // migrate
  std::string node;
  std::vector<std::pair<const control::Command*, CLI::App*>> commands;
  std::string action;  // "cache drop"
  bool dry_run = false;  // "rebalance --dry-run"
  std::string max_rate;  // "migrate/rebalance --max-rate"
  for (const control::Command& c : control::kCommands) {
    if (c.name == control::kCacheDrop.name) continue;  // as "cache drop"
    if (c.name == control::kRebalancePlan.name) continue;  // as "rebalance --dry-run"
    if (c.name == control::kMigratePlan.name) continue;    // as "migrate --dry-run"
    auto* sub = app.add_subcommand(std::string(c.name), std::string(c.help));
    if (c.name == control::kMigrate.name) {
      sub->add_option("path", paths, "global paths of files and directories (their subtrees), e.g. /a/b")
          ->required();
    } else if (c.arg == control::Arg::kPath || c.arg == control::Arg::kPathNode) {
      sub->add_option("path", path, std::string(c.arg_help))->required();
    }
    if (c.arg == control::Arg::kPathNode) {
      sub->add_option("--to", node, "the node id to move it to")->required();
    }
    if (c.arg == control::Arg::kNode) {
      sub->add_option("node", node, std::string(c.arg_help))->required();
    }
    if (c.name == control::kCache.name) {
      sub->add_option("action", action, "drop: drop every cached block first")
          ->check(CLI::IsMember({"drop"}));
    }
    if (c.name == control::kMigrate.name) {
      sub->add_flag("--dry-run", dry_run, "check the move (the file's node's checks); move nothing");
    }
    if (c.name == control::kRebalance.name) {
      sub->add_flag("--dry-run", dry_run, "print the plan and the usage it leads to; move nothing");
    }
    if (c.name == control::kMigrate.name || c.name == control::kRebalance.name) {
      sub->add_option("--max-rate", max_rate,
                      "copy at most RATE bytes per second (e.g. 50M, 1GiB; K/M/G/T are powers of 1024)");
    }
    sub->add_flag("--json", json, "machine-readable output");
    commands.emplace_back(&c, sub);
  }
  app.add_subcommand("keygen", "print a new cluster key (store it mode 0600)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (app.got_subcommand("keygen")) {
      std::printf("%s\n", fedfs::m2m::GenerateClusterKeyHex().c_str());
      return 0;
    }
    const control::Command* cmd = nullptr;
    for (const auto& [c, sub] : commands) {
      if (app.got_subcommand(sub)) cmd = c;
    }
    if (cmd == nullptr) return 2;  // (require_subcommand: not reached)
    if (cmd->name == control::kCache.name && action == "drop") cmd = &control::kCacheDrop;
    if (cmd->name == control::kRebalance.name && dry_run) cmd = &control::kRebalancePlan;
    const std::string sock = FindSocket(socket, config);
    uint64_t rate = 0;
    if (!max_rate.empty()) {
      auto r = fedfs::ParseByteSize(max_rate);
      if (!r || *r == 0) {
        std::fprintf(stderr, "fedfsctl: --max-rate: %s\n",
                     r ? "must be more than 0 bytes per second" : r.error().context.c_str());
        return 2;
      }
      rate = *r;
    }
    if (cmd->name == control::kMigrate.name) {
      return fedfs::tools::RunMigrateJob({.socket = sock, .paths = paths, .to = node,
                                          .dry_run = dry_run, .max_rate = rate, .json = json});
    }
    // A rebalance answers when it is done, however long it takes (moves:
    // RunMigrateJob above).
    const bool job = cmd->name == control::kRebalance.name;
    control::Request request{std::string(cmd->name), path, node};
    request.max_rate = rate;
    auto reply = control::Ask(sock, request,
                              job ? std::chrono::seconds(0) : std::chrono::seconds(10));
    if (!reply) throw Failure{reply.error().context};
    if (json) {
      std::printf("%s\n", control::Indented(*reply).c_str());
    } else {
      Print(*cmd, *reply);
    }
    // Exit 1 when some move of a rebalance failed (its reason is printed).
    if (cmd->name == control::kRebalance.name &&
        Decode<control::RebalanceReply>(*reply).failed != 0) {
      return 1;
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "fedfsctl: %s\n", f.message.c_str());
    return 1;
  }
  return 0;
}
