// Node ids and node addresses as the federation uses them: in the config
// (fedfsd/config.h checks them), in membership messages (every id and
// address a peer sends is checked with these before it enters a view) and
// at start (the listen address).
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace fedfs::daemon {

struct HostPort {
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;
};

// Parses "host:port" / "[v6]:port": host is an IPv4/IPv6 literal or a DNS
// name, port 1..65535. EINVAL otherwise.
Result<HostPort> ParseHostPort(std::string_view s);

// True for [A-Za-z0-9_-]{1,64}.
bool IsValidNodeId(std::string_view id);

}  // namespace fedfs::daemon
