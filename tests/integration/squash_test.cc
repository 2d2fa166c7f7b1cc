// Root squash against hostile input, with real daemons and mounts (label
// "integration"; needs root and /dev/fuse): n1 without root squash, n2 with
// it, each holding a directory of its own (/nsq on n1, /sq on n2), every case
// run through the holder's own mount and through the other node's.
//  * set-ID bits: a write, truncate, ftruncate, O_TRUNC open or chown by a
//    caller leaves a file's set-ID bits as the same call on a native
//    directory leaves them for the identity the holder runs it as (the caller,
//    or the squashed caller when it comes from n1 to n2): the expectation is
//    what the kernel does natively in the test's own directory, not written
//    by hand;
//  * listings: a squashed root lists nothing nobody may not list, and a
//    virtual directory is listed only when every node's directory of that
//    path lets the caller read it.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

std::string Loop() { return "127.0.0.1:" + std::to_string(FreePort()); }

struct Ident {
  const char* name;
  uid_t uid;
  gid_t gid;
};
constexpr Ident kUser{"uid 1001", 1001, 1001};
constexpr Ident kUserGid0{"uid 1001 gid 0", 1001, 0};
constexpr Ident kRoot{"root", 0, 0};
constexpr Ident kNobody{"nobody", 65534, 65534};

// The identity a holder with root squash (squash ids 65534) runs a remote
// caller as.
Ident Squashed(const Ident& i) {
  return {i.name, i.uid == 0 ? 65534u : i.uid, i.gid == 0 ? 65534u : i.gid};
}

// Runs `body` in a child process as `id` (no supplementary groups; root
// keeps its capabilities). Returns {errno the body answered (0: success),
// what it wrote to `out`}.
std::pair<int, std::string> RunAs(const Ident& id, const std::function<int(std::string*)>& body) {
  int p[2];
  if (::pipe(p) != 0) return {-1, "pipe"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(id.gid, id.gid, id.gid) != 0 ||
        ::setresuid(id.uid, id.uid, id.uid) != 0) {
      ::_exit(255);
    }
    std::string out;
    const int e = body(&out);
    if (!out.empty() && ::write(p[1], out.data(), out.size()) < 0) ::_exit(254);
    ::_exit(e);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return {-1, "child"};
  return {WEXITSTATUS(status), out};
}

int Errno(bool ok) { return ok ? 0 : errno; }

// A file as the cases find it: owner and mode.
struct FileKind {
  const char* name;
  uid_t uid;
  gid_t gid;
  mode_t mode;
};
const FileKind kFiles[] = {
    {"root-4777", 0, 0, 04777},   {"user-4755", 1001, 1001, 04755},
    {"user-2775", 1001, 1001, 02775}, {"root-2777", 0, 0, 02777},
    {"root-2766", 0, 0, 02766},   {"user-2745", 1001, 1001, 02745},
};

struct Op {
  const char* name;
  std::function<int(const std::string& path, const FileKind& f)> run;
};
const Op kOps[] = {
    {"write",
     [](const std::string& p, const FileKind&) {
       const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
       if (fd < 0) return errno;
       const int e = Errno(::pwrite(fd, "x", 1, 0) == 1);
       ::close(fd);
       return e;
     }},
    {"ftruncate",
     [](const std::string& p, const FileKind&) {
       const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
       if (fd < 0) return errno;
       const int e = Errno(::ftruncate(fd, 1) == 0);
       ::close(fd);
       return e;
     }},
    {"truncate", [](const std::string& p, const FileKind&) { return Errno(::truncate(p.c_str(), 1) == 0); }},
    {"O_TRUNC",
     [](const std::string& p, const FileKind&) {
       const int fd = ::open(p.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
       if (fd < 0) return errno;
       ::close(fd);
       return 0;
     }},
    {"chown",
     [](const std::string& p, const FileKind& f) { return Errno(::chown(p.c_str(), f.uid, f.gid) == 0); }},
};

// Makes `path` a file of kind `f` (as this root process).
void MakeFile(const std::string& path, const FileKind& f) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, "data", 4), 4);
  ::close(fd);
  ASSERT_EQ(::chown(path.c_str(), f.uid, f.gid), 0) << path;
  ASSERT_EQ(::chmod(path.c_str(), f.mode), 0) << path;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

std::string Outcome(int err, mode_t mode) {
  char m[16];
  std::snprintf(m, sizeof m, "%04o", static_cast<unsigned>(mode));
  return (err == 0 ? std::string("ok") : std::string(std::strerror(err))) + ", mode " + m;
}

