#include "cluster/membership_control.h"

namespace fedfs::daemon {

control::StatusReply StatusOf(const MembershipView& view,
                              std::chrono::steady_clock::time_point now) {
  control::StatusReply r;
  r.node_id = view.self_id;
  r.epoch = view.epoch;
  for (const auto& [id, m] : view.members) {
    control::MemberRow row;
    row.id = id;
    row.addr = m.addr;
    row.state = MemberStateName(m.state);
    row.incarnation = m.incarnation;
    row.ring_share = view.ring ? view.ring->Share(id) : 0.0;
    row.rtt_us = m.rtt_us;
    row.self = id == view.self_id;
    row.last_heard_ms_ago =
        row.self ? 0
                 : std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_heard).count();
    r.members.push_back(std::move(row));
  }
  return r;
}

control::RingReply RingOf(const MembershipView& view, const std::string& path) {
  control::RingReply r;
  r.path = path;
  r.manager = view.ring ? view.ring->Owner(path) : std::string();
  r.epoch = view.epoch;
  return r;
}

void RegisterMembershipControl(control::Dispatcher& dispatcher, ViewProvider view) {
  dispatcher.Register([view](const control::Request&) -> Result<control::StatusReply> {
    return StatusOf(*view(), std::chrono::steady_clock::now());
  });
  dispatcher.Register([view](const control::Request& q) -> Result<control::RingReply> {
    return RingOf(*view(), q.path);
  });
}

std::string HandleControlRequest(const std::string& line, const MembershipView& view) {
  control::Dispatcher d;
  // The view outlives the dispatcher: an aliasing pointer that owns nothing.
  RegisterMembershipControl(d, [&view] {
    return std::shared_ptr<const MembershipView>(std::shared_ptr<void>(), &view);
  });
  return d.Handle(line);
}

}  // namespace fedfs::daemon
