// The VD service (vd/vd_service.h) over the fake network in simulated
// mode (the federation: vd_federation.h).
// g++ 12 reports a false -Wmaybe-uninitialized when a
// std::expected<std::vector<Conflict>, Error> is moved through optionals.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "vd/vd_service.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <flatbuffers/flatbuffers.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/rpc_methods.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "common/path.h"
#include "vd_federation.h"
#include "vd_generated.h"

namespace fedfs::ns {
namespace {

using namespace vd_test;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(VdService, GetBuildsByOneFanOut) {
  for (int n : {3, 5, 8}) {
    SCOPED_TRACE(n);
    Federation f(n);
    const std::string p = "/data";
    Populate(f, p);
    const int manager = f.Index(f.Manager(p));
    const int client = f.Other({manager});

    auto vd = f.Get(client, p);
    ASSERT_TRUE(vd) << vd.error().ToString();
    EXPECT_EQ(f.Requests(kListLocal), static_cast<uint64_t>(n - 1));  // one fan-out
    EXPECT_EQ(f.Requests(kVdGet), 1u);
    EXPECT_EQ(f.svc(manager).stats().dirmerges, 1u);
    EXPECT_EQ(f.svc(manager).stats().gets_served, 1u);
    EXPECT_EQ(f.svc(manager).stats().resident, 1u);
    EXPECT_EQ(f.svc(client).stats().dirmerges, 0u);
    for (int i = 0; i < n; ++i) EXPECT_EQ(f.fs(i).list_calls, 1) << i;  // manager: locally

    EXPECT_EQ((*vd)->path, p);
    EXPECT_EQ((*vd)->epoch, 1u);
    EXPECT_EQ((*vd)->holders.size(), static_cast<size_t>(n));
    ASSERT_EQ((*vd)->entries.size(), static_cast<size_t>(n + 1));
    for (int i = 0; i < n; ++i) {
      const VdEntry* e = (*vd)->Find("f" + std::to_string(i));
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->holders, std::vector<std::string>{Name(i)});
    }
    const VdEntry* sub = (*vd)->Find("sub");
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->type, DT_DIR);
    EXPECT_EQ(sub->holders, (std::vector<std::string>{"n0", "n1"}));
  }
}

TEST(VdService, ManagerServesItselfWithoutAGetMessage) {
  Federation f(4);
  Populate(f, "/x");
  const int manager = f.Index(f.Manager("/x"));
  auto vd = f.Get(manager, "/x");
  ASSERT_TRUE(vd);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  EXPECT_EQ(f.Requests(kListLocal), 3u);
}

TEST(VdService, SecondGetIsServedFromResidency) {
  Federation f(5);
  Populate(f, "/r");
  const int manager = f.Index(f.Manager("/r"));
  const int a = f.Other({manager});
  const int b = f.Other({manager, a});
  auto first = f.Get(a, "/r");
  ASSERT_TRUE(first);
  const uint64_t lists = f.Requests(kListLocal);
  auto second = f.Get(b, "/r");
  ASSERT_TRUE(second);
  EXPECT_EQ(f.Requests(kListLocal), lists);  // zero ListLocal
  EXPECT_EQ(f.Requests(kVdGet), 2u);
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 1u);
  EXPECT_EQ(f.svc(manager).stats().gets_served, 2u);
  EXPECT_EQ((*second)->version, (*first)->version);
  EXPECT_EQ(Names(**second), Names(**first));
}

TEST(VdService, ConcurrentGetsJoinOneBuild) {
  Federation f(6);
  Populate(f, "/c");
  const int manager = f.Index(f.Manager("/c"));
  std::vector<std::optional<Result<VdPtr>>> got(f.size());
  for (int i = 0; i < f.size(); ++i) {
    f.svc(i).Get("/c", [&got, i](Result<VdPtr> r) { got[i] = std::move(r); });
  }
  f.net().RunUntilIdle();
  for (int i = 0; i < f.size(); ++i) {
    ASSERT_TRUE(got[i].has_value() && got[i]->has_value()) << i;
    const VirtualDirectory& mine = ***got[i];
    const VirtualDirectory& theirs = ***got[manager];
    EXPECT_EQ(mine.version, theirs.version) << "one build shared by all";
    EXPECT_EQ(Names(mine), Names(theirs));
  }
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 1u);
  EXPECT_EQ(f.Requests(kListLocal), 5u);
}

TEST(VdService, UpdatesAreVisibleInTheNextGet) {
  Federation f(4);
  Populate(f, "/u");
  const int manager = f.Index(f.Manager("/u"));
  const int client = f.Other({manager});
  auto v1 = f.Get(client, "/u");
  ASSERT_TRUE(v1);
  const uint64_t lists = f.Requests(kListLocal);

  // A file appears on node 2 (say, created there): add a holder.
  ASSERT_TRUE(f.Update(2, "/u", {VdChange::Kind::kAdd, "new", DT_REG, "n2"}));
  auto v2 = f.Get(client, "/u");
  ASSERT_TRUE(v2);
  EXPECT_EQ((*v2)->version, (*v1)->version + 1);
  ASSERT_NE((*v2)->Find("new"), nullptr);
  EXPECT_EQ((*v2)->Find("new")->holders, std::vector<std::string>{"n2"});

  // The same name on node 3: a conflict; the alias appears.
  ASSERT_TRUE(f.Update(3, "/u", {VdChange::Kind::kAdd, "new", DT_REG, "n3"}));
  auto v3 = f.Get(client, "/u");
  ASSERT_TRUE(v3);
  EXPECT_EQ((*v3)->version, (*v2)->version + 1);
  ASSERT_NE((*v3)->Find("new@n3"), nullptr);
  EXPECT_TRUE((*v3)->Find("new@n3")->alias);
  auto conflicts = f.Conflicts(client, "/u");
  ASSERT_TRUE(conflicts);
  ASSERT_EQ(conflicts->size(), 1u);
  EXPECT_EQ((*conflicts)[0].name, "new");

  // Remove n2's copy: n3's copy takes the plain name, the alias goes.
  ASSERT_TRUE(f.Update(client, "/u", {VdChange::Kind::kRemove, "new", 0, "n2"}));
  auto v4 = f.Get(client, "/u");
  ASSERT_TRUE(v4);
  EXPECT_EQ((*v4)->version, (*v3)->version + 1);
  ASSERT_NE((*v4)->Find("new"), nullptr);
  EXPECT_EQ((*v4)->Find("new")->holders, std::vector<std::string>{"n3"});
  EXPECT_EQ((*v4)->Find("new@n3"), nullptr);

  // The last holder goes: the entry goes.
  ASSERT_TRUE(f.Update(manager, "/u", {VdChange::Kind::kRemove, "new", 0, "n3"}));
  auto v5 = f.Get(client, "/u");
  ASSERT_TRUE(v5);
  EXPECT_EQ((*v5)->version, (*v4)->version + 1);
  EXPECT_EQ((*v5)->Find("new"), nullptr);
  EXPECT_EQ(Names(**v5), Names(**v1));

  EXPECT_EQ(f.Requests(kListLocal), lists);  // never rebuilt
  EXPECT_EQ(f.svc(manager).stats().updates_applied, 4u);
}