class Squash : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    const std::string a1 = Loop(), a2 = Loop();
    c1_ = c_.WriteConfig({.id = "n1", .listen = a1});
    c2_ = c_.WriteConfig({.id = "n2",
                          .listen = a2,
                          .peers = {a1},
                          .extra_yaml = "security: {root_squash: true}\n"});
    // Other users must reach the mounts and the export roots.
    ASSERT_EQ(::chmod(c_.dir().c_str(), 0755), 0);
    for (const char* d : {"/n1-export", "/n2-export"}) ASSERT_EQ(::chmod((c_.dir() + d).c_str(), 0755), 0);
    native_ = c_.dir() + "/native";
    fs::create_directories(native_);
    ASSERT_EQ(::chmod(native_.c_str(), 0755), 0);
  }
  void Launch() {
    c_.Start("n1", c1_);
    c_.Start("n2", c2_);
    for (const char* id : {"n1", "n2"}) {
      ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive(id, {"n1", "n2"}); }, kNoHang)) << c_.Log(id);
      ASSERT_TRUE(WaitFor([&] { return IsMounted(c_.Mountpoint(id)); }, kNoHang)) << c_.Log(id);
    }
  }
  // The directory each node holds alone, and whether its holder squashes.
  static std::string DirOf(const std::string& holder) { return holder == "n1" ? "/nsq" : "/sq"; }

  Cluster c_;
  std::string c1_, c2_, native_;
};

