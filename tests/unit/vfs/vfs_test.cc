// VfsImpl over two real LocalNodeFs (two temporary export roots standing for
// nodes "a" (this node) and "b"), a fake VD client that builds VDs by dirmerge
// of both listings on every call, and a fixed cluster view. Checks the inode
// table (stable node ids, lookup counts, forget), path rebuilding after
// renames, placement with missing parents, EXDEV links, the location xattr and
// readdir of the union.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "nodefs/local_node_fs.h"
#include "common/path.h"
#include "vd/vd.h"
#include "vfs/vfs_impl.h"

namespace fedfs::ns {
namespace {

namespace fs = std::filesystem;

class FixedCluster final : public ClusterViewSource {
 public:
  FixedCluster() {
    auto v = std::make_shared<ClusterView>();
    v->self = "a";
    v->epoch = 1;
    v->live = {{"a", "addr-a"}, {"b", "addr-b"}};
    v->ring = std::make_shared<const Ring>(std::vector<std::string>{"a", "b"}, 16);
    view_ = v;
  }
  std::shared_ptr<const ClusterView> Current() const override { return view_; }

 private:
  std::shared_ptr<const ClusterView> view_;
};

// VDs rebuilt by dirmerge on every Get: always current, no manager.
class MergeVds final : public VdClient {
 public:
  explicit MergeVds(std::vector<NodeFs*> nodes) : nodes_(std::move(nodes)) {}
  Result<VdPtr> Get(const std::string& path) override {
    ++gets;
    std::vector<NodeListing> listings;
    for (NodeFs* n : nodes_) listings.push_back({n->node_id(), n->ListDir(Cred{}, path)});
    auto vd = DirMerge(path, 1, 1, listings);
    if (!vd) return Err(vd.error());
    vd->cacheable = complete;
    if (on_get) on_get();
    return std::make_shared<const VirtualDirectory>(std::move(*vd));
  }
  Status Add(const std::string&, const std::string&, uint8_t, const std::string&,
             uint64_t) override {
    ++adds;
    return Ok();
  }
  Status Remove(const std::string&, const std::string&, const std::string&) override {
    ++removes;
    return Ok();
  }
  Status Lock(const std::string&, const std::string&) override {
    ++locks;
    return Ok();
  }
  // As a manager answers kLockRead: the name read and held in one call.
  Result<NameRead> LockRead(const std::string& path, const std::string& name) override {
    ++lock_reads;
    auto vd = Get(path);
    if (!vd) return Err(vd.error());
    const VdEntry* e = (*vd)->Find(name);
    const bool held = e != nullptr && e->RealName() == name;
    return NameRead{PartialOf(*vd, name), held};
  }
  // As a manager answers kAddNew when `add_new`: claimed and added in one
  // call, ended by Created.
  Result<uint64_t> AddNew(const std::string& path, const std::string& name, uint8_t type,
                          const std::string& node) override {
    if (!add_new) return VdClient::AddNew(path, name, type, node);
    added_new.push_back(name + "@" + node + ":" + std::to_string(type));
    return uint64_t{41} + added_new.size();
  }
  void Created(const std::string&, const std::string& name, uint64_t token) override {
    created.push_back(name + "#" + std::to_string(token));
  }
  int gets = 0, adds = 0, removes = 0, locks = 0, lock_reads = 0;
  bool add_new = false;
  std::vector<std::string> added_new, created;
  bool complete = true;              // false: as if a live node's listing were missing
  std::function<void()> on_get;      // runs inside every Get

