// The encodings of every key FedFS stores in its Kv (dirops/kv.h): one
// header, so that two modules never collide and an on-disk key can be read
// back by a human (`ldb scan` on the state directory).
//
// Layout: "<module>/<table>/<key>", ASCII, '/' separated. Numbers inside keys
// are fixed-width lowercase hexadecimal (16 digits for uint64), so that the
// bytewise order of keys is the numeric order. Never change an encoding in
// place: a daemon must read the state its previous version wrote; add a new
// table instead.
//
//   dirops/j/<op id: 16 hex>   one journal record of a multi-node directory
//                              operation (value: a size-prefixed FlatBuffers
//                              DirOpRecord, dirops/dir_ops.fbs)
//   migration/...              reserved for the migration journal (issue 5+)
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace fedfs::ns::kvkeys {

inline constexpr std::string_view kDirOpsJournalPrefix = "dirops/j/";

// "dirops/j/000000000000002a" for id 42.
inline std::string DirOpsJournalKey(uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return std::string(kDirOpsJournalPrefix) + buf;
}

// The op id of a journal key; nullopt when `key` is not one.
inline std::optional<uint64_t> ParseDirOpsJournalKey(std::string_view key) {
  if (!key.starts_with(kDirOpsJournalPrefix)) return std::nullopt;
  key.remove_prefix(kDirOpsJournalPrefix.size());
  if (key.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char ch : key) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace fedfs::ns::kvkeys
