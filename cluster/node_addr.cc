#include "cluster/node_addr.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace fedfs::daemon {
namespace {

bool IsDnsName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  size_t label = 0;
  for (char c : h) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) return false;
    if (++label > 63) return false;
  }
  return label > 0;
}

}  // namespace

bool IsValidNodeId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

Result<HostPort> ParseHostPort(std::string_view s) {
  HostPort hp;
  std::string_view port;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return Err(EINVAL, "not host:port");
    }
    hp.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
    in6_addr a6{};
    if (inet_pton(AF_INET6, hp.host.c_str(), &a6) != 1) return Err(EINVAL, "bad IPv6 address");
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return Err(EINVAL, "not host:port");
    hp.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
    if (hp.host.find(':') != std::string::npos) return Err(EINVAL, "IPv6 needs [brackets]");
    if (!IsDnsName(hp.host)) return Err(EINVAL, "bad host name");
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Err(EINVAL, "not host:port");
  }
  const unsigned long p = std::stoul(std::string(port));
  if (p == 0 || p > 65535) return Err(EINVAL, "port out of range 1..65535");
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

}  // namespace fedfs::daemon
