// The directory table and autonomy on real daemons (label "integration"):
// three fedfsd processes, each mounting the namespace under the test's
// temporary directory (needs root and /dev/fuse).
//
//  * Autonomy: files and directories that a local program creates, renames
//    and removes directly in one node's export root show up correctly
//    through every mount (the measured delays are printed, not asserted; the
//    waits are bounded by kNoHang only so that a failure does not hang).
//  * An inotify queue overflow on one node (a storm of creates and unlinks)
//    ends consistent: every mount lists what the export roots hold.
//  * Directory-table counters (fedfsctl dt --json): repeated lookups of a
//    directory managed elsewhere are hits and send nothing.
//  * Coherence: a change made through one mount is seen by the very next
//    system call through another (no polling).
//  * Membership: the manager of a directory is killed; the survivors keep
//    listing and creating there; the restarted node rejoins and sees it all.
//
// Every test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens. Tests assert counts and
// end states, never durations (apart from generous upper bounds on waits).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Directories made before the start, among which a test picks one that a
// given node manages (each has a 1/3 chance).
constexpr int kCandidates = 30;

std::string Loop() { return "127.0.0.1:" + std::to_string(FreePort()); }

// Writes `text` to `path` with plain open/write/close, as a local program
// would (the parent must exist): `flags` O_TRUNC replaces it, O_APPEND
// appends to an existing file.
bool WriteLocal(const std::string& path, const std::string& text, int flags = O_CREAT | O_TRUNC) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  return ::close(fd) == 0 && ok;
}

bool Append(const std::string& path, const std::string& text) {
  return WriteLocal(path, text, O_APPEND);
}

// Names in a directory (tests/tools/cluster.h).
std::set<std::string> List(const std::string& dir) { return ListNames(dir); }

// 0 if `path` exists (lstat), else the errno.
int StatErr(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Polls `pred` every 10 ms until it holds or `limit` passes. Returns the
// milliseconds from `since` until it held, or -1.
long PollMs(const std::function<bool()>& pred, Clock::time_point since,
            std::chrono::milliseconds limit = kNoHang) {
  for (;;) {
    if (pred()) {
      return static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count());
    }
    if (Clock::now() - since > limit) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class Autonomy : public ::testing::Test {
 protected:
  // Writes the configs of n1..n<count> (n<i> seeds from the earlier ones).
  void StartNodes(int count, const std::string& extra_yaml = "") {
    std::vector<std::string> addrs;
    for (int i = 0; i < count; ++i) addrs.push_back(Loop());
    for (int i = 0; i < count; ++i) {
      const std::string id = "n" + std::to_string(i + 1);
      std::vector<std::string> peers;
      for (int j = 0; j < count; ++j) {
        if (j != i) peers.push_back(addrs[j]);
      }
      configs_[id] = c_.WriteConfig(
          {.id = id, .listen = addrs[i], .peers = peers, .extra_yaml = extra_yaml});
      ids_.push_back(id);
    }
  }
  // Starts every node; returns when all see each other and every mount is up.
  void Launch() {
    for (const auto& id : ids_) c_.Start(id, configs_[id]);
    ASSERT_NO_FATAL_FAILURE(WaitWhole(ids_));
  }
  void WaitWhole(const std::vector<std::string>& ids) {
    for (const auto& id : ids) {
      ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive(id, ids); }, kNoHang))
          << id << " log:\n" << c_.Log(id);
      ASSERT_TRUE(WaitFor([&] { return IsMounted(c_.Mountpoint(id)); }, kNoHang))
          << id << " log:\n" << c_.Log(id);
    }
  }
  std::string M(const std::string& id, const std::string& rel = "") const {
    return c_.Mountpoint(id) + rel;
  }
  std::string E(const std::string& id, const std::string& rel) const {
    return c_.ExportRoot(id) + rel;
  }
  // fedfsctl <cmd...> --json on node `id`, parsed (null on failure).
  nlohmann::json Ctl(const std::string& id, std::vector<std::string> args) const {
    auto j = c_.Ctl(id, args);
    if (j.is_null()) ADD_FAILURE() << "fedfsctl " << args.front() << " on " << id << " failed";
    return j;
  }
  // `holder` sent at least `n` attribute callbacks, none failed, and
  // `taker` received at least `n` (fedfsctl files).
  void ExpectCallbacks(const std::string& holder, const std::string& taker, int64_t n) const {
    const auto h = Ctl(holder, {"files"});
    const auto t = Ctl(taker, {"files"});
    ASSERT_TRUE(h.is_object() && t.is_object());
    EXPECT_GE(h["callbacks_sent"].get<int64_t>(), n) << h.dump();
    EXPECT_EQ(h["callbacks_failed"].get<int64_t>(), 0) << h.dump();
    EXPECT_GE(t["callbacks_received"].get<int64_t>(), n) << t.dump();
  }
  // The manager of `path` in `id`'s view.
  std::string Manager(const std::string& id, const std::string& path) const {
    auto j = Ctl(id, {"ring", path});
    return j.is_object() ? j.value("manager", std::string()) : std::string();
  }
  // A fresh path "/<prefix><i>" whose manager is `manager`.
  std::string PathManagedBy(const std::string& prefix, const std::string& manager) const {
    for (int i = 0; i < kCandidates; ++i) {
      const std::string p = "/" + prefix + std::to_string(i);
      if (Manager(ids_.front(), p) == manager) return p;
    }
    ADD_FAILURE() << "no path " << prefix << "* is managed by " << manager;
    return "";
  }
  // Before Launch: the candidates "/<prefix><i>" on every node, each with a
  // file f.txt held by n2 (made before the start: no autonomy report, nor
  // the invalidation it causes, can fall between later counter snapshots).
  void MakeCandidatesWithFileOnN2(const std::string& prefix) {
    for (int i = 0; i < kCandidates; ++i) {
      const std::string p = "/" + prefix + std::to_string(i);
      for (const auto& id : ids_) fs::create_directories(E(id, p));
      ASSERT_TRUE(WriteLocal(E("n2", p + "/f.txt"), "f\n"));
    }
  }
  // True when every mount shows `dir/name` (lstat works, readdir lists it).
  bool SeenEverywhere(const std::string& dir, const std::string& name) const {
    for (const auto& id : ids_) {
      if (StatErr(M(id, dir + "/" + name)) != 0 || !List(M(id, dir)).contains(name)) return false;
    }
    return true;
  }
  // True when no mount shows `dir/name` (ENOENT, not listed).
  bool GoneEverywhere(const std::string& dir, const std::string& name) const {
    for (const auto& id : ids_) {
      if (StatErr(M(id, dir + "/" + name)) != ENOENT || List(M(id, dir)).contains(name)) {
        return false;
      }
    }
    return true;
  }
  std::string Views(const std::string& dir) const {
    std::string s;
    for (const auto& id : ids_) s += id + ": " + ::testing::PrintToString(List(M(id, dir))) + "\n";
    return s;
  }

  Cluster c_;
  std::vector<std::string> ids_;
  std::map<std::string, std::string> configs_;
};

