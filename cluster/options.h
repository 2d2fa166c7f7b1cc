// Options of the cluster part: the ring and membership (cluster/ring.h,
// cluster/membership.h). Plain structs with their defaults next to each
// field, like fedfsd/options.h, which gathers them into DaemonOptions
// (fedfsd/config.h fills them from the YAML file; MembershipOptionsFrom
// derives MembershipOptions); docs/config.md documents every field.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fedfs::daemon {

using Millis = std::chrono::milliseconds;

// Consistent-hash ring (cluster/ring.h).
struct RingOptions {
  // Virtual nodes (ring points) per member. 256 keeps every member's share
  // within a few percent of 1/N for tens of members.
  uint32_t vnodes = 256;
};

// Membership (cluster/membership.h).
struct MembershipOptions {
  // This node's id: [A-Za-z0-9_-]{1,64}, stable across restarts.
  std::string node_id;
  // The address peers use to reach this node ("host:port"), as returned by
  // the transport's Listen.
  std::string advertise_addr;
  // Seed addresses tried in order at start until one answers the join.
  std::vector<std::string> seeds;
  // Interval between two heartbeat rounds (all-to-all).
  Millis heartbeat_interval{200};
  // A member with no successful exchange for this long is marked dead.
  // Must be greater than heartbeat_interval.
  Millis failure_timeout{1500};
  // Deadline of a join call (heartbeats use min(rpc_timeout, failure_timeout)).
  Millis rpc_timeout{2000};
  // Longest pause between two rounds of join attempts over the seed list.
  Millis join_backoff_max{5000};
  RingOptions ring;
  // This node's node_tag (1..65534), announced to every member; 0 announces
  // none (tests that do not care).
  uint16_t node_tag = 0;
};

}  // namespace fedfs::daemon