TEST(VdService, UpdateOfANonResidentVdDoesNothing) {
  Federation f(3);
  Populate(f, "/nr");
  const int manager = f.Index(f.Manager("/nr"));
  ASSERT_TRUE(f.Update(f.Other({manager}), "/nr", {VdChange::Kind::kAdd, "x", DT_REG, "n0"}));
  EXPECT_EQ(f.svc(manager).stats().updates_applied, 0u);
  EXPECT_EQ(f.svc(manager).stats().resident, 0u);
  EXPECT_EQ(f.Requests(kListLocal), 0u);
  // The next get lists what the nodes have (x was never really created).
  auto vd = f.Get(0, "/nr");
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("x"), nullptr);
}

TEST(VdService, UpdateRacingWithTheBuildIsNotLost) {
  Federation f(4);
  Populate(f, "/race");
  const int manager = f.Index(f.Manager("/race"));
  std::optional<Result<VdPtr>> got;
  f.svc(manager).Get("/race", [&](Result<VdPtr> r) { got = std::move(r); });
  // The fan-out is in flight; a node reports a file it made after listing.
  std::optional<Status> upd;
  f.svc(manager).Update("/race", {VdChange::Kind::kAdd, "late", DT_REG, "n0"},
                        [&](Status s) { upd = s; });
  f.net().RunUntilIdle();
  ASSERT_TRUE(got && *got);
  ASSERT_TRUE(upd && *upd);
  EXPECT_NE((**got)->Find("late"), nullptr);
}

TEST(VdService, ResidencyIsBoundedLru) {
  VdServiceOptions o;
  o.max_resident_vds = 2;
  o.dt_entries = 0;  // every get reaches the manager
  Federation f(3, o);
  const std::string m = "n1";
  const int manager = f.Index(m);
  std::vector<std::string> paths;
  for (int i = 0; paths.size() < 3; ++i) {
    std::string p = "/e" + std::to_string(i);
    if (f.Manager(p) == m) paths.push_back(p);
  }
  for (const auto& p : paths) Populate(f, p);
  for (const auto& p : paths) ASSERT_TRUE(f.Get(0, p));
  EXPECT_EQ(f.svc(manager).stats().resident, 2u);
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 3u);
  // paths[2] and paths[1] are resident; paths[0] was evicted: rebuilt.
  ASSERT_TRUE(f.Get(0, paths[2]));
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 3u);
  ASSERT_TRUE(f.Get(0, paths[0]));
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 4u);
  // That evicted paths[1] (least recently used), not paths[2].
  ASSERT_TRUE(f.Get(0, paths[2]));
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 4u);
  ASSERT_TRUE(f.Get(0, paths[1]));
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 5u);
  EXPECT_EQ(f.svc(manager).stats().resident, 2u);
}

TEST(VdService, DropSubtreeForgetsResidentVdsAtEveryManager) {
  Federation f(4);
  Populate(f, "/t");
  Populate(f, "/t/sub");
  Populate(f, "/other");
  for (const char* p : {"/t", "/t/sub", "/other"}) ASSERT_TRUE(f.Get(0, p));
  const auto dirmerges = [&] {
    uint64_t n = 0;
    for (int i = 0; i < f.size(); ++i) n += f.svc(i).stats().dirmerges;
    return n;
  };
  const uint64_t before = dirmerges();
  std::optional<Status> out;
  f.svc(2).DropSubtree("/t", [&](Status s) { out = std::move(s); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(*out);
  // One parallel round: a drop to every other node.
  EXPECT_EQ(f.Requests(MethodId(RpcMethod::kNsVdDrop)), 3u);
  // /t and /t/sub are rebuilt on the next get; /other is still resident.
  ASSERT_TRUE(f.Get(0, "/other"));
  EXPECT_EQ(dirmerges(), before);
  ASSERT_TRUE(f.Get(0, "/t"));
  ASSERT_TRUE(f.Get(0, "/t/sub"));
  EXPECT_EQ(dirmerges(), before + 2);
}

TEST(VdService, VersionsNeverRepeatAcrossRebuilds) {
  VdServiceOptions o;
  o.max_resident_vds = 1;
  Federation f(3, o);
  const std::string a = PathManagedBy(f, "n0");
  const std::string b = PathManagedBy(f, "n0", true, "/other");
  Populate(f, a);
  Populate(f, b);
  auto v1 = f.Get(0, a);
  ASSERT_TRUE(v1);
  ASSERT_TRUE(f.Get(0, b));  // evicts a
  auto v2 = f.Get(0, a);
  ASSERT_TRUE(v2);
  EXPECT_GT((*v2)->version, (*v1)->version);
}

TEST(VdService, EpochChangeRebuilds) {
  Federation f(4);
  Populate(f, "/ep");
  const int manager = f.Index(f.Manager("/ep"));
  const int client = f.Other({manager});
  ASSERT_TRUE(f.Get(client, "/ep"));
  const uint64_t lists = f.Requests(kListLocal);
  // Same members, new epoch (e.g. a node left and came back): rebuild.
  f.SetViews({"n0", "n1", "n2", "n3"}, 2);
  auto vd = f.Get(client, "/ep");
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->epoch, 2u);
  EXPECT_EQ(f.Requests(kListLocal), lists + 3);
  EXPECT_EQ(f.svc(manager).stats().dirmerges, 2u);
  EXPECT_EQ(f.svc(manager).stats().resident, 1u);
  // Updates to a VD of an older epoch are not applied: it is dropped.
  f.SetViews({"n0", "n1", "n2", "n3"}, 3);
  ASSERT_TRUE(f.Update(client, "/ep", {VdChange::Kind::kAdd, "z", DT_REG, "n0"}));
  EXPECT_EQ(f.svc(manager).stats().updates_applied, 0u);
  EXPECT_EQ(f.svc(manager).stats().resident, 0u);
}

TEST(VdService, DeadNodesEntriesAreAbsentTheRestListed) {
  VdServiceOptions o;
  o.rpc_timeout = milliseconds(300);
  Federation f(5, o);
  Populate(f, "/dead");
  const int manager = f.Index(f.Manager("/dead"));
  const int victim = f.Other({manager});
  const int client = f.Other({manager, victim});

  // Killed but not yet detected: the leaf times out, the rest is merged.
  ASSERT_TRUE(f.net().Kill(Name(victim)));
  auto vd = f.Get(client, "/dead");
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_EQ((*vd)->Find("f" + std::to_string(victim)), nullptr);
  EXPECT_EQ((*vd)->holders.size(), 4u);
  for (int i = 0; i < 5; ++i) {
    if (i != victim) {
      EXPECT_NE((*vd)->Find("f" + std::to_string(i)), nullptr) << i;
    }
  }
  // Served, but neither kept nor cacheable, and no claim is decided on it:
  // the silent node may hold the name (a create would make a second copy).
  EXPECT_FALSE((*vd)->cacheable);
  const VdChange claim{VdChange::Kind::kClaim, "f" + std::to_string(victim), 0, Name(client)};
  Status c = f.Update(client, "/dead", claim);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EAGAIN) << c.error().ToString();

  // Detected dead (new epoch, not live): no message is sent to it at all.
  std::vector<std::string> live;
  for (int i = 0; i < 5; ++i) {
    if (i != victim) live.push_back(Name(i));
  }
  f.SetViews(live, 2);
  const std::string p2 = PathManagedBy(f, Name(victim), false, "/alive");
  Populate(f, p2);
  const uint64_t to_victim = [&] {
    auto s = f.net().Stats(Name(victim));
    return s.messages_received;
  }();
  auto vd2 = f.Get(f.Index(f.Manager(p2)) == client ? f.Other({victim, client}) : client, p2);
  ASSERT_TRUE(vd2);
  EXPECT_EQ((*vd2)->Find("f" + std::to_string(victim)), nullptr);
  EXPECT_EQ((*vd2)->entries.size(), 4u + 1u);
  EXPECT_EQ(f.net().Stats(Name(victim)).messages_received, to_victim);
  // Without it in the view, the VD is whole again: the claim is decided.
  EXPECT_TRUE(f.Update(client, "/dead", claim));
}

