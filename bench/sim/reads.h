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
// pattern (each 8-byte word names its file and offset).
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
  };

  // `o` and `f` outlive this object.
  RemoteReads(const SimOptions& o, Federation& f);

  // Writes the files into node 0's export root (as a local program would).
  void Setup();
  // The next read: a block of the working set by Zipf over a seeded
  // permutation of all its blocks.
  Op Next(std::mt19937_64& rng);
  // One read from `node`'s client (in a fiber); false on an error or bytes
  // that are not the file's (counted in bad_reads).
  bool Perform(int node, const Op& op);
  // Releases every handle the clients opened (in a fiber).
  void CloseAll();

  uint64_t bad_reads() const { return bad_reads_; }
  static std::string Path(uint64_t file);

 private:
  // The word at byte `offset` (a multiple of 8) of file `file`.
  static uint64_t Word(uint64_t file, uint64_t offset) { return ((file + 1) << 40) | (offset / 8); }

  const SimOptions& o_;
  Federation& f_;
  uint64_t blocks_per_file_ = 0;
  std::vector<uint32_t> rank_;  // popularity rank -> global block
  std::unique_ptr<Zipf> zipf_;
  std::map<std::pair<int, uint64_t>, uint64_t> open_;  // (node, file) -> handle
  uint64_t bad_reads_ = 0;
};

}  // namespace fedfs::bench