 private:
  std::vector<NodeFs*> nodes_;
};

// A kernel that takes InvalidateNames (FUSE_NOTIFY_INC_EPOCH).
class CoherentKernel final : public KernelCache {
 public:
  bool Coherent() const override { return true; }
  void InvalidateNames() override { ++epoch; }
  uint64_t NamesEpoch() const override { return epoch; }
  bool InvalidateAttrs(uint64_t) override { return true; }
  uint64_t epoch = 0;
};

class VfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fedfs-vfs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/a");
    fs::create_directories(dir_ + "/b");
    auto a = LocalNodeFs::Open("a", dir_ + "/a");
    auto b = LocalNodeFs::Open("b", dir_ + "/b");
    ASSERT_TRUE(a && b);
    a_ = std::move(*a);
    b_ = std::shared_ptr<NodeFs>(std::move(*b));
    vds_ = std::make_unique<MergeVds>(std::vector<NodeFs*>{a_.get(), b_.get()});
  }
  void TearDown() override {
    vfs_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void MakeVfs(std::string place_on = "") {
    VfsDeps deps;
    deps.cluster = &cluster_;
    deps.local = a_.get();
    deps.vds = vds_.get();
    deps.make_remote = [this](const std::string& node, const std::string&) {
      return node == "b" ? b_ : nullptr;
    };
    if (!place_on.empty()) {
      deps.place = [place_on](const ClusterView&, const std::string&, bool) { return place_on; };
    }
    VfsOptions o;
    o.node_tag = 7;
    vfs_ = std::make_unique<VfsImpl>(o, std::move(deps));
  }
  void Put(const std::string& node, const std::string& rel, const std::string& text) {
    const fs::path p = dir_ + "/" + node + rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  uint64_t Look(uint64_t parent, const std::string& name) {
    auto e = vfs_->Lookup(cred_, parent, name);
    EXPECT_TRUE(e) << name << ": " << (e ? "" : e.error().ToString());
    return e ? e->ino : 0;
  }

  std::string dir_;
  FixedCluster cluster_;
  std::unique_ptr<NodeFs> a_;
  std::shared_ptr<NodeFs> b_;
  std::unique_ptr<MergeVds> vds_;
  std::unique_ptr<VfsImpl> vfs_;
  Cred cred_;
};

TEST_F(VfsTest, LookupIsStableAndForgetDropsEntries) {
  Put("a", "/d/x", "ax");
  Put("b", "/d/y", "by");
  MakeVfs();
  const size_t base = vfs_->InodeCount();
  const uint64_t d = Look(kRootIno, "d");
  const uint64_t x = Look(d, "x");
  const uint64_t y = Look(d, "y");
  EXPECT_EQ(Look(d, "x"), x);  // same node id, lookup count 2
  EXPECT_NE(x, y);
  EXPECT_EQ(vfs_->InodeCount(), base + 3);
  EXPECT_EQ(*vfs_->PathOf(y), "/d/y");
  // st_ino: this node's tag for a's file; another tag for b's; directories 0xffff.
  auto ax = vfs_->GetAttr(cred_, x, std::nullopt);
  auto by = vfs_->GetAttr(cred_, y, std::nullopt);
  auto dd = vfs_->GetAttr(cred_, d, std::nullopt);
  ASSERT_TRUE(ax && by && dd);
  EXPECT_EQ(ax->st_ino >> 48, 7u);
  EXPECT_NE(by->st_ino >> 48, 7u);
  EXPECT_EQ(dd->st_ino >> 48, 0xffffu);
  EXPECT_EQ(dd->st_nlink, 2u);
  EXPECT_EQ(ax->st_size, 2);
  // Lookup of a missing name: ENOENT, nothing added.
  auto missing = vfs_->Lookup(cred_, d, "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
  // The directory survives its own forget while a child is known.
  vfs_->Forget(d, 1);
  EXPECT_TRUE(vfs_->PathOf(x));
  vfs_->Forget(x, 1);
  EXPECT_TRUE(vfs_->PathOf(x));  // one lookup left
  vfs_->Forget(x, 1);
  vfs_->Forget(y, 1);
  EXPECT_FALSE(vfs_->PathOf(x));
  EXPECT_EQ(vfs_->InodeCount(), base);  // d went with its last child
}

TEST_F(VfsTest, RenameMovesOneEntryAndDescendantsFollow) {
  Put("a", "/src/sub/f", "data");
  MakeVfs();
  const uint64_t src = Look(kRootIno, "src");
  const uint64_t sub = Look(src, "sub");
  const uint64_t f = Look(sub, "f");
  ASSERT_TRUE(vfs_->Rename(cred_, kRootIno, "src", kRootIno, "dst", 0));
  EXPECT_EQ(*vfs_->PathOf(f), "/dst/sub/f");
  EXPECT_EQ(*vfs_->PathOf(src), "/dst");
  EXPECT_TRUE(fs::exists(dir_ + "/a/dst/sub/f"));
  // The renamed inode answers under its new name with the same node id.
  EXPECT_EQ(Look(kRootIno, "dst"), src);
  // A file renamed into a directory its node lacks: the node creates it.
  Put("b", "/other/g", "bg");
  const uint64_t other = Look(kRootIno, "other");
  const uint64_t g = Look(other, "g");
  const uint64_t dst = Look(kRootIno, "dst");
  ASSERT_TRUE(vfs_->Rename(cred_, other, "g", dst, "g2", 0));
  EXPECT_TRUE(fs::exists(dir_ + "/b/dst/g2"));
  EXPECT_EQ(*vfs_->PathOf(g), "/dst/g2");
  // RENAME_NOREPLACE onto an existing name.
  auto r = vfs_->Rename(cred_, dst, "g2", dst, "sub", RENAME_NOREPLACE);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EEXIST);
  // Onto itself: the name exists, so RENAME_NOREPLACE answers EEXIST as
  // rename(2) does (the kernel passes this on when its two lookups of the
  // name disagree because another node changed it in between).
  r = vfs_->Rename(cred_, dst, "g2", dst, "g2", RENAME_NOREPLACE);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EEXIST);
  EXPECT_TRUE(vfs_->Rename(cred_, dst, "g2", dst, "g2", 0));
  EXPECT_TRUE(fs::exists(dir_ + "/b/dst/g2"));
}

// Another file took the name of a file the kernel holds (a rename over it
// from elsewhere): a getattr of the old inode answers what it was, with no
// links, as a local file system does when a stat's lookup and its getattr
// straddle a rename over the file; not ENOENT (the name exists throughout)
// and not ESTALE (the kernel retries a stat only once).
TEST_F(VfsTest, GetattrOfAFileReplacedBehindOurBackAnswersItUnlinked) {
  Put("a", "/d/f", "ax");
  Put("a", "/d/g", "axe");
  MakeVfs();
  const uint64_t d = Look(kRootIno, "d");
  const uint64_t f = Look(d, "f");
  const uint64_t g = Look(d, "g");
  auto replace = [&](const std::string& name, const std::string& text) {
    fs::remove(dir_ + "/a/d/" + name);
    Put("b", "/d/" + name, text);
  };
  // Seen first by a lookup, which gives the name a new inode.
  replace("f", "bbbb");
  const uint64_t f2 = Look(d, "f");
  EXPECT_NE(f2, f);
  auto old = vfs_->GetAttr(cred_, f, std::nullopt);
  ASSERT_TRUE(old) << old.error().ToString();
  EXPECT_TRUE(S_ISREG(old->st_mode));
  EXPECT_EQ(old->st_size, 2);
  EXPECT_EQ(old->st_nlink, 0u);
  auto now = vfs_->GetAttr(cred_, f2, std::nullopt);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->st_size, 4);
  // Seen first by the getattr: the same answer, and the name goes to a new inode.
  replace("g", "bbbbb");
  old = vfs_->GetAttr(cred_, g, std::nullopt);
  ASSERT_TRUE(old) << old.error().ToString();
  EXPECT_EQ(old->st_size, 3);
  EXPECT_EQ(old->st_nlink, 0u);
  const uint64_t g2 = Look(d, "g");
  EXPECT_NE(g2, g);
  now = vfs_->GetAttr(cred_, g2, std::nullopt);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->st_size, 5);
  // Removed, not replaced: ENOENT.
  fs::remove(dir_ + "/b/d/g");
  auto gone = vfs_->GetAttr(cred_, g2, std::nullopt);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ENOENT);
}

