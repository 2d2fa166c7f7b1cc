// RemoteNodeFs + FileService over two transports (fake network in real-time
// mode, and UCX over TCP on loopback): every operation checked against the
// same system call on the server's export root, large and concurrent I/O
// content-checked, hostile requests sent raw, foreign handles, reconnects and
// a dead server.
#include "tests/unit/files/remote_fs_fixture.h"

namespace fedfs::ns {
namespace {

TEST_P(RemoteFsTest, MetadataOperationsMatchSystemCalls) {
  // Mkdir / Stat
  auto d = remote_->Mkdir(me_, "/d", 0750);
  ASSERT_TRUE(d) << d.error().ToString();
  ExpectSameStat(*d, Lstat(P("/d")));
  auto again = remote_->Mkdir(me_, "/d", 0750);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EEXIST);
  auto st = remote_->Stat(me_, "/d");
  ASSERT_TRUE(st);
  ExpectSameStat(*st, Lstat(P("/d")));
  auto missing = remote_->Stat(me_, "/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, LstatErrno(P("/nope")));

  // Create / Write / Read / SetAttr
  auto f = remote_->Create(me_, "/d/f", O_RDWR | O_EXCL, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  ExpectSameStat(f->st, Lstat(P("/d/f")));
  auto excl = remote_->Create(me_, "/d/f", O_RDWR | O_EXCL, 0644);
  ASSERT_FALSE(excl);
  EXPECT_EQ(excl.error().code, EEXIST);
  const std::string text = "hello, remote world";
  auto w = remote_->Write(f->handle, 0, std::as_bytes(std::span(text)));
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, text.size());
  std::string back(64, '\0');
  auto r = remote_->Read(f->handle, 0, std::as_writable_bytes(std::span(back)));
  ASSERT_TRUE(r);
  EXPECT_EQ(back.substr(0, *r), text);
  {
    int fd = ::open(P("/d/f").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char buf[64];
    ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
    ::close(fd);
    EXPECT_EQ(std::string(buf, n), text);
  }
  auto eof = remote_->Read(f->handle, 1000, std::as_writable_bytes(std::span(back)));
  ASSERT_TRUE(eof);
  EXPECT_EQ(*eof, 0u);

  SetAttrRequest sa;
  sa.size = 5;
  sa.mode = 0600;
  sa.mtime = timespec{1234567, 890};
  auto sr = remote_->SetAttr(me_, "/d/f", std::nullopt, sa);
  ASSERT_TRUE(sr) << sr.error().ToString();
  ExpectSameStat(*sr, Lstat(P("/d/f")));
  EXPECT_EQ(Lstat(P("/d/f")).st_size, 5);
  EXPECT_EQ(Lstat(P("/d/f")).st_mode & 07777, 0600u);
  EXPECT_EQ(Lstat(P("/d/f")).st_mtim.tv_sec, 1234567);
  SetAttrRequest grow;
  grow.size = 100;
  auto gr = remote_->SetAttr(me_, "/d/f", f->handle, grow);
  ASSERT_TRUE(gr) << gr.error().ToString();
  EXPECT_EQ(Lstat(P("/d/f")).st_size, 100);

  EXPECT_TRUE(remote_->Fsync(f->handle, false));
  EXPECT_TRUE(remote_->Fsync(f->handle, true));
  EXPECT_TRUE(remote_->Flush(f->handle, 1));
  ASSERT_TRUE(remote_->Fallocate(f->handle, 0, 0, 8192));
  EXPECT_EQ(Lstat(P("/d/f")).st_size, 8192);

  // Locks: owner 1 holds a write lock; owner 2 sees it and cannot take it.
  LockRange wl{F_WRLCK, 0, 10, 42};
  ASSERT_TRUE(remote_->SetLk(f->handle, 1, wl));
  auto gl = remote_->GetLk(f->handle, 2, wl);
  ASSERT_TRUE(gl);
  EXPECT_EQ(gl->type, F_WRLCK);
  auto conflict = remote_->SetLk(f->handle, 2, wl);
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code, EAGAIN);
  LockRange un{F_UNLCK, 0, 10, 42};
  ASSERT_TRUE(remote_->SetLk(f->handle, 1, un));
  auto gl2 = remote_->GetLk(f->handle, 2, wl);
  ASSERT_TRUE(gl2);
  EXPECT_EQ(gl2->type, F_UNLCK);
  ASSERT_TRUE(remote_->Flock(f->handle, 1, LOCK_EX | LOCK_NB));
  auto fl = remote_->Flock(f->handle, 2, LOCK_EX | LOCK_NB);
  ASSERT_FALSE(fl);
  EXPECT_EQ(fl.error().code, EWOULDBLOCK);
  ASSERT_TRUE(remote_->Flock(f->handle, 1, LOCK_UN));

  ASSERT_TRUE(remote_->Release(f->handle));
  auto gone = remote_->Read(f->handle, 0, std::as_writable_bytes(std::span(back)));
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, EBADF);
  auto rel2 = remote_->Release(f->handle);
  ASSERT_FALSE(rel2);
  EXPECT_EQ(rel2.error().code, EBADF);