TEST(VdService, ASlowNodeJoinsWithinTheTimeout) {
  VdServiceOptions o;
  o.rpc_timeout = seconds(2);
  Federation f(4, o);
  Populate(f, "/slow");
  const int manager = f.Index(f.Manager("/slow"));
  const int slow = f.Other({manager});
  const int too_slow = f.Other({manager, slow});
  m2m::LinkModel slow_link;
  // First contact: a 4-message handshake then the request and reply, 6
  // one-way trips: 1.2 s < 2 s.
  slow_link.base_latency = milliseconds(200);
  f.net().SetNodeModel(Name(slow), slow_link);
  m2m::LinkModel too_slow_link;
  too_slow_link.base_latency = milliseconds(1500);  // 3 s even without the handshake
  f.net().SetNodeModel(Name(too_slow), too_slow_link);

  auto vd = f.Get(manager, "/slow");
  ASSERT_TRUE(vd);
  EXPECT_NE((*vd)->Find("f" + std::to_string(slow)), nullptr);
  EXPECT_EQ((*vd)->Find("f" + std::to_string(too_slow)), nullptr);
  EXPECT_LT(f.net().Now(), seconds(5));  // bounded by the leaf timeout
}

TEST(VdService, ADroppedLocalListingStillCompletesTheBuild) {
  Federation probe(4);
  const int manager = probe.Index(probe.Manager("/drop"));
  Federation f(4, {}, 1, m2m::LinkModel::Rdma(), manager);
  Populate(f, "/drop");
  auto vd = f.Get(f.Other({manager}), "/drop");
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_EQ((*vd)->Find("f" + std::to_string(manager)), nullptr);  // its own leaf failed
  EXPECT_EQ((*vd)->holders.size(), 3u);
  // Its kNsListLocal handler drops too: the callers get an error, not a hang.
  const int other_manager_path_client = f.Other({manager});
  const std::string p = PathManagedBy(f, Name(other_manager_path_client), true, "/q");
  Populate(f, p);
  auto vd2 = f.Get(other_manager_path_client, p);
  ASSERT_TRUE(vd2);
  EXPECT_EQ((*vd2)->Find("f" + std::to_string(manager)), nullptr);
  EXPECT_NE((*vd2)->Find("f" + std::to_string(other_manager_path_client)), nullptr);
}

TEST(VdService, EnoentAndEnotdir) {
  Federation f(3);
  f.fs(1).AddFile("/file");
  f.fs(2).AddDir("/only2");
  for (int from = 0; from < 3; ++from) {
    auto missing = f.Get(from, "/missing");
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, ENOENT);
    auto notdir = f.Get(from, "/file");
    ASSERT_FALSE(notdir);
    EXPECT_EQ(notdir.error().code, ENOTDIR);
    auto only2 = f.Get(from, "/only2");
    ASSERT_TRUE(only2);
    EXPECT_EQ((*only2)->holders, std::vector<std::string>{"n2"});
  }
  auto bad = f.Get(0, "relative");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, EINVAL);
  EXPECT_EQ(f.svc(0).stats().resident + f.svc(1).stats().resident + f.svc(2).stats().resident,
            1u);  // failures are not kept
}

TEST(VdService, EstaleRedirectAfterARingChange) {
  Federation f(6);
  // Old ring: n0..n4. New ring: n0..n5 (n5 joined). Find P whose manager moves
  // to n5 and whose old manager is neither the client nor n5.
  const std::vector<std::string> old_live = {"n0", "n1", "n2", "n3", "n4"};
  const std::vector<std::string> new_live = {"n0", "n1", "n2", "n3", "n4", "n5"};
  f.SetViews(new_live, 2);
  const int client = 0;
  auto old_view = f.MakeView(Name(client), old_live, 1);
  std::string p;
  for (int i = 0; i < 10000 && p.empty(); ++i) {
    std::string c = "/m" + std::to_string(i);
    if (f.Manager(c) == "n5" && old_view->Manager(c) != Name(client)) p = c;
  }
  ASSERT_FALSE(p.empty());
  Populate(f, p);
  const int old_manager = f.Index(old_view->Manager(p));

  // The client's view is stale; it refreshes after the first attempt (Get
  // reads the view once for its directory table, Route once per attempt).
  f.view(client).Set(old_view);
  f.view(client).SetLater(f.MakeView(Name(client), new_live, 2), 2);
  auto vd = f.Get(client, p);
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_EQ(f.Requests(kVdGet), 2u);  // to the old manager (ESTALE), then to n5
  EXPECT_EQ(f.svc(old_manager).stats().gets_served, 0u);
  EXPECT_EQ(f.svc(5).stats().gets_served, 1u);
  EXPECT_EQ((*vd)->entries.size(), 6u + 1u);

  // A view that never refreshes: 1 + 3 retries, then ESTALE.
  f.net().ResetStats();
  f.view(client).Set(old_view);
  auto stale = f.Get(client, p);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ESTALE);
  EXPECT_EQ(f.Requests(kVdGet), 4u);
  // Updates are redirected the same way.
  f.net().ResetStats();
  f.view(client).SetLater(f.MakeView(Name(client), new_live, 2), 1);
  ASSERT_TRUE(f.Update(client, p, {VdChange::Kind::kAdd, "u", DT_REG, "n1"}));
  EXPECT_EQ(f.Requests(kVdUpdate), 2u);
  EXPECT_EQ(f.svc(5).stats().updates_applied, 1u);
}

