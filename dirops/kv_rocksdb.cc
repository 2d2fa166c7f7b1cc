// RocksDbKv (dirops/kv.h): the only translation unit that includes RocksDB.
//
// One default column family (reopening a database must name all its column
// families: keeping one avoids that trap). Writes go through the WAL; `sync`
// maps to WriteOptions::sync (fsync of the WAL before returning).
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "common/logging.h"
#include "dirops/kv.h"

namespace fedfs::ns {
namespace {

std::unexpected<Error> FromRocks(const rocksdb::Status& s, const std::string& what) {
  int code = EIO;
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) code = EBUSY;
  if (s.IsNoSpace()) code = ENOSPC;
  return Err(code, what + ": " + s.ToString());
}

class RocksDbKv final : public Kv {
 public:
  explicit RocksDbKv(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}
  ~RocksDbKv() override {
    // Flush nothing on purpose: the WAL already holds every write; Close
    // releases the LOCK file so the directory can be reopened at once.
    rocksdb::Status s = db_->Close();
    if (!s.ok()) Logger("kv")->warn("closing the state database: {}", s.ToString());
  }

  Status Put(std::string_view key, std::string_view value, bool sync) override {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status s = db_->Put(wo, rocksdb::Slice(key.data(), key.size()),
                                 rocksdb::Slice(value.data(), value.size()));
    if (!s.ok()) return FromRocks(s, "kv put");
    return Ok();
  }

  Result<std::string> Get(std::string_view key) override {
    std::string value;
    rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
    if (s.IsNotFound()) return Err(ENOENT, "kv get: no such key");
    if (!s.ok()) return FromRocks(s, "kv get");
    return value;
  }

  Status Delete(std::string_view key, bool sync) override {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status s = db_->Delete(wo, rocksdb::Slice(key.data(), key.size()));
    if (!s.ok()) return FromRocks(s, "kv delete");
    return Ok();
  }

  Result<std::vector<std::pair<std::string, std::string>>> Scan(std::string_view prefix) override {
    std::vector<std::pair<std::string, std::string>> out;
    rocksdb::ReadOptions ro;  // an implicit snapshot for the iterator's life
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
      rocksdb::Slice k = it->key();
      if (!k.starts_with(rocksdb::Slice(prefix.data(), prefix.size()))) break;
      out.emplace_back(k.ToString(), it->value().ToString());
    }
    if (!it->status().ok()) return FromRocks(it->status(), "kv scan");
    return out;
  }

  Status Apply(const KvBatch& batch, bool sync) override {
    rocksdb::WriteBatch wb;
    for (const auto& op : batch.ops) {
      rocksdb::Status s = op.del ? wb.Delete(op.key) : wb.Put(op.key, op.value);
      if (!s.ok()) return FromRocks(s, "kv batch");
    }
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status s = db_->Write(wo, &wb);
    if (!s.ok()) return FromRocks(s, "kv batch");
    return Ok();
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

Result<std::unique_ptr<Kv>> OpenRocksDbKv(const RocksDbKvOptions& options) {
  if (options.path.empty()) return Err(EINVAL, "state database: empty path");
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) return Err(ec.value(), "creating state directory " + options.path);
  if (!std::filesystem::is_directory(options.path, ec)) {
    return Err(ENOTDIR, "state directory " + options.path);
  }
  ::chmod(options.path.c_str(), 0700);  // best effort: journals name user paths

  rocksdb::Options o;
  o.create_if_missing = true;
  o.keep_log_file_num = 4;
  o.max_log_file_size = 1 << 20;  // RocksDB's info LOG, not the WAL
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, options.path, &raw);
  if (!s.ok()) return FromRocks(s, "opening state database " + options.path);
  return std::unique_ptr<Kv>(new RocksDbKv(std::unique_ptr<rocksdb::DB>(raw)));
}

}  // namespace fedfs::ns
