#include "coopcache/holder_directory.h"

#include <algorithm>
#include <iterator>

namespace fedfs::coop {

uint64_t HolderDirectory::VersionLocked(const FileId& f) const {
  auto it = files_.find(f);
  return it == files_.end() ? floor_ : it->second.version;
}

uint64_t HolderDirectory::Version(const FileId& f) const {
  std::lock_guard lock(mu_);
  return VersionLocked(f);
}

void HolderDirectory::EraseLocked(std::map<FileId, FileRec>::iterator it) {
  for (const auto& [index, copies] : it->second.blocks) copies_ -= copies.size();
  blocks_ -= it->second.blocks.size();
  files_.erase(it);
}

bool HolderDirectory::Record(const FileId& f, uint64_t version, uint64_t session,
                             uint64_t block_size, uint64_t first, std::span<const Frame> frames,
                             std::span<const uint32_t> lengths, bool replace) {
  std::lock_guard lock(mu_);
  if (version != VersionLocked(f) || block_size == 0) {
    ++stats_.refused;
    return false;
  }
  auto [it, added] = files_.try_emplace(f, FileRec{version, block_size, {}});
  FileRec& rec = it->second;
  if (rec.block_size != block_size) {
    // Readers with another block size: the newest size wins.
    for (const auto& [index, copies] : rec.blocks) copies_ -= copies.size();
    blocks_ -= rec.blocks.size();
    rec.blocks.clear();
    rec.block_size = block_size;
  }
  const size_t n = std::min(frames.size(), lengths.size());
  for (size_t i = 0; i < n; ++i) {
    if (lengths[i] == 0) break;
    auto b = rec.blocks.find(first + i);
    if (b == rec.blocks.end()) {
      if (blocks_ >= max_blocks_) break;
      b = rec.blocks.emplace(first + i, std::vector<Copy>{}).first;
      ++blocks_;
    }
    std::vector<Copy>& copies = b->second;
    const size_t before = copies.size();
    std::erase_if(copies, [&](const Copy& c) { return replace || c.session == session; });
    if (copies.size() >= kCopiesPerBlock) copies.erase(copies.begin());
    copies.push_back(Copy{session, frames[i].frame, frames[i].tag, lengths[i]});
    copies_ += copies.size();
    copies_ -= before;
    ++stats_.recorded;
    if (lengths[i] < block_size) break;  // the file ends there
  }
  return true;
}

std::vector<std::pair<uint64_t, Copy>> HolderDirectory::Find(const FileId& f,
                                                             uint64_t block_size, uint64_t first,
                                                             size_t count, uint64_t reader) const {
  std::vector<std::pair<uint64_t, Copy>> out;
  std::lock_guard lock(mu_);
  auto it = files_.find(f);
  if (it == files_.end() || it->second.block_size != block_size) return out;
  for (uint64_t i = first; i < first + count; ++i) {
    auto b = it->second.blocks.find(i);
    if (b == it->second.blocks.end()) break;
    const Copy* pick = nullptr;
    for (auto c = b->second.rbegin(); c != b->second.rend(); ++c) {
      if (c->session != reader) {
        pick = &*c;
        break;
      }
    }
    if (pick == nullptr) break;
    out.emplace_back(i, *pick);
    if (pick->length < block_size) break;
  }
  stats_.found += out.size();
  return out;
}

auto HolderDirectory::Evict(const FileId& f, uint64_t session, uint64_t block_size,
                            uint64_t index, uint32_t frame, uint64_t tag) -> Evicted {
  std::lock_guard lock(mu_);
  ++stats_.evicted;
  Evicted out;
  auto it = files_.find(f);
  if (it == files_.end() || it->second.block_size != block_size) {
    out.version = VersionLocked(f);
    return out;
  }
  auto b = it->second.blocks.find(index);
  if (b != it->second.blocks.end()) {
    const size_t gone = std::erase_if(b->second, [&](const Copy& c) {
      return c.session == session && c.frame == frame && c.tag == tag;
    });
    copies_ -= gone;
    out.last = gone > 0 && b->second.empty();
    if (b->second.empty()) {
      it->second.blocks.erase(b);
      --blocks_;
    }
  }
  // A record left without blocks goes; the file's version is then floor_,
  // which equals the record's only if nothing was dropped since it was
  // made (so the file did not change): a forward's Record is refused
  // otherwise, never wrongly accepted.
  if (it->second.blocks.empty()) files_.erase(it);
  out.version = VersionLocked(f);
  if (out.last) ++stats_.evicted_last;
  return out;
}

void HolderDirectory::DropFile(const FileId& f) {
  std::lock_guard lock(mu_);
  if (auto it = files_.find(f); it != files_.end()) {
    EraseLocked(it);
    ++stats_.dropped_files;
  }
  // Every fetch in flight of this file (and, conservatively, of any file
  // without a record) is refused at Record: the floor moves past them, and
  // with it the version of this file, now without a record.
  floor_ = next_version_++;
}

void HolderDirectory::DropRange(const FileId& f, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(f);
    if (it != files_.end() && it->second.block_size > 0 && length != UINT64_MAX &&
        offset <= UINT64_MAX - length) {
      FileRec& rec = it->second;
      const uint64_t first = offset / rec.block_size;
      const uint64_t last = (offset + length - 1) / rec.block_size;
      if (last - first < 256) {
        auto drop = [&](std::map<uint64_t, std::vector<Copy>>::iterator b) {
          copies_ -= b->second.size();
          --blocks_;
          rec.blocks.erase(b);
        };
        for (uint64_t i = first; i <= last; ++i) {
          if (auto b = rec.blocks.find(i); b != rec.blocks.end()) drop(b);
        }
        // A short block (the file ended in it) past them: the change may
        // have grown the file past its end.
        if (!rec.blocks.empty()) {
          auto b = std::prev(rec.blocks.end());
          if (std::any_of(b->second.begin(), b->second.end(),
                          [&](const Copy& c) { return c.length < rec.block_size; })) {
            drop(b);
          }
        }
        rec.version = next_version_++;
        ++stats_.dropped_ranges;
        return;
      }
    }
  }
  DropFile(f);
}

void HolderDirectory::DropAll() {
  std::lock_guard lock(mu_);
  files_.clear();
  blocks_ = copies_ = 0;
  floor_ = next_version_++;
}

void HolderDirectory::DropSession(uint64_t session) {
  std::lock_guard lock(mu_);
  for (auto it = files_.begin(); it != files_.end();) {
    auto& blocks = it->second.blocks;
    for (auto b = blocks.begin(); b != blocks.end();) {
      copies_ -= std::erase_if(b->second, [&](const Copy& c) { return c.session == session; });
      if (b->second.empty()) {
        b = blocks.erase(b);
        --blocks_;
      } else {
        ++b;
      }
    }
    it = blocks.empty() ? files_.erase(it) : std::next(it);
  }
  floor_ = next_version_++;  // records erased: their versions must not come back
}

bool HolderDirectory::Empty() const {
  std::lock_guard lock(mu_);
  return files_.empty();
}

auto HolderDirectory::stats() const -> Stats {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.files = files_.size();
  s.blocks = blocks_;
  s.copies = copies_;
  return s;
}

}  // namespace fedfs::coop
