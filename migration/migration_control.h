// The control commands of file moves (control/schema.h): "migrate" moves a
// file and answers when the move is done (the control socket serves one
// request at a time meanwhile); "migrations" shows this node's counters;
// "rebalance" and "rebalance_plan" run Migration::Rebalance with
// `rebalance` (dry_run for the plan) and answer when it is done.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "control/dispatcher.h"
#include "migration/migration.h"

namespace fedfs::ns {

// This node's writes and creates that went elsewhere for room (the mount's
// counts, VfsImpl::RoomStats).
struct RoomCounts {
  uint64_t writes = 0, creates = 0;
};

// `where` answers the node(s) holding a global path (VfsImpl::Where);
// `migration` may be null (moves off: "migrate" fails, "migrations" says so).
void RegisterMigrationControl(
    control::Dispatcher& dispatcher, Migration* migration,
    std::function<Result<std::vector<std::string>>(const std::string& path)> where,
    std::function<RoomCounts()> room, Migration::RebalanceOptions rebalance,
    std::string node_id);

}  // namespace fedfs::ns
