#include "fedfsd/config.h"

#include "common/size.h"
#include "metrics/endpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "control/schema.h"
#include "m2m/auth.h"

namespace fedfs::daemon {
namespace {

namespace fs = std::filesystem;

// `s` on one line: every control character but tab written as \xNN. The
// text of a message may come from the file (a key, a scalar) or from
// yaml-cpp ("unknown escape character: " and the character), either of
// which may hold a newline.
std::string OneLine(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

// Builds the one-line error messages; the first error wins.
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  bool failed() const { return !problems_.empty(); }
  // The first problem (what LoadConfigFile reports), and every one found.
  const std::string& message() const { return problems_.front(); }
  const std::vector<std::string>& problems() const { return problems_; }

  // Checks that depend on a value already found wrong look at failed()
  // first; the others go on, so --check-config can list them all.
  void Fail(const std::string& field, const std::string& problem) {
    Add(OneLine("config " + path_ + ": field '" + field + "': " + problem));
  }
  void FailFile(const std::string& problem) { Add(OneLine("config " + path_ + ": " + problem)); }

 private:
  void Add(std::string line) {
    if (std::find(problems_.begin(), problems_.end(), line) == problems_.end()) {
      problems_.push_back(std::move(line));
    }
  }
  std::string path_;
  std::vector<std::string> problems_;
};

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return Quote(n.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

// Every key of `map` is one of `allowed`, and none is given twice (yaml-cpp
// keeps both and answers lookups with the first: the second would be
// silently ignored).
void CheckKeys(Checker& c, const YAML::Node& map, const std::string& prefix,
               const std::set<std::string>& allowed) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    if (!allowed.contains(key)) {
      c.FailFile("unknown key '" + prefix + key + "'");
      return;
    }
    if (!seen.insert(key).second) {
      c.FailFile("line " + std::to_string(kv.first.Mark().line + 1) + ": key '" + prefix + key +
                 "' given twice");
      return;
    }
  }
}

// Reads a string field; `required` ones must be present and non-empty.
bool GetString(Checker& c, const YAML::Node& map, const std::string& key, const std::string& name,
               bool required, std::string* out) {
  const YAML::Node n = map[key];
  if (!n || n.IsNull()) {
    if (required) c.Fail(name, "missing (required)");
    return false;
  }
  if (!n.IsScalar()) {
    c.Fail(name, "expected a string, got " + Describe(n));
    return false;
  }
  if (n.Scalar().empty() && required) {
    c.Fail(name, "must not be empty");
    return false;
  }
  *out = n.Scalar();
  return true;
}

// Reads an unsigned integer field in [lo, hi].
bool GetUint(Checker& c, const YAML::Node& map, const std::string& key, const std::string& name,
             uint64_t lo, uint64_t hi, uint64_t* out) {
  const YAML::Node n = map[key];
  if (!n || n.IsNull()) return false;
  if (!n.IsScalar()) {
    c.Fail(name, "expected an integer, got " + Describe(n));
    return false;
  }
  const std::string& s = n.Scalar();
  uint64_t v = 0;
  if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), ::isdigit)) {
    c.Fail(name, "expected an integer, got " + Quote(s));
    return false;
  }
  v = std::stoull(s);
  if (v < lo || v > hi) {
    c.Fail(name, std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
    return false;
  }
  *out = v;
  return true;
}

// Reads a size in bytes: an integer, or one with a unit (K, M, G, T with or
// without "iB": powers of 1024), e.g. 256MiB.
bool GetSize(Checker& c, const YAML::Node& map, const std::string& key, const std::string& name,
             uint64_t lo, uint64_t hi, uint64_t* out) {
  const YAML::Node n = map[key];
  if (!n || n.IsNull()) return false;
  if (!n.IsScalar()) {
    c.Fail(name, "expected a size, got " + Describe(n));
    return false;
  }
  const std::string& s = n.Scalar();
  auto parsed = ParseByteSize(s);
  if (!parsed) {
    c.Fail(name, parsed.error().context);
    return false;
  }
  const uint64_t v = *parsed;
  if (v < lo || v > hi) {
    c.Fail(name, Quote(s) + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "] bytes");
    return false;
  }
  *out = v;
  return true;
}

