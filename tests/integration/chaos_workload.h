// The workloads of the chaos run (chaos_test.cc, docs/faults.md "Chaos
// run"): threads that use a federation's mounts while its daemons are
// killed, frozen and cut off, and record what they were told, so that the
// end state can be checked against it.
//
// - DataWorker: writes 4 KiB blocks of its files through one mount and
//   fsyncs them, and reads them back through another (a fresh open each
//   time). Every 512-byte sector says which file, block and version it
//   holds. A block's version is acknowledged once an fsync after its write
//   returned 0; a read must find, in every sector, a version between the
//   one acknowledged before the open and the last one written (a sector of
//   an unacknowledged write may be torn; an acknowledged one may never go
//   back).
// - NamespaceWorker: mkdir, rmdir, rename (plain and RENAME_NOREPLACE),
//   create and unlink on names of its own in a shared directory, some
//   creates through other nodes' mounts (so that its directories span
//   nodes and its renames and rmdirs are multi-node), recorded for the
//   linearizability checker (tests/tools/history_check.h) with outcomes
//   that may be unknown (a dead node, a timeout).
//
// Every path is opened relative to a MountRoot: the root of the mount as
// the current daemon serves it. When that daemon dies its connection is
// aborted and calls fail with ENOTCONN, instead of reaching the empty
// directory beneath a cleared mount; the worker then waits for the next
// daemon's mount. Workers never block the chaos: each call is the only thing
// they wait on, and they stop at `stop`.
//
// Thread rules: each worker is used by one thread; its results (Files(),
// Take*) are read after that thread ended. ChaosCounters are atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tests/tools/history_check.h"

namespace fedfs::testing {

// Milliseconds since the run's start (its first call), for reports that
// line up what went wrong with the faults.
inline long long ChaosMs(HistoryClock::time_point t = HistoryClock::now()) {
  static const HistoryClock::time_point start = HistoryClock::now();
  return std::chrono::duration_cast<std::chrono::milliseconds>(t - start).count();
}

inline constexpr size_t kChaosBlock = 4096;
inline constexpr size_t kChaosSector = 512;
inline constexpr size_t kChaosBlocks = 16;  // a data file is 64 KiB

struct ChaosCounters {
  std::atomic<uint64_t> writes{0};          // pwrite that returned the whole block
  std::atomic<uint64_t> fsyncs{0};          // fsync that returned 0 (versions acknowledged)
  std::atomic<uint64_t> reads_checked{0};   // whole-file reads checked sector by sector
  std::atomic<uint64_t> data_errors{0};     // calls that failed (errno), data workers
  std::atomic<uint64_t> ns_ops{0};          // namespace operations recorded
  std::atomic<uint64_t> ns_unknown{0};      // of them, outcome unknown
  std::atomic<uint64_t> migrations_ok{0};
  std::atomic<uint64_t> migrations_failed{0};
  // The first few failures of data calls and migrations, for the report.
  void Sample(std::string what);
  std::vector<std::string> Samples();

 private:
  std::mutex mu_;
  std::vector<std::string> samples_;
};

// What the workers found wrong (any entry fails the run).
class Violations {
 public:
  void Add(std::string what);
  std::vector<std::string> Take();

 private:
  std::mutex mu_;
  std::vector<std::string> v_;
};

// Where each node's mount is reached now: the daemons run in network
// namespaces through `ip netns exec`, which gives each a mount namespace of
// its own, so a mount is reached through /proc/<daemon pid>/root<mountpoint>
// and moves with every restart. Thread-safe.
class MountTable {
 public:
  explicit MountTable(size_t nodes) : paths_(nodes) {}
  void Set(size_t node, std::string path);
  std::string Get(size_t node);
  size_t size() const { return paths_.size(); }