  // Open existing / missing
  auto o = remote_->Open(me_, "/d/f", O_RDONLY);
  ASSERT_TRUE(o);
  ExpectSameStat(o->st, Lstat(P("/d/f")));
  ASSERT_TRUE(remote_->Release(o->handle));
  auto om = remote_->Open(me_, "/d/missing", O_RDONLY);
  ASSERT_FALSE(om);
  EXPECT_EQ(om.error().code, ENOENT);

  // Symlink / Readlink
  auto sl = remote_->Symlink(me_, "f", "/d/l");
  ASSERT_TRUE(sl);
  ExpectSameStat(*sl, Lstat(P("/d/l")));
  auto rl = remote_->Readlink(me_, "/d/l");
  ASSERT_TRUE(rl);
  char lbuf[64];
  ssize_t ln = ::readlink(P("/d/l").c_str(), lbuf, sizeof(lbuf));
  EXPECT_EQ(*rl, std::string(lbuf, ln));
  auto rlf = remote_->Readlink(me_, "/d/f");
  ASSERT_FALSE(rlf);
  EXPECT_EQ(rlf.error().code, EINVAL);

  // Link / Rename
  auto lk = remote_->Link(me_, "/d/f", "/d/g");
  ASSERT_TRUE(lk);
  EXPECT_EQ(lk->st_nlink, 2u);
  ExpectSameStat(*lk, Lstat(P("/d/g")));
  ASSERT_TRUE(remote_->Rename(me_, "/d/g", "/d/h", 0));
  EXPECT_EQ(LstatErrno(P("/d/g")), ENOENT);
  EXPECT_EQ(LstatErrno(P("/d/h")), 0);
  auto nr = remote_->Rename(me_, "/d/h", "/d/f", RENAME_NOREPLACE);
  ASSERT_FALSE(nr);
  EXPECT_EQ(nr.error().code, EEXIST);

  // Mknod (fifo)
  auto mk = remote_->Mknod(me_, "/d/fifo", S_IFIFO | 0640, 0);
  ASSERT_TRUE(mk) << mk.error().ToString();
  EXPECT_TRUE(S_ISFIFO(Lstat(P("/d/fifo")).st_mode));

  // ListDir vs readdir
  auto ls = remote_->ListDir(me_, "/d");
  ASSERT_TRUE(ls);
  std::set<std::pair<std::string, uint64_t>> got, want;
  for (auto& e : *ls) got.insert({e.name, e.ino});
  DIR* dir = ::opendir(P("/d").c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent* e = ::readdir(dir)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") want.insert({n, e->d_ino});
  }
  ::closedir(dir);
  EXPECT_EQ(got, want);
  auto lsf = remote_->ListDir(me_, "/d/f");
  ASSERT_FALSE(lsf);
  EXPECT_EQ(lsf.error().code, ENOTDIR);

  // Xattrs: compare with the l*xattr system calls.
  const std::string v = "value-1";
  auto sx = remote_->SetXattr(me_, "/d/f", "user.test", std::as_bytes(std::span(v)), 0);
  const int native = ::lsetxattr(P("/d/h").c_str(), "user.other", v.data(), v.size(), 0) == 0
                         ? 0
                         : errno;
  if (native == 0) {
    ASSERT_TRUE(sx) << sx.error().ToString();
    size_t needed = 0;
    auto gx0 = remote_->GetXattr(me_, "/d/f", "user.test", 0, &needed);
    ASSERT_TRUE(gx0);
    EXPECT_EQ(needed, v.size());
    auto gx = remote_->GetXattr(me_, "/d/f", "user.test", 64, &needed);
    ASSERT_TRUE(gx);
    EXPECT_EQ(*gx, v);
    char nbuf[64];
    ssize_t nn = ::lgetxattr(P("/d/f").c_str(), "user.test", nbuf, sizeof(nbuf));
    EXPECT_EQ(std::string(nbuf, nn), *gx);
    auto lx = remote_->ListXattr(me_, "/d/f", 4096, &needed);
    ASSERT_TRUE(lx);
    char lbuf2[4096];
    ssize_t lxn = ::llistxattr(P("/d/f").c_str(), lbuf2, sizeof(lbuf2));
    EXPECT_EQ(*lx, std::string(lbuf2, lxn));
    ASSERT_TRUE(remote_->RemoveXattr(me_, "/d/f", "user.test"));
    auto gx2 = remote_->GetXattr(me_, "/d/f", "user.test", 64, &needed);
    ASSERT_FALSE(gx2);
    EXPECT_EQ(gx2.error().code, ENODATA);
  } else {
    ASSERT_FALSE(sx);
    EXPECT_EQ(sx.error().code, native);
  }

  // StatFs
  auto sf = remote_->StatFs();
  ASSERT_TRUE(sf);
  struct statvfs nsf {};
  ASSERT_EQ(::statvfs(root_.c_str(), &nsf), 0);
  EXPECT_EQ(sf->f_blocks, nsf.f_blocks);
  EXPECT_EQ(sf->f_bsize, nsf.f_bsize);
  EXPECT_EQ(sf->f_namemax, nsf.f_namemax);