// Reads a boolean field (true/false, yes/no, on/off).
bool GetBool(Checker& c, const YAML::Node& map, const std::string& key, const std::string& name,
             bool* out) {
  const YAML::Node n = map[key];
  if (!n || n.IsNull()) return false;
  static const std::set<std::string> kTrue = {"true", "yes", "on"};
  static const std::set<std::string> kFalse = {"false", "no", "off"};
  if (n.IsScalar() && kTrue.contains(n.Scalar())) {
    *out = true;
    return true;
  }
  if (n.IsScalar() && kFalse.contains(n.Scalar())) {
    *out = false;
    return true;
  }
  c.Fail(name, "expected true or false, got " + Describe(n));
  return false;
}

// A number in [lo, hi] (or [lo, hi) with `open_hi`); `what` names it in
// the message.
bool GetNumber(Checker& c, const YAML::Node& map, const std::string& key, const std::string& name,
               double lo, double hi, bool open_hi, const std::string& what, double* out) {
  const YAML::Node n = map[key];
  if (!n || n.IsNull()) return false;
  double v = lo - 1;
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) v = lo - 1;
  }
  if (!(v >= lo && (open_hi ? v < hi : v <= hi))) {
    c.Fail(name, "expected " + what + ", got " + Describe(n));
    return false;
  }
  *out = v;
  return true;
}

// A number of seconds in [0, 3600] (decimals allowed).
bool GetSeconds(Checker& c, const YAML::Node& map, const std::string& key,
                const std::string& name, double* out) {
  return GetNumber(c, map, key, name, 0, 3600, false, "seconds in [0, 3600]", out);
}

// A number in [0, 1) (a share, e.g. 0.05).
bool GetFraction(Checker& c, const YAML::Node& map, const std::string& key,
                 const std::string& name, double* out) {
  return GetNumber(c, map, key, name, 0, 1, true, "a share in [0, 1) such as 0.05", out);
}

const YAML::Node GetMap(Checker& c, const YAML::Node& map, const std::string& key) {
  const YAML::Node n = map[key];
  if (!n || n.IsNull()) return YAML::Node();
  if (!n.IsMap()) {
    c.Fail(key, "expected a map, got " + Describe(n));
    return YAML::Node();
  }
  return n;
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

// The mountpoint must be apart from `dir` (the export root, the state dir):
// a mount inside the export root would have the daemon serve requests on
// its own mount (a request waiting for itself); one over either hides them.
void CheckApart(Checker& c, const std::string& mountpoint, const std::string& field,
                const std::string& dir) {
  const std::string how = PathOverlap(mountpoint, dir);
  if (how.empty()) return;
  c.Fail("mountpoint", Quote(mountpoint) + " " + how + " " + field + " " + Quote(dir) +
                           ": the mount must be outside it");
}

}  // namespace

std::string DefaultControlSocket(const std::string& node_id) {
  return control::DefaultSocketPath(node_id);
}

