// fedfsctl migrate PATH... --to NODE: moves files and whole subtrees, one
// file at a time, through one daemon's control socket (docs/migration.md,
// "By hand").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fedfs::tools {

struct MigrateJob {
  std::string socket;              // the daemon asked (it walks and moves)
  std::vector<std::string> paths;  // files and directories, global paths
  std::string to;
  bool dry_run = false;
  uint64_t max_rate = 0;  // bytes per second per move (0: none)
  bool json = false;
};

// Expands the directories among `paths` into the regular files below them
// (the "list" command; files already on `to` and what is not a regular file
// are skipped, counted), checks each move (migrate_plan: its size, or why
// not), then unless dry_run moves them one at a time ("migrate"). Prints a
// line per file ("moved P from A to B (N bytes)", or with json one JSON
// object per line: path, from, to, bytes, error, done, files), a progress
// bar on stderr when it is a terminal, and a summary when more than one
// file was named or found. SIGINT cancels the move in progress (the
// daemon's "cancel": undone unless it had committed) and stops.
// Returns the exit code: 0 every file moved (or would be), 1 some failed
// or the job was interrupted, 2 nothing to do was found for a path given.
int RunMigrateJob(const MigrateJob& job);

}  // namespace fedfs::tools
