// libFuzzer target: the config loader (fedfsd/config.h): LoadConfigFile and
// ControlSocketFromConfigFile on a file holding the input, in a temp dir
// that has what a valid config names (export/, state/, mnt/ and a cluster
// key file, mode 0600), so that inputs reach every check.
//
// Invariants: an accepted config has a valid node id, a node tag in
// 1..65534, a host:port listen address that is no wildcard, peers that are
// host:port, an export root that is a directory, failure_timeout >
// heartbeat_interval; a refused one is EINVAL with ONE line of text naming
// the file. ParseConfig never throws.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fedfsd/config.h"
#include "fuzz_util.h"

using namespace fedfs;
using namespace fedfs::daemon;

namespace {

std::string g_dir;
std::string g_config;

void Cleanup() {
  std::error_code ec;
  if (!g_dir.empty()) std::filesystem::remove_all(g_dir, ec);
}

void MakeSandbox() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/fuzz_config.XXXXXX";
  FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
  g_dir = tmpl;
  std::atexit(Cleanup);
  for (const char* d : {"export", "state", "mnt"}) {
    FUZZ_CHECK(::mkdir((g_dir + "/" + d).c_str(), 0755) == 0);
  }
  const std::string key = g_dir + "/cluster.key";
  std::ofstream(key) << std::string(64, 'a') << "\n";
  FUZZ_CHECK(::chmod(key.c_str(), 0600) == 0);
  g_config = g_dir + "/fedfsd.yaml";
}

const char* const kFull = R"(node_id: n1
node_tag: 1
listen: 127.0.0.1:7001
export_root: export
mountpoint: mnt
state_dir: state
cluster_key_file: cluster.key
peers: [127.0.0.1:7002, "[::1]:7003", host-b.example:7004]
control_socket: c.sock
log_level: debug
transport: {tls: "tcp,sm", net_devices: lo, max_message_bytes: 8388608, spin_us: 50}
timeouts: {rpc_ms: 2000, heartbeat_interval_ms: 200, failure_timeout_ms: 1500, connect_ms: 1000}
ring: {vnodes: 64}
fuse: {mount: true, entry_timeout_s: 1.5, attr_timeout_s: 1, max_threads: 4, allow_other: no,
       default_permissions: yes, kernel_cache: on, read_ahead_kb: 128, spin_us: 0, io_uring: false}
security: {root_squash: true, squash_uid: 65534, squash_gid: 65534}
directory_table: {entries: 4096, bytes: 67108864}
autonomy: {watch: true, max_watches: 1024}
placement:
  policy: hash
  rules:
    - {prefix: /home, policy: local}
    - {prefix: /data/big, node: n2}
)";

const char* const kMinimal = R"(node_id: n1
node_tag: 7
listen: "[fd00::1]:7000"
export_root: export
mountpoint: mnt
state_dir: state
cluster_key_file: cluster.key
)";

void MakeSeeds(fuzz::Seeds& s) {
  s.Add("full.yaml", kFull);
  s.Add("minimal.yaml", kMinimal);
  s.Add("unknown_key.yaml", std::string(kMinimal) + "bogus: 1\n");
  s.Add("twice.yaml", std::string(kMinimal) + "node_id: n2\n");
  s.Add("bad_listen.yaml", "node_id: n1\nnode_tag: 1\nlisten: 0.0.0.0:1\n");
  s.Add("control_only.yaml", "control_socket: /run/x.sock\n");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  MakeSandbox();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(g_config, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto o = LoadConfigFile(g_config);
  if (o) {
    FUZZ_CHECK(IsValidNodeId(o->node_id));
    FUZZ_CHECK(o->node_tag >= 1 && o->node_tag <= 65534);
    auto hp = ParseHostPort(o->listen);
    FUZZ_CHECK(hp.has_value() && hp->host != "0.0.0.0" && hp->host != "::");
    for (const std::string& p : o->peers) FUZZ_CHECK(ParseHostPort(p).has_value());
    struct stat st {};
    FUZZ_CHECK(::stat(o->export_root.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
    FUZZ_CHECK(o->timeouts.failure_timeout > o->timeouts.heartbeat_interval);
    FUZZ_CHECK(o->control_socket.size() < 108);
  } else {
    FUZZ_CHECK(o.error().code == EINVAL);
    const std::string& msg = o.error().context;
    FUZZ_CHECK(msg.rfind("config " + g_config + ":", 0) == 0);
    FUZZ_CHECK(msg.find('\n') == std::string::npos);
  }
  auto sock = ControlSocketFromConfigFile(g_config);
  if (!sock) FUZZ_CHECK(sock.error().code == EINVAL);
  return 0;
}
