// kUnlink and kRename (vd/vd_service.h, VdChange; VdService::Unlink,
// Rename): an unlink, or a rename within one directory, in one call to the
// directory's manager, which has the file's node make it
// (VdServiceOptions::unlink_at, rename_at, here fakes that change that
// node's in-memory export root) and applies the change. Over the fake
// network in simulated mode (the federation: vd_federation.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vd_federation.h"

namespace fedfs::ns {
namespace {

using namespace vd_test;

int Code(const Status& s) { return s ? 0 : s.error().code; }

// The manager's calls of the file's node, answered a simulated 20 us later
// (as the daemon's pool answers after the node's reply).
struct Holders {
  struct Call {
    Cred cred;
    std::string holder, path, origin;
    std::string to;  // a rename's new path
    unsigned flags = 0;
  };
  std::vector<Call> calls;
  Federation* f = nullptr;
  int fail = 0;  // an errno to answer instead of unlinking

  VdServiceOptions Options() {
    VdServiceOptions o;
    o.unlink_at = [this](const Cred& c, const std::string& holder, const std::string& path,
                         const std::string& origin,
                         std::move_only_function<void(Result<std::optional<struct stat>>)> done) {
      calls.push_back({c, holder, path, origin});
      f->net().Schedule(std::chrono::microseconds(20),
                        [this, holder, path, done = std::move(done)]() mutable {
                          if (fail != 0) return done(Err(fail, "refused by the test"));
                          f->fs(holder.back() - '0').Remove(path);
                          struct stat st {};
                          st.st_mode = S_IFDIR | 0755;
                          st.st_mtim.tv_sec = 1234;
                          done(std::optional<struct stat>(st));
                        });
    };
    o.rename_at = [this](const Cred& c, const std::string& holder, const std::string& from,
                         const std::string& to, unsigned flags, const std::string& origin,
                         std::move_only_function<void(Status)> done) {
      calls.push_back({c, holder, from, origin, to, flags});
      f->net().Schedule(std::chrono::microseconds(20),
                        [this, holder, from, to, done = std::move(done)]() mutable {
                          if (fail != 0) return done(Err(fail, "refused by the test"));
                          MemFs& fs = f->fs(holder.back() - '0');
                          fs.Remove(from);
                          fs.AddFile(to);
                          done(Ok());
                        });
    };
    return o;
  }
};

Result<VdService::Renamed> Rename(Federation& f, int node, const std::string& dir,
                                  const std::string& name, const std::string& to,
                                  unsigned flags = 0) {
  std::optional<Result<VdService::Renamed>> out;
  f.svc(node).Rename(dir, name, to, flags, Cred{1000, 100},
                     [&](Result<VdService::Renamed> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  if (!out) return Err(EIO, "never completed");
  return std::move(*out);
}

Result<VdService::Unlinked> Unlink(Federation& f, int node, const std::string& dir,
                                   const std::string& name, const Cred& c = Cred{1000, 100}) {
  std::optional<Result<VdService::Unlinked>> out;
  f.svc(node).Unlink(dir, name, c, [&](Result<VdService::Unlinked> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  if (!out) return Err(EIO, "never completed");
  return std::move(*out);
}

Status Lock(Federation& f, int node, const std::string& dir, const std::string& name) {
  return f.Update(node, dir, VdChange{VdChange::Kind::kLock, name, 0, Name(node)});
}

// n1 unlinks f2 (on n2) in a directory managed by n0: one request from n1,
// the file's node asked once as n1's caller on n1's behalf, the entry gone
// from the manager and from n1's own copy, and the name free again.
TEST(Unlink, OneCallToTheManagerUnlinksAtTheFilesNodeAndRemovesTheEntry) {
  Holders h;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);  // f0, f1, f2 (on nodes 0, 1, 2) and sub
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(2, p));
  f.net().ResetStats();
  auto r = Unlink(f, 1, p, "f2");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(f.Requests(kVdUpdate), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  EXPECT_TRUE(r->unlinked);
  ASSERT_TRUE(r->part);
  ASSERT_NE(r->part->Find("f2"), nullptr);
  EXPECT_EQ(r->part->Find("f2")->holders, std::vector<std::string>{"n2"});
  ASSERT_TRUE(r->parent);
  EXPECT_EQ(r->parent->st_mtim.tv_sec, 1234);
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(h.calls[0].holder, "n2");
  EXPECT_EQ(h.calls[0].path, p + "/f2");
  EXPECT_EQ(h.calls[0].origin, "n1");
  EXPECT_EQ(h.calls[0].cred.uid, 1000u);
  EXPECT_EQ(h.calls[0].cred.gid, 100u);
  EXPECT_EQ(f.svc(1).stats().unlinks_asked, 1u);
  EXPECT_EQ(f.svc(0).stats().unlinks_made, 1u);
  // Gone everywhere: n1's copy (patched from the answer, no new get), n2's
  // (invalidated), the manager's.
  for (int i : {1, 2, 0}) {
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ((*vd)->Find("f2"), nullptr) << "node " << i;
    EXPECT_NE((*vd)->Find("f1"), nullptr) << "node " << i;
  }
  // The hold ended with the removal: another node may claim the name.
  EXPECT_TRUE(f.Update(0, p, VdChange{VdChange::Kind::kClaim, "f2", 0, "n0"}));
}

// The file's node refused (EACCES): the call fails with its errno, the
// entry stays, and the name is held no more.
TEST(Unlink, AnErrorOfTheFilesNodeChangesNothingAndReleasesTheName) {
  Holders h;
  h.fail = EACCES;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  auto r = Unlink(f, 1, p, "f2");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EACCES);
  EXPECT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(f.svc(0).stats().unlinks_made, 0u);
  auto vd = f.Get(2, p);
  ASSERT_TRUE(vd);
  EXPECT_NE((*vd)->Find("f2"), nullptr);
  EXPECT_EQ(Code(Lock(f, 2, p, "f2")), 0);
}

// No such name, or a directory: read and answered, nothing held, the file's
// node not asked (the caller answers ENOENT or EISDIR itself).
TEST(Unlink, AnAbsentNameOrADirectoryIsOnlyRead) {
  Holders h;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  auto none = Unlink(f, 1, p, "nope");
  ASSERT_TRUE(none) << none.error().ToString();
  EXPECT_FALSE(none->unlinked);
  EXPECT_EQ(none->part->Find("nope"), nullptr);
  auto dir = Unlink(f, 1, p, "sub");
  ASSERT_TRUE(dir) << dir.error().ToString();
  EXPECT_FALSE(dir->unlinked);
  ASSERT_NE(dir->part->Find("sub"), nullptr);
  EXPECT_EQ(dir->part->Find("sub")->type, DT_DIR);
  EXPECT_TRUE(h.calls.empty());
  EXPECT_EQ(Code(Lock(f, 2, p, "sub")), 0);
  EXPECT_EQ(Code(Lock(f, 2, p, "nope")), 0);
}

// A name another node holds is waited out (EAGAIN, as a lock-read).
TEST(Unlink, ANameAnotherNodeHoldsIsBusy) {
  Holders h;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(Lock(f, 2, p, "f1"));
  auto r = Unlink(f, 1, p, "f1");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EAGAIN);
  EXPECT_TRUE(h.calls.empty());
}

// A manager that cannot unlink for others answers ENOSYS with nothing held:
// the caller unlinks by itself.
TEST(Unlink, WithoutTheHookTheManagerAnswersEnosys) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  auto r = Unlink(f, 1, p, "f2");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOSYS);
  EXPECT_EQ(Code(Lock(f, 2, p, "f2")), 0);
}

// n1 renames f2 (on n2) to g in a directory managed by n0: one request
// from n1, the file's node asked once (never replacing), both names'
// changes seen at once everywhere, both names free again.
TEST(Rename, OneCallToTheManagerRenamesAtTheFilesNodeAndChangesBothNames) {
  Holders h;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(2, p));
  f.net().ResetStats();
  auto r = Rename(f, 1, p, "f2", "g");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_TRUE(r->renamed);
  EXPECT_EQ(f.Requests(kVdUpdate), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  ASSERT_NE(r->part->Find("f2"), nullptr);
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(h.calls[0].holder, "n2");
  EXPECT_EQ(h.calls[0].path, p + "/f2");
  EXPECT_EQ(h.calls[0].to, p + "/g");
  EXPECT_EQ(h.calls[0].flags, unsigned{RENAME_NOREPLACE});
  EXPECT_EQ(h.calls[0].origin, "n1");
  EXPECT_EQ(f.svc(1).stats().renames_asked, 1u);
  EXPECT_EQ(f.svc(0).stats().renames_made, 1u);
  for (int i : {1, 2, 0}) {
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ((*vd)->Find("f2"), nullptr) << "node " << i;
    ASSERT_NE((*vd)->Find("g"), nullptr) << "node " << i;
    EXPECT_EQ((*vd)->Find("g")->holders, std::vector<std::string>{"n2"}) << "node " << i;
  }
  EXPECT_EQ(Code(Lock(f, 2, p, "g")), 0);
  EXPECT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kClaim, "f2", 0, "n2"}));
}