TEST_F(VfsTest, CreatePlacesOnTheChosenNodeWithParents) {
  fs::create_directories(dir_ + "/a/p/q");
  ::chmod((dir_ + "/a/p").c_str(), 0750);
  MakeVfs("b");
  const uint64_t p = Look(kRootIno, "p");
  const uint64_t q = Look(p, "q");
  auto made = vfs_->Create(cred_, q, "new", 0640, O_WRONLY);
  ASSERT_TRUE(made) << made.error().ToString();
  const std::string msg = "hello";
  auto n = vfs_->Write(made->second.fh, 0, std::as_bytes(std::span(msg.data(), msg.size())), {});
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, msg.size());
  ASSERT_TRUE(vfs_->Release(made->second.fh));
  EXPECT_TRUE(fs::exists(dir_ + "/b/p/q/new"));
  EXPECT_FALSE(fs::exists(dir_ + "/a/p/q/new"));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/b/p").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);  // the template came from a's /p
  auto where = vfs_->Where("/p/q/new");
  ASSERT_TRUE(where);
  EXPECT_EQ(*where, std::vector<std::string>{"b"});
  size_t needed = 0;
  auto loc = vfs_->GetXattr(cred_, made->first.ino, VfsImpl::kLocationXattr, 64, &needed);
  ASSERT_TRUE(loc);
  EXPECT_EQ(*loc, "b");
  EXPECT_GE(vds_->adds, 1);
  // A second create of the same name with O_EXCL: EEXIST.
  auto again = vfs_->Create(cred_, q, "new", 0640, O_WRONLY | O_EXCL);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EEXIST);
}

