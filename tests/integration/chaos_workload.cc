#include "tests/integration/chaos_workload.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>

namespace fedfs::testing {

namespace {

constexpr uint32_t kMagic = 0x53484346;  // "FCHS"
constexpr long kFuseMagic = 0x65735546;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The header of a sector: magic, file, block, sector, version; the rest is
// filled from a hash of them.
struct Header {
  uint32_t magic;
  uint32_t file;
  uint32_t block;
  uint32_t sector;
  uint64_t version;
};

}  // namespace

void ChaosCounters::Sample(std::string what) {
  std::lock_guard lock(mu_);
  if (samples_.size() < 8) samples_.push_back(std::move(what));
}

std::vector<std::string> ChaosCounters::Samples() {
  std::lock_guard lock(mu_);
  return samples_;
}

void Violations::Add(std::string what) {
  std::lock_guard lock(mu_);
  v_.push_back(std::move(what));
}

std::vector<std::string> Violations::Take() {
  std::lock_guard lock(mu_);
  return std::move(v_);
}

void MountTable::Set(size_t node, std::string path) {
  std::lock_guard lock(mu_);
  paths_.at(node) = std::move(path);
}

std::string MountTable::Get(size_t node) {
  std::lock_guard lock(mu_);
  return paths_.at(node);
}

MountRoot::~MountRoot() { Drop(); }

int MountRoot::Fd() {
  if (fd_ >= 0) return fd_;
  const std::string path = table_->Get(node_);
  if (path.empty()) return -1;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct statfs st {};
  if (::fstatfs(fd, &st) != 0 || st.f_type != kFuseMagic) {
    ::close(fd);
    return -1;
  }
  fd_ = fd;
  return fd_;
}

void MountRoot::Drop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void FillSector(uint32_t file, uint32_t b, uint32_t s, uint64_t version, char* out) {
  const Header h{kMagic, file, b, s, version};
  std::memcpy(out, &h, sizeof h);
  uint64_t x = Mix((static_cast<uint64_t>(file) << 40) ^ (static_cast<uint64_t>(b) << 24) ^
                   (static_cast<uint64_t>(s) << 16) ^ Mix(version));
  for (size_t i = sizeof h; i < kChaosSector; i += sizeof x) {
    x = Mix(x);
    std::memcpy(out + i, &x, std::min(sizeof x, kChaosSector - i));
  }
}

int64_t SectorVersion(uint32_t file, uint32_t b, uint32_t s, const char* in) {
  Header h{};
  std::memcpy(&h, in, sizeof h);
  if (h.magic != kMagic || h.file != file || h.block != b || h.sector != s) return -1;
  char want[kChaosSector];
  FillSector(file, b, s, h.version, want);
  if (std::memcmp(want, in, kChaosSector) != 0) return -1;
  return static_cast<int64_t>(h.version);
}

std::string CheckFileBytes(const ChaosFile& f, const std::string& bytes,
                           const std::vector<uint64_t>& low, const std::vector<uint64_t>& high) {
  if (bytes.size() != kChaosBlock * kChaosBlocks) {
    return f.path + ": " + std::to_string(bytes.size()) + " bytes, not " +
           std::to_string(kChaosBlock * kChaosBlocks);
  }
  for (uint32_t b = 0; b < kChaosBlocks; ++b) {
    for (uint32_t s = 0; s < kChaosBlock / kChaosSector; ++s) {
      const int64_t v = SectorVersion(f.index, b, s, bytes.data() + b * kChaosBlock + s * kChaosSector);
      if (v < 0 || static_cast<uint64_t>(v) < low[b] || static_cast<uint64_t>(v) > high[b]) {
        return f.path + ": block " + std::to_string(b) + " sector " + std::to_string(s) + " holds " +
               (v < 0 ? std::string("no version (torn or foreign bytes)") : "version " + std::to_string(v)) +
               ", expected one in [" + std::to_string(low[b]) + ", " + std::to_string(high[b]) +
               "] (acknowledged by fsync, last written)";
      }
    }
  }
  return "";
}

DataWorker::DataWorker(MountTable* mounts, std::vector<ChaosFile> files,
                       uint64_t seed, ChaosCounters* counters, Violations* violations)
    : files_(std::move(files)),
      open_(files_.size()),
      rng_(seed),
      counters_(counters),
      violations_(violations) {
  for (size_t i = 0; i < mounts->size(); ++i) roots_.push_back(std::make_unique<MountRoot>(mounts, i));
}

void DataWorker::Fail(size_t i, const char* call, int err) {
  counters_->data_errors++;
  counters_->Sample(std::string(call) + " " + files_[i].path + ": " + std::strerror(err));
  if (open_[i].fd >= 0) ::close(open_[i].fd);
  open_[i] = Open{};  // its unsynced writes stay attempted, never acknowledged
  if (err == ENOTCONN || err == ENOENT || err == EBADF) roots_[files_[i].writer]->Drop();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void DataWorker::WriteOne(size_t i) {
  ChaosFile& f = files_[i];
  Open& o = open_[i];
  if (o.fd < 0) {
    const int root = roots_[f.writer]->Fd();
    if (root < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
    o.fd = ::openat(root, f.path.c_str(), O_RDWR | O_CLOEXEC);
    if (o.fd < 0) return Fail(i, "open", errno);
  }
  const size_t b = std::uniform_int_distribution<size_t>(0, kChaosBlocks - 1)(rng_);
  const uint64_t v = ++f.attempted[b];
  char block[kChaosBlock];
  for (uint32_t s = 0; s < kChaosBlock / kChaosSector; ++s) {
    FillSector(f.index, static_cast<uint32_t>(b), s, v, block + s * kChaosSector);
  }
  const ssize_t n = ::pwrite(o.fd, block, kChaosBlock, static_cast<off_t>(b * kChaosBlock));
  if (n != static_cast<ssize_t>(kChaosBlock)) return Fail(i, "pwrite", n < 0 ? errno : EIO);
  counters_->writes++;
  o.unsynced.emplace_back(b, v);
  if (std::uniform_int_distribution<int>(0, 3)(rng_) == 0) {
    if (::fsync(o.fd) != 0) return Fail(i, "fsync", errno);
    counters_->fsyncs++;
    for (const auto& [blk, ver] : o.unsynced) f.acked[blk] = std::max(f.acked[blk], ver);
    o.unsynced.clear();
  }
}

void DataWorker::ReadOne(size_t i) {
  const ChaosFile& f = files_[i];
  const int root = roots_[f.reader]->Fd();
  if (root < 0) return;
  const std::vector<uint64_t> low = f.acked;  // acknowledged before the open
  const int fd = ::openat(root, f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    counters_->data_errors++;
    counters_->Sample("open to read " + f.path + ": " + std::strerror(e));
    if (e == ENOTCONN) roots_[f.reader]->Drop();
    return;
  }
  std::string bytes(kChaosBlock * kChaosBlocks + 1, '\0');
  size_t got = 0;
  int err = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0) {
      err = errno;
      break;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (err != 0) {
    counters_->data_errors++;
    counters_->Sample("pread " + f.path + ": " + std::strerror(err));
    if (err == ENOTCONN) roots_[f.reader]->Drop();
    return;
  }
  bytes.resize(got);
  // Written by this thread only: what it issued is the upper bound.
  const std::string wrong = CheckFileBytes(f, bytes, low, f.attempted);
  counters_->reads_checked++;
  if (!wrong.empty()) {
    violations_->Add("at " + std::to_string(ChaosMs()) + " ms, read through node " +
                     std::to_string(f.reader + 1) + ": " + wrong);
  }
}

void DataWorker::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    const size_t i = std::uniform_int_distribution<size_t>(0, files_.size() - 1)(rng_);
    if (std::uniform_int_distribution<int>(0, 3)(rng_) == 0) {
      ReadOne(i);
    } else {
      WriteOne(i);
    }
  }
  for (auto& o : open_) {
    if (o.fd >= 0) ::close(o.fd);
    o = Open{};
  }
}

NamespaceWorker::NamespaceWorker(int process, MountTable* mounts, std::string dir,
                                 uint64_t seed, ChaosCounters* counters)
    : process_(process), dir_(std::move(dir)), rng_(seed), counters_(counters) {
  for (size_t i = 0; i < mounts->size(); ++i) roots_.push_back(std::make_unique<MountRoot>(mounts, i));
}

int NamespaceWorker::RootFor(int node) { return roots_[static_cast<size_t>(node)]->Fd(); }

std::string NamespaceWorker::Dir(int k) const {
  return "p" + std::to_string(process_) + std::string(1, static_cast<char>('a' + k));
}
std::string NamespaceWorker::File(int k) const {
  return "p" + std::to_string(process_) + std::string(1, static_cast<char>('x' + k));
}

void NamespaceWorker::Record(NsOp op, HistoryClock::time_point t, int err, int node) {
  op.process = process_;
  op.err = err;
  counters_->ns_ops++;
  if (err != 0 && OutcomeUnknown(err)) counters_->ns_unknown++;
  rec_.End(std::move(op), t);
  via_.push_back(node);
  if (err == ENOTCONN || err == ECONNABORTED) roots_[static_cast<size_t>(node)]->Drop();
  // After an answer that says a node is gone or silent, give the chaos time
  // to pass: fewer operations of unknown outcome keep the check small.
  if (err != 0 && OutcomeUnknown(err)) std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

void NamespaceWorker::One() {
  const int own = process_;
  const int nodes = static_cast<int>(roots_.size());
  const int dice = std::uniform_int_distribution<int>(0, 99)(rng_);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); };
  // Creates of files in the worker's directories go through any node's
  // mount: the directory then has a copy there, and its renames and
  // rmdirs involve that node.
  const int node = dice < 30 ? pick(nodes) : own;
  const int root = RootFor(node);
  if (root < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return;
  }
  auto at = [&](const std::string& rel) { return dir_ + "/" + rel; };
  NsOp op;
  if (dice < 30) {
    op.kind = NsOpKind::kCreate;
    op.a = pick(4) == 0 ? File(pick(2)) : Dir(pick(3)) + "/" + std::string(1, static_cast<char>('f' + pick(2)));
    const auto t = HistoryRecorder::Begin();
    const int fd = ::openat(root, at(op.a).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    const int err = fd < 0 ? errno : 0;
    if (fd >= 0) ::close(fd);
    return Record(std::move(op), t, err, node);
  }
  if (dice < 45) {
    op.kind = NsOpKind::kUnlink;
    op.a = pick(3) == 0 ? File(pick(2)) : Dir(pick(3)) + "/" + std::string(1, static_cast<char>('f' + pick(2)));
    const auto t = HistoryRecorder::Begin();
    const int err = ::unlinkat(root, at(op.a).c_str(), 0) == 0 ? 0 : errno;
    return Record(std::move(op), t, err, node);
  }
  if (dice < 62) {
    op.kind = NsOpKind::kMkdir;
    op.a = Dir(pick(3));
    const auto t = HistoryRecorder::Begin();
    const int err = ::mkdirat(root, at(op.a).c_str(), 0755) == 0 ? 0 : errno;
    return Record(std::move(op), t, err, node);
  }
  if (dice < 75) {
    op.kind = NsOpKind::kRmdir;
    op.a = Dir(pick(3));
    const auto t = HistoryRecorder::Begin();
    const int err = ::unlinkat(root, at(op.a).c_str(), AT_REMOVEDIR) == 0 ? 0 : errno;
    return Record(std::move(op), t, err, node);
  }
  const bool noreplace = dice < 88;
  op.kind = noreplace ? NsOpKind::kRenameNoReplace : NsOpKind::kRename;
  if (pick(4) == 0) {
    op.a = File(pick(2));
    op.b = File(pick(2));
  } else {
    op.a = Dir(pick(3));
    op.b = Dir(pick(3));
  }
  const auto t = HistoryRecorder::Begin();
  const int err = ::renameat2(root, at(op.a).c_str(), root, at(op.b).c_str(),
                              noreplace ? RENAME_NOREPLACE : 0) == 0
                      ? 0
                      : errno;
  Record(std::move(op), t, err, node);
}

void NamespaceWorker::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) One();
}

void NamespaceWorker::Readdir(int node, const std::string& rel, const std::string& prefix) {
  NsOp op;
  op.process = process_;
  op.kind = NsOpKind::kReaddir;
  op.a = rel;
  const auto t = HistoryRecorder::Begin();
  const int root = RootFor(node);
  const std::string path = rel.empty() ? dir_ : dir_ + "/" + rel;
  const int fd = root < 0 ? -1 : ::openat(root, path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (d == nullptr) {
    op.err = root < 0 ? ENOTCONN : errno;
    if (fd >= 0) ::close(fd);
  } else {
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(d);
      if (e == nullptr) {
        op.err = errno;
        break;
      }
      const std::string n = e->d_name;
      if (n != "." && n != ".." && n.rfind(prefix, 0) == 0) op.names.insert(n);
    }
    ::closedir(d);
  }
  if (op.err != 0) op.names.clear();
  rec_.End(std::move(op), t);
  via_.push_back(node);
}

void NamespaceWorker::FinalListings(int node) {
  const std::string mine = "p" + std::to_string(process_);
  Readdir(node, "", mine);
  for (int k = 0; k < 3; ++k) Readdir(node, Dir(k), "");
}

}  // namespace fedfs::testing