namespace {

// The options of `text`, every problem found recorded in `c`.
DaemonOptions Parse(const std::string& text, const std::string& path, Checker& c) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    c.FailFile("line " + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
    return {};
  }
  if (!root.IsMap()) {
    c.FailFile("expected a map of settings at the top level, got " + Describe(root));
    return {};
  }
  const std::string base_dir = fs::path(path).parent_path().string();
  DaemonOptions o;
  o.config_path = path;
  try {
    CheckKeys(c, root, "",
              {"node_id", "node_tag", "listen", "export_root", "mountpoint", "peers",
               "cluster_key_file", "control_socket", "state_dir", "log_level", "transport", "timeouts", "ring",
               "fuse", "placement", "security", "directory_table", "directory_ops", "autonomy",
               "coopcache", "migration", "metrics"});

    // Required scalars, in the order of the documentation.
    if (GetString(c, root, "node_id", "node_id", true, &o.node_id) && !IsValidNodeId(o.node_id)) {
      c.Fail("node_id", Quote(o.node_id) + " must match [A-Za-z0-9_-]{1,64}");
    }
    {
      uint64_t tag = 0;
      if (!root["node_tag"] || root["node_tag"].IsNull()) {
        c.Fail("node_tag", "missing (required: 1..65534, unique in the federation)");
      } else if (GetUint(c, root, "node_tag", "node_tag", 1, 65534, &tag)) {
        o.node_tag = static_cast<uint32_t>(tag);
      }
    }
    if (GetString(c, root, "listen", "listen", true, &o.listen)) {
      if (auto hp = ParseHostPort(o.listen); !hp) {
        c.Fail("listen", Quote(o.listen) + " is not host:port (" + hp.error().context + ")");
      } else if (hp->host == "0.0.0.0" || hp->host == "::") {
        c.Fail("listen", Quote(o.listen) +
                             " is a wildcard; give the address peers use to reach this node");
      }
    }
    if (GetString(c, root, "export_root", "export_root", true, &o.export_root)) {
      o.export_root = Resolve(base_dir, o.export_root);
      struct stat st {};
      if (::stat(o.export_root.c_str(), &st) != 0) {
        c.Fail("export_root", Quote(o.export_root) + " does not exist");
      } else if (!S_ISDIR(st.st_mode)) {
        c.Fail("export_root", Quote(o.export_root) + " is not a directory");
      }
    }
    if (GetString(c, root, "mountpoint", "mountpoint", true, &o.mountpoint)) {
      o.mountpoint = Resolve(base_dir, o.mountpoint);
    }

    // peers: a list of host:port (may be empty or absent).
    if (const YAML::Node peers = root["peers"]; peers && !peers.IsNull()) {
      if (!peers.IsSequence()) {
        c.Fail("peers", "expected a list of host:port, got " + Describe(peers));
      } else {
        for (size_t i = 0; i < peers.size(); ++i) {
          const std::string name = "peers[" + std::to_string(i) + "]";
          if (!peers[i].IsScalar()) {
            c.Fail(name, "expected host:port, got " + Describe(peers[i]));
            break;
          }
          const std::string& p = peers[i].Scalar();
          if (auto hp = ParseHostPort(p); !hp) {
            c.Fail(name, Quote(p) + " is not host:port (" + hp.error().context + ")");
            break;
          }
          o.peers.push_back(p);
        }
      }
    }

    if (GetString(c, root, "cluster_key_file", "cluster_key_file", true, &o.cluster_key_file)) {
      o.cluster_key_file = Resolve(base_dir, o.cluster_key_file);
      if (auto key = m2m::LoadClusterKeyFile(o.cluster_key_file); !key) {
        const Error& e = key.error();
        c.Fail("cluster_key_file",
               (e.code == EINVAL || e.code == EPERM) ? e.context : e.ToString());
      }
    }

    if (GetString(c, root, "control_socket", "control_socket", false, &o.control_socket)) {
      o.control_socket = Resolve(base_dir, o.control_socket);
    } else if (!o.node_id.empty()) {
      o.control_socket = DefaultControlSocket(o.node_id);
    }
    if (GetString(c, root, "state_dir", "state_dir", false, &o.state_dir)) {
      o.state_dir = Resolve(base_dir, o.state_dir);
    } else if (!o.node_id.empty()) {
      o.state_dir = "/var/lib/fedfs/" + o.node_id;
    }
    if (!c.failed()) {
      CheckApart(c, o.mountpoint, "export_root", o.export_root);
      CheckApart(c, o.mountpoint, "state_dir", o.state_dir);
    }
    if (o.control_socket.size() >= 108) {
      c.Fail("control_socket", Quote(o.control_socket) + " is longer than a unix socket path may be (107)");
    }

    if (GetString(c, root, "log_level", "log_level", false, &o.log_level)) {
      static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn",
                                                    "error", "critical", "off"};
      if (!kLevels.contains(o.log_level)) {
        c.Fail("log_level", Quote(o.log_level) +
                                " is not one of trace, debug, info, warn, error, critical, off");
      }
    }