// A create whose manager adds the entry with the claim (kAddNew) reports
// nothing after the file is made but the end of the claim (Created); a
// mkdir still claims, then adds.
TEST_F(VfsTest, ACreateAddsItsEntryWithTheClaimAndThenEndsTheClaim) {
  vds_->add_new = true;
  MakeVfs("b");
  auto made = vfs_->Create(cred_, kRootIno, "new", 0640, O_WRONLY);
  ASSERT_TRUE(made) << made.error().ToString();
  ASSERT_TRUE(vfs_->Release(made->second.fh));
  EXPECT_TRUE(fs::exists(dir_ + "/b/new"));
  EXPECT_EQ(vds_->added_new, std::vector<std::string>{"new@b:" + std::to_string(DT_REG)});
  EXPECT_EQ(vds_->created, std::vector<std::string>{"new#42"});  // with its claim's token
  EXPECT_EQ(vds_->adds, 0);
  EXPECT_EQ(vds_->removes, 0);
  auto dir = vfs_->Mkdir(cred_, kRootIno, "d", 0750);
  ASSERT_TRUE(dir) << dir.error().ToString();
  EXPECT_EQ(vds_->added_new.size(), 1u);
  EXPECT_EQ(vds_->adds, 1);
  // A symlink and a FIFO: added with their claims too.
  ASSERT_TRUE(vfs_->Symlink(cred_, "new", kRootIno, "ln"));
  ASSERT_TRUE(vfs_->Mknod(cred_, kRootIno, "fifo", S_IFIFO | 0600, 0));
  EXPECT_EQ(vds_->added_new,
            (std::vector<std::string>{"new@b:" + std::to_string(DT_REG),
                                      "ln@b:" + std::to_string(DT_LNK),
                                      "fifo@b:" + std::to_string(DT_FIFO)}));
  EXPECT_EQ(vds_->created, (std::vector<std::string>{"new#42", "ln#43", "fifo#44"}));
  EXPECT_EQ(vds_->adds, 1);
  EXPECT_TRUE(fs::is_symlink(dir_ + "/b/ln"));
  // A hard link too, on its file's node; one that fails at the holder (its
  // file removed there behind FedFS' back) removes the entry it added.
  const uint64_t f = Look(kRootIno, "new");
  auto l = vfs_->Link(cred_, f, kRootIno, "hard");
  ASSERT_TRUE(l) << l.error().ToString();
  EXPECT_EQ(l->attr.st_nlink, 2u);
  EXPECT_EQ(vds_->added_new.back(), "hard@b:" + std::to_string(DT_REG));
  EXPECT_EQ(vds_->created.back(), "hard#45");
  EXPECT_EQ(vds_->adds, 1);
  Put("b", "/gone", "x");
  const uint64_t gone = Look(kRootIno, "gone");
  ASSERT_TRUE(fs::remove(dir_ + "/b/gone"));
  auto failed = vfs_->Link(cred_, gone, kRootIno, "hard2");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ENOENT);
  EXPECT_EQ(vds_->added_new.back(), "hard2@b:" + std::to_string(DT_REG));
  EXPECT_EQ(vds_->removes, 1);
  EXPECT_EQ(vds_->created.size(), 4u);
  EXPECT_FALSE(fs::exists(dir_ + "/b/hard2"));
}