// Sends raw bytes as `method` to node `to` from a bare transport.
Result<m2m::Bytes> RawCall(Federation& f, m2m::Transport& raw, const std::string& to,
                           uint16_t method, m2m::Bytes payload) {
  std::optional<Result<m2m::Bytes>> out;
  raw.GetEndpoint(to)->Call(method, std::move(payload), seconds(1),
                            [&](Result<m2m::Bytes> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  if (!out) return Err(EIO, "never completed");
  return std::move(*out);
}

m2m::Bytes WireMessage(uint16_t version, bool with_path, const std::string& path = "/x") {
  namespace wire = fedfs::ns::vdwire;
  flatbuffers::FlatBufferBuilder b;
  auto p = with_path ? b.CreateString(path) : flatbuffers::Offset<flatbuffers::String>();
  auto req = wire::CreatePathRequest(b, p, 0, 1);
  b.FinishSizePrefixed(wire::CreateVdMessage(b, version, wire::Body::PathRequest, req.Union()));
  return m2m::ToBytes({b.GetBufferPointer(), b.GetSize()});
}

m2m::Bytes WrongBody() {
  namespace wire = fedfs::ns::vdwire;
  flatbuffers::FlatBufferBuilder b;
  auto reply = wire::CreateUpdateReply(b, 5);
  b.FinishSizePrefixed(wire::CreateVdMessage(b, 1, wire::Body::UpdateReply, reply.Union()));
  return m2m::ToBytes({b.GetBufferPointer(), b.GetSize()});
}

TEST(VdService, MalformedRequestsAreRefusedWithEproto) {
  Federation f(3);
  Populate(f, "/ok");
  const std::string target = f.Manager("/x");
  m2m::TransportOptions t;
  t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7});
  auto raw = f.net().NewTransport(t);
  ASSERT_TRUE(raw->Listen("raw"));

  m2m::Bytes garbage = {std::byte{0xff}, std::byte{0x00}, std::byte{0x13}, std::byte{0x37},
                        std::byte{0x01}, std::byte{0x02}, std::byte{0x03}, std::byte{0x04},
                        std::byte{0x05}, std::byte{0x06}, std::byte{0x07}, std::byte{0x08}};
  m2m::Bytes truncated = WireMessage(1, true);
  truncated.resize(truncated.size() - 5);
  m2m::Bytes huge_prefix = WireMessage(1, true);
  huge_prefix[0] = std::byte{0xff};
  huge_prefix[3] = std::byte{0x7f};
  const std::vector<std::pair<const char*, m2m::Bytes>> bad = {
      {"empty", {}},
      {"garbage", garbage},
      {"truncated", truncated},
      {"size prefix too large", huge_prefix},
      {"wrong version", WireMessage(2, true)},
      {"no path", WireMessage(1, false)},
      {"wrong body type", WrongBody()},
  };
  for (uint16_t method : {kVdGet, kListLocal, kVdUpdate, MethodId(RpcMethod::kNsConflicts)}) {
    for (const auto& [what, bytes] : bad) {
      SCOPED_TRACE(std::string(what) + " method " + std::to_string(method));
      // kNsVdUpdate expects an UpdateRequest: a PathRequest is a wrong body.
      auto r = RawCall(f, *raw, target, method, bytes);
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code, EPROTO);
    }
  }
  // A well-formed request with a path that escapes: EINVAL.
  auto escape = RawCall(f, *raw, target, kListLocal, WireMessage(1, true, "/../etc"));
  ASSERT_FALSE(escape);
  EXPECT_EQ(escape.error().code, EINVAL);
  // A well-formed get reaches the manager and works; the service keeps serving.
  auto ok = RawCall(f, *raw, f.Manager("/ok"), kVdGet, WireMessage(1, true, "/ok"));
  ASSERT_TRUE(ok) << ok.error().ToString();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.Get(i, "/ok"));
  raw->Shutdown();
}

TEST(VdService, SameSeedSameMessages) {
  auto run = [](uint64_t seed) {
    VdServiceOptions o;
    o.max_resident_vds = 3;
    o.rpc_timeout = milliseconds(200);
    Federation f(8, o, seed, m2m::LinkModel::TcpLan());
    for (int d = 0; d < 10; ++d) Populate(f, "/s" + std::to_string(d));
    EXPECT_TRUE(f.net().Kill("n7"));
    for (int round = 0; round < 3; ++round) {
      for (int d = 0; d < 10; ++d) {
        const std::string p = "/s" + std::to_string(d);
        const int from = (d * 3 + round) % 7;
        EXPECT_TRUE(f.Get(from, p));
        EXPECT_TRUE(f.Update(from, p, {VdChange::Kind::kAdd, "r" + std::to_string(round),
                                       DT_REG, Name(from)}));
      }
    }
    return std::make_pair(f.net().TotalStats(), f.net().Now());
  };
  auto a = run(11);
  auto b = run(11);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_GT(a.first.per_method[kListLocal].requests, 0u);
}

// `n` services on the real-time fake network (a dispatcher thread), each
// with its own view (all alive, epoch 1, until a test sets another), driven
// from the test's thread through the blocking helpers as a FUSE worker would.
struct RealTimeNodes {
  explicit RealTimeNodes(int n) : net(Options()), views(static_cast<size_t>(n)) {
    std::vector<std::string> all;
    for (int i = 0; i < n; ++i) all.push_back(Name(i));
    for (int i = 0; i < n; ++i) {
      fs.push_back(std::make_unique<MemFs>(Name(i)));
      views[i].Set(View(i, all, 1));
      m2m::TransportOptions t;
      t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7});
      transports.push_back(net.NewTransport(t));
      svcs.push_back(std::make_unique<VdService>(VdServiceOptions{}, transports[i].get(),
                                                 &views[i], fs[i].get(), &inline_exec));
      svcs[i]->RegisterHandlers();
      EXPECT_TRUE(transports[i]->Listen(Name(i)));
    }
  }
  ~RealTimeNodes() {
    for (auto& t : transports) t->Shutdown();
  }
  static m2m::FakeNetworkOptions Options() {
    m2m::FakeNetworkOptions o;
    o.mode = m2m::SchedulerMode::kRealTime;
    return o;
  }
  static std::shared_ptr<const ClusterView> View(int self, const std::vector<std::string>& live,
                                                 uint64_t epoch) {
    auto v = std::make_shared<ClusterView>();
    v->self = Name(self);
    v->epoch = epoch;
    for (const auto& n : live) v->live[n] = n;
    v->ring = std::make_shared<const Ring>(live, 64);
    return v;
  }
  // Sets node `i`'s view after 50 ms, from another thread (gossip arriving
  // while a helper waits); join the thread.
  std::thread SetViewLater(int i, std::shared_ptr<const ClusterView> v) {
    return std::thread([this, i, v = std::move(v)] {
      std::this_thread::sleep_for(milliseconds(50));
      views[i].Set(v);
    });
  }

  m2m::FakeNetwork net;
  InlineExecutor inline_exec;
  std::vector<std::unique_ptr<MemFs>> fs;
  std::vector<TestViewSource> views;
  std::vector<std::unique_ptr<m2m::Transport>> transports;
  std::vector<std::unique_ptr<VdService>> svcs;
};

// A path under "/" whose owner is `owner_a` on ring `a` and `owner_b` on ring
// `b` (managers before and after a membership change).
std::string PathOwnedBy(const Ring& a, const std::string& owner_a, const Ring& b,
                        const std::string& owner_b) {
  for (int i = 0; i < 10000; ++i) {
    std::string p = "/d" + std::to_string(i);
    if (a.Owner(p) == owner_a && b.Owner(p) == owner_b) return p;
  }
  ADD_FAILURE() << "no path owned by " << owner_a << " and " << owner_b;
  return "/";
}

