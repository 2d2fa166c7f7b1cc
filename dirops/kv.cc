// MemKv (dirops/kv.h).
#include "dirops/kv.h"

namespace fedfs::ns {

Status MemKv::Put(std::string_view key, std::string_view value, bool /*sync*/) {
  std::lock_guard lock(mu_);
  map_.insert_or_assign(std::string(key), std::string(value));
  return Ok();
}

Result<std::string> MemKv::Get(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return Err(ENOENT, "kv get: no such key");
  return it->second;
}

Status MemKv::Delete(std::string_view key, bool /*sync*/) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) map_.erase(it);
  return Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> MemKv::Scan(std::string_view prefix) {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.starts_with(prefix);
       ++it) {
    out.emplace_back(it->first, it->second);
  }
  return out;
}

Status MemKv::Apply(const KvBatch& batch, bool /*sync*/) {
  std::lock_guard lock(mu_);
  for (const auto& op : batch.ops) {
    if (op.del) {
      auto it = map_.find(op.key);
      if (it != map_.end()) map_.erase(it);
    } else {
      map_.insert_or_assign(op.key, op.value);
    }
  }
  return Ok();
}

}  // namespace fedfs::ns
