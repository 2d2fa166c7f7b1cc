// Randomized multi-node namespace histories on real daemons (label
// "integration"): three fedfsd processes with FUSE mounts; six worker threads
// (two per node, each through its node's mountpoint) run random create
// (O_EXCL), unlink, rename (plain and RENAME_NOREPLACE), lstat and readdir
// on a pool of eight names in one shared directory, so that they collide.
// Every system call is timed (steady clock, one process) and the history is
// handed to the linearizability checker (tests/tools/history_check.h): the
// contract of docs/namespace.md is that once a namespace operation returned
// on one node, the next system call on any node observes it.
//
// Three layouts: the shared directory made through one mount with files
// placed on the creating node (placement local); the shared directory present
// in all three export roots with files spread over the nodes by a hash
// placement rule, so that most operations touch a remote node; and every file
// on one node (a fixed-node rule), used through all three mounts. Each runs
// with and without renames, twice more with the nodes taking turns, and once
// more with every directory counted as large, and once each under delayed
// and under lost messages (FEDFS_TEST_FAULTS, m2m/faulty_transport.h).
//
// FEDFS_HISTORY_SEEDS="3,17" replaces the default seeds (to replay a failure;
// the interleaving still depends on timing). The Cluster stops the daemons
// and clears the mounts whatever happens.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>

#include "tests/tools/cluster.h"
#include "tests/tools/history_check.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kNodes = 3;
constexpr int kWorkersPerNode = 2;
constexpr int kOpsPerWorker = 40;
const char* const kNames[] = {"a", "b", "c", "d", "e", "f", "g", "h"};

std::vector<uint64_t> Seeds() {
  std::vector<uint64_t> seeds{1, 2, 3, 4, 5};
  if (const char* env = std::getenv("FEDFS_HISTORY_SEEDS"); env != nullptr && *env != '\0') {
    seeds.clear();
    std::stringstream s(env);
    for (std::string item; std::getline(s, item, ',');) seeds.push_back(std::stoull(item));
  }
  return seeds;
}

// Runs one operation on `dir` (a directory through some mount) and records
// it. Paths in the history are relative to `dir`.
class Worker {
 public:
  Worker(int process, std::string dir, uint64_t seed, bool renames, HistoryRecorder* rec)
      : process_(process),
        dir_(std::move(dir)),
        renames_(renames),
        rng_(seed * 1000 + static_cast<uint64_t>(process)),
        rec_(rec) {}

  void Run(int ops) {
    for (int i = 0; i < ops; ++i) One();
  }

  void Readdir() {
    NsOp op;
    op.process = process_;
    op.kind = NsOpKind::kReaddir;
    const auto t = HistoryRecorder::Begin();
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) {
      op.err = errno;
    } else {
      for (;;) {
        errno = 0;
        const dirent* e = ::readdir(d);
        if (e == nullptr) {
          op.err = errno;
          break;
        }
        const std::string n = e->d_name;
        if (n != "." && n != "..") op.names.insert(n);
      }
      ::closedir(d);
    }
    if (op.err != 0) op.names.clear();
    rec_->End(std::move(op), t);
  }

 private:
  std::string Name() { return kNames[std::uniform_int_distribution<size_t>(0, std::size(kNames) - 1)(rng_)]; }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void One() {
    int dice = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (!renames_ && dice >= 40 && dice < 60) dice -= 20;  // renames become creates/unlinks
    NsOp op;
    op.process = process_;
    if (dice < 25) {
      op.kind = NsOpKind::kCreate;
      op.a = Name();
      const auto t = HistoryRecorder::Begin();
      const int fd = ::open(Path(op.a).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
      op.err = fd < 0 ? errno : 0;
      rec_->End(std::move(op), t);
      if (fd >= 0) ::close(fd);
    } else if (dice < 40) {
      op.kind = NsOpKind::kUnlink;
      op.a = Name();
      const auto t = HistoryRecorder::Begin();
      op.err = ::unlink(Path(op.a).c_str()) == 0 ? 0 : errno;
      rec_->End(std::move(op), t);
    } else if (dice < 60) {
      const bool noreplace = dice < 50;
      op.kind = noreplace ? NsOpKind::kRenameNoReplace : NsOpKind::kRename;
      op.a = Name();
      op.b = Name();
      const auto t = HistoryRecorder::Begin();
      op.err = ::renameat2(AT_FDCWD, Path(op.a).c_str(), AT_FDCWD, Path(op.b).c_str(),
                           noreplace ? RENAME_NOREPLACE : 0) == 0
                   ? 0
                   : errno;
      rec_->End(std::move(op), t);
    } else if (dice < 80) {
      op.kind = NsOpKind::kStat;
      op.a = Name();
      struct stat st {};
      const auto t = HistoryRecorder::Begin();
      const int rc = ::lstat(Path(op.a).c_str(), &st);
      op.err = rc == 0 ? 0 : errno;
      if (rc == 0) op.type = S_ISDIR(st.st_mode) ? NsType::kDir : NsType::kFile;
      rec_->End(std::move(op), t);
    } else {
      Readdir();
    }
  }

  int process_;
  std::string dir_;
  bool renames_;
  std::mt19937_64 rng_;
  HistoryRecorder* rec_;
};