// A placement that fails (a fixed node that is not alive) fails the create
// with its errno, and nothing is made on another node (docs/config.md).
TEST_F(VfsTest, AFailedPlacementFailsTheCreate) {
  VfsDeps deps;
  deps.cluster = &cluster_;
  deps.local = a_.get();
  deps.vds = vds_.get();
  deps.place = [](const ClusterView&, const std::string& path, bool) -> Result<std::string> {
    return Err(EHOSTDOWN, "placement node 'c' for " + path + " is not alive");
  };
  VfsOptions o;
  o.node_tag = 7;
  vfs_ = std::make_unique<VfsImpl>(o, std::move(deps));
  auto made = vfs_->Create(cred_, kRootIno, "pinned", 0640, O_WRONLY);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, EHOSTDOWN);
  auto dir = vfs_->Mkdir(cred_, kRootIno, "pinned-dir", 0750);
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().code, EHOSTDOWN);
  EXPECT_FALSE(fs::exists(dir_ + "/a/pinned"));
  EXPECT_FALSE(fs::exists(dir_ + "/a/pinned-dir"));
  EXPECT_EQ(vds_->adds, 0);
}

TEST_F(VfsTest, LinkAcrossNodesIsExdevAndReaddirShowsTheUnion) {
  Put("a", "/f", "a");
  Put("b", "/only-b/g", "b");
  Put("b", "/h", "bh");
  MakeVfs();
  const uint64_t f = Look(kRootIno, "f");
  const uint64_t onlyb = Look(kRootIno, "only-b");
  auto l = vfs_->Link(cred_, f, onlyb, "link");
  ASSERT_FALSE(l);
  EXPECT_EQ(l.error().code, EXDEV);
  auto same = vfs_->Link(cred_, f, kRootIno, "f2");
  ASSERT_TRUE(same) << same.error().ToString();
  EXPECT_EQ(same->attr.st_nlink, 2u);
  auto fa = vfs_->GetAttr(cred_, f, std::nullopt);
  ASSERT_TRUE(fa);
  EXPECT_EQ(fa->st_ino, same->attr.st_ino);

  auto dh = vfs_->OpenDir(cred_, kRootIno);
  ASSERT_TRUE(dh);
  auto entries = vfs_->ReadDir(*dh, 0, 100);
  ASSERT_TRUE(entries);
  std::set<std::string> names;
  for (const auto& e : *entries) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "f", "f2", "h", "only-b"}));
  // Paging by offsets gives the same entries.
  auto first = vfs_->ReadDir(*dh, 0, 2);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->size(), 2u);
  auto rest = vfs_->ReadDir(*dh, first->back().next_offset, 100);
  ASSERT_TRUE(rest);
  EXPECT_EQ(first->size() + rest->size(), entries->size());
  ASSERT_TRUE(vfs_->ReleaseDir(*dh));
  // Unlink on the other node's file; gone from the union.
  ASSERT_TRUE(vfs_->Unlink(cred_, kRootIno, "h"));
  EXPECT_FALSE(fs::exists(dir_ + "/b/h"));
  EXPECT_EQ(vfs_->Lookup(cred_, kRootIno, "h").error().code, ENOENT);
}

}  // namespace
}  // namespace fedfs::ns

