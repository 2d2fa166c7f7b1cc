// The control commands about dead members' pending operations (control/
// schema.h): "pending" (the records this node holds, the members held dead,
// the counters) and "forget" (a member removed for good; dirops/
// pending_service.h). Their handlers run on the control server's thread,
// which may block ("forget" tells every live node).
#pragma once

#include <string>

#include "control/dispatcher.h"
#include "control/schema.h"

namespace fedfs::ns {

class PendingService;

// Registers "pending" and "forget" on `pending` (must outlive the
// dispatcher's serving; null: neither is served).
void RegisterPendingControl(control::Dispatcher& dispatcher, PendingService* pending,
                            const std::string& self);

}  // namespace fedfs::ns