// Where the shared directory lives and where new files go.
enum class Layout {
  kCreatingNode,  // made through n1's mount; files on the creating node
  kSpreadByHash,  // in all three export roots; files spread by a hash rule
  kOneNode,       // every file on n2 (fixed-node rule), used from all three
};
struct Variant {
  Layout layout;
  bool renames;  // false: create/unlink/stat/readdir only
  // The nodes take turns: the workers of node i start i x 40 ms after the
  // others, so that one node changes the directory alone for a while (its
  // manager lends it the VD, docs/namespace.md "Leases") and the next one's
  // operations recall it.
  bool turns = false;
  // Every directory counts as large (directory_table.whole_max_entries 1): a
  // lookup without a copy is answered for its name only, and the node keeps
  // names beside a skeleton (docs/namespace.md, "Large directories"); a
  // table of 2 entries drops copies often, so lookups without one are many.
  bool large = false;
  // FEDFS_TEST_FAULTS for every daemon (m2m/faulty_transport.h). With lost
  // messages, operations that fail with ETIMEDOUT, EIO, ... may or may not
  // have happened (checked so: history_check.h, unknown_outcomes).
  const char* faults = nullptr;
};

std::string Describe(const Variant& v) {
  const char* layout[] = {"CreatingNode", "SpreadByHash", "OneNode"};
  return std::string(layout[static_cast<int>(v.layout)]) + (v.renames ? "WithRenames" : "NoRenames") +
         (v.turns ? "InTurns" : "") + (v.large ? "Large" : "") +
         (v.faults == nullptr ? ""
          : std::string_view(v.faults).find("drop") != std::string_view::npos      ? "Lossy"
          : std::string_view(v.faults).find("duplicate") != std::string_view::npos ? "Duplicated"
                                                                                    : "Delayed");
}
std::string VariantName(const ::testing::TestParamInfo<Variant>& info) { return Describe(info.param); }
void PrintTo(const Variant& v, std::ostream* os) { *os << Describe(v); }

