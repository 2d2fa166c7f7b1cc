// Loading and validating fedfsd's YAML configuration (docs/config.md).
//
// LoadConfigFile turns a file into DaemonOptions or into ONE line of error
// text that names the file, the field and the problem, e.g.
//   config /etc/fedfs/a.yaml: field 'listen': "abc" is not host:port
// The error's context holds that line (print Error::context, not ToString).
// It checks what can be checked before starting: syntax, types, unknown keys,
// required fields, addresses, timeouts, the export root and the cluster key
// file (through m2m::LoadClusterKeyFile). It does not bind the listen port;
// fedfsd does that at start and reports a port in use separately.
// Pure functions (read the file system); any thread. yaml-cpp stays inside
// config.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "cluster/node_addr.h"  // ParseHostPort, IsValidNodeId: what the config checks
#include "common/result.h"
#include "fedfsd/options.h"

namespace fedfs::daemon {

// Reads and validates the config at `path`. Relative paths inside the file
// are resolved against the file's directory. Errors: EINVAL with the one-line
// message as context (ENOENT/EACCES if the file itself cannot be read).
Result<DaemonOptions> LoadConfigFile(const std::string& path);

// Every problem of the config at `path`, one line each, the first the line
// LoadConfigFile reports; the options when there is none (fedfsd
// --check-config).
struct ConfigCheck {
  std::optional<DaemonOptions> options;
  std::vector<std::string> problems;
};
ConfigCheck CheckConfigFile(const std::string& path);

// How path `a` lies relative to `b`, symbolic links resolved as far as they
// exist: "is", "is inside", "contains", or "" when they are apart (used for
// the mountpoint against the export root and state dir, here and against
// other daemons' in fedfsd/local_daemons.h).
std::string PathOverlap(const std::string& a, const std::string& b);

// Same, from text; `path` is only used to name the source and to resolve
// relative paths.
Result<DaemonOptions> ParseConfig(const std::string& yaml_text, const std::string& path);

// The control socket a config names (or its default), with no validation of
// anything else: what fedfsctl --config needs.
Result<std::string> ControlSocketFromConfigFile(const std::string& path);

// The default control socket of a node: /run/fedfs/<node_id>.sock.
std::string DefaultControlSocket(const std::string& node_id);

}  // namespace fedfs::daemon