// A new name that exists: EEXIST, nothing held, the file's node not asked
// (the caller replaces it by itself). The file's node's errno: both names
// released, nothing changed.
TEST(Rename, AnExistingNewNameOrAnErrorOfTheFilesNodeChangesNothing) {
  Holders h;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  auto exists = Rename(f, 1, p, "f2", "f1");
  ASSERT_FALSE(exists);
  EXPECT_EQ(exists.error().code, EEXIST);
  EXPECT_TRUE(h.calls.empty());
  EXPECT_EQ(Code(Lock(f, 2, p, "f2")), 0);
  ASSERT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kRelease, "f2", 0, "n2"}));
  h.fail = EACCES;
  auto refused = Rename(f, 1, p, "f2", "g");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, EACCES);
  EXPECT_EQ(h.calls.size(), 1u);
  auto vd = f.Get(2, p);
  ASSERT_TRUE(vd);
  EXPECT_NE((*vd)->Find("f2"), nullptr);
  EXPECT_EQ((*vd)->Find("g"), nullptr);
  EXPECT_EQ(Code(Lock(f, 2, p, "f2")), 0);
  EXPECT_EQ(Code(Lock(f, 2, p, "g")), 0);
}

// A directory, or a name that does not exist: not renamed, both names
// released, the file's node not asked.
TEST(Rename, ADirectoryOrAnAbsentNameIsNotRenamedThere) {
  Holders h;
  Federation f(3, h.Options());
  h.f = &f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (const char* name : {"sub", "nope"}) {
    auto r = Rename(f, 1, p, name, "g");
    ASSERT_TRUE(r) << name << ": " << r.error().ToString();
    EXPECT_FALSE(r->renamed) << name;
    EXPECT_EQ(Code(Lock(f, 2, p, name)), 0) << name;
    EXPECT_EQ(Code(Lock(f, 2, p, "g")), 0) << name;
    ASSERT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kRelease, name, 0, "n2"}));
    ASSERT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kRelease, "g", 0, "n2"}));
  }
  EXPECT_TRUE(h.calls.empty());
}

}  // namespace
}  // namespace fedfs::ns