namespace fedfs::ns {
namespace {

// A name no node has: with a kernel that takes names back, a negative entry
// the kernel may keep (ino 0, the names' timeout); without one, or when the
// kernel's names were dropped while the lookup was served, or when the VD
// lacks a live node's listing, plain ENOENT (nothing cached).
TEST_F(VfsTest, MissingNamesAreNegativeEntriesOnlyWhileTheKernelCanBeToldOtherwise) {
  Put("a", "/d/x", "ax");
  MakeVfs();
  const uint64_t d = Look(kRootIno, "d");
  auto plain = vfs_->Lookup(cred_, d, "nope");
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, ENOENT);

  CoherentKernel kernel;
  vfs_->SetKernelCache(&kernel);
  const size_t inodes = vfs_->InodeCount();
  auto neg = vfs_->Lookup(cred_, d, "nope");
  ASSERT_TRUE(neg) << neg.error().ToString();
  EXPECT_EQ(neg->ino, 0u);
  EXPECT_GT(neg->entry_timeout, 0);
  EXPECT_EQ(vfs_->InodeCount(), inodes);  // nothing remembered
  // A name that exists is still an entry.
  EXPECT_NE(Look(d, "x"), 0u);

  vds_->on_get = [&] { kernel.InvalidateNames(); };  // a change while serving
  auto raced = vfs_->Lookup(cred_, d, "nope");
  ASSERT_FALSE(raced);
  EXPECT_EQ(raced.error().code, ENOENT);
  vds_->on_get = nullptr;

  vds_->complete = false;  // a live node did not answer: its names are unknown
  auto partial = vfs_->Lookup(cred_, d, "nope");
  ASSERT_FALSE(partial);
  EXPECT_EQ(partial.error().code, ENOENT);
  vds_->complete = true;

