// The read-remote workload of the simulator (SimOptions, "read-remote"):
// what cooperative caching (docs/coopcache.md) does for reads of files held
// on one node, measured with the production cache code (coopcache/, the
// facade's cached reads, the file service's copies) on the fake network's
// clock. Node 0 holds the working set; a client on every other node reads
// blocks of it through its node's facade, as a process with those files
// open would: each file is looked up and opened once per node at its first
// read and kept open (the kernel keeps an open file's inode; the cache
// keeps a file's blocks while its node tells this one of its changes), then
// each operation is one Read, whose bytes are checked against the file's
// pattern: each 8-byte word names its file, its place and the version of
// the block it was written in (0: setup). With SimOptions::write_percent,
// that share of the operations writes a whole block instead (a new
// version, one write per block at a time); a read must then find in every
// word a version at least that of the block's last write acknowledged
// before the read began, and at most the newest begun before it ended:
// the cache's coherence (docs/coopcache.md) checked at scale.
//
// Threads: the simulation's (Perform and CloseAll from fibers). Internal to
// fedfs_bench_sim.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/sim/federation.h"
#include "bench/sim/sim.h"
#include "bench/sim/zipf.h"

namespace fedfs::bench {

class RemoteReads {
 public:
  struct Op {
    uint64_t file = 0;
    uint64_t offset = 0;
    bool write = false;
  };

  // `o` and `f` outlive this object.
  RemoteReads(const SimOptions& o, Federation& f);

  // Writes the files into node 0's export root (as a local program would).
  void Setup();
  // The next operation: a block of the working set by Zipf over a seeded
  // permutation of all its blocks; a write with write_percent odds unless
  // one of that block is under way.
  Op Next(std::mt19937_64& rng);
  // One read or write from `node`'s client (in a fiber); false on an error
  // or bytes that are not the file's (counted in bad_reads).
  bool Perform(int node, const Op& op);
  // Releases every handle the clients opened (in a fiber).
  void CloseAll();

  uint64_t bad_reads() const { return bad_reads_; }
  static std::string Path(uint64_t file);

 private:
  // The word at byte `offset` (a multiple of 8) of file `file` in version
  // `version` of its block: file + 1 (16 bits), word index (24), version (24).
  static uint64_t Word(uint64_t file, uint64_t offset, uint64_t version) {
    return ((file + 1) << 48) | ((offset / 8) << 24) | version;
  }
  uint64_t Block(const Op& op) const { return op.file * blocks_per_file_ + op.offset / o_.read_bytes; }
  // The block's words in `version`.
  void Fill(const Op& op, uint64_t version, std::vector<uint64_t>* words) const;

  const SimOptions& o_;
  Federation& f_;
  uint64_t blocks_per_file_ = 0;
  std::vector<uint32_t> rank_;  // popularity rank -> global block
  std::unique_ptr<Zipf> zipf_;
  std::map<std::pair<int, uint64_t>, uint64_t> open_;  // (node, file) -> handle
  uint64_t bad_reads_ = 0;
  // Per block: the newest version whose write began, the last acknowledged,
  // whether a write is under way.
  std::vector<uint32_t> issued_, acked_;
  std::vector<bool> writing_;
};

}  // namespace fedfs::bench
