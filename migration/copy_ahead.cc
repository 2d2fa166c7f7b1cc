#include "migration/copy_ahead.h"

#include <algorithm>

namespace fedfs::ns {

CopyAhead::CopyAhead(NodeFs* src, Handle h, size_t chunk, int streams)
    : src_(src), h_(h), chunk_(chunk), streams_(static_cast<size_t>(std::max(streams, 1))) {
  for (auto& s : streams_) s.buf.resize(chunk_);
  for (size_t s = 0; s < streams_.size(); ++s) threads_.emplace_back([this, s] { Run(s); });
}

CopyAhead::~CopyAhead() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CopyAhead::Run(size_t s) {
  Stream& st = streams_[s];
  for (uint64_t i = s;; i += streams_.size()) {
    {
      // The stream's buffer is free once the chunk before in it was handed
      // out and the consumer asked for the one after (it no longer reads it).
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (!st.ready && next_ + streams_.size() > i); });
      if (stop_) return;
    }
    Result<size_t> n = src_->Read(h_, i * chunk_, std::span<std::byte>(st.buf));
    const bool last = !n || *n < chunk_;
    {
      std::lock_guard lock(mu_);
      st.index = i;
      st.n = std::move(n);
      st.ready = true;
    }
    cv_.notify_all();
    if (last) return;
  }
}

Result<std::span<const std::byte>> CopyAhead::Next() {
  std::unique_lock lock(mu_);
  const uint64_t i = next_;
  // The previous chunk's stream may read again: its buffer is no longer
  // read by the caller.
  if (i > 0) {
    Stream& prev = streams_[(i - 1) % streams_.size()];
    if (prev.ready && prev.index == i - 1) prev.ready = false;
  }
  next_ = i + 1;
  cv_.notify_all();
  Stream& st = streams_[i % streams_.size()];
  cv_.wait(lock, [&] { return st.ready && st.index == i; });
  if (!st.n) return Err(st.n.error());
  return std::span<const std::byte>(st.buf.data(), *st.n);
}

}  // namespace fedfs::ns