  // MkdirParents creates the missing ancestors with the templates.
  ASSERT_TRUE(remote_->MkdirParents("/p/q/r", {{0711, 0, 0}, {0700, 0, 0}}));
  EXPECT_EQ(Lstat(P("/p")).st_mode & 07777, 0711u);
  EXPECT_EQ(Lstat(P("/p/q")).st_mode & 07777, 0700u);
  EXPECT_EQ(LstatErrno(P("/p/q/r")), ENOENT);

  // Unlink / Rmdir
  auto rne = remote_->Rmdir(me_, "/d");
  ASSERT_FALSE(rne);
  EXPECT_EQ(rne.error().code, ENOTEMPTY);
  for (const char* n : {"/d/f", "/d/h", "/d/l", "/d/fifo"}) {
    ASSERT_TRUE(remote_->Unlink(me_, n)) << n;
    EXPECT_EQ(LstatErrno(P(n)), ENOENT);
  }
  auto un2 = remote_->Unlink(me_, "/d/f");
  ASSERT_FALSE(un2);
  EXPECT_EQ(un2.error().code, ENOENT);
  ASSERT_TRUE(remote_->Rmdir(me_, "/d"));
  EXPECT_EQ(LstatErrno(P("/d")), ENOENT);
}

TEST_P(RemoteFsTest, PermissionsAreTheCallers) {
  ASSERT_TRUE(remote_->Mkdir(me_, "/private", 0700));
  Cred user{1000, 1000, {1000}, 022};
  auto c = remote_->Create(user, "/private/x", O_RDWR, 0644);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EACCES);
  ASSERT_TRUE(remote_->Mkdir(me_, "/pub", 0777));
  auto c2 = remote_->Create(user, "/pub/x", O_RDWR, 0666);
  ASSERT_TRUE(c2) << c2.error().ToString();
  auto st = Lstat(P("/pub/x"));
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // the umask was applied
  ASSERT_TRUE(remote_->Release(c2->handle));
}

// The unaligned middle read of BigIoRoundTrip: {offset, length}.
std::pair<size_t, size_t> MiddleOf(size_t size) { return {size / 3 + 17, size / 2 + 5}; }

// The Read/Write data BigIoRoundTrip moves: the write, the whole read, the
// middle read.
uint64_t RoundTripBytes(size_t size) { return 2 * uint64_t{size} + MiddleOf(size).second; }

void BigIoRoundTrip(RemoteNodeFs& fs, const std::string& root, const std::string& name,
                    size_t size, uint64_t seed) {
  Cred me{};
  auto f = fs.Create(me, name, O_RDWR | O_TRUNC, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  auto data = RandomBytes(size, seed);
  auto w = fs.Write(f->handle, 0, data);
  ASSERT_TRUE(w) << w.error().ToString();
  ASSERT_EQ(*w, size);
  std::vector<std::byte> back(size + 4096);
  auto r = fs.Read(f->handle, 0, back);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(*r, size);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin()));
  // And what landed on disk, read natively.
  std::vector<std::byte> disk(size);
  int fd = ::open((root + name).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, disk.data() + got, size - got, got);
    ASSERT_GT(n, 0);
    got += n;
  }
  ::close(fd);
  EXPECT_TRUE(disk == data);
  // Unaligned read in the middle.
  const auto [off, len] = MiddleOf(size);
  std::vector<std::byte> mid(len);
  auto rm = fs.Read(f->handle, off, mid);
  ASSERT_TRUE(rm);
  ASSERT_EQ(*rm, len);
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), data.begin() + off));
  ASSERT_TRUE(fs.Release(f->handle));
}

TEST_P(RemoteFsTest, LargeReadsAndWritesThroughSlots) {
  // Every byte of reads and writes over inline_max (4 KiB) moves one-sided
  // between the pools, none in the RPCs.
  const auto s0 = service_->stats();
  BigIoRoundTrip(*remote_, root_, "/one", 1u << 20, 1);
  BigIoRoundTrip(*remote_, root_, "/eight", 8u << 20, 2);
  BigIoRoundTrip(*remote_, root_, "/odd", (3u << 20) + 12345, 3);
  const auto s1 = service_->stats();
  EXPECT_EQ(s1.one_sided_bytes - s0.one_sided_bytes,
            RoundTripBytes(1u << 20) + RoundTripBytes(8u << 20) +
                RoundTripBytes((3u << 20) + 12345));
  EXPECT_EQ(s1.inline_bytes - s0.inline_bytes, 0u);
  // A small file: its write and its middle read (505 bytes) are inline; the
  // whole read asks for size + 4 KiB, over inline_max, so through a slot.
  BigIoRoundTrip(*remote_, root_, "/small", 1000, 4);
  const auto s2 = service_->stats();
  EXPECT_EQ(s2.inline_bytes - s1.inline_bytes, 1000u + MiddleOf(1000).second);
  EXPECT_EQ(s2.one_sided_bytes - s1.one_sided_bytes, 1000u);
}

