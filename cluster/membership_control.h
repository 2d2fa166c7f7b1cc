// The control commands about membership and the ring (control/schema.h):
// "status" (this node's view: members, states, epoch, ring shares, RTTs)
// and "ring" (the manager of a path), answered from a MembershipView.
// Pure functions over the view; any thread (the handlers run on the control
// server's).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "cluster/membership.h"
#include "control/dispatcher.h"
#include "control/schema.h"

namespace fedfs::daemon {

// The current view (Membership::Snapshot); never null.
using ViewProvider = std::function<std::shared_ptr<const MembershipView>()>;

// The "status" reply of `view` at time `now` (a member's last_heard_ms_ago
// is measured from it; this node's is 0).
control::StatusReply StatusOf(const MembershipView& view,
                              std::chrono::steady_clock::time_point now);

// The "ring" reply: the manager of `path` (normalised) in `view`.
control::RingReply RingOf(const MembershipView& view, const std::string& path);

// Registers "status" and "ring", each answered from a fresh `view()`.
void RegisterMembershipControl(control::Dispatcher& dispatcher, ViewProvider view);

// Answers one request line from `view` alone, as a dispatcher with only
// RegisterMembershipControl's handlers does: untrusted bytes, answered with
// one JSON object, {"error": ...} for anything malformed or not about
// membership; never throws or crashes.
std::string HandleControlRequest(const std::string& line, const MembershipView& view);

}  // namespace fedfs::daemon
