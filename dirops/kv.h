// Kv: the small durable key-value interface behind FedFS' journals (the
// multi-node directory operations of dirops/dir_ops.h now, migration
// later). RocksDB stays behind it: only dirops/kv_rocksdb.cc includes a
// RocksDB header, so no other translation unit pays for rocksdb/db.h.
//
// Keys and values are arbitrary byte strings, ordered bytewise (memcmp).
// Every key FedFS stores is built by the functions of dirops/kv_keys.h,
// the one place where persistent key encodings are written down.
//
// Durability: a write with `sync` = true is on stable storage when it returns
// (RocksDB: WAL fsync'ed); with `sync` = false it survives a process crash
// but maybe not a machine crash (RocksDB's WAL is written without fsync).
// A journal step that must survive power loss is written with sync = true.
//
// Implementations:
//  * MemKv (here): a std::map; for tests and the simulator. "Durable" for as
//    long as the object lives, which is what a simulated crash of its user
//    (a DirOps destroyed and rebuilt over the same Kv) needs.
//  * RocksDbKv (OpenRocksDbKv): a RocksDB database in a directory (the
//    daemon's config `state_dir`), created when missing, reopenable.
//
// Threads: every implementation is thread-safe; Put/Delete/Apply with sync
// block for an fsync (~0.25 ms here): call from worker threads, never from
// the transport's progress context, and never while holding a lock others
// wait for.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace fedfs::ns {

// Several writes applied atomically (all or none, also across a crash).
struct KvBatch {
  struct Op {
    bool del = false;
    std::string key;
    std::string value;  // unused for deletes
  };
  std::vector<Op> ops;  // applied in order

  void Put(std::string key, std::string value) {
    ops.push_back(Op{false, std::move(key), std::move(value)});
  }
  void Delete(std::string key) { ops.push_back(Op{true, std::move(key), {}}); }
};

class Kv {
 public:
  virtual ~Kv() = default;

  // Sets key -> value (replacing any old value). On failure nothing changed
  // (EIO and the store's message as context).
  [[nodiscard]] virtual Status Put(std::string_view key, std::string_view value, bool sync) = 0;
  // The value of `key`; ENOENT (no log) when it is absent.
  [[nodiscard]] virtual Result<std::string> Get(std::string_view key) = 0;
  // Removes `key`; Ok also when it was absent.
  [[nodiscard]] virtual Status Delete(std::string_view key, bool sync) = 0;
  // Every (key, value) whose key starts with `prefix`, in key order ("" =
  // everything). A consistent snapshot.
  [[nodiscard]] virtual Result<std::vector<std::pair<std::string, std::string>>> Scan(
      std::string_view prefix) = 0;
  // Applies `batch` atomically.
  [[nodiscard]] virtual Status Apply(const KvBatch& batch, bool sync) = 0;
};

// In-memory Kv (tests, simulation). Never fails.
class MemKv final : public Kv {
 public:
  Status Put(std::string_view key, std::string_view value, bool sync) override;
  Result<std::string> Get(std::string_view key) override;
  Status Delete(std::string_view key, bool sync) override;
  Result<std::vector<std::pair<std::string, std::string>>> Scan(std::string_view prefix) override;
  Status Apply(const KvBatch& batch, bool sync) override;

 private:
  std::mutex mu_;  // leaf lock
  std::map<std::string, std::string, std::less<>> map_;  // GUARDED_BY(mu_)
};

struct RocksDbKvOptions {
  // The database directory; created (with missing parents, mode 0700) when
  // absent. The daemon passes its config's `state_dir`.
  std::string path;
};

// Opens (creating when missing) the RocksDB database at options.path. One
// process may have one RocksDbKv per directory open at a time (RocksDB's LOCK
// file: a second open fails with EBUSY). Closing (destroying the Kv) releases
// it; reopening finds everything written before, synced or not, after a
// process crash. Errors: the errno of creating the directory, EBUSY for a
// locked database, EIO with RocksDB's message otherwise.
Result<std::unique_ptr<Kv>> OpenRocksDbKv(const RocksDbKvOptions& options);

}  // namespace fedfs::ns