TEST_P(RemoteFsTest, LargeReadsAndWritesInline) {
  // No local address: no pool, all data inline.
  auto fs = std::make_unique<RemoteNodeFs>(
      "server", client_.transport->GetEndpoint(server_addr_), client_.transport.get(),
      RemoteNodeFsOptions{.rpc_timeout = 10s, .local_node = "client-inline"});
  const auto s0 = service_->stats();
  BigIoRoundTrip(*fs, root_, "/one", 1u << 20, 5);
  BigIoRoundTrip(*fs, root_, "/eight", 8u << 20, 6);
  const auto s1 = service_->stats();
  EXPECT_EQ(s1.inline_bytes - s0.inline_bytes, RoundTripBytes(1u << 20) + RoundTripBytes(8u << 20));
  EXPECT_EQ(s1.one_sided_bytes - s0.one_sided_bytes, 0u);
}

TEST_P(RemoteFsTest, ConcurrentIoFromFourThreads) {
  constexpr int kThreads = 4, kIters = 12;
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      Cred me{};
      const std::string name = "/c" + std::to_string(t);
      auto f = remote_->Create(me, name, O_RDWR, 0644);
      if (!f) {
        ++failures;
        return;
      }
      std::mt19937_64 rng(t);
      for (int i = 0; i < kIters; ++i) {
        const size_t size = 1 + rng() % (3u << 20);
        const uint64_t off = rng() % (1u << 20);
        auto data = RandomBytes(size, rng());
        auto w = remote_->Write(f->handle, off, data);
        if (!w || *w != size) {
          ++failures;
          continue;
        }
        std::vector<std::byte> back(size);
        auto r = remote_->Read(f->handle, off, back);
        if (!r || *r != size || back != data) ++failures;
      }
      if (!remote_->Release(f->handle)) ++failures;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(service_->stats().handles, 0u);
}

// Sends a raw kFsMeta request for `path` and returns the errno (0: success).
int RawStat(m2m::Endpoint& ep, std::string_view path, uint16_t method) {
  flatbuffers::FlatBufferBuilder b;
  auto p = b.CreateString(path.data(), path.size());
  fb::FsRequestBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_op(fb::Op::kStat);
  rb.add_path(p);
  b.Finish(rb.Finish());
  auto r = m2m::CallSync(ep, method, fswire::Finish(b), 5s);
  return r ? 0 : r.error().code;
}

TEST_P(RemoteFsTest, HostileRequestsAreRefusedAndLogged) {
  auto ep = client_.transport->GetEndpoint(server_addr_);
  const uint16_t meta = MethodId(RpcMethod::kFsMeta);
  const auto before = service_->stats().refused;
  size_t mark = FsLogSinkGet().Mark();
  EXPECT_EQ(RawStat(*ep, "/../x", meta), EINVAL);
  EXPECT_TRUE(FsLogSinkGet().Contains("refused", mark));
  EXPECT_EQ(RawStat(*ep, "/a/../../x", meta), EINVAL);
  EXPECT_EQ(RawStat(*ep, "a/b", meta), EINVAL);
  EXPECT_EQ(RawStat(*ep, std::string_view("/a\0b", 4), meta), EINVAL);
  EXPECT_EQ(RawStat(*ep, "/" + std::string(300, 'x'), meta), ENAMETOOLONG);
  EXPECT_EQ(RawStat(*ep, "//x", meta), EINVAL);
  // Garbage instead of a FlatBuffer, on every method.
  for (RpcMethod m : {RpcMethod::kFsHello, RpcMethod::kFsMeta, RpcMethod::kFsData}) {
    m2m::Bytes junk(97);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = std::byte(i * 37 + 11);
    auto r = m2m::CallSync(*ep, MethodId(m), junk, 5s);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EPROTO);
    auto e = m2m::CallSync(*ep, MethodId(m), m2m::Bytes{}, 5s);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().code, EPROTO);
  }
  // A well-formed request with a wrong version.
  {
    flatbuffers::FlatBufferBuilder b;
    auto p = b.CreateString("/");
    fb::FsRequestBuilder rb(b);
    rb.add_version(99);
    rb.add_op(fb::Op::kStat);
    rb.add_path(p);
    b.Finish(rb.Finish());
    auto r = m2m::CallSync(*ep, meta, fswire::Finish(b), 5s);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EPROTO);
  }
  // A valid path but no session: ENOTCONN, never served.
  EXPECT_EQ(RawStat(*ep, "/", meta), ENOTCONN);
  EXPECT_GE(service_->stats().refused, before + 13);
  EXPECT_TRUE(FsLogSinkGet().Contains(client_.addr.empty() ? "" : "refused", mark));

  // A symlink escaping the export root: refused by the LocalNodeFs.
  ASSERT_EQ(::symlink("/etc", P("/esc").c_str()), 0);
  auto local_esc = local_->Stat(me_, "/esc/passwd");
  EXPECT_FALSE(local_esc) << "LocalNodeFs follows an escaping symlink";
  auto esc = remote_->Stat(me_, "/esc/passwd");
  ASSERT_FALSE(esc);
  EXPECT_EQ(esc.error().code, EXDEV);
  auto esc2 = remote_->Open(me_, "/esc/passwd", O_RDONLY);
  ASSERT_FALSE(esc2);
  EXPECT_EQ(esc2.error().code, EXDEV);

  // The service keeps serving.
  auto st = remote_->Stat(me_, "/");
  ASSERT_TRUE(st) << st.error().ToString();
  ExpectSameStat(*st, Lstat(root_));
}