TEST(VdService, RealTimeModeWithBlockingHelpers) {
  RealTimeNodes r(3);
  for (int i = 0; i < 3; ++i) r.fs[i]->AddFile("/rt/file" + std::to_string(i));
  for (int i = 0; i < 3; ++i) {
    auto vd = GetVdSync(*r.svcs[i], "/rt");
    ASSERT_TRUE(vd) << vd.error().ToString();
    EXPECT_EQ((*vd)->entries.size(), 3u);
  }
  ASSERT_TRUE(UpdateVdSync(*r.svcs[0], "/rt", {VdChange::Kind::kAdd, "file1", DT_REG, "n0"}));
  auto vd = GetVdSync(*r.svcs[2], "/rt");
  ASSERT_TRUE(vd);
  ASSERT_NE((*vd)->Find("file1@n1"), nullptr);
  // Malformed bytes with the blocking helper, then the service still serves.
  auto res = m2m::CallSync(*r.transports[1]->GetEndpoint("n0"), kVdGet, m2m::Bytes(16), seconds(2));
  ASSERT_FALSE(res);
  EXPECT_EQ(res.error().code, EPROTO);
  EXPECT_TRUE(GetVdSync(*r.svcs[1], "/rt"));
}


// ---- Directory table and coherence ------------------------------------------

TEST(DirTable, HitSendsNothingAndMissSendsOneRequestToTheManager) {
  Federation f(4);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));  // builds VD(P) at n0 (dirmerge)
  f.net().ResetStats();
  const auto before = f.svc(2).stats();
  ASSERT_TRUE(f.Get(2, p));  // a miss at n2: one request, to n0
  EXPECT_EQ(f.net().Stats("n2").rpc_requests, 1u);
  EXPECT_EQ(f.Requests(kVdGet), 1u);
  EXPECT_EQ(f.net().TotalStats().rpc_requests, 1u);  // resident: no dirmerge
  EXPECT_EQ(f.svc(2).stats().gets_sent - before.gets_sent, 1u);
  EXPECT_EQ(f.svc(2).stats().dt.misses - before.dt.misses, 1u);

  f.net().ResetStats();
  for (int i = 0; i < 5; ++i) {
    auto vd = f.Get(2, p);  // hits
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("f3"), 1u);
  }
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);  // not one message
  EXPECT_EQ(f.svc(2).stats().dt.hits - before.dt.hits, 5u);
  EXPECT_EQ(f.svc(2).stats().gets_sent - before.gets_sent, 1u);
  EXPECT_EQ(f.svc(0).stats().sharer_records, 2u);  // n1 and n2
}

TEST(DirTable, ManagerKeepsNoTableEntryForItsOwnVds) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n1");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(1, p));
  EXPECT_EQ(f.svc(1).stats().dt.occupancy, 0u);
  EXPECT_EQ(f.svc(1).stats().gets_sent, 0u);
  EXPECT_EQ(f.svc(1).stats().sharer_records, 0u);
}

TEST(DirTable, ChangeIsAcknowledgedOnlyAfterEverySharerWasInvalidated) {
  Federation f(5);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i : {1, 2, 3}) ASSERT_TRUE(f.Get(i, p));
  // n4 creates "x" in P: the manager bumps n1..n3 before answering.
  std::optional<Status> done;
  std::vector<uint64_t> bumps_at_ack;
  f.fs(4).AddFile(p + "/x");
  f.svc(4).Update(p, Add("n4", "x"), [&](Status s) {
    done = std::move(s);
    for (int i : {1, 2, 3}) bumps_at_ack.push_back(f.svc(i).stats().dt.bumps_received);
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(done && *done);
  EXPECT_EQ(bumps_at_ack, (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, 3u);
  EXPECT_EQ(f.svc(0).stats().sharer_records, 0u);  // they re-register on refetch
  // Each sharer misses once, refetches and sees "x".
  for (int i : {1, 2, 3}) {
    f.net().ResetStats();
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("x"), 1u) << i;
    EXPECT_EQ(f.Requests(kVdGet), 1u) << i;
  }
}

// A kernel cache that counts what it is told (vd/kernel_cache.h).
class CountingKernel final : public KernelCache {
 public:
  bool Coherent() const override { return coherent; }
  void InvalidateNames() override { ++names; }
  uint64_t NamesEpoch() const override { return static_cast<uint64_t>(names); }
  bool InvalidateAttrs(uint64_t) override {
    ++attrs;
    return true;
  }
  bool coherent = true;
  int names = 0;
  int attrs = 0;
};

TEST(DirTable, KernelsCachingNamesAreNotifiedBeforeTheAcknowledgement) {
  Federation f(5);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  std::vector<CountingKernel> k(5);
  for (int i = 0; i < 5; ++i) f.svc(i).SetKernelCache(&k[i]);
  k[3].coherent = false;  // an old kernel: caches nothing, needs no notification
  for (int i : {1, 2, 3}) ASSERT_TRUE(f.Get(i, p));
  f.net().ResetStats();
  // n4 creates "x" in P: n1 and n2 are told (two-sided) before the answer;
  // n3 only has its DT word bumped; n0 (the manager) drops its own names;
  // n4's kernel saw its own create.
  std::optional<Status> done;
  std::vector<int> names_at_ack;
  f.fs(4).AddFile(p + "/x");
  f.svc(4).Update(p, Add("n4", "x"), [&](Status s) {
    done = std::move(s);
    for (int i = 0; i < 5; ++i) names_at_ack.push_back(k[i].names);
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(done && *done);
  EXPECT_EQ(names_at_ack, (std::vector<int>{1, 1, 1, 0, 0}));
  EXPECT_EQ(f.Requests(kDtInval), 2u);
  EXPECT_EQ(f.svc(0).stats().notifies_sent, 2u);
  // The call invalidates the table's copy too: the one-sided bump goes only
  // to n3, which gets no call.
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, 1u);
  EXPECT_EQ(f.svc(3).stats().dt.bumps_received, 1u);
  for (int i : {1, 2, 3}) {
    f.net().ResetStats();
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd) << i;
    EXPECT_EQ(NameSet(**vd).count("x"), 1u) << i;
    EXPECT_EQ(f.Requests(kVdGet), 1u) << i;  // the stale copy was not served
  }
  // A change the manager makes itself does not drop its own names.
  f.fs(0).AddFile(p + "/y");
  ASSERT_TRUE(f.Update(0, p, Add("n0", "y")));
  EXPECT_EQ(k[0].names, 1);
}

TEST(DirTable, CopiesFetchedWithoutNotifyAreNotServedToACachingKernel) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  CountingKernel k;
  k.coherent = false;
  f.svc(1).SetKernelCache(&k);
  ASSERT_TRUE(f.Get(1, p));  // cached without notify
  k.coherent = true;         // the INIT handshake came
  f.net().ResetStats();
  ASSERT_TRUE(f.Get(1, p));  // a miss: fetched again, now with notify
  EXPECT_EQ(f.Requests(kVdGet), 1u);
  f.net().ResetStats();
  ASSERT_TRUE(f.Get(1, p));  // a hit
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  f.fs(2).AddFile(p + "/z");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "z")));
  EXPECT_EQ(k.names, 1);
}

