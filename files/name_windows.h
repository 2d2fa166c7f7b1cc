// NameWindows: the names a kStatMany answers along with the one asked for
// (docs/namespace.md, "Neighbours' attributes"), without listing the
// directory for every request. A lookup that asks along is one of a run of
// lookups of files of one directory held here, in an order the asker does
// not say: byte order (a listing's), or the order of the numbers in the
// names (a job's ranks or steps: p-1, p-2, ... p-10, where byte order
// puts p-10 right after p-1). So the window holds half of its names from
// each: the regular files after the asked name in byte order, then those
// after it in version order (strverscmp(3)), each name once.
//
// Each directory's regular files are listed once and kept, sorted both
// ways, for max_age, whatever changes in the directory meanwhile: a name
// made since is missing from windows until then, and a name gone is
// skipped by the caller's stat (a window only decides what is asked along,
// never what is answered), so that a directory that keeps changing is
// listed at most once per max_age. At most max_dirs listings are kept (the
// oldest goes); a listing of more than max_names entries is not kept and
// its windows are empty.
//
// Threads: thread-safe; `list` runs without the lock held.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

struct NameWindowsOptions {
  std::chrono::milliseconds max_age{1000};
  size_t max_dirs = 16;
  size_t max_names = size_t{1} << 16;
};

class NameWindows {
 public:
  using Clock = std::chrono::steady_clock;
  explicit NameWindows(const NameWindowsOptions& o = {}) : opts_(o) {}

  // Up to `along` regular files of `dir` after `first`, not `first`
  // itself: ceil(along / 2) in byte order, the rest in version order (more
  // of either where the other runs out). `list` lists `dir` when no
  // listing younger than max_age is kept; its error: none.
  using ListFn = std::function<Result<std::vector<DirEntry>>()>;
  std::vector<std::string> After(const std::string& dir, const std::string& first, size_t along,
                                 const ListFn& list);

  struct Stats {
    uint64_t listed = 0, reused = 0;
  };
  Stats stats() const;

 private:
  struct Listing {
    Clock::time_point at;
    std::vector<std::string> names;    // byte order
    std::vector<uint32_t> by_version;  // indexes into names, version order
  };
  const NameWindowsOptions opts_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Listing>> dirs_;
  Stats stats_;
};

}  // namespace fedfs::ns