// N-chance forwarding's requests (fs.fbs, kCoopStore, kCoopMoved) that
// cannot be right are refused with a clear errno, and the service goes on:
// a store where no cache takes blocks, a block of no bytes or more than a
// block, a copy said to be kept by a node without a session.
TEST_P(RemoteFsTest, ForwardingRequestsThatCannotBeRightAreRefused) {
  std::vector<std::byte> bytes(4096, std::byte{7});
  NodeFs::CoopBlock b;
  b.block = 64 << 10;
  b.dev = 1;
  b.ino = 2;
  b.node = "n9";
  b.length = 4096;
  b.bytes = bytes;
  auto st = remote_->CoopStore(b);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ENOTSUP);  // this service has no cache
  b.bytes = {};
  EXPECT_EQ(remote_->CoopStore(b).error().code, EINVAL);
  EXPECT_EQ(remote_->CoopMoved(b).error().code, ENOENT);  // n9 has no session here
  b.length = 0;
  EXPECT_EQ(remote_->CoopMoved(b).error().code, EINVAL);
  b.length = (64 << 10) + 1;
  EXPECT_EQ(remote_->CoopMoved(b).error().code, EINVAL);
  b.length = 4096;
  b.node.clear();
  EXPECT_EQ(remote_->CoopMoved(b).error().code, EINVAL);
  b.node = std::string(300, 'n');
  EXPECT_EQ(remote_->CoopMoved(b).error().code, EINVAL);
  // This session has no cache: its evictions are not sent.
  EXPECT_EQ(remote_->CoopEvict(b).error().code, ENOTSUP);
  auto ok = remote_->Stat(me_, "/");
  ASSERT_TRUE(ok) << ok.error().ToString();
}

TEST_P(RemoteFsTest, HandlesOfAnotherSessionOrConnectionAreRefused) {
  auto f = remote_->Create(me_, "/mine", O_RDWR, 0644);
  ASSERT_TRUE(f);
  std::vector<std::byte> buf(16);
  // Another session on the same connection.
  auto same_conn = MakeRemote(client_);
  ASSERT_TRUE(same_conn->Stat(me_, "/"));
  auto r1 = same_conn->Read(f->handle, 0, buf);
  ASSERT_FALSE(r1);
  EXPECT_EQ(r1.error().code, EBADF);
  // Another connection (another client transport).
  client2_ = NewClient();
  auto other = MakeRemote(client2_);
  auto r2 = other->Read(f->handle, 0, buf);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code, EBADF);
  auto rel = other->Release(f->handle);
  ASSERT_FALSE(rel);
  EXPECT_EQ(rel.error().code, EBADF);
  // The owner still can.
  auto r3 = remote_->Read(f->handle, 0, buf);
  ASSERT_TRUE(r3);
  // A handle left open is released when its session says goodbye.
  auto g = other->Create(me_, "/theirs", O_RDWR, 0644);
  ASSERT_TRUE(g);
  EXPECT_EQ(service_->stats().handles, 2u);
  other.reset();
  EXPECT_EQ(service_->stats().handles, 1u);
  // DropPeer releases a dead node's handles.
  service_->DropPeer("client");
  EXPECT_EQ(service_->stats().handles, 0u);
  auto r4 = remote_->Read(f->handle, 0, buf);
  ASSERT_FALSE(r4);
  EXPECT_EQ(r4.error().code, EBADF);
}

TEST_P(RemoteFsTest, SessionSurvivesReconnect) {
  auto f = remote_->Create(me_, "/re", O_RDWR, 0644);
  ASSERT_TRUE(f);
  auto data = RandomBytes(2u << 20, 9);
  ASSERT_TRUE(remote_->Write(f->handle, 0, data));
  client_.transport->GetEndpoint(server_addr_)->Disconnect();
  std::vector<std::byte> back(data.size());
  auto r = remote_->Read(f->handle, 0, back);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(*r, data.size());
  EXPECT_TRUE(back == data);
  ASSERT_TRUE(remote_->Release(f->handle));
}

