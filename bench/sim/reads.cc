// The read-remote workload (bench/sim/reads.h).
#include "bench/sim/reads.h"

#include <fcntl.h>

#include <algorithm>
#include <numeric>

#include "bench/sim/path_client.h"

namespace fedfs::bench {

namespace {

const ns::Cred kRoot{0, 0, {}, 022};

}  // namespace

RemoteReads::RemoteReads(const SimOptions& o, Federation& f) : o_(o), f_(f) {}

std::string RemoteReads::Path(uint64_t file) { return "/data/f" + std::to_string(file); }

void RemoteReads::Setup() {
  blocks_per_file_ = o_.file_bytes / o_.read_bytes;
  std::vector<uint64_t> words(o_.file_bytes / 8);
  for (uint64_t k = 0; k < o_.read_files; ++k) {
    for (uint64_t w = 0; w < words.size(); ++w) words[w] = Word(k, w * 8, 0);
    f_.SetupFile(0, Path(k), std::as_bytes(std::span<const uint64_t>(words)));
  }
  const uint64_t blocks = o_.read_files * blocks_per_file_;
  issued_.assign(blocks, 0);
  acked_.assign(blocks, 0);
  writing_.assign(blocks, false);
  rank_.resize(blocks);
  std::iota(rank_.begin(), rank_.end(), 0u);
  std::mt19937_64 perm(o_.seed * 0x2545f4914f6cdd1dULL + 11);
  std::shuffle(rank_.begin(), rank_.end(), perm);
  zipf_ = std::make_unique<Zipf>(blocks, o_.zipf_s);
}

RemoteReads::Op RemoteReads::Next(std::mt19937_64& rng) {
  const uint64_t block = rank_[(*zipf_)(rng)];
  const bool write = o_.write_percent > 0 && rng() % 100 < o_.write_percent && !writing_[block];
  if (write) writing_[block] = true;  // claimed until its Perform ends
  return Op{block / blocks_per_file_, (block % blocks_per_file_) * o_.read_bytes, write};
}

void RemoteReads::Fill(const Op& op, uint64_t version, std::vector<uint64_t>* words) const {
  words->resize(o_.read_bytes / 8);
  for (uint64_t w = 0; w < words->size(); ++w) (*words)[w] = Word(op.file, op.offset + w * 8, version);
}

bool RemoteReads::Perform(int node, const Op& op) {
  // One write of a block at a time, claimed by Next (before the client's
  // wait): two writes in flight could land at the file's node in either
  // order, and the check below takes the last acknowledged version for the
  // block's (a claim taken here, after opening the file, let two through:
  // 2 wrong reads in about one run of seven of
  // SimCache.EveryReadSeesTheWritesAcknowledgedBeforeIt).
  const uint64_t b = Block(op);
  struct Claim {
    std::vector<bool>* writing;
    uint64_t b;
    ~Claim() {
      if (writing != nullptr) (*writing)[b] = false;
    }
  } claim{op.write ? &writing_ : nullptr, b};
  ns::Vfs& vfs = f_.node(node).node->vfs();
  const auto key = std::make_pair(node, op.file);
  auto it = open_.find(key);
  if (it == open_.end()) {
    PathClient pc(&vfs, kRoot);
    std::vector<uint64_t> held;  // kept: the file stays known while open
    auto ino = pc.Walk(Path(op.file), &held);
    if (!ino) return false;
    auto fo = vfs.Open(kRoot, *ino, o_.write_percent > 0 ? O_RDWR : O_RDONLY);
    if (!fo) return false;
    it = open_.find(key);  // another fiber of this node may have opened it meanwhile
    if (it != open_.end()) {
      // An extra handle of a file open already: nothing rides on its release.
      vfs.Release(fo->fh).IgnoreError();
    } else {
      it = open_.emplace(key, fo->fh).first;
    }
  }
  std::vector<uint64_t> buf;
  if (op.write) {
    const uint64_t version = ++issued_[b];
    Fill(op, version, &buf);
    auto n = vfs.Write(it->second, op.offset, std::as_bytes(std::span<const uint64_t>(buf)),
                       ns::Writer{false, kRoot});
    if (!n || *n != o_.read_bytes) return false;
    acked_[b] = static_cast<uint32_t>(version);
    return true;
  }
  const uint64_t lo = acked_[b];
  buf.resize(o_.read_bytes / 8);
  auto n = vfs.Read(it->second, op.offset, std::as_writable_bytes(std::span<uint64_t>(buf)));
  if (!n) return false;
  const uint64_t hi = issued_[b];
  bool right = *n == o_.read_bytes;
  for (uint64_t w = 0; right && w < buf.size(); ++w) {
    const uint64_t version = buf[w] & 0xffffff;
    right = buf[w] - version == Word(op.file, op.offset + w * 8, 0) && version >= lo && version <= hi;
  }
  if (!right) ++bad_reads_;
  return right;
}

void RemoteReads::CloseAll() {
  // At the end of the run: a release that fails changes no figure.
  for (const auto& [key, fh] : open_) f_.node(key.first).node->vfs().Release(fh).IgnoreError();
  open_.clear();
}

}  // namespace fedfs::bench
