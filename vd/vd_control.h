// The control commands about virtual directories (control/schema.h):
// "conflicts" (the name conflicts of a directory, asked of its manager) and
// "dt" (this node's directory table and its manager-side coherence
// counters). Their handlers run on the control server's thread, which may
// block ("conflicts" waits for the manager's answer).
#pragma once

#include <string>

#include "control/dispatcher.h"
#include "control/schema.h"

namespace fedfs::ns {

class VdService;

// The "dt" reply of `vds`, this node being `self`.
control::DtReply DtStatus(const VdService& vds, const std::string& self);

// Registers "conflicts" and "dt" on `vds` (must outlive the dispatcher's
// serving; null: neither is served).
void RegisterVdControl(control::Dispatcher& dispatcher, VdService* vds, const std::string& self);

}  // namespace fedfs::ns