// kLock: one node at a time holds a name for an operation that changes it;
// the holder's reported change (or a release) ends it.
TEST(VdService, NameLocksAreExclusiveUntilTheReportedChange) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  auto lock = [&](int from, const std::string& name) {
    return f.Update(from, p, VdChange{VdChange::Kind::kLock, name, 0, "n" + std::to_string(from)});
  };
  auto code = [](const Status& s) { return s ? 0 : s.error().code; };
  ASSERT_TRUE(lock(1, "f1"));
  EXPECT_TRUE(lock(1, "f1"));            // the holder again (its kernel serializes its ops)
  EXPECT_EQ(code(lock(2, "f1")), EAGAIN);  // another node waits
  EXPECT_TRUE(lock(2, "f2"));            // another name is free
  // A create of a held name that is not (or no longer) listed waits too.
  ASSERT_TRUE(lock(1, "new"));
  EXPECT_EQ(code(f.Update(2, p, VdChange{VdChange::Kind::kClaim, "new", 0, "n2"})), EAGAIN);
  // n1 reports its unlink of f1: the lock ends with it.
  f.fs(1).Remove(p + "/f1");
  ASSERT_TRUE(f.Update(1, p, Remove("n1", "f1")));
  EXPECT_TRUE(lock(2, "f1"));
  // A release ends a lock whose operation changed nothing.
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kRelease, "new", 0, "n1"}));
  EXPECT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kClaim, "new", 0, "n2"}));
  // A lock goes alone in an update.
  std::optional<Status> two;
  f.svc(1).UpdateMany(p, {VdChange{VdChange::Kind::kLock, "a", 0, "n1"}, Add("n1", "b")},
                      [&](Status s) { two = std::move(s); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(code(*two), EINVAL);
}

TEST(VdService, ALockAndAClaimAreTakenTogetherOrNotAtAll) {
  // A rename within one directory locks its source and claims its new name
  // in one call to the manager (here another node than the caller's).
  Federation f(3);
  const std::string p = PathManagedBy(f, "n2");
  Populate(f, p);  // f0, f1, f2 (on nodes 0, 1, 2) and sub
  ASSERT_TRUE(f.Get(1, p));
  auto code = [](const Status& s) { return s ? 0 : s.error().code; };
  auto pair = [&](int from, const std::string& lock, const std::string& claim) {
    const std::string n = "n" + std::to_string(from);
    std::optional<Status> out;
    f.svc(from).UpdateMany(p, {VdChange{VdChange::Kind::kLock, lock, 0, n},
                               VdChange{VdChange::Kind::kClaim, claim, 0, n}},
                           [&](Status st) { out = std::move(st); });
    f.net().RunUntilIdle();
    EXPECT_TRUE(out.has_value());
    return out ? *out : Status(Err(EIO, "never completed"));
  };
  auto one = [&](int from, VdChange::Kind kind, const std::string& name) {
    return f.Update(from, p, VdChange{kind, name, 0, "n" + std::to_string(from)});
  };
  // The claimed name exists: EEXIST, and the lock was not kept.
  EXPECT_EQ(code(pair(1, "f1", "f0")), EEXIST);
  EXPECT_TRUE(one(0, VdChange::Kind::kLock, "f1"));
  // The source is held by another node: EAGAIN, and the claim was not kept.
  EXPECT_EQ(code(pair(1, "f1", "g")), EAGAIN);
  EXPECT_TRUE(one(0, VdChange::Kind::kClaim, "g"));
  ASSERT_TRUE(one(0, VdChange::Kind::kRelease, "g"));
  ASSERT_TRUE(one(0, VdChange::Kind::kRelease, "f1"));
  // The new name is claimed by another node: EAGAIN, the source stays free.
  ASSERT_TRUE(one(0, VdChange::Kind::kClaim, "h"));
  EXPECT_EQ(code(pair(1, "f1", "h")), EAGAIN);
  EXPECT_TRUE(one(0, VdChange::Kind::kLock, "f1"));
  ASSERT_TRUE(one(0, VdChange::Kind::kRelease, "f1"));
  ASSERT_TRUE(one(0, VdChange::Kind::kRelease, "h"));
  // Both granted, in one request: others wait on either name.
  f.net().ResetStats();
  ASSERT_TRUE(pair(1, "f1", "g"));
  EXPECT_EQ(f.Requests(kVdUpdate), 1u);
  EXPECT_EQ(code(one(0, VdChange::Kind::kLock, "f1")), EAGAIN);
  EXPECT_EQ(code(one(0, VdChange::Kind::kClaim, "g")), EAGAIN);
  // The rename's reported change ends both.
  f.fs(1).Remove(p + "/f1");
  f.fs(1).AddFile(p + "/g");
  std::optional<Status> rep;
  f.svc(1).UpdateMany(p, {Remove("n1", "f1"), Add("n1", "g")}, [&](Status st) { rep = std::move(st); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(rep.has_value() && *rep);
  EXPECT_TRUE(one(0, VdChange::Kind::kClaim, "f1"));
  EXPECT_TRUE(one(0, VdChange::Kind::kLock, "g"));
  // Only this pair goes together: a claim then a lock, or one name twice,
  // is refused.
  std::optional<Status> bad;
  f.svc(1).UpdateMany(p, {VdChange{VdChange::Kind::kClaim, "x", 0, "n1"},
                          VdChange{VdChange::Kind::kLock, "y", 0, "n1"}},
                      [&](Status st) { bad = std::move(st); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(code(*bad), EINVAL);
  EXPECT_EQ(code(pair(1, "x", "x")), EINVAL);
}

TEST(DirTable, TheChangingNodePatchesItsOwnCopy) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  f.fs(1).AddFile(p + "/mine");
  ASSERT_TRUE(f.Update(1, p, Add("n1", "mine")));
  f.net().ResetStats();
  auto vd = f.Get(1, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);  // still a hit
  const VdEntry* e = (*vd)->Find("mine");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->holders, std::vector<std::string>{"n1"});
  f.fs(1).Remove(p + "/mine");
  ASSERT_TRUE(f.Update(1, p, Remove("n1", "mine")));
  vd = f.Get(1, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("mine"), nullptr);
  EXPECT_EQ(f.svc(1).stats().dt.patches, 2u);
}

// Claims, locks and releases change no entry: the node's cached copy stays a
// hit (it was once dropped by each, a refetch of the whole VD per unlink).
TEST(DirTable, ClaimsLocksAndReleasesKeepTheCachedCopy) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kLock, "f1", 0, "n1"}));
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kRelease, "f1", 0, "n1"}));
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kClaim, "new", 0, "n1"}));
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kRelease, "new", 0, "n1"}));
  f.net().ResetStats();
  ASSERT_TRUE(f.Get(1, p));
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  EXPECT_EQ(f.svc(1).stats().dt.stale, 0u);
}