TEST_P(RemoteFsTest, DeadServerFailsWithinTheDeadline) {
  RemoteNodeFsOptions o;
  o.rpc_timeout = 500ms;
  auto fs = MakeRemote(client_, o);
  auto f = fs->Create(me_, "/dead", O_RDWR, 0644);
  ASSERT_TRUE(f);
  if (net_) {
    ASSERT_TRUE(net_->Kill(server_addr_));
  } else {
    server_->Shutdown();
  }
  const std::set<int> allowed{ETIMEDOUT, ECONNRESET, ECONNREFUSED, EHOSTDOWN};
  const auto t0 = std::chrono::steady_clock::now();
  auto st = fs->Stat(me_, "/");
  ASSERT_FALSE(st);
  EXPECT_TRUE(allowed.count(st.error().code)) << st.error().ToString();
  std::vector<std::byte> big(2u << 20);
  auto r = fs->Read(f->handle, 0, big);
  ASSERT_FALSE(r);
  EXPECT_TRUE(allowed.count(r.error().code)) << r.error().ToString();
  auto w = fs->Write(f->handle, 0, big);
  ASSERT_FALSE(w);
  EXPECT_TRUE(allowed.count(w.error().code)) << w.error().ToString();
  // Generous bound: three operations, each bounded by its 500 ms deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  if (net_) {
    ASSERT_TRUE(net_->Revive(server_addr_));
  }
  // Destroying fs waits out the quarantine of the slots the timeouts touched.
}

// While a session that takes callbacks has a file open, every change of the
// file's attributes made at the server by anyone else (another session, the
// server's own operations) is told to it before the change returns; its own
// changes are not; nothing is told once its handles are released.
TEST_P(RemoteFsTest, ChangesOfAnOpenFileAreToldToTheOtherSessions) {
  // A client whose transport takes callbacks.
  CallbackClient cc = NewCallbackClient();
  ASSERT_TRUE(cc.fs);
  Client& a = cc.client;
  auto& fs = cc.fs;
  auto count = [&] { return cc.told->count(); };

  // Made by another session (a create of this one would also watch it:
  // CreateWatchesTheNewFileAfterItsRelease).
  auto made = remote_->Create(me_, "/told", O_RDWR, 0644);
  ASSERT_TRUE(made) << made.error().ToString();
  ASSERT_TRUE(remote_->Release(made->handle));
  auto f = fs->Open(me_, "/told", O_RDWR);
  ASSERT_TRUE(f) << f.error().ToString();
  EXPECT_TRUE(f->attr_callbacks);
  auto f2 = fs->Open(me_, "/told", O_RDONLY);
  ASSERT_TRUE(f2);
  EXPECT_TRUE(f2->attr_callbacks);
  EXPECT_TRUE(service_->Interested());
  // Sessions without callbacks are told nothing, and say so at open.
  auto other = remote_->Open(me_, "/told", O_RDWR);
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->attr_callbacks);

  const std::vector<std::byte> data(100, std::byte{1});
  // Another session writes: told, both handles, before Write returns.
  ASSERT_TRUE(remote_->Write(other->handle, 0, data));
  ASSERT_EQ(count(), 1u);
  const auto first = cc.told->at(0);
  EXPECT_EQ(first.first, "server");
  EXPECT_EQ(std::set<Handle>(first.second.begin(), first.second.end()),
            (std::set<Handle>{f->handle, f2->handle}));
  // Each callback names the bytes the change may have altered.
  auto range = [&](size_t i) {
    const DataRange r = cc.told->range_at(i);
    return std::make_pair(r.offset, r.length);
  };
  EXPECT_EQ(range(0), std::make_pair(uint64_t{0}, uint64_t{100}));
  // Its own write: not told.
  ASSERT_TRUE(fs->Write(f->handle, 0, data));
  EXPECT_EQ(count(), 1u);
  // The server's own operations: a write through its LocalNodeFs, a chmod,
  // a truncate by path, an xattr, a new link and its removal.
  auto mine = local_->Open(me_, "/told", O_WRONLY);
  ASSERT_TRUE(mine);
  ASSERT_TRUE(local_->Write(mine->handle, 0, data));
  EXPECT_EQ(count(), 2u);
  EXPECT_EQ(range(1), std::make_pair(uint64_t{0}, uint64_t{100}));
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(remote_->SetAttr(me_, "/told", std::nullopt, chmod));
  EXPECT_EQ(count(), 3u);
  EXPECT_EQ(range(2).second, 0u);  // attributes only
  SetAttrRequest trunc;
  trunc.size = 10;
  ASSERT_TRUE(local_->SetAttr(me_, "/told", std::nullopt, trunc));
  EXPECT_EQ(count(), 4u);
  EXPECT_EQ(range(3), std::make_pair(uint64_t{10}, DataRange::kToEnd));
  const std::string v = "v";
  ASSERT_TRUE(remote_->SetXattr(me_, "/told", "user.t", std::as_bytes(std::span(v)), 0));
  EXPECT_EQ(count(), 5u);
  EXPECT_EQ(range(4).second, 0u);
  ASSERT_TRUE(remote_->Link(me_, "/told", "/told2"));
  EXPECT_EQ(count(), 6u);
  ASSERT_TRUE(remote_->Unlink(me_, "/told2"));
  EXPECT_EQ(count(), 7u);
  // Another file: nothing.
  auto g = remote_->Create(me_, "/untold", O_RDWR, 0644);
  ASSERT_TRUE(g);
  ASSERT_TRUE(remote_->Write(g->handle, 0, data));
  EXPECT_EQ(count(), 7u);
  // Released: no longer told, and no longer looked for.
  ASSERT_TRUE(fs->Release(f->handle));
  ASSERT_TRUE(fs->Release(f2->handle));
  EXPECT_FALSE(service_->Interested());
  ASSERT_TRUE(remote_->Write(other->handle, 0, data));
  EXPECT_EQ(count(), 7u);
  for (auto [h, who] : {std::pair{other->handle, remote_.get()}, {g->handle, remote_.get()}}) {
    ASSERT_TRUE(who->Release(h));
  }
  ASSERT_TRUE(local_->Release(mine->handle));

  // A session that goes away while it has the file open stops being told.
  auto h = fs->Open(me_, "/told", O_RDONLY);
  ASSERT_TRUE(h);
  EXPECT_TRUE(service_->Interested());
  fs.reset();
  EXPECT_FALSE(service_->Interested());
  local_->SetAttrObserver(nullptr);

  // Hostile callbacks: garbage is refused (EPROTO) and counted; an unknown
  // session is answered and dropped.
  auto ep = server_->GetEndpoint(a.addr);
  const uint16_t m = MethodId(RpcMethod::kFsAttrChanged);
  auto junk = m2m::CallSync(*ep, m, m2m::Bytes(7, std::byte{0x5a}), 5s);
  ASSERT_FALSE(junk);
  EXPECT_EQ(junk.error().code, EPROTO);
  EXPECT_EQ(cc.callbacks->refused(), 1u);
  flatbuffers::FlatBufferBuilder b(64);
  auto hv = b.CreateVector(std::vector<uint64_t>{1, 2});
  fb::FsAttrChangedBuilder ab(b);
  ab.add_version(fswire::kVersion);
  ab.add_session(12345);
  ab.add_handles(hv);
  b.Finish(ab.Finish());
  EXPECT_TRUE(m2m::CallSync(*ep, m, fswire::Finish(b), 5s));
  EXPECT_EQ(count(), 7u);
  // Pinned watches and handles (deferred opens) that do not pair up: refused.
  flatbuffers::FlatBufferBuilder pb(64);
  auto pw = pb.CreateVector(std::vector<uint64_t>{1, 2});
  auto ph = pb.CreateVector(std::vector<uint64_t>{3});
  fb::FsAttrChangedBuilder pab(pb);
  pab.add_version(fswire::kVersion);
  pab.add_session(12345);
  pab.add_pinned_watches(pw);
  pab.add_pinned_handles(ph);
  pb.Finish(pab.Finish());
  auto unpaired = m2m::CallSync(*ep, m, fswire::Finish(pb), 5s);
  ASSERT_FALSE(unpaired);
  EXPECT_EQ(unpaired.error().code, EPROTO);
  EXPECT_EQ(cc.callbacks->refused(), 2u);
  a.transport->Shutdown();
}

