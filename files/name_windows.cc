#include "files/name_windows.h"

#include <dirent.h>
#include <string.h>

#include <algorithm>
#include <memory>
#include <unordered_set>

namespace fedfs::ns {

namespace {
bool VersionLess(const std::string& a, const std::string& b) {
  return ::strverscmp(a.c_str(), b.c_str()) < 0;
}
}  // namespace

std::vector<std::string> NameWindows::After(const std::string& dir, const std::string& first,
                                            size_t along, const ListFn& list) {
  if (along == 0) return {};
  const auto now = Clock::now();
  std::shared_ptr<const Listing> l;
  {
    std::lock_guard lock(mu_);
    if (auto it = dirs_.find(dir); it != dirs_.end()) {
      if (now - it->second->at < opts_.max_age) {
        l = it->second;
        ++stats_.reused;
      } else {
        dirs_.erase(it);
      }
    }
  }
  if (!l) {
    auto entries = list();
    if (!entries || entries->size() > opts_.max_names) return {};
    auto fresh = std::make_shared<Listing>();
    fresh->at = now;
    for (DirEntry& e : *entries) {
      if (e.type == DT_REG || e.type == DT_UNKNOWN) fresh->names.push_back(std::move(e.name));
    }
    std::sort(fresh->names.begin(), fresh->names.end());
    fresh->by_version.resize(fresh->names.size());
    for (uint32_t i = 0; i < fresh->by_version.size(); ++i) fresh->by_version[i] = i;
    std::sort(fresh->by_version.begin(), fresh->by_version.end(), [&](uint32_t a, uint32_t b) {
      return VersionLess(fresh->names[a], fresh->names[b]);
    });
    l = fresh;
    std::lock_guard lock(mu_);
    ++stats_.listed;
    if (dirs_.size() >= opts_.max_dirs && !dirs_.contains(dir)) {
      auto oldest = std::min_element(dirs_.begin(), dirs_.end(), [](const auto& a, const auto& b) {
        return a.second->at < b.second->at;
      });
      dirs_.erase(oldest);
    }
    dirs_[dir] = l;
  }
  const auto& names = l->names;
  const auto b0 = std::upper_bound(names.begin(), names.end(), first);
  const auto v0 = std::upper_bound(
      l->by_version.begin(), l->by_version.end(), first,
      [&](const std::string& f, uint32_t i) { return VersionLess(f, names[i]); });
  const size_t byte_left = static_cast<size_t>(names.end() - b0);
  // Byte order's share, more where version order has fewer after `first`
  // (it has at least as many names in all, so its own shortfall is below).
  size_t byte_take = std::min(byte_left, (along + 1) / 2);
  std::vector<std::string> out;
  out.reserve(along);
  std::unordered_set<uint32_t> taken;
  for (size_t k = 0; k < byte_take; ++k) {
    const auto i = static_cast<uint32_t>(b0 - names.begin() + static_cast<ptrdiff_t>(k));
    taken.insert(i);
    out.push_back(names[i]);
  }
  for (auto v = v0; v != l->by_version.end() && out.size() < along; ++v) {
    if (taken.insert(*v).second) out.push_back(names[*v]);
  }
  // Version order ran out: more in byte order.
  for (size_t k = byte_take; k < byte_left && out.size() < along; ++k) {
    const auto i = static_cast<uint32_t>(b0 - names.begin() + static_cast<ptrdiff_t>(k));
    if (taken.insert(i).second) out.push_back(names[i]);
  }
  return out;
}

auto NameWindows::stats() const -> Stats {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace fedfs::ns