    if (const YAML::Node t = GetMap(c, root, "transport")) {
      CheckKeys(c, t, "transport.", {"tls", "net_devices", "max_message_bytes", "spin_us", "spin_pending_us"});
      if (GetString(c, t, "tls", "transport.tls", false, &o.transport.tls) &&
          o.transport.tls.empty()) {
        c.Fail("transport.tls", "must not be empty (e.g. \"tcp\")");
      }
      GetString(c, t, "net_devices", "transport.net_devices", false, &o.transport.net_devices);
      uint64_t v = 0;
      if (GetUint(c, t, "max_message_bytes", "transport.max_message_bytes", 4u << 20, 1u << 30, &v)) {
        o.transport.max_message_bytes = v;
      }
      if (GetUint(c, t, "spin_us", "transport.spin_us", 0, 1000000, &v)) {
        o.transport.spin_us = static_cast<uint32_t>(v);
      }
      if (GetUint(c, t, "spin_pending_us", "transport.spin_pending_us", 0, 1000000, &v)) {
        o.transport.spin_pending_us = static_cast<uint32_t>(v);
      }
    }

    if (const YAML::Node t = GetMap(c, root, "timeouts")) {
      CheckKeys(c, t, "timeouts.",
                {"rpc_ms", "heartbeat_interval_ms", "failure_timeout_ms", "connect_ms",
                 "session_lease_ms", "cache_lease_ms"});
      constexpr uint64_t kMaxMs = 3600 * 1000;
      uint64_t v = 0;
      if (GetUint(c, t, "rpc_ms", "timeouts.rpc_ms", 1, kMaxMs, &v)) o.timeouts.rpc = Millis(v);
      if (GetUint(c, t, "heartbeat_interval_ms", "timeouts.heartbeat_interval_ms", 1, kMaxMs, &v)) {
        o.timeouts.heartbeat_interval = Millis(v);
      }
      if (GetUint(c, t, "failure_timeout_ms", "timeouts.failure_timeout_ms", 1, kMaxMs, &v)) {
        o.timeouts.failure_timeout = Millis(v);
      }
      if (GetUint(c, t, "connect_ms", "timeouts.connect_ms", 1, kMaxMs, &v)) {
        o.timeouts.connect = Millis(v);
      }
      if (GetUint(c, t, "session_lease_ms", "timeouts.session_lease_ms", 0, kMaxMs, &v)) {
        o.timeouts.session_lease = Millis(v);
      }
      if (GetUint(c, t, "cache_lease_ms", "timeouts.cache_lease_ms", 0, kMaxMs, &v)) {
        o.timeouts.cache_lease = Millis(v);
      }
    }
    if (o.timeouts.session_lease.count() > 0 &&
        o.timeouts.session_lease < 3 * o.timeouts.rpc) {
      c.Fail("timeouts.session_lease_ms",
             std::to_string(o.timeouts.session_lease.count()) +
                 " must be 0 (no lease) or at least 3 x timeouts.rpc_ms (" +
                 std::to_string(o.timeouts.rpc.count()) + ")");
    }
    if (o.timeouts.cache_lease.count() > 0 && o.timeouts.cache_lease.count() < 1000) {
      c.Fail("timeouts.cache_lease_ms", std::to_string(o.timeouts.cache_lease.count()) +
                                            " must be 0 (no bound) or at least 1000");
    }
    if (o.timeouts.failure_timeout <= o.timeouts.heartbeat_interval) {
      c.Fail("timeouts.failure_timeout_ms",
             std::to_string(o.timeouts.failure_timeout.count()) +
                 " must be greater than timeouts.heartbeat_interval_ms (" +
                 std::to_string(o.timeouts.heartbeat_interval.count()) + ")");
    }