// A create by a session that takes callbacks also watches the new file: its
// changes are told after the handle is released too (the opener's kernel
// keeps the attributes the create answered), naming the watch.
TEST_P(RemoteFsTest, CreateWatchesTheNewFileAfterItsRelease) {
  CallbackClient cc = NewCallbackClient();
  ASSERT_TRUE(cc.fs);
  auto& fs = cc.fs;
  auto f = fs->Create(me_, "/new", O_RDWR, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  ASSERT_TRUE(f->attr_callbacks);
  ASSERT_TRUE(f->watch.has_value());
  EXPECT_NE(*f->watch, f->handle);
  ASSERT_TRUE(fs->Release(f->handle));
  EXPECT_TRUE(service_->Interested());
  auto other = remote_->Open(me_, "/new", O_RDWR);
  ASSERT_TRUE(other);
  const std::vector<std::byte> data(10, std::byte{1});
  ASSERT_TRUE(remote_->Write(other->handle, 0, data));
  ASSERT_EQ(cc.told->count(), 1u);
  EXPECT_EQ(cc.told->at(0).second, (std::vector<Handle>{*f->watch}));
  ASSERT_TRUE(remote_->Release(other->handle));
  // A session without callbacks gets no watch.
  auto g = remote_->Create(me_, "/new2", O_RDWR, 0644);
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->watch.has_value());
  ASSERT_TRUE(remote_->Release(g->handle));
  local_->SetAttrObserver(nullptr);
  cc.client.transport->Shutdown();
}