// Changes made by local programs directly in n2's (or n3's, n1's) export
// root show up in every mount. Delays are measured and printed.
TEST_F(Autonomy, LocalChangesShowUpInEveryMount) {
  StartNodes(3);
  for (const auto& id : ids_) fs::create_directories(E(id, "/shared"));
  fs::create_directories(E("n1", "/solo"));  // a directory only n1 has
  ASSERT_NO_FATAL_FAILURE(Launch());
  // List once through each mount: VDs exist, every node watches the
  // directories it listed, the other nodes cache the VDs.
  for (const auto& id : ids_) {
    EXPECT_EQ(List(M(id, "/shared")), std::set<std::string>{}) << id;
    EXPECT_EQ(List(M(id, "/solo")), std::set<std::string>{}) << id;
  }

  // Create, rename, unlink in n2's export root.
  auto t0 = Clock::now();
  ASSERT_TRUE(WriteLocal(E("n2", "/shared/local.txt"), "made behind FedFS' back\n"));
  const long create_ms = PollMs([&] { return SeenEverywhere("/shared", "local.txt"); }, t0);
  EXPECT_GE(create_ms, 0) << "create not seen:\n" << Views("/shared");
  for (const auto& id : ids_) {
    EXPECT_EQ(ReadFileText(M(id, "/shared/local.txt")), "made behind FedFS' back\n") << id;
  }

  t0 = Clock::now();
  ASSERT_EQ(::rename(E("n2", "/shared/local.txt").c_str(), E("n2", "/shared/renamed.txt").c_str()), 0)
      << std::strerror(errno);
  const long rename_ms = PollMs(
      [&] { return GoneEverywhere("/shared", "local.txt") && SeenEverywhere("/shared", "renamed.txt"); },
      t0);
  EXPECT_GE(rename_ms, 0) << "rename not seen:\n" << Views("/shared");

  t0 = Clock::now();
  ASSERT_EQ(::unlink(E("n2", "/shared/renamed.txt").c_str()), 0) << std::strerror(errno);
  const long unlink_ms = PollMs([&] { return GoneEverywhere("/shared", "renamed.txt"); }, t0);
  EXPECT_GE(unlink_ms, 0) << "unlink not seen:\n" << Views("/shared");
  std::printf("autonomy delay: create %ld ms, rename %ld ms, unlink %ld ms\n", create_ms, rename_ms,
              unlink_ms);
  for (const auto& id : ids_) EXPECT_EQ(List(M(id, "/shared")), std::set<std::string>{}) << id;

  // A directory with a file inside, made directly in n3's export root.
  t0 = Clock::now();
  ASSERT_EQ(::mkdir(E("n3", "/shared/newdir").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(WriteLocal(E("n3", "/shared/newdir/inner.txt"), "inner\n"));
  const long mkdir_ms = PollMs(
      [&] {
        for (const auto& id : ids_) {
          if (!IsDir(M(id, "/shared/newdir")) || !List(M(id, "/shared")).contains("newdir") ||
              List(M(id, "/shared/newdir")) != std::set<std::string>{"inner.txt"}) {
            return false;
          }
        }
        return true;
      },
      t0);
  EXPECT_GE(mkdir_ms, 0) << "new directory not seen:\n"
                         << Views("/shared") << Views("/shared/newdir");
  for (const auto& id : ids_) {
    EXPECT_EQ(ReadFileText(M(id, "/shared/newdir/inner.txt")), "inner\n") << id;
  }

  // A file appears in the directory that only n1 has.
  t0 = Clock::now();
  ASSERT_TRUE(WriteLocal(E("n1", "/solo/late.txt"), "late\n"));
  const long solo_ms = PollMs([&] { return SeenEverywhere("/solo", "late.txt"); }, t0);
  EXPECT_GE(solo_ms, 0) << "file in a one-node directory not seen:\n" << Views("/solo");
  for (const auto& id : ids_) EXPECT_EQ(ReadFileText(M(id, "/solo/late.txt")), "late\n") << id;

  // Then a file in the directory that appeared behind FedFS' back (now
  // listed, hence watched).
  t0 = Clock::now();
  ASSERT_TRUE(WriteLocal(E("n3", "/shared/newdir/second.txt"), "second\n"));
  const long second_ms = PollMs([&] { return SeenEverywhere("/shared/newdir", "second.txt"); }, t0);
  EXPECT_GE(second_ms, 0) << "file in the new directory not seen:\n"
                          << Views("/shared/newdir");
  std::printf("autonomy delay: new directory %ld ms, file in a one-node directory %ld ms, "
              "file in the new directory %ld ms\n",
              mkdir_ms, solo_ms, second_ms);
}

// A storm of local creates and unlinks in a watched directory of n2 (more
// events than inotify queues by default) ends with every mount listing
// exactly what the export roots hold.
//  1. As a local program would make it: a tight loop. The watcher may keep
//     up (no overflow); the end state is checked either way.
//  2. Forced: n2 is stopped (SIGSTOP by pid) while the storm runs, so its
//     watcher cannot read and the kernel queue overflows for certain
//     (/proc/sys/fs/inotify/max_queued_events is not touched); the unlinks
//     happen while it is stopped, so only the overflow handling (every
//     watched directory dropped and rebuilt) can make the mounts right.
TEST_F(Autonomy, InotifyOverflowEndsConsistent) {
  // n2 stays stopped for a few seconds: failure detection must not fire.
  std::vector<std::string> addrs;
  for (int i = 0; i < 3; ++i) addrs.push_back(Loop());
  for (int i = 0; i < 3; ++i) {
    const std::string id = "n" + std::to_string(i + 1);
    std::vector<std::string> peers;
    for (int j = 0; j < 3; ++j) {
      if (j != i) peers.push_back(addrs[j]);
    }
    configs_[id] = c_.WriteConfig({.id = id, .listen = addrs[i], .peers = peers, .failure_ms = 30000});
    ids_.push_back(id);
  }
  for (const char* d : {"/storm", "/forced"}) {
    for (const auto& id : ids_) fs::create_directories(E(id, d));
    ASSERT_TRUE(WriteLocal(E("n1", std::string(d) + "/keep1.txt"), "1\n"));
    ASSERT_TRUE(WriteLocal(E("n3", std::string(d) + "/keep3.txt"), "3\n"));
  }
  ASSERT_NO_FATAL_FAILURE(Launch());
  for (const char* d : {"/storm", "/forced"}) {
    for (const auto& id : ids_) {
      EXPECT_EQ(List(M(id, d)), (std::set<std::string>{"keep1.txt", "keep3.txt"})) << id << d;
    }
  }
  int queue = 16384;
  if (const std::string q = ReadFileText("/proc/sys/fs/inotify/max_queued_events"); !q.empty()) {
    queue = std::stoi(q);
  }
  const int files = std::max(20000, queue + 4000);

  // Creates `files` entries in n2's `dir`, then unlinks every other one.
  auto storm = [&](const std::string& dir) {
    const std::string base = E("n2", dir + "/f");
    for (int i = 0; i < files; ++i) {
      const std::string p = base + std::to_string(i);
      const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      ASSERT_GE(fd, 0) << p << ": " << std::strerror(errno);
      ::close(fd);
    }
    for (int i = 0; i < files; i += 2) {
      const std::string p = base + std::to_string(i);
      ASSERT_EQ(::unlink(p.c_str()), 0) << p << ": " << std::strerror(errno);
    }
  };
  // Polls until every mount lists the union of the export roots' `dir`;
  // the delay in ms, or -1 (with the differences reported) after kNoHang.
  auto settle = [&](const std::string& dir, Clock::time_point since) {
    std::set<std::string> want;
    for (const auto& id : ids_) {
      for (const auto& e : fs::directory_iterator(E(id, dir))) {
        want.insert(e.path().filename().string());
      }
    }
    EXPECT_EQ(want.size(), static_cast<size_t>(files / 2 + 2));
    std::map<std::string, std::set<std::string>> seen;
    const long ms = PollMs(
        [&] {
          for (const auto& id : ids_) {
            seen[id] = List(M(id, dir));
            if (seen[id] != want) return false;
          }
          return true;
        },
        since);
    if (ms >= 0) return ms;
    for (const auto& [id, got] : seen) {
      std::vector<std::string> extra, missing;
      std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                          std::back_inserter(extra));
      std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                          std::back_inserter(missing));
      ADD_FAILURE() << dir << ": " << id << " lists " << got.size()
                    << " entries, the export roots hold " << want.size() << "; extra "
                    << extra.size() << " (first " << (extra.empty() ? "-" : extra.front())
                    << "), missing " << missing.size() << " (first "
                    << (missing.empty() ? "-" : missing.front()) << ")";
    }
    return ms;
  };
  auto overflows = [&] {
    const std::string log = c_.Log("n2");
    size_t n = 0;
    for (size_t at = log.find("inotify queue overflow"); at != std::string::npos;
         at = log.find("inotify queue overflow", at + 1)) {
      ++n;
    }
    return n;
  };

  // 1. The tight loop.
  auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(storm("/storm"));
  const auto storm_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  const long loop_ms = settle("/storm", t0);
  const size_t loop_overflows = overflows();
  std::printf("inotify storm (tight loop): %d creates + %d unlinks in %lld ms, overflow %s, "
              "every mount consistent after %ld ms\n",
              files, files / 2, static_cast<long long>(storm_ms),
              loop_overflows > 0 ? "happened" : "did not happen", loop_ms);

  // 2. Forced: n2 stopped while the storm runs. SIGCONT whatever happens.
  const pid_t n2 = c_.pid("n2");
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  };
  t0 = Clock::now();
  {
    ASSERT_EQ(::kill(n2, SIGSTOP), 0) << std::strerror(errno);
    Resume resume{n2};
    ASSERT_NO_FATAL_FAILURE(storm("/forced"));
  }
  EXPECT_TRUE(WaitFor([&] { return overflows() > loop_overflows; }, kNoHang))
      << "no inotify overflow reported by n2 after a stopped storm of " << files << " creates";
  const long forced_ms = settle("/forced", t0);
  std::printf("inotify storm (n2 stopped): overflow %s, every mount consistent %ld ms after the "
              "storm began\n",
              overflows() > loop_overflows ? "happened" : "did not happen", forced_ms);
  // The first storm's directory stays right too.
  EXPECT_GE(settle("/storm", Clock::now()), 0);

  // And a change made after the storms is still reported (the watches stayed).
  const auto t1 = Clock::now();
  ASSERT_TRUE(WriteLocal(E("n2", "/forced/after.txt"), "after\n"));
  EXPECT_GE(PollMs([&] { return SeenEverywhere("/forced", "after.txt"); }, t1), 0)
      << "a change after the storm was not seen";
}

