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
//   dirops/p/<node>/<seq: 16 hex>  what member <node>, dead at the time, must
//                              apply of a directory operation (value: a
//                              size-prefixed PendingRecord, dirops/pending.h)
//   dirops/forgotten/<node>    member <node> was removed for good (empty)
//   dirops/applied             the largest seq this node applied of its own
//                              pending records (uint64, host order)
//   migration/out/<id: 16 hex>            a move of a file from this node
//   migration/in/<source node>/<id: 16 hex> a move of a file to this node
//                              (values: size-prefixed MoveRecord,
//                              migration/migration.fbs)
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

inline constexpr std::string_view kPendingPrefix = "dirops/p/";

// "dirops/p/n3/000000000000002a" for node n3, seq 42. Node ids have no '/'
// (cluster/node_addr.h).
inline std::string PendingKey(std::string_view node, uint64_t seq) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(seq));
  return std::string(kPendingPrefix) + std::string(node) + "/" + buf;
}

// The largest seq of the records this node applied to its own export root
// (8 bytes, host order).
inline std::string PendingAppliedKey() { return "dirops/applied"; }

inline constexpr std::string_view kForgottenPrefix = "dirops/forgotten/";

// "dirops/forgotten/n3": member n3 was removed for good (value empty).
inline std::string ForgottenKey(std::string_view node) {
  return std::string(kForgottenPrefix) + std::string(node);
}

inline constexpr std::string_view kMigrationPrefix = "migration/";

// "migration/out/<id>" (this node is the source) or
// "migration/in/<source>/<id>" (the target).
inline std::string MigrationKey(bool out, std::string_view source, uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  if (out) return std::string(kMigrationPrefix) + "out/" + buf;
  return std::string(kMigrationPrefix) + "in/" + std::string(source) + "/" + buf;
}

}  // namespace fedfs::ns::kvkeys