class NamespaceHistory : public ::testing::TestWithParam<Variant> {
 protected:
  void StartAndLaunch(const std::string& extra_yaml,
                      const std::function<void(const std::vector<std::string>&)>& before_launch,
                      const char* faults = nullptr) {
    std::vector<std::string> addrs;
    for (int i = 0; i < kNodes; ++i) addrs.push_back("127.0.0.1:" + std::to_string(FreePort()));
    std::map<std::string, std::string> configs;
    for (int i = 0; i < kNodes; ++i) {
      const std::string id = "n" + std::to_string(i + 1);
      std::vector<std::string> peers(addrs.begin(), addrs.begin() + i);
      configs[id] = c_.WriteConfig({.id = id, .listen = addrs[static_cast<size_t>(i)], .peers = peers,
                                    .extra_yaml = extra_yaml});
      ids_.push_back(id);
    }
    before_launch(ids_);
    {
      std::optional<ScopedEnv> env;
      if (faults != nullptr) env.emplace("FEDFS_TEST_FAULTS", faults);
      for (const auto& id : ids_) c_.Start(id, configs[id]);
    }
    for (const auto& id : ids_) {
      ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive(id, ids_); }, kNoHang)) << id << " log:\n" << c_.Log(id);
      ASSERT_TRUE(WaitFor([&] { return IsMounted(c_.Mountpoint(id)); }, kNoHang)) << id << " log:\n" << c_.Log(id);
      if (faults != nullptr) {
        ASSERT_NE(c_.Log(id).find("test hook: injecting transport faults"), std::string::npos)
            << id << " injects no faults";
      }
    }
  }

  // A counter of `fedfsctl dt --json` summed over all nodes so far: a
  // top-level one (leases_granted, unlinks_made, ...), or the directory
  // table's (`table` set: skeletons).
  uint64_t DtSum(const std::string& field, bool table = false) const {
    uint64_t n = 0;
    for (const auto& id : ids_) {
      auto r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket(id), "dt", "--json"}, kNoHang);
      auto j = nlohmann::json::parse(r.out, nullptr, false);
      if (r.exit_code != 0 || !j.is_object()) continue;
      if (!table) {
        n += j.value(field, uint64_t{0});
      } else if (j.contains("table") && j["table"].is_object()) {
        n += j["table"].value(field, uint64_t{0});
      }
    }
    return n;
  }

  void RunHistory(const std::string& rel, uint64_t seed, bool renames, bool turns,
                  bool lossy = false) {
    HistoryRecorder rec;
    std::vector<Worker> workers;
    for (int n = 0; n < kNodes; ++n) {
      for (int k = 0; k < kWorkersPerNode; ++k) {
        workers.emplace_back(n * kWorkersPerNode + k, c_.Mountpoint(ids_[static_cast<size_t>(n)]) + rel,
                             seed, renames, &rec);
      }
    }
    std::latch go(static_cast<ptrdiff_t>(workers.size()));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < workers.size(); ++i) {
      const auto delay = std::chrono::milliseconds(turns ? 40 * (i / kWorkersPerNode) : 0);
      threads.emplace_back([&go, &w = workers[i], delay] {
        go.arrive_and_wait();
        std::this_thread::sleep_for(delay);
        w.Run(kOpsPerWorker);
      });
    }
    for (auto& t : threads) t.join();
    for (int n = 0; n < kNodes; ++n) {
      Worker(static_cast<int>(workers.size()) + n, c_.Mountpoint(ids_[static_cast<size_t>(n)]) + rel,
             seed, renames, &rec)
          .Readdir();
    }
    const std::vector<NsOp> history = rec.Take();
    const auto start = std::chrono::steady_clock::now();
    const HistoryVerdict v = CheckLinearizable(history, {}, lossy);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    std::printf("seed %llu (%s): %zu operations, %s, %llu configurations, checked in %lld ms\n",
                static_cast<unsigned long long>(seed), rel.c_str(), history.size(),
                v.linearizable ? "linearizable" : "NOT linearizable",
                static_cast<unsigned long long>(v.explored), static_cast<long long>(took.count()));
    ASSERT_TRUE(v.linearizable) << "seed " << seed << ", directory " << rel << "\n"
                                << v.explanation << "history (" << history.size()
                                << " operations, by invocation; p0-p5 workers, p0/p1 on n1, "
                                   "p2/p3 on n2, p4/p5 on n3, p6-p8 final listings):\n"
                                << FormatHistory(history) << DaemonNotes();
  }

  // The daemons' log lines above debug level (membership changes, timeouts,
  // failed VD updates), the last ones of each node: for a failure report.
  std::string DaemonNotes() {
    std::string out;
    // FEDFS_TEST_KEEP_LOGS=<dir>: the whole logs of a failing run are copied
    // there (debug level), for a closer look.
    if (const char* keep = std::getenv("FEDFS_TEST_KEEP_LOGS"); keep != nullptr && *keep != '\0') {
      static int kept_runs = 0;  // across the fixtures of one process (--gtest_repeat)
      const std::string stamp = std::to_string(::getpid()) + "-" + std::to_string(++kept_runs);
      for (const auto& id : ids_) {
        const std::string to = std::string(keep) + "/history-" + stamp + "-" + id + ".log";
        std::ofstream(to) << c_.Log(id);
        out += "kept " + to + "\n";
      }
    }
    for (const auto& id : ids_) {
      std::istringstream log(c_.Log(id));
      std::deque<std::string> kept;
      for (std::string line; std::getline(log, line);) {
        // "<time> <level letter> <node> [<component>] <message>"
        const size_t sp = line.find(' ');
        if (sp != std::string::npos && line.size() > sp + 2 && line[sp + 2] == ' ' &&
            (line[sp + 1] == 'D' || line[sp + 1] == 'T')) {
          continue;
        }
        kept.push_back(std::move(line));
        if (kept.size() > 40) kept.pop_front();
      }
      out += id + " log, above debug level (last " + std::to_string(kept.size()) + " lines):\n";
      for (const auto& l : kept) out += "  " + l + "\n";
    }
    return out;
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_P(NamespaceHistory, RandomHistoriesAreLinearizable) {
  const Variant v = GetParam();
  const std::vector<uint64_t> seeds = Seeds();
  std::string yaml;
  if (v.layout == Layout::kSpreadByHash) {
    yaml = "placement: {policy: local, rules: [{prefix: /h, policy: hash}]}\n";
  } else if (v.layout == Layout::kOneNode) {
    yaml = "placement: {policy: local, rules: [{prefix: /h, node: n2}]}\n";
  }
  if (v.large) yaml += "directory_table: {whole_max_entries: 1, entries: 2}\n";
  ASSERT_NO_FATAL_FAILURE(StartAndLaunch(yaml, [&](const std::vector<std::string>& ids) {
    if (v.layout != Layout::kSpreadByHash) return;
    for (const auto& id : ids) {
      for (uint64_t seed : seeds) fs::create_directories(c_.ExportRoot(id) + "/h/s" + std::to_string(seed));
    }
  }, v.faults));
  for (uint64_t seed : seeds) {
    const std::string rel = "/h/s" + std::to_string(seed);
    if (v.layout != Layout::kSpreadByHash) {
      ASSERT_EQ(::mkdir((c_.Mountpoint("n1") + "/h").c_str(), 0755) == 0 || errno == EEXIST, true)
          << std::strerror(errno);
      ASSERT_EQ(::mkdir((c_.Mountpoint("n1") + rel).c_str(), 0755), 0) << std::strerror(errno);
    }
    SCOPED_TRACE("seed " + std::to_string(seed));
    const bool lossy = v.faults != nullptr && std::string_view(v.faults).find("drop") != std::string_view::npos;
    ASSERT_NO_FATAL_FAILURE(RunHistory(rel, seed, v.renames, v.turns, lossy));
  }
  const uint64_t leases = DtSum("leases_granted");
  const uint64_t skeletons = DtSum("skeletons", true);
  const uint64_t unlinks = DtSum("unlinks_made");
  const uint64_t renames = DtSum("renames_made");
  std::printf("leases granted: %llu, lookups answered for names only: %llu, unlinks and renames "
              "made by managers: %llu, %llu\n",
              static_cast<unsigned long long>(leases), static_cast<unsigned long long>(skeletons),
              static_cast<unsigned long long>(unlinks), static_cast<unsigned long long>(renames));
  // All nodes at once: the nodes other than a directory's manager unlink
  // (and rename within it) in one call to it.
  if (!v.turns) {
    EXPECT_GT(unlinks, 0u);
    if (v.renames) {
      EXPECT_GT(renames, 0u);
    }
  }
  // Taking turns, each node changes the directory alone for a while.
  if (v.turns) {
    EXPECT_GT(leases, 0u);
  }
  if (v.large) {
    EXPECT_GT(skeletons, 0u);
  }
}

// Violations this test found and that are fixed: two O_EXCL creates of one
// name through two nodes both succeeding (names are now claimed at the
// manager first); a create answering ENOENT while a concurrent unlink
// removed the file (it retries; open answers ESTALE so the kernel looks the
// path up again); a rename within a directory reported as two updates (now
// one atomic change); a rename over a name on another node deleting that copy
// before renaming (now after); late autonomy echoes of FedFS' own changes.
// Two renames touching one name on one holder could be applied at the
// manager in the other order than on the holder, leaving a name no holder has
// (seen with this test): names are now held at the manager (VdChange::kLock)
// from before the holder is changed until the change is applied. Ten runs of
// the six variants each way, interleaved: 12 variants failed with the locks
// against 21 without; 3 of the 10 runs passed whole, 0 without (the rate is
// noisy: 38 of 180 against 36 of 120 over all runs made then). The last
// ones, after which 25 runs of all six passed in a row: a create answering
// EEXIST because another node's create had claimed the name (that create
// could still fail; it is now waited out); two nodes creating one name on a
// third sharing its claim (holds now belong to the requesting node); a get
// served the new VD while sharers' bumps were still on their way, and the
// reporter serving its old copy until its reply came (gets wait for the
// round; the reporter's copy is not used meanwhile); a lookup of a name
// that a rename from another node had just replaced waiting for the name to
// go, which it never does (it waits for the entry to change and looks again).
// Then: a reply handing the kernel a name while the node dropped its names
// (now uncacheable); a stat whose lookup and getattr straddled two renames
// over the name (the getattr answers the old file, unlinked); a
// RENAME_NOREPLACE of a name onto itself answered 0 (EEXIST); a listing
// whose READDIRPLUS reply carried a name removed meanwhile into the kernel's
// cache (no readdirplus); a lock granted during the invalidation round of
// the change before it (locks wait for the round); a VD merged without an
// overloaded node's listing deciding a create (such a VD decides no claim).
// The checker reads a RENAME_NOREPLACE's EEXIST as the kernel's two lookups.
// Then: changes told to sharers as deltas (directory_table.deltas) showed a
// change on one node before another while it was being made (a listing
// without a create that another node's listing had shown): deltas are off
// by default since; and two ways a patched copy lost a delta to a fetch
// installed meanwhile (fixed in DirTable).
INSTANTIATE_TEST_SUITE_P(
    Variants, NamespaceHistory,
    ::testing::Values(Variant{Layout::kOneNode, false}, Variant{Layout::kCreatingNode, false},
                      Variant{Layout::kSpreadByHash, false},
                      Variant{Layout::kCreatingNode, true}, Variant{Layout::kSpreadByHash, true},
                      Variant{Layout::kOneNode, true},
                      Variant{Layout::kCreatingNode, true, true},
                      Variant{Layout::kSpreadByHash, true, true},
                      Variant{Layout::kSpreadByHash, true, false, true},
                      Variant{Layout::kSpreadByHash, true, false, false, "delay=0.3:3ms,seed=5"},
                      // Lost messages: 0.5 % of every node's calls, half of
                      // them after the peer acted. The violations it found:
                      // a VD change whose request was lost (the create
                      // returned, the manager never knew), an invalidation
                      // whose reply was lost (the sharer dropped, its copy
                      // stale), a file-service rename whose reply was lost
                      // (done at the holder, never reported): now resent,
                      // changes served once (m2m/reply_cache.h).
                      Variant{Layout::kSpreadByHash, true, false, false,
                              "drop=0.005,delay=0.3:3ms,seed=9"},
                      // Duplicated requests: 2 % of every node's calls are
                      // sent twice, the copy up to 3 ms apart (before or
                      // after the original), its answer thrown away.
                      Variant{Layout::kSpreadByHash, true, false, false,
                              "duplicate=0.02,delay=0.3:3ms,seed=11"}),
    VariantName);

}  // namespace
}  // namespace fedfs::testing
