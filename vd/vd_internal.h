// Internal to fedfs_ns_vd (vd.cc, vd_service.cc): the merge state behind a
// virtual directory, from which VD entries and conflicts are derived.
//
// DirMerge (vd/vd.h) is Collect + AllEntries. The VD service keeps the
// MergeState of every resident VD next to the VD itself, because the visible
// entries alone cannot be updated correctly: an alias hidden by a collision
// with a real name is not in the entries but must reappear when that real name
// goes away. Plain data and pure functions; any thread; not for other modules.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"
#include "vd/vd.h"

namespace fedfs::ns::vd_internal {

// Every copy of every name in the directory, across nodes.
struct MergeState {
  std::vector<std::string> holders;  // nodes holding the directory, sorted
  // real name -> (node, DT_*) of each copy, sorted by node, never empty.
  // Hashed: a change looks names up; only a whole build (AllEntries,
  // ConflictsOf) needs them in order, and sorts.
  std::unordered_map<std::string, std::vector<std::pair<std::string, uint8_t>>> copies;
  // real name -> the id of the directory of that name (nodefs/dir_id.h), for
  // names with a directory copy whose id is known.
  std::unordered_map<std::string, uint64_t> dir_ids;
};

// The state of the union of `listings` (DirMerge's rules: ENOENT, ENOTDIR,
// other node errors ignored; a node listed twice counts once, first wins;
// entries whose name is not a valid component are skipped).
Result<MergeState> Collect(const std::vector<NodeListing>& listings);

// The visible entries derived from the copies of `name` (0 if it has none):
// the owner of the plain name first, then its aliases in node order; hidden
// aliases (collision with a real name, or longer than NAME_MAX) left out.
std::vector<VdEntry> EntriesForName(const MergeState& s, const std::string& name);

// Every visible entry, sorted by visible name.
std::vector<VdEntry> AllEntries(const MergeState& s);

// The conflicts: names with more than one non-directory copy or a mix of a
// directory and a non-directory, sorted by name.
std::vector<Conflict> ConflictsOf(const MergeState& s);

// `node` now holds `name` with `type` (replacing a copy of another type);
// `node` becomes a holder of the directory itself if it was not. A
// directory's `id` (0: unknown) is taken if it has none. Returns false if
// nothing changed.
bool ApplyAdd(MergeState& s, const std::string& node, const std::string& name, uint8_t type,
              uint64_t id = 0);
// `node` no longer holds `name`; the name goes when no copy is left, its
// directory id when no directory copy is. Returns false if nothing changed.
bool ApplyRemove(MergeState& s, const std::string& node, const std::string& name);

// Brings `entries` (sorted, derived from `s` before a change of `name`) up to
// date after that change: the entries of `name`, and those of the name whose
// alias `name` may collide with ("a" for "a@n2"), are recomputed; the rest
// stays. O(log entries) per entry replaced. `subdirs`, if given, follows the count of directories.
void RefreshEntries(const MergeState& s, const std::string& name, VdEntries* entries,
                    size_t* subdirs = nullptr);

// RefreshEntries in two halves, for a copy of the entries kept elsewhere (a
// directory table patching its VD after its own change): the real names whose
// entries a change of `name` recomputes, and their fresh entries (sorted).
std::vector<std::string> RefreshKeys(const std::string& name);
std::vector<VdEntry> FreshEntries(const MergeState& s, const std::string& name);
// Replaces the entries whose real name is in `keys` by `fresh` (sorted).
void PatchEntries(const std::vector<std::string>& keys, std::vector<VdEntry> fresh,
                  VdEntries* entries, size_t* subdirs = nullptr, int64_t* bytes = nullptr);

}  // namespace fedfs::ns::vd_internal
