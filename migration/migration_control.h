// The control commands of file moves (control/schema.h): "migrate" moves a
// file and answers when the move is done (the control socket serves one
// request at a time meanwhile); "migrations" shows this node's counters.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "control/dispatcher.h"
#include "migration/migration.h"

namespace fedfs::ns {

// `where` answers the node(s) holding a global path (VfsImpl::Where);
// `migration` may be null (moves off: "migrate" fails, "migrations" says so).
void RegisterMigrationControl(
    control::Dispatcher& dispatcher, Migration* migration,
    std::function<Result<std::vector<std::string>>(const std::string& path)> where,
    std::string node_id);

}  // namespace fedfs::ns