 private:
  std::mutex mu_;
  std::vector<std::string> paths_;
};

// The root of a node's FUSE mount as one daemon life serves it.
class MountRoot {
 public:
  MountRoot(MountTable* table, size_t node) : table_(table), node_(node) {}
  ~MountRoot();
  MountRoot(const MountRoot&) = delete;
  MountRoot& operator=(const MountRoot&) = delete;
  // The root's fd; opened again if it was dropped. -1 while there is no
  // FUSE mount (a dead daemon's gone, the next one's not there yet).
  int Fd();
  // Drops the fd after an error saying the daemon is gone.
  void Drop();

 private:
  MountTable* table_;
  size_t node_;
  int fd_ = -1;
};

// The sector `s` of block `b` of file `file` at `version`, written into `out`
// (kChaosSector bytes).
void FillSector(uint32_t file, uint32_t b, uint32_t s, uint64_t version, char* out);
// The version a sector holds, or -1 if it is not one FillSector wrote for
// that file, block and sector (torn, zero, another file's).
int64_t SectorVersion(uint32_t file, uint32_t b, uint32_t s, const char* in);

// One data file and what its writer was told about it.
struct ChaosFile {
  uint32_t index = 0;
  std::string path;  // relative to the mount root, e.g. "data/L1-0"
  int writer = 0;    // the node whose mount writes it
  int reader = 0;    // the node whose mount checks it while the run goes on
  std::vector<uint64_t> acked = std::vector<uint64_t>(kChaosBlocks, 0);      // fsync returned 0
  std::vector<uint64_t> attempted = std::vector<uint64_t>(kChaosBlocks, 0);  // last pwrite issued
};

// Checks a whole file's bytes against [low, high] per block; "" if every
// sector holds a version in range, else what is wrong.
std::string CheckFileBytes(const ChaosFile& f, const std::string& bytes,
                           const std::vector<uint64_t>& low, const std::vector<uint64_t>& high);

class DataWorker {
 public:
  // `files` are written through node f.writer's mount and read through
  // node f.reader's.
  DataWorker(MountTable* mounts, std::vector<ChaosFile> files, uint64_t seed,
             ChaosCounters* counters, Violations* violations);
  void Run(const std::atomic<bool>& stop);
  const std::vector<ChaosFile>& Files() const { return files_; }

 private:
  struct Open {
    int fd = -1;
    std::vector<std::pair<size_t, uint64_t>> unsynced;  // (block, version) written on fd since its last fsync
  };
  void WriteOne(size_t i);
  void ReadOne(size_t i);
  void Fail(size_t i, const char* call, int err);

  std::vector<std::unique_ptr<MountRoot>> roots_;
  std::vector<ChaosFile> files_;
  std::vector<Open> open_;
  std::mt19937_64 rng_;
  ChaosCounters* counters_;
  Violations* violations_;
};

class NamespaceWorker {
 public:
  // Names "p<process>..." in `dir` (relative to every mount root), used
  // mostly through node `process`'s mount.
  NamespaceWorker(int process, MountTable* mounts, std::string dir, uint64_t seed,
                  ChaosCounters* counters);
  void Run(const std::atomic<bool>& stop);
  // After the run: listings of the worker's names through mount `node`
  // (the top level and each of its directories present), appended to the
  // history as operations after every other.
  void FinalListings(int node);
  std::vector<NsOp> TakeHistory() { return rec_.Take(); }
  // The node whose mount each operation went through, in the history's order.
  const std::vector<int>& Via() const { return via_; }

 private:
  void One();
  int RootFor(int node);  // -1 when that mount is not there
  std::string Dir(int k) const;
  std::string File(int k) const;
  void Record(NsOp op, HistoryClock::time_point t, int err, int node);
  void Readdir(int node, const std::string& rel, const std::string& prefix);

  int process_;
  std::vector<std::unique_ptr<MountRoot>> roots_;
  std::string dir_;
  std::mt19937_64 rng_;
  ChaosCounters* counters_;
  HistoryRecorder rec_;
  std::vector<int> via_;
};

}  // namespace fedfs::testing
