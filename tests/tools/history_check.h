// A linearizability checker for histories of namespace operations (create,
// unlink, rename, stat, readdir, mkdir, rmdir) on one or a few directories,
// recorded by concurrent clients, against a sequential model of a POSIX
// directory tree.
//
// A history is linearizable when some total order of its operations
// (1) respects real time: an operation whose response came before another's
// invocation is ordered first, and (2) replayed one by one on the model from
// the initial state, gives every operation exactly the result it observed.
// That is the namespace contract of docs/namespace.md: once a namespace
// operation returned on one node, the next system call on any node sees it.
//
// The search is Wing & Gong's backtracking over the invocation/response list
// with Lowe's memoization of (set of linearized operations, model state): a
// configuration already explored is never explored again, so histories of a
// few hundred operations with a handful of concurrent clients check fast.
// Operations that failed with an errno the model never produces (EIO,
// ETIMEDOUT, ...) cannot be linearized and make the history fail, unless the
// check is told that outcomes may be unknown (`unknown_outcomes`, for runs
// with lost messages): then an operation that failed with ETIMEDOUT, EIO,
// ECONNRESET, ENOTCONN, EHOSTDOWN, EAGAIN or ECONNABORTED (the kernel's answer
// to calls in flight when a FUSE daemon died) may or may not have taken effect,
// and is checked as one whose response never came (linearized at any point
// after its call, with whatever result the model gives, or, equivalently, at
// the very end).
//
// Model. Entries are paths relative to the checked tree, components separated
// by '/', e.g. "d/a". The state maps each such path to a file or directory;
// the root "" always exists. Every path that appears in an operation, in the
// initial state or as the directory of a readdir is known to the model;
// readdir(dir) must return exactly the last components of the present
// children of dir (names that the model never heard of make it fail).
//
// Thread rules: a HistoryRecorder is thread-safe (one mutex; workers record
// concurrently); everything else is plain data used from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace fedfs::testing {

using HistoryClock = std::chrono::steady_clock;

enum class NsOpKind : uint8_t {
  kCreate,           // open(O_CREAT|O_EXCL): 0, EEXIST, ENOENT (no parent), ENOTDIR
  kUnlink,           // 0, ENOENT, EISDIR (a directory)
  kRename,           // renameat2(a, b, 0): 0, ENOENT, EISDIR, ENOTDIR, ENOTEMPTY, EINVAL
  kRenameNoReplace,  // renameat2(a, b, RENAME_NOREPLACE): also EEXIST
  kStat,             // lstat: 0 with the type, or ENOENT
  kReaddir,          // opendir/readdir: 0 with the names, or ENOENT/ENOTDIR
  kMkdir,            // 0, EEXIST, ENOENT (no parent)
  kRmdir,            // 0, ENOENT, ENOTDIR, ENOTEMPTY
  // Not recorded by clients: the checker's own half of a two-lookup answer
  // (below). 0 if the path exists (any type), else ENOENT.
  kExists,
};

enum class NsType : uint8_t { kNone = 0, kFile = 1, kDir = 2 };

// One completed operation as a client saw it.
struct NsOp {
  int process = 0;  // the client that ran it (one operation at a time per client)
  NsOpKind kind = NsOpKind::kStat;
  std::string a;  // the path (the source of a rename; the directory of a readdir)
  std::string b;  // the destination of a rename
  int err = 0;    // 0 on success, else the errno
  NsType type = NsType::kNone;     // kStat with err == 0: what it found
  std::set<std::string> names;     // kReaddir with err == 0: the names listed
  HistoryClock::time_point invoke;
  HistoryClock::time_point response;
};

// Collects operations from concurrent clients. Begin() right before the
// system call, End() right after it returned.
class HistoryRecorder {
 public:
  static HistoryClock::time_point Begin() { return HistoryClock::now(); }
  void End(NsOp op, HistoryClock::time_point invoke);
  // Every recorded operation, in the order they were recorded.
  std::vector<NsOp> Take();

 private:
  std::mutex mu_;
  std::vector<NsOp> ops_;
};

struct HistoryVerdict {
  bool linearizable = false;
  // When not linearizable: the longest linearizable prefix found, the model
  // state after it, and each operation that could come next with the result
  // the model would have given it instead.
  std::string explanation;
  uint64_t explored = 0;  // configurations visited (for curiosity and tuning)
  // The search stopped at its budget (20 M configurations, or 2 GiB of
  // remembered ones): neither shown linearizable nor shown not to be.
  bool gave_up = false;
};

// Checks `history` from the initial state `initial` (path -> type; the root
// is implicit). Paths in ops and `initial` must not start or end with '/'.
//
// One answer is not atomic on Linux over any network file system: a
// renameat2(a, b, RENAME_NOREPLACE) that fails with EEXIST. The kernel
// answers it itself, from two lookups made one after the other (a, then b),
// serialized against this node's other operations by the directory's lock
// but not against other nodes'. So it is checked as two lookups at two
// points of its interval: a exists at the first, b at the same or a later
// one (an atomic rename's EEXIST is the case of equal points).
// The errno values above, whose operation may or may not have taken effect.
bool OutcomeUnknown(int err);

HistoryVerdict CheckLinearizable(const std::vector<NsOp>& history,
                                 const std::map<std::string, NsType>& initial = {},
                                 bool unknown_outcomes = false);

// One line per operation, ordered by invocation, with times relative to the
// first invocation (microseconds): for failure reports.
std::string FormatHistory(const std::vector<NsOp>& history);
// "p2 rename(a, b) -> ENOENT" etc.
std::string FormatOp(const NsOp& op);

}  // namespace fedfs::testing
