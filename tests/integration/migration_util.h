// What the integration tests of file moves (migration_*_test.cc) share.
#pragma once

#include <functional>
#include <string>

#include "tests/tools/cluster.h"

namespace fedfs::testing {

// What a failure prints of file contents: size and a hash, not the bytes.
inline std::string Digest(const std::string& s) {
  return std::to_string(s.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(s));
}

// `fedfsctl migrate PATH --to TO` through node `via`'s control socket.
inline CommandResult Migrate(const Cluster& c, const std::string& via, const std::string& path,
                             const std::string& to) {
  return RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c.Socket(via), "migrate", path, "--to", to},
                    kNoHang);
}

// The one node holding `path`, as node `via` answers `fedfsctl where`
// ("" for none or several).
inline std::string Holder(const Cluster& c, const std::string& via, const std::string& path) {
  auto j = c.Ctl(via, {"where", path});
  if (!j.is_object() || !j["holders"].is_array() || j["holders"].size() != 1) return "";
  return j["holders"][0].get<std::string>();
}

}  // namespace fedfs::testing