    if (const YAML::Node r = GetMap(c, root, "ring")) {
      CheckKeys(c, r, "ring.", {"vnodes"});
      uint64_t v = 0;
      if (GetUint(c, r, "vnodes", "ring.vnodes", 1, 65536, &v)) o.ring.vnodes = static_cast<uint32_t>(v);
    }

    if (const YAML::Node f = GetMap(c, root, "fuse")) {
      CheckKeys(c, f, "fuse.",
                {"mount", "entry_timeout_s", "attr_timeout_s", "max_threads", "allow_other",
                 "default_permissions", "kernel_cache", "keep_cache", "read_ahead_kb", "spin_us",
                 "io_uring", "deferred_open"});
      GetBool(c, f, "deferred_open", "fuse.deferred_open", &o.fuse.deferred_open);
      GetBool(c, f, "io_uring", "fuse.io_uring", &o.fuse.io_uring);
      GetBool(c, f, "keep_cache", "fuse.keep_cache", &o.fuse.keep_cache);
      GetBool(c, f, "kernel_cache", "fuse.kernel_cache", &o.fuse.kernel_cache);
      GetBool(c, f, "mount", "fuse.mount", &o.fuse.mount);
      GetBool(c, f, "allow_other", "fuse.allow_other", &o.fuse.allow_other);
      GetBool(c, f, "default_permissions", "fuse.default_permissions",
              &o.fuse.default_permissions);
      GetSeconds(c, f, "entry_timeout_s", "fuse.entry_timeout_s", &o.fuse.entry_timeout_s);
      GetSeconds(c, f, "attr_timeout_s", "fuse.attr_timeout_s", &o.fuse.attr_timeout_s);
      uint64_t v = 0;
      if (GetUint(c, f, "max_threads", "fuse.max_threads", 1, 256, &v)) {
        o.fuse.max_threads = static_cast<uint32_t>(v);
      }
      if (GetUint(c, f, "read_ahead_kb", "fuse.read_ahead_kb", 0, 1 << 20, &v)) {
        o.fuse.read_ahead_kb = static_cast<uint32_t>(v);
      }
      if (GetUint(c, f, "spin_us", "fuse.spin_us", 0, 1000000, &v)) {
        o.fuse.spin_us = static_cast<uint32_t>(v);
      }
    }

    if (const YAML::Node s = GetMap(c, root, "security")) {
      CheckKeys(c, s, "security.", {"root_squash", "squash_uid", "squash_gid"});
      GetBool(c, s, "root_squash", "security.root_squash", &o.security.root_squash);
      // 0 would squash root to root; 4294967295 is (uid_t)-1, "no change".
      uint64_t v = 0;
      if (GetUint(c, s, "squash_uid", "security.squash_uid", 1, 4294967294ull, &v)) {
        o.security.squash_uid = static_cast<uint32_t>(v);
      }
      if (GetUint(c, s, "squash_gid", "security.squash_gid", 1, 4294967294ull, &v)) {
        o.security.squash_gid = static_cast<uint32_t>(v);
      }
    }

    if (const YAML::Node t = GetMap(c, root, "directory_table")) {
      CheckKeys(c, t, "directory_table.", {"entries", "bytes", "lend_after", "lease_ms",
                                               "whole_max_entries", "add_new", "deltas"});
      uint64_t v = 0;
      if (GetUint(c, t, "entries", "directory_table.entries", 0, uint64_t{1} << 24, &v)) {
        o.directory_table.entries = static_cast<size_t>(v);
      }
      if (GetUint(c, t, "bytes", "directory_table.bytes", 4096, uint64_t{1} << 40, &v)) {
        o.directory_table.bytes = static_cast<size_t>(v);
      }
      if (GetUint(c, t, "lend_after", "directory_table.lend_after", 0, 1000000, &v)) {
        o.directory_table.lend_after = static_cast<uint32_t>(v);
      }
      if (GetUint(c, t, "lease_ms", "directory_table.lease_ms", 100, 600000, &v)) {
        o.directory_table.lease = std::chrono::milliseconds(v);
      }
      if (GetUint(c, t, "whole_max_entries", "directory_table.whole_max_entries", 0,
                  uint64_t{1} << 32, &v)) {
        o.directory_table.whole_max_entries = static_cast<size_t>(v);
      }
      GetBool(c, t, "add_new", "directory_table.add_new", &o.directory_table.add_new);
      GetBool(c, t, "deltas", "directory_table.deltas", &o.directory_table.deltas);
    }