  // The same in the root directory.
  auto nodir = vfs_->Lookup(cred_, kRootIno, "nodir");
  ASSERT_TRUE(nodir);
  EXPECT_EQ(nodir->ino, 0u);
  vfs_->SetKernelCache(nullptr);
}

// A lookup hands the kernel a file's attributes to cache; the kernel makes
// the inode only after it read that reply, so a change told in between
// finds no inode (KernelCache::InvalidateAttrs says false). The drop is
// tried again until the kernel has the inode, else the reply's attributes
// would stay cached after the change; once it had it, a drop is one call.
TEST_F(VfsTest, AnAttributeDropThatFindsNoInodeYetIsTriedAgain) {
  struct LateKernel final : KernelCache {
    bool Coherent() const override { return true; }
    void InvalidateNames() override {}
    uint64_t NamesEpoch() const override { return 0; }
    bool InvalidateAttrs(uint64_t) override {
      ++calls;
      return calls > missing;  // the first `missing` calls find no inode
    }
    int calls = 0;
    int missing = 0;
  } kernel;
  Put("a", "/d/x", "ax");
  MakeVfs();
  vfs_->SetKernelCache(&kernel);
  const uint64_t d = Look(kRootIno, "d");
  auto e = vfs_->Lookup(cred_, d, "x");
  ASSERT_TRUE(e) << e.error().ToString();
  ASSERT_GT(e->attr_timeout, 0);  // a file held here: cached by the kernel
  kernel.missing = 3;
  vfs_->InvalidateAttrsOf("/d/x");  // changed by a local program
  EXPECT_EQ(kernel.calls, 4);       // the pages' drop, two more, then found
  kernel.calls = 0;
  kernel.missing = 1;
  vfs_->InvalidateAttrsOf("/d/x");
  EXPECT_EQ(kernel.calls, 1);  // the kernel had it: not tried again
  vfs_->SetKernelCache(nullptr);
}

// A request that may hand the kernel names of a directory says so before it
// reads that directory (KernelCache::NamesFrom), so that a drop for one
// directory (InvalidateNamesOf) skips only directories none of whose names
// went to the kernel since the last drop: lookups (present and missing
// names), creates, mkdir and both directories of a rename.
TEST_F(VfsTest, ARequestMarksItsDirectoryForTheKernelBeforeReadingIt) {
  struct MarkingKernel final : KernelCache {
    bool Coherent() const override { return true; }
    void InvalidateNames() override { ++epoch; }
    uint64_t NamesEpoch() const override { return epoch; }
    bool InvalidateAttrs(uint64_t) override { return true; }
    void NamesFrom(const std::string& dir, const std::string& name) override {
      marks.insert(dir);
      names.insert(dir + "|" + name);
    }
    uint64_t epoch = 0;
    std::set<std::string> marks;
    std::set<std::string> names;  // "dir|name"
  } kernel;
  Put("a", "/d/x", "ax");
  Put("a", "/e/y", "ay");
  MakeVfs();
  vfs_->SetKernelCache(&kernel);
  const uint64_t d = Look(kRootIno, "d");
  const uint64_t e = Look(kRootIno, "e");
  EXPECT_EQ(kernel.marks, std::set<std::string>{"/"});
  // Every read of a VD comes after the mark of the request's directories.
  std::set<std::string> unmarked_reads;
  std::set<std::string> expect;
  vds_->on_get = [&] {
    for (const auto& m : expect) {
      if (!kernel.marks.contains(m)) unmarked_reads.insert(m);
    }
  };
  // Each names the names it may hand out ("dir|name"; a rename both names
  // in both directories).
  auto step = [&](std::set<std::string> dirs, std::set<std::string> names, auto&& op) {
    kernel.marks.clear();
    kernel.names.clear();
    expect = dirs;
    op();
    EXPECT_EQ(kernel.marks, dirs);
    EXPECT_EQ(kernel.names, names);
  };
  step({"/d"}, {"/d|x"}, [&] { EXPECT_NE(Look(d, "x"), 0u); });
  step({"/e"}, {"/e|nope"}, [&] {
    auto miss = vfs_->Lookup(cred_, e, "nope");  // a negative entry
    EXPECT_TRUE(miss && miss->ino == 0u);
  });
  step({"/d"}, {"/d|new"}, [&] { EXPECT_TRUE(vfs_->Create(cred_, d, "new", 0644, O_WRONLY)); });
  step({"/e"}, {"/e|sub"}, [&] { EXPECT_TRUE(vfs_->Mkdir(cred_, e, "sub", 0755)); });
  step({"/d", "/e"}, {"/d|x", "/d|z", "/e|x", "/e|z"},
       [&] { EXPECT_TRUE(vfs_->Rename(cred_, d, "x", e, "z", 0)); });
  EXPECT_TRUE(unmarked_reads.empty()) << *unmarked_reads.begin();
  vds_->on_get = nullptr;
  vfs_->SetKernelCache(nullptr);
}

// A directory renamed through this node takes the names the kernel caches
// beneath it to their new paths (the kernel moves the dentry with its
// children), where no manager would tell this node of their changes: its
// kernel's names are dropped once the rename is done. A missing name kept
// that way hid a file another node then created there (the chaos run). A
// file's rename moves no names: nothing is dropped.
TEST_F(VfsTest, ADirectoryRenamedHereDropsTheKernelsNamesAFileRenamedDoesNot) {
  Put("a", "/d/sub/x", "ax");
  Put("a", "/d/y", "ay");
  MakeVfs();
  CoherentKernel kernel;
  vfs_->SetKernelCache(&kernel);
  const uint64_t d = Look(kRootIno, "d");
  const uint64_t sub = Look(d, "sub");
  auto missing = vfs_->Lookup(cred_, sub, "f");  // the kernel may keep it missing
  ASSERT_TRUE(missing) << missing.error().ToString();
  ASSERT_EQ(missing->ino, 0u);
  const uint64_t before = kernel.epoch;
  ASSERT_TRUE(vfs_->Rename(cred_, d, "y", d, "z", 0));
  EXPECT_EQ(kernel.epoch, before);  // a file: no names beneath it
  ASSERT_TRUE(vfs_->Rename(cred_, d, "sub", d, "moved", 0));
  EXPECT_GT(kernel.epoch, before);  // the kernel's names beneath it are dropped
  // Looked up again, under the new path.
  Put("a", "/d/moved/f", "af");
  EXPECT_NE(Look(sub, "f"), 0u);
  EXPECT_NE(Look(sub, "x"), 0u);
  vfs_->SetKernelCache(nullptr);
}

// A directory is listed only when every node's directory of that path lets
// the caller read it (each node checks, as it sees the caller); a node whose
// directory is gone since the VD was built contributes no names.
TEST_F(VfsTest, ListingNeedsReadPermissionOnEveryMember) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  Put("a", "/mix/from-a", "a");
  Put("b", "/mix/from-b", "b");
  Put("a", "/gone/from-a", "a");
  Put("b", "/gone/from-b", "b");
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chown((dir_ + "/b/mix").c_str(), 1001, 1001), 0);
  ASSERT_EQ(::chmod((dir_ + "/b/mix").c_str(), 0700), 0);
  MakeVfs();
  const uint64_t mix = Look(kRootIno, "mix");
  const uint64_t gone = Look(kRootIno, "gone");
  auto names = [&](const Cred& c, uint64_t ino) -> Result<std::set<std::string>> {
    auto dh = vfs_->OpenDir(c, ino);
    if (!dh) return Err(dh.error());
    auto entries = vfs_->ReadDir(*dh, 0, 100);
    EXPECT_TRUE(vfs_->ReleaseDir(*dh));
    if (!entries) return Err(entries.error());
    std::set<std::string> out;
    for (const auto& e : *entries) out.insert(e.name);
    return out;
  };
  const Cred nobody{.uid = 65534, .gid = 65534}, user{.uid = 1001, .gid = 1001};
  auto denied = names(nobody, mix);
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code, EACCES);  // a's 0755 member lets nobody in, b's does not
  EXPECT_EQ(names(user, mix).value_or(std::set<std::string>{}),
            (std::set<std::string>{".", "..", "from-a", "from-b"}));
  vds_->on_get = [&] { fs::remove_all(dir_ + "/b/gone"); };
  EXPECT_EQ(names(nobody, gone).value_or(std::set<std::string>{}),
            (std::set<std::string>{".", "..", "from-a"}));
}

}  // namespace
}  // namespace fedfs::ns

