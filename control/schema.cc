#include "control/schema.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

namespace fedfs::control {
namespace {

using Json = nlohmann::json;

// One line, and never an exception: invalid UTF-8 becomes U+FFFD.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// --- Encoding: C++ value -> JSON value, by the type of the field. ---------

Json ToJson(const std::string& v) { return v; }
Json ToJson(uint64_t v) { return v; }
Json ToJson(int64_t v) { return v; }
Json ToJson(double v) { return v; }
Json ToJson(bool v) { return v; }
template <class T>
Json ToJson(const std::vector<T>& v);
template <class T>
Json ToJson(const std::optional<T>& v);
template <class T>
Json ToJson(const T& record);  // a struct with Fields()

template <class T>
Json ToJson(const std::vector<T>& v) {
  Json a = Json::array();
  for (const T& e : v) a.push_back(ToJson(e));
  return a;
}

template <class T>
Json ToJson(const std::optional<T>& v) {
  return v ? ToJson(*v) : Json(nullptr);
}

template <class T>
Json ToJson(const T& record) {
  Json o = Json::object();
  T::Fields(record, [&o](const char* name, const auto& value) { o[name] = ToJson(value); });
  return o;
}

// --- Decoding: JSON value -> C++ value; `what` names the field. -----------

Status Wrong(const std::string& what, const char* expected) {
  return Err(EPROTO, "field " + what + " is not " + expected);
}

Status FromJson(const Json& j, std::string& out, const std::string& what) {
  if (!j.is_string()) return Wrong(what, "a string");
  out = j.get<std::string>();
  return Ok();
}
Status FromJson(const Json& j, uint64_t& out, const std::string& what) {
  if (!j.is_number()) return Wrong(what, "a number");
  out = j.get<uint64_t>();
  return Ok();
}
Status FromJson(const Json& j, int64_t& out, const std::string& what) {
  if (!j.is_number()) return Wrong(what, "a number");
  out = j.get<int64_t>();
  return Ok();
}
Status FromJson(const Json& j, double& out, const std::string& what) {
  if (!j.is_number()) return Wrong(what, "a number");
  out = j.get<double>();
  return Ok();
}
Status FromJson(const Json& j, bool& out, const std::string& what) {
  if (!j.is_boolean()) return Wrong(what, "true or false");
  out = j.get<bool>();
  return Ok();
}
template <class T>
Status FromJson(const Json& j, std::vector<T>& out, const std::string& what);
template <class T>
Status FromJson(const Json& j, std::optional<T>& out, const std::string& what);
template <class T>
Status FromJson(const Json& j, T& record, const std::string& what);

template <class T>
Status FromJson(const Json& j, std::vector<T>& out, const std::string& what) {
  if (!j.is_array()) return Wrong(what, "an array");
  out.clear();
  for (size_t i = 0; i < j.size(); ++i) {
    T e{};
    if (auto s = FromJson(j[i], e, what + "[" + std::to_string(i) + "]"); !s) return s;
    out.push_back(std::move(e));
  }
  return Ok();
}

template <class T>
Status FromJson(const Json& j, std::optional<T>& out, const std::string& what) {
  if (j.is_null()) {
    out.reset();
    return Ok();
  }
  T v{};
  if (auto s = FromJson(j, v, what); !s) return s;
  out = std::move(v);
  return Ok();
}

// A missing field keeps its default; the first wrong one is the error.
template <class T>
Status FromJson(const Json& j, T& record, const std::string& what) {
  if (!j.is_object()) return Wrong(what, "an object");
  Status result = Ok();
  T::Fields(record, [&](const char* name, auto& member) {
    if (!result) return;
    auto it = j.find(name);
    if (it == j.end()) return;
    result = FromJson(*it, member, what.empty() ? std::string(name) : what + "." + name);
  });
  return result;
}

}  // namespace

std::string DefaultSocketPath(std::string_view node_id) {
  return std::string(kDefaultSocketDir) + "/" + std::string(node_id) + ".sock";
}

const Command* FindCommand(std::string_view name) {
  for (const Command& c : kCommands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string NormalizeControlPath(const std::string& p) {
  std::string out;
  for (char c : p) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out += c;
  }
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

Result<std::string> EncodeRequest(const Request& request) {
  Json j{{"cmd", request.cmd}};
  const Command* c = FindCommand(request.cmd);
  const bool has_path = c != nullptr ? c->arg == Arg::kPath || c->arg == Arg::kPathNode
                                     : !request.path.empty();
  if (has_path) j["path"] = request.path;
  if (c != nullptr && (c->arg == Arg::kPathNode || c->arg == Arg::kNode)) j["node"] = request.node;
  if (request.max_rate != 0) j["max_rate"] = request.max_rate;
  try {
    return j.dump();
  } catch (const Json::exception&) {
    return Err(EINVAL, "the request is not valid UTF-8 (path " + request.path + ")");
  }
}

Result<Request> ParseRequest(std::string_view line) {
  const Json req = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return Err(EINVAL, "request is not a JSON object");
  auto cmd = req.find("cmd");
  if (cmd == req.end() || !cmd->is_string()) return Err(EINVAL, "missing \"cmd\"");
  Request out;
  out.cmd = cmd->get<std::string>();
  const Command* c = FindCommand(out.cmd);
  if (c == nullptr) {
    std::string names;
    for (const Command& k : kCommands) names += (names.empty() ? "" : ", ") + std::string(k.name);
    return Err(EINVAL, "unknown cmd \"" + out.cmd + "\" (" + names + ")");
  }
  if (c->arg == Arg::kPath || c->arg == Arg::kPathNode) {
    auto path = req.find("path");
    if (path == req.end() || !path->is_string()) return Err(EINVAL, "missing \"path\"");
    const std::string p = path->get<std::string>();
    if (p.empty() || p[0] != '/') return Err(EINVAL, "path must be absolute (start with /)");
    out.path = NormalizeControlPath(p);
  }
  if (c->arg == Arg::kPathNode || c->arg == Arg::kNode) {
    auto node = req.find("node");
    if (node == req.end() || !node->is_string()) return Err(EINVAL, "missing \"node\"");
    out.node = node->get<std::string>();
    const bool ok = !out.node.empty() && out.node.size() <= 255 &&
                    std::all_of(out.node.begin(), out.node.end(), [](char ch) {
                      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' ||
                             ch == '_' || ch == '-';
                    });
    if (!ok) return Err(EINVAL, "node must be a node id ([A-Za-z0-9._-], 1-255 bytes)");
  }
  if (auto rate = req.find("max_rate"); rate != req.end()) {
    if (c->name != kMigrate.name && c->name != kRebalance.name) {
      return Err(EINVAL, "\"max_rate\" is for migrate and rebalance only");
    }
    if (!rate->is_number_unsigned()) return Err(EINVAL, "max_rate must be a byte count per second");
    out.max_rate = rate->get<uint64_t>();
  }
  return out;
}

std::string ErrorReply(std::string_view message) {
  return Dump(Json{{"error", std::string(message)}});
}

template <class R>
std::string EncodeReply(const R& reply) {
  return Dump(ToJson(reply));
}

template <class R>
Result<R> DecodeReply(std::string_view line) {
  const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Err(EPROTO, "the reply is not a JSON object");
  R out{};
  try {
    if (auto s = FromJson(j, out, ""); !s) return Err(s.error());
  } catch (const Json::exception& e) {  // a number out of its field's range
    return Err(EPROTO, e.what());
  }
  return out;
}

#define FEDFS_CONTROL_REPLY(R)                       \
  template std::string EncodeReply<R>(const R&); \
  template Result<R> DecodeReply<R>(std::string_view);
FEDFS_CONTROL_REPLY(StatusReply)
FEDFS_CONTROL_REPLY(RingReply)
FEDFS_CONTROL_REPLY(WhereReply)
FEDFS_CONTROL_REPLY(ListReply)
FEDFS_CONTROL_REPLY(ConflictsReply)
FEDFS_CONTROL_REPLY(DtReply)
FEDFS_CONTROL_REPLY(FilesReply)
FEDFS_CONTROL_REPLY(CacheReply)
FEDFS_CONTROL_REPLY(CacheDropReply)
FEDFS_CONTROL_REPLY(RebalanceReply)
FEDFS_CONTROL_REPLY(RebalancePlanReply)
FEDFS_CONTROL_REPLY(MigrateReply)
FEDFS_CONTROL_REPLY(MigratePlanReply)
FEDFS_CONTROL_REPLY(CancelReply)
FEDFS_CONTROL_REPLY(MigrateProgressReply)
FEDFS_CONTROL_REPLY(MigrationsReply)
FEDFS_CONTROL_REPLY(MetricsReply)
FEDFS_CONTROL_REPLY(PendingReply)
FEDFS_CONTROL_REPLY(ForgetReply)
#undef FEDFS_CONTROL_REPLY

}  // namespace fedfs::control