    if (const YAML::Node d = GetMap(c, root, "directory_ops")) {
      CheckKeys(c, d, "directory_ops.", {"record_dead_members"});
      GetBool(c, d, "record_dead_members", "directory_ops.record_dead_members",
              &o.directory_ops.record_dead_members);
    }

    if (const YAML::Node k = GetMap(c, root, "coopcache")) {
      CheckKeys(c, k, "coopcache.", {"size", "block", "share", "forward", "min_free", "stream_after"});
      GetBool(c, k, "share", "coopcache.share", &o.coopcache.share);
      uint64_t v = 0;
      if (GetUint(c, k, "forward", "coopcache.forward", 0, 16, &v)) {
        o.coopcache.forward = static_cast<uint32_t>(v);
      }
      if (GetSize(c, k, "min_free", "coopcache.min_free", 0, uint64_t{1} << 50, &v)) {
        o.coopcache.min_free = v;
      }
      if (GetSize(c, k, "stream_after", "coopcache.stream_after", 0, uint64_t{1} << 50, &v)) {
        o.coopcache.stream_after = v;
      }
      if (GetSize(c, k, "size", "coopcache.size", 0, uint64_t{1} << 40, &v)) {
        o.coopcache.size = static_cast<size_t>(v);
      }
      if (GetSize(c, k, "block", "coopcache.block", 4096, uint64_t{64} << 20, &v)) {
        if (!std::has_single_bit(v)) {
          c.Fail("coopcache.block", std::to_string(v) + " is not a power of two");
        } else {
          o.coopcache.block = static_cast<size_t>(v);
        }
      }
      if (o.coopcache.size != 0 && o.coopcache.size < o.coopcache.block) {
        c.Fail("coopcache.size", "below one block (coopcache.block)");
      }
    }

    if (const YAML::Node m = GetMap(c, root, "migration")) {
      CheckKeys(c, m, "migration.", {"on_full", "rebalance", "on_access"});
      if (const YAML::Node a = GetMap(c, m, "on_access")) {
        CheckKeys(c, a, "migration.on_access.",
                  {"enabled", "share", "min_bytes", "window_ms", "windows", "cooldown_ms"});
        ns::AccessOptions& oa = o.migration.on_access;
        GetBool(c, a, "enabled", "migration.on_access.enabled", &oa.enabled);
        GetFraction(c, a, "share", "migration.on_access.share", &oa.share);
        uint64_t v = 0;
        if (GetSize(c, a, "min_bytes", "migration.on_access.min_bytes", 1, uint64_t{1} << 50, &v)) {
          oa.min_bytes = v;
        }
        if (GetUint(c, a, "window_ms", "migration.on_access.window_ms", 100, 86400000, &v)) {
          oa.window = std::chrono::milliseconds(v);
        }
        if (GetUint(c, a, "windows", "migration.on_access.windows", 1, 1000, &v)) {
          oa.windows = static_cast<int>(v);
        }
        if (GetUint(c, a, "cooldown_ms", "migration.on_access.cooldown_ms", 0, 86400000 * 7ull,
                    &v)) {
          oa.cooldown = std::chrono::milliseconds(v);
        }
        if (oa.share <= 0.5) {
          c.Fail("migration.on_access.share",
                 "must be more than 0.5 (a file would have two nodes to move to)");
        }
      }
      if (const YAML::Node b = GetMap(c, m, "rebalance")) {
        CheckKeys(c, b, "migration.rebalance.", {"threshold", "min_size"});
        uint64_t v = 0;
        GetFraction(c, b, "threshold", "migration.rebalance.threshold",
                    &o.migration.rebalance.threshold);
        if (GetSize(c, b, "min_size", "migration.rebalance.min_size", 0, uint64_t{1} << 50, &v)) {
          o.migration.rebalance.min_size = v;
        }
      }
      if (const YAML::Node f = GetMap(c, m, "on_full")) {
        CheckKeys(c, f, "migration.on_full.", {"enabled", "max_size", "max_wait_ms", "min_free"});
        MigrationConfig::OnFull& of = o.migration.on_full;
        GetBool(c, f, "enabled", "migration.on_full.enabled", &of.enabled);
        uint64_t v = 0;
        if (GetSize(c, f, "max_size", "migration.on_full.max_size", 0, uint64_t{1} << 50, &v)) {
          of.max_size = v;
        }
        if (GetUint(c, f, "max_wait_ms", "migration.on_full.max_wait_ms", 0, 3600000, &v)) {
          of.max_wait = std::chrono::milliseconds(v);
        }
        if (GetSize(c, f, "min_free", "migration.on_full.min_free", 0, uint64_t{1} << 50, &v)) {
          of.min_free = v;
        }
      }
    }