namespace fedfs::ns {
namespace {

// An unlink reads its name under the name's lock in one call to the manager
// (VdClient::LockRead), then reports the removal: no lookup before the lock
// and none after it.
TEST_F(VfsTest, UnlinkReadsItsNameUnderTheLockInOneCall) {
  Put("b", "/d/x", "bx");
  Put("a", "/d/y", "ay");
  MakeVfs();
  const uint64_t d = Look(kRootIno, "d");
  vds_->gets = 0;
  ASSERT_TRUE(vfs_->Unlink(cred_, d, "x"));
  EXPECT_EQ(vds_->lock_reads, 1);
  EXPECT_EQ(vds_->gets, 1);  // the lock-read's own
  EXPECT_EQ(vds_->locks, 0);
  EXPECT_EQ(vds_->removes, 1);
  EXPECT_FALSE(fs::exists(dir_ + "/b/d/x"));
  // An absent name: ENOENT from that one call, nothing removed.
  auto gone = vfs_->Unlink(cred_, d, "x");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ENOENT);
  EXPECT_EQ(vds_->lock_reads, 2);
  EXPECT_EQ(vds_->removes, 1);
  EXPECT_TRUE(fs::exists(dir_ + "/a/d/y"));
}

}  // namespace
}  // namespace fedfs::ns