// What a file's set-ID bits become: through the mounts as on a native
// directory, for the identity the holder applies (docs/config.md,
// "security").
TEST_F(Squash, SetIdBitsClearedAsNativelyForTheIdentityTheHolderApplies) {
  if (IsSkipped()) return;
  const Ident writers[] = {kUser, kUserGid0, kRoot};
  struct Case {
    std::string holder, via, file;
    const Op* op;
    const FileKind* kind;
    Ident who;
  };
  std::vector<Case> cases;
  for (const char* holder : {"n1", "n2"}) {
    fs::create_directories(c_.ExportRoot(holder) + DirOf(holder));
    for (const char* via : {"n1", "n2"}) {
      for (const Op& op : kOps) {
        for (const FileKind& f : kFiles) {
          for (const Ident& w : writers) {
            Case k{holder, via, "", &op, &f, w};
            k.file = DirOf(holder) + "/" + op.name + "-" + f.name + "-" + std::to_string(w.uid) +
                     "-" + std::to_string(w.gid) + "-via-" + via;
            ASSERT_NO_FATAL_FAILURE(MakeFile(c_.ExportRoot(holder) + k.file, f));
            cases.push_back(k);
          }
        }
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(Launch());

  // The same call on a native file, by the identity the holder runs it as.
  std::map<std::string, std::string> native;
  int native_n = 0;
  auto reference = [&](const Op& op, const FileKind& f, const Ident& as) {
    const std::string key = std::string(op.name) + " " + f.name + " " + std::to_string(as.uid) +
                            ":" + std::to_string(as.gid);
    if (auto it = native.find(key); it != native.end()) return it->second;
    const std::string path = native_ + "/" + std::to_string(native_n++);
    MakeFile(path, f);
    const int e = RunAs(as, [&](std::string*) { return op.run(path, f); }).first;
    return native[key] = Outcome(e, ModeOf(path));
  };
  std::vector<std::string> wrong;
  for (const Case& k : cases) {
    const bool squashed = k.holder == "n2" && k.via == "n1";
    const Ident as = squashed ? Squashed(k.who) : k.who;
    const std::string want = reference(*k.op, *k.kind, as);
    const std::string through = c_.Mountpoint(k.via) + k.file;
    const int e = RunAs(k.who, [&](std::string*) { return k.op->run(through, *k.kind); }).first;
    const std::string got = Outcome(e, ModeOf(c_.ExportRoot(k.holder) + k.file));
    if (got != want) {
      wrong.push_back(std::string(k.op->name) + " of " + k.kind->name + " by " + k.who.name +
                      " through " + k.via + "'s mount, held by " + k.holder + ": " + got +
                      "; natively (as " + std::to_string(as.uid) + ":" + std::to_string(as.gid) +
                      "): " + want);
    }
  }
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " of " << cases.size() << " cases differ:\n"
                             << [&] {
                                  std::string s;
                                  for (const auto& w : wrong) s += "  " + w + "\n";
                                  return s;
                                }();
  // The references are not all alike: a native write by uid 1001 clears
  // set-user-ID, one by root keeps it.
  EXPECT_EQ(reference(kOps[0], kFiles[0], kUser), "ok, mode 0777");
  EXPECT_EQ(reference(kOps[0], kFiles[0], kRoot), "ok, mode 4777");
}

// {errno, names} of listing `dir` as `id` (names sorted, '\n'-separated).
std::pair<int, std::string> ListAs(const Ident& id, const std::string& dir) {
  return RunAs(id, [&](std::string* out) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno;
    std::set<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.insert(e->d_name);
    }
    ::closedir(d);
    for (const auto& n : names) *out += n + "\n";
    return 0;
  });
}

// A squashed root gets nobody's rights on listings too, and a virtual
// directory is listed only when every node's directory of that path lets the
// caller read it (docs/namespace.md, "The FUSE mount").
TEST_F(Squash, ListingsNeedReadPermissionOnEveryMemberAsTheHolderSeesTheCaller) {
  if (IsSkipped()) return;
  // A private directory of uid 1001 on each node; /mix is 0755 root's on n1
  // and 0700 uid 1001's on n2.
  for (const char* holder : {"n1", "n2"}) {
    const std::string priv = c_.ExportRoot(holder) + DirOf(holder) + "/priv";
    fs::create_directories(priv);
    ASSERT_NO_FATAL_FAILURE(MakeFile(priv + "/secret", {"f", 1001, 1001, 0600}));
    ASSERT_EQ(::chown(priv.c_str(), 1001, 1001), 0);
    ASSERT_EQ(::chmod(priv.c_str(), 0700), 0);
  }
  fs::create_directories(c_.ExportRoot("n1") + "/mix");
  fs::create_directories(c_.ExportRoot("n2") + "/mix");
  ASSERT_NO_FATAL_FAILURE(MakeFile(c_.ExportRoot("n1") + "/mix/a", {"f", 0, 0, 0644}));
  ASSERT_NO_FATAL_FAILURE(MakeFile(c_.ExportRoot("n2") + "/mix/b", {"f", 1001, 1001, 0644}));
  ASSERT_EQ(::chown((c_.ExportRoot("n2") + "/mix").c_str(), 1001, 1001), 0);
  ASSERT_EQ(::chmod((c_.ExportRoot("n2") + "/mix").c_str(), 0700), 0);
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::pair<int, std::string> denied{EACCES, ""};
  const std::pair<int, std::string> secret{0, "secret\n"};

  // Natively, nobody may not list the private directory; uid 1001 may.
  const std::string priv2 = c_.ExportRoot("n2") + "/sq/priv";
  ASSERT_EQ(ListAs(kNobody, priv2), denied);
  ASSERT_EQ(ListAs(kUser, priv2), secret);

  // n2's private directory: root through n1 is squashed to nobody there.
  const std::string via1 = c_.Mountpoint("n1") + "/sq/priv", via2 = c_.Mountpoint("n2") + "/sq/priv";
  EXPECT_EQ(ListAs(kNobody, via1), denied);
  EXPECT_EQ(ListAs(kRoot, via1), denied) << "a squashed root lists what nobody may not";
  EXPECT_EQ(ListAs(kUser, via1), secret);
  EXPECT_EQ(ListAs(kRoot, via2), secret) << "root on the holder's own mount is not squashed";
  EXPECT_EQ(ListAs(kNobody, via2), denied);
  // Reading and stat'ing inside were denied before already.
  EXPECT_EQ(RunAs(kRoot, [&](std::string*) { return Errno(::access((via1 + "/secret").c_str(), F_OK) == 0); }).first,
            EACCES);

  // n1 does not squash: root through n2 is root there.
  EXPECT_EQ(ListAs(kRoot, c_.Mountpoint("n2") + "/nsq/priv"), secret);
  EXPECT_EQ(ListAs(kNobody, c_.Mountpoint("n2") + "/nsq/priv"), denied);

  // /mix: n2's member lets only uid 1001 read it (and root where n2 does not
  // squash it: on n2's own mount).
  const std::pair<int, std::string> both{0, "a\nb\n"};
  for (const char* via : {"n1", "n2"}) {
    const std::string mix = c_.Mountpoint(via) + "/mix";
    EXPECT_EQ(ListAs(kNobody, mix), denied) << via;
    EXPECT_EQ(ListAs(kUser, mix), both) << via;
  }
  EXPECT_EQ(ListAs(kRoot, c_.Mountpoint("n1") + "/mix"), denied);
  EXPECT_EQ(ListAs(kRoot, c_.Mountpoint("n2") + "/mix"), both);
}

}  // namespace
}  // namespace fedfs::testing