    if (const YAML::Node m = GetMap(c, root, "metrics")) {
      CheckKeys(c, m, "metrics.", {"listen"});
      std::string listen;
      if (GetString(c, m, "listen", "metrics.listen", false, &listen)) {
        if (!listen.empty()) {
          if (auto hp = metrics::SplitHostPort(listen); !hp) {
            c.Fail("metrics.listen", hp.error().context + " (\"\" for none)");
          }
        }
        o.metrics.listen = listen;
      }
    }

    if (const YAML::Node a = GetMap(c, root, "autonomy")) {
      CheckKeys(c, a, "autonomy.", {"watch", "max_watches"});
      GetBool(c, a, "watch", "autonomy.watch", &o.autonomy.watch);
      uint64_t v = 0;
      if (GetUint(c, a, "max_watches", "autonomy.max_watches", 1, uint64_t{1} << 24, &v)) {
        o.autonomy.max_watches = static_cast<size_t>(v);
      }
    }

    if (const YAML::Node p = GetMap(c, root, "placement")) {
      CheckKeys(c, p, "placement.", {"policy", "rules"});
      static const std::set<std::string> kPolicies = {"local", "hash", "most-free"};
      if (GetString(c, p, "policy", "placement.policy", false, &o.placement.policy) &&
          !kPolicies.contains(o.placement.policy)) {
        c.Fail("placement.policy", Quote(o.placement.policy) + " is not one of local, hash, most-free");
      }
      if (const YAML::Node rules = p["rules"]; rules && !rules.IsNull()) {
        if (!rules.IsSequence()) {
          c.Fail("placement.rules", "expected a list of {prefix, policy|node}, got " + Describe(rules));
        } else {
          for (size_t i = 0; i < rules.size() && !c.failed(); ++i) {
            const std::string name = "placement.rules[" + std::to_string(i) + "]";
            const YAML::Node r = rules[i];
            if (!r.IsMap()) {
              c.Fail(name, "expected {prefix: /p, policy: hash} or {prefix: /p, node: n2}, got " +
                               Describe(r));
              break;
            }
            CheckKeys(c, r, name + ".", {"prefix", "policy", "node"});
            PlacementRuleConfig rule;
            if (GetString(c, r, "prefix", name + ".prefix", true, &rule.prefix) &&
                (rule.prefix.empty() || rule.prefix[0] != '/' ||
                 (rule.prefix.size() > 1 && rule.prefix.back() == '/') ||
                 rule.prefix.find("//") != std::string::npos)) {
              c.Fail(name + ".prefix", Quote(rule.prefix) + " is not an absolute path like /a/b");
            }
            const bool has_policy = GetString(c, r, "policy", name + ".policy", false, &rule.policy);
            const bool has_node = GetString(c, r, "node", name + ".node", false, &rule.node);
            if (c.failed()) break;
            if (has_policy == has_node) {
              c.Fail(name, "give exactly one of 'policy' or 'node'");
            } else if (has_policy && !kPolicies.contains(rule.policy)) {
              c.Fail(name + ".policy", Quote(rule.policy) + " is not one of local, hash, most-free");
            } else if (has_node && !IsValidNodeId(rule.node)) {
              c.Fail(name + ".node", Quote(rule.node) + " must match [A-Za-z0-9_-]{1,64}");
            }
            o.placement.rules.push_back(std::move(rule));
          }
        }
      }
    }
  } catch (const YAML::Exception& e) {
    c.FailFile("line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return o;
}

}  // namespace