// A stat with a watch (StatWatched) of a regular file with one link: the
// file's node tells the session of every later change of the file's
// attributes (by another session, by its own operations), not of the
// session's own; one watch per file; past max_watches_per_session (3 here)
// the watch stat'ed longest ago ends, and the session is told so; the
// session's end drops its watches.
TEST_P(RemoteFsTest, WatchedStatsAreToldOfChangesAndOfTheirEnd) {
  CallbackClient cc = NewCallbackClient();
  ASSERT_TRUE(cc.fs);
  auto& fs = cc.fs;
  auto count = [&] { return cc.told->count(); };
  auto told = [&](size_t i) { return cc.told->at(i).second; };
  for (const char* f : {"/w1", "/w2", "/w3", "/w4", "/w5"}) {
    auto c = remote_->Create(me_, f, O_RDWR, 0644);
    ASSERT_TRUE(c) << c.error().ToString();
    ASSERT_TRUE(remote_->Release(c->handle));
  }
  ASSERT_TRUE(remote_->Mkdir(me_, "/wd", 0755));
  ASSERT_TRUE(remote_->Link(me_, "/w4", "/w4b"));

  auto w1 = fs->StatWatched(me_, "/w1");
  ASSERT_TRUE(w1) << w1.error().ToString();
  ASSERT_TRUE(w1->watch);
  ExpectSameStat(w1->st, Lstat(P("/w1")));
  auto again = fs->StatWatched(me_, "/w1");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->watch, w1->watch);  // one watch per file
  EXPECT_EQ(service_->stats().watches, 1u);
  EXPECT_TRUE(service_->Interested());
  // Not watched: a directory, a file with two links; a session that takes
  // no callbacks; a missing file is an error.
  auto d = fs->StatWatched(me_, "/wd");
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->watch);
  auto linked = fs->StatWatched(me_, "/w4");
  ASSERT_TRUE(linked);
  EXPECT_FALSE(linked->watch);
  auto plain = remote_->StatWatched(me_, "/w1");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->watch);
  auto missing = fs->StatWatched(me_, "/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_EQ(service_->stats().watches, 1u);

  // Another session's chmod, the server's own truncate: told, naming the
  // watch, before they return. The session's own chmod: not told.
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(remote_->SetAttr(me_, "/w1", std::nullopt, chmod));
  ASSERT_EQ(count(), 1u);
  EXPECT_EQ(told(0), std::vector<Handle>{*w1->watch});
  SetAttrRequest trunc;
  trunc.size = 3;
  ASSERT_TRUE(local_->SetAttr(me_, "/w1", std::nullopt, trunc));
  EXPECT_EQ(count(), 2u);
  ASSERT_TRUE(fs->SetAttr(me_, "/w1", std::nullopt, chmod));
  EXPECT_EQ(count(), 2u);
  // Changes of a file not watched: nothing.
  ASSERT_TRUE(remote_->SetAttr(me_, "/w2", std::nullopt, chmod));
  EXPECT_EQ(count(), 2u);

  // Bounded: /w2 and /w3 make three; /w5 ends the oldest (/w1), told.
  auto w2 = fs->StatWatched(me_, "/w2");
  auto w3 = fs->StatWatched(me_, "/w3");
  ASSERT_TRUE(w2 && w2->watch && w3 && w3->watch);
  EXPECT_EQ(service_->stats().watches, 3u);
  EXPECT_EQ(count(), 2u);
  auto w5 = fs->StatWatched(me_, "/w5");
  ASSERT_TRUE(w5 && w5->watch);
  ASSERT_EQ(count(), 3u);
  EXPECT_EQ(told(2), std::vector<Handle>{*w1->watch});
  EXPECT_EQ(service_->stats().watches, 3u);
  ASSERT_TRUE(remote_->SetAttr(me_, "/w1", std::nullopt, chmod));  // no longer watched
  EXPECT_EQ(count(), 3u);
  ASSERT_TRUE(remote_->SetAttr(me_, "/w3", std::nullopt, chmod));  // still watched
  ASSERT_EQ(count(), 4u);
  EXPECT_EQ(told(3), std::vector<Handle>{*w3->watch});

  // The session's end drops its watches.
  fs.reset();
  EXPECT_EQ(service_->stats().watches, 0u);
  EXPECT_FALSE(service_->Interested());
  local_->SetAttrObserver(nullptr);
  cc.client.transport->Shutdown();
}

// An opener that does not answer a callback is told nothing more: a writer
// waits for it once, and its later opens are not told.
TEST_P(RemoteFsTest, AnOpenerThatDoesNotAnswerIsToldNoMore) {
  CallbackClient cc = NewCallbackClient();
  ASSERT_TRUE(cc.fs);
  Client& a = cc.client;
  auto& fs = cc.fs;
  auto f = fs->Create(me_, "/gone", O_RDWR, 0644);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->attr_callbacks);
  auto w = remote_->Open(me_, "/gone", O_WRONLY);
  ASSERT_TRUE(w);
  // The opener's node stops answering (its handles stay open at the server).
  a.transport->Shutdown();
  const std::vector<std::byte> data(10, std::byte{2});
  ASSERT_TRUE(remote_->Write(w->handle, 0, data));
  auto s1 = service_->stats();
  EXPECT_EQ(s1.callbacks_sent, 1u);
  EXPECT_EQ(s1.callbacks_failed, 1u);
  EXPECT_FALSE(service_->Interested());
  ASSERT_TRUE(remote_->Write(w->handle, 0, data));
  EXPECT_EQ(service_->stats().callbacks_sent, 1u);
  ASSERT_TRUE(remote_->Release(w->handle));
  local_->SetAttrObserver(nullptr);
  service_->DropPeer("client");
}

INSTANTIATE_TEST_SUITE_P(Nets, RemoteFsTest, ::testing::Values(Net::kFake, Net::kUcx), NetName);

}  // namespace
}  // namespace fedfs::ns