// Random sequences of changes (create, unlink, rename as remove + add, mkdir,
// rmdir) on one node, each followed by a lookup on another: every lookup sees
// exactly the changes acknowledged so far.
TEST(DirTable, EverySequenceOfChangesIsSeenByTheNextLookupElsewhere) {
  uint64_t hits = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    Federation f(4, {}, seed);
    std::mt19937_64 rng(seed);
    const std::string p = "/shared";
    for (int i = 0; i < 4; ++i) f.fs(i).AddDir(p);
    std::map<std::string, std::string> expect;  // name -> holder
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(f.Get(i, p));  // everyone caches VD(P)
    for (int step = 0; step < 40; ++step) {
      const int actor = static_cast<int>(rng() % 4);
      const std::string node = Name(actor);
      const std::string name = "e" + std::to_string(rng() % 6);
      const int op = static_cast<int>(rng() % 4);
      if (!expect.count(name) && op != 3) {  // create or mkdir
        const bool dir = op == 1;
        if (dir) f.fs(actor).AddDir(p + "/" + name); else f.fs(actor).AddFile(p + "/" + name);
        ASSERT_TRUE(f.Update(actor, p, Add(node, name, dir ? DT_DIR : DT_REG)));
        expect[name] = node;
      } else if (expect.count(name) && op == 3) {  // rename name -> name + "r" (same holder)
        const std::string holder = expect[name];
        const int h = f.Index(holder);
        const std::string to = name + "r";
        if (expect.count(to)) continue;
        f.fs(h).Remove(p + "/" + name);
        f.fs(h).AddFile(p + "/" + to);
        ASSERT_TRUE(f.Update(h, p, Add(holder, to)));
        ASSERT_TRUE(f.Update(h, p, Remove(holder, name)));
        expect.erase(name);
        expect[to] = holder;
      } else if (expect.count(name)) {  // unlink or rmdir, by its holder
        const int h = f.Index(expect[name]);
        f.fs(h).Remove(p + "/" + name);
        ASSERT_TRUE(f.Update(h, p, Remove(expect[name], name)));
        expect.erase(name);
      }
      const int reader = static_cast<int>((actor + 1 + rng() % 3) % 4);
      auto vd = f.Get(reader, p);
      ASSERT_TRUE(vd) << vd.error().ToString();
      std::set<std::string> want;
      for (const auto& [n, h] : expect) want.insert(n);
      ASSERT_EQ(NameSet(**vd), want) << "step " << step << " reader n" << reader;
    }
    for (int i = 0; i < 4; ++i) hits += f.svc(i).stats().dt.hits;
  }
  EXPECT_GT(hits, 20u);  // the table was used, not bypassed
}