Result<DaemonOptions> ParseConfig(const std::string& text, const std::string& path) {
  Checker c(path);
  DaemonOptions o = Parse(text, path, c);
  if (c.failed()) return Err(EINVAL, c.message());
  return o;
}

namespace {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno ? errno : EACCES;
    return Err(err, "config " + path + ": cannot read: " + std::strerror(err));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<DaemonOptions> LoadConfigFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return Err(text.error());
  return ParseConfig(*text, path);
}

ConfigCheck CheckConfigFile(const std::string& path) {
  ConfigCheck r;
  auto text = ReadFile(path);
  if (!text) {
    r.problems.push_back(text.error().context);
    return r;
  }
  Checker c(path);
  DaemonOptions o = Parse(*text, path, c);
  if (c.failed()) {
    r.problems = c.problems();
  } else {
    r.options = std::move(o);
  }
  return r;
}

Result<std::string> ControlSocketFromConfigFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return Err(text.error());
  try {
    const YAML::Node root = YAML::Load(*text);
    if (root.IsMap()) {
      if (const YAML::Node s = root["control_socket"]; s && s.IsScalar() && !s.Scalar().empty()) {
        return Resolve(fs::path(path).parent_path().string(), s.Scalar());
      }
      if (const YAML::Node id = root["node_id"]; id && id.IsScalar() && IsValidNodeId(id.Scalar())) {
        return DefaultControlSocket(id.Scalar());
      }
    }
  } catch (const YAML::Exception& e) {
    return Err(EINVAL, OneLine("config " + path + ": YAML syntax error: " + e.msg));
  }
  return Err(EINVAL, "config " + path + ": names neither control_socket nor a valid node_id");
}

MembershipOptions MembershipOptionsFrom(const DaemonOptions& o, const std::string& advertise) {
  MembershipOptions m;
  m.node_id = o.node_id;
  m.advertise_addr = advertise;
  m.seeds = o.peers;
  m.heartbeat_interval = o.timeouts.heartbeat_interval;
  m.failure_timeout = o.timeouts.failure_timeout;
  m.rpc_timeout = o.timeouts.rpc;
  m.ring = o.ring;
  m.node_tag = static_cast<uint16_t>(o.node_tag);
  return m;
}

std::string PathOverlap(const std::string& a, const std::string& b) {
  auto real = [](const std::string& p) {  // symbolic links resolved as far as it exists
    std::error_code ec;
    fs::path r = fs::weakly_canonical(p, ec);
    return ec ? fs::path(p).lexically_normal() : r;
  };
  auto same_or_ancestor = [](const fs::path& x, const fs::path& y) {  // "x/" counts as x
    auto [ix, iy] = std::mismatch(x.begin(), x.end(), y.begin(), y.end());
    return ix == x.end() || (std::next(ix) == x.end() && ix->empty());
  };
  const fs::path pa = real(a), pb = real(b);
  if (pa == pb) return "is";
  if (same_or_ancestor(pb, pa)) return "is inside";
  if (same_or_ancestor(pa, pb)) return "contains";
  return "";
}

}  // namespace fedfs::daemon