// A directory that a local program keeps filling (one file a millisecond,
// too slow to count as a burst) while FedFS lists it for the first time:
// every file must show up in the end.
//
// This found a window that is now closed: a node used to start watching a
// directory only after it had listed it for a dirmerge, so a file created
// between the two was neither listed nor reported. It now watches first.
TEST_F(Autonomy, DirectoryFilledWhileFirstListed) {
  StartNodes(3);
  fs::create_directories(E("n2", "/busy"));
  ASSERT_TRUE(WriteLocal(E("n2", "/busy/first"), "0\n"));
  ASSERT_NO_FATAL_FAILURE(Launch());
  std::atomic<bool> stop{false};
  std::atomic<int> made{0};
  std::thread writer([&] {
    for (int i = 0; i < 1000 && !stop.load(); ++i) {
      const std::string p = E("n2", "/busy/r" + std::to_string(i));
      const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
      made.store(i + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  struct Join {
    std::thread& t;
    std::atomic<bool>& stop;
    ~Join() {
      stop.store(true);
      if (t.joinable()) t.join();
    }
  } join{writer, stop};
  while (made.load() < 50) std::this_thread::yield();
  // The first lookup and listing while the writer runs.
  const int before = made.load();
  EXPECT_EQ(StatErr(M("n1", "/busy/first")), 0);
  EXPECT_TRUE(List(M("n3", "/busy")).contains("first"));
  const int after = made.load();
  writer.join();
  std::printf("first listing while the writer made files %d..%d of %d\n", before, after,
              made.load());
  std::set<std::string> want;
  for (const auto& e : fs::directory_iterator(E("n2", "/busy"))) {
    want.insert(e.path().filename().string());
  }
  const auto t0 = Clock::now();
  std::map<std::string, std::set<std::string>> seen;
  const long ms = PollMs(
      [&] {
        bool all = true;
        for (const auto& id : ids_) {
          seen[id] = List(M(id, "/busy"));
          all = all && seen[id] == want;
        }
        return all;
      },
      t0);
  if (ms < 0) {
    for (const auto& [id, got] : seen) {
      if (got == want) continue;
      std::vector<std::string> missing;
      std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                          std::back_inserter(missing));
      ADD_FAILURE() << id << " lists " << got.size() << " of " << want.size()
                    << " entries long after the writer stopped; missing: "
                    << ::testing::PrintToString(missing);
    }
  }
}

// Lookups of a directory that another node manages: the first misses the
// directory table (one get to the manager), the next N hit it. The kernel's
// name cache is off here: with it, the repeated lookups never reach the
// daemon (KernelServesRepeatedLookups).
TEST_F(Autonomy, DirectoryTableHitsOnRepeatedLookups) {
  StartNodes(3, "fuse: {kernel_cache: false}\n");
  ASSERT_NO_FATAL_FAILURE(MakeCandidatesWithFileOnN2("dtdir"));
  ASSERT_NO_FATAL_FAILURE(Launch());
  // A directory managed by n3, looked up through n1's mount.
  const std::string x = "n1";
  const std::string dir = PathManagedBy("dtdir", "n3");
  ASSERT_FALSE(dir.empty());
  // The first lookup may also need "/" (if another node manages it).
  const int first_needs = 1 + (Manager(x, "/") != x ? 1 : 0);

  const auto s0 = Ctl(x, {"dt"});
  ASSERT_TRUE(s0.is_object() && s0["table"].is_object()) << s0.dump();
  ASSERT_EQ(StatErr(M(x, dir + "/f.txt")), 0);  // the miss
  const auto s1 = Ctl(x, {"dt"});
  constexpr int kN = 200;
  for (int i = 0; i < kN; ++i) ASSERT_EQ(StatErr(M(x, dir + "/f.txt")), 0) << i;
  const auto s2 = Ctl(x, {"dt"});
  ASSERT_TRUE(s1.is_object() && s2.is_object());

  auto delta = [](const nlohmann::json& a, const nlohmann::json& b, const char* k) {
    return b[k].get<int64_t>() - a[k].get<int64_t>();
  };
  auto tdelta = [](const nlohmann::json& a, const nlohmann::json& b, const char* k) {
    return b["table"][k].get<int64_t>() - a["table"][k].get<int64_t>();
  };
  std::printf("dt on %s: first stat: gets_sent +%lld, lookups +%lld; %d more stats: gets_sent "
              "+%lld, lookups +%lld, hits +%lld, misses +%lld\n",
              x.c_str(), static_cast<long long>(delta(s0, s1, "gets_sent")),
              static_cast<long long>(delta(s0, s1, "lookups")), kN,
              static_cast<long long>(delta(s1, s2, "gets_sent")),
              static_cast<long long>(delta(s1, s2, "lookups")),
              static_cast<long long>(tdelta(s1, s2, "hits")),
              static_cast<long long>(tdelta(s1, s2, "misses")));
  EXPECT_GE(delta(s0, s1, "gets_sent"), 1) << "the first lookup was not a miss";
  EXPECT_LE(delta(s0, s2, "gets_sent"), first_needs) << s0.dump() << "\n" << s2.dump();
  EXPECT_LE(delta(s1, s2, "gets_sent"), 0) << s1.dump() << "\n" << s2.dump();
  EXPECT_GE(delta(s1, s2, "lookups"), kN);
  EXPECT_GE(tdelta(s1, s2, "hits"), kN - 2);
  EXPECT_LE(tdelta(s1, s2, "misses"), 0);
  // The manager recorded n1 as a sharer.
  const auto m = Ctl("n3", {"dt"});
  ASSERT_TRUE(m.is_object());
  EXPECT_GE(m["sharer_records"].get<int64_t>(), 1) << m.dump();
}

// With the kernel caching names (the default), repeated stats of a file in a
// directory that another node manages do not look the name up in the daemon
// at all; the file is held on a third node, so its attributes are not cached
// (each stat is one GETATTR, which needs no VD).
TEST_F(Autonomy, KernelServesRepeatedLookups) {
  StartNodes(3);
  ASSERT_NO_FATAL_FAILURE(MakeCandidatesWithFileOnN2("kcdir"));
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string x = "n1";
  const std::string dir = PathManagedBy("kcdir", "n3");
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(StatErr(M(x, dir + "/f.txt")), 0);
  const auto s1 = Ctl(x, {"dt"});
  constexpr int kN = 200;
  for (int i = 0; i < kN; ++i) ASSERT_EQ(StatErr(M(x, dir + "/f.txt")), 0) << i;
  const auto s2 = Ctl(x, {"dt"});
  ASSERT_TRUE(s1.is_object() && s2.is_object());
  const int64_t lookups = s2["lookups"].get<int64_t>() - s1["lookups"].get<int64_t>();
  std::printf("kernel cache on %s: %d stats, %lld VD lookups in the daemon\n", x.c_str(), kN,
              static_cast<long long>(lookups));
  // Directory attributes are kept 1 s: a slow run may refresh them (one VD
  // lookup per directory and second), never once per stat.
  EXPECT_LE(lookups, 20) << s1.dump() << "\n" << s2.dump();
}

// A name that no node has is remembered by the kernel too (a negative
// entry): repeated probes of it on n2 do not reach n2's daemon. Every change
// that makes the name exist takes it back: a create through another node's
// mount is seen by n2's very next stat, a file a local program puts into an
// export root (n1's, or n2's own) within the watcher's batch. Both for a
// directory another node manages and for one n2 manages itself.
TEST_F(Autonomy, MissingNamesAreCachedUntilTheyAppear) {
  StartNodes(3);
  ASSERT_NO_FATAL_FAILURE(MakeCandidatesWithFileOnN2("neg"));
  ASSERT_NO_FATAL_FAILURE(Launch());
  for (const std::string manager : {"n3", "n2"}) {
    SCOPED_TRACE("directory managed by " + manager);
    const std::string dir = PathManagedBy("neg", manager);
    ASSERT_FALSE(dir.empty());
    const std::string probe = M("n2", dir + "/missing.h");
    ASSERT_EQ(StatErr(probe), ENOENT);
    const auto s1 = Ctl("n2", {"dt"});
    constexpr int kN = 200;
    for (int i = 0; i < kN; ++i) ASSERT_EQ(StatErr(probe), ENOENT) << i;
    const auto s2 = Ctl("n2", {"dt"});
    ASSERT_TRUE(s1.is_object() && s2.is_object());
    const int64_t lookups = s2["lookups"].get<int64_t>() - s1["lookups"].get<int64_t>();
    std::printf("missing name on n2 (manager %s): %d stats, %lld VD lookups in the daemon\n",
                manager.c_str(), kN, static_cast<long long>(lookups));
    // As in KernelServesRepeatedLookups: the directory's attributes are
    // refreshed at most once a second, never once per stat.
    EXPECT_LE(lookups, 20) << s1.dump() << "\n" << s2.dump();

    int failures = 0;
    for (int i = 0; i < 20 && failures < 5; ++i) {
      const std::string name = "/x" + std::to_string(i);
      const std::string at_n2 = M("n2", dir + name);
      const std::string maker = i % 2 == 0 ? "n1" : "n3";
      ASSERT_EQ(StatErr(at_n2), ENOENT);
      ASSERT_EQ(StatErr(at_n2), ENOENT);  // now remembered
      const int fd = ::open(M(maker, dir + name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                            0644);
      ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
      ASSERT_EQ(::close(fd), 0);
      if (const int e = StatErr(at_n2); e != 0) {
        ++failures;
        ADD_FAILURE() << name << " created through " << maker << ", n2's stat: "
                      << std::strerror(e);
      }
      ASSERT_EQ(::unlink(M(maker, dir + name).c_str()), 0) << std::strerror(errno);
      if (const int e = StatErr(at_n2); e != ENOENT) {
        ++failures;
        ADD_FAILURE() << name << " unlinked through " << maker << ", n2's stat: "
                      << std::strerror(e);
      }
    }
    // Behind FedFS' back, in another node's export root and in n2's own.
    for (const std::string holder : {"n1", "n2"}) {
      const std::string name = "/local-" + holder + ".txt";
      const std::string at_n2 = M("n2", dir + name);
      ASSERT_EQ(StatErr(at_n2), ENOENT);
      ASSERT_EQ(StatErr(at_n2), ENOENT);
      const auto since = Clock::now();
      ASSERT_TRUE(WriteLocal(E(holder, dir + name), "local\n"));
      const long ms = PollMs([&] { return StatErr(at_n2) == 0; }, since);
      std::printf("a file made by a local program on %s: seen through n2 after %ld ms\n",
                  holder.c_str(), ms);
      EXPECT_GE(ms, 0) << name << " never seen through n2";
    }
  }
}

// A change through n1's mount in a directory that n3 manages is seen by the
// very next system call through n2's mount (no polling), 50 times over.
TEST_F(Autonomy, ChangesThroughOneMountAreSeenAtOnceThroughAnother) {
  StartNodes(3);
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string dir = PathManagedBy("coh", "n3");
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(::mkdir(M("n1", dir).c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(IsDir(M("n2", dir)));
  // Both mounts cache VD(dir) before the changes start.
  EXPECT_EQ(List(M("n2", dir)), std::set<std::string>{});
  EXPECT_EQ(List(M("n1", dir)), std::set<std::string>{});
  const auto before = Ctl("n2", {"dt"});

  int failures = 0;
  for (int i = 0; i < 50 && failures < 5; ++i) {
    const std::string f = "f" + std::to_string(i), g = "g" + std::to_string(i);
    const std::string a = M("n1", dir + "/"), b = M("n2", dir + "/");
    const int fd = ::open((a + f).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << f << ": " << std::strerror(errno);
    ASSERT_EQ(::close(fd), 0);
    int e = StatErr(b + f);
    if (e != 0 || !List(M("n2", dir)).contains(f)) {
      ++failures;
      ADD_FAILURE() << i << ": create through n1 not seen through n2 (stat: " << std::strerror(e)
                    << ")";
    }
    ASSERT_EQ(::rename((a + f).c_str(), (a + g).c_str()), 0) << std::strerror(errno);
    e = StatErr(b + f);
    const int eg = StatErr(b + g);
    const auto listed = List(M("n2", dir));
    if (e != ENOENT || eg != 0 || listed.contains(f) || !listed.contains(g)) {
      ++failures;
      ADD_FAILURE() << i << ": rename through n1 not seen through n2 (old: " << std::strerror(e)
                    << ", new: " << std::strerror(eg) << ")";
    }
    ASSERT_EQ(::unlink((a + g).c_str()), 0) << std::strerror(errno);
    e = StatErr(b + g);
    if (e != ENOENT || List(M("n2", dir)).contains(g)) {
      ++failures;
      ADD_FAILURE() << i << ": unlink through n1 not seen through n2 (stat: " << std::strerror(e)
                    << ")";
    }
  }
  EXPECT_EQ(List(M("n2", dir)), std::set<std::string>{});
  // n2 answered from its directory table and was invalidated by n3, which
  // told it too (for its kernel; n2 had only listed the directory then, so
  // its kernel held no name of it to drop: docs/namespace.md, "Only where
  // names went").
  const auto after = Ctl("n2", {"dt"});
  EXPECT_GT(after.value("dt_invals_received", int64_t{0}),
            before.value("dt_invals_received", int64_t{0}))
      << after.dump();
  ASSERT_TRUE(before.is_object() && after.is_object());
  std::printf("coherence: n2 table hits +%lld, misses +%lld, stale +%lld; n3 invalidations_sent "
              "%lld\n",
              static_cast<long long>(after["table"]["hits"].get<int64_t>() -
                                     before["table"]["hits"].get<int64_t>()),
              static_cast<long long>(after["table"]["misses"].get<int64_t>() -
                                     before["table"]["misses"].get<int64_t>()),
              static_cast<long long>(after["table"]["stale"].get<int64_t>() -
                                     before["table"]["stale"].get<int64_t>()),
              static_cast<long long>(Ctl("n3", {"dt"}).value("invalidations_sent", int64_t{-1})));
}

// A file held on n2 and open on n1: n1's kernel keeps its attributes (no
// request per fstat), and every change of them -- through n3's mount, n2's
// own mount, or a local program on n2 -- reaches n1's next system call
// (the local program's after the watcher's batch). Once closed on n1, the
// attributes are asked for again.
TEST_F(Autonomy, OpenRemoteFileAttributesAreCachedAndToldOfChanges) {
  StartNodes(3);
  fs::create_directories(E("n2", "/of"));
  ASSERT_TRUE(WriteLocal(E("n2", "/of/f.txt"), "f\n"));
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string f1 = M("n1", "/of/f.txt"), f2 = M("n2", "/of/f.txt"),
                    f3 = M("n3", "/of/f.txt");
  auto size_of = [](int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 ? st.st_size : off_t{-1};
  };
  const int fd = ::open(f1.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(size_of(fd), 2);

  // Cached: 50 fstats reach the holder at most a few times (once a second).
  const auto s0 = Ctl("n2", {"files"});
  for (int i = 0; i < 50; ++i) ASSERT_EQ(size_of(fd), 2) << i;
  const auto s1 = Ctl("n2", {"files"});
  ASSERT_TRUE(s0.is_object() && s1.is_object());
  EXPECT_LE(s1["served"].get<int64_t>() - s0["served"].get<int64_t>(), 5) << s1.dump();

  // Changes through other mounts: seen by the very next call.
  ASSERT_TRUE(Append(f3, "abc"));
  EXPECT_EQ(size_of(fd), 5);
  char buf[16] = {};
  EXPECT_EQ(::pread(fd, buf, sizeof buf, 0), 5);
  EXPECT_EQ(std::string(buf, 5), "f\nabc");
  ASSERT_EQ(::truncate(f2.c_str(), 1), 0) << std::strerror(errno);
  EXPECT_EQ(size_of(fd), 1);
  ASSERT_EQ(::chmod(f3.c_str(), 0600), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // A local program on n2: seen once the watcher reported it.
  ASSERT_TRUE(Append(E("n2", "/of/f.txt"), "xy"));
  EXPECT_GE(PollMs([&] { return size_of(fd) == 3; }, Clock::now()), 0) << size_of(fd);
  // n1's own write.
  ASSERT_EQ(::pwrite(fd, "Q", 1, 10), 1);
  EXPECT_EQ(size_of(fd), 11);
  ASSERT_EQ(::close(fd), 0);
  // Closed (and released at the holder, which then stops telling): no
  // longer cached.
  EXPECT_GE(PollMs([&] { return Ctl("n2", {"files"}).value("handles", -1) == 0; }, Clock::now()),
            0);
  ASSERT_TRUE(Append(f3, "z"));
  ASSERT_EQ(::stat(f1.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 12);

  ExpectCallbacks("n2", "n1", 4);
}

// A file held on n2 that n1 only stats, never opens: the holder watches it
// for n1 from n1's lookup on, so n1's first stat costs one request at the
// holder (the lookup's; the kernel keeps the lookup's attributes, so no
// getattr follows it), n1's kernel keeps its
// attributes (50 stats reach the holder at most a few times), and every
// change of them --
// through n3's mount, n2's own mount, n1's own, a local program on n2 -- is
// seen by n1's very next stat (the local program's once the watcher
// reported it).
TEST_F(Autonomy, StatRemoteFileAttributesAreCachedAndToldOfChanges) {
  StartNodes(3);
  fs::create_directories(E("n2", "/wf"));
  ASSERT_TRUE(WriteLocal(E("n2", "/wf/f.txt"), "f\n"));
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string f1 = M("n1", "/wf/f.txt"), f2 = M("n2", "/wf/f.txt"),
                    f3 = M("n3", "/wf/f.txt");
  auto stat_of = [](const std::string& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) st.st_size = -1;
    return st;
  };
  struct stat dir_st {};
  ASSERT_EQ(::stat(M("n1", "/wf").c_str(), &dir_st), 0) << std::strerror(errno);
  auto getattrs = [&] {  // FUSE getattr requests n1 answered so far
    const double v = MetricSample(Ctl("n1", {"metrics"}).value("text", ""),
                                  "fedfs_fuse_op_duration_seconds_count{node=\"n1\",op=\"getattr\"}");
    return v < 0 ? 0.0 : v;
  };
  const double getattrs_before = getattrs();
  const auto before = Ctl("n2", {"files"});
  ASSERT_EQ(stat_of(f1).st_size, 2);
  const auto first = Ctl("n2", {"files"});
  ASSERT_TRUE(before.is_object() && first.is_object());
  EXPECT_EQ(first["served"].get<int64_t>() - before["served"].get<int64_t>(), 1) << first.dump();
  EXPECT_EQ(getattrs(), getattrs_before);
  ASSERT_EQ(stat_of(f1).st_size, 2);

  const auto s0 = Ctl("n2", {"files"});
  for (int i = 0; i < 50; ++i) ASSERT_EQ(stat_of(f1).st_size, 2) << i;
  const auto s1 = Ctl("n2", {"files"});
  ASSERT_TRUE(s0.is_object() && s1.is_object());
  EXPECT_LE(s1["served"].get<int64_t>() - s0["served"].get<int64_t>(), 5) << s1.dump();
  EXPECT_GE(s1["watches"].get<int64_t>(), 1) << s1.dump();

  ASSERT_TRUE(Append(f3, "abc"));
  EXPECT_EQ(stat_of(f1).st_size, 5);
  ASSERT_EQ(::truncate(f2.c_str(), 1), 0) << std::strerror(errno);
  EXPECT_EQ(stat_of(f1).st_size, 1);
  ASSERT_EQ(::chmod(f3.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_EQ(stat_of(f1).st_mode & 07777, 0600u);
  ASSERT_EQ(::chmod(f1.c_str(), 0640), 0) << std::strerror(errno);
  EXPECT_EQ(stat_of(f1).st_mode & 07777, 0640u);
  EXPECT_EQ(stat_of(f3).st_mode & 07777, 0640u);
  ASSERT_TRUE(Append(E("n2", "/wf/f.txt"), "xy"));
  EXPECT_GE(PollMs([&] { return stat_of(f1).st_size == 3; }, Clock::now()), 0)
      << stat_of(f1).st_size;
  // Unlinked through n3: gone for n1 at once.
  ASSERT_EQ(::unlink(f3.c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(StatErr(f1), ENOENT);

  ExpectCallbacks("n2", "n1", 4);
}

// The manager of a directory dies: the survivors keep looking up and
// creating there (its VD is rebuilt by the new manager); the restarted node
// rejoins and sees what was created meanwhile.
TEST_F(Autonomy, ManagerDeathAndRestart) {
  StartNodes(3);
  for (int i = 0; i < kCandidates; ++i) {
    for (const auto& id : ids_) {
      const std::string d = "/mdir" + std::to_string(i);
      fs::create_directories(E(id, d));
      ASSERT_TRUE(WriteLocal(E(id, d + "/on-" + id), id + "\n"));
    }
  }
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string dir = PathManagedBy("mdir", "n3");
  ASSERT_FALSE(dir.empty());
  const std::set<std::string> all = {"on-n1", "on-n2", "on-n3"};
  for (const auto& id : ids_) EXPECT_EQ(List(M(id, dir)), all) << id;

  ASSERT_EQ(c_.Stop("n3", SIGKILL), 128 + SIGKILL);
  ids_ = {"n1", "n2"};
  for (const auto& id : ids_) {
    ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive(id, ids_); }, kNoHang))
        << id << " log:\n" << c_.Log(id);
  }
  EXPECT_NE(Manager("n1", dir), "n3");
  // Both survivors see n3 dead: lookups work at once, without n3's file.
  const std::set<std::string> survivors = {"on-n1", "on-n2"};
  for (const auto& id : ids_) {
    EXPECT_EQ(List(M(id, dir)), survivors) << id;
    EXPECT_EQ(ReadFileText(M(id, dir + "/on-n1")), "n1\n") << id;
    EXPECT_EQ(ReadFileText(M(id, dir + "/on-n2")), "n2\n") << id;
    EXPECT_EQ(StatErr(M(id, dir + "/on-n3")), ENOENT) << id;
  }
  // A file created through n1's mount is seen through n2's.
  {
    std::ofstream(M("n1", dir + "/while-dead.txt")) << "created while n3 was dead\n";
  }
  EXPECT_EQ(StatErr(M("n2", dir + "/while-dead.txt")), 0);
  EXPECT_TRUE(List(M("n2", dir)).contains("while-dead.txt"));
  EXPECT_EQ(ReadFileText(M("n2", dir + "/while-dead.txt")), "created while n3 was dead\n");

  // n3 comes back: it rejoins, manages dir again and sees everything.
  c_.Start("n3", configs_["n3"]);
  ids_ = {"n1", "n2", "n3"};
  ASSERT_NO_FATAL_FAILURE(WaitWhole(ids_));
  EXPECT_EQ(Manager("n1", dir), "n3");
  const std::set<std::string> everything = {"on-n1", "on-n2", "on-n3", "while-dead.txt"};
  for (const auto& id : ids_) {
    // Every node sees the whole federation already; a node may still be a
    // heartbeat behind in adopting n3 as manager, hence the bounded wait.
    EXPECT_TRUE(WaitFor([&] { return List(M(id, dir)) == everything; }, kNoHang))
        << id << ": " << ::testing::PrintToString(List(M(id, dir)));
    EXPECT_EQ(ReadFileText(M(id, dir + "/while-dead.txt")), "created while n3 was dead\n") << id;
    EXPECT_EQ(ReadFileText(M(id, dir + "/on-n3")), "n3\n") << id;
  }
}

}  // namespace
}  // namespace fedfs::testing