TEST(DirTable, ASlowSharerDelaysTheAcknowledgement) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  ASSERT_NO_FATAL_FAILURE(ShareWithSlowN1(f, p, 2));
  const auto start = f.net().Now();
  std::optional<m2m::SimDuration> acked;
  f.fs(2).AddFile(p + "/y");
  f.svc(2).Update(p, Add("n2", "y"), [&](Status s) {
    EXPECT_TRUE(s);
    acked = f.net().Now() - start;
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(acked);
  EXPECT_GE(*acked, std::chrono::milliseconds(10));  // the bump's round trip to n1
  EXPECT_LT(*acked, std::chrono::milliseconds(100));
  EXPECT_EQ(f.svc(1).stats().dt.bumps_received, 1u);
}

// A lock lets its holder act on the VD it reads next, so it is granted only
// once the round of the change before it has invalidated every copy.
TEST(DirTable, ALockWaitsForTheRoundOfTheChangeBeforeIt) {
  Federation f(4);
  const std::string p = PathManagedBy(f, "n0");
  ASSERT_NO_FATAL_FAILURE(ShareWithSlowN1(f, p, 3));
  const auto start = f.net().Now();
  std::optional<m2m::SimDuration> removed, locked;
  f.svc(2).Update(p, Remove("n2", "f2"), [&](Status s) {
    EXPECT_TRUE(s);
    removed = f.net().Now() - start;
  });
  f.net().RunFor(std::chrono::milliseconds(1));  // applied; its round to n1 in flight
  ASSERT_FALSE(removed);
  f.svc(3).Update(p, VdChange{VdChange::Kind::kLock, "f2", 0, "n3"}, [&](Status s) {
    EXPECT_TRUE(s);
    locked = f.net().Now() - start;
    // What the new holder reads: the removal.
    f.svc(3).Get(p, [&](Result<VdPtr> vd) {
      ASSERT_TRUE(vd);
      EXPECT_EQ((*vd)->Find("f2"), nullptr);
    });
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(removed && locked);
  EXPECT_GE(*removed, std::chrono::milliseconds(10));  // the bump's round trip to n1
  EXPECT_GE(*locked, std::chrono::milliseconds(10));   // granted after that round, not during it
}

TEST(DirTable, ADeadSharerIsDroppedAfterTheDeadlineAndNeverBlocks) {
  VdServiceOptions o;
  o.rpc_timeout = std::chrono::milliseconds(200);
  Federation f(4, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(2, p));
  ASSERT_TRUE(f.net().Kill("n1"));  // silent, but still "alive" in every view
  const auto start = f.net().Now();
  std::optional<m2m::SimDuration> acked;
  f.fs(3).AddFile(p + "/z");
  f.svc(3).Update(p, Add("n3", "z"), [&](Status s) {
    EXPECT_TRUE(s) << s.error().ToString();
    acked = f.net().Now() - start;
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(acked);
  EXPECT_GE(*acked, o.rpc_timeout);
  EXPECT_LT(*acked, 2 * o.rpc_timeout);
  EXPECT_EQ(f.svc(0).stats().invalidations_failed, 1u);
  EXPECT_EQ(f.svc(2).stats().dt.bumps_received, 1u);  // the live sharer was bumped
  auto vd = f.Get(2, p);
  ASSERT_TRUE(vd);
  EXPECT_NE((*vd)->Find("z"), nullptr);
}

TEST(DirTable, OverflowingSharerListFallsBackToBroadcast) {
  VdServiceOptions o;
  o.max_sharers_per_vd = 2;
  Federation f(5, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i : {1, 2, 3}) ASSERT_TRUE(f.Get(i, p));  // the third overflows
  EXPECT_EQ(f.svc(0).stats().sharer_records, 1u);    // just the broadcast mark
  f.net().ResetStats();
  f.fs(4).AddFile(p + "/w");
  ASSERT_TRUE(f.Update(4, p, Add("n4", "w")));
  EXPECT_EQ(f.Requests(kDtInval), 3u);  // n1, n2, n3 (not n0 itself, not n4)
  for (int i : {1, 2, 3}) {
    EXPECT_EQ(f.svc(i).stats().dt_invals_received, 1u) << i;
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_NE((*vd)->Find("w"), nullptr) << i;
  }
}

TEST(DirTable, EntriesOfAnOlderEpochAreNotUsed) {
  Federation f(4);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  f.SetViews({"n0", "n1", "n2", "n3"}, 2);  // same members, new epoch
  f.net().ResetStats();
  ASSERT_TRUE(f.Get(1, p));
  EXPECT_EQ(f.Requests(kVdGet), 1u);
  EXPECT_EQ(f.svc(1).stats().dt.stale, 1u);
}

// A path under "/" that `node` manages both with all of `f`'s nodes alive and
// without `absent`.
std::string PathManagedWithAndWithout(Federation& f, const std::string& node,
                                      const std::string& absent) {
  std::vector<std::string> all, rest;
  for (int i = 0; i < f.size(); ++i) {
    all.push_back(Name(i));
    if (Name(i) != absent) rest.push_back(Name(i));
  }
  return PathOwnedBy(Ring(all, 64), node, Ring(rest, 64), node);
}

TEST(DirTable, ACopyBuiltInAnOlderViewIsNotKept) {
  // n1 just joined: n0 and n1 know it (epoch 2), the manager n2 does not yet
  // (epoch 1) and lists only n0 and itself.
  Federation f(3);
  const std::string p = PathManagedWithAndWithout(f, "n2", "n1");
  f.fs(0).AddDir(p);
  f.fs(1).AddFile(p + "/x");
  f.view(0).Set(f.MakeView("n0", {"n0", "n1", "n2"}, 2));
  f.view(1).Set(f.MakeView("n1", {"n0", "n1", "n2"}, 2));
  f.view(2).Set(f.MakeView("n2", {"n0", "n2"}, 1));
  auto old = f.Get(0, p);
  ASSERT_TRUE(old) << old.error().ToString();
  EXPECT_EQ((*old)->epoch, 1u);
  EXPECT_EQ((*old)->Find("x"), nullptr);
  // The manager catches up: the next get asks it again and sees n1's name.
  f.view(2).Set(f.MakeView("n2", {"n0", "n1", "n2"}, 2));
  f.net().ResetStats();
  auto now = f.Get(0, p);
  ASSERT_TRUE(now) << now.error().ToString();
  EXPECT_EQ(f.Requests(kVdGet), 1u);
  EXPECT_EQ((*now)->epoch, 2u);
  EXPECT_NE((*now)->Find("x"), nullptr);
}

TEST(VdService, GetVdSyncWaitsForAManagerWhoseViewIsBehind) {
  // As above, on the real-time network through the blocking helper a FUSE
  // worker uses: the manager learns of n1 while the get waits.
  RealTimeNodes r(3);
  const std::vector<std::string> all = {"n0", "n1", "n2"}, without = {"n0", "n2"};
  const std::string p = PathOwnedBy(Ring(all, 64), "n2", Ring(without, 64), "n2");
  ASSERT_NE(p, "/");
  r.views[0].Set(RealTimeNodes::View(0, all, 2));
  r.views[1].Set(RealTimeNodes::View(1, all, 2));
  r.views[2].Set(RealTimeNodes::View(2, without, 1));
  r.fs[0]->AddDir(p);
  r.fs[1]->AddFile(p + "/x");
  std::thread gossip = r.SetViewLater(2, RealTimeNodes::View(2, all, 2));
  auto vd = GetVdSync(*r.svcs[0], p);
  gossip.join();
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_EQ((*vd)->epoch, 2u);
  EXPECT_NE((*vd)->Find("x"), nullptr);
}

TEST(VdService, BlockingHelpersWaitForThisNodesViewToCatchUp) {
  // n2 just joined: n1 and n2 know it (epoch 2), n0 does not yet and takes n1
  // for the manager of P, which answers ESTALE. The blocking helpers ask
  // again until n0 learns of n2 (after 50 ms) instead of failing.
  RealTimeNodes r(3);
  const std::vector<std::string> old_live = {"n0", "n1"}, new_live = {"n0", "n1", "n2"};
  const std::string p = PathOwnedBy(Ring(new_live, 64), "n2", Ring(old_live, 64), "n1");
  ASSERT_NE(p, "/");
  for (int i = 0; i < 3; ++i) {
    r.views[i].Set(i == 0 ? RealTimeNodes::View(0, old_live, 1) : RealTimeNodes::View(i, new_live, 2));
  }
  r.fs[0]->AddDir(p);
  r.fs[2]->AddFile(p + "/x");
  std::thread gossip = r.SetViewLater(0, RealTimeNodes::View(0, new_live, 2));
  auto vd = GetVdSync(*r.svcs[0], p);
  gossip.join();
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_NE((*vd)->Find("x"), nullptr);
  // An update from the stale view is sent again too (ESTALE applied nothing).
  r.views[0].Set(RealTimeNodes::View(0, old_live, 1));
  gossip = r.SetViewLater(0, RealTimeNodes::View(0, new_live, 2));
  r.fs[0]->AddFile(p + "/y");
  Status st = UpdateVdSync(*r.svcs[0], p, {VdChange::Kind::kAdd, "y", DT_REG, "n0"});
  gossip.join();
  ASSERT_TRUE(st) << st.error().ToString();
  auto after = GetVdSync(*r.svcs[1], p);
  ASSERT_TRUE(after) << after.error().ToString();
  EXPECT_NE((*after)->Find("y"), nullptr);
}

TEST(DirTable, DropSubtreeInvalidatesTablesEverywhere) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0", true, "/t");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  std::optional<Status> dropped;
  f.svc(2).DropSubtree(p, [&](Status s) { dropped = std::move(s); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(dropped && *dropped);
  f.net().ResetStats();
  ASSERT_TRUE(f.Get(1, p));
  EXPECT_EQ(f.Requests(kVdGet), 1u);
}

TEST(DirTable, CapacityIsBoundedWithClockReplacement) {
  VdServiceOptions o;
  o.dt_entries = 4;
  Federation f(2, o);
  std::vector<std::string> paths;
  for (int i = 0; paths.size() < 6; ++i) {
    std::string p = "/c" + std::to_string(i);
    if (f.Manager(p) == "n0") paths.push_back(p);
  }
  for (const auto& p : paths) Populate(f, p);
  for (const auto& p : paths) ASSERT_TRUE(f.Get(1, p));
  const auto s = f.svc(1).stats().dt;
  EXPECT_EQ(s.capacity, 4u);
  EXPECT_LE(s.occupancy, 4u);
  EXPECT_GE(s.evictions, 2u);
  for (const auto& p : paths) ASSERT_TRUE(f.Get(1, p));  // still correct after eviction
}

TEST(DirTable, MalformedSharerSlotIsRefusedAndTheManagerKeepsServing) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  // A kNsVdGet whose sharer slot lies outside its region.
  flatbuffers::FlatBufferBuilder b;
  auto path = b.CreateString(p);
  auto from = b.CreateString("n1");
  std::vector<uint8_t> key(24, 1);
  auto sh = vdwire::CreateSharerSlot(b, 100, 4096, 64, b.CreateVector(key));
  b.FinishSizePrefixed(vdwire::CreateVdMessage(
      b, 1, vdwire::Body::PathRequest, vdwire::CreatePathRequest(b, path, from, 1, sh).Union()));
  auto ep = f.net().NewTransport({.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7})});
  std::optional<Result<m2m::Bytes>> reply;
  ep->GetEndpoint("n0")->Call(kVdGet, m2m::ToBytes({b.GetBufferPointer(), b.GetSize()}),
                              std::chrono::seconds(1),
                              [&](Result<m2m::Bytes> r) { reply = std::move(r); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(reply);
  ASSERT_FALSE(*reply);
  EXPECT_EQ(reply->error().code, EPROTO);
  EXPECT_EQ(f.svc(0).stats().sharer_records, 0u);
  EXPECT_TRUE(f.Get(1, p));
}

}  // namespace
}  // namespace fedfs::ns
